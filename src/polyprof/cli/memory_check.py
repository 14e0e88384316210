"""The memory pre-check of the commands that read a whole trace (ranks/fits.py): a
Kineto / Chrome JSON file, an XSpace of 16 MiB or more, or a store's rank, said in one
line before it is read where it would not fit. Other formats are not checked (and the
check's module not imported: a small XSpace's summary never loads it,
tests/test_import_weight.py)."""

from __future__ import annotations

import os
import stat as stat_mod
from pathlib import Path


def is_json_trace(path: str) -> bool:
    """A Kineto / Chrome JSON file (the formats the check estimates)."""
    if not Path(path).is_file():
        return False
    from ..formats.detect import detect  # only for a file: a store or directory needs no sniffing

    return detect(path) in ("kineto", "chrome-json")


#: an XSpace whose text is smaller (its size; a gzip's at :data:`GZIP_RATIO`) is not
#: checked: it fits wherever polyprof runs (fits.XSPACE_FACTORS), and ranks/fits.py is not
#: imported for it
XSPACE_CHECKED_BYTES = 16 << 20
#: the largest text a gzip's byte is taken to hold here (fits.UPPER_RATIO's)
GZIP_RATIO = 25


def _large_xspace(path: str) -> bool:
    """An XSpace file whose text may be :data:`XSPACE_CHECKED_BYTES` or more: one whose
    read is checked. By its size first, so a small file is neither sniffed here nor the
    check's module imported."""
    try:
        st = os.stat(path)
        if not stat_mod.S_ISREG(st.st_mode) or st.st_size * GZIP_RATIO < XSPACE_CHECKED_BYTES:  # (a FIFO: no open)
            return False
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError:
        return False
    if st.st_size * (GZIP_RATIO if gz else 1) < XSPACE_CHECKED_BYTES:
        return False
    from ..formats.detect import detect

    return detect(path) == "xspace"


#: the commands that hold every rank in this one process (``critical-path``: its graphs
#: join the ranks), each with the command whose measured estimate is its own: the peak of
#: ``critical-path`` on a Kineto trace is the summary's (docs/reliability.md, "Memory")
ALL_RANKS_AT_ONCE = {"critical-path": "summary"}


def check_memory(command: str, files: list[str], windows: bool = False, rank: int | None = None,
                 jobs: int | None = None, rank_by: str = "auto") -> None:
    """One line, before reading, where ``command`` (``summary``, ``summary-json``,
    ``report``, ``export``, ``critical-path``) would not fit: a JSON file given alone,
    each rank of a store not summarised window by window (with ``windows``: ``summary``'s
    default steps, ranks/stepwise.py), or the ranks of a directory or of several files
    read at once (:func:`check_job`, numbered as ``rank_by`` says: ``--rank-by``);
    ``rank``: only that rank (``report``: the rank shown in detail); ``jobs``: ``-j``. A command of :data:`ALL_RANKS_AT_ONCE`: all its ranks, however given, summed
    (:func:`check_all`)."""
    from .ranks import is_job, is_store

    if command in ALL_RANKS_AT_ONCE:
        if not _clearly_fits(files):
            check_all(command, files)
    elif len(files) == 1 and is_store(files[0]):
        from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound
        from ..store.manifest import read_manifest

        root = Path(files[0])
        for r in read_manifest(root)["ranks"]:
            if rank is not None and r["rank"] != rank:
                continue
            events = int(r.get("events", 0))
            p = None
            if windows and fits.store_rank_bytes(events) > fits.memory_bound():
                from ..ranks.stepwise import by_windows, check_plan  # the windows: only for a rank above the bound

                p = by_windows(root / r["path"], events)
                if p is not None:
                    check_plan(p, f"{root}: rank {r['rank']}")
            if p is None:
                fits.check_store_rank(root, r["rank"], events, command)
    elif len(files) == 1 and is_json_trace(files[0]):
        from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound

        if not fits.clearly_fits(files):
            fits.check_file(files[0], command)
    elif len(files) == 1 and _large_xspace(files[0]):
        from ..formats.xspace.decode import IMPLEMENTATION  # the reader the command will read it with
        from ..ranks import fits

        if not fits.clearly_fits(files) or IMPLEMENTATION != "c":
            fits.check_xspace(files[0], command, IMPLEMENTATION)
    elif is_job(files, rank) and not _clearly_fits(files):
        check_job(command, files, rank, jobs, rank_by)


