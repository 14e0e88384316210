"""Rank sources: where each rank of a job comes from, resolved from what the user gave.

As Perfetto's ``BatchTraceProcessor`` takes trace resolvers, a job takes *rank
sources*: a trace file, one rank of a store, a Trace already in memory, a capture's
result. Each is small and picklable (a worker loads its rank where it runs: ``load``)
and says what it knows of its rank before loading: the rank the data itself names
(``named``: a Kineto ``distributedInfo``, a ``.polyprof`` header, a store's manifest, a
Trace's source) and a number in its file name (``in_name``). :func:`resolve` turns
paths (files, a directory, a store, a capture's log directory), Traces and capture
results into sources, through :data:`RESOLVERS` (one function per kind, asked in order);
:func:`assign_ranks` numbers them, one rule for every kind (module ``identity``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import logging
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from ..errors import PolyprofError
from ..formats.journal_layout import MAGIC as JOURNAL_MAGIC, SUFFIX as JOURNAL_SUFFIX
from ..store.manifest import is_store, read_manifest, refuse_rank_dir
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.identity import identify
from .identity import NAMED_RANK, process_in_file, rank_in_file, rank_in_name

log = logging.getLogger("polyprof")

#: file name endings a directory of ranks is read with: every format polyprof reads (a file
#: of another format among them is refused, naming it); with those of other packages'
#: formats that have a reader (:func:`rank_files`)
TRACE_SUFFIXES = (".json", ".json.gz", ".json.xz", ".pt.trace.json", ".pt.trace.json.gz", ".polyprof",
                  ".xplane.pb", ".xplane.pb.gz", ".xplane.pb.xz", ".pftrace", ".pftrace.gz", ".pftrace.xz",
                  ".perfetto-trace", ".perfetto-trace.gz", ".perfetto-trace.xz", ".sqlite", ".sqlite3", ".db",
                  ".rpd", ".nvvp", ".nvprof", ".parquet",
                  *(d + z for d in (".sqlite", ".sqlite3", ".db", ".rpd", ".nvvp", ".nvprof") for z in (".gz", ".xz")))


class RankSource(ABC):
    """One rank's data, not loaded yet. ``label`` names it in tables (the file);
    ``path`` is the trace file it reads, if it reads one (what can be read ahead)."""

    label: str = ""
    path: Path | None = None
    #: whether the job works on such ranks one at a time unless told otherwise (``jobs``):
    #: a store's, whose ranks need not fit in memory side by side
    one_at_a_time: bool = False

    def named(self) -> tuple[int, str] | None:
        """The rank the data names itself, and how it says so (not loading it)."""
        return None

    def in_name(self) -> tuple[int, bool] | None:
        """A number in the source's file name, and whether a word names it a rank
        (``identity.rank_in_name``)."""
        return None

    @abstractmethod
    def load(self) -> Trace:
        """The rank's Trace."""


class TraceFile(RankSource):
    """A trace file of any format ``polyprof.load`` reads."""

    def __init__(self, path: str | os.PathLike):
        self.file = self.path = Path(path)
        self.label = self.file.name

    def named(self) -> tuple[int, str] | None:
        r = rank_in_file(self.file)
        return None if r is None else (r, "distributedInfo")

    def in_name(self) -> tuple[int, bool] | None:
        return rank_in_name(self.file)

    def load(self) -> Trace:
        from ..formats.detect import load  # the readers: where the rank is loaded, not where the job is listed

        return load(self.file)

    def __repr__(self) -> str:
        return f"TraceFile({str(self.path)!r})"


