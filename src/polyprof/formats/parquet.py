"""The event table as Parquet: for notebooks, DuckDB, polars and Spark, out of core; and
that file read back into the Trace it was written from.

The file is one table, one row per event (``Trace.to_arrow``: plane, track_id, track,
name, category, start_ns, dur_ns, end_ns, then one nullable column per stat). What a
table of events cannot hold is in the file's key/value metadata, where DuckDB and
pandas do not see it:

- ``polyprof``: the trace's metadata (JSON);
- ``polyprof.layout``: sources, planes and tracks as records, and each stat's column
  name and value kind (JSON);
- ``polyprof.flows.base64``, ``polyprof.counters.base64``: those tables as Arrow IPC
  streams (zstd), in base64: Parquet's metadata values are UTF-8, and polars refuses a
  file whose values are not. These two are in the file's footer only, not also in the
  Arrow schema pyarrow stores there (``ARROW:schema``), which would hold them a second
  time (a pyarrow too old to add metadata to the footer puts them in both).

Files polyprof wrote before have the raw IPC bytes under ``polyprof.flows`` and
``polyprof.counters`` (which polars cannot read); they read back as well.

Read back, the Trace has the same sources, planes, tracks, events, stats (rows and
values, per key), flows and counters as the one written; string ids may differ (the
string table is rebuilt from the values). A Parquet file polyprof wrote before the
layout was recorded reads with planes and tracks rebuilt from the event columns, and no
flows or counters. Any other Parquet file is refused with the columns it lacks.

Each page is written with its checksum and checked when read (``parquet_pages.py``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import PolyprofError, TraceFormatError, one_line
from ..trace.builder import TraceBuilder
from ..trace.core import COUNTER_COLUMNS, FLOW_COLUMNS, Trace
from ..trace.model import Plane, Source, Track
from ..trace.native_write import header_json
from .native import bytes_back, records
from .parquet_pages import open_file, writer
from .safety import check_events, clean_metadata, guarded
from ..trace.sorting import unique

MAGIC = b"PAR1"
_FIXED = ("plane", "track_id", "track", "name", "category", "start_ns", "dur_ns", "end_ns")
_REQUIRED = ("track_id", "track", "name", "category", "start_ns", "dur_ns")


def write(trace: Trace, path: str | Path) -> Path:
    """One row per event (see ``Trace.to_arrow``); the trace's metadata, layout, flows and
    counters in the file's key/value metadata (see the module's docstring)."""
    path = Path(path)
    table = trace.to_arrow()
    meta = dict(table.schema.metadata or {})
    meta[b"polyprof"] = _metadata_json(trace.metadata)
    names = table.column_names[len(_FIXED):]
    layout = {"version": 1,
              "sources": [dataclasses.asdict(s) for s in trace.sources],
              "planes": [dataclasses.asdict(p) for p in trace.planes],
              "tracks": [dataclasses.asdict(t) for t in trace.tracks],
              "stats": [{"key": k, "column": c, "kind": trace.stats[k].kind} for k, c in zip(trace.stats, names)]}
    meta[b"polyprof.layout"] = header_json(layout)  # as the .polyprof file's header: bytes as text
    fl, c = trace.flows, trace.counters
    strings = np.array(trace.strings + [""], dtype=object)
    footer = {b"polyprof.flows.base64": _ipc(pa.table({"src": fl["src"], "dst": fl["dst"], "id": fl["id"],
                                                       "category": pa.array(strings[fl["category"]], pa.string())})),
              b"polyprof.counters.base64": _ipc(pa.table({"plane": c["plane"],
                                                          "name": pa.array(strings[c["name"]], pa.string()),
                                                          "ts_ns": c["ts_ns"], "value": c["value"]}))}
    add_to_footer = hasattr(pq.ParquetWriter, "add_key_value_metadata")  # not in older pyarrow
    if not add_to_footer:
        meta.update(footer)
    table = table.replace_schema_metadata(meta)
    with writer(path, table.schema, compression="zstd") as w:  # each page with its checksum
        w.write_table(table)
        if add_to_footer:
            w.add_key_value_metadata(footer)
    return path


def _metadata_json(metadata: dict[str, Any]) -> bytes:
    """The trace's metadata as JSON, what JSON cannot hold as text (``str``): orjson's,
    else, where orjson refuses a value even with a default (an int beyond 64 bits, which
    the native file keeps), the standard library's (before: the export failed with a
    TypeError and ``run -o t.parquet`` fell back to the archive)."""
    try:
        return orjson.dumps(metadata, default=str, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        import json  # only for the rare metadata orjson refuses

        try:
            return json.dumps(metadata, default=str).encode()
        except (RecursionError, ValueError, TypeError) as e:
            raise PolyprofError(f"the trace's metadata cannot be saved as JSON ({e})") from None


def _ipc(table: pa.Table) -> bytes:
    """``table`` as a zstd Arrow IPC stream, in base64."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes())  # text, as Parquet's metadata must be


