"""What a window counts (the window itself: ``analyze/window.py``): which host events and
device activity a windowed view's analyses take, and how much of each.

- :func:`inside` is the one predicate of what a window counts: ``[lo, hi)``, and in one
  of its stretches where it has several (a schedule's cycles, a time window's repeats:
  what is between them was not recorded); :func:`within_ns` is how much of a span it
  holds.
- Host events count by their start (:func:`host_mask`); device activity by its launch
  (no known launch: its start), or, in a time window (``Selection.timed``: it holds no
  whole step), when any part of it runs inside (:func:`device_mask`), for that part
  (:func:`part_ns`, :func:`counted_ns`): its launch and start may precede the window.
- :func:`device_extents`: a time window's span under ``--span device``, the device
  activity running in each of its stretches, cut to it.
- :func:`restrict` writes what a window counts as a trace of its own (``export
  --steps``).
"""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..derive.intervals import covered
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.subset import take
from .window import Selection, WindowArg, selection, view


def inside(sel: Selection, t: np.ndarray) -> np.ndarray:
    """Which times ``t`` lie in what ``sel`` analyses: ``[lo, hi)``, and in one of its
    stretches where it has several (what is between them was not recorded)."""
    keep = (t >= sel.lo) & (t < sel.hi)
    if sel.stretches is not None and len(t):
        pos = np.searchsorted(sel.stretches[:, 0], t, side="right") - 1
        keep &= (pos >= 0) & (t < sel.stretches[np.maximum(pos, 0), 1])
    return keep


def within_ns(sel: Selection, t0: int, t1: int) -> int:
    """How much of ``[t0, t1)`` (a trace's span) ``sel`` analyses: its part of ``[lo,
    hi)``, less what is between its stretches where it has several (not recorded)."""
    runs = np.array([[sel.lo, sel.hi]], np.int64) if sel.stretches is None else sel.stretches
    return int((np.minimum(runs[:, 1], t1) - np.maximum(runs[:, 0], t0)).clip(0).sum())


def part_ns(sel: Selection, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """How much of each ``[start, end)`` lies in what ``sel`` analyses (as :func:`inside`
    and :func:`within_ns` have it): what a time window counts of the device activity
    running through its edges (:func:`counted_ns`)."""
    runs = np.array([[sel.lo, sel.hi]], np.int64) if sel.stretches is None else sel.stretches
    return covered(runs[:, 0], runs[:, 1], start, end)


def counted_ns(trace: Trace, start: np.ndarray, end: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The device time a windowed view counts of each activity (``[start, end)``, its own
    time ``dur``): in a time window, its part inside (:func:`part_ns`) where the window
    cuts it, so that the tables that sum device time add up to the time the device-time
    breakdown covers; ``dur`` otherwise (a step window counts what its steps launched,
    whole)."""
    sel = selection(trace)
    if sel is None or not sel.timed or not len(start):
        return dur
    part = part_ns(sel, start, end)
    return np.where(part < end - start, part, dur).astype(np.asarray(dur).dtype)


def host_mask(trace: Trace, start_ns: np.ndarray) -> np.ndarray:
    """Which host events (by start time) a windowed view counts: those starting in a
    selected step (in a time window: in it); every one for a trace analysed whole."""
    sel = selection(trace)
    if sel is None:
        return np.ones(len(start_ns), bool)
    return inside(sel, start_ns)


def device_mask(trace: Trace, launch: np.ndarray, start_ns: np.ndarray,
                end_ns: np.ndarray | None = None) -> np.ndarray:
    """Which device activities a windowed view counts: launched in a selected step (with
    no known launch: started in one); in a time window, those with any part inside it
    (:func:`part_ns`; their launch may precede it, their start too), or, without
    ``end_ns``, those that start in it."""
    sel = selection(trace)
    if sel is None:
        return np.ones(len(start_ns), bool)
    if sel.timed and end_ns is not None:
        return inside(sel, start_ns) | (part_ns(sel, start_ns, end_ns) > 0)
    ev = trace.events
    t = start_ns if sel.timed or not len(start_ns) else np.where(
        launch >= 0, ev["start_ns"][np.maximum(launch, 0)], start_ns)
    return inside(sel, t)


def device_extents(sel: Selection, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) of the device activity ``[start, end)`` running in each stretch of
    the time window ``sel`` (its one ``[lo, hi)``, or its ``stretches``), cut to that
    stretch: what ``--span device`` spans in a time window, whose activity counts for its
    part inside (:func:`counted_ns`), so the span holds no time outside the window (an
    activity begun before it starts it at the window's start, one running past its end
    ends it at the end). Stretches without any left out; both empty where none has."""
    runs = np.array([[sel.lo, sel.hi]], np.int64) if sel.stretches is None else sel.stretches
    first, last = np.zeros(len(runs), np.int64), np.zeros(len(runs), np.int64)
    has = np.zeros(len(runs), bool)
    for i, (a, b) in enumerate(runs.tolist()):  # (a few stretches)
        on = (start < b) & ((start >= a) | (end > a))  # (as device_mask: starts in it, or runs into it)
        if on.any():
            has[i] = True
            first[i], last[i] = max(a, int(start[on].min())), min(b, int(end[on].max()))
    return first[has], last[has]


def restrict(trace: Trace, window: WindowArg) -> Trace:
    """A new trace with only what the analyses of ``window`` count (``polyprof export
    --steps``): device activity launched in the selected steps (no known launch: started
    in them; a time window's: running in it, :func:`device_mask`), every other event that
    starts in them, the flows between kept events and the counters inside. The trace
    itself when the window selects everything."""
    v = view(trace, window)
    sel = selection(v)
    if sel is None:
        return trace
    ev = trace.events
    keep = host_mask(v, ev["start_ns"])
    corr = cache.correlation(trace)
    rows = corr.device_rows
    end = ev["start_ns"][rows] + ev["dur_ns"][rows]
    keep[rows] = device_mask(v, corr.launch, ev["start_ns"][rows], end)
    hi = max(sel.hi, int(end[keep[rows]].max())) if keep[rows].any() else sel.hi
    ranges = [(sel.lo, hi)] if sel.stretches is None else [
        (int(a), int(b)) for a, b in sel.stretches[:-1].tolist()] + [(int(sel.stretches[-1, 0]), hi)]
    out = take(trace, keep, counter_ranges=ranges)
    out.metadata[mkeys.WINDOW] = sel.label
    return out
