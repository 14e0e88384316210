"""Queue length per device stream over time: work launched but not yet started.

Each matched launch call adds one to its activity's stream when the call starts; the
activity takes one off when it starts on the device (HTA's definition). A queue that
stays long means the host runs well ahead of the device; one that stays near zero
means the device waits for the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.core import Trace
from .common import device_view
from .breakdown import ALL_DEVICES
from .frames import empty_frame, frame, rows_frame
from .window import WindowArg, selection, view
from ..trace.sorting import unique, unique_inverse

if TYPE_CHECKING:
    from .table import Table

SUMMARY = ["plane", "stream", "changes", "mean", "std", "min", "p25", "p50", "p75", "max", "time_mean"]


def _series(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(track, time, queue length) at every change, sorted by track then time."""
    v = device_view(trace)
    sel = np.flatnonzero(v.counted & (v.launch >= 0))
    ls = trace.events["start_ns"][v.launch[sel]]
    track = np.concatenate([v.track[sel], v.track[sel]])
    ts = np.concatenate([ls, v.start[sel]])
    step = np.concatenate([np.ones(len(sel), np.int64), -np.ones(len(sel), np.int64)])
    # a launch before the start it causes when both fall on the same ns
    order = np.lexsort((-step, ts, track))
    track, ts, step = track[order], ts[order], step[order]
    if not len(step):
        return track, ts, step
    first = np.concatenate([[True], track[1:] != track[:-1]])
    csum = np.cumsum(step)
    base = np.maximum.accumulate(np.where(first, np.arange(len(step)), 0))
    before = np.where(base > 0, csum[np.maximum(base - 1, 0)], 0)
    return track, ts, csum - before


def queue_length(trace: Trace, window: WindowArg = None) -> Table:
    """The queue length of every device stream as a step function: one row per change.

    Columns: ``plane``, ``stream``, ``ts_ns`` (when it changed), ``queue_length`` (from
    then until the next row of the stream). Only device activity matched to its launch
    counts (with a ``window``: launched in its steps). Sorted by stream, then time.
    ``window="hta"``: HTA 0.5's series (``analyze/hta_tables.py``), streams by number,
    each in HTA's order.
    """
    trace = view(trace, window)
    sel = selection(trace)
    if sel is not None and sel.hta:
        plane, stream, ts, length, _ = _hta_series(trace)
        return frame({"plane": plane, "stream": stream, "ts_ns": ts, "queue_length": length})
    track, ts, length = _series(trace)
    tnames = np.array([t.name for t in trace.tracks], object)
    pnames = np.array([p.name for p in trace.planes], object)
    return frame({"plane": pnames[trace.track_plane[track]] if len(track) else np.zeros(0, object),
                  "stream": tnames[track], "ts_ns": ts, "queue_length": length})


def queue_length_summary(trace: Trace, window: WindowArg = None) -> Table:
    """Per device stream, statistics of its queue length.

    Columns: ``plane``, ``stream``, ``changes`` (rows of :func:`queue_length`), ``mean``,
    ``std``, ``min``, ``p25``, ``p50``, ``p75``, ``max`` (over the values at the changes,
    as HTA's ``get_queue_length_summary`` gives them), ``time_mean`` (mean over time,
    from the stream's first change to its last). ``window="hta"``: HTA 0.5's own (its
    series, :func:`queue_length`), equal to its summary.
    """
    trace = view(trace, window)
    sel = selection(trace)
    if sel is not None and sel.hta:
        plane, stream, ts, length, group = _hta_series(trace)
    else:
        track, ts, length = _series(trace)
        tnames = np.array([t.name for t in trace.tracks], object)
        pnames = np.array([p.name for p in trace.planes], object)
        plane = pnames[trace.track_plane[track]] if len(track) else np.zeros(0, object)
        stream, group = tnames[track], track
    out = []
    bounds = (np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1], [True]])) if len(group)
              else np.zeros(0, np.int64))
    for a, b in zip(bounds[:-1], bounds[1:]):
        x = length[a:b].astype(np.float64)
        dt = np.diff(ts[a:b])
        tm = float((x[:-1] * dt).sum() / dt.sum()) if dt.sum() > 0 else float(x.mean())
        q = quartiles(x)
        out.append((plane[a], stream[a], len(x), float(x.mean()),
                    float(x.std(ddof=1)) if len(x) > 1 else np.nan, float(x.min()), *map(float, q), float(x.max()), tm))
    return rows_frame(out, SUMMARY) if out else empty_frame(SUMMARY, ("plane", "stream"), np.float64)


def _hta_series(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(plane, stream, ts_ns, queue_length, HTA's stream number) of HTA's series: a
    stream's plane is its device rows' (``(all devices)`` where they lie on several)."""
    from .hta_tables import queue_series  # HTA's own computations: only for its window (--span device)

    q = queue_series(trace)
    plane = np.full(len(q.row), ALL_DEVICES, object)
    numbers, at = unique_inverse(q.stream)
    stream = np.array([f"stream {s}" for s in numbers.tolist()], object)[at]
    on = trace.track_plane[trace.events["track"][q.row]] if len(q.row) else np.zeros(0, np.int64)
    for s in numbers.tolist():
        mine = q.stream == s
        planes = unique(on[mine & (q.delta < 0)])
        if len(planes) == 1:
            plane[mine] = trace.planes[int(planes[0])].name
    return plane, stream, q.ts_ns, q.length, q.stream


def quartiles(x: np.ndarray) -> np.ndarray:
    """``np.percentile(x, [25, 50, 75])`` of a 1-d float array: NumPy's linear method step
    by step (its function pays a set-up the first time in a process, and imports
    ``numpy.ma`` for long inputs, for a handful of values here): the values at the six
    ranks it interpolates between, by a sort or (long inputs) a partition at them.
    NumPy's own where ``x`` is empty or holds NaN."""
    if not len(x) or np.isnan(x).any():
        return np.percentile(x, [25, 50, 75])
    n = len(x)
    virtual = (n - 1) * np.array([0.25, 0.5, 0.75])
    prev = np.floor(virtual)
    nxt = prev + 1
    last = virtual >= n - 1  # NumPy takes the last value there
    prev[last] = -1
    nxt[last] = -1
    kth = sorted({int(r) % n for r in (*prev, *nxt)})
    s = np.sort(x) if n <= 4096 else np.partition(x, kth)  # a partition beats the sort there
    a, b = s[prev.astype(np.intp)], s[nxt.astype(np.intp)]
    t = virtual - prev
    d = b - a
    out = a + d * t
    np.subtract(b, d * (1 - t), out=out, where=t >= 0.5)
    return out
