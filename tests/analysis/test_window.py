"""The analysed window: which steps every analysis looks at (analyze/window.py).

Checked on the real V100 trace (steps 101-105) against counts made here straight from
the event table, not from the analyses under test.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyprof
import polyprof.analyze as A
from polyprof.analyze.window import AUTO, Window, select
from polyprof.derive import cache
from polyprof.errors import PolyprofError, WindowError
from polyprof.report.tables import build
from polyprof.trace.categories import Kind


@pytest.fixture(scope="module")
def v100(kineto_files):
    return polyprof.load(next(p for p in kineto_files if p.name.startswith("v100")))


def test_defaults_leave_every_analysis_as_it_was(v100):
    """``window=None`` is the whole trace; every step (``Window()``) is a window open at
    its start and ending at the last step's: the same tables here but the events', which
    count the events that start by the analysed span's end (not the V100 trace's last
    host records)."""
    from polyprof.analyze.events import analysed_span
    from polyprof.analyze.window import view

    for fn in (A.temporal_breakdown, A.kernel_breakdown, A.op_stats, A.section_stats, A.step_stats,
               A.launch_stats, A.event_stats, A.idle_time_breakdown, A.comm_comp_overlap, A.sync_by_thread):
        assert fn(v100).equals(fn(v100, window=None)), fn.__name__
        if fn is not A.event_stats:
            assert fn(v100).equals(fn(v100, window=Window())), fn.__name__
    _, t1 = analysed_span(view(v100, Window()))
    ev = v100.to_pandas()
    ev = ev[(ev["dur_ns"] > 0) & (ev["start_ns"] < t1)]
    want = ev.groupby(["category", "name"]).size()
    got = A.event_stats(v100, window=Window())
    assert {(c, n): k for c, n, k in zip(got["category"], got["name"], got["count"])} == want.to_dict()
    assert len(ev) < int((v100.events["dur_ns"] > 0).sum())  # the window does leave some out


def test_step_range_counts_what_was_launched_in_it(v100):
    w = Window.parse("102:104")
    steps = cache.steps(v100)
    i = np.flatnonzero(np.isin(steps.number, [102, 103]))
    lo, hi = int(steps.start[i[0]]), int(steps.end[i[-1]])
    assert A.step_stats(v100, window=w)["step"].tolist() == [102, 103]
    # device activity launched in [lo, hi), from the raw events and correlation ids
    ev = v100.to_pandas(stats=["correlation_id"])
    dev = ev[ev["plane"].astype(str).str.startswith("/device:") & ev["category"].isin(
        ["kernel", "gpu_memcpy", "gpu_memset"])]
    host = ev[ev["category"].isin(["cuda_runtime", "cuda_driver"]) & ev["correlation_id"].notna()]
    start_of = dict(zip(host["correlation_id"].astype(int), host["start_ns"]))
    launched = dev["correlation_id"].astype(int).map(start_of)
    want = int(((launched >= lo) & (launched < hi)).sum())
    kb = A.kernel_breakdown(v100, window=w)
    assert int(kb["count"].sum()) == want > 0
    assert len(A.launch_stats(v100, window=w)) == want
    assert int(A.kernel_breakdown(v100)["count"].sum()) == len(dev) > want
    # framework ops that start in the window, an op directly inside one of its own name
    # counted once with it (as torch's key_averages; analyze/ops.py)
    ops = ev[ev["category"] == "cpu_op"].sort_values(["track", "start_ns", "dur_ns"], ascending=[True, True, False])
    inside_same = []
    stack: list[tuple] = []  # (track, end, name) of the open ops
    for tr, st, du, name in zip(ops["track"], ops["start_ns"], ops["dur_ns"], ops["name"]):
        while stack and (stack[-1][0] != tr or stack[-1][1] <= st):
            stack.pop()
        inside_same.append(bool(stack) and stack[-1][2] == name)
        stack.append((tr, st + du, name))
    in_window = (ops["start_ns"] >= lo) & (ops["start_ns"] < hi)
    want_ops = int((in_window & ~np.array(inside_same)).sum())
    assert int(A.op_stats(v100, window=w)["count"].sum()) == want_ops < int(in_window.sum())
    # the span starts at step 102 and the breakdown still adds up
    tb = A.temporal_breakdown(v100, window=w)
    assert (tb["span_start_ns"] == lo).all()
    assert (tb["compute_ns"] + tb["non_compute_ns"] + tb["idle_ns"] == tb["span_ns"]).all()
    assert tb["span_ns"][0] >= hi - lo


def test_skip_first_and_auto(v100):
    assert np.unique(A.step_stats(v100, window=Window(skip_first=2))["step"]).tolist() == [103, 104, 105]
    assert np.unique(A.step_stats(v100, window=AUTO)["step"]).tolist() == [102, 103, 104, 105]
    sel = select(v100, AUTO)
    assert "102-105 of 101-105" in sel.label and "warm-up" in sel.label
    r = build(v100)  # the report's default: without the warm-up step, and it says so
    assert r.overview["window"] == sel.label and r.overview["steps"] == 4
    assert build(v100, None).overview["steps"] == 5


def test_auto_keeps_every_step_of_a_short_trace(kineto_files):
    t = polyprof.load(next(p for p in kineto_files if p.name.startswith("sampled_rank0")))
    assert len(cache.steps(t)) == 2
    sel = select(t, AUTO)
    steps = cache.steps(t)
    assert len(sel.index) == 2 and sel.hi == int(steps.end[-1]) and sel.lo < int(steps.start[0])  # open start
    assert A.temporal_breakdown(t, window=AUTO).equals(A.temporal_breakdown(t))


def test_bad_windows_say_what_and_why(v100, kineto_files):
    with pytest.raises(WindowError, match="selects none.*101-105"):
        A.step_stats(v100, window=Window(start=200))
    with pytest.raises(WindowError, match="expected A:B"):
        Window.parse("two:five")
    with pytest.raises(WindowError, match="skip-first"):
        Window.parse(None, -1)
    no_steps = polyprof.load(next(p for p in kineto_files if p.name.startswith("a100_alexnet")))
    assert not len(cache.steps(no_steps))
    with pytest.raises(PolyprofError, match="no steps"):
        A.kernel_breakdown(no_steps, window=Window.parse("1:3"))
    # span="device" needs no steps: first to last device activity
    tb = A.temporal_breakdown(no_steps, window=Window(span="device"))
    dev = no_steps.rows_of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
    ev = no_steps.events
    assert tb["span_ns"][0] == int((ev["start_ns"] + ev["dur_ns"])[dev].max() - ev["start_ns"][dev].min())


def test_findings_follow_the_window(v100):
    """The findings of a window are computed on its steps: their evidence quotes the
    window's own tables."""
    w = Window.parse("103:")
    tables = {"step_stats": A.step_stats(v100, window=w), "temporal_breakdown": A.temporal_breakdown(v100, window=w)}
    assert A.findings(v100, window=w) == A.findings(v100, tables, window=w)
    assert A.findings(v100) == A.findings(v100, window=None)


