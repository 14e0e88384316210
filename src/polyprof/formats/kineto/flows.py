"""Flows: ``s``/``t``/``f`` endpoints -> columns per slice, then bound to events and chained.

An endpoint binds to the innermost slice on its thread that encloses its time (``s``,
``t``, and ``f`` with ``bp: e``), else to the next slice to start (``f``). Endpoints of
one (category, id) are chained in time order; ids that are not non-negative integers
(strings, ``id2``, ``bind_id``) are numbered by their text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from ...lowlevel.heap import TRIM_BYTES, trim
from ...trace.categories import Kind, kind_of
from ...trace.sorting import break_sorted_ties, lexsort, member, unique
from . import gather
from .codes import _distinct
from .events import _F, _S, _Event
from ...lowlevel.compiled import optional

if TYPE_CHECKING:
    from .collector import _Collector

_nesting = optional(__package__, "_nesting")  # built by setup.py; previous_greater_python otherwise (lowlevel/compiled.py)
#: "c" (``_nesting.c``) or "python": which :func:`previous_greater` is in use
IMPLEMENTATION = "c" if _nesting is not None else "python"


def add_flow_slice(col: "_Collector", sel: list[_Event], ph: np.ndarray, ts_ns: np.ndarray) -> None:
    """The flow endpoints of one slice as columns (ids, categories, threads, times, binding)."""
    ids = gather.values(sel, "id")
    if None in ids:
        for j, e in enumerate(sel):
            if ids[j] is None:
                id2 = e.id2
                ids[j] = next(iter(id2.values()), None) if isinstance(id2, dict) and id2 else e.bind_id
    fid = None
    if set(map(type, ids)) == {int}:
        try:
            fid = np.array(ids, np.int64)
        except OverflowError:
            fid = None
    if fid is None or np.any(fid < 0):  # other ids: numbered by their text, below zero
        names = col.flow_names
        fid = np.array([i if type(i) is int and 0 <= i < 2 ** 63 else
                        -2 - names.setdefault(msgspec.json.encode(i), len(names)) for i in ids], np.int64)
    enclosing = ph != _F
    f_rows = np.flatnonzero(~enclosing)
    enclosing[f_rows] = [sel[i].bp == "e" for i in f_rows.tolist()]
    add_flow_columns(col, col.field_codes(sel, "cat", np.int64), fid, ph, col.field_codes(sel, "pid", np.int64),
                     col.field_codes(sel, "tid", np.int64), ts_ns, enclosing)


def add_v2_slice(col: "_Collector", sel: list[_Event], base: int) -> None:
    """Flow events v2 of one slice of X/B events: ``bind_id`` with ``flow_out`` (the slice
    starts the flow) and/or ``flow_in`` (it ends there), kept as (row, id code, in, out)."""
    binds = gather.values(sel, "bind_id")
    if binds.count(None) == len(binds):
        return
    rows = [i for i, b in enumerate(binds) if b is not None]
    fin = np.array([sel[i].flow_in is True for i in rows], bool)
    fout = np.array([sel[i].flow_out is True for i in rows], bool)
    keep = fin | fout
    if not keep.any():
        return
    names = col.flow_names
    codes = np.array([names.setdefault(msgspec.json.encode(binds[i]), len(names)) for i in rows], np.int64)
    col.flow_v2.append((np.asarray(rows, np.int64)[keep] + base, codes[keep], fin[keep], fout[keep]))


def bind_v2(col: "_Collector", ts: np.ndarray, cat_c: np.ndarray) -> None:
    """Flows v2: each ``flow_in`` slice is the end of a flow from the latest ``flow_out``
    slice of its bind_id before it (a slice may be both), as Perfetto links them."""
    if not col.flow_v2:
        return
    rows, ids, fin, fout = (np.concatenate(x) for x in zip(*col.flow_v2))
    order = lexsort((rows, ts[rows], ids))
    rows, ids, fin, fout = rows[order], ids[order], fin[order], fout[order]
    pos = np.arange(len(rows))
    last_out = np.maximum.accumulate(np.concatenate([[-1], np.where(fout, pos, -1)[:-1]]))
    ok = fin & (last_out >= 0)
    ok[ok] &= ids[last_out[ok]] == ids[ok]
    src, dst = rows[last_out[ok]], rows[ok]
    cats = cat_c[src]
    for c in _distinct(cats).tolist():
        m = cats == c
        col.b.flows(src[m], dst[m], ids[ok][m] + 1, col.b.strings[c])


def add_flow_columns(col: "_Collector", cat: np.ndarray, fid: np.ndarray, ph: np.ndarray, pid: np.ndarray,
                     tid: np.ndarray, ts_ns: np.ndarray, enclosing: np.ndarray) -> None:
    """Flow endpoints as columns: category string ids, ids (numbers >= 0), phase codes
    (``_S``/``_T``/``_F``), pid and tid codes, times, whether each binds to the slice
    that encloses it (``s``, ``t``, ``f`` with ``bp: e``) or to the next one."""
    fc = col.flow_cols
    for key, values in (("cat", cat), ("id", fid), ("ph", ph), ("pid", pid), ("tid", tid), ("ts", ts_ns),
                        ("enclosing", enclosing)):
        fc[key].append(values)


def bind_flows(col: "_Collector", track: np.ndarray, ts: np.ndarray, dur: np.ndarray, cat_c: np.ndarray,
               track_of_pair: dict[int, int], ntid: int, base: int) -> None:
    """Bind the collected endpoints to event rows, chain them, add the flows to the builder.
    Each column of the endpoints is joined when needed and its parts freed (``col.flow_cols``
    is emptied)."""
    fc = col.flow_cols
    if not fc["id"] or not len(ts):
        col.unbound_flows = sum(len(x) for x in fc["id"])
        return

    def take(k: str) -> np.ndarray:
        parts, fc[k] = fc[k], []
        return np.concatenate(parts)

    fpair = take("pid").astype(np.int64, copy=False)
    fpair *= ntid
    fpair += take("tid")
    ftrack = endpoint_tracks(track_of_pair, fpair)
    del fpair
    fts = take("ts").astype(np.int64, copy=False)
    fts += base
    if len(ts) * 8 >= TRIM_BYTES:  # a big load's freed pages back before the sorts (a small one reuses them)
        trim()
    rows = _bind(track, ts, dur, _annotation_mask(col.b.strings, cat_c), ftrack, fts, take("enclosing"))
    del ftrack
    add_chained(col, {"cat": take("cat"), "id": take("id"), "ph": take("ph"), "ts": fts, "row": rows})


def endpoint_tracks(track_of_pair: dict[int, int], fpair: np.ndarray) -> np.ndarray:
    """The track of each endpoint's (pid, tid) pair; -1 where that pair has no events."""
    pairs = np.fromiter(track_of_pair, np.int64, len(track_of_pair))  # ascending (_distinct)
    tracks = np.fromiter(track_of_pair.values(), np.int32, len(track_of_pair))
    if not len(pairs):
        return np.full(len(fpair), -1, np.int32)
    at = np.minimum(np.searchsorted(pairs, fpair), len(pairs) - 1)
    return np.where(pairs[at] == fpair, tracks[at], -1)


