"""Per-name statistics of every event of a category or kind."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.core import Trace
from .common import analysed_span
from .grouping import duration_stats
from .window import WindowArg, selection, view


def event_stats(trace: Trace, window: WindowArg = None) -> pd.DataFrame:
    """One row per (category, name) of events with a duration.

    Columns: ``category``, ``name``, ``count``, ``total_ns``, ``mean_ns``, ``median_ns``,
    ``min_ns``, ``max_ns``, ``p99_ns`` (durations), ``first_start_ns``, ``last_end_ns``.
    Sorted by total time. With a ``window``, the events that start in its analysed span.
    """
    trace = view(trace, window)
    ev = trace.events
    rows = np.flatnonzero(ev["dur_ns"] > 0)
    if selection(trace) is not None:
        t0, t1 = analysed_span(trace)
        rows = rows[(ev["start_ns"][rows] >= t0) & (ev["start_ns"][rows] < t1)]
    if not len(rows):
        df = duration_stats(trace, rows)
        df.insert(0, "category", pd.Series(dtype=object))
        return df
    m = len(trace.strings)  # a dense key sorts as one int64 with the durations
    key = ev["category"][rows].astype(np.int64) * m + ev["name"][rows]
    df = duration_stats(trace, rows, by=key)
    cat, name = np.divmod(df["name"].to_numpy().astype(np.int64), m)
    df.insert(0, "category", pd.Series([trace.strings[c] for c in cat.tolist()], dtype=object))
    df["name"] = pd.Series([trace.strings[n] for n in name.tolist()], dtype=object)
    return df
