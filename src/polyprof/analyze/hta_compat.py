"""HTA 0.5's reading of a Kineto trace, for the ``hta`` window (``--window hta``).

Holistic Trace Analysis builds one table per rank and its temporal breakdown counts
the rows of that table that have a stream. Which rows those are, from its parser and
its iteration filter (``hta/common/trace_parser.py``, ``hta/common/trace.py``,
``hta/common/trace_filter.py``), restated here on polyprof's columns:

- every event with a duration, except the categories ``Trace`` and ``python_function``;
- its ``stream`` and ``correlation`` are the args of those names (-1 when absent or
  not an integer: ROCm's runtime calls carry ``"stream": "0x0"``, which polyprof reads
  as 0 and HTA as none, so runtime calls have none here): a device activity is a row with a stream; device activity without
  one (MTIA's DMA requests) is not counted, a ``cuda_sync`` record with one is;
- a trace HTA cannot read itself (not Kineto or Chrome JSON) is read as HTA reads
  polyprof's Kineto export of it (``formats/kineto_view.py``, the functions the writer
  uses): device activity without a stream has its track's tid, a host runtime call's
  integer stream is a handle (none), times count from the export's time base, and
  copies and fills have the export's names (:func:`hta_names`);
- times are read as doubles of µs and, when the file's ``ts`` are fractional, each
  start moves up and each end down to whole µs (:func:`rounded_like_hta`);
- with two or more ``ProfilerStep`` names (in a trace HTA cannot read itself, an XSpace
  or a live session's, the steps polyprof found: its Kineto export names them
  ``ProfilerStep#N``, so HTA on the export sees them), the rows are cut to the "CPU" rows (all but
  the launched device rows: a stream and a correlation id, or an ``Event Sync`` /
  ``Context Sync`` record) starting before the last step starts, and the launched
  device rows whose correlation id one of those carries. Device activity without a
  correlation id thus stays when it started before the last step; device activity
  whose launch is not in the file is dropped;
- kernel types from the name: compute unless a NCCL kernel, a copy, a fill or a sync.

Its temporal breakdown then merges the counted rows HTA's way (sorted by start, a row
whose start is past every end so far opens a new busy stretch; a stretch is its least
start to its greatest end, so an activity rounded to an end before its start subtracts
when alone) over the span from the first stretch's start to the last one's end.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from ..derive import cache
from ..derive.intervals import union
from ..formats.kineto_view import copy_names, device_streams, stream_handles, time_base
from ..trace.core import Trace
from ..trace import metadata_keys as mkeys
from ..trace import keys
from ..trace.sorting import unique

#: categories HTA's parser leaves out (its ``skip_event_types`` default and ``Trace``)
SKIPPED_CATEGORIES = ("Trace", "python_function")
#: the category of runtime calls (cudaLaunchKernel, hipLaunchKernel, ...)
RUNTIME_CATEGORY = "cuda_runtime"
#: the formats HTA reads itself (``metadata["source"]["format"]``): their events' own names are HTA's
KINETO_FORMATS = ("kineto", "chrome-json")
#: device-wide sync records HTA counts with the launched device rows
SYNC_NAMES = ("Event Sync", "Context Sync")
#: names HTA does not call COMPUTATION: NCCL kernels, MTIA DMA (dma...), anything with
#: Memcpy, Memset at the start, anything with Sync
_NOT_COMPUTE = r"^nccl.*Kernel|^dma|.*Memcpy|Memset|.*Sync"  # compiled on first use (re's cache), not at import


class HtaActivity(NamedTuple):
    """The device rows HTA's temporal breakdown counts, with its times (ns)."""

    rows: np.ndarray  # event rows, ascending
    start: np.ndarray
    end: np.ndarray  # before start where rounding reversed a sub-µs activity
    compute: np.ndarray  # bool: HTA's COMPUTATION kernel type


