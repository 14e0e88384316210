"""The backward pass on the critical path (``analyze/depgraph.py``'s backward edges).

PyTorch runs a GPU's backward pass on an autograd engine thread (``pt_autograd_0``) while
the thread that called ``backward()`` blocks and records nothing. HTA 0.6 merges the
engine thread into the forward thread (``_get_bwd_tid``: the one thread with ``autograd``
ops, ``_get_fwd_tid``: the one with ``forward`` ops or annotations; the call stacks of the
two walked as one thread), so its path goes from the forward pass through the backward
functions into the optimizer. Without an edge between the threads the path left the
backward pass out: 118.460 ms of the A100 NCCL trace's 219.505 ms step #5, HTA 0.6 188.910
ms. The numbers of HTA 0.6 here are HTA 0.6.0 run from its source with
``CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE=1`` (``critical_path_analysis(rank,
"ProfilerStep", instance)``, the path's edge weights summed), pandas 3.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.frames import column
from polyprof.analyze.longest_path import longest_path
from polyprof.derive import cache

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"
A100 = KINETO / "a100_nccl_rank0.json.gz"


def _graph(t, number: int, **kw):
    numbers, starts, ends = step_windows(t)
    k = numbers.tolist().index(number)
    return depgraph.build(t, int(starts[k]), int(ends[k]), **kw)


def _thread_of(t, name: str) -> int:
    (tr,) = [x.id for x in t.tracks if x.kind == "thread" and name in x.name]
    return int(cache.threads(t)[tr])


def test_a100_step_runs_through_the_backward_pass():
    """Must-show: step #5's path goes from the main thread's forward pass into the autograd
    thread's backward functions and back into the optimizer; 189.996 ms of 219.505 ms
    (118.460 ms before, HTA 0.6 188.910 ms: its whole-µs times, below)."""
    t = polyprof.load(A100)
    main, engine = _thread_of(t, "pt_main_thread"), _thread_of(t, "pt_autograd_0")
    ctx = depgraph.context(t)
    assert ctx.backward_callers == {engine: main}  # by the 543 fwdbwd flows
    before = _graph(t, 5, backward=False)
    g = _graph(t, 5)
    assert longest_path(before).length == 118_460_124
    p = longest_path(g)
    assert p.length == 189_995_701
    names = t.names()
    threads = cache.threads(t)[np.asarray(t.events["track"])[g.rows]]
    # one backward call in the step: into its first function, out of its last into the optimizer
    new = np.flatnonzero((g.etype == depgraph.DEPENDENCY) & (threads[g.src >> 1] != threads[g.dst >> 1]))
    assert len(new) == 2
    into, out = sorted(new.tolist(), key=lambda e: int(g.time[g.dst[e]]))
    assert names[g.rows[g.dst[into] >> 1]] == "autograd::engine::evaluate_function: DivBackward1"
    assert names[g.rows[g.src[into] >> 1]] == "aten::ones_like" and g.src[into] % 2 == 1
    assert names[g.rows[g.dst[out] >> 1]] == "aten::_foreach_mul_" and g.dst[out] % 2 == 0
    assert not g.weight[new].any()
    assert {into, out} <= set(p.edges.tolist())
    on = np.zeros(len(g.rows), np.int64)
    owned = g.owner[p.edges]
    np.add.at(on, owned[owned >= 0], g.weight[p.edges][owned >= 0])
    assert on[threads == engine].sum() > 80_000_000  # the backward functions' host time
    # the summary's table says the same
    cp = critical_path(t, max_events=None)
    assert set(column(cp, "path_ns")[column(cp, "step") == 5].tolist()) == {189_995_701}


def _hta_times(t) -> None:
    """HTA's times of a nanosecond trace (``trace_parser.round_down_time_stamps``): each
    event's start rounded up and its end down to whole microseconds."""
    ev = t.events
    s = np.asarray(ev["start_ns"], np.int64)
    e = s + np.asarray(ev["dur_ns"], np.int64)
    s2 = -((-s) // 1000) * 1000
    ev["start_ns"][:] = s2
    ev["dur_ns"][:] = np.maximum((e // 1000) * 1000 - s2, 0)


@pytest.mark.parametrize("name, hta06", [
    ("a100_nccl_rank0.json.gz", {4: 190_909_000, 5: 188_910_000}),  # forward thread by fwdbwd flows
    ("sampled_rank0.json.gz", {551: 301_476_000}),  # no flows: by its `forward` ops, as HTA
    ("sampled_rank1.json.gz", {551: 304_041_000}),
])
def test_path_equals_hta06_on_its_times(name, hta06):
    """On HTA's whole-µs times, HTA's graph with the backward edges (``stream_order=False``)
    is HTA 0.6's path to the µs on every step HTA analyses (it drops the last): the merged
    threads and these edges make one chain. (The sampled traces are in µs already; on the
    A100 trace the ns times give 1.086 ms more, HTA's rounding shortens every event.) HTA
    0.5, without the merge: 101.398 ms on the A100 step #5, 267.581 ms on sampled_rank0."""
    t = polyprof.load(KINETO / name)
    _hta_times(t)
    for number, want in hta06.items():
        assert longest_path(_graph(t, number, stream_order=False)).length == want
        assert longest_path(_graph(t, number, stream_order=False, backward=False)).length < want


def test_caller_by_flows_where_htas_name_rule_finds_none():
    """The MI250 trace's autograd thread gets its caller from its 4 fwdbwd flows; the trace
    names nothing `forward`, so HTA 0.6 merges nothing there (7.448 ms, as 0.5). With the
    edges step #1's path is 8.582 ms of its 9.199 ms."""
    t = polyprof.load(KINETO / "mi250_rocm_minitoy.json.gz")
    ctx = depgraph.context(t)
    assert ctx.backward_callers == {_thread_of(t, "pt_autograd_0"): _thread_of(t, "python3")}
    assert longest_path(_graph(t, 1, backward=False)).length == 7_452_353
    assert longest_path(_graph(t, 1)).length == 8_581_804


def _kineto(tmp_path: Path, ops: list[tuple[int, str, float, float]], flows: list[tuple[int, int]]) -> Path:
    """A Kineto trace of CPU ops (tid, name, ts µs, dur µs) in one ProfilerStep, with
    fwdbwd flows between ops (by index)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0,
               "dur": 1000.0, "args": {}}]
    for tid, name, ts, dur in ops:
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                       "args": {}})
    for k, (a, b) in enumerate(flows):
        for ph, i in (("s", a), ("f", b)):
            tid, _, ts, _ = ops[i]
            events.append({"ph": ph, "id": k + 1, "pid": 1, "tid": tid, "ts": ts, "cat": "fwdbwd", "name": "fwdbwd",
                           **({"bp": "e"} if ph == "f" else {})})
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return path


def test_each_backward_call_and_a_caller_that_does_not_block(tmp_path):
    """Two backward calls in one step (gradient accumulation): each gets its pair of
    edges, and the path runs through both; the engine's call that overlaps a call of the
    caller (the caller not blocked in ``backward()``) gets none."""
    ef = "autograd::engine::evaluate_function: "
    ops = [(1, "aten::mm", 10, 50),          # 0 forward 1
           (2, ef + "MmBackward0", 70, 100),  # 1 backward 1
           (2, ef + "AccumulateGrad", 175, 20),  # 2
           (1, "aten::mm", 200, 50),         # 3 forward 2
           (2, ef + "MmBackward0", 260, 100),  # 4 backward 2
           (1, "aten::add_", 370, 10),       # 5 optimizer
           (2, ef + "MmBackward0", 372, 5)]  # 6 overlaps the caller's aten::add_
    t = polyprof.load(_kineto(tmp_path, ops, [(0, 1), (3, 4)]))
    ctx = depgraph.context(t)
    main, engine = ctx.backward_callers.popitem()
    ctx._backward = None
    names, start = t.names(), np.asarray(t.events["start_ns"], np.int64)
    g = _graph(t, 1)
    threads = cache.threads(t)[np.asarray(t.events["track"])[g.rows]]
    cross = np.flatnonzero(threads[g.src >> 1] != threads[g.dst >> 1])
    pairs = sorted((int(start[g.rows[g.src[e] >> 1]]) // 1000, int(g.src[e] % 2),
                    int(start[g.rows[g.dst[e] >> 1]]) // 1000) for e in cross.tolist())
    # (source call's start µs, source node is its end, destination call's start µs)
    assert pairs == [(10, 1, 70), (175, 1, 200), (200, 1, 260), (260, 1, 370)]
    assert all(names[g.rows[g.src[e] >> 1]] != ef + "MmBackward0" or start[g.rows[g.src[e] >> 1]] != 372_000
               for e in cross.tolist())
    p = longest_path(g)
    assert p.length == (50 + 100 + 20 + 50 + 100 + 10) * 1000  # every call but the overlapping one (5)
    assert longest_path(_graph(t, 1, backward=False)).length == 225_000  # the engine thread's own chain
