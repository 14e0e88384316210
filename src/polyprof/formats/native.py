"""The native ``.polyprof`` file read back (its writer: trace/native_write.py).

A zip of Arrow IPC tables plus a JSON header. Lossless: strings, planes, tracks, event
columns, every stat column with its dtype, flows, counters and metadata round-trip
exactly. Arrow IPC keeps it fast and lets other tools (DuckDB, polars) read the
tables inside.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ..errors import TraceFormatError, TraceSchemaError
from ..trace import arrow_numpy
from ..trace.core import COUNTER_COLUMNS, EVENT_COLUMNS, FLOW_COLUMNS, Trace
from ..trace.model import Plane, Source, Track
from ..trace.stats import StatColumn, StatTable, check_column
from . import arrow_ipc
from ..trace.native_write import BYTES_KEY, MAGIC, VERSION, save  # noqa: F401 - the writer, re-exported
from .safety import TIME_LIMIT_NS, Inflation, check_events, clean_metadata, guarded

def is_native(head: bytes) -> bool:
    return head[:4] == b"PK\x03\x04"


# ----------------------------------------------------------------------------- reading
# Nothing in the file is trusted: members are size-checked before they are inflated,
# every Arrow table is validated in full (damaged buffers would crash pyarrow, not
# raise) and checked against the schema, the header's types are checked, and the ids
# between tables are range-checked (Trace.validate) before a Trace is handed out.
_NUMERIC = {"i": pa.types.is_integer, "f": pa.types.is_floating}
_STAT_TYPES = {"s": pa.types.is_string, "b": pa.types.is_binary, "i": pa.types.is_integer,
               "u": pa.types.is_integer, "f": pa.types.is_floating}


def _check_members(zf: zipfile.ZipFile, path: Path) -> None:
    infos = zf.infolist()
    infl = Inflation(path, max(path.stat().st_size, 1), "the zip's content")
    for info in infos:
        infl.add(info.file_size)


def _read(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    try:
        return zf.read(name)
    except KeyError:
        raise TraceFormatError(path, f"damaged .polyprof file: member {name!r} is missing") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError, RuntimeError) as e:  # encrypted
        raise TraceFormatError(path, f"damaged .polyprof file: member {name!r} cannot be read ({e})") from None


def _table(zf: zipfile.ZipFile, name: str, path: Path, infl: Inflation) -> pa.Table:
    """An Arrow IPC member: its first bytes checked before it is read (a member that is
    no Arrow data, however large, costs nothing), its compressed buffers bounded before
    they are inflated, validated in full before any value is looked at."""
    try:
        with zf.open(name) as f:
            head = f.read(len(arrow_ipc.FILE_MAGIC))
    except KeyError:
        head = arrow_ipc.FILE_MAGIC  # _read says it is missing
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError, RuntimeError) as e:
        raise TraceFormatError(path, f"damaged .polyprof file: member {name!r} cannot be read ({e})") from None
    if head != arrow_ipc.FILE_MAGIC:
        raise TraceFormatError(path, f"damaged .polyprof file: {name} is not Arrow data")
    return arrow_ipc.read_file(_read(zf, name, path), path, name, infl)  # bounded, each batch validated in full


def _column(t: pa.Table, name: str, col: str, dtype: Any, path: Path) -> np.ndarray:
    if col not in t.column_names:
        raise TraceFormatError(path, f"damaged .polyprof file: {name} has no column {col!r}")
    c = t.column(col)
    kind = np.dtype(dtype).kind
    if not _NUMERIC["i" if kind in "iu" else "f"](c.type) or c.null_count:
        raise TraceFormatError(path, f"damaged .polyprof file: {name} column {col!r} is {c.type}"
                                     f"{' with nulls' if c.null_count else ''}, expected {np.dtype(dtype)}")
    a = arrow_numpy.values(c)  # from the value buffers: pyarrow's to_numpy imports pandas
    if kind in "iu" and len(a):
        info = np.iinfo(dtype)
        if a.dtype.kind == "u" and a.max() > info.max or a.dtype.kind == "i" and (a.min() < info.min
                                                                                 or a.max() > info.max):
            raise TraceFormatError(path, f"damaged .polyprof file: {name} column {col!r} has values beyond "
                                         f"{np.dtype(dtype)}")
    return a.astype(dtype, copy=False)


def _columns(zf: zipfile.ZipFile, name: str, spec: dict[str, Any], path: Path,
             infl: Inflation) -> dict[str, np.ndarray]:
    t = _table(zf, name, path, infl)
    return {k: _column(t, name, k, dt, path) for k, dt in spec.items()}


_FIELD_TYPES: dict[str, Any] = {"int": int, "str": str, "dict[str, Any]": dict, "int | None": (int, type(None)),
                                 "<class 'int'>": int, "<class 'str'>": str}


def records(path: Path, what: str, raw: Any, cls: type, where: str = "header.json") -> list[Any]:
    """Planes, tracks or sources from the header (``where``: a store's ``rank.json``),
    every field of the type its dataclass declares."""
    if not isinstance(raw, list):
        raise TraceFormatError(path, f"{where}: {what} is not a list")
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}  # type: ignore[misc]
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or not required <= set(r) or not set(r) <= set(types):
            raise TraceFormatError(path, f"{where}: {what}[{i}] is not a {cls.__name__} record")
        for k, v in r.items():
            want = _FIELD_TYPES.get(str(types[k]).replace("typing.", ""))
            if want is None:  # a field this reader does not check the type of
                continue
            if not isinstance(v, want) or isinstance(v, bool) or (isinstance(v, int) and not -2**63 <= v < 2**63):
                raise TraceFormatError(path, f"{where}: {what}[{i}].{k} is {type(v).__name__} {_short(v)}, "
                                             f"expected {getattr(want, '__name__', 'int or null')}")
        out.append(cls(**r))
    return out


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


def _stats(zf: zipfile.ZipFile, path: Path, entries: Any, n_events: int, infl: Inflation) -> dict[str, StatColumn]:
    if not isinstance(entries, list):
        raise TraceFormatError(path, "header.json: stats is not a list")
    stats: dict[str, StatColumn] = {}
    for i, s in enumerate(entries):
        if not (isinstance(s, dict) and isinstance(s.get("key"), str) and isinstance(s.get("entry"), str)
                and isinstance(s.get("kind"), str) and s["kind"] in _STAT_TYPES):
            raise TraceFormatError(path, f"header.json: stats[{i}] is not a stat entry")
        if s["key"] in stats:
            raise TraceFormatError(path, f"header.json: stat {s['key']!r} is listed twice")
        name = s["entry"]
        t = _table(zf, name, path, infl)
        rows = _column(t, name, "rows", np.int64, path)
        if "values" not in t.column_names:
            raise TraceFormatError(path, f"damaged .polyprof file: {name} has no column 'values'")
        vcol = t.column("values")
        if not _STAT_TYPES[s["kind"]](vcol.type):
            raise TraceFormatError(path, f"damaged .polyprof file: stat {s['key']!r} values are {vcol.type}, "
                                         f"header says kind {s['kind']!r}")
        if s["kind"] in ("s", "b"):
            values = np.empty(len(t), object)
            values[:] = vcol.to_pylist()
        elif vcol.null_count:
            raise TraceFormatError(path, f"damaged .polyprof file: stat {s['key']!r} has null values")
        else:
            values = arrow_numpy.values(vcol)
        col = StatColumn(rows, values)
        try:
            check_column(s["key"], col, n_events)
        except TraceSchemaError as e:
            raise TraceFormatError(path, f"damaged .polyprof file: {e}") from None
        stats[s["key"]] = col
    return stats


def _check_events(path: Path, events: dict[str, np.ndarray], counters: dict[str, np.ndarray],
                  n_strings: int) -> None:
    check_events(path, len(events["start_ns"]))
    s, d = events["start_ns"], events["dur_ns"]
    if len(s) and (s.min() < -TIME_LIMIT_NS or s.max() > TIME_LIMIT_NS or d.min() < 0 or d.max() > TIME_LIMIT_NS):
        raise TraceFormatError(path, "damaged .polyprof file: event times beyond +-2**62 ns or negative durations")
    c = counters
    if len(c["name"]) and (c["name"].min() < 0 or c["name"].max() >= n_strings or c["plane"].min() < 0):
        raise TraceFormatError(path, "damaged .polyprof file: a counter's name or plane id is out of range")


def bytes_back(path: Path, header: dict[str, Any], where: str = "header.json") -> None:
    """The ``bytes`` values the writer stored as ``{"__bytes__": base64}`` (the HLO modules
    of an XSpace's plane properties, trace/native_write.py) back to bytes, in place: a
    ``.polyprof`` file's header, a Parquet export's layout (``where`` names it in an
    error). Files written before it hold ``str(bytes)`` there, which stays text (hlo.py
    reads an HLO module's back)."""
    todo: list[Any] = [header.get(k) for k in ("planes", "tracks", "sources", "metadata")]
    while todo:  # no recursion: orjson parses up to 1024 levels
        node = todo.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, dict) and len(v) == 1 and isinstance(v.get(BYTES_KEY), str):
                try:
                    node[k] = base64.b64decode(v[BYTES_KEY], validate=True)
                except (binascii.Error, ValueError):
                    raise TraceFormatError(path, f"{where}: a bytes value is not base64 "
                                                 f"({_short(v[BYTES_KEY])})") from None
            elif isinstance(v, (dict, list)):
                todo.append(v)


@guarded
def load(path: str | Path) -> Trace:
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:  # e.g. "zip file version 25.5"
        raise TraceFormatError(path, f"not a readable .polyprof file ({e})") from None
    with zf:
        _check_members(zf, path)
        try:
            raw_header = _read(zf, "header.json", path)
            header = orjson.loads(raw_header)
        except TraceFormatError as e:
            if "is missing" in e.problem:  # another zip archive: what it holds, and what to do
                names = zf.namelist()
                held = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                raise TraceFormatError(path, f"a zip archive (holding {held or 'nothing'}), not a .polyprof "
                                             f"trace (no header.json): extract it first (unzip {path.name}) and "
                                             "give polyprof the trace files in it, or their directory") from None
            raise
        except orjson.JSONDecodeError as e:
            raise TraceFormatError(path, f"corrupt header.json ({e})") from None
        if not isinstance(header, dict) or header.get("format") != MAGIC:
            raise TraceFormatError(path, "header.json does not describe a polyprof trace")
        version = header.get("version", 0)
        if not isinstance(version, int):
            raise TraceFormatError(path, f"header.json: version {_short(version)} is not a number")
        if version > VERSION:
            raise TraceFormatError(path, f"written by a newer polyprof (format version {version})")
        if f'"{BYTES_KEY}"'.encode() in raw_header:  # a file without bytes values is not walked
            bytes_back(path, header)
        metadata = header.get("metadata", {})
        if not isinstance(metadata, dict):
            raise TraceFormatError(path, "header.json: metadata is not an object")
        clean_metadata(metadata)
        # one bound for the Arrow buffers of all members together (each member alone could
        # reach the ratio's floor, and stats members are as many as the header lists)
        infl = Inflation(path, max(path.stat().st_size, 1), "the compressed Arrow data")
        planes = records(path, "planes", header.get("planes"), Plane)
        tracks = records(path, "tracks", header.get("tracks"), Track)
        events = _columns(zf, "events.arrow", EVENT_COLUMNS, path, infl)
        flows = _columns(zf, "flows.arrow", FLOW_COLUMNS, path, infl)
        counters = _columns(zf, "counters.arrow", COUNTER_COLUMNS, path, infl)
        st = _table(zf, "strings.arrow", path, infl)
        if st.column_names != ["s"] or not pa.types.is_string(st.column(0).type) or st.column(0).null_count:
            raise TraceFormatError(path, "damaged .polyprof file: strings.arrow is not one column of strings")
        strings = st.column("s").to_pylist()
        _check_events(path, events, counters, len(strings))
        stats = _stats(zf, path, header.get("stats", []), len(events["start_ns"]), infl)
        sources = records(path, "sources", header.get("sources", []), Source)  # files before 0.2 have none
    trace = Trace(strings, planes, tracks, events, StatTable(stats), flows, counters, metadata, sources)
    try:
        return trace.validate()
    except TraceSchemaError as e:
        raise TraceFormatError(path, f"inconsistent trace: {e}") from None