def test_step_stats_counts_activity_without_a_launch_apart(v100):
    """Device work whose launch is not in the trace (a sampled or cut trace) is not
    'launched in the step': it is counted apart, in the step it started in."""
    import dataclasses

    from polyprof.trace import keys
    from polyprof.trace.stats import StatColumn, StatTable

    corr = cache.correlation(v100)
    steps = cache.steps(v100)
    ev = v100.events
    lstart = ev["start_ns"][corr.launch]
    launched_in = steps.of(lstart)
    # forget the launch of every 3rd activity of step 102
    drop = np.flatnonzero(launched_in == 1)[::3]
    cid = v100.stats[keys.CORRELATION_ID]
    keep = ~np.isin(cid.rows, corr.device_rows[drop])
    stats = StatTable({k: c for k, c in v100.stats.items() if k != keys.CORRELATION_ID})
    stats[keys.CORRELATION_ID] = StatColumn(cid.rows[keep], cid.values[keep])
    cut = dataclasses.replace(v100, stats=stats, flows={k: v[:0] for k, v in v100.flows.items()})
    before = A.step_stats(v100).to_pandas().set_index("step")
    after = A.step_stats(cut).to_pandas().set_index("step")
    started_in = steps.of(ev["start_ns"][corr.device_rows[drop]])
    for i, n in enumerate(steps.number.tolist()):
        lost = int((launched_in[drop] == i).sum())
        assert after.loc[n, "activities"] == before.loc[n, "activities"] - lost
        assert after.loc[n, "unlaunched_activities"] == int((started_in == i).sum())
    assert after["unlaunched_activities"].sum() == len(drop) > 100


def test_kernel_states_partition_the_span(kineto_files):
    from polyprof.analyze.kernel_states import kernel_state_breakdown

    for f in kineto_files:
        t = polyprof.load(f)
        ks = kernel_state_breakdown(t).to_pandas()
        tb = A.temporal_breakdown(t).to_pandas()
        tb = tb[tb["track_id"] == -1].set_index("plane")
        for plane, g in ks.groupby("plane"):
            assert g["time_ns"].sum() == tb.loc[plane, "span_ns"], f.name
            assert g.loc[g["state"] == "idle", "time_ns"].sum() == tb.loc[plane, "idle_ns"], f.name
            # compute only + compute with anything = the compute-covered time
            assert g.loc[g["state"].str.startswith("compute"), "time_ns"].sum() == tb.loc[plane, "compute_ns"], f.name


