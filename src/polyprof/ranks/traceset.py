"""The ranks of one job as a set: identity, per-rank work on an executor, and the
whole job on one clock.

Per-rank work runs where the rank is loaded: a worker loads one file, runs the function
on it and hands back only its (small) result, so the parent never holds more than the
results, and a worker never more than one rank. The executor is any
``concurrent.futures.Executor`` (a process pool by default; a Dask ``Client`` works
through its ``get_executor()``, a thread pool or ``serial`` for in-process work); the
function must be picklable for a process pool (a module-level function).
"""

from __future__ import annotations

import gc
import logging
import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from ..errors import PolyprofError
from ..trace.core import Trace
from . import prefetch
from .identity import assign_ranks

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("polyprof")

#: file name patterns a directory of ranks is read with
TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz", ".polyprof", ".xplane.pb")


@dataclass
class RankEntry:
    rank: int
    how: str  # how the rank was found: distributedInfo | file name | order
    path: Path | None = None
    trace: Trace | None = None

    @property
    def label(self) -> str:
        return self.path.name if self.path is not None else f"rank {self.rank}"


class SerialExecutor(Executor):
    """Runs each call at once in this process (one rank, or no pool wanted)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)
        return f


#: imported once by the pool's fork server, so each worker starts with them loaded
#: (and shares their pages) instead of importing pandas and the readers itself
PRELOAD = ["polyprof.ranks.report", "polyprof.formats.detect", "polyprof.formats.kineto",
           "polyprof.formats.native", "polyprof.formats.xspace", "polyprof.trace.identity",
           "polyprof.analyze.registry", "polyprof.analyze.memory_findings", "polyprof.report.tables"]


def default_executor(n_jobs: int) -> Executor:
    """A process pool of at most one worker per core (serial for one job).

    Workers are forked from this process when it has no other thread (they start at
    once with the readers and analyses already imported, and share those pages with it);
    otherwise, e.g. inside a profiled program, forking is unsafe and they come from a
    fork server that preloaded the analyses."""
    import importlib
    import multiprocessing as mp
    import threading

    workers = min(n_jobs, os.cpu_count() or 1)
    if workers <= 1:
        return SerialExecutor()
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        for name in PRELOAD:
            importlib.import_module(name)
        ctx = mp.get_context("fork")
    elif "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
    else:
        ctx = mp.get_context()
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def load_rank(entry: RankEntry) -> Trace:
    """One rank's trace, with its source named (rank, file name)."""
    from ..formats.detect import load
    from ..trace.identity import identify

    if entry.trace is not None:
        trace = entry.trace
    elif entry.path is not None and entry.path.is_dir():  # a rank of a store (polyprof convert)
        from ..store.rankfiles import read_rank

        trace = read_rank(entry.path)
    else:
        trace = load(entry.path)  # type: ignore[arg-type]
    if len(trace.sources) == 1:
        trace.sources[0].rank = entry.rank
        if not trace.sources[0].label:
            trace.sources[0].label = entry.label
    return identify(trace)


def _run(fn: Callable[[Trace], Any], entry: RankEntry) -> Any:
    trace = prefetch.loaded(entry.path)
    return fn(load_rank(entry) if trace is None else trace)


