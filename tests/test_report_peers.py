"""The HTML report of traces other producers wrote (tests/data/peers, JAX XSpaces), opened
in headless Chromium over the DevTools protocol: its numbers are those of ``summary
--json``, every lane draws spans that do not cross, a plane's counters sit under its
one heading, processes are named, slices that never ended are marked."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from polyprof.formats.detect import load
from polyprof.report.html import write
from polyprof.report.tables import build
from polyprof.report.timeline import Part, timeline_data
from polyprof.trace import keys

from analysis.browser import chromium

DATA = Path(__file__).parent / "data"
JAX_CPU = DATA / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb"
JAX_H200 = DATA / "h200" / "jax_train_step_h200.xplane.pb"
CHROME = DATA / "peers" / "chromium" / "chromium_startup_toplevel.json.gz"
PERFETTO = DATA / "peers" / "perfetto_trace_builder" / "clock_counters.pftrace"
READY = "document.documentElement.getAttribute('data-tl-ready')"
needs_chromium = pytest.mark.skipif(chromium() is None, reason="needs chromium")


def _events(d: dict) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(start, duration, name) of the timeline's events by position, in ns from t0."""
    raw = zlib.decompress(base64.b64decode(d["blob"]))
    types = {"u2": "<u2", "i4": "<i4", "f8": "<f8"}
    c = {x["name"]: np.frombuffer(raw, types[x["dtype"]], x["length"], x["offset"]) for x in d["layout"]}
    start = np.cumsum(c["start"].astype(np.int64)) * d["quantum"]
    return start, c["dur"].astype(np.int64) * d["quantum"], [d["names"][i] for i in c["name"]]


