"""The store's manifest: what ranks it holds, where each came from, and its schema version.

``manifest.json`` is written last (to a temporary name, then renamed), so a store with a
manifest is complete; a directory with rank folders and no manifest is a conversion that
did not finish.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import orjson

from ..errors import PolyprofError, TraceFormatError
from .._version import __version__

FORMAT = "polyprof-store"
#: Version of the store layout; a reader refuses stores from a newer one and reads the
#: older ones. 2: flows.parquet also holds its events' input rows and its category (the
#: ``flows`` view reads it alone); 1 (its files lack them) is read as before.
SCHEMA_VERSION = 2
MANIFEST = "manifest.json"


_INT64 = 1 << 63


def _integer(v: Any, lo: int = -_INT64) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < _INT64


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


#: the manifest's fields as the writer writes them: (check, what it must be). A rank's
#: ``rank`` and ``path`` are required (read_manifest), the rest may be absent; a field of
#: another type is a damaged manifest, refused here, once, rather than where a command
#: first uses it (``int(r["events"])`` of a list).
_RANK_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "rank": (_integer, "an integer"),
    "path": (lambda v: isinstance(v, str), "text"),
    **{k: (lambda v: _integer(v, 0), "a count (an integer >= 0)") for k in ("events", "flows", "counters")},
    **{k: (lambda v: isinstance(v, str), "text") for k in ("label", "rank_from", "input", "format")},
    "span_ns": (lambda v: isinstance(v, list) and len(v) == 2 and all(_integer(x) for x in v),
                "[start, end], integers (ns)"),
    "plane_names": (_texts, "a list of text"),
    "sources": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects"),
}
_TOP_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "chunk_rows": (lambda v: _integer(v, 1), "a positive integer"),
    "polyprof_version": (lambda v: isinstance(v, str), "text"),
}


def _check_fields(path: Path, doc: dict[str, Any], fields: dict[str, tuple[Callable[[Any], bool], str]],
                  where: str) -> None:
    """Refuse a field of ``doc`` (``where``: its place in the manifest) not of its type."""
    for key, (ok, what) in fields.items():
        if key in doc and not ok(doc[key]):
            shown = repr(doc[key])
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise TraceFormatError(path, f"damaged store: the manifest's {where}{key} is {shown}, not {what}")


#: a rank's folder in the store: this and its number (Hive-style: DuckDB adds a rank column)
RANK_PREFIX = "rank="


def rank_dir(rank: int) -> str:
    return f"{RANK_PREFIX}{rank}"


def is_store(path: str | Path) -> bool:
    """A directory that is (or was meant to be) a store."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).exists() or any(p.glob(RANK_PREFIX + "*")) or any(p.glob(".part-*")))


def refuse_rank_dir(path: str | Path) -> None:
    """Refuse a store's rank folder (``STORE/rank=N``) given for a trace or a job, saying
    how the commands take that rank of the store."""
    p = Path(path)
    number = p.name.removeprefix(RANK_PREFIX)
    if number != p.name and number.isdigit() and p.is_dir() and is_store(p.parent):
        store, n = p.parent, int(number)
        raise PolyprofError(f"{p}: rank {n}'s folder in the store {store}, not a trace or a job: give the store "
                            f"(polyprof summary {store}: every rank; polyprof report or export {store} --rank {n}; "
                            f"polyprof sql {store} \"... WHERE rank = {n}\"; polyprof.load_ranks('{store}'))")


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
    if not isinstance(ranks, list) or not all(isinstance(r, dict) and "rank" in r and "path" in r for r in ranks):
        raise TraceFormatError(path, "damaged store: the manifest's ranks are not a list of {rank, path}")
    if not ranks:
        raise TraceFormatError(path, "damaged store: the manifest lists no ranks")
    _check_fields(path, doc, _TOP_FIELDS, "")
    for i, r in enumerate(ranks):
        _check_fields(path, r, _RANK_FIELDS, f"ranks[{i}].")
    seen: set[str] = set()
    for r in ranks:  # each rank's own folder of this store: rank=N, as the writer names it
        if r["path"] != rank_dir(r["rank"]) or r["path"] in seen:
            raise TraceFormatError(path, f"damaged store: rank {r['rank']}'s path is {r['path']!r}, not "
                                         f"{rank_dir(r['rank'])!r} (a store reads only its own rank folders)")
        seen.add(r["path"])
        if not (root / r["path"]).is_dir():
            raise TraceFormatError(root / r["path"], f"damaged store: rank {r['rank']}'s folder is missing")
    return doc
