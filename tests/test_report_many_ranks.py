"""The job's output read at hundreds of ranks: findings' evidence, the critical-path
command's step lines, and what it says of a trace it cannot follow."""

from __future__ import annotations

import json

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import pytest

from polyprof.analyze.finding import Finding
from polyprof.analyze.frames import frame

DATA = Path(__file__).parent / "data"


def _cli(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=300,
                          env=env)


# ------------------------------------------------------------------ findings' evidence
def test_a_finding_merged_over_128_ranks_shows_its_ranks_and_planes_in_short():
    """Before: every merged finding of a 128-rank job printed ``ranks=[0, 1, ..., 127]``
    whole (8 wrapped lines a finding) and its 128 planes likewise. Now the ranks as runs
    and the planes as first, last and count; the finding's evidence keeps the lists."""
    from polyprof.ranks.report import _rank_findings
    from polyprof.report.terminal import _finding_lines

    def idle(r: int) -> Finding:
        return Finding("host_bound", f"/device:GPU:{r % 8} idle", "high", f"/device:GPU:{r % 8}",
                       {"idle_pct": 50.0 + r % 7, "steps": [3, 4]})

    ranks = [r for r in range(128) if r != 64]
    merged = _rank_findings({r: SimpleNamespace(findings=[idle(r)]) for r in ranks})
    assert len(merged) == 1
    ev = merged[0].evidence
    assert ev["ranks"] == ranks and len(ev["planes"]) == 127  # the JSON's lists, whole
    text = "\n".join(p.plain for p in _finding_lines(merged))
    evidence = next(line for line in text.splitlines() if line.startswith("evidence: "))
    assert "ranks=0-63, 65-127 (127)," in evidence, evidence
    assert "planes=/device:GPU:0, ..., /device:GPU:7 (127)," in evidence, evidence
    assert "steps=[3, 4]" in evidence  # a short list stays as it is
    assert "1, 2, 3" not in evidence and len(evidence) < 200, evidence