class TraceFiles(RankSource):
    """Several Kineto JSON files one process recorded (a schedule's cycles written by
    ``tensorboard_trace_handler``, Lightning's training and validation profiles): one
    rank, its recordings one trace on the process's clock."""

    def __init__(self, paths: list[Path]):
        self.files = list(paths)
        self.path = None  # several files: none to read ahead
        self.label = f"{self.files[0].name} (+{len(self.files) - 1} of its process)"

    def named(self) -> tuple[int, str] | None:
        return TraceFile(self.files[0]).named()

    def in_name(self) -> tuple[int, bool] | None:
        return rank_in_name(self.files[0])

    def load(self) -> Trace:
        from ..formats.detect import load  # the readers: where the rank is loaded, not where the job is listed
        from ..trace.merge import merge  # the builder: only for a rank of several files

        parts = [load(f) for f in self.files]
        for t in parts:  # one source: the process's planes and threads are one
            for src in t.sources:
                src.label = self.label
        spans = [list(t.span_ns) for t in parts if t.n_events]
        if any(t.metadata.get(mkeys.SCHEDULE) for t in parts) or len(spans) < 2:
            return merge(parts)
        # each file a recording (a schedule's cycle): the time between them was not recorded
        return merge(parts, {mkeys.SCHEDULE: {"by": mkeys.SCHEDULE_BY_FILES, "windows_ns": sorted(spans)}})

    def __repr__(self) -> str:
        return f"TraceFiles({[str(f) for f in self.files]!r})"


class StoreRank(RankSource):
    """One rank of a store (``polyprof convert``): its rank, file name and how the rank
    was found are the ones the conversion recorded in the manifest. A store is for jobs
    bigger than memory: its ranks are worked on one at a time unless ``jobs`` says more."""

    one_at_a_time = True

    def __init__(self, folder: str | os.PathLike, rank: int, label: str = "", how: str = "store", events: int = 0):
        self.folder = Path(folder)
        self.rank = rank
        self.label = label or f"rank {rank}"
        self.how = how
        self.events = events  # as the manifest records it (0: not known)

    def named(self) -> tuple[int, str] | None:
        return self.rank, self.how

    def load(self) -> Trace:
        from ..store.rankfiles import read_rank  # pyarrow.parquet: only where a store's rank is read

        return read_rank(self.folder)

    def __repr__(self) -> str:
        return f"StoreRank({str(self.folder)!r})"


class InMemory(RankSource):
    """A Trace already loaded (a live session's, a capture's)."""

    def __init__(self, trace: Trace, label: str = ""):
        self.trace = trace
        src = trace.sources[0] if len(trace.sources) == 1 else None
        self.label = label or (src.label if src is not None and src.label else "")
        self._rank = src.rank if src is not None else None

    def named(self) -> tuple[int, str] | None:
        return None if self._rank is None else (int(self._rank), "distributedInfo")

    def load(self) -> Trace:
        return self.trace

    def __repr__(self) -> str:
        return f"InMemory({self.trace!r})"


# ----------------------------------------------------------------------------- resolvers
def _trace(item: Any) -> list[RankSource] | None:
    return [InMemory(item)] if isinstance(item, Trace) else None


def _source(item: Any) -> list[RankSource] | None:
    return [item] if isinstance(item, RankSource) else None


def _captured(item: Any) -> list[RankSource] | None:
    """A capture's result (``polyprof.capture.client.Captured``): its trace, if it succeeded."""
    if not (callable(getattr(item, "trace", None)) and hasattr(item, "ok") and hasattr(item, "address")):
        return None
    if not item.ok:
        raise PolyprofError(f"the capture of {item.address} failed: {getattr(item, 'error', '')}")
    return [InMemory(item.trace(), label=str(item.address))]


def _store(item: Any) -> list[RankSource] | None:
    if not isinstance(item, (str, os.PathLike)) or not is_store(Path(item)):
        return None
    root = Path(item)
    return [StoreRank(root / r["path"], r["rank"], r.get("label") or Path(str(r.get("input", ""))).name,
                      r.get("rank_from") or "store", int(r.get("events") or 0))
            for r in sorted(read_manifest(root)["ranks"], key=lambda r: r["rank"])]


