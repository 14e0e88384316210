"""Vectorised interval primitives the derivations share.

Everything here is sort + searchsorted on NumPy arrays: unions of intervals, the
innermost enclosing interval of many points per track (an interval stack done one
nesting depth at a time), and range queries over sorted launches (prefix sums and a
sparse table), so a derivation is O(n log n) whatever the trace's size.
"""

from __future__ import annotations

import numpy as np

from ..trace.sorting import lexsort, unique


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted segments covering the union of [start, end) intervals."""
    if not len(starts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    seg_end = np.maximum.reduceat(e, first)
    return s[first], seg_end


def union_len(starts: np.ndarray, ends: np.ndarray) -> int:
    """The time the intervals [start, end) cover together (overlaps once, empty ones none)."""
    s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    keep = e > s
    seg_s, seg_e = union(s[keep], e[keep])
    return int((seg_e - seg_s).sum())


def clip_union(starts: np.ndarray, ends: np.ndarray, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`union` restricted to the window [t0, t1)."""
    # np.clip's own definition, without its Python wrapper (a summary makes dozens of calls)
    s, e = union(np.minimum(np.maximum(starts, t0), t1), np.minimum(np.maximum(ends, t0), t1))
    keep = e > s
    return s[keep], e[keep]


def covered(seg_s: np.ndarray, seg_e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a, b) covered by the disjoint sorted segments (vectorised over a, b)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    if not len(seg_s):
        return np.zeros(len(a), np.int64)
    cum = np.concatenate([[0], np.cumsum(seg_e - seg_s)])

    def upto(t: np.ndarray) -> np.ndarray:  # covered length in (-inf, t)
        i = np.searchsorted(seg_s, t, side="right")  # segments starting at or before t
        last = np.maximum(i - 1, 0)
        partial = np.where(i > 0, np.minimum(np.maximum(t - seg_s[last], 0), seg_e[last] - seg_s[last]), 0)
        return cum[last] * (i > 0) + partial

    return np.maximum(upto(b) - upto(a), 0)


