"""A step's critical path against the step's end (``depgraph.build``): a host call that
starts in the step and ends after it counts up to the step's end only; only the device
work the step launched runs on past it. XLA's CPU worker threads keep a
``ThunkExecutor::Execute`` region open for milliseconds after its last op (a Flax nnx
program on JAX CPU: one region a step crossing the step's end by 0.3 to 3.6 ms, no op
inside it after the end), and the path ran along it: 17 of 19 steps had a path longer
than the step ("critical path 4.32 ms of the step's 5.43 ms" where the median step was
2.76 ms)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import critical_path as cp
from polyprof.analyze.critical_path_track import TRACK, with_critical_path
from polyprof.analyze.frames import column
from polyprof.ranks.critical_path import job_critical_path

US = 1_000  # ns


def _ev(cat: str, name: str, tid: int, ts: float, dur: float, pid: int = 1, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path: Path, kernel: bool = False) -> polyprof.Trace:
    """Two touching steps of 1000 µs. Main thread: a 200 µs op in each. Worker thread 2:
    ``A`` (200-400) and ``B`` from 500 to 2600, into the next step and past it, with a
    20 µs child ``C`` at its start (a region with one op, then idle). Thread 3: ``D``
    (1000-1500), starting at step 1's end, which is step 2's start. ``kernel``: a
    launch in step 1 whose kernel runs past the step's end."""
    evs = [_ev("user_annotation", "ProfilerStep#1", 1, 0, 1000), _ev("user_annotation", "ProfilerStep#2", 1, 1000, 1000),
           _ev("cpu_op", "dispatch", 1, 100, 200), _ev("cpu_op", "dispatch", 1, 1100, 200),
           _ev("cpu_op", "A", 2, 200, 200), _ev("cpu_op", "B", 2, 500, 2100), _ev("cpu_op", "C", 2, 500, 20),
           _ev("cpu_op", "D", 3, 1000, 500)]
    if kernel:
        evs += [_ev("cuda_runtime", "cudaLaunchKernel", 1, 900, 10, correlation=7),
                _ev("kernel", "k", 7, 950, 850, pid=0, correlation=7, stream=7, device=0)]
    path = tmp_path / ("gpu.json.gz" if kernel else "host.json.gz")
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": evs}, f)
    return polyprof.load(path)


def _rows(table: object, step: int) -> dict[str, dict[str, int]]:
    """name -> its ``on_path_ns``, ``slack_ns``, ``path_ns``, ``span_ns`` in ``step``."""
    m = np.asarray(column(table, "step")) == step
    names = column(table, "name")[m].tolist()
    cols = {c: np.asarray(column(table, c), np.int64)[m].tolist() for c in ("on_path_ns", "slack_ns", "path_ns", "span_ns")}
    return {n: {c: v[i] for c, v in cols.items()} for i, n in enumerate(names)}


@pytest.mark.parametrize("graph", [False, True], ids=["nesting", "graph"])
def test_host_calls_are_cut_at_the_step_end(tmp_path, monkeypatch, graph):
    """Step 1's path is thread 2's chain up to the step's end: A 200 µs, then B from 500
    to 1000 (C 20 of it): 700 µs of the 1000 µs step (before: 2300 µs, B's 2100 whole,
    and the step's span 2600 µs). D, starting at the step's end, is step 2's alone (it
    was in both). The nesting's shortcut and the graph give the same table."""
    t = _trace(tmp_path)
    if graph:  # the graph decides (as it does where the calls do not nest)
        monkeypatch.setattr(cp, "_host_only", lambda *a: None)
    table = cp.critical_path(t)
    one, two = _rows(table, 1), _rows(table, 2)
    assert {r["path_ns"] for r in one.values()} == {700 * US}
    assert {r["span_ns"] for r in one.values()} == {1000 * US}
    assert sorted(one) == ["A", "B", "C", "dispatch"] and sorted(two) == ["D", "dispatch"]
    assert {n: r["on_path_ns"] for n, r in one.items()} == {"A": 200 * US, "B": 480 * US, "C": 20 * US, "dispatch": 0}
    assert {n: r["slack_ns"] for n, r in one.items()} == {"A": 0, "B": 0, "C": 0, "dispatch": 500 * US}
    assert {r["path_ns"] for r in two.values()} == {500 * US} and {r["span_ns"] for r in two.values()} == {500 * US}
    assert {n: r["slack_ns"] for n, r in two.items()} == {"D": 0, "dispatch": 300 * US}
    _, starts, ends = cp.step_windows(t)
    path = np.asarray(column(table, "path_ns"), np.int64)
    step = np.asarray(column(table, "step"), np.int64)
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist()), start=1):
        assert path[step == k].max() <= e - s  # never longer than the step