def _logdir(item: Any) -> list[RankSource] | None:
    """A capture's log directory (``polyprof capture --logdir``, XProf's layout
    ``<logdir>/plugins/profile/<run>/<process>.xplane.pb``): the latest run's files."""
    run = _profile_run(item)
    return None if run is None else _directory(run)


def is_logdir(p: Path) -> bool:
    """Whether ``p`` is a log directory of XProf's layout (``plugins/profile`` in it)."""
    return (p / "plugins" / "profile").is_dir()


def _profile_run(item: Any) -> Path | None:
    """A log directory's latest profile run that holds trace files (:func:`_logdir`; a
    later one without, a capture that wrote nothing, is passed over with a warning),
    None for another item."""
    if not isinstance(item, (str, os.PathLike)) or not is_logdir(Path(item)):
        return None
    profile = Path(item) / "plugins" / "profile"
    runs = sorted((p for p in profile.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))
    if not runs:
        raise PolyprofError(f"{item}: a log directory without a profile run")
    held = next((r for r in reversed(runs) if rank_files(r)), runs[-1])
    if held != runs[-1]:
        log.warning("%s: the latest profile run, %s, holds no trace files; reading %s", item, runs[-1].name,
                    held.name)
    return held


def _held_below(p: Path) -> str:
    """What a directory without trace files holds one level down: its subdirectories that
    do (runs or jobs side by side), said with how to read them; "" for none."""
    try:
        subs = sorted(q for q in p.iterdir() if q.is_dir() and rank_files(q))
    except OSError:
        return ""
    if not subs:
        return ""
    names = ", ".join(f"{q.name}/" for q in subs[:4]) + (f" and {len(subs) - 4} more" if len(subs) > 4 else "")
    return (f", but its subdirectories {names} hold some: give one of them (a job's ranks), or two to "
            f"`polyprof diff`" if len(subs) > 1 else f", but its subdirectory {names} holds some: give it")


def _directory(item: Any, warn: bool = True) -> list[RankSource] | None:
    if not isinstance(item, (str, os.PathLike)) or not Path(item).is_dir():
        return None
    p = Path(item)
    refuse_rank_dir(p)
    from ..formats.rocprof_csv import runs_in  # rocprofv3's CSV output: one rank per prefix (process)
    from ..formats.nsys_csv import runs_in as nsys_runs  # nsys stats -o PREFIX's CSVs: one rank per prefix

    found = runs_in(p) or nsys_runs(p) or _with_rocprof_v1(_traces_only(_without_xprof_copies(rank_files(p)), warn), p)
    if not found:
        raise PolyprofError(f"{p}: no trace files in this directory{_held_below(p)}")
    journals = [q.name for q in found if q.name.endswith(JOURNAL_SUFFIX)]
    if journals and warn:
        log.warning("%s: %s: read from the crash journal, no finished trace beside it (the session never "
                    "stopped: killed?): host data up to the last flush only", p, ", ".join(journals))
    return _by_process(found)


def _with_rocprof_v1(files: list[Path], p: Path) -> list[Path]:
    """``files`` and rocprof (v1)'s kernel CSVs in ``p`` (``results.csv``: a rank each), but
    not one beside the JSON trace of its run (``results.json``, with ``--hip-trace``: the
    same dispatches and the calls that made them)."""
    from ..formats.rocprof_v1_csv import kernel_csvs  # the CSV headers: only where a directory is listed

    runs = {q.name[: -len(".json")] for q in files if q.name.endswith(".json")}
    return files + [q for q in kernel_csvs(p) if q.name[: -len(".csv")] not in runs]


def _by_process(files: list[Path]) -> list[RankSource]:
    """A source per file, but one for the Kineto files one process recorded (the same
    host, pid and ``distributedInfo`` rank, ``identity.process_in_file``): before, each
    was a rank of its own, and one program's profile cycles a job of unaligned ranks."""
    groups: dict[object, list[Path]] = {}
    for q in files:
        proc = process_in_file(q) if q.name.endswith((".json", ".json.gz", ".json.xz")) else None
        groups.setdefault(q if proc is None else proc, []).append(q)
    out: list[RankSource] = []
    for key, group in groups.items():
        out.append(TraceFile(group[0]) if len(group) == 1 else TraceFiles(group))
        if len(group) > 1:
            log.info("%s: one process (%s), one rank: %s", group[0].parent, key, ", ".join(q.name for q in group))
    return out


