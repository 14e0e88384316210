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
    # number the distinct (cat, id) pairs in sorted order; first: a pair's first endpoint
    by_pair = lexsort((fid, fcat))  # stable
    new = np.ones(len(by_pair), bool)
    new[1:] = (fcat[by_pair][1:] != fcat[by_pair][:-1]) | (fid[by_pair][1:] != fid[by_pair][:-1])
    key = np.empty(len(by_pair), np.int64)
    key[by_pair] = np.cumsum(new) - 1
    first = by_pair[new]
    ph = np.concatenate(fc["ph"])
    fts = np.concatenate(fc["ts"]) + base
    fpair = np.concatenate(fc["pid"]) * ntid + np.concatenate(fc["tid"])
    pairs = np.fromiter(track_of_pair, np.int64, len(track_of_pair))  # ascending (_distinct)
    tracks = np.fromiter(track_of_pair.values(), np.int64, len(track_of_pair))
    at = np.minimum(np.searchsorted(pairs, fpair), len(pairs) - 1)
    ftrack = np.where(pairs[at] == fpair, tracks[at], -1)
    enclosing = np.concatenate(fc["enclosing"])
    rows = _bind(track, ts, dur, _annotation_mask(col.b.strings, cat_c), ftrack, fts, enclosing)
    # chain endpoints of one (cat, id): s -> t -> ... -> f in time order
    pos = np.arange(len(key))
    order = lexsort((pos, ph, fts, key))
    k_s, ph_s, row_s = key[order], ph[order], rows[order]
    same = k_s[1:] == k_s[:-1]
    link = same & (ph_s[:-1] != _F) & (ph_s[1:] != _S)
    src, dst = row_s[:-1][link], row_s[1:][link]
    # a lone s/f pair whose f is earlier (skewed clocks) still belongs together
    sizes = np.bincount(key)
    swap = same & (ph_s[:-1] == _F) & (ph_s[1:] == _S) & (sizes[k_s[:-1]] == 2)
    src = np.concatenate([src, row_s[1:][swap]])
    dst = np.concatenate([dst, row_s[:-1][swap]])
    fkey = np.concatenate([k_s[1:][link], k_s[1:][swap]])
    ok = (src >= 0) & (dst >= 0) & (src != dst)
    col.unbound_flows = int(np.count_nonzero(~ok))
    src, dst, fkey = src[ok], dst[ok], fkey[ok]
    ids = fid[first][fkey]
    ids = np.where(ids >= 0, ids, fkey + 1)
    cats = fcat[first][fkey]
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
    endpoint's thread that contains its time; at equal start and duration a real op
    wins over an annotation. Otherwise (``f`` without ``bp``): the next slice to start.
    """
    out = np.full(len(qts), -1, np.int64)
    order = lexsort((~annotation, -dur, start, track))
    t_sorted = track[order]
    end = start + dur
    for t in _distinct(qtrack[qtrack >= 0]).tolist():
        lo, hi = np.searchsorted(t_sorted, t, "left"), np.searchsorted(t_sorted, t, "right")
        if lo == hi:
            continue
        seg = order[lo:hi]
        s_seg = start[seg]
        q = np.flatnonzero(qtrack == t)
        enc = enclosing[q]
        # enclosing: last slice starting at or before ts, walked back until one contains ts
        qe = q[enc]
        pos = np.searchsorted(s_seg, qts[qe], "right") - 1
        cand = np.where(pos >= 0, seg[np.maximum(pos, 0)], -1)
        good = (pos >= 0) & (end[np.maximum(cand, 0)] >= qts[qe])
        out[qe[good]] = cand[good]
        for i in np.flatnonzero(~good & (pos >= 0)).tolist():
            t_q = qts[qe[i]]
            for j in range(pos[i] - 1, max(pos[i] - 4096, -1), -1):
                if end[seg[j]] >= t_q:
                    out[qe[i]] = seg[j]
                    break
        # next slice
        qn = q[~enc]
        if len(qn):
            pos = np.searchsorted(s_seg, qts[qn], "left")
            ok = pos < len(seg)
            out[qn[ok]] = seg[pos[ok]]
    return out
