"""Sorting by several integer columns at once (used from the readers to the analyses).

``np.lexsort`` sorts once per key; for the integer columns of a trace (tracks, times,
durations, name ids) the keys usually fit together in one int64, and one argsort of that
is faster (or at least saves the passes of the keys merged); keys that do not fit
only reorder the rows that tie on those that do. The result is exactly ``np.lexsort``'s
(a stable order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

_LIMIT = 2 ** 63
#: rows handled at a time where a whole column of temporaries is not needed at once
_BLOCK = 1 << 16


def lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key sorts first; ties keep their order) for integer
    or bool keys: the leading keys whose value ranges fit together in 63 bits are sorted
    as one combined int64 key, the others (if any) by ``np.lexsort`` after it."""
    n = len(keys[0]) if len(keys) else 0
    if n < 2 or any(np.asarray(k).dtype.kind not in "iub" for k in keys):
        return np.lexsort(keys)
    cols = [np.asarray(k).astype(np.int64, copy=False) for k in reversed(keys)]  # primary first
    combined: np.ndarray | None = None
    width, used = 1, 0
    for c in cols:
        lo = int(c.min())
        span = int(c.max()) - lo + 1
        if width * span >= _LIMIT:
            break
        combined = c - lo if combined is None else combined * span + (c - lo)
        width *= span
        used += 1
    if used < 2 or combined is None:
        return np.lexsort(keys)
    if width * n < _LIMIT:  # the position as the last key: all distinct, so any sort is stable
        order, combined = _sort_with_rows(combined, n)
        return order if used == len(cols) else break_sorted_ties(
            order, combined, lambda rows: [c[rows] for c in cols[used:]])
    order = np.argsort(combined, kind="stable")
    return order if used == len(cols) else _break_ties(order, combined, cols[used:])


