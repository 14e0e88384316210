"""``derive.intervals.nesting_depth``: the spans open at each start, per track, against a
plain count of them (spans that nest, spans that overlap without nesting, empty spans,
ties, many tracks, and times too far apart for offsets, where keys are ranks)."""

from __future__ import annotations

import numpy as np
import pytest

from polyprof.derive.intervals import nesting_depth


def _counted(track: np.ndarray, start: np.ndarray, end: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Per position of ``order``: the spans of its track earlier in ``order`` still open at
    its start (end after it), counted one by one."""
    out = np.zeros(len(order), np.int64)
    for k, i in enumerate(order.tolist()):
        earlier = order[:k]
        same = earlier[track[earlier] == track[i]]
        out[k] = int((end[same] > start[i]).sum())
    return out


def _spans(rng: np.random.Generator, n: int, tracks: int, far: bool) -> tuple[np.ndarray, ...]:
    track = rng.integers(0, tracks, n) * 3  # sparse track ids
    start = rng.integers(0, 60, n)
    end = start + rng.integers(0, 25, n)  # some empty
    if far:  # a span of 2**62 ns: the keys fall back to time ranks
        start[0], end[0] = -(1 << 61), 1 << 61
    return track, start, end


@pytest.mark.parametrize("seed", range(40))
def test_depth_counts_the_open_spans(seed: int):
    rng = np.random.default_rng(seed)
    track, start, end = _spans(rng, int(rng.integers(1, 120)), int(rng.integers(1, 5)), far=seed % 4 == 0)
    order, keys, depth = nesting_depth(track, start, end)
    assert sorted(order.tolist()) == np.flatnonzero(end > start).tolist()  # the non-empty spans
    s = list(zip(track[order].tolist(), start[order].tolist(), (start - end)[order].tolist()))
    assert s == sorted(s)  # by track, start, longest first
    assert np.all(np.diff(keys) >= 0)
    assert depth.tolist() == _counted(track, start, end, order).tolist()


def test_no_spans():
    order, keys, depth = nesting_depth(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(order) == len(keys) == len(depth) == 0


@pytest.mark.parametrize("seed", range(20))
def test_parents_are_the_nearest_span_one_level_up(seed: int):
    """``analyze.nesting.parents``: each span's parent is the nearest position before it
    one level up (-1: none), as found level by level over the positions of each depth."""
    from polyprof.analyze.nesting import parents

    rng = np.random.default_rng(100 + seed)
    track, start, end = _spans(rng, int(rng.integers(1, 150)), int(rng.integers(1, 4)), far=False)
    order, depth, parent = parents(track, start, end)
    want = np.full(len(order), -1, np.int64)
    for i, d in enumerate(depth.tolist()):
        up = [j for j in range(i) if depth[j] == d - 1]
        if d and up:
            want[i] = up[-1]
    assert parent.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(30))
def test_parents_in_c_equal_the_numpy_passes(seed: int):
    """``_nest.depths`` (one loop with a heap of open ends) against ``nesting_depth`` and
    the pass per level: the same order, depths and parents, for spans that nest, overlap
    without nesting, tie, are empty, or lie far apart (keys as ranks in NumPy)."""
    from polyprof.analyze import nesting

    if nesting._nest is None:
        pytest.skip("polyprof.analyze._nest is not built")
    rng = np.random.default_rng(500 + seed)
    track, start, end = _spans(rng, int(rng.integers(0, 400)), int(rng.integers(1, 6)), far=seed % 5 == 0)
    c, py = nesting.parents(track, start, end, compiled=True), nesting.parents(track, start, end, compiled=False)
    for name, x, y in zip(("order", "depth", "parent"), c, py):
        assert x.dtype == y.dtype and x.tolist() == y.tolist(), name
    assert c[1].tolist() == _counted(track, start, end, c[0]).tolist()


def test_depths_in_c_refuse_bad_buffers():
    from polyprof.analyze import nesting

    if nesting._nest is None:
        pytest.skip("polyprof.analyze._nest is not built")
    a = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="lengths"):
        nesting._nest.depths(a, a, a, np.zeros(2, np.int64), np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="int64"):
        nesting._nest.depths(a.astype(np.int32), a, a, a.copy(), a.copy())


@pytest.mark.parametrize("seed", range(20))
def test_after_is_the_next_position_one_level_up_or_the_tracks_end(seed: int):
    """``nesting.parents_and_after``: with the parents from the same C loop, each
    position's first later position of its track at its depth or above (its track's end
    where none), counted one by one, for spans that nest or not."""
    from polyprof.analyze import nesting

    if nesting._nest is None:
        pytest.skip("polyprof.analyze._nest is not built")
    rng = np.random.default_rng(700 + seed)
    track, start, end = _spans(rng, int(rng.integers(0, 200)), int(rng.integers(1, 5)), far=False)
    order, depth, parent, after = nesting.parents_and_after(track, start, end)
    assert [order.tolist(), depth.tolist(), parent.tolist()] == [x.tolist() for x in nesting.parents(track, start, end)]
    tr = track[order]
    want = []
    for i in range(len(order)):
        j = i + 1
        while j < len(order) and tr[j] == tr[i] and depth[j] > depth[i]:
            j += 1
        want.append(j)
    assert after is not None and after.tolist() == want