class TraceSet:
    """The ranks of one job (see the module doc)."""

    def __init__(self, entries: Sequence[RankEntry]):
        if not entries:
            raise PolyprofError("no traces given")
        ranks = [e.rank for e in entries]
        if len(set(ranks)) != len(ranks):
            raise PolyprofError(f"two traces claim the same rank: {sorted(ranks)}")
        self.entries = sorted(entries, key=lambda e: e.rank)
        self._prefetch: prefetch.Prefetch | None = None

    @property
    def ranks(self) -> list[int]:
        return [e.rank for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"TraceSet({len(self)} ranks: {self.ranks[:8]}{'...' if len(self) > 8 else ''})"

    def entry(self, rank: int) -> RankEntry:
        return next(e for e in self.entries if e.rank == rank)

    def load(self, rank: int) -> Trace:
        return load_rank(self.entry(rank))

    def map(self, fn: Callable[[Trace], Any], executor: Executor | str | None = None,
            progress: str | None = None) -> dict[int, Any]:
        """``fn(trace)`` for every rank, on ``executor`` (default: a process pool); a
        rank whose work fails raises a PolyprofError naming the rank and file."""
        ex, owned = _executor(executor, len(self))
        pre, self._prefetch = self._prefetch, None
        read = pre.take() if pre is not None and _in_reach(ex) else {}
        try:
            with _frozen_for_fork(ex):
                prefetch.use(read)
                futures = {e.rank: ex.submit(_run, fn, e) for e in _queue(self.entries, read, ex)}
            out = {}
            for rank, fut in _progress(futures, progress):
                e = self.entry(rank)
                try:
                    out[rank] = fut.result()
                except PolyprofError as err:
                    raise PolyprofError(f"rank {rank} ({e.label}): {err}") from None
                except Exception as err:  # a worker that died, or a bug: still name the rank
                    raise PolyprofError(f"rank {rank} ({e.label}): {type(err).__name__}: {err}") from None
            return {r: out[r] for r in self.ranks}
        finally:
            prefetch.release()
            if pre is not None:
                pre.close()
            if owned:
                ex.shutdown(wait=True, cancel_futures=True)

    def prefetch(self, executor: Executor | str | None = None) -> None:
        """Start reading ranks ahead (``ranks/prefetch.py``) for the next :meth:`map` on
        ``executor``, where that can overlap what this process imports meanwhile: an
        in-process executor or a fork pool not started yet; otherwise nothing."""
        if self._prefetch is not None or not prefetch.worth_it(self.entries):
            return
        if executor in (None, "process", "serial", "thread") or _in_reach(executor):
            self._prefetch = prefetch.Prefetch(self.entries)

    def table(self, fn: Callable[[Trace], "pd.DataFrame"], executor: Executor | str | None = None) -> "pd.DataFrame":
        """``fn``'s DataFrame for every rank, as one DataFrame with a ``rank`` column first."""
        return with_rank(self.map(fn, executor))

    def analyze(self, executor: Executor | str | None = None, tables: Sequence[str] | None = None,
                window: Any = "auto") -> Any:
        """Every per-rank analysis (or only ``tables``, names of
        ``polyprof.analyze.registry.ANALYSES``, and then no findings of the ranks) over the
        steps ``window`` selects on each rank (as ``report.tables.build``: ``"auto"``,
        None for every step, or an ``analyze.window.Window``), alignment, collectives and
        stragglers: a :class:`polyprof.ranks.report.RanksReport`."""
        self.prefetch(executor)  # while the analyses import
        from .report import build_ranks

        return build_ranks(self, executor, None if tables is None else tuple(tables), window)

    def merged(self, executor: Executor | str | None = None) -> Trace:
        """Every rank in one Trace, each rank's times moved onto the reference rank's
        clock by the alignment (memory: the whole job; for big jobs use per-rank work)."""
        from ..trace import clock
        from ..trace.merge import merge
        from .align import align_ranks
        from .collectives import collective_table

        traces = [self.load(r) for r in self.ranks]
        tables = {r: collective_table(t) for r, t in zip(self.ranks, traces)}
        clocks = align_ranks(tables, *anchors_of(traces, self.ranks))
        m = merge(traces)
        for s in m.sources:
            c = clocks.get(s.rank) if s.rank is not None else None
            if c is not None:
                clock.retime(m, c.fit, source=s.id)
        return m


def anchor_of(trace: Trace) -> tuple[dict[str, Any] | None, bool]:
    """The rank's wall anchor (if any) and whether its times are polyprof's monotonic clock."""
    anchor = trace.metadata.get("wall_anchor")
    return (anchor if isinstance(anchor, dict) and "wall_ns" in anchor else None,
            str(trace.metadata.get("clock", "")).startswith("CLOCK_MONOTONIC"))


def anchors_of(traces: Iterable[Trace], ranks: Iterable[int]) -> tuple[dict[int, Any], dict[int, bool]]:
    """Each rank's wall anchor and whether its times are a monotonic clock (polyprof's own)."""
    anchors, mono = {}, {}
    for r, t in zip(ranks, traces):
        a, mono[r] = anchor_of(t)
        if a is not None:
            anchors[r] = a
    return anchors, mono


def with_rank(results: dict[int, "pd.DataFrame"]) -> "pd.DataFrame":
    """The ranks' tables stacked into one, with a ``rank`` column first (one concat and
    one column insert, not a copy of each rank's table)."""
    import numpy as np
    import pandas as pd

    frames = [df for df in results.values()]
    if not frames:
        return pd.DataFrame({"rank": []})
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)
    if "rank" in out.columns:  # a table that already has one: the set's numbering wins
        out = out.drop(columns="rank")
    out.insert(0, "rank", np.repeat(np.fromiter(results, np.int64, len(results)),
                                    [len(df) for df in frames]))
    return out