def _sort_with_rows(key: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The stable order of ``key`` (int64, ``n`` rows, ``key * n + n - 1`` in int64; a
    fresh array, overwritten) and the keys in that order: the row folded into the key as
    its low part, the values sorted in place, the row read back. Sorting values is several
    times faster than ``np.argsort`` of the same keys, which also grows faster per row
    with the size (docs/benchmarks.md, "Linear growth")."""
    key *= n
    for lo in range(0, n, _BLOCK):
        key[lo:lo + _BLOCK] += np.arange(lo, min(lo + _BLOCK, n), dtype=np.int64)
    key.sort()
    order = np.remainder(key, n)
    key //= n
    return order, key


def _break_ties(order: np.ndarray, primary: np.ndarray, rest: list[np.ndarray]) -> np.ndarray:
    """``order`` (stable, by ``primary``) with each run of equal ``primary`` values put in
    the order of the ``rest`` keys (most significant first), stably: ``np.lexsort`` over
    the tied rows alone. Spans sorted by (track, start, longest first) rarely tie on
    (track, start), so this is one sort instead of one per key."""
    return break_sorted_ties(order, primary[order], lambda rows: [c[rows] for c in rest])


def break_sorted_ties(order: np.ndarray, primary: np.ndarray,
                      rest: Callable[[np.ndarray], list[np.ndarray]]) -> np.ndarray:
    """``order`` (a stable order by a key; ``primary``: that key in this order) with each
    run of equal keys put in the order of ``rest(rows)`` (the other keys of those rows,
    most significant first), stably, in place. Only the tied rows are gathered: beside
    a boolean per row, memory is per tied row."""
    tie = primary[1:] == primary[:-1]
    if not tie.any():
        return order
    in_run = np.zeros(len(primary), bool)
    in_run[1:] = tie
    in_run[:-1] |= tie
    del tie
    pos = np.flatnonzero(in_run)
    del in_run
    first = np.ones(len(pos), bool)  # a run starts where a tied row differs from the one before it
    first[1:] = primary[pos[1:]] != primary[pos[1:] - 1]
    run = np.cumsum(first)  # which run each tied row is in
    tied = order[pos]  # ascending row within a run: the sort was stable
    order[pos] = tied[np.lexsort([*reversed(rest(tied)), run])]
    return order


def unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` (sorted distinct values of a 1-d array) by a sort and a
    compare of neighbours. NumPy 2.3+ finds plain distinct values by hashing, which is
    far slower than sorting on long int columns (bench/scaling.py; docs/benchmarks.md)."""
    a = np.sort(np.asarray(values).ravel())
    if len(a) < 2:
        return a
    keep = np.empty(len(a), bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a 1-d array by a partition at the middle. NumPy's
    function checks for masked arrays, which imports ``numpy.ma`` (a few ms, more than a
    summary's whole analysis of a small trace); NumPy's own where ``values`` is empty
    or holds NaN."""
    a = np.asarray(values).ravel()
    n = len(a)
    if not n or (a.dtype.kind in "fc" and bool(np.isnan(a).any())):
        return float(np.median(a))
    k = n // 2
    if n % 2:
        return float(np.partition(a, k)[k])
    p = np.partition(a, [k - 1, k])
    return (float(p[k - 1]) + float(p[k])) / 2  # in floats: two int64 could overflow


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)`` through :func:`unique`."""
    return unique(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a 1-d array: one stable sort. Beside
    sorting being what scales (above), NumPy's function pays a set-up the first time
    in a process that outweighs a small trace's whole analysis step."""
    a = np.asarray(values).ravel()
    first, inverse = first_and_inverse(a)
    return a[first], inverse


def first_and_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True, return_inverse=True)[1:]`` of a 1-d array:
    the first position of each distinct value (in sorted order) and each position's
    value's index, by one stable sort (see :func:`unique_inverse`)."""
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    new = np.empty(len(s), bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    inverse = np.empty(len(s), np.intp)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def unique_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` of a 1-d array (see :func:`unique_inverse`)."""
    s = np.sort(np.asarray(values).ravel())
    if not len(s):
        return s, np.zeros(0, np.intp)
    first = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    return s[first], np.diff(np.append(first, len(s))).astype(np.intp)


def find(keys: np.ndarray, want: np.ndarray) -> np.ndarray:
    """For each of ``want``, the position in ``keys`` of a key equal to it (the first of
    equal keys), -1 where there is none: one stable sort of the keys, one search."""
    want = np.asarray(want)
    if not len(keys):
        return np.full(len(want), -1, np.int64)
    order = np.argsort(keys, kind="stable")
    k = np.asarray(keys)[order]
    i = np.minimum(np.searchsorted(k, want), len(k) - 1)
    return np.where(k[i] == want, order[i], -1)


def unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(np.stack(cols, 1), axis=0, return_index, return_inverse)`` for integer
    columns, through one int64 key when their ranges fit in 63 bits (a 1-d sort: the
    axis=0 form sorts rows as records, ten times slower on a million)."""
    ints = [np.asarray(c).astype(np.int64) for c in cols]
    n = len(ints[0]) if ints else 0
    if not n:
        return np.zeros((0, len(ints)), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    lows = [int(c.min()) for c in ints]
    bits = [max(int(c.max()) - lo, 0).bit_length() for c, lo in zip(ints, lows)]
    if sum(bits) > 63:
        uniq, first, inv = np.unique(np.stack(ints, axis=1), axis=0, return_index=True, return_inverse=True)
        return uniq, first, inv.reshape(-1)
    key = np.zeros(n, np.int64)
    for c, lo, b in zip(ints, lows, bits):
        key = (key << b) | (c - lo)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return np.stack([c[first] for c in ints], axis=1), first, inv.reshape(-1)


def member(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``np.isin(values, table)`` for integer arrays: a lookup in a boolean table when the
    values are small non-negative integers (string ids, kind codes, rows), NumPy's own
    otherwise (whose first call in a process pays a set-up)."""
    values, table = np.asarray(values), np.asarray(table)
    if values.dtype.kind not in "iu" or table.dtype.kind not in "iu" or not len(values):
        return np.isin(values, table)
    hi = int(values.max())
    if int(values.min()) < 0 or hi > max(1 << 22, 4 * len(values)):
        return np.isin(values, table)
    lut = np.zeros(hi + 1, bool)
    t = table[(table >= 0) & (table <= hi)] if len(table) else table
    lut[t] = True
    return lut[values]


def row_of_key(keys: np.ndarray, rows: np.ndarray, want: np.ndarray) -> np.ndarray:
    """For each ``want``, the row whose key equals it (first by key order), -1 when none."""
    at = find(keys, want)
    return np.where(at >= 0, rows[at], -1) if len(keys) else at


def last_at_or_before(key: np.ndarray, t: np.ndarray, value: np.ndarray, q_key: np.ndarray,
                      q_t: np.ndarray) -> np.ndarray:
    """Per query, ``value`` of the last item with the same key and ``t`` at or before the
    query's time; -1 when none."""
    return _keyed_search(key, t, value, q_key, q_t, before=True)


def first_at_or_after(key: np.ndarray, t: np.ndarray, value: np.ndarray, q_key: np.ndarray,
                      q_t: np.ndarray) -> np.ndarray:
    """Per query, ``value`` of the first item with the same key and ``t`` at or after the
    query's time; -1 when none."""
    return _keyed_search(key, t, value, q_key, q_t, before=False)


def _keyed_search(key: np.ndarray, t: np.ndarray, value: np.ndarray, q_key: np.ndarray, q_t: np.ndarray,
                  before: bool) -> np.ndarray:
    """:func:`last_at_or_before` / :func:`first_at_or_after`: one search of the items
    sorted by (key, time), the key's rank and the time folded into one int64 where they
    fit (:func:`_keyed_search_by_key` otherwise, and the reference the tests hold it to)."""
    out = np.full(len(q_t), -1, np.int64)
    if not len(t) or not len(q_t):
        return out
    key, t = np.asarray(key, np.int64), np.asarray(t, np.int64)
    q_key, q_t = np.asarray(q_key, np.int64), np.asarray(q_t, np.int64)
    keys, rank = unique_inverse(key)
    lo = min(int(t.min()), int(q_t.min()))
    span = max(int(t.max()), int(q_t.max())) - lo + 1
    if len(keys) * span >= _LIMIT:
        return _keyed_search_by_key(key, t, value, q_key, q_t, before)
    folded = rank.reshape(-1) * span + (t - lo)
    if len(keys) * span * len(folded) < _LIMIT:
        order, folded = _sort_with_rows(folded, len(folded))
    else:
        order = np.argsort(folded, kind="stable")
        folded = folded[order]
    q_rank = np.minimum(np.searchsorted(keys, q_key), len(keys) - 1)
    known = keys[q_rank] == q_key
    q_folded = q_rank * span + (q_t - lo)
    if before:
        j = np.searchsorted(folded, q_folded, side="right") - 1
        ok = known & (j >= 0)
    else:
        j = np.searchsorted(folded, q_folded)
        ok = known & (j < len(folded))
    j = np.where(ok, j, 0)
    ok &= folded[j] // span == q_rank  # the item found is of the query's key
    out[ok] = np.asarray(value)[order[j[ok]]]
    return out


def _keyed_search_by_key(key: np.ndarray, t: np.ndarray, value: np.ndarray, q_key: np.ndarray, q_t: np.ndarray,
                         before: bool) -> np.ndarray:
    """:func:`_keyed_search` a key at a time (keys and times too wide to fold together)."""
    out = np.full(len(q_t), -1, np.int64)
    for k in unique(q_key):
        mine = np.flatnonzero(key == k)
        if not len(mine):
            continue
        mine = mine[np.argsort(t[mine], kind="stable")]
        q = np.flatnonzero(q_key == k)
        j = np.searchsorted(t[mine], q_t[q], side="right") - 1 if before else np.searchsorted(t[mine], q_t[q])
        ok = (j >= 0) & (j < len(mine))
        out[q[ok]] = value[mine[j[ok]]]
    return out
