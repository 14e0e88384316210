"""Per-name statistics of every event of a category or kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.core import Trace
from .common import analysed_span
from .frames import frame, order_desc
from .grouping import duration_columns
from .window import WindowArg, selection, view

if TYPE_CHECKING:
    from .table import Table


def event_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per (category, name) of events with a duration.

    Columns: ``category``, ``name``, ``count``, ``total_ns``, ``mean_ns``, ``median_ns``,
    ``min_ns``, ``max_ns``, ``p99_ns`` (durations), ``first_start_ns``, ``last_end_ns``.
    Sorted by total time. With a ``window``, the events that start in its analysed span
    (or before it, where the window's start is open, as the other tables count).
    """
    trace = view(trace, window)
    ev = trace.events
    rows = np.flatnonzero(ev["dur_ns"] > 0)
    sel = selection(trace)
    if sel is not None:
        t0, t1 = analysed_span(trace)
        t0 = min(t0, sel.lo)  # an open start (every step, ``:B``): what began before the first step too
        rows = rows[(ev["start_ns"][rows] >= t0) & (ev["start_ns"][rows] < t1)]
    m = max(len(trace.strings), 1)  # a dense key sorts as one int64 with the durations
    key = ev["category"][rows].astype(np.int64) * m + ev["name"][rows]
    cols, _ = duration_columns(trace, rows, by=key)
    cat, name = np.divmod(cols["name"].astype(np.int64), m)
    strings = np.asarray(trace.strings, dtype=object)
    cols = {"category": strings[cat] if len(cat) else np.zeros(0, object), **cols,
            "name": strings[name] if len(name) else np.zeros(0, object)}
    return frame(cols, order=order_desc(cols["total_ns"]))
