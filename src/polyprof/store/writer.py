"""Writing a store: the folder's protocol, so that a store with a manifest is complete.

Each rank is written (``rankfiles.write_rank``) into a ``.part-N`` folder; when every
rank is written, :func:`finish` renames them to ``rank=R`` and writes the manifest last
(to a temporary name, then renamed). A directory with rank folders and no manifest is a
conversion that did not finish. Which traces are written, and where the work runs, is
the job's business (``polyprof.ranks``: ``TraceSet.convert``).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from ..errors import PolyprofError
from .manifest import MANIFEST, rank_dir, write_manifest

log = logging.getLogger("polyprof")


def prepare(root: Path, overwrite: bool) -> None:
    """Make ``root`` ready for a new store: refuse a non-empty directory that is not a
    store, and a store unless ``overwrite`` (then its ranks and manifest go)."""
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


def part(root: Path, i: int) -> Path:
    """Where the i-th rank is written before :func:`finish`."""
    return root / f".part-{i}"


def discard_parts(root: Path) -> None:
    """Remove the parts written so far, and ``root`` if that leaves it empty (a
    conversion that failed: :func:`prepare` made it, or found it empty)."""
    for p in root.glob(".part-*"):
        shutil.rmtree(p, ignore_errors=True)
    try:
        root.rmdir()
    except OSError:  # not empty: what was there before stays
        pass


def finish(root: Path, ranks: list[dict[str, Any]], **extra: Any) -> Path:
    """Rename each written part (``ranks[i]["part"]``) to its rank's folder and write the
    manifest (each rank's entry: the rest of ``ranks[i]``, and its ``path``)."""
    entries = []
    for r in ranks:
        target = root / rank_dir(r["rank"])
        Path(r["part"]).rename(target)
        entries.append({"rank": r["rank"], "path": target.name, **{k: v for k, v in r.items()
                                                                   if k not in ("part", "rank")}})
    out = write_manifest(root, entries, **extra)
    log.info("wrote store %s: %d ranks", root, len(entries))
    return out
