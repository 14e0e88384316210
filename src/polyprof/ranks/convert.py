"""A job's ranks written as a store (``polyprof convert``, ``TraceSet.convert``).

Each rank is one task on the executor: it loads its rank as per-rank work does (the
format's reader; a Kineto trace is parsed a slice at a time into columns), writes the
rank's files (``store.rankfiles.write_rank``) and frees it, so memory is bounded by one
rank per worker, never by the number of ranks. The manifest records each rank's number,
how it was found and its label (the input's file name), so the store's ranks are the
job's ranks: ``summary STORE`` is ``summary`` of the inputs.
"""

from __future__ import annotations

import gc
import logging
import os
from concurrent.futures import Executor
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..formats.detect import detect
from ..store import writer
from ..store.rankfiles import CHUNK_ROWS, release, write_rank
from ..store.rankstream import RankStream
from . import executor as executors
from .sources import RankEntry, _named, load_rank

if TYPE_CHECKING:
    from .traceset import TraceSet

log = logging.getLogger("polyprof")


def convert(ts: "TraceSet", output: str | os.PathLike, executor: Executor | str | None = None, *,
            jobs: int | None = None, chunk_rows: int | None = None, overwrite: bool = False) -> Path:
    """Write the ranks of ``ts`` as the store ``output``; returns its path. ``jobs``:
    ranks converted at once (default 1: one rank in memory at a time)."""
    root = Path(output)
    rows = chunk_rows or CHUNK_ROWS
    writer.prepare(root, overwrite)
    tasks = [(e, str(writer.part(root, i)), chunk_rows or 0) for i, e in enumerate(ts.entries)]
    done: dict[int, dict[str, Any]] = {}
    try:
        with executors.executor(executor, jobs or 1, len(tasks)) as ex:
            for i, info in executors.run(convert_rank, tasks, ex, progress="convert", progress_single=True,
                                         names=[f"rank {e.rank} ({e.label})" for e in ts.entries]):
                done[i] = info
    except BaseException:  # a rank that cannot be read: no half store left to refuse the next convert
        writer.discard_parts(root)
        raise
    ranks = [{"rank": e.rank, "rank_from": e.how, "label": e.label, **done[i]} for i, e in enumerate(ts.entries)]
    writer.finish(root, ranks, chunk_rows=rows)
    return root


def convert_rank(entry: "RankEntry", part: str, chunk_rows: int) -> dict[str, Any]:
    """One rank into one folder (a task: runs wherever the executor puts it). Kineto and
    Chrome JSON are streamed a chunk of ``chunk_rows`` events at a time (0: the reader's
    default, formats/kineto/chunks.py) in a row group each (memory: a chunk); other
    inputs, and JSON the chunked reader cannot stream, are read whole and written in row
    groups of ``chunk_rows`` (0: store.rankfiles.CHUNK_ROWS)."""
    try:
        return _convert_rank(entry, part, chunk_rows)
    finally:
        release()


def _convert_rank(entry: "RankEntry", part: str, chunk_rows: int) -> dict[str, Any]:
    fmt = "trace"
    if entry.path is not None:
        fmt = detect(entry.path)
        if fmt in STREAMED:
            info = _convert_streamed(entry, Path(part), chunk_rows)
            if info is not None:
                return {"format": fmt, **info}
    trace = load_rank(entry)
    info = write_rank(trace, Path(part), chunk_rows or CHUNK_ROWS)
    sources = [asdict(s) for s in trace.sources]
    del trace
    gc.collect()
    where = str(entry.path.resolve()) if entry.path is not None else entry.label
    return {"part": part, "format": fmt, "input": where, "sources": sources, **info}


#: formats whose ranks are converted a chunk at a time (formats/kineto/chunks.py)
STREAMED = ("kineto", "chrome-json")


def _convert_streamed(entry: "RankEntry", part: Path, chunk_rows: int) -> dict[str, object] | None:
    """One Kineto / Chrome JSON rank streamed into ``part``; None where the file needs the
    whole-file reader (said in the log)."""
    from ..formats.kineto.chunks import CHUNK_EVENTS, Unsupported, read_chunks  # the reader, pyarrow: in the task

    assert entry.path is not None
    out = RankStream(part)
    try:
        rest = read_chunks(entry.path, out.add, chunk_rows or CHUNK_EVENTS)
    except Unsupported as e:
        out.abort()
        log.warning("%s: read whole, not in chunks (%s): memory grows with this rank", entry.path, e)
        return None
    except BaseException:
        out.abort()
        raise
    trace = _named(rest.trace, entry)
    info = out.finish(trace, rest.flows, rest.span_ns)
    where = str(entry.path.resolve())
    return {"part": str(part), "input": where, "sources": [asdict(s) for s in trace.sources], **info}
