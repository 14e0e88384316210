"""derive.intervals.RangeMinMax against a brute-force min / max of every range asked."""

from __future__ import annotations

import numpy as np
import pytest

from polyprof.derive.intervals import RangeMinMax


@pytest.mark.parametrize("n", [0, 1, 2, 5, 31, 32, 33, 64, 65, 100, 1000, 4099])
def test_every_kind_of_range_against_brute_force(n: int) -> None:
    rng = np.random.default_rng(n)
    lo_v = rng.integers(-(1 << 62), 1 << 62, n)
    hi_v = lo_v + rng.integers(0, 1 << 20, n)
    r = RangeMinMax(lo_v, hi_v)
    m = 3000
    lo = rng.integers(0, n + 1, m) if n else np.zeros(m, np.int64)
    length = np.where(rng.random(m) < 0.5, rng.integers(0, 40, m), rng.integers(0, n + 2, m))
    hi = np.minimum(lo + length, n)
    hi[::17] = lo[::17]  # empty ranges
    valid, mn, mx = r.query(lo, hi)
    assert np.array_equal(valid, hi > lo)
    for i in np.flatnonzero(valid):
        assert mn[i] == lo_v[lo[i]:hi[i]].min() and mx[i] == hi_v[lo[i]:hi[i]].max(), (lo[i], hi[i])
    assert not mn[~valid].any() and not mx[~valid].any()


def test_memory_is_linear_in_the_values() -> None:
    n = 1 << 16
    r = RangeMinMax(np.arange(n), np.arange(n))
    held = sum(a.nbytes for t in (r._min, r._max, r._bmin, r._bmax) for a in t)
    held += sum(a.nbytes for a in (r._pre_min, r._pre_max, r._suf_min, r._suf_max))
    assert held < 20 * 8 * n  # the full sparse tables held 2 x 17 arrays of n values
    # beside the values themselves: the running min / max of each block, both ways (4), and
    # the blocks' table; the tables of the lengths below a block (10 more) are not kept
    beside = held - sum(a.nbytes for a in (r._min[0], r._max[0]))
    assert beside < 6 * 8 * n, beside / (8 * n)


@pytest.mark.parametrize("n", [1, 31, 33, 1000])
def test_every_range_valid_against_brute_force(n: int) -> None:
    """No empty range: the query answers from its own arrays, without copying the ranges."""
    rng = np.random.default_rng(n + 7)
    v = rng.integers(-1000, 1000, n)
    lo = rng.integers(0, n, 2000)
    hi = np.minimum(lo + 1 + rng.integers(0, 70, 2000), n)
    valid, mn, mx = RangeMinMax(v, v + 5).query(lo, hi)
    assert valid.all()
    assert [(a, b) for a, b in zip(mn, mx)] == [(v[a:b].min(), v[a:b].max() + 5) for a, b in zip(lo, hi)]


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 16])
@pytest.mark.parametrize("some_empty", [False, True])
def test_a_query_in_chunks_answers_as_one(monkeypatch: pytest.MonkeyPatch, chunk: int, some_empty: bool) -> None:
    """The query answers :data:`_QUERY_CHUNK` ranges at a time (what it holds besides its
    answer is a chunk's): any chunk size, with and without empty ranges, against brute force."""
    from polyprof.derive import intervals

    monkeypatch.setattr(intervals, "_QUERY_CHUNK", chunk)
    rng = np.random.default_rng(chunk + some_empty)
    n, m = 2000, 1500
    v = rng.integers(-(1 << 40), 1 << 40, n)
    lo = rng.integers(0, n, m)
    hi = np.minimum(lo + 1 + np.where(rng.random(m) < 0.5, rng.integers(0, 40, m), rng.integers(0, n, m)), n)
    if some_empty:
        hi[::13] = lo[::13]
        hi[5:60] = lo[5:60]  # (whole chunks without a valid range where they are small)
    valid, mn, mx = RangeMinMax(v, v + 3).query(lo, hi)
    assert np.array_equal(valid, hi > lo)
    want_mn = np.array([v[a:b].min() if b > a else 0 for a, b in zip(lo, hi)])
    want_mx = np.array([v[a:b].max() + 3 if b > a else 0 for a, b in zip(lo, hi)])
    assert np.array_equal(mn, want_mn) and np.array_equal(mx, want_mx)