def check_job(command: str, files: list[str], rank: int | None = None, jobs: int | None = None,
              rank_by: str = "auto") -> None:
    """The ranks of a directory or of several files (a store's are checked rank by rank
    above): ``summary`` reads as many ranks at once as it has workers (``-j``, default one
    per core), each a process of its own, so the largest of them summed, and this
    process's base (measured: two 160 MiB ranks, 1,559 MiB in all); ``report`` that
    too, then its rank in detail (``rank``, else the lowest) with one more; ``export``
    merges them all in one process (``rank``: that one alone). A rank that is not a JSON file counts its base alone."""
    from ..ranks import fits  # only for a job: an XSpace needs no bound
    from ..ranks.executor import cores
    from ..ranks.sources import assign_ranks, resolve

    sources = resolve(files if len(files) > 1 else files[0])
    ranks = [a.rank for a in assign_ranks(sources, rank_by)]
    each = [_source_need(s, "summary") for s in sources]
    if command.startswith("export"):
        picked = [s for s, r in zip(sources, ranks) if rank is None or r == rank]
        need = fits.BASE_BYTES + sum(_source_need(s, command) - fits.BASE_BYTES for s in picked)
    else:
        workers = min(jobs or cores(), len(sources))
        need = sum(sorted(each, reverse=True)[:workers]) + (fits.BASE_BYTES if workers > 1 else 0)  # and this process
        if command == "report":
            ref = sources[ranks.index(min(ranks) if rank not in ranks else rank)]
            need = max(need, _source_need(ref, "report") + max(each) - fits.BASE_BYTES)
    what = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more"
    fits.check_fits(f"{what} ({len(sources)} ranks, polyprof {fits.command_label(command)})", need,
                    "analyse fewer ranks at once (-j 1), convert them to a store (polyprof convert), which is "
                    "read rank by rank, or analyse them on a machine with more memory")


def check_all(command: str, files: list[str]) -> None:
    """A command that reads every rank into this one process (:data:`ALL_RANKS_AT_ONCE`):
    one trace file, a store, a directory or several files, each rank's need (as the
    command it is measured as) summed over this process's base."""
    from ..ranks import fits  # only where the inputs do not clearly fit
    from ..ranks.sources import resolve

    sources = resolve(files if len(files) > 1 else files[0])
    like = ALL_RANKS_AT_ONCE[command]
    need = fits.BASE_BYTES + sum(_source_need(s, like) - fits.BASE_BYTES for s in sources)
    what = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more"
    if len(sources) > 1:
        fits.check_fits(f"{what} ({len(sources)} ranks, polyprof {command}: every rank held at once)", need,
                        "give it fewer ranks' files, or analyse them on a machine with more memory")
    else:
        fits.check_fits(f"{what} (polyprof {command})", need, "analyse it on a machine with more memory")


def _source_need(source: object, command: str) -> int:
    """What ``command`` needs to read one rank whole (its JSON files' estimates)."""
    from ..ranks import fits  # with check_job's
    from ..ranks.sources import StoreRank, TraceFile, TraceFiles

    if isinstance(source, StoreRank):
        return fits.store_need(source.events, command)
    paths = source.files if isinstance(source, TraceFiles) else [source.file] if isinstance(source, TraceFile) else []
    parts = [fits.shape_need(fits.json_shape(p), command) - fits.BASE_BYTES for p in paths if is_json_trace(str(p))]
    return fits.BASE_BYTES + sum(parts)


def check_diff(paths: list[str]) -> None:
    """``diff``'s inputs: its JSON files' texts and its stores' events, each side's runs
    summed (docs/reliability.md: diff's peak grows with all its inputs)."""
    from .ranks import is_store

    if not any(is_store(p) for p in paths) and _clearly_fits(paths):
        return
    json_files = [Path(p) for p in paths if is_json_trace(p)] + _json_files_in(
        [p for p in paths if Path(p).is_dir() and not is_store(p)])
    stores = [Path(p) for p in paths if is_store(p)]
    if not json_files and not stores:
        return
    from ..ranks import fits  # only for a store or a JSON trace: an XSpace needs no bound
    from ..store.manifest import read_manifest

    text = sum(fits.json_text_bytes(p) for p in json_files)
    events = sum(int(r.get("events", 0)) for s in stores for r in read_manifest(s)["ranks"])
    need = fits.json_need(text, "diff") + fits.STORE_FACTORS["diff"] * events
    fits.check_fits(f"{', '.join(map(str, json_files + stores))} (polyprof diff)", need,
                    "compare fewer runs at once, convert a JSON trace to a store (polyprof convert), or compare "
                    "on a machine with more memory")


def _json_files_in(folders: list[str]) -> list[Path]:
    """The JSON rank files of directories of ranks (ranks/sources.py)."""
    if not folders:
        return []
    from ..ranks.sources import TraceFile, TraceFiles, resolve  # only for a directory

    out: list[Path] = []
    for folder in folders:
        for s in resolve(folder):
            paths = s.files if isinstance(s, TraceFiles) else [s.file] if isinstance(s, TraceFile) else []
            out += [p for p in paths if is_json_trace(str(p))]
    return out


def _clearly_fits(paths: list[str]) -> bool:
    """Whether the inputs fit by their sizes alone (:func:`fits.clearly_fits`): no sample
    of their text is read, nor a directory's ranks told apart."""
    from ..ranks import fits  # (fits is light: os, re, zlib, lzma)

    return fits.clearly_fits(paths)