# ----------------------------------------------------------------------------- reading
@guarded
def load(path: str | Path) -> Trace:
    """A Parquet file ``write`` made, back into its Trace."""
    path = Path(path)
    try:
        pf = open_file(path)  # pages' checksums checked as they are read
        schema = pf.schema_arrow
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # a column path's bytes not UTF-8: pyarrow's
        raise TraceFormatError(path, f"not a readable Parquet file ({one_line(e)})") from None
    missing = [c for c in _REQUIRED if c not in schema.names]
    if missing:
        raise TraceFormatError(path, f"a Parquet file without polyprof's event columns (missing {', '.join(missing)}): "
                                     "not a polyprof export")
    meta = pf.metadata.metadata or {}  # the footer's: the schema's and those only there (flows, counters)
    check_events(path, pf.metadata.num_rows)
    # the event columns now, each stat column when it is turned into a stat (memory bounded
    # by a column: read whole, a Kineto trace's 29 mostly-null stat columns held 250 B per event)
    table = _read(path, pf, [c for c in schema.names if c in _FIXED])
    metadata = _json(path, meta.get(b"polyprof", b"{}"), "polyprof")
    if not isinstance(metadata, dict):
        raise TraceFormatError(path, "the 'polyprof' metadata is not an object")
    clean_metadata(metadata)
    layout = _json(path, meta[b"polyprof.layout"], "polyprof.layout") if b"polyprof.layout" in meta else None
    b = TraceBuilder(metadata)
    n = table.num_rows
    track = _ints(path, table, "track_id")
    if layout is not None:
        if isinstance(layout, dict):  # (bytes values, an XSpace's HLO, as the .polyprof header keeps them)
            bytes_back(path, layout, "polyprof.layout")
        _layout(path, b, layout)
    else:
        _guess_layout(path, b, table, track)
    if n and (track.min() < 0 or track.max() >= len(b.tracks)):
        raise TraceFormatError(path, "damaged polyprof Parquet file: track_id out of range of its tracks")
    start, dur = _ints(path, table, "start_ns"), _ints(path, table, "dur_ns")
    if n and (start.min() < -(2**62) or start.max() > 2**62 or dur.min() < 0 or dur.max() > 2**62):
        raise TraceFormatError(path, "damaged polyprof Parquet file: event times beyond +-2**62 ns or negative "
                                     "durations")
    b.events(track.astype(np.int32), _texts(b, path, table, "name"), start, dur, _texts(b, path, table, "category"))
    for key, column, kind in _stat_columns(path, schema.names, layout):
        rows, values = _stat(path, _read(path, pf, [column]).column(0), kind)
        if len(rows):
            b.add_stat(key, rows, values)
    more = _flows_counters(path, b, meta, n) if layout is not None else {}
    trace = b.build(validate=False)
    for key, cols in more.items():
        setattr(trace, key, cols)
    del table
    pa.default_memory_pool().release_unused()  # the columns' freed blocks, kept by Arrow's allocator, back to the OS
    return trace.validate()


