"""The critical path of a window of host calls alone (``longest_path.forest_times``):
the same table as the dependency graph's longest path gives, on real traces without
launches (the TPU sample, gloo ranks) and on random nestings of ops and runtime calls
with waiting calls, identical spans, touching siblings, threads of equal length (which
the graph decides) and calls that do not nest (likewise)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import critical_path as cp
from polyprof.trace.builder import TraceBuilder

DATA = Path(__file__).parent / "data" / "traces"
NAMES = [("op_a", "cpu_op"), ("op_b", "cpu_op"), ("cudaLaunchKernel", "cuda_runtime"),
         ("cudaStreamSynchronize", "cuda_runtime"), ("cudaMemcpy", "cuda_runtime")]


def _both(trace: polyprof.Trace, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, list[bool]]:
    """The table through the host-only path where it decides, and through the graph."""
    used: list[bool] = []
    real = cp._host_only

    def spy(*a: object) -> object:
        out = real(*a)  # type: ignore[arg-type]
        used.append(out is not None)
        return out

    monkeypatch.setattr(cp, "_host_only", spy)
    fast = cp.critical_path(trace)
    monkeypatch.setattr(cp, "_host_only", lambda *a: None)
    graph = cp.critical_path(trace)
    monkeypatch.setattr(cp, "_host_only", real)
    return fast, graph, used


def _same(a: object, b: object) -> None:
    assert list(a.columns) == list(b.columns)  # type: ignore[attr-defined]
    for c in a.columns:  # type: ignore[attr-defined]
        x, y = np.asarray(a[c]), np.asarray(b[c])  # type: ignore[index]
        assert x.dtype == y.dtype, c
        np.testing.assert_array_equal(x, y, err_msg=c)


@pytest.mark.parametrize("path, nesting", [(DATA / "xspace" / "tpu_inference_2.xplane.pb", True),
                                           (DATA / "gloo" / "gloo_rank0.json.gz", False)],
                         ids=lambda p: p.name.split(".")[0] if isinstance(p, Path) else str(p))
def test_real_host_only_traces_take_the_nesting_and_match_the_graph(path, nesting, monkeypatch):
    """(The gloo rank's collectives start once their c10d op enqueued them on another
    thread: no longer one chain per thread, so the graph decides its windows.)"""
    fast, graph, used = _both(polyprof.load(path), monkeypatch)
    assert (bool(used) and all(used)) == nesting
    assert len(fast) > 10
    _same(fast, graph)


def _nest(rng: np.random.Generator, t0: int, t1: int, depth: int, out: list[tuple[int, int, int]]) -> None:
    """Spans nested inside [t0, t1): siblings disjoint or touching, some as long as their parent."""
    t = t0
    while t < t1 and depth < 5:
        if t == t0 and rng.random() < 0.15:  # an only child as long as its parent
            s, e = t0, t1
        else:
            s = t + int(rng.choice([0, 0, 1, 3, 10]))
            e = min(t1, s + int(rng.integers(1, 40)))
        if s >= e:
            break
        out.append((s, e, int(rng.integers(len(NAMES)))))
        if rng.random() < 0.6:
            _nest(rng, s, e, depth + 1, out)
        if (s, e) == (t0, t1):
            break
        t = e


def _trace(seed: int, threads: int, overlap: bool, tie: bool) -> polyprof.Trace:
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    plane = b.plane("/host:CPU", "host")
    spans: list[list[tuple[int, int, int]]] = []
    for _ in range(threads):
        mine: list[tuple[int, int, int]] = []
        t = int(rng.integers(0, 20))
        for _ in range(int(rng.integers(1, 6))):
            e = t + int(rng.integers(1, 80))
            mine.append((t, e, int(rng.integers(len(NAMES)))))
            _nest(rng, t, e, 1, mine)
            t = e + int(rng.choice([0, 0, 5]))
        spans.append(mine)
    if tie:  # a second thread exactly like the first: two chains of the longest length
        spans.append(list(spans[0]))
    if overlap:  # a call that outlasts its parent
        s, e, _ = spans[-1][0]
        spans[-1].append((s + 1, e + 7, 0))
    for tid, mine in enumerate(spans):
        track = b.track(plane, f"thread {tid}", "thread", tid=tid + 1)
        for s, e, k in mine:
            name, cat = NAMES[k]
            b.event(track, name, s, e - s, cat)
    return b.build()


@pytest.mark.parametrize("seed", range(40))
def test_random_nestings_match_the_graph(seed, monkeypatch):
    overlap, tie = seed % 5 == 3, seed % 7 == 4
    fast, graph, used = _both(_trace(seed, 1 if tie else 1 + seed % 4, overlap, tie), monkeypatch)
    _same(fast, graph)
    if not overlap and not tie:
        assert used == [True]
    if overlap or tie:  # the graph decides
        assert used == [False]


def test_op_stats_and_the_critical_path_nest_the_calls_once():
    """A trace without steps or launches: op_stats and the critical path nest the same
    host calls, and the nesting is made once (``analyze/nesting.py``)."""
    from polyprof.analyze import nesting
    from polyprof.analyze.ops import op_stats

    t = polyprof.load(DATA / "xspace" / "tpu_inference_2.xplane.pb")
    made = []
    real = nesting.parents

    def counting(*a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        made.append(len(a[0]))
        return real(*a)

    nesting.parents = counting  # (of_rows calls it through the module)
    try:
        op_stats(t)
        cp.critical_path(t)
    finally:
        nesting.parents = real
    assert made == [18339]
