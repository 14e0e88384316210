"""The nesting of spans on their threads (each span's parent), made once per trace for
one set of rows: ``op_stats`` nests the ops and runtime calls, the critical path of a
window of host calls alone nests the same calls (a trace without steps), and both read
this one."""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..derive.intervals import nesting_depth
from ..lowlevel.compiled import optional
from ..trace.core import Trace
from ..trace.sorting import lexsort

_nest = optional(__package__, "_nest")  # NumPy's passes otherwise (lowlevel/compiled.py)
#: "c" (``_nest.c``) or "python": which pass finds the depths and parents
IMPLEMENTATION = "c" if _nest is not None else "python"


def parents(track: np.ndarray, start: np.ndarray, end: np.ndarray,
            compiled: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``nesting_depth``'s (order, depth) of the spans and each one's parent (a position
    in ``order``, -1 for none): the nearest span before it one level up. After the sort,
    one loop in C (``_nest.depths``) where built and ``compiled``; else the ends sorted,
    searched and a pass per level in NumPy (the same arrays, tests/test_nesting_depth.py)."""
    if _nest is not None and compiled:
        cols = [track, start, end]
        del track, start, end
        order, sorted_cols = _sorted(cols)
        depth, parent = np.empty(len(order), np.int64), np.empty(len(order), np.int64)
        _nest.depths(*sorted_cols, depth, parent)
        return order, depth, parent
    order, _, depth = nesting_depth(track, start, end)
    parent = np.full(len(order), -1, np.int64)
    top = int(depth.max(initial=0))
    if not top:
        return order, depth, parent
    # the positions of each depth, ascending: one stable sort of the depths (a radix sort
    # where they fit 16 bits), sliced per level
    by_depth = np.argsort(depth.astype(np.uint16) if top < 1 << 16 else depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(top + 2))
    for d in range(1, top + 1):
        ch, par = by_depth[bounds[d]:bounds[d + 1]], by_depth[bounds[d - 1]:bounds[d]]
        if len(ch) and len(par):
            p = np.searchsorted(par, ch) - 1
            parent[ch[p >= 0]] = par[p[p >= 0]]
    return order, depth, parent


def _sorted(cols: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """:func:`_nonempty_order` of the spans' ``cols`` (track, start, end), and those in
    that order as int64, each let go once gathered (``cols`` is emptied: a caller's
    temporaries then do not outlive the sort, the peak of ``op_stats``' nesting,
    docs/benchmarks.md "Whole-process scale")."""
    cols[:] = [np.asarray(a, np.int64) for a in cols]
    order = _nonempty_order(*cols)
    return order, [cols.pop(0)[order] for _ in range(3)]


def _nonempty_order(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The spans of some length (an empty one contains nothing) by (track, start, longest
    first); where every span has some length, sorted without a copy of each key."""
    nonempty = end > start
    if nonempty.all():
        return lexsort((start - end, start, track))
    at = np.flatnonzero(nonempty)
    del nonempty
    return at[lexsort(((start - end)[at], start[at], track[at]))]


def parents_and_after(track: np.ndarray, start: np.ndarray, end: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`parents`, and per position the first later position of its track one level
    up or higher, or its track's end (where the spans nest: the end of its subtree), in
    the same C loop; None for that where ``_nest`` is not built (the caller finds it
    otherwise)."""
    if _nest is None:
        return (*parents(track, start, end), None)
    cols = [track, start, end]
    del track, start, end
    order, sorted_cols = _sorted(cols)
    depth, parent, after = (np.empty(len(order), np.int64) for _ in range(3))
    _nest.depths(*sorted_cols, depth, parent, after)
    return order, depth, parent, after


def of_rows(trace: Trace, rows: np.ndarray, keep: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`parents` of the events ``rows`` (ascending) on their OS threads
    (``cache.threads``), made once per trace for each set of rows: looked up by their
    count and ends, then compared whole with the rows kept. Kept compact for the rest of
    the command: the rows, order, depths and parents as int32 where the trace's rows fit
    (16 bytes per row, not 32; a digest of the rows would import hashlib into every
    summary), and handed out so. ``keep=False``: looked up, but what is made is not kept
    (handed out as :func:`parents` gives it) for a caller that knows no later one asks for
    these rows: a million-event summary held 20 MB of nesting through every analysis after
    ``op_stats`` that way (docs/benchmarks.md "Whole-process scale")."""
    store: dict[tuple[int, int, int], list[tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]]] = \
        cache.memo(trace, "nesting", lambda t: {})
    rows = np.asarray(rows, np.int64)
    n = len(rows)
    key = (n, int(rows[0]) if n else -1, int(rows[-1]) if n else -1)
    kept = store.get(key, [])
    for seen, found in kept:
        if np.array_equal(seen, rows):
            return found
    ev = trace.events
    start = np.asarray(ev["start_ns"][rows], np.int64)
    found = parents(cache.threads(trace)[ev["track"][rows]], start, start + np.asarray(ev["dur_ns"][rows], np.int64))
    if keep:
        small = np.int32 if trace.n_events < 1 << 31 else np.int64
        found = (found[0].astype(small), found[1].astype(small), found[2].astype(small))
        store.setdefault(key, []).append((rows.astype(small), found))
    return found


def outermost(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which of the host events ``rows`` no other of them encloses on the same thread."""
    ev = trace.events
    th = cache.threads(trace)[ev["track"][rows]]
    st = ev["start_ns"][rows]
    en = st + ev["dur_ns"][rows]
    order = np.lexsort((-en, st, th))
    th_o, st_o, en_o = th[order], st[order], en[order]
    outer = np.ones(len(rows), bool)
    bounds = np.flatnonzero(np.r_[True, th_o[1:] != th_o[:-1], True]) if len(rows) else np.zeros(0, np.int64)
    for a, b in zip(bounds[:-1], bounds[1:]):  # one pass per thread
        prev_end = np.maximum.accumulate(en_o[a:b])
        outer[order[a + 1:b]] = st_o[a + 1:b] >= prev_end[:-1]
    return outer


def same_name_wrappers(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which of the host events ``rows`` enclose another of them with the same name on
    the same thread, at any depth (autocast's ``aten::softmax`` around ``aten::softmax``,
    ``aten::layer_norm`` around ``aten::to`` and ``aten::layer_norm``, ``aten::where``
    around the ``aten::where`` of the broadcast shapes): a per-name sum over ``rows``
    that keeps them counts such a call twice; the innermost is the one that did the work
    (its shapes are the ones computed)."""
    ev = trace.events
    start = np.asarray(ev["start_ns"][rows], np.int64)
    order, _, parent = parents(cache.threads(trace)[ev["track"][rows]], start,
                               start + np.asarray(ev["dur_ns"][rows], np.int64))
    name = ev["name"][rows][order]
    wraps = np.zeros(len(order), bool)
    up = parent.copy()
    while True:  # one step up the ancestors per pass (as deep as the nesting)
        at = np.flatnonzero(up >= 0)
        if not len(at):
            break
        same = name[up[at]] == name[at]
        wraps[up[at][same]] = True
        up[at] = parent[up[at]]
    out = np.zeros(len(rows), bool)
    out[order] = wraps
    return out
