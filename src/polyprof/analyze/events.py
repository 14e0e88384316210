"""Per-name statistics of every event of a category or kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.core import Trace
from .common import analysed_span, in_stretches, qualified_names
from .frames import frame, order_desc
from .grouping import duration_columns, sorted_group_stats
from .window import WindowArg, selection, view

if TYPE_CHECKING:
    from .table import Table

#: rows handled at a time where a whole column of temporaries is not needed at once
_BLOCK = 1 << 16


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
    key = np.multiply(ev["category"][rows], m, dtype=np.int64)
    key += codes
    del codes
    packed = _pack(ev, rows, key)
    if packed is None:  # (too wide for one int64: the general grouping)
        cols, _ = duration_columns(trace, rows, by=key)
    else:
        del rows
        cols = _columns(ev, key, *packed)
    del key
    cat, name = np.divmod(cols["name"].astype(np.int64), m)
    cols = {"category": labels[cat] if len(cat) else np.zeros(0, object),  # (labels begin with the strings)
            "name": labels[name] if len(name) else np.zeros(0, object),
            "module": modules[name] if len(name) else np.zeros(0, object), **{k: v for k, v in cols.items() if k != "name"}}
    return frame(cols, order=order_desc(cols["total_ns"]))


def _pack(ev: dict[str, np.ndarray], rows: np.ndarray, key: np.ndarray) -> tuple[int, int, int] | None:
    """The events ``rows`` and their group ``key`` (overwritten) as one int64 each, sorted:
    ``(key - klo) << dbits | duration``, then ``<< rbits | row``; ``(klo, dbits, rbits)``,
    or None (``key`` untouched) where that does not fit in 63 bits. The rows make every
    value distinct (the order is :func:`~.grouping.group_stats`' up to its ties, which
    change none of its columns), and the sort is of values, without an order array."""
    if not len(rows):
        return None
    dur = ev["dur_ns"]
    klo = int(key.min())
    dbits, rbits = int(dur.max()).bit_length(), (len(dur) - 1).bit_length()  # (durations > 0: from 0)
    if (int(key.max()) - klo).bit_length() + dbits + rbits > 63:
        return None
    for lo in range(0, len(rows), _BLOCK):
        part = key[lo:lo + _BLOCK]
        part -= klo
        part <<= dbits
        part |= dur[rows[lo:lo + _BLOCK]]
        part <<= rbits
        part |= rows[lo:lo + _BLOCK]
    key.sort()
    return klo, dbits, rbits


def _columns(ev: dict[str, np.ndarray], key: np.ndarray, klo: int, dbits: int, rbits: int) -> dict[str, np.ndarray]:
    """:func:`~.grouping.duration_columns` of the keys :func:`_pack` made (``name``: the
    group key), read out of them a field at a time: the start times (the one other column
    as long as the rows), the group bounds, then the durations, in place of the keys."""
    n = len(key)
    start = np.empty(n, np.int64)
    start_ns = ev["start_ns"]
    for lo in range(0, n, _BLOCK):
        start[lo:lo + _BLOCK] = start_ns[key[lo:lo + _BLOCK] & ((1 << rbits) - 1)]
    key >>= rbits
    bounds = [np.zeros(1, np.int64)]
    for lo in range(0, n - 1, _BLOCK):
        g = key[lo:lo + _BLOCK + 1] >> dbits
        bounds.append(np.flatnonzero(g[1:] != g[:-1]) + (lo + 1))
    starts = np.concatenate(bounds)
    names = (key[starts] >> dbits) + klo
    key &= (1 << dbits) - 1  # the durations, ascending in each group
    stats = sorted_group_stats(key, starts)
    first = np.minimum.reduceat(start, starts)
    start += key  # the ends
    return {"name": names, **{f"{c}_ns" if c != "count" else c: v for c, v in stats.items()},
            "first_start_ns": first, "last_end_ns": np.maximum.reduceat(start, starts)}