def _executor(executor: Executor | str | None, n: int) -> tuple[Executor, bool]:
    if isinstance(executor, Executor):
        return executor, False
    if executor in (None, "process"):
        return default_executor(n), True
    if executor == "serial":
        return SerialExecutor(), True
    if executor == "thread":
        from concurrent.futures import ThreadPoolExecutor

        return ThreadPoolExecutor(max_workers=min(n, os.cpu_count() or 1)), True
    raise PolyprofError(f"unknown executor {executor!r} (an Executor, 'process', 'thread' or 'serial')")


def _queue(entries: list[RankEntry], read: dict[str, Any], ex: Executor) -> list[RankEntry]:
    """The order ranks are submitted in: one rank to read per worker, then the ranks
    read ahead (quick, only analysed: their pickles are freed early) but one per worker,
    then the rest, then those last few (short tasks even out the workers' ends)."""
    if not read:
        return entries
    ahead = [e for e in entries if str(e.path) in read]
    rest = [e for e in entries if str(e.path) not in read]
    n = getattr(ex, "_max_workers", 1)
    early, late = (ahead[:-n], ahead[-n:]) if len(ahead) > n else ([], ahead)
    return rest[:n] + early + rest[n:] + late


def _in_reach(ex: Any) -> bool:
    """Whether work on ``ex`` can see what this process holds now: it runs here, or in
    workers that will fork from here (a fork pool not started yet)."""
    from concurrent.futures import ThreadPoolExecutor

    return isinstance(ex, (SerialExecutor, ThreadPoolExecutor)) or (_forks(ex) and not getattr(ex, "_processes", None))


def _forks(ex: Any) -> bool:
    """Whether ``ex`` is a process pool whose workers are forked from this process."""
    ctx = getattr(ex, "_mp_context", None)
    return ctx is not None and ctx.get_start_method() == "fork"


@contextmanager
def _frozen_for_fork(ex: Executor) -> Iterator[None]:
    """While a fork pool starts its workers (at the first submit), this process's heap
    is moved out of the collector's reach (``gc.freeze``, as the gc docs advise before
    fork): a worker's collections then never walk the inherited objects, which would
    write to those pages and copy them (time, and memory counted once per worker). The
    parent's heap is given back to the collector as soon as the workers exist."""
    if not _forks(ex):
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _progress(futures: dict[int, Future], label: str | None) -> Iterable[tuple[int, Future]]:
    """Futures as they complete, with a progress bar on a terminal."""
    from concurrent.futures import as_completed

    from ..progress import TaskBar

    by_future = {f: r for r, f in futures.items()}
    if label is None:
        yield from ((by_future[f], f) for f in as_completed(by_future))
        return
    with TaskBar(len(futures), label) as bar:
        for f in as_completed(by_future):
            bar.advance()
            yield by_future[f], f


def expand(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files as given, and every trace file in a directory given (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(TRACE_SUFFIXES)
                           and not q.name.startswith("."))
            if not found:
                raise PolyprofError(f"{p}: no trace files in this directory")
            out.extend(found)
        elif not p.exists():
            raise PolyprofError(f"{p}: no such file")
        else:
            out.append(p)
    return out


def _is_store(p: Any) -> bool:
    from ..store.manifest import is_store

    return isinstance(p, (str, os.PathLike)) and is_store(p)


def load_ranks(paths: str | os.PathLike | Iterable[str | os.PathLike | Trace]) -> TraceSet:
    """The ranks of one job from files, a directory, a store, or Traces already loaded.

    The rank of each comes from its ``distributedInfo``, else from its file name
    (``rank-3.json.gz``), else from the order given. Files are not loaded here: per-rank
    work (``TraceSet.map``, ``analyze``) loads each where it runs.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    items = list(paths)
    if items and all(isinstance(t, Trace) for t in items):
        entries = []
        for i, t in enumerate(items):
            r = t.sources[0].rank if len(t.sources) == 1 and t.sources[0].rank is not None else None
            entries.append(RankEntry(r if r is not None else i, "distributedInfo" if r is not None else "order",
                                     trace=t))
        if len({e.rank for e in entries}) < len(entries):
            entries = [RankEntry(i, "order", trace=t) for i, t in enumerate(items)]  # type: ignore[misc]
        return TraceSet(entries)
    if len(items) == 1 and _is_store(items[0]):  # a store: its ranks, read one at a time where used
        from ..store.store import Store

        st = Store(items[0])  # type: ignore[arg-type]
        return TraceSet([RankEntry(r, "store", path=st.path(r)) for r in st.ranks])
    files = expand(items)  # type: ignore[arg-type]
    return TraceSet([RankEntry(r, how, path=p) for p, (r, how) in zip(files, assign_ranks(files))])