def rank_files(p: Path) -> list[Path]:
    """The files of directory ``p`` that may be ranks, by their names' endings: those of
    polyprof's formats (:data:`TRACE_SUFFIXES`), and of the formats with a reader that
    other packages add (``polyprof.formats`` entry points: ``.acmelog``). The installed
    packages are looked at only when a file has an ending polyprof's formats do not."""
    files = sorted(q for q in p.iterdir() if not q.name.startswith(".") and q.is_file())
    own = [q for q in files if q.name.endswith(TRACE_SUFFIXES)]
    journals = crash_journals(files)
    if len(own) + len(journals) == len(files):
        return sorted(own + journals)
    from ..formats.registry import readers  # the formats' list: only for a file of another ending

    endings = tuple(s for f in readers() for s in f.suffixes)
    return sorted([q for q in files if q.name.endswith(TRACE_SUFFIXES) or q.name.lower().endswith(endings)]
                  + journals)


def crash_journals(files: list[Path]) -> list[Path]:
    """The crash journals among ``files`` that are ranks: ``OUTPUT.partial`` (a run whose
    session never stopped: killed, or a Dask worker ended without ``stop()``), told by its
    first bytes, where no ``OUTPUT`` is beside it (a finished trace wins over its journal).
    An earlier run's kept journal (``OUTPUT.partial.1``) is not a rank."""
    names = {q.name for q in files}
    magic = JOURNAL_MAGIC[:JOURNAL_MAGIC.index(b" ") + 1]  # any version: its reader says which it reads
    out = []
    for q in files:
        if q.name.endswith(JOURNAL_SUFFIX) and q.name[: -len(JOURNAL_SUFFIX)] not in names:
            try:
                with q.open("rb") as f:
                    head = f.read(len(magic))
            except OSError:  # unreadable: not listed, as a file of no trace's name
                continue
            if head == magic:
                out.append(q)
    return out


def _traces_only(files: list[Path], warn: bool = True) -> list[Path]:
    """``files`` less those that are no trace of a format polyprof reads, named in one
    warning: a summary written into the job's directory, a program's own JSON, a file
    still empty (being written). Told by their first bytes, as ``polyprof.load`` tells
    formats; a file that is a trace but damaged stays, for its rank to fail naming it."""
    from ..formats.detect import why_not_a_trace  # the formats' sniffs: only where a directory is listed

    why = {q: w for q in files if (w := why_not_a_trace(q))}
    if why and warn:
        log.warning("%s: left out, not traces: %s", files[0].parent, ", ".join(f"{q.name} ({w})" for q, w in why.items()))
    return [q for q in files if q not in why]


#: what JAX and TensorFlow write beside ``<host>.xplane.pb`` in one profile run: the same
#: events again (``<host>.trace.json.gz``; ``perfetto_trace.json.gz`` with
#: ``create_perfetto_trace=True``) and the memory profile
_XPROF_COPIES = (".trace.json.gz", ".trace.json", ".memory_profile.json.gz")


def _without_xprof_copies(files: list[Path]) -> list[Path]:
    """``files`` less the copies of an XSpace's events that JAX writes beside it: without
    this one JAX run was three ranks, each event counted three times."""
    hosts = {q.name[: -len(s)] for q in files for s in (".xplane.pb", ".xplane.pb.gz", ".xplane.pb.xz")
             if q.name.endswith(s)}
    if not hosts:
        return files
    copies = [q for q in files if q.name == "perfetto_trace.json.gz"
              or any(q.name.endswith(s) and q.name[: -len(s)] in hosts for s in _XPROF_COPIES)]
    if copies:
        log.info("%s: %s left out: copies of the events of %s", files[0].parent,
                 ", ".join(q.name for q in copies), ", ".join(f"{h}.xplane.pb" for h in sorted(hosts)))
    return [q for q in files if q not in copies]


