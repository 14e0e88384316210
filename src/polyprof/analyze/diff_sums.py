"""What the diff keeps of each trace: its per-name sums (:func:`summarize`: per table and
raw name its count, total and per-step totals, :class:`TraceSums`), taken one trace at a
time from a side's runs (:func:`run_summaries`; a TraceSet's ranks where its ``map``
runs them), so that a diff holds sums, not traces (``analyze/diff.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from ..derive import cache
from ..errors import PolyprofError
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from .common import counted_kernel_rows, module_codes
from .diff_nesting import NestPairs, nest_pairs, table_events
from .diff_sides import recorded_by
from .units import number_ranges
from .window import AUTO, WindowArg, label, selection, view
from .window_counting import within_ns


def is_job(run: Any) -> bool:
    """A job's ranks (``polyprof.ranks.TraceSet``, known by what it does: ``map`` over its
    ``ranks``; analyze/ does not import the job layer above it)."""
    return callable(getattr(run, "map", None)) and isinstance(getattr(run, "ranks", None), list)


def run_summaries(run: Any, side: str, executor: Any, window: WindowArg = None) -> Iterator[tuple[int, TraceSums]]:
    """(rank, sums) of each trace of one run, in rank order for a TraceSet, else as given
    (the rank: the trace's own, else its position)."""
    from functools import partial

    if is_job(run):
        import sys

        done = run.map(partial(summarize, window=window), executor,
                       progress=f"run {side.upper()}" if sys.stderr.isatty() else None)
        for entry in run.entries:  # (each rank's file, where it has one: the verdict names a trace left out)
            sums = done[entry.rank]
            if sums.path is None and getattr(entry, "path", None) is not None:
                sums.path = str(entry.path)
            yield int(entry.rank), sums
        return
    if isinstance(run, Trace):
        run = [run]
    if isinstance(run, (str, bytes)) or not isinstance(run, Iterable):
        raise PolyprofError(f"diff: a run is a Trace, a sequence of Traces or a TraceSet, "
                            f"not a {type(run).__name__}")
    for i, trace in enumerate(run):
        if not isinstance(trace, Trace):
            raise PolyprofError(f"diff: run {side.upper()} item {i} is a {type(trace).__name__}, "
                                "not a polyprof Trace")
        sums = summarize(trace, window)
        yield (sums.rank if sums.rank is not None else i), sums


def _rank(trace: Trace) -> int | None:
    """The trace's rank: its one source's, else ``distributedInfo``'s, else None."""
    if len(trace.sources) == 1 and trace.sources[0].rank is not None:
        return int(trace.sources[0].rank)
    rank = trace.metadata.get(mkeys.RANK)
    return rank if isinstance(rank, int) else None


@dataclass
class TableSums:
    """One table of one trace: per distinct raw name, its count and total; per (name,
    step) with events, the total in that step."""

    names: list[str]
    kinds: np.ndarray  # activity class per name (kernels), -1 otherwise
    count: np.ndarray
    total: np.ndarray
    pair_name: np.ndarray  # index into names
    pair_step: np.ndarray  # step index in this trace
    pair_total: np.ndarray
    pair_count: np.ndarray  # the calls in that step
    modules: list[str] | None = None  # per name its compiled module ("" none; kernels only)


@dataclass
class TraceSums:
    """What the diff keeps of one trace (small, picklable: made where the rank is loaded)."""

    rank: int | None
    sources: int
    events: int
    step_ns: np.ndarray  # duration of each step
    tables: dict[str, TableSums]
    window: str = ""  # the steps analysed, in words
    span_ns: int = 0  # the trace's duration (its one sample when it has no steps)
    nest: dict[str, NestPairs] | None = None  # ops' and sections' time by the span around them
    path: str | None = None  # the file it was read from, where known
    recorded: str = ""  # what recorded it, in words: its plugins, else its file's format (diff_sides)
    analysed: str = ""  # the numbers of the steps analysed, as ranges ("1-11")


def summarize(trace: Trace, window: WindowArg = AUTO) -> TraceSums:
    """Per table and raw name of ``trace`` (of the steps ``window`` selects): counts,
    totals and per-step totals."""
    trace = view(trace, window)
    steps = cache.steps(trace)
    n_steps = max(len(steps), 1)
    tables = {}
    events = table_events(trace)
    modules: list[str] = []
    for table, e in events.items():
        keys = e.name
        if table == "kernels":  # XLA's ops by (module, name): names are unique within a module only
            mod, modules = module_codes(trace, counted_kernel_rows(trace)[0])
            keys = e.name.astype(np.int64) * (len(modules) + 1) + (mod + 1)
        ids, inv = np.unique(keys, return_inverse=True)
        first = np.zeros(len(ids), np.int64)
        first[inv[::-1]] = np.arange(len(inv))[::-1]  # an event of each name, for its kind
        total = np.zeros(len(ids), np.int64)
        np.add.at(total, inv, e.dur)
        inside = e.step >= 0
        pair, pinv = np.unique(inv[inside].astype(np.int64) * n_steps + e.step[inside], return_inverse=True)
        psum = np.zeros(len(pair), np.int64)
        np.add.at(psum, pinv, e.dur[inside])
        mod_of = None
        if table == "kernels":
            ids, mcode = np.divmod(ids, len(modules) + 1)
            mod_of = [([""] + modules)[c] for c in mcode.tolist()]
        tables[table] = TableSums(
            [trace.strings[i] for i in ids.tolist()],
            e.kind[first].astype(np.int64) if e.kind is not None else np.full(len(ids), -1, np.int64),
            np.bincount(inv, minlength=len(ids)).astype(np.int64), total, pair // n_steps, pair % n_steps, psum,
            np.bincount(pinv, minlength=len(pair)).astype(np.int64), mod_of)
    t0, t1 = (int(trace.span_ns[0]), int(trace.span_ns[1])) if trace.n_events else (0, 0)
    sel = selection(trace)  # the analysed window's time, as its totals: not a warm-up step left out
    # (less what is between a schedule's stretches: not recorded)
    span = within_ns(sel, t0, t1) if sel is not None else t1 - t0
    return TraceSums(_rank(trace), len(trace.sources), trace.n_events,
                     (steps.end - steps.start).astype(np.int64), tables, label(trace, window), int(span),
                     nest_pairs(events), _path(trace),
                     recorded_by(trace.metadata.get(mkeys.PLUGINS), trace.metadata.get(mkeys.FILE_SOURCE)),
                     number_ranges(steps.number.tolist()) if len(steps) else "")


def _path(trace: Trace) -> str | None:
    """The file ``trace`` was read from, where its reader wrote it (``metadata_keys.FILE_SOURCE``)."""
    src = trace.metadata.get(mkeys.FILE_SOURCE)
    path = src.get("path") if isinstance(src, dict) else None
    return str(path) if path else None

