"""The HTML report's "Memory over time" and "Counters" charts, and the findings' evidence,
as headless Chromium draws them (DevTools protocol, tests/cdp.py).

A recording of ``polyprof run`` (tests/data/corpus/seeds/host_session.polyprof) samples
the process counters before, during and well after the steps the report analyses (the
first step is skipped as warm-up). The Counters table beside the charts counts the
analysed steps' samples only; the charts drew the events' span on their x axis, piled
every sample outside it onto the edges and took their scale and peak from all samples:
"peak 138.9 MiB at 1.15 s" on a "0 ns – 391 ms" axis, a cpu% scale of 143.9 where the
table's max is 0. A two-rank job's "ranks not aligned" finding printed its evidence
``methods`` (a dict) as "[object Object]"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from polyprof.cli import main

from analysis.browser import chromium

DATA = Path(__file__).parent / "data"
SESSION = DATA / "corpus" / "seeds" / "host_session.polyprof"
KINETO = DATA / "traces" / "kineto"
READY = "document.documentElement.getAttribute('data-tl-ready')"
needs_chromium = pytest.mark.skipif(chromium() is None, reason="needs chromium")

#: the charts' texts, by role: the scale's top (x 2, near the top), the axis' two ends
#: (at the bottom) and the peak's label (after its dot)
CHARTS_JS = """(function (host) {
  return [].map.call(document.querySelectorAll('#' + host + ' .memchart'), function (box) {
    var s = box.querySelector('svg'), H = s.viewBox.baseVal.height;
    var texts = [].map.call(s.querySelectorAll(':scope > text'), function (t) {
      return [+t.getAttribute('x'), +t.getAttribute('y'), t.textContent]; });
    var dot = s.querySelector('circle.peak');
    return {label: box.querySelector('.muted').textContent, H: H, texts: texts,
            peak: dot ? [+dot.getAttribute('cx'), +dot.getAttribute('cy')] : null,
            path: s.querySelector('path.series').getAttribute('d')};
  });
})"""


def _fmt_bytes(v: float) -> str:
    """The page's fmtBytes."""
    for unit, scale in (("GiB", 1073741824), ("MiB", 1048576), ("KiB", 1024)):
        if abs(v) >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v:.0f} B"


def _fmt_num(v: float) -> str:
    """The page's default scale label, String(+v.toPrecision(4))."""
    return f"{float(f'{v:.4g}'):g}" if v != int(v) else str(int(v))


def _ns(text: str) -> float:
    """A time the page wrote with fmtNs ("391 ms", "1.15 s", "0 ns"), in ns."""
    value, unit = text.split()
    return float(value) * {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1}[unit]


def _axis(chart: dict) -> tuple[float, float]:
    """The x axis' two ends as the chart writes them (its texts at the bottom)."""
    ends = sorted((x, t) for x, y, t in chart["texts"] if y == chart["H"] - 6)
    return _ns(ends[0][1]), _ns(ends[-1][1])


def _within(t: float, lo: float, hi: float) -> bool:
    """``t`` in [lo, hi], each written to 3 significant digits."""
    return lo * (1 - 5e-3) - 1 <= t <= hi * (1 + 5e-3) + 1


@pytest.fixture(scope="module")
def session_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("charts") / "session.html"
    assert main(["report", str(SESSION), "-o", str(out)]) == 0
    return out


@needs_chromium
def test_charts_draw_the_samples_the_counters_table_counts(session_page):
    import cdp

    page = cdp.Page(chromium())
    try:
        page.open(session_page, READY)
        assert page.eval("window.__errors.length") == 0
        D = page.eval("JSON.parse(document.getElementById('data').textContent)")
        cols = D["counters"]["columns"]
        table = {r[cols.index("name")]: dict(zip(cols, r)) for r in D["counters"]["rows"]}
        # the first step (warm-up) is left out: the table counts a few of the 57 RSS samples
        assert table["process.rss_bytes"]["samples"] < 5 and len(table) == 4
        M = D["memory"]
        for sr in M["series"] + M["counters"]:  # every sample sent lies in the range drawn
            assert all(M["t0"] <= t <= M["t1"] for t in sr["ts"]), sr["label"]

        mem = page.eval(CHARTS_JS + "('memory-charts')")
        assert [c["label"] for c in mem] == ["process RSS"]
        rss = mem[0]
        what = next(t for x, y, t in rss["texts"] if t.startswith("peak "))
        m = re.fullmatch(r"peak (.+) at (.+)", what)
        # the peak is the table's max of process.rss_bytes (was 138.9 MiB, sampled 0.8 s after the window)
        assert m.group(1) == _fmt_bytes(table["process.rss_bytes"]["max"]) == "138.7 MiB", what
        lo, hi = _axis(rss)
        assert _within(_ns(m.group(2)), lo, hi), (what, lo, hi)  # the peak's time is on the axis
        assert 70 <= rss["peak"][0] <= 760 - 12

        ctr = page.eval(CHARTS_JS + "('counter-charts')")
        assert len(ctr) == len(table)
        for c in ctr:
            name = c["label"].split(" · ")[0]
            row = table[name]
            # the scale: from 0 or the lowest sample to the highest, of the samples the table counts
            top, bottom = max(row["max"], 0.0), min(row["min"], 0.0)
            top = bottom + 1 if top == bottom else top
            fmt = _fmt_bytes if name.endswith("_bytes") else _fmt_num
            scale = next(t for x, y, t in c["texts"] if x == 2 and y < 40)
            assert scale == fmt(top), (name, scale, row)
            lo, hi = _axis(c)
            assert hi > lo
            # no point piled on the left edge (samples before the range were drawn at x = 70)
            xs = [float(v) for v in re.findall(r"[MH](-?[\d.]+)", c["path"])]
            assert xs.count(70.0) <= 1, (name, c["path"][:200])
        assert "[object Object]" not in page.eval("document.body.innerText")
    finally:
        page.close()


@needs_chromium
def test_evidence_objects_are_written_as_key_value_pairs(tmp_path):
    """The two sampled ranks of a 128-rank job: rank 1 is aligned by its recorded clock,
    the finding's evidence ``methods`` is {"recorded clock": [1]}."""
    import cdp

    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        (job / f"sampled_rank{r}.json.gz").write_bytes((KINETO / f"sampled_rank{r}.json.gz").read_bytes())
    out = tmp_path / "job.html"
    assert main(["report", str(job), "-o", str(out), "-j", "1"]) == 0
    page = cdp.Page(chromium())
    try:
        page.open(out, READY)
        assert page.eval("window.__errors.length") == 0
        text = page.eval("document.body.innerText")
        assert "[object Object]" not in text
        assert "methods = recorded clock: [1]" in text, re.findall(r"methods = [^\n]*", text)
    finally:
        page.close()