def add_chained(col: "_Collector", ends: dict[str, np.ndarray]) -> None:
    """Chain the endpoints (``ends``: their ``cat``, ``id``, ``ph``, ``ts`` and the event
    ``row`` each is bound to, -1: none) of one (category, id) in time order and add the
    flows to the builder; the endpoints left count as unbound. ``ends`` is emptied as
    its arrays are used, so that they can be freed (millions, in chunks.py)."""
    # endpoints by (cat, id), then time, f last, and position (lexsort is stable; ``ends``
    # is in file order): s -> t -> ... -> f; s and t at one time in the file's order, as
    # Perfetto and Chrome's trace viewer take them (a step, then a new start from its
    # slice); a (cat, id) pair's number (its key) in sorted order
    order = lexsort((ends["ph"] == _F, ends.pop("ts"), ends["id"], ends["cat"]))
    c_s = ends.pop("cat")[order]
    i_s = ends.pop("id")[order]
    ph_s = ends.pop("ph")[order]
    row_s = ends.pop("row")[order]
    del order
    same = (c_s[1:] == c_s[:-1]) & (i_s[1:] == i_s[:-1])
    key = np.zeros(len(c_s), np.int32 if len(c_s) < 2 ** 31 else np.int64)
    np.cumsum(~same, out=key[1:])
    link = same & (ph_s[:-1] != _F) & (ph_s[1:] != _S)
    src, dst = row_s[:-1][link], row_s[1:][link]
    # a lone s/f pair whose f is earlier (skewed clocks) still belongs together
    swap = same & (ph_s[:-1] == _F) & (ph_s[1:] == _S)
    cand = np.flatnonzero(swap)
    if len(cand):  # the pair's size, from where its key starts and ends (keys ascend)
        k = key[cand]
        swap[cand] = np.searchsorted(key, k, "right") - np.searchsorted(key, k, "left") == 2
    del ph_s, same, cand
    src = np.concatenate([src, row_s[1:][swap]])
    dst = np.concatenate([dst, row_s[:-1][swap]])
    at = np.concatenate([np.flatnonzero(link) + 1, np.flatnonzero(swap) + 1])  # sorted positions
    del row_s, link, swap
    ok = (src >= 0) & (dst >= 0) & (src != dst)
    col.unbound_flows = int(np.count_nonzero(~ok))
    src, dst, at = src[ok], dst[ok], at[ok]
    fkey = key[at]
    ids = i_s[at]
    ids = np.where(ids >= 0, ids, fkey + 1)
    del i_s, key
    cats = c_s[at]
    for c in _distinct(cats).tolist():
        m = cats == c
        col.b.flows(src[m], dst[m], ids[m], col.b.strings[c])