# ------------------------------------------------------------------ critical-path's step lines
def test_critical_path_step_lines_fit_80_columns():
    """Before: each step's line was 100-130 characters whatever the terminal's width."""
    files = sorted(str(p) for p in (DATA / "traces" / "gloo_ddp").glob("late.rank*.pt.trace.json.gz"))
    r = _cli("critical-path", *files, "-n", "3")
    assert r.returncode == 0, r.stderr
    heads = [line for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(heads) == 7  # the steps the summary analyses: all but the first (warm-up)
    assert all(len(line) <= 80 for line in heads), heads
    whole = r.stdout.replace("\n  ", " ")  # a header and its continuation as one line
    # (66.7 ms before the DDP's broadcasts bound rank 1's clock one way only: ranks/align.py)
    assert "step 3 (#3): critical path 65.6 ms of the step's 66.6 ms (start to end of its work); " \
           "rank 1 holds 88% of it (rank 0 12%)" in whole, whole


def _path_table(shares: dict[int, int], length: int) -> object:
    ranks = sorted(shares)
    n = len(ranks)
    return frame({"step": np.zeros(n, np.int64), "rank": np.array(ranks, np.int64),
                  "name": np.array([f"op{r}" for r in ranks], object), "kind": np.full(n, "kernel", object),
                  "start_ns": np.zeros(n, np.int64), "dur_ns": np.zeros(n, np.int64),
                  "on_path_ns": np.array([shares[r] for r in ranks], np.int64),
                  "path_ns": np.full(n, length, np.int64), "span_ns": np.full(n, length, np.int64)})


def test_critical_path_step_line_names_the_few_ranks_that_hold_the_path():
    """A step of 256 ranks: rank 77 holds 90%, three ranks 3-4% (in any order), 200
    ranks a little under 0.01% each, the rest nothing. Before: all 255 others listed
    ("rank 0 0%", ...: 3,000 characters). Now the three, then the rest counted."""
    from polyprof.cli.critical_path import _print

    length = 10_000_000
    shares = {r: 0 for r in range(256)}
    shares.update({77: 9_000_000, 5: 300_000, 200: 400_000, 9: 350_000})
    for r in range(10, 210):
        if r not in (77, 200):
            shares[r] = 900
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        os.environ["COLUMNS"], old = "80", os.environ.get("COLUMNS")
        try:
            _print(_path_table(shares, length), [], [0], 3, np.array([10]))
        finally:
            os.environ.pop("COLUMNS") if old is None else os.environ.update(COLUMNS=old)
    lines = buf.getvalue().splitlines()
    head = " ".join(x.strip() for x in lines[:next(i for i, x in enumerate(lines) if "on path" in x)])
    assert head.endswith("rank 77 holds 90% of it (rank 200 4%, rank 9 4%, rank 5 3%, +198 ranks under 1%)"), head
    assert " 0%" not in head and all(len(x) <= 80 for x in lines[:2]), lines


# ------------------------------------------------------------------ a trace it cannot follow
def test_critical_path_of_a_trace_without_ops_says_what_it_has(tmp_path):
    """A Chrome trace of an application's own spans: no framework op, runtime call or
    device activity. Before: "no critical path (no events in the step)", which is
    false. Now: what the path follows, and what the trace has instead."""
    ev = [{"ph": "X", "cat": "app", "name": f"load {i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
          for i in range(142)]
    (tmp_path / "app.json").write_text(json.dumps(ev))
    r = _cli("critical-path", str(tmp_path / "app.json"), columns=200)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("no critical path (the path follows framework ops, runtime calls and the "
                                "device work they launch): the trace has none of them, only 142 other events")


# ------------------------------------------------------------------ the job report's memory
def _dlrm_job() -> tuple[object, object]:
    import polyprof

    ts = polyprof.load_ranks(sorted((DATA / "peers" / "param").glob("worker*.pt.trace.json.gz")))
    return ts, ts.analyze("serial")


def test_the_timeline_of_a_big_job_holds_one_rank_at_a_time(monkeypatch):
    """Before: ``report DIR`` read every rank for the timeline first and held them all
    (with what each analysis kept on them) until the page was written: 2 MB a rank of
    PARAM's DLRM copies, 583 MB at 256 ranks against 135 MB for ``summary``. Now a job
    above the joined critical path's size is read one rank at a time as the timeline
    takes it (at most 2 traces alive: the one drawn and the rank in detail), and the
    page's timeline is the same."""
    import gc

    from polyprof.report import timeline, timeline_job
    from polyprof.report.timeline import Part, timeline_data
    from polyprof.trace.core import Trace

    monkeypatch.setattr(timeline_job, "MAX_CRITICAL_PATH_EVENTS", 1000)  # 8 x 2,529 events: above it
    ts, job = _dlrm_job()
    loads, seen = [0], []

    def load(r: int) -> object:
        loads[0] += 1
        return ts.load(r)

    lanes = timeline._lanes
    gc.collect()  # traces other tests left alive (a cached report) are not this test's
    earlier = [o for o in gc.get_objects() if isinstance(o, Trace)]
    known = {id(o) for o in earlier}

    def counting(*a: object) -> object:  # called once per part drawn
        gc.collect()
        seen.append((loads[0], sum(isinstance(o, Trace) and id(o) not in known for o in gc.get_objects())))
        return lanes(*a)

    monkeypatch.setattr(timeline, "_lanes", counting)
    ref = ts.load(job.ranks[0])
    parts, marks = timeline_job.job_parts(job, load, [(job.ranks[0], ref)])
    got = timeline_data(parts, marks)
    monkeypatch.setattr(timeline, "_lanes", lanes)
    assert [n for n, _ in seen] == list(range(8)), seen  # each rank read as it is drawn
    # alive: the rank in detail, the one drawn and its copy with its critical path
    assert max(t for _, t in seen) <= 3, seen
    off = timeline_job.offsets(job)
    whole = timeline_data([Part(f"rank {r}", ts.load(r), off[r]) for r in job.ranks], marks)
    assert got["events"] == whole["events"] > 8 * 2529  # with each rank's own critical path
    assert got == whole


def test_argument_cells_let_go_while_reading_give_the_same_page(monkeypatch):
    """The argument cells of the shortest events are let go while the ranks are read
    (past twice the cells sent): the cells sent are those of reading them all, ties of
    durations at the cut included."""
    from polyprof.report import timeline
    from polyprof.report.timeline import Part, timeline_data

    ts, job = _dlrm_job()
    parts = [Part(f"rank {r}", ts.load(r), 1000 * r, critical_path=False) for r in job.ranks]
    for cells in (50, 997, 5000):
        monkeypatch.setattr(timeline, "MAX_ARG_CELLS", cells)
        monkeypatch.setattr(timeline, "_ARG_CELLS_HELD", 10 ** 9, raising=False)
        whole = timeline_data(parts)["args"]
        monkeypatch.setattr(timeline, "_ARG_CELLS_HELD", 2 * cells, raising=False)
        cut = timeline_data(parts)["args"]
        assert cut["keys"] == whole["keys"] and cut["cols"] == whole["cols"], cells
        assert 0 < cut["cells"] == whole["cells"] <= cells, (cut["cells"], whole["cells"], cells)


# ------------------------------------------------------------------ the job page at hundreds of ranks
def _job_page(tmp_path: Path, n: int, late: int, slow: tuple[int, ...]) -> Path:
    """A job page of ``n`` ranks alike but ``late`` (others waited 2 s on it; 70% idle)
    and ``slow`` (10% longer steps), written from these tables alone (the timeline and
    the tables below are one small trace's)."""
    from polyprof.formats.detect import load
    from polyprof.report.html import write

    trace = load(DATA / "traces" / "kineto" / "cpu_only_rank34.json.gz")
    r = np.arange(n)
    mean = np.where(np.isin(r, slow), 22e6, 20e6)
    idle = np.where(r == late, 70.0, 38.0)
    tables = {
        "rank_overview": frame({"rank": r, "file": np.array([f"rank-{x}.json.gz" for x in r], object),
                                "steps": np.ones(n, np.int64), "step_mean_ns": mean, "step_median_ns": mean,
                                "step_max_ns": mean, "compute_pct": np.full(n, 6.0), "non_compute_pct": 94.0 - idle,
                                "idle_pct": idle, "communication_ns": np.full(n, 11_000_000),
                                "collectives": np.full(n, 8), "events": np.full(n, 2529)}),
        "rank_alignment": frame({"rank": r, "offset_ns": np.zeros(n, np.int64), "bound_ns": np.zeros(n),
                                 "method": np.full(n, "collectives", object), "collectives": np.full(n, 8),
                                 "aligned": np.ones(n, bool), "message": np.full(n, "", object)}),
        "stragglers": frame({"rank": r, "late_ns": np.where(r == late, 8_000_000, 0),
                             "last_count": np.where(r == late, 6, 0),
                             "caused_wait_ns": np.where(r == late, 2_000_000_000, 0),
                             "waited_ns": np.where(r == late, 0, 8_000_000), "collectives": np.full(n, 8)}),
    }
    for name in ("straggler_collectives", "collective_stats", "transfers"):
        tables[name] = frame({"rank": np.zeros(0, np.int64)})
    # the job's straggler finding (ranks/report.py) names the rank the page marks
    named = Finding("straggler", f"rank {late} is the straggler", "high", "", {"rank": late})
    job = SimpleNamespace(tables=tables, findings=[named], ranks=list(range(n)),
                          overview={"ranks": n, "reference_rank": 0, "aligned_ranks": n, "max_bound_ns": 0.0,
                                    "window": "every step"})
    return write(trace, tmp_path / f"job{n}.html", ranks=job)


def _chart(page: object) -> dict:
    return page.eval("""(function () {
      var c = document.getElementById('ranks-chart'), strip = document.getElementById('ranks-strip');
      var bars = c.querySelector('svg:not(#ranks-strip)');
      var labels = Array.prototype.map.call(bars.querySelectorAll('text'), function (t) { return t.textContent; })
        .filter(function (t) { return t.indexOf('rank ') === 0; });
      var rest = document.getElementById('ranks-rest');
      return {height: c.getBoundingClientRect().height, labels: labels,
              red: Array.prototype.filter.call(bars.querySelectorAll('text'), function (t) {
                return t.getAttribute('fill') === '#c0392b'; }).map(function (t) { return t.textContent; }),
              strip: strip ? strip.querySelectorAll('rect').length : 0,
              marked: strip ? Array.prototype.map.call(strip.querySelectorAll('text'), function (t) {
                return t.textContent; }) : [],
              rest: rest ? rest.textContent : null, errors: window.__errors.length};
    })()""")


@contextlib.contextmanager
def _report_page(files: list[str], out: Path) -> Iterator[object]:
    """``polyprof report`` of the ranks' files to ``out``, open in chromium once its ranks
    chart is drawn."""
    import cdp

    from analysis.browser import chromium

    r = _cli("report", *files, "-o", str(out), "-j", "1")
    assert r.returncode == 0, r.stderr
    page = cdp.Page(chromium())
    try:
        page.open(out, "document.getElementById('ranks-chart').children.length")
        yield page
    finally:
        page.close()


def test_the_ranks_side_by_side_at_300_ranks_draw_the_outliers_first(tmp_path):
    """Before: one bar per rank, in rank order (300 bars: 8,500 px before the tables), the
    late rank 123 drawn like the others at its place. Now every rank in a strip (one
    column per rank and metric, the straggler marked), and bars for the straggler first,
    the ranks farthest from the median (5 and 250: 10% longer steps) and one typical rank;
    the others summarised in one line. Six ranks: a bar each, in rank order, as before."""
    import cdp

    from analysis.browser import chromium

    if chromium() is None:
        pytest.skip("needs chromium")
    big, small = _job_page(tmp_path, 300, 123, (5, 250)), _job_page(tmp_path, 6, 4, ())
    page = cdp.Page(chromium())
    try:
        page.open(big, "document.getElementById('ranks-chart').children.length")
        got = _chart(page)
        assert got["errors"] == 0
        assert got["labels"] == ["rank 123 · straggler", "rank 5", "rank 250", "rank 0 · typical"], got["labels"]
        assert got["red"] == ["rank 123 · straggler"]
        assert got["strip"] == 4 * 300 + 1 and "rank 123" in got["marked"]  # + the straggler's outline
        assert got["rest"].startswith("296 more ranks not drawn as bars (each within 1% of the median rank): "
                                      "step mean 20.0 ms, compute 6.0%, idle 38.0%"), got["rest"]
        assert got["height"] < 400, got["height"]
        page.open(small, "document.getElementById('ranks-chart').children.length")
        got = _chart(page)
        assert got["labels"] == ["rank 0", "rank 1", "rank 2", "rank 3", "rank 4 · straggler", "rank 5"]
        assert got["strip"] == 0 and got["rest"] is None and got["errors"] == 0
    finally:
        page.close()


@pytest.mark.parametrize("run, named", [("late", [1]), ("even", [])])
def test_the_page_marks_as_straggler_only_the_rank_the_finding_names(tmp_path, run, named):
    """A real 2-rank DDP job on gloo (tests/data/traces/gloo_ddp). Before: the page
    labelled (in red) every rank that caused at least 20% of the top rank's waiting, so
    ``late`` (rank 1 slept 50 ms in steps 3-5; rank 0 caused 24% of rank 1's waiting
    the other way) had both ranks "straggler" while the finding and tables name rank 1,
    and ``even`` (no straggler finding) had both too. Now the page marks the ranks the
    job's straggler finding names, and only those."""
    import polyprof
    from analysis.browser import chromium

    if chromium() is None:
        pytest.skip("needs chromium")
    files = sorted(str(p) for p in (DATA / "traces" / "gloo_ddp").glob(f"{run}.rank*.pt.trace.json.gz"))
    rep = polyprof.load_ranks(files).analyze("serial")
    assert sorted(f.evidence["rank"] for f in rep.findings if f.id == "straggler") == named
    out = tmp_path / f"{run}.html"
    with _report_page(files, out) as page:
        got = _chart(page)
    assert got["errors"] == 0
    assert got["labels"] == [f"rank {x}" + (" · straggler" if x in named else "") for x in (0, 1)], got["labels"]
    assert got["red"] == [f"rank {x} · straggler" for x in named], got["red"]


def test_a_job_without_device_activity_draws_no_device_bars_of_0_ns(tmp_path):
    """A CPU job (tests/data/traces/gloo_ddp: 2 ranks on gloo, no device) has no compute,
    non-compute or idle shares (the terminal's "-"). Before: the ranks' bars were those
    three series, each "0 ns" (an empty chart). Now each rank's bar is its step mean, the
    legend saying there is no device activity; the straggler stays marked."""
    from analysis.browser import chromium

    if chromium() is None:
        pytest.skip("needs chromium")
    files = sorted(str(p) for p in (DATA / "traces" / "gloo_ddp").glob("late.rank*.pt.trace.json.gz"))
    out = tmp_path / "cpu.html"
    with _report_page(files, out) as page:
        got = _chart(page)
        bars = page.eval("""(function () {
          var bars = document.querySelector('#ranks-chart svg:not(#ranks-strip)');
          return {titles: Array.prototype.map.call(bars.querySelectorAll('rect > title'), function (t) {
                    return t.textContent; }),
                  texts: Array.prototype.map.call(bars.querySelectorAll('text'), function (t) {
                    return t.textContent; })};
        })()""")
    assert got["errors"] == 0 and got["labels"] == ["rank 0", "rank 1 · straggler"], got
    assert "step mean (no device activity)" in bars["texts"], bars["texts"]
    assert not any(t in bars["texts"] for t in ("compute", "non-compute", "idle")), bars["texts"]
    assert len(bars["titles"]) == 2 and not any(t.endswith(": 0 ns") for t in bars["titles"]), bars["titles"]