def rounded_like_hta(start: np.ndarray, end: np.ndarray, base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) as HTA's parser rounds float timestamps: ``ts`` (µs since
    ``base_ns``, the double nearest its decimal text) up, ``ts + dur`` (in doubles)
    down, to whole µs."""
    rel = np.asarray(start, np.int64) - base_ns
    ts = (rel // 1000).astype(np.float64) + (rel % 1000) / 1000.0  # one rounding, as parsing the text
    te = ts + (np.asarray(end, np.int64) - np.asarray(start, np.int64)) / 1000.0
    return np.ceil(ts).astype(np.int64) * 1000 + base_ns, np.floor(te).astype(np.int64) * 1000 + base_ns


def base_time_ns(trace: Trace) -> int:
    """What HTA's ``ts`` count from, in the trace's time: the file's ``baseTimeNanoseconds``
    where HTA reads the trace's own file, else the base of polyprof's Kineto export less
    the shift it moves the times by (``formats/kineto_view.py: time_base``)."""
    if not reads_itself(trace):
        shift, exported = time_base(trace)
        return exported - shift
    base = trace.metadata.get(mkeys.BASE_TIME_NS)
    return int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0


def _int_arg(trace: Trace, key: str) -> np.ndarray:
    """The integer arg ``key`` of every event, -1 where absent or not an integer."""
    n = trace.n_events
    out = np.full(n, -1, np.int64)
    col = trace.stats.get(key)
    if col is None or not len(col.rows):
        return out
    vals = col.values
    if vals.dtype.kind in "iu":
        out[col.rows] = vals
    elif vals.dtype.kind == "f":
        ok = np.isfinite(vals)
        out[col.rows[ok]] = vals[ok].astype(np.int64)
    else:  # mixed or text: HTA's int() of each value
        for r, v in zip(col.rows.tolist(), vals.tolist()):
            try:
                out[r] = int(v)
            except (TypeError, ValueError):
                pass
    return out


class HtaTable(NamedTuple):
    """HTA's per-rank table as polyprof's columns: one entry per event of the trace."""

    kept: np.ndarray  # bool: a row of HTA's table (after its iteration filter)
    stream: np.ndarray  # HTA's stream, -1 for none
    corr: np.ndarray  # HTA's correlation, -1 for none
    launched: np.ndarray  # bool: HTA's "GPU kernel" rows (a stream and a correlation, or a sync record)
    start: np.ndarray  # ns, rounded as HTA reads the file
    end: np.ndarray
    parsed: np.ndarray  # bool: a row of HTA's table before its iteration filter
    filtered: bool  # whether the iteration filter applied (two step names or more)


def hta_table(trace: Trace) -> HtaTable:
    """The rows of HTA 0.5's per-rank table and its columns (module doc)."""
    return cache.memo(trace, "hta_table", _table)


def _table(trace: Trace) -> HtaTable:
    ev = trace.events
    strings = np.asarray(trace.strings, dtype=object)
    n = trace.n_events
    kept = ~np.isin(ev["category"], np.flatnonzero(np.isin(strings, SKIPPED_CATEGORIES)))
    stream = _int_arg(trace, keys.STREAM)
    if reads_itself(trace):
        # runtime calls carry a stream only on ROCm, as hex text ("0x0") that HTA's int() refuses
        stream[np.isin(ev["category"], np.flatnonzero(strings == RUNTIME_CATEGORY))] = -1
    else:  # the streams polyprof's Kineto export writes: handles as hex, a track's tid where none
        col = trace.stats.get(keys.STREAM)
        if col is not None and col.kind in "iu":
            stream[stream_handles(trace) & (stream >= 0)] = -1
        rows, tid = device_streams(trace)
        stream[rows] = tid
    corr = _int_arg(trace, keys.CORRELATION_ID)
    start = ev["start_ns"].astype(np.int64)
    end = start + ev["dur_ns"].astype(np.int64)
    base = base_time_ns(trace)
    if n and np.any((start[kept] - base) % 1000):  # HTA rounds only a file with fractional ts
        start, end = rounded_like_hta(start, end, base)
    names = ev["name"]
    launched = ((stream >= 0) & (corr >= 0)) | np.isin(names, np.flatnonzero(np.isin(strings, SYNC_NAMES)))
    step_ids = np.flatnonzero(np.array(["ProfilerStep" in s for s in strings.tolist()], bool))
    step_ids = np.intersect1d(step_ids, names[kept])
    step_row = np.isin(names, step_ids)
    n_steps = len(step_ids)
    exported = _exported_steps(trace)
    if exported is not None:  # the steps HTA finds in polyprof's Kineto export of this trace
        rows, numbers = exported
        kept[rows] = True  # written as user_annotation
        step_row[rows] = True
        n_steps = len({strings[i] for i in step_ids.tolist()} | {f"ProfilerStep#{k}" for k in numbers.tolist()})
    parsed = kept
    if n_steps >= 2:  # HTA's iteration filter
        host = kept & ~launched
        is_step = host & step_row
        last = start[is_step].max() if is_step.any() else np.iinfo(np.int64).min
        host &= start < last
        kept = host | (kept & launched & np.isin(corr, corr[host]))
    return HtaTable(kept, stream, corr, launched, start, end, parsed, n_steps >= 2)


def reads_itself(trace: Trace) -> bool:
    """Whether HTA reads the trace's own file (Kineto or Chrome JSON); else --window hta
    reads it as HTA reads polyprof's Kineto export of it (``formats/kineto_view.py``)."""
    source = trace.metadata.get(mkeys.FILE_SOURCE)
    return isinstance(source, dict) and source.get("format") in KINETO_FORMATS


def hta_names(trace: Trace) -> tuple[np.ndarray, list[str]]:
    """(name id per event, the strings they index): the names HTA types kernels by. The
    trace's own where HTA reads its file; else those of its Kineto export, where copies
    and fills HTA would not call memory are named as Kineto names them
    (``formats/kineto_view.py: copy_names``)."""
    return cache.memo(trace, "hta_names", _names)