def _annotation_mask(strings: list[str], cat_c: np.ndarray) -> np.ndarray:
    ann = [i for i, s in enumerate(strings)
           if kind_of(s) in (Kind.ANNOTATION, Kind.DEVICE_ANNOTATION, Kind.STEP)]
    return member(cat_c, np.array(ann, np.int32)) if ann else np.zeros(len(cat_c), bool)


def _bind(track: np.ndarray, start: np.ndarray, dur: np.ndarray, annotation: np.ndarray,
          qtrack: np.ndarray, qts: np.ndarray, enclosing: np.ndarray) -> np.ndarray:
    """Event row each flow endpoint binds to (-1 if none).

    Enclosing binding (``s``, ``t``, ``f`` with ``bp: e``): the innermost slice on the
    endpoint's thread that contains its time (ends inclusive); at equal start and duration
    a real op wins over an annotation. Otherwise (``f`` without ``bp``): the next slice to
    start. Linear in the slices and endpoints: slices sorted by (track, start, longest
    first), the one wanted is the nearest at or before the last slice starting at or
    before the time whose end reaches it, found along the chain of previous greater ends
    (:func:`previous_greater`), as long as the nesting is deep, all endpoints at once.

    Memory: the slices' sort key, order, track, end and chain (about 28 bytes a slice
    beside the columns given), each made in place or a block at a time: this is the
    peak of a Kineto load (docs/benchmarks.md, "Linear growth").
    """
    out = np.full(len(qts), -1, np.int64)
    if not len(start) or not len(qts):
        return out
    key = _TrackTime(track, start, qtrack, qts)
    order, sk = _slice_order(key, track, start, dur, annotation)
    t_s = track[order]
    e_s = start[order]
    for lo in range(0, len(e_s), _BLOCK):  # end = start + dur, the durations gathered a block at a time
        e_s[lo:lo + _BLOCK] += dur[order[lo:lo + _BLOCK]]
    prev = previous_greater(t_s, e_s)
    valid = qtrack >= 0
    enc = np.flatnonzero(valid & enclosing)
    nxt = np.flatnonzero(valid & ~enclosing)
    del valid
    if len(enc):  # enclosing: from the last slice starting at or before the time, up the chain
        q_track, t_q = qtrack[enc], qts[enc]
        first = _first_of_track(t_s, q_track)
        p = np.searchsorted(sk, key(q_track, t_q), "right") - 1
        del q_track
        live = p >= first
        while True:
            live &= p >= first
            pend = live & (e_s[np.maximum(p, 0)] < t_q)
            if not pend.any():
                break
            p = np.where(pend, prev[np.maximum(p, 0)], p)
        out[enc[live]] = order[p[live]]
    if len(nxt):  # the next slice to start on the track
        q_track = qtrack[nxt]
        p = np.searchsorted(sk, key(q_track, qts[nxt]), "left")
        ok = p < len(sk)
        ok[ok] &= t_s[p[ok]] == q_track[ok]
        out[nxt[ok]] = order[p[ok]]
    return out


#: rows handled at a time where a whole column of temporaries is not needed at once
_BLOCK = 1 << 16


def _first_of_track(t_s: np.ndarray, q_track: np.ndarray) -> np.ndarray:
    """``np.searchsorted(t_s, q_track, "left")`` (``t_s``: the slices' tracks, sorted;
    ``q_track``: tracks, none negative): each track's first slice found once, then looked
    up per query. A binary search per query into the whole column grows faster than the
    trace (a cache miss a step; docs/benchmarks.md, "Linear growth")."""
    hi = int(q_track.max()) if len(q_track) else -1
    if hi > max(1 << 22, len(t_s)):  # track ids too sparse for a table
        return np.searchsorted(t_s, q_track.astype(t_s.dtype, copy=False), "left")
    return np.searchsorted(t_s, np.arange(hi + 1, dtype=t_s.dtype), "left")[q_track]