def _file(item: Any) -> list[RankSource] | None:
    if not isinstance(item, (str, os.PathLike)):
        return None
    if not Path(item).exists():
        from ..store.writer import refuse_unfinished  # (pyarrow: only for a path that is not there)

        refuse_unfinished(Path(item))
        raise PolyprofError(f"{item}: no such file")
    return [TraceFile(item)]


def one_source_in(path: str | os.PathLike) -> RankSource | None:
    """The one rank of a directory that holds one (a ``tensorboard_trace_handler`` log
    directory of one process's cycles, Lightning's profiles of one run, a ``jax.profiler``
    log directory of one process), which the commands then read as that trace, not as a
    job of one rank; None for any other directory (a store, rocprofv3's or nsys's CSV
    outputs, several processes), or a file. Remembered for the process (a command asks
    it of its input twice)."""
    return _one_source_in(os.fspath(path))


@lru_cache(maxsize=8)
def _one_source_in(path: str) -> RankSource | None:
    if not Path(path).is_dir() or is_store(Path(path)):
        return None
    try:  # (the files left out are said once, by the job's listing when it is one)
        found = _directory(_profile_run(path) or path, warn=False) or []
    except PolyprofError:  # no trace in it: the job's path says so
        return None
    if len(found) != 1 or not isinstance(found[0], (TraceFile, TraceFiles)) \
            or (isinstance(found[0], TraceFile) and not found[0].file.is_file()):
        return None
    log.info("%s: one trace in the directory, %s", path, found[0].label)
    return found[0]


#: what a job can be made of, asked in order; each gives the sources of one item, or
#: None when the item is not of its kind
RESOLVERS: list[Callable[[Any], list[RankSource] | None]] = [_source, _trace, _captured, _store, _logdir,
                                                             _directory, _file]


def resolve(items: Any) -> list[RankSource]:
    """The rank sources of ``items``: a path or a Trace, or several (see the module doc)."""
    if isinstance(items, (str, os.PathLike, Trace, RankSource)):
        items = [items]
    out: list[RankSource] = []
    for item in items:
        for resolver in RESOLVERS:
            got = resolver(item)
            if got is not None:
                out.extend(got)
                break
        else:
            raise PolyprofError(f"not a rank of a job: {type(item).__name__} {item!r:.80}")
    return out


class Assigned(NamedTuple):
    rank: int
    how: str  # distributedInfo (or the store's record) | file name | order


def assign_ranks(sources: Iterable[RankSource], rank_by: str = "auto") -> list[Assigned]:
    """(rank, how) for each source, in the order given. ``rank_by="auto"``: the ranks the
    sources name themselves when they all do and differ; when only some do, those, and
    the others numbered after them; else the numbers in the file names when they all
    have distinct ones (a bare last number, not named a rank by a word, only when they
    count the files from 0); else the order given (trace files that name a rank more than
    once and are numbered so are several runs of a job, which ``load_ranks`` refuses:
    :func:`several_runs`; Traces in memory are numbered so with a warning). ``"order"``:
    the order given; ``"trace"``: the ranks the sources name, an error naming the first
    that names none or repeats one."""
    sources = list(sources)
    if rank_by not in ("auto", "trace", "order"):
        raise PolyprofError(f"rank_by must be auto, trace or order, not {rank_by!r}")
    if rank_by == "order":
        return [Assigned(i, "order") for i in range(len(sources))]
    named = [s.named() for s in sources]
    if rank_by == "trace":
        seen: dict[int, str] = {}
        for s, n in zip(sources, named):
            if n is None or n[0] in seen:
                what = "names no rank" if n is None else f"repeats rank {n[0]} of {seen[n[0]]}"
                raise PolyprofError(f"{s.path or s.label}: {what}; number the ranks by order instead")
            seen[n[0]] = s.label
        return [Assigned(*n) for n in named]  # type: ignore[misc]
    ranks = [n[0] for n in named if n is not None]
    if ranks and len(set(ranks)) == len(ranks):
        if len(ranks) == len(sources):
            return [Assigned(*n) for n in named]  # type: ignore[misc]
        taken = set(ranks)  # some name their rank: keep those, number the rest after them
        free = (r for r in range(len(sources) + max(taken) + 1) if r not in taken)
        return [Assigned(*n) if n is not None else Assigned(next(free), "order") for n in named]
    by_name = _by_file_name(sources)
    # the names number the copies apart (a job made of one rank's copies, files renamed); or Traces in
    # memory, numbered as given (files that only the order numbers are several runs: several_runs)
    if ranks and (by_name is not None or not all(_first_file(s) for s in sources)):
        log.warning("several sources name the same rank (%s); ranks by %s",
                    ", ".join(s.label for s, n in zip(sources, named) if n is not None and ranks.count(n[0]) > 1),
                    "their file names" if by_name is not None else "the order given")
    return by_name if by_name is not None else [Assigned(i, "order") for i in range(len(sources))]