def _names(trace: Trace) -> tuple[np.ndarray, list[str]]:
    ids = trace.events["name"].astype(np.int64)
    strings = list(trace.strings)
    if reads_itself(trace):
        return ids, strings
    cn = copy_names(trace)
    ids[cn.rows] = len(strings) + cn.which
    return ids, strings + cn.names


def _exported_steps(trace: Trace) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, numbers) of the steps of a trace HTA cannot read itself (not Kineto or Chrome
    JSON: an XSpace, a live session...), which polyprof's Kineto export names
    ``ProfilerStep#N`` (``writers/kineto.py``) so that HTA finds them; None where HTA reads
    the trace's own names (a Kineto file, or steps marked ``ProfilerStep`` already)."""
    if reads_itself(trace):
        return None
    # every step of the trace: a windowed view (analyze/window.py) keeps them as "all_steps"
    steps = cache.memo(trace, "all_steps", cache.steps)
    if steps.source in ("", "ProfilerStep") or not len(steps.rows):
        return None
    return np.asarray(steps.rows, np.int64), np.asarray(steps.number, np.int64)


def hta_activity(trace: Trace) -> HtaActivity:
    """The device rows HTA 0.5's temporal breakdown counts in ``trace`` (module doc)."""
    return cache.memo(trace, "hta_activity", _activity)


def _activity(trace: Trace) -> HtaActivity:
    t = hta_table(trace)
    ids, strings = hta_names(trace)
    rows = np.flatnonzero(t.kept & (t.stream != -1))
    uniq, inv = np.unique(ids[rows], return_inverse=True)
    compute = np.array([re.match(_NOT_COMPUTE, strings[i]) is None for i in uniq.tolist()], bool)[inv] \
        if len(rows) else np.zeros(0, bool)
    return HtaActivity(rows, t.start[rows], t.end[rows], compute)


#: categories of the device activity HTA's idle time breakdown looks at (not cuda_sync)
KERNEL_CATEGORIES = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
#: HTA's ``consecutive_kernel_delay`` default: a shorter gap with the work queued is kernel-wait
CONSECUTIVE_KERNEL_DELAY_NS = 30_000


class StreamIdle(NamedTuple):
    """One stream's idle time as HTA splits it (ns) and where the stream is."""

    host_wait: int
    kernel_wait: int
    other: int
    first_row: int  # the stream's first activity
    gaps: int


def idle_gaps(trace: Trace, delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS) -> dict[int, StreamIdle]:
    """HTA 0.5's ``get_idle_time_breakdown``: per stream, the host-wait, kernel-wait and
    other idle ns. On each stream, the activities of :data:`KERNEL_CATEGORIES` in HTA's table
    sorted by start; each one's gap is its start less the previous one's end (negative
    where they overlap, and summed so); host-wait when its launch call started after that
    end, kernel-wait when not and the gap is under ``delay_ns``, other else."""
    t = hta_table(trace)
    ev = trace.events
    strings = np.asarray(trace.strings, dtype=object)
    dev = t.kept & (t.stream != -1) & np.isin(ev["category"], np.flatnonzero(np.isin(strings, KERNEL_CATEGORIES)))
    # the launch: a row HTA does not call a kernel with the same correlation (the last such
    # row), its start when it is in the table
    cpu = np.flatnonzero(~t.launched & (t.corr >= 0))
    cpu = cpu[np.argsort(t.corr[cpu], kind="stable")]
    out: dict[int, StreamIdle] = {}
    for stream in unique(t.stream[dev]).tolist():
        rows = np.flatnonzero(dev & (t.stream == stream))
        rows = rows[np.argsort(t.start[rows], kind="stable")]
        s, e = t.start[rows], t.end[rows]
        gap = s[1:] - e[:-1]
        c = t.corr[rows[1:]]
        at = np.searchsorted(t.corr[cpu], c, side="right") - 1
        has = (c >= 0) & (at >= 0)
        # no launch rows at all (a trace of device activity only): no gap is host-wait
        launch = np.where(has, cpu[np.maximum(at, 0)] if len(cpu) else -1, -1)
        has &= t.corr[launch] == c
        has &= t.kept[launch]
        host = has & (t.start[launch] > e[:-1])
        kern = ~host & (gap < delay_ns)
        out[int(stream)] = StreamIdle(int(gap[host].sum()), int(gap[kern].sum()), int(gap[~host & ~kern].sum()),
                                      int(rows[0]), len(gap))
    return out


def merged(start: np.ndarray, end: np.ndarray) -> tuple[int, int, int]:
    """(first start, last end, busy time) of intervals merged as HTA merges kernels."""
    if not len(start):
        return 0, 0, 0
    gs, ge = union(start, end)
    return int(gs[0]), int(ge[-1]), int(ge.sum() - gs.sum())