def _slice_order(key: "_TrackTime", track: np.ndarray, start: np.ndarray, dur: np.ndarray,
                 annotation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slices' order by (track, start, longest first, real op after annotation, row)
    (``lexsort((~annotation, -dur, start, track))``) and their (track, start) keys in
    that order. One sort of the int64 key (with the row folded in where it fits, so any
    sort is stable); rows that tie on the key are put in order by duration and kind
    alone. The order is int32 where the rows fit. The keys are sorted in place: where
    the row fits in, the order is read back from the sorted keys' low part, else it is
    a stable argsort of them (no gather of the keys by the order, no other column)."""
    sk = key(track, start)
    n = len(sk)
    small = n < 2 ** 31
    if (int(sk.max()) + 1) * n < 2 ** 63:  # the row as the last key: all distinct
        sk *= n
        for lo in range(0, n, _BLOCK):
            sk[lo:lo + _BLOCK] += np.arange(lo, min(lo + _BLOCK, n), dtype=np.int64)
        sk.sort()
        order: np.ndarray = np.empty(n, np.int32 if small else np.int64)
        for lo in range(0, n, _BLOCK):
            np.remainder(sk[lo:lo + _BLOCK], n, out=order[lo:lo + _BLOCK], casting="unsafe")
        sk //= n
    else:
        order = np.argsort(sk, kind="stable")
        sk.sort(kind="stable")
        if small:
            order = order.astype(np.int32)
    return break_sorted_ties(order, sk, lambda rows: [-dur[rows], ~annotation[rows]]), sk


def previous_greater(track: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each slice (sorted by track), the nearest earlier one on its track whose end is
    greater (-1 if none): the enclosing slice where slices nest. Int32 where the rows
    fit. ``_nesting.c`` walks a stack kept in the result (linear, no other memory);
    :func:`previous_greater_python` is the same without it."""
    if _nesting is None or track.dtype.kind not in "iu" or track.dtype.itemsize not in (4, 8) \
            or end.dtype != np.int64:
        return previous_greater_python(track, end)
    prev = np.empty(len(end), np.int32 if len(end) < 2 ** 31 else np.int64)
    _nesting.previous_greater(np.ascontiguousarray(track), np.ascontiguousarray(end), prev)
    return prev


def previous_greater_python(track: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`previous_greater` by pointer jumping: each round a slice skips to its
    candidate's own candidate while that one ends no later, so chains halve (a few
    rounds, each linear; a few dozen on deep call trees), a block of slices at a time (a
    block may see the candidates an earlier one moved: any candidate that every slice
    between it and the slice ends no later than the slice is a right one to start from)."""
    n = len(end)
    prev = np.arange(-1, n - 1, dtype=np.int32 if n < 2 ** 31 else np.int64)
    if n:
        prev[1:][track[1:] != track[:-1]] = -1
    todo = [_jump(prev, end, np.arange(lo, min(lo + _BLOCK, n), dtype=prev.dtype)) for lo in range(0, n, _BLOCK)]
    while todo:
        left = np.concatenate(todo)
        todo = [t for t in (_jump(prev, end, left[lo:lo + _BLOCK]) for lo in range(0, len(left), _BLOCK)) if len(t)]
    return prev


def _jump(prev: np.ndarray, end: np.ndarray, todo: np.ndarray) -> np.ndarray:
    """One round of :func:`previous_greater` for the slices ``todo``: those whose candidate
    ends no later skip to its candidate; the slices that may skip again."""
    todo = todo[prev[todo] >= 0]
    c = prev[todo]
    skip = end[c] <= end[todo]
    todo = todo[skip]
    nxt = prev[c[skip]]
    prev[todo] = nxt
    return todo[nxt >= 0]


class _TrackTime:
    """One sortable int64 per (track, time) over the slices' and endpoints' times."""

    def __init__(self, track: np.ndarray, start: np.ndarray, qtrack: np.ndarray, qts: np.ndarray):
        self.lo = min(int(start.min()), int(qts.min(initial=start[0])))
        self.width = max(int(start.max()), int(qts.max(initial=start[0]))) - self.lo + 2
        ntrack = int(max(track.max(initial=0), qtrack.max(initial=0))) + 2
        self.grid = unique(np.concatenate([start, qts])) if self.width * ntrack >= 2 ** 62 else None

    def __call__(self, track: np.ndarray, times: np.ndarray) -> np.ndarray:
        """``track * width + (time - lo)`` (or the time's place in the grid), made in place
        in one new int64 column (wrapping sums: the result is in range)."""
        out = track.astype(np.int64)
        if self.grid is None:
            out *= self.width
            out -= self.lo
            out += times
            return out
        out *= len(self.grid) + 1
        for lo in range(0, len(out), _BLOCK):
            out[lo:lo + _BLOCK] += np.searchsorted(self.grid, times[lo:lo + _BLOCK])
        return out
