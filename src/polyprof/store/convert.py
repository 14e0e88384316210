"""``polyprof convert IN... -o STORE``: traces of any supported format into a store.

Each input is one rank. Inputs are converted one per task on the executor (here, a
process pool or Dask): a task reads its input with the format's reader (the Kineto reader
parses its JSON a slice at a time into columns), sorts the events by time and writes the
rank's Parquet files, then frees it; so memory is bounded by one rank per worker, never
by the number of ranks. Ranks come from the traces' sources (Kineto
``distributedInfo.rank``, a session's ``RANK``) when every input names a distinct one,
else from the order of the inputs. The manifest keeps each rank's sources (host, pid,
file, clock anchor) as the readers identified them.
"""

from __future__ import annotations

import gc
import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from ..errors import PolyprofError, TraceFormatError
from .executor import executor, run_all
from .manifest import MANIFEST, rank_dir, write_manifest
from .rankfiles import CHUNK_ROWS, write_rank

log = logging.getLogger("polyprof")


def convert(inputs: Sequence[str | Path], output: str | Path, *, dask: Any = None, jobs: int = 1,
            chunk_rows: int = CHUNK_ROWS, rank_by: str = "auto", overwrite: bool = False) -> Path:
    """Convert ``inputs`` (one rank each) into the store ``output``; returns its path.

    ``dask``: None, ``"local"``, a scheduler address, or any concurrent.futures-style
    executor; ``rank_by``: ``"auto"`` (the traces' ranks if all distinct, else input
    order), ``"trace"`` (the traces' ranks, an error if missing or repeated) or ``"order"``.
    """
    if rank_by not in ("auto", "trace", "order"):
        raise PolyprofError(f"rank_by must be auto, trace or order, not {rank_by!r}")
    paths = [Path(p) for p in inputs]
    if not paths:
        raise PolyprofError("convert: no input traces given")
    for p in paths:
        if not p.is_file():
            raise TraceFormatError(p, "no such file" if not p.exists() else "not a file")
    root = Path(output)
    _prepare(root, overwrite)
    tasks = [(str(p), str(root / f".part-{i}"), chunk_rows) for i, p in enumerate(paths)]
    with executor(dask, jobs) as ex:
        parts = run_all(convert_one, tasks, ex, "convert")
    ranks = _assign_ranks(parts, rank_by)
    entries = []
    for part, rank in zip(parts, ranks):
        target = root / rank_dir(rank)
        Path(part["part"]).rename(target)
        entries.append({"rank": rank, "path": target.name, **{k: v for k, v in part.items() if k != "part"}})
    write_manifest(root, entries, chunk_rows=chunk_rows)
    log.info("wrote store %s: %d ranks", root, len(entries))
    return root


def convert_one(path: str, part: str, chunk_rows: int) -> dict[str, Any]:
    """One input into one rank folder (a task: runs wherever the executor puts it)."""
    from ..formats.detect import detect, load

    fmt = detect(path)
    trace = load(path)
    info = write_rank(trace, Path(part), chunk_rows)
    sources = [asdict(s) for s in trace.sources]
    del trace
    gc.collect()
    return {"part": part, "format": fmt, "input": str(Path(path).resolve()), "sources": sources, **info}


def _assign_ranks(parts: list[dict[str, Any]], rank_by: str) -> list[int]:
    named = [p["sources"][0]["rank"] if len(p["sources"]) == 1 else None for p in parts]
    usable = all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in named) \
        and len(set(named)) == len(named)
    if rank_by == "order" or (rank_by == "auto" and not usable):
        if rank_by == "auto" and any(r is not None for r in named):
            log.warning("convert: the inputs' ranks (%s) are missing or repeated; numbering ranks by input order",
                        ", ".join(map(str, named)))
        return list(range(len(parts)))
    if not usable:
        seen: dict[Any, str] = {}
        for p, r in zip(parts, named):
            if r in seen or not isinstance(r, int):
                what = "names no rank" if not isinstance(r, int) else f"repeats rank {r} of {seen[r]}"
                raise TraceFormatError(p["input"], f"{what}; use --rank-by order")
            seen[r] = p["input"]
    return [int(r) for r in named if r is not None]


def _prepare(root: Path, overwrite: bool) -> None:
    if root.exists() and not root.is_dir():
        raise PolyprofError(f"{root}: exists and is not a directory")
    if root.exists() and any(root.iterdir()):
        ours = (root / MANIFEST).exists() or any(root.glob("rank=*")) or any(root.glob(".part-*"))
        if not ours:
            raise PolyprofError(f"{root}: exists and is not empty (and not a store); choose another -o")
        if not overwrite:
            raise PolyprofError(f"{root}: a store is already there; pass --overwrite to replace it")
        for p in [*root.glob("rank=*"), *root.glob(".part-*")]:
            shutil.rmtree(p)
        for name in (MANIFEST, MANIFEST + ".tmp"):
            (root / name).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
