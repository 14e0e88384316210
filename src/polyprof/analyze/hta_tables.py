"""HTA 0.5's queue-length series and kernel-type table, row for row, for ``--window hta``.

Both read HTA's per-rank table (:func:`hta_compat.hta_table`) in its row order
(:func:`table_order`) and sort it as HTA does, with pandas' ``sort_values``: NumPy's
quicksort, which is not stable, so rows of equal time come out in an order that
depends on where they were in the table. That order decides the queue length counted
between a launch and a start of the same µs, and which zero-length kernel-type rows
HTA lists; these functions sort the same arrays in the same order the same way, so
they give HTA's values on the machine that runs them.

Queue length (``TraceCounters.get_queue_length_time_series``): +1 at each launch call of
:data:`~trace.vocabulary.QUEUED_LAUNCHES` whose correlation id some device row of the
file carries (once per device row of the table with that id, on that row's stream), -1
at each device row (a row with a stream) whose id one of those calls carries; sorted by
time over all streams, then counted per stream in that order.

Kernel types (``get_gpu_kernel_breakdown``): the rows with a stream typed by name
(communication ``^nccl.*Kernel``, memory ``^Memcpy|^Memset|^dma``, compute unless the
name matches HTA's non-compute pattern, else other: not counted); each type's rows
merged, their starts (+bit) and ends (-bit) sorted together with the earlier types',
the running sum's bits naming the state of each stretch up to the next change, each
stretch truncated to whole µs (``astype(int)``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from ..derive import cache
from ..trace import vocabulary
from ..trace.core import Trace
from .hta_compat import _NOT_COMPUTE, hta_names, hta_table
from ..trace.sorting import unique

#: HTA's kernel types, as its state bits (COMPUTATION 1, COMMUNICATION 2, MEMORY 4)
TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")
# compiled on first use (re's cache), not at import
_COMM = r"^nccl.*Kernel"
_MEMORY = r"(^Memcpy)|(^Memset)|(^dma)"


def quicksort(a: np.ndarray) -> np.ndarray:
    """The order pandas' ``sort_values`` gives (NumPy's unstable quicksort)."""
    return np.argsort(a, kind="quicksort")


def table_order(trace: Trace) -> np.ndarray:
    """The rows of HTA's per-rank table in its order: with the iteration filter, the
    launched device rows first, each once per host row of its correlation id (HTA's
    inner merge repeats it), then the host rows; without it, the rows in file order."""
    t = hta_table(trace)
    rows = np.flatnonzero(t.kept)
    if not t.filtered:
        return rows
    dev, host = rows[t.launched[rows]], rows[~t.launched[rows]]
    hc = np.sort(t.corr[host])
    times = np.searchsorted(hc, t.corr[dev], "right") - np.searchsorted(hc, t.corr[dev], "left")
    return np.concatenate([np.repeat(dev, times), host])


class QueueSeries(NamedTuple):
    """HTA's queue-length time series: one entry per change, by stream then in HTA's order."""

    stream: np.ndarray  # HTA's stream number
    ts_ns: np.ndarray
    length: np.ndarray
    row: np.ndarray  # the event that changed it
    delta: np.ndarray  # +1 a launch call, -1 a device row


def queue_series(trace: Trace) -> QueueSeries:
    """HTA 0.5's queue length of each stream (module doc)."""
    return cache.memo(trace, "hta_queue_series", _queue_series)


def _queue_series(trace: Trace) -> QueueSeries:
    t = hta_table(trace)
    order = table_order(trace)
    strings = np.asarray(trace.strings, dtype=object)
    names = trace.events["name"]
    # a launch call counts when a device row of the file (before the filter) shares its id
    gpu_ids = unique(t.corr[t.parsed & t.launched & (t.corr != -1)])
    call = (t.parsed & ~t.launched & np.isin(names, np.flatnonzero(np.isin(strings, vocabulary.QUEUED_LAUNCHES)))
            & np.isin(t.corr, gpu_ids))
    calls = order[call[order]]
    dev = order[t.stream[order] != -1]
    # the join: each call once per device row of its id, in the device rows' order (none: no stream)
    by_id = np.argsort(t.corr[dev], kind="stable")
    ids = t.corr[dev][by_id]
    lo = np.searchsorted(ids, t.corr[calls], "left")
    hi = np.searchsorted(ids, t.corr[calls], "right")
    n = np.maximum(hi - lo, 1)
    c_rows = np.repeat(calls, n)
    first = np.repeat(np.cumsum(n) - n, n)
    k = np.arange(len(c_rows)) - first
    matched = np.repeat(hi > lo, n)
    pos = np.minimum(np.repeat(lo, n) + k, max(len(ids) - 1, 0))
    c_stream = np.where(matched, t.stream[dev[by_id[pos]]] if len(ids) else -1, -1)
    d_rows = dev[np.isin(t.corr[dev], t.corr[calls])]
    rows = np.concatenate([c_rows, d_rows])
    stream = np.concatenate([c_stream, t.stream[d_rows]])
    has = np.concatenate([matched, np.ones(len(d_rows), bool)])
    step = np.concatenate([np.ones(len(c_rows), np.int64), -np.ones(len(d_rows), np.int64)])
    o = quicksort(t.start[rows])
    rows, stream, has, step = rows[o], stream[o], has[o], step[o]
    rows, stream, step = rows[has], stream[has], step[has]
    g = np.argsort(stream, kind="stable")  # pandas' groupby: streams in order, rows kept in order
    rows, stream, step = rows[g], stream[g], step[g]
    new = np.r_[True, stream[1:] != stream[:-1]] if len(stream) else np.zeros(0, bool)
    csum = np.cumsum(step)
    base = np.maximum.accumulate(np.where(new, np.arange(len(step)), 0))
    before = csum[base] - step[base]
    return QueueSeries(stream, t.start[rows], csum - before, rows, step)