def intersect_len(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> int:
    """Length of the intersection of two unions of disjoint segments."""
    la = int((a_e - a_s).sum())
    lb = int((b_e - b_s).sum())
    u_s, u_e = union(np.concatenate([a_s, b_s]), np.concatenate([a_e, b_e]))
    return la + lb - int((u_e - u_s).sum())


class TimeKeys:
    """One sortable int64 key per (track, time), track-major.

    Times are offset from the smallest one, which fits any realistic trace (a span of
    hours, thousands of tracks) in 63 bits; otherwise times are replaced by their rank
    among all the times given (a sort, still n log n).
    """

    def __init__(self, times: list[np.ndarray], max_track: int):
        arrs = [np.asarray(a, np.int64) for a in times if len(a)]
        lo = min(int(a.min()) for a in arrs) if arrs else 0
        hi = max(int(a.max()) for a in arrs) if arrs else 0
        width = hi - lo + 2
        self.lo = lo
        if width * (int(max_track) + 2) < 2 ** 62:
            self.grid = None
            self.mult = width
        else:
            self.grid = unique(np.concatenate(arrs))
            self.mult = len(self.grid) + 1

    def __call__(self, track: np.ndarray, times: np.ndarray) -> np.ndarray:
        track = np.asarray(track, np.int64)
        times = np.asarray(times, np.int64)
        if self.grid is None:
            return track * self.mult + (times - self.lo)
        return track * self.mult + np.searchsorted(self.grid, times)

    def first(self, track: np.ndarray) -> np.ndarray:
        """The smallest key of each track."""
        return np.asarray(track, np.int64) * self.mult


def _max(a: np.ndarray) -> int:
    return int(a.max()) if len(a) else 0


def nesting_depth(c_track: np.ndarray, c_start: np.ndarray, c_end: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, sorted keys, depth) of non-empty spans: ``order`` sorts them by (track,
    start, longest first); depth (in that order) counts the spans still open at each
    start on the same track, 0 for outermost."""
    c_track = np.asarray(c_track, np.int64)
    c_start = np.asarray(c_start, np.int64)
    c_end = np.asarray(c_end, np.int64)
    nonempty = np.flatnonzero(c_end > c_start)  # an empty span contains nothing
    order = nonempty[lexsort((-(c_end - c_start)[nonempty], c_start[nonempty], c_track[nonempty]))]
    tr, s, e = c_track[order], c_start[order], c_end[order]
    if not len(order):
        return order, np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = TimeKeys([s, e], _max(tr))
    ks = key(tr, s)
    ke = np.sort(key(tr, e))
    # spans open at a start: those of its track started before it, less those of its track
    # ended by then. Keys are track-major and each span's end key is in its own track's
    # range, so the spans of earlier tracks count once in each term: position i less the
    # end keys up to its start key is that difference
    return order, ks, np.maximum(np.arange(len(ks)) - np.searchsorted(ke, ks, side="right"), 0)


def innermost(c_track: np.ndarray, c_start: np.ndarray, c_end: np.ndarray,
              q_track: np.ndarray, q_time: np.ndarray) -> np.ndarray:
    """For each query point, the index of the innermost container on the same track
    with ``start <= time < end`` (-1 when none).

    Containers are assumed to nest (as spans on one thread do); nesting depth comes from
    counting the intervals open at each start, then each depth is one searchsorted.
    """
    m = len(q_time)
    out = np.full(m, -1, np.int64)
    if not len(c_start) or not m:
        return out
    order, _, depth = nesting_depth(c_track, c_start, c_end)
    if not len(order):
        return out
    tr = np.asarray(c_track, np.int64)[order]
    s = np.asarray(c_start, np.int64)[order]
    e = np.asarray(c_end, np.int64)[order]
    q_track = np.asarray(q_track, np.int64)
    q_time = np.asarray(q_time, np.int64)
    key = TimeKeys([s, q_time], max(_max(tr), _max(q_track)))
    ks = key(tr, s)
    kq = key(q_track, q_time)
    for d in range(int(depth.max()) + 1):
        idx = np.flatnonzero(depth == d)
        if not len(idx):
            continue
        p = np.searchsorted(ks[idx], kq, side="right") - 1
        ok = p >= 0
        cand = idx[np.maximum(p, 0)]
        ok &= (tr[cand] == q_track) & (e[cand] > q_time)
        out[ok] = order[cand[ok]]
    return out


def child_time(c_track: np.ndarray, c_start: np.ndarray, c_end: np.ndarray) -> np.ndarray:
    """For each span, the summed duration of its direct children (spans one level
    deeper starting inside it on the same track): duration minus this is self time."""
    n = len(c_start)
    out = np.zeros(n, np.int64)
    order, _, depth = nesting_depth(c_track, c_start, c_end)
    if not len(order):
        return out
    tr = np.asarray(c_track, np.int64)[order]
    s = np.asarray(c_start, np.int64)[order]
    e = np.asarray(c_end, np.int64)[order]
    key = TimeKeys([s, e], _max(tr))
    ks = key(tr, s)
    kend = key(tr, e)
    for d in range(int(depth.max())):
        par = np.flatnonzero(depth == d)
        ch = np.flatnonzero(depth == d + 1)
        if not len(par) or not len(ch):
            continue
        cum = np.concatenate([[0], np.cumsum(e[ch] - s[ch])])
        lo = np.searchsorted(ks[ch], ks[par], side="left")
        hi = np.searchsorted(ks[ch], kend[par], side="left")
        out[order[par]] = cum[np.maximum(hi, lo)] - cum[lo]
    return out


class RangeMinMax:
    """O(1) min / max over any contiguous range of a fixed array, in O(n) memory.

    The values are cut into blocks of :data:`_BLOCK`. A range inside one block is
    answered from the values themselves, one step per value past its first (at most
    ``_BLOCK - 1`` vectorised steps, each over the ranges still that long); a range across
    blocks by the running min / max from its start to its block's end, from its end's
    block start to its end, and a sparse table over the blocks in between: 4 arrays the
    size of the values besides them (sparse tables over every length took 2 x log2(n): 40
    for a million launches; those of the lengths below a block, 10 more: 80 bytes per
    value at the peak of a summary's ``op_stats``, docs/benchmarks.md "Whole-process
    scale")."""

    def __init__(self, mins: np.ndarray, maxs: np.ndarray):
        mins, maxs = np.asarray(mins, np.int64), np.asarray(maxs, np.int64)
        self.n = n = len(mins)
        self._min, self._max = [mins], [maxs]
        nb = -(-n // _BLOCK)
        pad = nb * _BLOCK - n
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        bmin = np.concatenate([mins, np.full(pad, big, np.int64)]).reshape(nb, _BLOCK)
        bmax = np.concatenate([maxs, np.full(pad, small, np.int64)]).reshape(nb, _BLOCK)
        # running min / max from each block's start, and to each block's end
        self._pre_min = np.minimum.accumulate(bmin, axis=1).ravel()[:n]
        self._pre_max = np.maximum.accumulate(bmax, axis=1).ravel()[:n]
        self._suf_min = np.minimum.accumulate(bmin[:, ::-1], axis=1)[:, ::-1].ravel()[:n]
        self._suf_max = np.maximum.accumulate(bmax[:, ::-1], axis=1)[:, ::-1].ravel()[:n]
        self._bmin, self._bmax = _levels(bmin.min(axis=1), bmax.max(axis=1), nb)

    def query(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(valid, min, max) over [lo, hi); ranges with hi <= lo are not valid (their min
        and max 0). Answered :data:`_QUERY_CHUNK` ranges at a time, so that what a query
        holds besides its answer is a chunk's, not a copy of every range (the peak of a
        summary's ``op_stats``: one query per op, docs/benchmarks.md "Whole-process scale")."""
        lo = np.asarray(lo, np.int64)
        hi = np.asarray(hi, np.int64)
        valid = hi > lo
        if not valid.any():
            return valid, np.zeros(len(lo), np.int64), np.zeros(len(lo), np.int64)
        every = bool(valid.all())
        mn = np.empty(len(lo), np.int64) if every else np.zeros(len(lo), np.int64)
        mx = np.empty(len(lo), np.int64) if every else np.zeros(len(lo), np.int64)
        for c in range(0, len(lo), _QUERY_CHUNK):
            part = slice(c, c + _QUERY_CHUNK)
            if every:
                self._valid_into(lo[part], hi[part], mn[part], mx[part])
                continue
            at = np.flatnonzero(valid[part])
            if len(at):
                vmn, vmx = np.empty(len(at), np.int64), np.empty(len(at), np.int64)
                self._valid_into(lo[part][at], hi[part][at], vmn, vmx)
                mn[c + at], mx[c + at] = vmn, vmx
        return valid, mn, mx

    def _valid_into(self, a: np.ndarray, hi: np.ndarray, vmn: np.ndarray, vmx: np.ndarray) -> None:
        """Min / max over the non-empty ranges [a, hi) into ``vmn`` and ``vmx``."""
        b = hi - 1  # inclusive
        ba = a // _BLOCK
        inside = ba == b // _BLOCK
        i = np.flatnonzero(inside)
        _short(self._min[0], self._max[0], a[i], b[i] + 1, vmn, vmx, i)
        del i
        x = np.flatnonzero(~inside)
        del inside
        if len(x):
            xa, xb = a[x], b[x]
            vmn[x] = np.minimum(self._suf_min[xa], self._pre_min[xb])
            vmx[x] = np.maximum(self._suf_max[xa], self._pre_max[xb])
            fa, fb = ba[x] + 1, xb // _BLOCK
            far = np.flatnonzero(fb - fa >= 1)  # whole blocks between
            if len(far):
                y = x[far]
                ymn, ymx = np.empty(len(y), np.int64), np.empty(len(y), np.int64)
                _sparse(self._bmin, self._bmax, fa[far], fb[far], ymn, ymx, np.arange(len(y)))
                vmn[y] = np.minimum(vmn[y], ymn)
                vmx[y] = np.maximum(vmx[y], ymx)


#: ranges per step of :meth:`RangeMinMax.query`
_QUERY_CHUNK = 1 << 16
#: values per block of :class:`RangeMinMax`
_BLOCK = 32


def _levels(mins: np.ndarray, maxs: np.ndarray, longest: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sparse tables: level k holds the min / max of the 2**k values from each index, for
    the spans up to ``longest`` values."""
    tmin, tmax = [mins], [maxs]
    k = 1
    while 2 * k <= longest:
        pm, px = tmin[-1], tmax[-1]
        tmin.append(np.minimum(pm[:-k], pm[k:]))
        tmax.append(np.maximum(px[:-k], px[k:]))
        k *= 2
    return tmin, tmax


def _short(mins: np.ndarray, maxs: np.ndarray, a: np.ndarray, end: np.ndarray,
           out_min: np.ndarray, out_max: np.ndarray, at: np.ndarray) -> None:
    """Min / max over [a, end) (non-empty spans inside one block) into ``out_*[at]``: the
    first values, then one step per further value over the spans that reach it."""
    if not len(a):
        return
    mn, mx = mins[a], maxs[a]
    left = np.flatnonzero(end - a > 1)
    step = 1
    while len(left):
        pos = a[left] + step
        mn[left] = np.minimum(mn[left], mins[pos])
        mx[left] = np.maximum(mx[left], maxs[pos])
        step += 1
        left = left[end[left] - a[left] > step]
    out_min[at] = mn
    out_max[at] = mx


def _sparse(tmin: list[np.ndarray], tmax: list[np.ndarray], a: np.ndarray, end: np.ndarray,
            out_min: np.ndarray, out_max: np.ndarray, at: np.ndarray) -> None:
    """Min / max over [a, end) (non-empty spans the tables reach) into ``out_*[at]``."""
    if not len(a):
        return
    level = np.floor(np.log2(end - a)).astype(np.int64)
    b = end - (1 << level)
    for lv in unique(level):
        sel = level == lv
        t0, t1 = tmin[lv], tmax[lv]
        out_min[at[sel]] = np.minimum(t0[a[sel]], t0[b[sel]])
        out_max[at[sel]] = np.maximum(t1[a[sel]], t1[b[sel]])


def run_starts(*labels: np.ndarray) -> np.ndarray:
    """Indices where any of the label arrays changes value (run-length boundaries)."""
    n = len(labels[0])
    if not n:
        return np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for lab in labels:
        change[1:] |= lab[1:] != lab[:-1]
    return np.flatnonzero(change)
