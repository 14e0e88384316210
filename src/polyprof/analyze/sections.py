"""Per-section statistics: host time, the device time it caused, memory, utilization."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..derive.intervals import covered, union
from ..derive.projection import LaunchIndex, section_rows
from ..trace import keys
from ..trace.core import Trace
from .breakdown import busy_within
from .frames import frame, order_desc
from .grouping import duration_columns, group_reduce
from .window import WindowArg, selection, view
from .window_counting import host_mask

if TYPE_CHECKING:
    from .memory import Level
    from .table import Table

RSS_COUNTER = keys.COUNTER_RSS
MEMORY_COLUMNS = ["alloc_bytes", "mem_delta_bytes", "mem_min_bytes", "mem_max_bytes", "mem_mean_bytes",
                  "mem_source"]


def section_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per section name (polyprof sections and user annotations; step markers
    such as ``ProfilerStep#N`` are steps, not sections).

    Columns: ``name``, ``count``, ``total_ns``, ``mean_ns``, ``median_ns``, ``min_ns``,
    ``max_ns``, ``p99_ns`` (host time), ``first_start_ns``, ``last_end_ns``;
    ``device_ops`` (device activities launched inside the section, nested sections
    included), ``device_ns`` (their summed duration), ``projected_ns`` (summed over
    instances: first to last device activity caused — the projected section),
    ``device_util_pct`` (share of the projected spans during which a device was busy
    with anything). Memory (NaN where the trace has none): ``alloc_bytes`` (bytes
    allocated on the section's thread inside it, nested sections included, summed over
    instances), ``mem_delta_bytes`` (held at exit minus at entry, summed over the runs of
    the name's instances: instances that overlap in time, on threads, async tasks or by
    recursion, make one run, so a change is counted once),
    ``mem_min_bytes`` / ``mem_max_bytes`` / ``mem_mean_bytes`` (held during the
    section: lowest, highest, time-weighted mean over every instance). "Held" is the
    allocators' bytes (every device and allocator added up) where the trace has memory
    events, else the process RSS (``process.rss_bytes``); ``mem_source`` says which
    (``allocator`` or ``rss``).
    Sorted by total host time, largest first.
    With a ``window``, the sections that start in its steps; in a time window holding no
    whole step (``Selection.timed``), every section that overlaps it, for its part inside
    (:func:`counted`): one begun before it or lasting past it too, cut at its edges.
    """
    trace = view(trace, window)
    rows, st, du, en = counted(trace, section_rows(trace))
    cols, g = duration_columns(trace, rows, start=st, dur=du, end=en)
    o, gs = g["order"], g["starts"]
    if not len(rows):
        return frame({**cols, **{c: np.zeros(0, object if c == "mem_source" else np.float64) for c in EXTRA}})
    ev = trace.events
    tr = cache.threads(trace)[ev["track"][rows]]
    corr = cache.correlation(trace)
    proj = LaunchIndex(trace, corr, sections=rows).project(tr, st, en)
    busy = np.where(proj.count > 0, busy_within(trace, proj.first_ns, proj.last_ns), 0)
    projected = group_reduce(o, gs, proj.span_ns, np.add)
    busy_sum = group_reduce(o, gs, busy, np.add)
    cols |= {
        "device_ops": group_reduce(o, gs, proj.count, np.add), "device_ns": group_reduce(o, gs, proj.busy_ns, np.add),
        "projected_ns": projected,
        "device_util_pct": np.where(projected > 0, 100.0 * busy_sum / np.maximum(projected, 1), np.nan),
        **_memory_columns(trace, tr, st, en, o, gs),
    }
    return frame(cols, order=order_desc(cols["total_ns"]))


def counted(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, start, dur, end) of the sections of ``rows`` a windowed view counts, with
    the times it counts: those that start in its steps, whole (every one without a
    window); in a time window holding no whole step (``Selection.timed``), those that
    overlap it, each cut to it, from where it enters the window's first stretch it
    overlaps to where it leaves the last, ``dur`` its time inside the stretches, as
    ``sync_by_thread`` counts a call waiting through the window and the critical path
    cuts the calls at its edges (an instant in it counts, as before)."""
    ev = trace.events
    st = np.asarray(ev["start_ns"][rows], np.int64)
    du = np.asarray(ev["dur_ns"][rows], np.int64)
    sel = selection(trace)
    if sel is None or not sel.timed:
        keep = host_mask(trace, st)
        return rows[keep], st[keep], du[keep], st[keep] + du[keep]
    ws, we = (sel.stretches[:, 0], sel.stretches[:, 1]) if sel.stretches is not None else (
        np.array([sel.lo], np.int64), np.array([sel.hi], np.int64))
    en = st + du
    inside = covered(ws, we, st, en)
    keep = (inside > 0) | host_mask(trace, st)
    rows, st, en, inside = rows[keep], st[keep], en[keep], inside[keep]
    a = np.maximum(st, ws[np.minimum(np.searchsorted(we, st, side="right"), len(ws) - 1)])
    b = np.maximum(np.minimum(en, we[np.maximum(np.searchsorted(ws, en, side="left") - 1, 0)]), a)
    return rows, a, inside, b


#: the columns after the duration statistics
EXTRA = ["device_ops", "device_ns", "projected_ns", "device_util_pct", *MEMORY_COLUMNS]


def _memory_columns(trace: Trace, thread: np.ndarray, a: np.ndarray, b: np.ndarray, o: np.ndarray,
                    gs: np.ndarray) -> dict[str, np.ndarray]:
    """The memory columns per section name (group order ``o``, group starts ``gs``)."""
    from .memory import Level, allocated_inside  # sections only: a trace without them does not import it

    n = len(gs)
    level = Level.of(trace)
    if level is None:
        return {c: np.full(n, np.nan) for c in MEMORY_COLUMNS[:-1]} | {"mem_source": np.full(n, "", object)}
    mn, mx, mean = level.over(a, b)
    dur = (b - a).astype(np.float64)
    weighted = group_reduce(o, gs, mean * dur, np.add)
    total_dur = group_reduce(o, gs, dur, np.add)
    alloc = (group_reduce(o, gs, allocated_inside(trace, thread, a, b).astype(np.float64), np.add)
             if level.source == "allocator" else np.full(n, np.nan))
    return {
        "alloc_bytes": alloc,
        "mem_delta_bytes": _held_change(level, o, gs, a, b),
        "mem_min_bytes": group_reduce(o, gs, mn, np.fmin), "mem_max_bytes": group_reduce(o, gs, mx, np.fmax),
        "mem_mean_bytes": np.where(total_dur > 0, weighted / np.maximum(total_dur, 1),
                                   group_reduce(o, gs, mean, np.fmax)),
        "mem_source": np.full(n, level.source, dtype=object),
    }


def _held_change(level: Level, o: np.ndarray, gs: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per section name: held at the end minus held at the start of each run of its
    instances ([a, b), overlapping ones merged), summed over the runs; NaN where the
    level is unknown at every run's ends."""
    bounds = np.r_[gs, len(o)]
    parts = [union(a[o[lo:hi]], b[o[lo:hi]]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    label = np.repeat(np.arange(len(gs)), [len(s) for s, _ in parts])
    s = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    e = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    d = level.at(e) - level.at(s)
    known = np.bincount(label, weights=~np.isnan(d), minlength=len(gs)) > 0
    return np.where(known, np.bincount(label, weights=np.nan_to_num(d, nan=0.0), minlength=len(gs)), np.nan)