def _by_file_name(sources: list[RankSource]) -> list[Assigned] | None:
    """The ranks the file names give when they hold distinct numbers (a number no word
    names a rank, a host's: "34.83.195.179_6003", "chi-mi300x-013", only when the names
    count the files from 0), else None. Where some names hold none (a Dask driver's
    ``driver.polyprof`` beside ``worker-0`` and ``worker-1``), those that do keep their
    numbers when at least two do, and the others are numbered after them in the order
    given (before: every file by the order, the workers renumbered 1 and 2)."""
    found = [s.in_name() for s in sources]
    given = [f for f in found if f is not None]
    if len(given) < (len(found) if len(found) < 3 else 2):
        return None
    numbers = [f[0] for f in given]
    said = all(f[1] for f in given)
    if len(set(numbers)) != len(numbers) or not (said or sorted(numbers) == list(range(len(numbers)))):
        return None
    free = iter(range(max(numbers) + 1, max(numbers) + 1 + len(found)))
    return [Assigned(f[0], "file name") if f is not None else Assigned(next(free), "order") for f in found]


def several_runs(sources: list[RankSource], assigned: list[Assigned]) -> None:
    """Refuse trace files that hold several runs of one job: their data names ranks more than
    once (each file of three runs of a 2-rank job says rank 0 or 1 of ``world_size`` 2)
    and their file names do not number them apart, so that only the order given would.
    Read as one job, they were a job of 6 ranks, 4 of them not aligned, whose straggler
    was a rank of another run than the late one (tests/data/traces/gloo_ddp,
    before: one log warning, nothing in ``--json``). The error names each run's files (by
    the glob their names make with the rank's number left out) and how to give one, or
    to read them as one job all the same (``rank_by="order"``)."""
    named = [s.named() for s in sources]
    ranks = [n[0] for n in named if n is not None]
    files = [_first_file(s) for s in sources]
    # (or numbered by names that do not count ranks: decode_gpu_10, _20, _100, each rank 0)
    numbers = sorted(a.rank for a in assigned)
    by_names = all(a.how == "file name" for a in assigned) and numbers != list(range(len(numbers)))
    if len(set(ranks)) == len(ranks) or (any(a.how != "order" for a in assigned) and not by_names) \
            or None in files:
        return  # (Traces in memory given as a list: numbered as given, with assign_ranks' warning)
    from ..analyze.units import number_ranges  # only for the refusal: the analyses' package is slow to import

    def said(rs: list[int]) -> str:
        return f"rank{'s' if len(set(rs)) > 1 else ''} {number_ranges(sorted(set(rs)))}"

    parents = {f.parent for f in files if f is not None}
    where = next(iter(parents)) if len(parents) == 1 else None
    counts = {ranks.count(r) for r in ranks}
    often = ("some more than once" if len(counts) > 1 else "each twice" if counts == {2} else
             f"each {counts.pop()} times")
    hows = sorted({n[1] for n in named if n is not None})
    head = (f"{str(where) + ': ' if where else ''}{len(sources)} traces name {said(ranks)}, {often} "
            f"(their {', '.join(hows)}): several runs of a job, not one job of {len(sources)} ranks")
    if by_names:
        listed = (f"the numbers in their file names ({', '.join(map(str, numbers))}) do not count ranks from 0, "
                  "so they are no ranks either")
        give = "give one file at a time, compare two with polyprof diff, or put each run in a folder of its own"
    elif runs := _run_globs(files, named):
        first = next(iter(runs))
        listed = "the runs by file name: " + ", ".join(f"{g} ({said(rs)})" for g, rs in runs.items())
        give = f"give one run's files (e.g. {where / first if where else first}), or put each run in a folder of its own"
    else:
        listed = "; ".join(f"rank {r}: " + ", ".join(s.label for s, n in zip(sources, named) if n and n[0] == r)
                           for r in sorted(set(ranks)) if ranks.count(r) > 1)
        give = "give one run's files, or put each run in a folder of its own"
    raise PolyprofError(f"{head}; {listed}. {give[0].upper() + give[1:]}; or, to read them as one job all the same, "
                        "number them in the order given with --rank-by order (summary, report, critical-path, convert; "
                        "rank_by=\"order\" in Python)")


