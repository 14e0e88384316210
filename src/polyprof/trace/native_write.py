"""The native ``.polyprof`` file written: a zip of Arrow IPC tables plus a JSON header
(read back by formats/native.py). It is the Trace's own serialisation, so it sits on the
trace floor and ``Trace.save`` calls it without reaching up to the file formats.

Members: ``events.arrow``, ``flows.arrow``, ``counters.arrow``, ``strings.arrow``, one
``stats/N.arrow`` per stat key (``rows``, ``values``), and ``header.json`` (sources,
planes, tracks, the stat keys and kinds, metadata). A small trace's tables are
written by trace/arrow_write.py, uncompressed and without importing pyarrow; a
bigger one's by pyarrow, zstd-compressed (:data:`SMALL_TRACE_BYTES`). Both write the
same arrays (trace/arrow_columns.py) and read back the same.
"""

from __future__ import annotations

import base64
import io
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..errors import PolyprofError
from . import arrow_columns as ac
from . import arrow_write
from .stats import StatColumn

if TYPE_CHECKING:
    from .core import Trace

MAGIC = "polyprof-trace"
VERSION = 1


#: a trace whose columns hold fewer bytes than this is written by trace/arrow_write.py
#: (no pyarrow import for every small `polyprof run`), its
#: tables uncompressed; a bigger one by pyarrow, each table zstd-compressed
SMALL_TRACE_BYTES = 2 << 20


def _write_table(zf: zipfile.ZipFile, name: str, columns: dict[str, ac.Column], small: bool) -> None:
    if small:
        zf.writestr(name, arrow_write.file_bytes(columns))
        return
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from .arrow_arrays import from_column  # with pyarrow: only for the pyarrow path

    table = pa.Table.from_arrays([from_column(c) for c in columns.values()], names=list(columns))
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    zf.writestr(name, sink.getvalue())


def _stat_values(col: StatColumn) -> tuple[ac.Column, str]:
    """A stat's values as a column, and the kind the header records."""
    if col.kind != "O":
        return ac.column(np.asarray(col.values)), col.kind
    if all(isinstance(v, str) for v in col.values):
        return ac.column(col.values, "string"), "s"
    if all(isinstance(v, bytes) for v in col.values):
        return ac.column(col.values, "binary"), "b"
    return ac.column([str(v) for v in col.values], "string"), "s"


def _tables(trace: Trace) -> tuple[dict[str, dict[str, ac.Column]], list[dict[str, str]]]:
    """Every member's columns (member name -> columns), and the header's stat entries."""
    def numeric(cols: dict[str, np.ndarray]) -> dict[str, ac.Column]:
        return {k: ac.column(np.asarray(v)) for k, v in cols.items()}

    tables = {"events.arrow": numeric(trace.events), "flows.arrow": numeric(trace.flows),
              "counters.arrow": numeric(trace.counters), "strings.arrow": {"s": ac.column(trace.strings, "string")}}
    stat_meta = []
    for i, (key, col) in enumerate(trace.stats.items()):
        values, kind = _stat_values(col)
        tables[f"stats/{i}.arrow"] = {"rows": ac.column(np.asarray(col.rows)), "values": values}
        stat_meta.append({"key": key, "kind": kind, "entry": f"stats/{i}.arrow"})
    return tables, stat_meta


#: a ``bytes`` value in the header (the HLO modules an XSpace's plane properties hold):
#: ``{BYTES_KEY: base64 text}``, read back to the bytes by formats/native.py
BYTES_KEY = "__bytes__"


def json_default(o: Any) -> Any:
    """What orjson cannot write, as the header keeps it (bytes as ``{BYTES_KEY: base64}``)."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, (bytes, bytearray)):
        return {BYTES_KEY: base64.b64encode(o).decode("ascii")}
    return str(o)


def header_json(header: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(header, default=json_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:  # metadata read from elsewhere: ints beyond 64 bits, deep nesting
        import json

        try:
            return json.dumps(header, default=json_default).encode()
        except (RecursionError, ValueError, TypeError) as e:
            raise PolyprofError(f"the trace's metadata cannot be saved as JSON ({e})") from None


def save(trace: Trace, path: str | Path) -> Path:
    path = Path(path)
    tables, stat_meta = _tables(trace)
    small = sum(c.nbytes for cols in tables.values() for c in cols.values()) < SMALL_TRACE_BYTES
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, columns in tables.items():
            _write_table(zf, name, columns, small)
        header = {
            "format": MAGIC, "version": VERSION,
            "sources": [asdict(s) for s in trace.sources],
            "planes": [asdict(p) for p in trace.planes],
            "tracks": [asdict(t) for t in trace.tracks],
            "stats": stat_meta,
            "metadata": trace.metadata,
        }
        zf.writestr("header.json", header_json(header))
    return path
