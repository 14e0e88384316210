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

from ...trace.categories import Kind, kind_of
from ...trace.sorting import lexsort, member
from . import gather
from .codes import _distinct
from .events import _F, _S, _Event

if TYPE_CHECKING:
    from .collector import _Collector


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
    """Bind the collected endpoints to event rows, chain them, add the flows to the builder."""
    fc = col.flow_cols
    if not fc["id"] or not len(ts):
        col.unbound_flows = sum(len(x) for x in fc["id"])
        return
    fcat, fid = np.concatenate(fc["cat"]), np.concatenate(fc["id"])
    ph = np.concatenate(fc["ph"])
    fts = np.concatenate(fc["ts"]) + base
    fpair = np.concatenate(fc["pid"]) * ntid + np.concatenate(fc["tid"])
    ftrack = endpoint_tracks(track_of_pair, fpair)
    enclosing = np.concatenate(fc["enclosing"])
    rows = _bind(track, ts, dur, _annotation_mask(col.b.strings, cat_c), ftrack, fts, enclosing)
    del ftrack, enclosing
    add_chained(col, {"cat": fcat, "id": fid, "ph": ph, "ts": fts, "row": rows})


def endpoint_tracks(track_of_pair: dict[int, int], fpair: np.ndarray) -> np.ndarray:
    """The track of each endpoint's (pid, tid) pair; -1 where that pair has no events."""
    pairs = np.fromiter(track_of_pair, np.int64, len(track_of_pair))  # ascending (_distinct)
    tracks = np.fromiter(track_of_pair.values(), np.int64, len(track_of_pair))
    if not len(pairs):
        return np.full(len(fpair), -1, np.int64)
    at = np.minimum(np.searchsorted(pairs, fpair), len(pairs) - 1)
    return np.where(pairs[at] == fpair, tracks[at], -1)


def add_chained(col: "_Collector", ends: dict[str, np.ndarray]) -> None:
    """Chain the endpoints (``ends``: their ``cat``, ``id``, ``ph``, ``ts`` and the event
    ``row`` each is bound to, -1: none) of one (category, id) in time order and add the
    flows to the builder; the endpoints left count as unbound. ``ends`` is emptied as
    its arrays are used, so that they can be freed (millions, in chunks.py)."""
    # endpoints by (cat, id), then time, phase and position (lexsort is stable):
    # s -> t -> ... -> f; a (cat, id) pair's number (its key) in sorted order
    order = lexsort((ends["ph"], ends.pop("ts"), ends["id"], ends["cat"]))
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
    """
    out = np.full(len(qts), -1, np.int64)
    if not len(start) or not len(qts):
        return out
    order = lexsort((~annotation, -dur, start, track))
    t_s, s_s = track[order].astype(np.int64), start[order]
    e_s = s_s + dur[order]
    key = _TrackTime(t_s, s_s, qtrack, qts)
    sk = key(t_s, s_s)
    valid = qtrack >= 0
    qk = key(np.where(valid, qtrack, 0), qts)
    first = np.searchsorted(t_s, qtrack, "left")  # the endpoint's track's first slice
    # enclosing: from the last slice starting at or before the time, up the chain
    enc = np.flatnonzero(valid & enclosing)
    p = np.searchsorted(sk, qk[enc], "right") - 1
    prev = previous_greater(t_s, e_s)
    t_q = qts[enc]
    live = p >= first[enc]
    while True:
        live &= p >= first[enc]
        pend = live & (e_s[np.maximum(p, 0)] < t_q)
        if not pend.any():
            break
        p = np.where(pend, prev[np.maximum(p, 0)], p)
    out[enc[live]] = order[p[live]]
    # next slice to start on the track
    nxt = np.flatnonzero(valid & ~enclosing)
    if len(nxt):
        p = np.searchsorted(sk, qk[nxt], "left")
        ok = p < len(sk)
        ok[ok] &= t_s[p[ok]] == qtrack[nxt][ok]
        out[nxt[ok]] = order[p[ok]]
    return out


def previous_greater(track: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each slice (sorted by track), the nearest earlier one on its track whose end is
    greater (-1 if none): the enclosing slice where slices nest. Pointer jumping, every
    slice at once: each round a slice skips to its candidate's own candidate while that
    one ends no later, so chains halve (a few rounds, each linear)."""
    n = len(end)
    prev = np.arange(-1, n - 1, dtype=np.int64)
    if n:
        prev[1:][track[1:] != track[:-1]] = -1
    todo = np.flatnonzero(prev >= 0)
    while len(todo):
        c = prev[todo]
        skip = end[c] <= end[todo]
        todo = todo[skip]
        nxt = prev[c[skip]]
        prev[todo] = nxt
        todo = todo[nxt >= 0]
    return prev


class _TrackTime:
    """One sortable int64 per (track, time) over the slices' and endpoints' times."""

    def __init__(self, t_s: np.ndarray, s_s: np.ndarray, qtrack: np.ndarray, qts: np.ndarray):
        times = np.concatenate([s_s, qts])
        self.lo = int(times.min())
        self.width = int(times.max()) - self.lo + 2
        ntrack = int(max(t_s.max(initial=0), qtrack.max(initial=0))) + 2
        self.grid = np.unique(times) if self.width * ntrack >= 2 ** 62 else None

    def __call__(self, track: np.ndarray, times: np.ndarray) -> np.ndarray:
        if self.grid is None:
            return track.astype(np.int64) * self.width + (times - self.lo)
        return track.astype(np.int64) * (len(self.grid) + 1) + np.searchsorted(self.grid, times)
