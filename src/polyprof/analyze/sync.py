"""Host time spent in synchronising calls, per host thread, inside the analysed windows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..derive import cache
from ..derive.intervals import covered, union
from ..trace.core import Trace
from ..trace.vocabulary import BLOCKING_COPIES as _BLOCKING_COPIES
from ..trace.vocabulary import SYNC_CATEGORIES, SYNC_MARKERS  # noqa: F401  (SYNC_CATEGORIES: for callers)
from .common import analysed_span, empty_frame, rows_frame
from .window import WindowArg, view
from ..trace.sorting import unique

COLUMNS = ["thread", "calls", "sync_ns", "window_ns", "share_pct"]


def windows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Where host waiting counts: the steps (host side) if there are steps, else the analysed span."""
    steps = cache.steps(trace)
    if len(steps):
        return union(np.asarray(steps.start, np.int64), np.asarray(steps.end, np.int64))
    t0, t1 = analysed_span(trace)
    return np.array([t0], np.int64), np.array([t1], np.int64)


def sync_rows(trace: Trace) -> np.ndarray:
    """Rows of synchronising calls on host threads (derived lines and device planes excluded)."""
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
    strings = trace.strings
    lows = [x.lower() for x in strings]
    by_name = np.fromiter((any(m in x for m in SYNC_MARKERS) or x in _BLOCKING_COPIES for x in lows),
                          bool, len(lows))
    by_cat = np.fromiter((x in SYNC_CATEGORIES for x in lows), bool, len(lows))
    return cand[by_name[ev["name"][cand]] | by_cat[ev["category"][cand]]]


def sync_by_thread(trace: Trace, window: WindowArg = None) -> pd.DataFrame:
    """Time each host thread spent blocked in synchronising calls (``cudaStreamSynchronize``,
    ``clFinish``, ``block_until_ready``, blocking ``cudaMemcpy``...), inside the steps when
    the trace has steps, else inside the analysed span — so the profiler's own sync after
    the last step does not count. Overlapping calls on one thread count once.

    Columns: ``thread`` (track name), ``calls`` (sync calls starting in the windows),
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
    out = []
    for t in unique(th):
        sel = th == t
        s, e = union(st[sel], en[sel])
        busy = int(covered(ws, we, s, e).sum())
        pos = np.searchsorted(ws, st[sel], side="right") - 1
        calls = int(((pos >= 0) & (st[sel] < we[np.maximum(pos, 0)])).sum())
        name = trace.tracks[int(ev["track"][rows[np.flatnonzero(sel)[0]]])].name
        out.append((name, calls, busy, length, 100.0 * busy / length))
    df = rows_frame(out, COLUMNS)
    return df.sort_values("sync_ns", ascending=False, kind="stable").reset_index(drop=True)