def _first_file(source: RankSource) -> Path | None:
    """The (first) trace file ``source`` reads, None for one in memory or a store's."""
    files = getattr(source, "files", None)
    return files[0] if isinstance(source, TraceFiles) and files else source.path


def _run_globs(files: list[Path | None], named: list[tuple[int, str] | None]) -> dict[str, list[int]]:
    """The runs the file names make, as globs: each name with its rank's number made a
    ``*`` (the number after a word that names a rank, else the name's last such number:
    ``late.rank1.pt.trace.json.gz`` is ``late.rank*.pt.trace.json.gz``), with the ranks of
    each; empty where a file names no rank or its name not the rank's number, where a
    glob holds a rank twice, or where all are one glob."""
    runs: dict[str, list[int]] = {}
    for f, n in zip(files, named):
        if f is None or n is None:
            return {}
        worded = [m.span(1) for m in NAMED_RANK.finditer(f.name) if int(m.group(1)) == n[0]]
        spots = worded or [m.span() for m in re.finditer(r"\d+", f.name) if int(m.group()) == n[0]]
        if not spots:
            return {}
        a, b = spots[0] if worded else spots[-1]
        runs.setdefault(f.name[:a] + "*" + f.name[b:], []).append(n[0])
    if len(runs) < 2 or any(len(set(rs)) < len(rs) for rs in runs.values()):
        return {}
    return dict(sorted(runs.items()))


@dataclass
class RankEntry:
    """One rank of the set: its number, how that was found, and where it comes from."""

    rank: int
    how: str  # distributedInfo (or what a store recorded) | file name | order
    source: RankSource

    @property
    def label(self) -> str:
        return self.source.label or f"rank {self.rank}"

    @property
    def path(self) -> Path | None:
        """The trace file the rank is read from (None: a store's rank, a Trace)."""
        return self.source.path

    @property
    def trace(self) -> Trace | None:
        """The Trace, where the rank is one in memory."""
        return getattr(self.source, "trace", None)


def load_rank(entry: RankEntry) -> Trace:
    """One rank's trace, loaded from its source, with the source named (rank, label):
    what per-rank work (``TraceSet.map``) and conversion to a store work on."""
    return _named(entry.source.load(), entry)


def _named(trace: Trace, entry: RankEntry) -> Trace:
    if len(trace.sources) == 1:
        trace.sources[0].rank = entry.rank
        if not trace.sources[0].label:
            trace.sources[0].label = entry.label
    return identify(trace)