def test_the_job_path_and_the_track_cut_the_same(tmp_path):
    """``polyprof critical-path`` of the one trace (``job_critical_path``) gives the
    summary's path and span per step, and the "critical path" track's slices of step 1
    sum to its 700 µs and end by the step's end."""
    t = _trace(tmp_path)
    job = job_critical_path({0: t})
    step = np.asarray(column(job, "step"), np.int64)
    path = np.asarray(column(job, "path_ns"), np.int64)
    span = np.asarray(column(job, "span_ns"), np.int64)
    assert [(int(path[step == k][0]), int(span[step == k][0])) for k in (0, 1)] == [(700 * US, 1000 * US),
                                                                                  (500 * US, 500 * US)]
    out = with_critical_path(t)
    track = next(x.id for x in out.tracks if x.name == TRACK)
    rows = np.flatnonzero(np.asarray(out.events["track"]) == track)
    s = np.asarray(out.events["start_ns"], np.int64)[rows]
    d = np.asarray(out.events["dur_ns"], np.int64)[rows]
    first = s < 1000 * US
    assert int(d[first].sum()) == 700 * US and int((s + d)[first].max()) == 1000 * US


def test_only_device_work_runs_past_the_step_end(tmp_path):
    """A kernel launched at 900 µs runs from 950 to 1800 µs, past step 1's end: the path
    follows it (the first op's 200 µs, the 50 µs launch delay, the kernel's 850 µs: 1100
    µs of the 1000 µs step, its span to the kernel's end 1800 µs), while thread 2's B
    still counts up to the step's end only (700 µs: 400 µs of slack). Before, B counted
    whole: a path of 2300 µs along it, a span of 2600 µs; HTA's window does the same."""
    table = cp.critical_path(_trace(tmp_path, kernel=True))
    one = _rows(table, 1)
    assert {r["path_ns"] for r in one.values()} == {1100 * US}
    assert {r["span_ns"] for r in one.values()} == {1800 * US}
    assert one["k"]["on_path_ns"] == 850 * US and one["k"]["slack_ns"] == 0
    assert {n: one[n]["slack_ns"] for n in ("A", "B", "C")} == {"A": 400 * US, "B": 400 * US, "C": 400 * US}
    assert "D" not in one and "D" in _rows(table, 2)


def test_a_sync_call_crossing_the_step_end_ends_with_what_it_waits_for(tmp_path):
    """``cudaDeviceSynchronize`` from 200 µs, waiting on a kernel that ends at 1500 µs,
    steps touching at 1000: cut at the step's end, the sync edge from the kernel's end ran
    back in time (the longest path then falls to Kahn's order). A call waiting on device
    work ends when it does: every edge of the step's graph runs forward in time."""
    from polyprof.analyze.depgraph import build

    evs = [_ev("user_annotation", "ProfilerStep#1", 1, 0, 1000), _ev("user_annotation", "ProfilerStep#2", 1, 1000, 1000),
           _ev("cpu_op", "fwd", 1, 50, 40), _ev("cuda_runtime", "cudaLaunchKernel", 1, 100, 10, correlation=7),
           _ev("kernel", "k", 7, 150, 1350, pid=0, correlation=7, stream=7, device=0),
           _ev("cuda_runtime", "cudaDeviceSynchronize", 1, 200, 1300, correlation=8),
           _ev("cuda_sync", "Context Sync", -1, 1500, 1, pid=0, correlation=8, stream=-1, device=0,
               cuda_sync_kind="Context Sync"),
           {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}}]
    path = tmp_path / "sync.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": evs}, f)
    t = polyprof.load(path)
    g = build(t, 0, 1000 * US)
    assert (g.time[g.dst] >= g.time[g.src]).all()
    names = t.names(g.rows).tolist()
    assert g.time[2 * names.index("cudaDeviceSynchronize") + 1] == 1500 * US  # not cut at 1000
    step = _rows(cp.critical_path(t), 1)
    assert step["k"]["path_ns"] <= step["k"]["span_ns"] == 1500 * US
