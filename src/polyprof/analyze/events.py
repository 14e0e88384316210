"""Per-name statistics of every event of a category or kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.core import Trace
from .common import analysed_span, in_stretches, qualified_names
from .frames import frame, order_desc
from .grouping import duration_columns
from .window import WindowArg, selection, view

if TYPE_CHECKING:
    from .table import Table


def event_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per (category, name) of events with a duration.

    Columns: ``category``, ``name``, ``module``, ``count``, ``total_ns``, ``mean_ns``, ``median_ns``,
    ``min_ns``, ``max_ns``, ``p99_ns`` (durations), ``first_start_ns``, ``last_end_ns``.
    Sorted by total time. With a ``window``, the events that start in its analysed span
    (or before it, where the window's start is open, as the other tables count).
    An event of a known compiled module (an XLA op: ``common.qualified_names``) is a row
    of its module, named ``module/op``, with ``module`` ("" for the other rows): XLA
    names ops uniquely within a module only.
    """
    trace = view(trace, window)
    ev = trace.events
    rows = np.flatnonzero(ev["dur_ns"] > 0)
    sel = selection(trace)
    if sel is not None:
        t0, t1 = analysed_span(trace)
        t0 = min(t0, sel.lo)  # an open start (every step, ``:B``): what began before the first step too
        rows = rows[(ev["start_ns"][rows] >= t0) & (ev["start_ns"][rows] < t1)]
        rows = rows[in_stretches(trace, ev["start_ns"][rows])]  # not between a schedule's cycles
    codes, labels, modules = qualified_names(trace, rows)
    m = max(len(labels), 1)  # a dense key sorts as one int64 with the durations
    key = ev["category"][rows].astype(np.int64) * m + codes
    cols, _ = duration_columns(trace, rows, by=key)
    cat, name = np.divmod(cols["name"].astype(np.int64), m)
    cols = {"category": labels[cat] if len(cat) else np.zeros(0, object),  # (labels begin with the strings)
            "name": labels[name] if len(name) else np.zeros(0, object),
            "module": modules[name] if len(name) else np.zeros(0, object), **{k: v for k, v in cols.items() if k != "name"}}
    return frame(cols, order=order_desc(cols["total_ns"]))
