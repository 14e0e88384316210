"""Per-section statistics: host time, the device time it caused, memory, utilization."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..derive import cache
from ..derive.projection import LaunchIndex, section_rows
from ..trace.core import Trace
from .breakdown import busy_within
from .common import frame
from .grouping import duration_stats, group_reduce, group_stats

RSS_COUNTER = "process.rss_bytes"


def section_stats(trace: Trace) -> pd.DataFrame:
    """One row per section name (polyprof sections and user annotations; step markers
    such as ``ProfilerStep#N`` are steps, not sections).

    Columns: ``name``, ``count``, ``total_ns``, ``mean_ns``, ``median_ns``, ``min_ns``,
    ``max_ns``, ``p99_ns`` (host time), ``first_start_ns``, ``last_end_ns``;
    ``device_ops`` (device activities launched inside the section, nested sections
    included), ``device_ns`` (their summed duration), ``projected_ns`` (summed over
    instances: first to last device activity caused — the projected section),
    ``device_util_pct`` (share of the projected spans during which a device was busy
    with anything), ``mem_delta_bytes`` (summed over instances: process RSS at the end
    minus at the start, from the ``process.rss_bytes`` counter; NaN without it).
    Sorted by total host time, largest first.
    """
    rows = section_rows(trace)
    base = duration_stats(trace, rows)
    extra = ["device_ops", "device_ns", "projected_ns", "device_util_pct", "mem_delta_bytes"]
    if not len(rows):
        for c in extra:
            base[c] = pd.Series(dtype=np.float64)
        return base
    ev = trace.events
    st, du, tr = ev["start_ns"][rows], ev["dur_ns"][rows], cache.threads(trace)[ev["track"][rows]]
    corr = cache.correlation(trace)
    proj = LaunchIndex(trace, corr, sections=rows).project(tr, st, st + du)
    pspan = proj.span_ns
    busy = np.where(proj.count > 0, busy_within(trace, proj.first_ns, proj.last_ns), 0)
    mem = _rss_delta(trace, st, st + du)
    g = group_stats(ev["name"][rows], du)
    o, gs = g["order"], g["starts"]
    projected = group_reduce(o, gs, pspan, np.add)
    busy_sum = group_reduce(o, gs, busy, np.add)
    mem_sum = group_reduce(o, gs, np.nan_to_num(mem, nan=0.0), np.add)
    mem_any = group_reduce(o, gs, ~np.isnan(mem), np.logical_or)
    agg = frame({
        "device_ops": group_reduce(o, gs, proj.count, np.add), "device_ns": group_reduce(o, gs, proj.busy_ns, np.add),
        "projected_ns": projected,
        "device_util_pct": np.where(projected > 0, 100.0 * busy_sum / np.maximum(projected, 1), np.nan),
        "mem_delta_bytes": np.where(mem_any, mem_sum, np.nan),
    }, index=[trace.strings[k] for k in g["key"]])
    agg = agg.reindex(pd.Index(base["name"].to_numpy(), dtype=object))  # names are unique
    for c in extra:
        base[c] = agg[c].to_numpy()
    return base


def _rss_delta(trace: Trace, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RSS at ``b`` minus RSS at ``a`` (last sample at or before each time); NaN if unknown."""
    sid = trace.string_id(RSS_COUNTER)
    c = trace.counters
    out = np.full(len(a), np.nan)
    if sid < 0:
        return out
    sel = c["name"] == sid
    if not sel.any():
        return out
    ts, val = c["ts_ns"][sel], c["value"][sel]
    order = np.argsort(ts, kind="stable")
    ts, val = ts[order], val[order]
    ia = np.searchsorted(ts, a, side="right") - 1
    ib = np.searchsorted(ts, b, side="right") - 1
    ok = (ia >= 0) & (ib >= 0)
    out[ok] = val[ib[ok]] - val[ia[ok]]
    return out