def _kind(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """HTA's kernel type of each row as its bit: 1 compute, 2 communication, 4 memory, 0 other."""
    ids, strings = hta_names(trace)
    uniq, inv = np.unique(ids[rows], return_inverse=True)
    names = [strings[i] for i in uniq.tolist()]
    bits = np.array([2 if re.match(_COMM, s) else 4 if re.match(_MEMORY, s) else 0 if re.match(_NOT_COMPUTE, s) else 1
                     for s in names], np.int64)
    return bits[inv] if len(rows) else np.zeros(0, np.int64)


class KernelTypes(NamedTuple):
    """HTA's kernel-type table, in its order (sum descending as pandas sorts it)."""

    bits: np.ndarray  # the state: 1 compute, 2 communication, 4 memory, or-ed
    label: np.ndarray  # HTA's name ("COMPUTATION overlapping MEMORY"; "" where no type bit is set)
    time_us: np.ndarray  # HTA's ``sum`` (µs)
    stretches: np.ndarray  # the stretches summed (positive ones)
    rows: np.ndarray  # the rows typed (HTA's rows with a stream)


def _label(u: int) -> str:
    return " overlapping ".join(TYPES[i] for i in range(len(TYPES)) if u >> i & 1)


def kernel_types(trace: Trace) -> KernelTypes:
    """HTA 0.5's kernel-type table (module doc)."""
    return cache.memo(trace, "hta_kernel_types", _kernel_types)


def _kernel_types(trace: Trace) -> KernelTypes:
    t = hta_table(trace)
    order = table_order(trace)
    dev = order[t.stream[order] != -1]
    kind = _kind(trace, dev)
    time = np.zeros(0, np.int64)
    status = np.zeros(0, np.int64)
    for i in range(len(TYPES)):
        sel = dev[kind == 1 << i]
        s, e = t.start[sel], t.end[sel]
        o = quicksort(s)
        s, e = s[o], e[o]
        opens = np.ones(len(s), bool)
        opens[1:] = s[1:] > np.maximum.accumulate(e)[:-1]
        at = np.flatnonzero(opens)
        gs = np.minimum.reduceat(s, at) if len(at) else s
        ge = np.maximum.reduceat(e, at) if len(at) else e
        o = quicksort(gs)
        time = np.concatenate([time, gs[o], ge[o]])
        status = np.concatenate([status, np.full(len(at), 1 << i), np.full(len(at), -(1 << i))])
        o = quicksort(time)
        time, status = time[o], status[o]
    running = np.cumsum(status)
    dur = np.zeros(len(time), np.int64)
    dur[:-1] = np.trunc(np.diff(time) / 1000)  # µs, as HTA's astype(int)
    live = running > 0
    u, inv = np.unique(running[live], return_inverse=True)
    labels = np.array([_label(int(x)) for x in u.tolist()], object)
    lab, at = np.unique(labels, return_inverse=True)  # groupby: by HTA's name, in text order
    which = at[inv] if len(inv) else np.zeros(0, np.int64)
    sums = np.bincount(which, weights=dur[live], minlength=len(lab)).astype(np.int64)
    stretches = np.bincount(which, weights=dur[live] > 0, minlength=len(lab)).astype(np.int64)
    bits = np.zeros(len(lab), np.int64)
    for j, x in zip(at.tolist(), u.tolist()):
        bits[j] = x & 7
    # sort_values(ascending=False): NumPy's quicksort of the reversed column, reversed
    idx = np.arange(len(lab))[::-1][quicksort(sums[::-1])][::-1]
    return KernelTypes(bits[idx], lab[idx], sums[idx], stretches[idx], dev)
