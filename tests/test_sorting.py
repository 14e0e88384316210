"""trace.sorting.lexsort must give exactly np.lexsort's order, whichever path it takes."""

from __future__ import annotations

import numpy as np
import pytest

from polyprof.trace.sorting import lexsort


@pytest.mark.parametrize("seed", range(40))
def test_lexsort_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    nkeys = int(rng.integers(1, 5))
    keys = []
    for _ in range(nkeys):
        kind = rng.integers(0, 5)
        if kind == 0:  # few distinct values: many ties
            keys.append(rng.integers(0, 3, n))
        elif kind == 1:  # negative and positive
            keys.append(rng.integers(-10 ** 6, 10 ** 6, n))
        elif kind == 2:
            keys.append(rng.random(n) < 0.5)  # bool
        elif kind == 3:  # wide: forces the stable or the np.lexsort path
            keys.append(rng.integers(-2 ** 62, 2 ** 62, n, dtype=np.int64))
        else:
            keys.append(rng.integers(0, 2 ** 31, n).astype(np.int32))
    assert np.array_equal(lexsort(keys), np.lexsort(keys))


@pytest.mark.parametrize("seed", range(12))
def test_lexsort_keys_that_do_not_fit_only_reorder_ties(seed):
    """Spans by (track, start, longest first): (track, start) fit one int64, the
    durations do not; rows tied on (track, start), in runs of any length, are ordered by
    the rest, stably, exactly as np.lexsort orders them."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 4000))
    track = rng.integers(0, 8, n)
    start = rng.integers(0, max(2, n // int(rng.integers(1, 50))), n) * 10 ** 9  # many shared starts
    dur = rng.integers(-2 ** 62, 2 ** 62, n, dtype=np.int64)
    dur[rng.random(n) < 0.3] = 7  # ties on every key too
    for keys in ([-dur, start, track], [dur % 3, dur, start, track], [rng.random(n), start, track]):
        assert np.array_equal(lexsort(keys), np.lexsort(keys))



@pytest.mark.parametrize("seed", range(3))
def test_lexsort_rows_folded_in_over_several_blocks(seed):
    """The path that sorts the keys' values with the row folded in (and reads the row
    back) across more than one block of rows: int32, uint64 and negative keys, runs of
    ties, and keys that do not fit broken on the tied rows only."""
    rng = np.random.default_rng(seed)
    n = 3 * (1 << 16) + int(rng.integers(1, 1000))
    track = rng.integers(0, 5, n).astype(np.int32)
    start = rng.integers(-10 ** 6, 10 ** 6, n) // 1000 * 1000  # negative, many ties
    ids = rng.integers(0, 2 ** 20, n).astype(np.uint64)
    wide = rng.integers(-2 ** 62, 2 ** 62, n, dtype=np.int64)
    wide[rng.random(n) < 0.5] = -3
    for keys in ([start, track], [ids, start, track], [wide, start, track], [np.arange(n)[::-1], track]):
        got = lexsort(keys)
        assert got.dtype == np.intp and np.array_equal(got, np.lexsort(keys))

def test_lexsort_paths_and_extremes():
    a = np.array([3, 1, 3, 1, 2], np.int64)
    b = np.array([0, 0, 0, 0, 0], np.int64)
    assert lexsort([b, a]).tolist() == np.lexsort([b, a]).tolist() == [1, 3, 4, 0, 2]  # ties keep order
    big = np.array([2 ** 63 - 1, -2 ** 63, 0], np.int64)
    assert lexsort([big]).tolist() == [1, 2, 0]
    # ranges that fit only without the position key: the stable argsort path
    wide = np.array([2 ** 61, 0, 2 ** 61, 5], np.int64)
    assert lexsort([wide]).tolist() == [1, 3, 0, 2]
    assert lexsort([np.array([1.5, 0.5])]).tolist() == [1, 0]  # floats: np.lexsort itself
    assert lexsort([np.zeros(0, np.int64)]).tolist() == []


@pytest.mark.parametrize("seed", range(6))
def test_unique_and_union_are_numpys(seed: int):
    from polyprof.trace.sorting import union, unique

    rng = np.random.default_rng(seed)
    n = [0, 1, 2, 1000, 5000, 70000][seed]
    for a in (rng.integers(-5, 5, n), rng.integers(0, 2 ** 62, n), rng.integers(0, 300, n).astype(np.int32),
              rng.random(n).round(2), np.array([str(x) for x in rng.integers(0, 9, n)], object)):
        got, ref = unique(a), np.unique(a)
        assert got.dtype == ref.dtype and got.tolist() == ref.tolist()
        b = a[: n // 3]
        assert union(b, a[::-1]).tolist() == np.union1d(b, a[::-1]).tolist()


def test_unique_inverse_counts_and_member_are_numpys():
    """The sort and table paths against the NumPy functions they stand in for."""
    from polyprof.trace.sorting import member, unique_counts, unique_inverse

    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 9, 500):
        for dtype, lo, hi in ((np.int64, -40, 40), (np.int32, 0, 7), (np.int8, -3, 12), (np.uint8, 0, 255),
                              (np.int64, 0, 2 ** 40), (np.float64, 0, 5)):
            a = rng.integers(lo, hi, n).astype(dtype)
            u, i = unique_inverse(a)
            want_u, want_i = np.unique(a, return_inverse=True)
            assert u.dtype == want_u.dtype and np.array_equal(u, want_u), (n, dtype)
            assert i.dtype == want_i.dtype and i.shape == want_i.shape and np.array_equal(i, want_i), (n, dtype)
            u, c = unique_counts(a)
            want_u, want_c = np.unique(a, return_counts=True)
            assert np.array_equal(u, want_u) and c.dtype == want_c.dtype and np.array_equal(c, want_c), (n, dtype)
            for table in (rng.integers(lo, hi, 6).astype(dtype), a[:0], np.array([-1, 2 ** 50], np.int64)):
                assert np.array_equal(member(a, table), np.isin(a, table)), (n, dtype, table)


def test_median_is_numpys():
    """``sorting.median`` (a partition; NumPy's checks for masked arrays import numpy.ma)
    equals ``float(np.median(x))``: odd and even lengths, ints near 2**62 (their mean in
    floats, not int64), repeated values, NaN and empty (NumPy's own nan)."""
    from polyprof.trace.sorting import median

    rng = np.random.default_rng(3)
    for n in [*range(1, 30), 101, 4096, 4097, 50001]:
        for x in (rng.integers(-9, 9, n), rng.integers(0, 2 ** 62, n), rng.random(n) * 1e9,
                  rng.integers(0, 3, n).astype(np.int32), np.where(rng.random(n) < 0.2, np.nan, 1.0)):
            want = float(np.median(x))
            got = median(x)
            assert got == want or (got != got and want != want), (n, x[:5])
    with pytest.warns(RuntimeWarning):
        assert median(np.zeros(0)) != median(np.zeros(0))


@pytest.mark.parametrize("seed", range(6))
def test_find_gives_the_first_equal_key_or_minus_one(seed: int):
    from polyprof.trace.sorting import find

    rng = np.random.default_rng(seed)
    keys = rng.integers(-50, 50, int(rng.integers(0, 300))) << int(rng.integers(0, 40))
    want = np.concatenate([keys[: len(keys) // 2], rng.integers(-60, 60, 100) << 3])
    first = {}
    for i, k in enumerate(keys.tolist()):
        first.setdefault(k, i)
    assert find(keys, want).tolist() == [first.get(w, -1) for w in want.tolist()]


def test_unique_rows_matches_numpy():
    """The packed-key unique gives np.unique(axis=0)'s rows, first indices and inverse,
    and falls back to it when the columns' ranges do not fit 63 bits."""
    from polyprof.trace.sorting import unique_rows

    rng = np.random.default_rng(3)
    for cols in ([rng.integers(0, 5, 1000), rng.integers(0, 3, 1000).astype(np.uint32), rng.integers(-2, 2, 1000)],
                 [rng.integers(0, 2**40, 1000), rng.integers(0, 2**40, 1000)]):
        uniq, first, inv = unique_rows(*cols)
        ref_u, ref_f, ref_i = np.unique(np.stack([c.astype(np.int64) for c in cols], 1), axis=0,
                                        return_index=True, return_inverse=True)
        assert np.array_equal(uniq, ref_u) and np.array_equal(first, ref_f)
        assert np.array_equal(inv, ref_i.reshape(-1))


@pytest.mark.parametrize("seed", range(6))
def test_keyed_search_folded_is_the_search_by_key(seed: int) -> None:
    """``last_at_or_before`` / ``first_at_or_after`` fold the key's rank and the time into
    one sorted int64; the search a key at a time is the reference (ties, unknown keys,
    empty sides, times too wide to fold)."""
    from polyprof.trace import sorting

    rng = np.random.default_rng(seed)
    for trial in range(200):
        n, m, k = int(rng.integers(0, 60)), int(rng.integers(0, 60)), int(rng.integers(1, 8))
        span = 2 ** 61 if trial % 7 == 0 else int(rng.integers(1, 50))
        key, t = rng.integers(0, k, n), rng.integers(-span, span, n)
        q_key, q_t = rng.integers(0, k + 2, m), rng.integers(-span, span, m)
        value = rng.integers(0, 1000, n)
        for before in (True, False):
            got = sorting._keyed_search(key, t, value, q_key, q_t, before)
            want = (sorting._keyed_search_by_key(key, t, value, q_key, q_t, before) if n and m
                    else np.full(m, -1, np.int64))
            assert got.tolist() == want.tolist()
