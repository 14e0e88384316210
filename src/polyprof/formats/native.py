"""The native ``.polyprof`` file: a zip of Arrow IPC tables plus a JSON header.

Lossless: strings, planes, tracks, event columns, every stat column with its dtype,
flows, counters and metadata round-trip exactly. Arrow IPC keeps it fast and lets
other tools (DuckDB, polars) read the tables inside.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import TraceFormatError
from ..trace.core import COUNTER_COLUMNS, EVENT_COLUMNS, FLOW_COLUMNS, Trace
from ..trace.model import Plane, Source, Track
from ..trace.stats import StatColumn

MAGIC = "polyprof-trace"
VERSION = 1


def _write_table(zf: zipfile.ZipFile, name: str, table: pa.Table) -> None:
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    zf.writestr(name, sink.getvalue())


def _read_table(zf: zipfile.ZipFile, name: str) -> pa.Table:
    return ipc.open_file(pa.BufferReader(zf.read(name))).read_all()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def save(trace: Trace, path: str | Path) -> Path:
    path = Path(path)
    stat_meta = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        _write_table(zf, "events.arrow", pa.table(trace.events))
        _write_table(zf, "flows.arrow", pa.table(trace.flows))
        _write_table(zf, "counters.arrow", pa.table(trace.counters))
        _write_table(zf, "strings.arrow", pa.table({"s": pa.array(trace.strings, pa.string())}))
        for i, (key, col) in enumerate(trace.stats.items()):
            kind = col.kind
            if kind == "O":
                if all(isinstance(v, str) for v in col.values):
                    values, kind = pa.array(col.values, pa.string()), "s"
                elif all(isinstance(v, bytes) for v in col.values):
                    values, kind = pa.array(col.values, pa.binary()), "b"
                else:
                    values, kind = pa.array([str(v) for v in col.values], pa.string()), "s"
            else:
                values = pa.array(col.values)
            _write_table(zf, f"stats/{i}.arrow", pa.table({"rows": col.rows, "values": values}))
            stat_meta.append({"key": key, "kind": kind, "entry": f"stats/{i}.arrow"})
        header = {
            "format": MAGIC, "version": VERSION,
            "sources": [asdict(s) for s in trace.sources],
            "planes": [asdict(p) for p in trace.planes],
            "tracks": [asdict(t) for t in trace.tracks],
            "stats": stat_meta,
            "metadata": trace.metadata,
        }
        zf.writestr("header.json", orjson.dumps(header, default=_json_default,
                                                option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
    return path


def is_native(head: bytes) -> bool:
    return head[:4] == b"PK\x03\x04"


def load(path: str | Path) -> Trace:
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise TraceFormatError(path, f"not a readable .polyprof file ({e})") from None
    with zf:
        try:
            header = orjson.loads(zf.read("header.json"))
        except KeyError:
            raise TraceFormatError(path, "zip file without header.json: not a .polyprof trace") from None
        except orjson.JSONDecodeError as e:
            raise TraceFormatError(path, f"corrupt header.json ({e})") from None
        if header.get("format") != MAGIC:
            raise TraceFormatError(path, "header.json does not describe a polyprof trace")
        if header.get("version", 0) > VERSION:
            raise TraceFormatError(path, f"written by a newer polyprof (format version {header['version']})")
        try:
            def cols(name: str, spec: dict) -> dict[str, np.ndarray]:
                t = _read_table(zf, name)
                return {k: t.column(k).to_numpy().astype(dt, copy=False) for k, dt in spec.items()}

            events = cols("events.arrow", EVENT_COLUMNS)
            flows = cols("flows.arrow", FLOW_COLUMNS)
            counters = cols("counters.arrow", COUNTER_COLUMNS)
            strings = _read_table(zf, "strings.arrow").column("s").to_pylist()
            stats = {}
            for s in header["stats"]:
                t = _read_table(zf, s["entry"])
                rows = t.column("rows").to_numpy()
                if s["kind"] in ("s", "b"):
                    values = np.empty(len(t), object)
                    values[:] = t.column("values").to_pylist()
                else:
                    values = t.column("values").to_numpy()
                stats[s["key"]] = StatColumn(rows, values)
        except (KeyError, pa.ArrowInvalid, OSError, zipfile.BadZipFile) as e:
            raise TraceFormatError(path, f"damaged .polyprof file ({e})") from None
    trace = Trace(strings, [Plane(**p) for p in header["planes"]], [Track(**t) for t in header["tracks"]],
                  events, stats, flows, counters, header.get("metadata", {}),
                  [Source(**s) for s in header.get("sources", [])])  # files before 0.2 have none
    try:
        return trace.validate()
    except Exception as e:
        raise TraceFormatError(path, f"inconsistent trace: {e}") from None