def test_export_writes_the_window_the_analyses_count(v100, kineto_files, tmp_path):
    """`polyprof export FILE --steps 102:104`: the written trace, analysed whole, gives
    the numbers of the original analysed on that window (kernels, ops, the device-span
    timeline); its steps are the selected ones; the default writes everything."""
    import subprocess
    import sys

    f = next(p for p in kineto_files if p.name.startswith("v100"))
    out = tmp_path / "w.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(f), "--steps", "102:104", "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "steps 102-103 of 101-105" in r.stderr, r.stderr
    w = polyprof.load(out)
    assert cache.steps(w).number.tolist() == [102, 103]
    win = Window(102, 104)
    # counted straight from the event table: device activity whose launch started in the steps
    steps = cache.steps(v100)
    corr = cache.correlation(v100)
    st = v100.events["start_ns"]
    t = np.where(corr.launch >= 0, st[np.maximum(corr.launch, 0)], st[corr.device_rows])
    want = int(((t >= steps.start[1]) & (t < steps.end[2])).sum())
    assert len(cache.correlation(w).device_rows) == want
    a, b = A.kernel_breakdown(v100, window=win), A.kernel_breakdown(w)
    assert (a["count"].sum(), a["total_ns"].sum()) == (b["count"].sum(), b["total_ns"].sum()) == \
        (want, a["total_ns"].sum())
    a, b = A.op_stats(v100, window=win), A.op_stats(w)
    assert (a["count"].sum(), a["total_ns"].sum()) == (b["count"].sum(), b["total_ns"].sum())
    a = A.temporal_breakdown(v100, window=Window(102, 104, span="device")).to_dicts()[-1]
    b = A.temporal_breakdown(w, window=Window(span="device")).to_dicts()[-1]
    assert (a["span_ns"], a["busy_ns"]) == (b["span_ns"], b["busy_ns"])
    # flows only between kept events, stats still on their events
    assert len(w.flows["src"]) and (w.flows["src"] < w.n_events).all()
    assert (w.stat_dense("correlation_id", -1)[cache.correlation(w).device_rows] >= 0).all()
    r = subprocess.run([sys.executable, "-m", "polyprof", "sql", str(f), "SELECT count(*) AS n FROM events",
                        "--steps", "102:104", "--csv"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "steps 102-103" in r.stderr, r.stderr
    assert int(r.stdout.split()[-1]) == w.n_events  # the same events as the export of the window
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(f), "-o", str(tmp_path / "all.polyprof")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and polyprof.load(tmp_path / "all.polyprof").n_events == v100.n_events
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(f), "--steps", "7:9", "-o",
                        str(tmp_path / "none.polyprof")], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "101-105" in r.stderr


def test_memory_and_counters_follow_the_window():
    """A live torch run (memory on) whose step 0 allocates 16 MB and frees it: over every
    step the peak holds it; with the first step left out the peak, the live allocations
    and the counter samples are those of the later steps only."""
    torch = pytest.importorskip("torch")
    with polyprof.profile(["host", "torch"], memory=True, options={"host": {"sample_interval_s": 0.002}}) as s:
        big = torch.ones(4_000_000)
        time_held = big.sum()
        del big
        polyprof.step()
        keep = []
        for _ in range(3):
            keep.append(torch.ones(50_000))
            _ = time_held + keep[-1].sum()
            import time

            time.sleep(0.01)
            polyprof.step()
    t = s.trace
    steps = cache.steps(t)
    w = Window(skip_first=1)
    whole = A.memory_peak(t).to_dicts()[0]
    win = A.memory_peak(t, window=w).to_dicts()[0]
    assert whole["peak_bytes"] >= 16_000_000 > win["peak_bytes"]
    assert steps.start[1] <= win["peak_ns"] < steps.end[-1]
    assert win["allocations"] < whole["allocations"]
    live = A.memory_at_peak(t, window=w)
    assert len(live) and (live["ts_ns"] >= steps.start[1]).all()
    tl = A.memory_timeline(t, window=w)
    assert len(tl) and ((tl["ts_ns"] >= steps.start[1]) & (tl["ts_ns"] <= steps.end[-1] - 1)).all()
    cs = A.counter_stats(t, window=w).to_pandas().set_index("name")
    whole_cs = A.counter_stats(t).to_pandas().set_index("name")
    rss = cs.loc["process.rss_bytes"]
    assert steps.start[1] <= rss["first_ns"] and rss["last_ns"] < steps.end[-1]
    assert rss["samples"] < whole_cs.loc["process.rss_bytes", "samples"]


def test_a_long_warm_up_and_work_after_the_last_step_are_said(tmp_path):
    """A jitted program's first step compiles (JAX here; torch.compile's took 28.1 s of a
    28.2 s run in the sweep): skipped as warm-up, it was said as any warm-up, so the run's
    biggest cost went unmentioned. The label says its length and share. Work after the
    last step (an evaluation: 274 ms after 17 ms of training in the sweep) was left out
    of the default summary without a word."""
    pytest.importorskip("jax")
    import subprocess
    import sys

    script = tmp_path / "jitted.py"
    script.write_text("import jax, jax.numpy as jnp, polyprof\n"
                      "f = jax.jit(lambda a: jnp.tanh(a @ a).sum())\n"
                      "x = jnp.ones((64, 64))\n"
                      "for _ in range(6):\n"
                      "    f(x).block_until_ready()\n"
                      "    polyprof.step()\n"
                      "import time\n"
                      "with polyprof.section('evaluate'):\n"
                      "    time.sleep(0.2)\n")
    out = tmp_path / "j.polyprof"
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-o",
                        str(out), str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    t = polyprof.load(out)
    took = cache.steps(t).end - cache.steps(t).start
    assert took[0] > 5 * np.median(took[1:])  # the import of jax and the compilation
    label = select(t, AUTO).label
    assert "first step skipped: warm-up (" in label and "x the median step and " in label, label
    assert "of the steps' time: set-up, compilation, caches); --skip-first 0 keeps it" in label
    # the work after the loop is in no step: the window leaves it out, and says so
    assert "of host activity after the last step is in no step: not analysed" in label, label
    assert "evaluate" not in A.section_stats(t, window=AUTO)["name"].tolist()
    # every step, too: up to the last one's end (before, it counted the evaluation, while
    # its analysed span and device breakdown were the steps')
    assert "of host activity after the last step is in no step" in select(t, Window(skip_first=0)).label
    assert "evaluate" not in A.section_stats(t, window=Window(skip_first=0))["name"].tolist()
    assert "evaluate" in A.section_stats(t)["name"].tolist()  # window=None: the whole trace


def test_an_instant_after_the_last_step_is_no_activity():
    """The H200 transformer's host records 6 µs after its last step, and torch's "Record
    Window End" instant 123 ms later: the host's activity is the time its events cover,
    not how far the last of them lies."""
    from pathlib import Path

    from polyprof.analyze.window import host_after

    t = polyprof.load(Path(__file__).resolve().parents[1] / "data" / "h200" / "torch_transformer_h200.json.gz")
    last = int(cache.steps(t).end[-1])
    assert 0 < host_after(t, last) < 10_000
    assert "after the last step" not in select(t, AUTO).label


def test_every_step_counts_the_same_events_in_every_table(tmp_path):
    """Under every step (the default of a 2-step trace), the op and event tables count an
    op begun before the first step (an open start) and neither counts one after the last
    step: before, the events table left out the first and both counted the second."""
    import json

    def x(name, cat, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    ev = [x("aten::before", "cpu_op", 0, 10), x("aten::after", "cpu_op", 400, 10)]
    ev += [x(f"ProfilerStep#{i}", "user_annotation", 100 + 100 * i, 100) for i in range(2)]
    ev += [x("aten::mm", "cpu_op", 110 + 100 * i, 10) for i in range(2)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    t = polyprof.load(path)
    want = {"aten::before": 1, "aten::mm": 2}
    for w in (AUTO, Window(skip_first=0)):
        o, e = A.op_stats(t, window=w), A.event_stats(t, window=w)
        assert dict(zip(o["name"].tolist(), o["count"].tolist())) == want
        assert {n: c for n, c, k in zip(e["name"].tolist(), e["count"].tolist(), e["category"].tolist())
                if k == "cpu_op"} == want


def test_a_first_step_no_slower_than_the_others_is_said_so() -> None:
    """torch.profiler's schedule leaves its warm-up step out of the trace: the first
    recorded step is then an ordinary one (2.49 ms against a median of 6.29 ms in an
    audit's compiled MLP). The default window still skips it, and its label says it took
    no longer than the median step instead of calling it a warm-up."""
    from polyprof.analyze.window import _skipped
    from polyprof.derive.steps import Steps

    start = np.array([0, 3_000_000, 10_000_000, 17_000_000], np.int64)
    took = np.array([2_490_000, 6_290_000, 6_300_000, 6_200_000], np.int64)
    steps = Steps(np.arange(1, 5), start, start + took, np.arange(4), "ProfilerStep")
    words = _skipped(steps)
    assert words.startswith("first step skipped as a warm-up by default, though it took no longer than the "
                            "median step (2.49 ms against 6.29 ms)"), words
    longer = Steps(np.arange(1, 5), start, start + took[[1, 0, 2, 3]], np.arange(4), "ProfilerStep")
    assert _skipped(longer) == "first step skipped: warm-up"
