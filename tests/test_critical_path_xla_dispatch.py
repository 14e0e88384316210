"""The critical path where the thread that dispatched an XLA program waits for its run
(``analyze/xla_links.blocking_dispatches``), on real JAX CPU recordings made here.

tests/data/traces/jax_cpu_block (an audit's recording, steps 1 and 2): in step 1 the Python
thread's ``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice`` lasted from before
the run started until after its last op ended (the thread descheduled while the pool and
worker threads ran the ops on the machine's two cores): the path ran along that call
(989.7 µs of a 1,040.3 µs path) and every op had nothing on it. In step 2 the same call
returned before the run ended (an asynchronous dispatch) and the ops held the path.
tests/data/traces/jax_cpu_job/one_process (4 CPU devices): the multi-device dispatch
``CommonPjRtLoadedExecutable::Execute (jit_step)`` outlasted its four runs in steps 0 to
2 and held their paths the same way (541.5 µs of 556.2 µs in step 1); it launches them
one by one and waits only once the last has started.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.depgraph_context import context

DATA = Path(__file__).parent / "data" / "traces"
BLOCK = DATA / "jax_cpu_block" / "steps_1_2.xplane.pb.gz"
FOUR = DATA / "jax_cpu_job" / "one_process" / "four_devices.xplane.pb.gz"
SINGLE = "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice"


def _step(cp, k: int) -> dict[str, np.ndarray]:
    m = cp[cp["step"] == k]
    return {c: np.asarray(m[c]) for c in m.columns}


def _outlasts(trace, k: int) -> bool:
    """Whether step ``k``'s dispatch on the Python thread started by its run's first op
    and ended after its last (from the trace itself)."""
    ctx = context(trace)
    number, lo, hi = step_windows(trace)
    lo, hi = int(lo[number == k][0]), int(hi[number == k][0])
    rows = np.flatnonzero((ctx.start >= lo) & (ctx.start < hi))
    ops = rows[ctx.xla_op[rows]]
    disp = rows[ctx.names[rows] == trace.string_id(SINGLE)]
    assert len(disp) == 1 and len(ops)
    return bool(ctx.start[disp[0]] <= ctx.start[ops].min() and ctx.end[disp[0]] >= ctx.end[ops].max())


def test_a_dispatch_that_outlasts_its_run_waits_for_it() -> None:
    """Step 1: the ops hold the path (84%: the rest is the Python thread's work before and
    after the call, and the pool thread's runtime calls), each of the three longest ops
    all its time; the dispatch, a wait, holds its time before the run started (its work,
    then its launch of the run: 29.7 µs) and after the run ended (its thread, descheduled,
    resumed in it 75.3 µs after the run's last op, into the start of its ``Handle input
    event recording``), never its time during the run. The path (1,031.3 µs) is the
    Python thread's calls up to the launch, the ops' chain, then the thread's return,
    shorter than the step's 1,362.7 µs with its device work. (897.7 µs before the dispatch
    led into its run, ``xla_links.launched_runs``, and the thread's resumption inside the
    dispatch weighed nothing; 1,040.3 µs before the dispatch waited, the call 989.7 µs of
    it.)"""
    trace = polyprof.load(BLOCK)
    assert _outlasts(trace, 1)
    s = _step(critical_path(trace), 1)
    path = int(s["path_ns"][0])
    assert path == 1_031_296 and path <= int(s["span_ns"][0])
    disp = np.flatnonzero(s["name"] == SINGLE)
    ops = s["kind"] == "kernel"
    d, first, last = disp[0], s["start_ns"][ops].min(), (s["start_ns"] + s["dur_ns"])[ops].max()
    outside = int(first - s["start_ns"][d]) + int(s["start_ns"][d] + s["dur_ns"][d] - last)
    assert len(disp) == 1 and 100_000 < int(s["on_path_ns"][d]) <= outside
    assert int(s["on_path_ns"][ops].sum()) > 0.8 * path
    for name in ("jit_f/dot", "jit_f/convolution", "jit_f/ynn_fusion"):
        i = np.flatnonzero(s["name"] == name)
        assert len(i) == 1 and s["on_path_ns"][i[0]] == s["dur_ns"][i[0]] > 150_000, name


def test_a_dispatch_that_returns_before_its_run_ends_stays_work() -> None:
    """Step 2 (the dispatch returned 676 µs before the run's last op ended): the path is
    the Python thread's calls up to the run's launch, then the ops' chain (865.9 µs; the
    ops' chain alone, 817.1 µs, before the dispatch led into its run)."""
    trace = polyprof.load(BLOCK)
    assert not _outlasts(trace, 2)
    s = _step(critical_path(trace), 2)
    assert int(s["path_ns"][0]) == 865_884
    assert int(s["on_path_ns"][s["kind"] == "kernel"].sum()) == 753_160


def test_a_multi_device_dispatch_waits_for_its_runs() -> None:
    """Four CPU devices: in steps 0 to 2 the Python thread's ``Execute (jit_step)`` (and
    its ``Wait for LaunchOnDevice completion``) outlasted the four runs and held 95 to 98%
    of the path (876.6, 556.2, 512.1 µs paths). Now it holds at most its time before the
    last of its runs started (launching them one by one: 34.3, 7.6 and 6.2 µs), never its
    wait, and the runs' ops and their all-reduce's rendezvous hold the rest. It leads into
    the runs it launched (``xla_links.launch_edges``): each step's path is 93% of its span
    or more (step 0: 857.7 of 900.7 µs, the Python thread's 110 µs before the runs and its
    return after them on it), steps 3 and 4 (where the dispatch returned first) 446.6 and
    518.6 µs of 450.6 and 526.3 µs (before: 391.5 and 467.7 µs, the Python thread's time
    before the runs off the path; step 0 735.5 µs)."""
    trace = polyprof.load(FOUR)
    ctx = context(trace)
    cp = critical_path(trace)
    number, lo, hi = step_windows(trace)
    device = ctx.stat("device_ordinal")
    for k in range(5):
        s = _step(cp, k)
        path = int(s["path_ns"][0])
        mine = np.array([n.startswith(("CommonPjRtLoadedExecutable::Execute", "Wait for LaunchOnDevice"))
                         for n in s["name"].tolist()]) & (s["track"] == "python")
        rows = np.flatnonzero((ctx.start >= lo[number == k][0]) & (ctx.start < hi[number == k][0]))
        disp = rows[ctx.names[rows] == trace.string_id("CommonPjRtLoadedExecutable::Execute (jit_step)")]
        ops = rows[ctx.xla_op[rows]]
        launched = max(int(ctx.start[ops[device[ops] == d]].min()) for d in range(4))
        assert len(disp) == 1 and int(s["on_path_ns"][mine].sum()) <= launched - int(ctx.start[disp[0]]), k
        assert int(s["on_path_ns"][s["kind"] == "kernel"].sum()) > 0.25 * path, k  # (step 0: 29.5%)
        assert 0.93 * int(s["span_ns"][0]) <= path <= int(s["span_ns"][0]), k
    assert [int(_step(cp, k)["path_ns"][0]) for k in (3, 4)] == [446_632, 518_637]
