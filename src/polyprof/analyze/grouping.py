"""Group events by name and summarise their durations (shared by the analyses)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.core import Trace

STAT_COLUMNS = ["name", "count", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns", "p99_ns",
                "first_start_ns", "last_end_ns"]


def duration_stats(trace: Trace, rows: np.ndarray, by: np.ndarray | None = None) -> pd.DataFrame:
    """Stats of the events ``rows``, grouped by name id (or by the ``by`` labels)."""
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else np.int64) for c in STAT_COLUMNS})
    ev = trace.events
    df = pd.DataFrame({
        "key": ev["name"][rows] if by is None else by,
        "dur": ev["dur_ns"][rows],
        "start": ev["start_ns"][rows],
        "end": ev["start_ns"][rows] + ev["dur_ns"][rows],
    })
    g = df.groupby("key", sort=False)
    out = pd.DataFrame({
        "count": g["dur"].size(),
        "total_ns": g["dur"].sum(),
        "mean_ns": g["dur"].mean(),
        "median_ns": g["dur"].median(),
        "min_ns": g["dur"].min(),
        "max_ns": g["dur"].max(),
        "p99_ns": g["dur"].quantile(0.99),
        "first_start_ns": g["start"].min(),
        "last_end_ns": g["end"].max(),
    })
    keys = out.index.to_numpy()
    out.insert(0, "name", [trace.strings[k] for k in keys] if by is None else keys)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
