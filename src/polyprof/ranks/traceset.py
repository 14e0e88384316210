"""The ranks of one job as a set: one type over every kind of rank source (trace files,
a directory, a store, Traces in memory, a capture's result; ranks/sources.py), with the
per-rank work on an executor (ranks/executor.py) and the job's report
(ranks/report.py).

Per-rank work runs where the rank is loaded: a worker loads one rank, runs the function
on it and hands back only its (small) result, so the parent never holds more than the
results, and a worker never more than one rank. Functions must be picklable for a
process pool (module-level functions).
"""

from __future__ import annotations

import os
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..errors import PolyprofError
from ..progress import TaskBar
from ..trace.core import Trace
from ..trace.merge import merge
from . import executor as executors
from .sources import RankEntry, StoreRank, assign_ranks, load_rank, resolve, several_runs


class TraceSet:
    """The ranks of one job (see the module doc)."""

    def __init__(self, entries: Sequence[RankEntry]):
        if not entries:
            raise PolyprofError("no traces given")
        ranks = [e.rank for e in entries]
        if len(set(ranks)) != len(ranks):
            raise PolyprofError(f"two traces claim the same rank: {sorted(ranks)}")
        self.entries = sorted(entries, key=lambda e: e.rank)
        self._ahead: executors.ReadAhead | None = None

    @property
    def ranks(self) -> list[int]:
        return [e.rank for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"TraceSet({len(self)} ranks: {self.ranks[:8]}{'...' if len(self) > 8 else ''})"

    def entry(self, rank: int) -> RankEntry:
        for e in self.entries:
            if e.rank == rank:
                return e
        raise PolyprofError(f"no rank {rank} (ranks: {self.ranks})")

    def load(self, rank: int) -> Trace:
        """One rank's Trace, loaded here."""
        return load_rank(self.entry(rank))

    def traces(self) -> Iterable[tuple[int, Trace]]:
        """(rank, Trace) in rank order, loaded here one at a time."""
        for r in self.ranks:
            yield r, self.load(r)

    def map(self, fn: Callable[[Trace], Any], executor: Executor | str | None = None,
            progress: str | None = None, jobs: int | None = None) -> dict[int, Any]:
        """``fn(trace)`` for every rank, on ``executor`` (ranks/executor.py; default: local
        processes, ``jobs`` of them: one per core, or one rank at a time in this process
        for a store's ranks and for a small job's files, ``executor.small_job``), by rank;
        a rank whose work fails raises a PolyprofError naming the rank and its source."""
        if jobs is None and any(e.source.one_at_a_time for e in self.entries):
            jobs = 1
        ahead, self._ahead = self._ahead, None
        out: dict[int, Any] = {}
        try:
            small = executors.small_job([e.path for e in self.entries], jobs)
            with executors.executor(executor, jobs, len(self), small) as ex:
                done = executors.run(_run_on, [(fn, e) for e in self.entries], ex, progress=progress,
                                     names=[f"rank {e.rank} ({e.label})" for e in self.entries], ahead=ahead,
                                     ahead_of=[None if e.path is None else str(e.path) for e in self.entries])
                ahead = None  # run() closes it
                for i, res in done:
                    out[self.entries[i].rank] = res
        finally:
            if ahead is not None:
                ahead.close()
        return {r: out[r] for r in self.ranks}

    def prefetch(self, executor: Executor | str | None = None) -> None:
        """Start reading the rank files ahead (ranks/executor.py) for the next :meth:`map`
        on ``executor``, where that can overlap what this process imports meanwhile;
        otherwise nothing."""
        if self._ahead is None and executors.worth_reading_ahead([e.path for e in self.entries], executor):
            self._ahead = read_ahead(self.entries)

    def table(self, fn: Callable[[Trace], Any], executor: Executor | str | None = None) -> Any:
        """``fn``'s table for every rank, as one table with a ``rank`` column first."""
        # analyze/ only for the methods that analyse: load_ranks and convert do not import it
        from .stack import with_rank

        return with_rank(self.map(fn, executor))

    def analyze(self, executor: Executor | str | None = None, tables: Sequence[str] | None = None,
                window: Any = "auto", jobs: int | None = None, progress: str | None = "analysing ranks") -> Any:
        """Every per-rank analysis (or only ``tables``, names of
        ``polyprof.analyze.registry.ANALYSES``, and then no findings of the ranks) over the
        steps ``window`` selects on each rank (``"auto"``, None for every step, or an
        ``analyze.window.Window``), with alignment, collectives and stragglers: a
        :class:`polyprof.ranks.report.JobReport`."""
        self.prefetch(executor)  # while the analyses import
        # analyze/ imported after the read-ahead above has started, so the two overlap
        from .report import RankInfo, job_report
        from .result import rank_summary  # the same

        fn: Any = partial(rank_summary, tables=None if tables is None else tuple(tables), window=window)
        if tables is None and window == "auto" and any(isinstance(e.source, StoreRank) for e in self.entries):
            # a store's rank above the memory bound is summarised window by window
            from .bounded import Summary  # as rank_summary above

            fn = Summary(fn)
        results = self.map(fn, executor, progress=progress, jobs=jobs)
        info = {e.rank: RankInfo(e.rank, e.label, e.how) for e in self.entries}
        return job_report(results, info, per_event_left=tables is None)

    def convert(self, output: str | os.PathLike, executor: Executor | str | None = None, *,
                jobs: int | None = None, chunk_rows: int | None = None, overwrite: bool = False) -> Path:
        """Write the ranks as a store at ``output`` (store/; one rank per task, each
        written where it is loaded); returns its path. ``polyprof.load_ranks(output)``
        gives back these ranks, numbered and labelled as here."""
        from .convert import convert  # the store's writer (pyarrow) only when converting

        return convert(self, output, executor, jobs=jobs, chunk_rows=chunk_rows, overwrite=overwrite)

    def merged(self, executor: Executor | str | None = None) -> Trace:
        """Every rank in one Trace, each rank's times moved onto the reference rank's
        clock by the alignment (memory: the whole job; for big jobs use per-rank work)."""
        from ..trace import clock  # the clock service only for a merge: loading ranks does not import it
        # analyze/ only for the methods that analyse, as above
        from .align import align_ranks
        from .collectives import collective_table  # the same
        from .result import anchor_of  # the same

        traces = []
        with TaskBar(len(self), "read ranks") as bar:
            for r in self.ranks:
                traces.append(self.load(r))
                bar.advance()
        tables = {r: collective_table(t) for r, t in zip(self.ranks, traces)}
        anchors, session = {}, {}
        for r, t in zip(self.ranks, traces):
            a, session[r] = anchor_of(t)
            if a is not None:
                anchors[r] = a
        clocks = align_ranks(tables, anchors, session)
        m = merge(traces)
        for s in m.sources:
            c = clocks.get(s.rank) if s.rank is not None else None
            if c is not None:
                clock.retime(m, c.fit, source=s.id)
        return m


def _run_on(fn: Callable[[Trace], Any], entry: RankEntry) -> Any:
    """A task: ``fn`` of the rank read ahead for ``entry`` (ranks/executor.py), else of
    the rank loaded here."""
    by_entry = getattr(fn, "by_entry", None)  # work that reads the rank its own way (stepwise.Summary)
    done = by_entry(entry) if by_entry is not None else None
    if done is not None:
        return done
    trace = executors.read_ahead(entry.path)
    return fn(load_rank(entry) if trace is None else trace)


def read_ahead(entries: Sequence[RankEntry]) -> executors.ReadAhead:
    """A reader of the rank files of ``entries`` (ranks/executor.py), started now."""
    return executors.ReadAhead([(e.path, partial(load_rank, e)) for e in entries if e.path is not None])


def load_ranks(items: Any, rank_by: str = "auto") -> TraceSet:
    """The ranks of one job from trace files, a directory of them, a store, a capture's
    log directory, Traces already loaded, or capture results (ranks/sources.py).

    The rank of each comes from what its data names (Kineto's ``distributedInfo``, a
    ``.polyprof`` header, a store's manifest, a Trace's source), else from its file name
    (``rank-3.json.gz``), else from the order given (``rank_by="auto"``); ``"order"``:
    from the order given; ``"trace"``: what the data names, an error where one does not
    name a distinct rank. Where files' data names a rank more than once and only the
    order given would number them (several runs of a job in one directory), ``"auto"``
    refuses, naming each run's files (``sources.several_runs``). Nothing is loaded here:
    per-rank work (``TraceSet.map``, ``analyze``) loads each rank where it runs.
    """
    sources = resolve(items)
    if not sources:
        raise PolyprofError("no traces given")
    assigned = assign_ranks(sources, rank_by)
    if rank_by == "auto":  # (the order asked for numbers them as given)
        several_runs(sources, assigned)
    return TraceSet([RankEntry(a.rank, a.how, s) for s, a in zip(sources, assigned)])
