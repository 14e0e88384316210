"""The store's manifest: what ranks it holds, where each came from, and its schema version.

``manifest.json`` is written last (to a temporary name, then renamed), so a store with a
manifest is complete; a directory with rank folders and no manifest is a conversion that
did not finish.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from ..errors import TraceFormatError
from .._version import __version__

FORMAT = "polyprof-store"
#: Version of the store layout; a reader refuses stores from a newer one.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


def rank_dir(rank: int) -> str:
    return f"rank={rank}"


def is_store(path: str | Path) -> bool:
    """A directory that is (or was meant to be) a store."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).exists() or any(p.glob("rank=*")) or any(p.glob(".part-*")))


def write_manifest(root: Path, ranks: list[dict[str, Any]], **extra: Any) -> Path:
    from .rankfiles import dumps  # pyarrow.parquet: only when a store is written, not sniffed

    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "polyprof_version": __version__,
           "ranks": sorted(ranks, key=lambda r: r["rank"]), **extra}
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_bytes(dumps(doc))
    os.replace(tmp, root / MANIFEST)
    return root / MANIFEST


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not root.exists():
        raise TraceFormatError(root, "no such store")
    if not path.exists():
        if any(root.glob("rank=*")) or any(root.glob(".part-*")):
            raise TraceFormatError(root, "incomplete store: no manifest.json (the conversion did not finish; "
                                         "run polyprof convert again with --overwrite)")
        raise TraceFormatError(root, "not a polyprof store (no manifest.json)")
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"damaged store: manifest is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceFormatError(path, "not a polyprof store manifest")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceFormatError(path, "damaged store: the manifest has no schema_version" if version is None else
                               f"damaged store: the manifest's schema_version is {version!r}, not an integer")
    if version > SCHEMA_VERSION:
        raise TraceFormatError(path, f"store schema version {version} is newer than this polyprof reads "
                                     f"({SCHEMA_VERSION}); upgrade polyprof (written by polyprof "
                                     f"{doc.get('polyprof_version', '?')})")
    ranks = doc.get("ranks")
    if not isinstance(ranks, list) or not all(isinstance(r, dict) and isinstance(r.get("rank"), int)
                                              and isinstance(r.get("path"), str) for r in ranks):
        raise TraceFormatError(path, "damaged store: the manifest's ranks are not a list of {rank, path}")
    if not ranks:
        raise TraceFormatError(path, "damaged store: the manifest lists no ranks")
    seen: set[str] = set()
    for r in ranks:  # each rank's own folder of this store: rank=N, as the writer names it
        if r["path"] != rank_dir(r["rank"]) or r["path"] in seen:
            raise TraceFormatError(path, f"damaged store: rank {r['rank']}'s path is {r['path']!r}, not "
                                         f"{rank_dir(r['rank'])!r} (a store reads only its own rank folders)")
        seen.add(r["path"])
        if not (root / r["path"]).is_dir():
            raise TraceFormatError(root / r["path"], f"damaged store: rank {r['rank']}'s folder is missing")
    return doc
