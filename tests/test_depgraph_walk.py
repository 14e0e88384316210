"""The critical path's walk of the host calls (``analyze/depgraph.py``): where the calls
nest, their depth-first tour without a sort (``_nested_walk``) is exactly the walk by
time (ends before starts at one instant, deeper ends first, shallower starts first)
that the graph takes otherwise; where they do not, it declines."""

from __future__ import annotations

import numpy as np
import pytest

from polyprof.analyze import depgraph
from polyprof.analyze.nesting import parents, parents_and_after
from polyprof.trace.sorting import lexsort


def _by_time(thread: np.ndarray, start: np.ndarray, end: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The walk as the graph sorts it (``_thread_edges`` without ``_nested_walk``)."""
    n = len(start)
    node = np.concatenate([2 * np.arange(n), 2 * np.arange(n) + 1])
    ev, is_end = node >> 1, (node & 1).astype(bool)
    t = np.where(is_end, end[ev], start[ev])
    sub = np.where(is_end, -depth[ev], depth[ev])
    return node[lexsort((sub - sub.min(initial=0), (~is_end).astype(np.int64), t, thread[ev]))]


def _forest(rng: np.random.Generator, lo: int, hi: int, depth: int, out: list[tuple[int, int]]) -> None:
    """Spans nested inside [lo, hi]: children that touch each other and their parent's
    ends, copies of their parent's extent, and gaps."""
    t = lo
    while t < hi and rng.random() < 0.8:
        a = t + int(rng.integers(0, 3))
        b = min(hi, a + 1 + int(rng.integers(0, 12)))
        if a >= b:
            break
        out.append((a, b))
        if rng.random() < 0.15:
            out.append((a, b))  # the same extent twice: one nests in the other
        if depth < 6:
            _forest(rng, a, b, depth + 1, out)
        t = b


@pytest.mark.parametrize("seed", range(60))
def test_nested_walk_is_the_walk_by_time(seed: int):
    rng = np.random.default_rng(900 + seed)
    spans, threads = [], []
    for th in rng.choice([3, 7, 11, 1 << 40], int(rng.integers(1, 4)), replace=False).tolist():
        mine: list[tuple[int, int]] = []
        _forest(rng, int(rng.integers(0, 5)), 80, 0, mine)
        spans += mine
        threads += [th] * len(mine)
    if not spans:
        return
    perm = rng.permutation(len(spans))  # rows in any order
    start = np.array([spans[i][0] for i in perm], np.int64)
    end = np.array([spans[i][1] for i in perm], np.int64)
    thread = np.array([threads[i] for i in perm], np.int64)
    order, d_sorted, p_sorted = parents(thread, start, end)
    depth = np.zeros(len(start), np.int64)
    depth[order] = d_sorted
    walked = depgraph._nested_walk(order, d_sorted, p_sorted, thread[order], start[order], end[order])
    assert walked is not None
    assert walked.tolist() == _by_time(thread, start, end, depth).tolist()
    after = parents_and_after(thread, start, end)[3]  # each subtree's end from the C loop, where built
    if after is not None:
        with_after = depgraph._nested_walk(order, d_sorted, p_sorted, thread[order], start[order], end[order], after)
        assert with_after is not None and with_after.tolist() == walked.tolist()


def test_calls_that_do_not_nest_are_sorted():
    thread = np.zeros(3, np.int64)
    start, end = np.array([0, 2, 4], np.int64), np.array([10, 5, 12], np.int64)  # the third outlasts the first
    order, d_sorted, p_sorted = parents(thread, start, end)
    assert depgraph._nested_walk(order, d_sorted, p_sorted, thread[order], start[order], end[order]) is None


def test_one_context_per_trace_left_clear_between_steps():
    """``depgraph.context``: one Context per trace, shared by every step's ``build``; the
    row -> graph event map it lends each step is clear again after it, so each step's
    graph is the graph a fresh Context gives."""
    from pathlib import Path

    import polyprof
    from polyprof.analyze.critical_path import step_windows

    t = polyprof.load(Path(__file__).parent / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz")
    ctx = depgraph.context(t)
    assert depgraph.context(t) is ctx
    _, starts, ends = step_windows(t)
    assert len(starts) > 1
    for a, b in zip(starts.tolist(), ends.tolist()):
        shared, fresh = depgraph.build(t, a, b), depgraph.build(t, a, b, depgraph.Context(t))
        for name, x, y in zip(shared._fields, shared, fresh):
            assert np.array_equal(x, y), name
        assert (ctx.graph_index == -1).all()


def test_a_trace_is_freed_by_its_last_reference_after_its_critical_path():
    """The memoised Context refers to its trace weakly: no cycle keeps a trace (and its
    columns) alive for the collector once the critical path, its track and a step's graph
    are made (ranks' workers read many traces in one process)."""
    import gc
    import weakref
    from pathlib import Path

    import polyprof
    from polyprof.analyze.critical_path import critical_path
    from polyprof.analyze.critical_path_track import with_critical_path

    t = polyprof.load(Path(__file__).parent / "data" / "traces" / "kineto" / "a100_alexnet_small.json.gz")
    assert len(critical_path(t)) and with_critical_path(t) is not t
    ref = weakref.ref(t)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del t
        assert ref() is None
    finally:
        if enabled:
            gc.enable()
