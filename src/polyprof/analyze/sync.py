"""Host time spent in synchronising calls, per host thread, inside the analysed windows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import re

import numpy as np

from ..derive import cache
from ..derive.intervals import TimeKeys, covered, union
from ..trace.core import Trace
from ..trace.vocabulary import BLOCKING_COPIES as _BLOCKING_COPIES
from ..trace.vocabulary import SYNC_CATEGORIES, SYNC_MARKERS  # noqa: F401  (SYNC_CATEGORIES: for callers)
from .breakdown import busy_segments
from .common import analysed_stretches, empty_frame, frame
from .frames import order_desc
from .window import WindowArg, view
from ..trace.sorting import lexsort

if TYPE_CHECKING:
    from .table import Table

COLUMNS = ["thread", "calls", "sync_ns", "window_ns", "share_pct"]


def windows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Where host waiting counts: the steps (host side) if there are steps, else the analysed
    span (a time window's stretches where it has several)."""
    steps = cache.steps(trace)
    if len(steps):
        return union(np.asarray(steps.start, np.int64), np.asarray(steps.end, np.int64))
    return analysed_stretches(trace)


def overlapping(ws: np.ndarray, we: np.ndarray, st: np.ndarray, en: np.ndarray) -> np.ndarray:
    """Which calls ``[st, en)`` overlap one of the windows (disjoint, in time order: the
    last one starting before a call's end reaches past its start): one begun before a
    window and waiting on into it too."""
    pos = np.searchsorted(ws, en, side="left") - 1
    return (pos >= 0) & (st < we[np.maximum(pos, 0)])


def device_idle_by(trace: Trace, starts: np.ndarray, ends: np.ndarray, ws: np.ndarray, we: np.ndarray) -> int | None:
    """How long the devices sat idle in and after the sync calls ``[starts, ends)``,
    inside the windows ``[ws, we)``: for a call that ends where no device works, from its
    start (or the devices' last work, if later) to the next device activity (the end of
    the windows where none comes), overlapping stretches counted once. A sync drains the
    queue and keeps the host from filling it: this is what the devices lose to it, while
    a call that ends with a device still at work cost none (a device-bound loop waits in
    its syncs for nothing). None for a trace without device activity."""
    bs, be = busy_segments(trace)
    if not len(bs):
        return None
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    nxt = np.searchsorted(bs, ends, side="right")  # the first busy stretch starting after each end
    prev = np.maximum(nxt - 1, 0)
    inside = (nxt > 0) & (ends < be[prev])
    frm = np.where(nxt > 0, np.maximum(be[prev], starts), starts)
    to = np.where(nxt < len(bs), bs[np.minimum(nxt, len(bs) - 1)], int(we.max()) if len(we) else 0)
    idle = ~inside & (to > frm)
    s, e = union(frm[idle], to[idle])
    return int(covered(s, e, ws, we).sum())


def sync_rows(trace: Trace) -> np.ndarray:
    """Rows of synchronising calls on host threads (derived lines and device planes excluded)."""
    return cache.memo(trace, "sync_rows", _sync_rows)


#: a name that holds any of these (lower-cased) is a synchronising call
_MARKER = re.compile("|".join(re.escape(m) for m in SYNC_MARKERS))


def _sync_rows(trace: Trace) -> np.ndarray:
    if not trace.n_events:
        return np.zeros(0, np.int64)
    ev = trace.events
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    thread = np.array([t.kind != "derived" for t in trace.tracks], bool)
    tr = ev["track"]
    cand = np.flatnonzero(host[trace.track_plane[tr]] & thread[tr] & (ev["dur_ns"] > 0))
    if not len(cand):
        return cand
    # judged once per string, then looked up per event
    lows = [x.lower() for x in trace.strings]
    search = _MARKER.search
    by_name = np.fromiter((search(x) is not None or x in _BLOCKING_COPIES for x in lows), bool, len(lows))
    by_cat = np.fromiter((x in SYNC_CATEGORIES for x in lows), bool, len(lows))
    return cand[by_name[ev["name"][cand]] | by_cat[ev["category"][cand]]]


def sync_by_thread(trace: Trace, window: WindowArg = None) -> Table:
    """Time each host thread spent blocked in synchronising calls (``cudaStreamSynchronize``,
    ``clFinish``, ``block_until_ready``, blocking ``cudaMemcpy``...), inside the steps when
    the trace has steps, else inside the analysed span — so the profiler's own sync after
    the last step does not count. Overlapping calls on one thread count once.

    Columns: ``thread`` (track name), ``calls`` (sync calls overlapping the windows: one
    begun before a window and waiting on into it counts, as its time there does),
    ``sync_ns`` (time covered by them inside the windows), ``window_ns`` (total length of
    the windows), ``share_pct`` (``sync_ns`` / ``window_ns``, at most 100). Sorted by
    ``sync_ns``, largest first. ``window``: the steps analysed (``analyze/window.py``).
    """
    trace = view(trace, window)
    rows = sync_rows(trace)
    ws, we = windows(trace)
    length = int((we - ws).sum())
    if not len(rows) or length <= 0:
        return empty_frame(COLUMNS, ("thread",))
    ev = trace.events
    th = cache.threads(trace)[ev["track"][rows]]
    st = ev["start_ns"][rows]
    en = st + ev["dur_ns"][rows]
    # every thread at once: one (thread, time) key, so the union of each thread's calls
    # is one pass over them sorted by thread, then start
    key = TimeKeys([st, en], int(th.max()))
    order = lexsort((st, th))
    th, st, en, ks, ke = th[order], st[order], en[order], key(th[order], st[order]), key(th[order], en[order])
    reach = np.maximum.accumulate(ke)
    first = np.flatnonzero(np.r_[True, ks[1:] > reach[:-1]])  # a new segment of one thread's union
    seg_busy = covered(ws, we, st[first], np.maximum.reduceat(en, first))
    t_first = np.flatnonzero(np.r_[True, th[1:] != th[:-1]])  # each thread's first call
    seg_thread = np.cumsum(np.r_[True, th[1:] != th[:-1]])[first] - 1
    busy = np.add.reduceat(seg_busy, np.flatnonzero(np.r_[True, seg_thread[1:] != seg_thread[:-1]]))
    calls = np.add.reduceat(overlapping(ws, we, st, en).astype(np.int64), t_first)
    # named after the track of the thread's first sync row (two tracks can record one thread)
    names = [trace.tracks[int(t)].name for t in ev["track"][np.minimum.reduceat(rows[order], t_first)]]
    return frame({"thread": names, "calls": calls, "sync_ns": busy, "window_ns": np.full(len(names), length, np.int64),
                  "share_pct": 100.0 * busy / length}, order=order_desc(busy))