def _json(path: Path, raw: bytes, what: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"the {what!r} metadata is not JSON ({e})") from None


def _ints(path: Path, table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if not pa.types.is_integer(col.type) or col.null_count:
        raise TraceFormatError(path, f"column {name!r} is {col.type}{' with nulls' if col.null_count else ''}, "
                                     "expected integers")
    return np.asarray(col.to_numpy(), np.int64) if len(col) else np.zeros(0, np.int64)


def _texts(b: TraceBuilder, path: Path, table: pa.Table, name: str) -> np.ndarray:
    """String ids in ``b`` of a string (or dictionary) column, interned once per value."""
    col = table.column(name)
    if col.null_count:
        raise TraceFormatError(path, f"column {name!r} has nulls")
    if not len(col):
        return np.zeros(0, np.int32)
    if pa.types.is_dictionary(col.type):
        col = col.unify_dictionaries() if col.num_chunks > 1 else col
        chunks = col.chunks
        if not pa.types.is_string(chunks[0].dictionary.type):
            raise TraceFormatError(path, f"column {name!r} is {col.type}, expected strings")
        ids = np.fromiter((b.intern(s) for s in chunks[0].dictionary.to_pylist()), np.int32)
        return np.concatenate([ids[np.asarray(c.indices.to_numpy(zero_copy_only=False), np.int64)] for c in chunks])
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        raise TraceFormatError(path, f"column {name!r} is {col.type}, expected strings")
    return b.intern_many(np.asarray(col.to_pylist(), dtype=object))


def _records(path: Path, raw: Any, cls: type, what: str) -> list[Any]:
    if not isinstance(raw, list):
        raise TraceFormatError(path, f"polyprof.layout: {what} is not a list")
    names = {f.name for f in dataclasses.fields(cls)}
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or set(r) - names or r.get("id") != i:
            raise TraceFormatError(path, f"polyprof.layout: {what}[{i}] is not a {cls.__name__} record")
    return records(path, what, raw, cls, where="polyprof.layout")  # each field of its declared type


def _layout(path: Path, b: TraceBuilder, layout: Any) -> None:
    if not isinstance(layout, dict):
        raise TraceFormatError(path, "polyprof.layout is not an object")
    b.sources = _records(path, layout.get("sources", []), Source, "sources")
    b.planes = _records(path, layout.get("planes"), Plane, "planes")
    b.tracks = _records(path, layout.get("tracks"), Track, "tracks")
    for p in b.planes:
        if not isinstance(p.source, int) or not 0 <= p.source < max(len(b.sources), 1):
            raise TraceFormatError(path, f"polyprof.layout: plane {p.name!r} has no source {p.source!r}")
    for t in b.tracks:
        if not isinstance(t.plane, int) or not 0 <= t.plane < len(b.planes):
            raise TraceFormatError(path, f"polyprof.layout: track {t.name!r} has no plane {t.plane!r}")


def _guess_layout(path: Path, b: TraceBuilder, table: pa.Table, track: np.ndarray) -> None:
    """Planes and tracks of a file without a layout: from the plane and track columns."""
    if not len(track):
        return
    first = np.unique(track, return_index=True)[1]
    planes = table.column("plane").take(pa.array(first)).to_pylist() if "plane" in table.column_names \
        else ["/host:CPU"] * len(first)
    names = table.column("track").take(pa.array(first)).to_pylist()
    ids = unique(track)
    for tid in range(int(ids.max()) + 1):
        k = int(np.searchsorted(ids, tid))
        if k < len(ids) and ids[k] == tid:
            plane, name = str(planes[k]), str(names[k])
        else:  # a track id no event uses: a placeholder keeps the ids
            plane, name = str(planes[0]), f"track {tid}"
        pid = b.plane(plane, "device" if plane.startswith("/device:") else "host")
        b.tracks.append(Track(tid, pid, name))


def _read(path: Path, pf: pq.ParquetFile, columns: list[str]) -> pa.Table:
    try:
        table = pf.read(columns=columns)
        table.validate(full=True)  # pyarrow reads dictionary indices and UTF-8 unchecked: out of range, unsafe
        return table
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise TraceFormatError(path, f"damaged Parquet file ({one_line(e)})") from None


def _stat_columns(path: Path, names: list[str], layout: Any) -> list[tuple[str, str, str]]:
    """(stat key, column, value kind) of every stat column."""
    if layout is not None:
        out = []
        stats = layout.get("stats", [])
        if not isinstance(stats, list):
            raise TraceFormatError(path, "polyprof.layout: stats is not a list")
        for i, s in enumerate(stats):
            if not (isinstance(s, dict) and isinstance(s.get("key"), str) and s.get("column") in names
                    and s.get("kind") in ("i", "u", "f", "O")):
                raise TraceFormatError(path, f"polyprof.layout: stats[{i}] does not name a stat column")
            out.append((s["key"], s["column"], s["kind"]))
        return out
    cols = [c for c in names if c not in _FIXED]
    return [(c[5:] if c.startswith("stat.") and c[5:] in _FIXED else c, c, "") for c in cols]


def _stat(path: Path, col: pa.ChunkedArray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, values) of a nullable stat column: the rows where it is not null."""
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(valid)
    present = col.filter(pa.array(valid))
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        values = np.asarray(present.to_numpy(zero_copy_only=False))
        if kind == "u":
            values = values.astype(np.uint64)
        return rows, values
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_dictionary(t):
        values = np.empty(len(rows), object)
        values[:] = present.to_pylist()
        return rows, values
    raise TraceFormatError(path, f"a stat column is {t}: not a stat type")


def _flows_counters(path: Path, b: TraceBuilder, meta: dict[bytes, bytes], n: int) -> dict[str, dict[str, np.ndarray]]:
    """The flows and counters tables of the metadata, as the Trace's columns."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, spec in (("flows", FLOW_COLUMNS), ("counters", COUNTER_COLUMNS)):
        raw = _ipc_bytes(path, meta, key)
        if raw is None:
            continue
        try:
            t = pa.ipc.open_stream(raw).read_all()
            t.validate(full=True)
        except (pa.ArrowException, OSError) as e:
            raise TraceFormatError(path, f"damaged 'polyprof.{key}' metadata ({one_line(e)})") from None
        if set(t.column_names) != set(spec):
            raise TraceFormatError(path, f"'polyprof.{key}' has columns {t.column_names}, expected {sorted(spec)}")
        if key == "flows":
            src, dst = _ints(path, t, "src"), _ints(path, t, "dst")
            if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
                raise TraceFormatError(path, "damaged polyprof Parquet file: a flow refers to events that do not exist")
            out[key] = {"src": src, "dst": dst, "id": _ints(path, t, "id"), "category": _texts(b, path, t, "category")}
        else:
            plane = _ints(path, t, "plane")
            if len(plane) and (plane.min() < 0 or plane.max() >= len(b.planes)):
                raise TraceFormatError(path, "damaged polyprof Parquet file: a counter's plane does not exist")
            value = t.column("value")
            if not pa.types.is_floating(value.type):
                raise TraceFormatError(path, f"counter values are {value.type}, expected floats")
            out[key] = {"plane": plane, "name": _texts(b, path, t, "name"), "ts_ns": _ints(path, t, "ts_ns"),
                        "value": np.asarray(value.to_numpy(), np.float64)}
    return out


def _ipc_bytes(path: Path, meta: dict[bytes, bytes], key: str) -> bytes | None:
    """The Arrow IPC stream of ``polyprof.<key>.base64``, or, in a file polyprof wrote
    before that, the raw bytes of ``polyprof.<key>``; None when the file has neither."""
    text = meta.get(f"polyprof.{key}.base64".encode())
    if text is None:
        return meta.get(f"polyprof.{key}".encode())
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise TraceFormatError(path, f"damaged 'polyprof.{key}.base64' metadata: not base64 ({one_line(e)})") from None
