"""Host time spent in synchronising calls, per host thread, inside the analysed windows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..derive import cache
from ..derive.intervals import covered, union
from ..trace.core import Trace
from .common import analysed_span

#: lower-case name substrings of calls that block the host until the device catches up
SYNC_MARKERS = ("synchronize", "clfinish", "clwaitforevents", "eventsynchronize",
                "hipdevicesynchronize", "block_until_ready")
SYNC_CATEGORIES = ("cuda_sync", "sync")
#: blocking copies (cudaMemcpy without Async) wait for the device too
_BLOCKING_COPIES = ("cudamemcpy", "cudamemcpy2d", "cudamemcpy3d", "hipmemcpy", "hipmemcpy2d", "hipmemcpy3d")

COLUMNS = ["thread", "calls", "sync_ns", "window_ns", "share_pct"]


def is_sync_call(name: str, category: str) -> bool:
    low = name.lower()
    return any(m in low for m in SYNC_MARKERS) or category.lower() in SYNC_CATEGORIES or low in _BLOCKING_COPIES


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
    # one int64 key per (name, category) pair: a 1-D unique (np.unique(axis=0) sorts rows
    # as void records, ~10x slower on a trace's host events)
    ns = max(len(trace.strings), 1)
    key = ev["name"][cand].astype(np.int64) * ns + ev["category"][cand].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    strings = trace.strings
    hit = np.fromiter((is_sync_call(strings[k // ns], strings[k % ns]) for k in uniq.tolist()), bool, len(uniq))
    return cand[hit[inv.ravel()]]


def sync_by_thread(trace: Trace) -> pd.DataFrame:
    """Time each host thread spent blocked in synchronising calls (``cudaStreamSynchronize``,
    ``clFinish``, ``block_until_ready``, blocking ``cudaMemcpy``...), inside the steps when
    the trace has steps, else inside the analysed span — so the profiler's own sync after
    the last step does not count. Overlapping calls on one thread count once.

    Columns: ``thread`` (track name), ``calls`` (sync calls starting in the windows),
    ``sync_ns`` (time covered by them inside the windows), ``window_ns`` (total length of
    the windows), ``share_pct`` (``sync_ns`` / ``window_ns``, at most 100). Sorted by
    ``sync_ns``, largest first.
    """
    rows = sync_rows(trace)
    ws, we = windows(trace)
    window = int((we - ws).sum())
    if not len(rows) or window <= 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "thread" else np.int64) for c in COLUMNS})
    ev = trace.events
    th = cache.threads(trace)[ev["track"][rows]]
    st = ev["start_ns"][rows]
    en = st + ev["dur_ns"][rows]
    out = []
    for t in np.unique(th):
        sel = th == t
        s, e = union(st[sel], en[sel])
        busy = int(covered(ws, we, s, e).sum())
        pos = np.searchsorted(ws, st[sel], side="right") - 1
        calls = int(((pos >= 0) & (st[sel] < we[np.maximum(pos, 0)])).sum())
        name = trace.tracks[int(ev["track"][rows[np.flatnonzero(sel)[0]]])].name
        out.append((name, calls, busy, window, 100.0 * busy / window))
    df = pd.DataFrame(out, columns=COLUMNS)
    return df.sort_values("sync_ns", ascending=False, kind="stable").reset_index(drop=True)