def _fmt_ns(v: float, digits: int) -> str:
    """The page's fmtNs (3 digits in the tables and overview, 4 in the timeline)."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:#.{digits}g} {unit}".replace(". ", " ")
    return f"{round(v)} ns"


@pytest.mark.parametrize("path", [JAX_CPU, JAX_H200])
def test_spans_that_cross_do_not_share_a_lane(path):
    """JAX's step marker "train" starts 0.8 µs before the profiler's __init__ call ends
    and holds PjitFunction: counted as open at its start, the call put it one lane down,
    on the lane of the calls inside it, drawn over them (a click on it chose them)."""
    d = timeline_data([Part("", build(load(path)).trace)])
    start, dur, names = _events(d)
    for t in d["tracks"]:
        for lo, hi in zip(t["lanes"][:-1], t["lanes"][1:]):
            s, e = start[lo:hi], start[lo:hi] + np.maximum(dur[lo:hi], 1)
            # sorted by start: no span overlaps the next by more than half the shorter one
            d_ = e - s
            assert not (2 * (e[:-1] - s[1:]) > np.minimum(d_[:-1], d_[1:])).any(), t["label"]
    py = next(t for t in d["tracks"] if t["label"].startswith("python"))
    lane_of = {}
    for k, (lo, hi) in enumerate(zip(py["lanes"][:-1], py["lanes"][1:])):
        for i in range(lo, hi):
            lane_of.setdefault(names[i], k)
    assert lane_of["train"] < lane_of[next(n for n in lane_of if n.startswith("PjitFunction"))]


def test_processes_name_their_planes_and_unended_slices_are_listed():
    trace = load(CHROME)
    d = timeline_data([Part("", trace)])
    groups = {t["group"] for t in d["tracks"]}
    assert {"/host:CPU (Browser)", "/host:CPU:16011 (Renderer)", "/host:CPU:15957 (GPU Process)"} <= groups
    # the slices that never ended (B without E): their page positions, each ending at the trace's end
    start, dur, names = _events(d)
    cut = trace.stats[keys.INCOMPLETE]
    assert len(d["open"]) == int((np.asarray(cut.values) != 0).sum()) == 17
    assert (start[d["open"]] + dur[d["open"]] == d["span_ns"]).all()
    assert sorted(names[i] for i in d["open"]) == sorted(trace.names()[cut.rows].tolist())
    # one plane of one process (Kineto's python3.10 on host and device) keeps its name alone
    d = timeline_data([Part("", load(DATA / "traces" / "kineto" / "a100_alexnet_small.json.gz"))])
    assert {t["group"] for t in d["tracks"]} == {"/host:CPU", "/device:GPU:0"}


@needs_chromium
def test_counters_under_their_plane_and_unended_slices_in_chromium(tmp_path):
    import cdp

    page = cdp.Page(chromium())
    try:
        # Perfetto's two processes, each with a counter: one heading each (they were
        # repeated after the last track for the counters), counters drawn as steps
        page.open(write(load(PERFETTO), tmp_path / "p.html"), READY)
        assert page.eval("window.__timeline.heads()") == ["alpha", "beta"]
        paths = page.eval("[].map.call(document.querySelectorAll('#counter-charts path.series'), "
                          "function (p) { return p.getAttribute('d'); })")
        assert len(paths) == 2 and all("H" in p and "V" in p and "L" not in p for p in paths), paths
        assert page.eval("document.getElementById('counter-charts').innerText").count("NaN") == 0
        assert page.eval("window.__errors.length") == 0
        # Chrome's slices that never ended: their details say so
        trace = load(CHROME)
        page.open(write(trace, tmp_path / "c.html"), READY)
        pos = page.eval("JSON.parse(document.getElementById('tl-data').textContent).open[0]")
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        page.eval(f"window.__timeline.select({pos}, true)")
        text = page.eval("document.getElementById('tl-details').innerText")
        assert "never ended in the trace" in text and "incomplete" in text, text
        assert "(Renderer)" in " ".join(page.eval("window.__timeline.heads()"))
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


@needs_chromium
def test_jax_gpu_report_shows_the_numbers_of_summary_json(tmp_path):
    """JAX on an H200 (XSpace): the overview (events, spans, steps, MFU), the first rows
    of the ops and kernels tables and the memory peak read as ``summary --json`` gives
    them; a click on the "train" step shows its name and duration; search finds it."""

    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(JAX_H200)], capture_output=True,
                       text=True, timeout=300)
    js = json.loads(p.stdout)
    ov, T = js["overview"], js["tables"]
    out = tmp_path / "r.html"
    page, kv = _report_overview(JAX_H200, out)
    try:
        assert kv["events"] == str(ov["events"]) == "358"
        assert kv["trace span"] == _fmt_ns(ov["trace_span_ns"], 3)
        assert kv["analysed span"].startswith(f"{_fmt_ns(ov['analysed_span_ns'], 3)} ({ov['steps']} steps")
        mfu = next(r for r in T["mfu"]["records"] if r["step"] == -1)
        assert kv["model FLOPs utilisation"].startswith(f"{mfu['mfu_pct']:.1f}% of {mfu['peak_flops_per_s'] / 1e12:.3g}")
        assert f"{mfu['flops_per_s'] / 1e12:.3g} TFLOP/s" in kv["model FLOPs utilisation"]

        def first_row(table: str) -> dict[str, str]:
            return page.eval(f"(function () {{ var t = document.querySelector('#{table} table'), o = {{}};"
                             "[].forEach.call(t.rows[0].cells, function (c, i) { o[c.textContent] = "
                             "t.rows[1].cells[i].textContent; }); return o; })()")

        for table, key in (("ops-table", "op_stats"), ("kernels-table", "kernel_breakdown")):
            row, want = first_row(table), T[key]["records"][0]
            assert row["name"] == want["name"] and row["count"] == str(want["count"]), (row, want)
            assert row["total"] == _fmt_ns(want["total_ns"], 3), (row, want)
        peak = T["memory_peak"]["records"][0]
        row = first_row("memory-peak-table")
        assert row["device"] == peak["device"] and row["peak bytes"] == f"{peak['peak_bytes'] / 2 ** 20:.1f} MiB"
        assert page.eval("document.querySelectorAll('#steps-table tbody tr').length") == T["step_stats"]["rows"]
        # the timeline: a track per thread and stream, named, and the memory counter
        tl = page.eval("JSON.parse(document.getElementById('tl-data').textContent)")
        assert {t["label"] for t in tl["tracks"]} >= {"python3", "Stream #14(Compute)", "critical path"}
        assert [c["label"] for c in tl["counters"]] == ["memory /device:GPU:0 · GPU_0_bfc"]
        assert max(tl["counters"][0]["values"]) == peak["peak_bytes"]
        # a click on the first analysed step's "train" event: its name and duration
        trace = load(JAX_H200)
        train = np.flatnonzero(trace.names() == "train")
        k = int(train[np.argmin(np.abs(trace.events["start_ns"][train] - ov["analysed_span_start_ns"]))])
        pos = page.eval(f"window.__timeline.find('train', {int(trace.events['start_ns'][k]) - tl['t0']})")
        page.eval("document.getElementById('timeline-card').scrollIntoView()")
        page.eval(f"window.__timeline.show({pos})")
        at = page.eval(f"window.__timeline.where({pos})")
        page.mouse("mousePressed", at["x"], at["y"], button="left", clickCount=1)
        page.mouse("mouseReleased", at["x"], at["y"], button="left", clickCount=1)
        text = page.eval("document.getElementById('tl-details').innerText")
        assert text.startswith("name\ntrain\n") and _fmt_ns(int(trace.events["dur_ns"][k]), 4) in text, text
        # search finds every "train" event; W zooms in
        page.eval("var s = document.getElementById('tl-search'); s.value = ''; s.focus()")
        page.call("Input.insertText", text="train")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13)
        assert page.eval("document.getElementById('tl-found').textContent") == f"match 1 of {len(train)}"
        page.eval("window.__timeline.zoom(1e9)")
        r0 = page.eval("window.__timeline.range()")
        page.eval("document.getElementById('tl-canvas').focus()")
        page.key("w")
        r1 = page.eval("window.__timeline.range()")
        assert r1[1] - r1[0] == pytest.approx(0.8 * (r0[1] - r0[0]))
        assert out.stat().st_size < 400 * tl["events"] + 120_000  # the page: about 60 KB of code, then per event
        assert page.eval("window.__errors.length") == 0
    finally:
        page.close()


def test_the_critical_path_track_goes_under_the_busiest_host_plane():
    """An XSpace's first host plane is ``/host:metadata`` (no events): the track went there,
    first on the timeline, away from the threads it follows."""
    from polyprof.analyze.critical_path_track import with_critical_path

    t = with_critical_path(load(JAX_CPU))
    track = next(x for x in t.tracks if x.name == "critical path")
    assert next(p.name for p in t.planes if p.id == track.plane) == "/host:CPU"


def test_a_diff_of_one_trace_a_side_prints_no_p_value():
    """One trace a side: no test ran, and the verdict said "p=nan"."""
    from polyprof.analyze.diff import diff

    a = load(DATA / "peers" / "tracelens" / "jax_conv_minimal_legacy.xplane.pb")
    b = load(DATA / "peers" / "tracelens" / "jax_conv_minimal_08.xplane.pb")
    text = "\n".join(diff(a, b).verdict)
    assert "p=nan" not in text and "1 vs 1 traces" in text


@needs_chromium
def test_the_overview_says_how_much_of_the_span_was_recorded(tmp_path):
    """One process's two files, 4.05 ms apart, no steps: the page said "analysed span 5.95
    ms (no steps: whole trace)" under a window line that leaves the time between them
    out; it says how much of the span was recorded, as the terminal summary does."""

    for i, t0 in enumerate((1e6, 1e6 + 5000.0)):
        ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": t0 + k * 100.0, "dur": 50.0}
              for k in range(10)]
        (tmp_path / f"vm_7.{i}.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "host_name": "vm",
                                                                      "traceEvents": ev}))
    page, kv = _report_overview(tmp_path, tmp_path / "r.html")
    page.close()
    assert kv["analysed span"] == "5.95 ms (no steps, 1.90 ms of it recorded)", kv


def _report_overview(trace: Path, out: Path):
    """``polyprof report`` of ``trace`` opened in Chromium (no script error): the page and
    its overview's key-value pairs."""
    import cdp

    subprocess.run([sys.executable, "-m", "polyprof", "report", str(trace), "-o", str(out)], check=True,
                   capture_output=True, timeout=300)
    page = cdp.Page(chromium())
    page.open(out, READY)
    assert page.eval("window.__errors.length") == 0
    kv = page.eval("[].map.call(document.querySelectorAll('#overview-kv > *'), function (e) { return e.textContent; })")
    return page, dict(zip(kv[::2], kv[1::2]))
