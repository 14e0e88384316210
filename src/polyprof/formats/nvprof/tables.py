"""nvprof's event tables as NumPy columns, one :class:`~polyprof.formats.parts.Part` each.

nvprof writes CUPTI's activity records as they are, a table per kind: times are CUPTI
timestamps (ns), names ids into ``StringTable`` (``_id_``, ``value``), host calls keyed
by ``processId`` and ``threadId`` (a 32-bit thread id, stored signed), device work by
``deviceId`` and ``streamId`` with no process (the process of the call with its
correlation id: ``nsys/build.fill_process``). The copy and fill tables have Nsight's
columns, so Nsight's readers read them (``nsys/tables.py``), with CUPTI's numbering of
memory kinds.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from ...lowlevel.demangle import demangle_all
from ...trace import keys
from ...trace.sorting import member
from .. import sqlite_db
from ..nsys import schema as nsys_schema
from ..nsys import tables as nsys_tables
from ..nsys.tables import CAT_DRIVER, CAT_NVTX, CAT_NVTX_MARK, CAT_RUNTIME
from ..parts import Part, combined_names, one, set_stat, triples, zeros
from . import apis

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
CONCURRENT_KERNEL = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
DEVICE = "CUPTI_ACTIVITY_KIND_DEVICE"
MARKER = "CUPTI_ACTIVITY_KIND_MARKER"
STRINGS = "StringTable"

#: CUpti_ActivityMemoryKind (cupti_activity.h), the memory kinds of nvprof's copies:
#: numbered from 1 where Nsight's ENUM_CUDA_MEM_KIND starts at 0
MEM_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
             6: "Device Static", 7: "Managed Static"}

#: the tables read (the others are counted as not read)
READ = (KERNEL, CONCURRENT_KERNEL, RUNTIME, DRIVER, DEVICE, MARKER, STRINGS, nsys_schema.MEMCPY, nsys_schema.MEMSET,
        "Version", "sqlite_sequence")

_DEVICE_COLS = nsys_schema._DEVICE + nsys_schema._DEVICE_OPT
_API_NEEDS, _API_OPT = ("start", "end", "processId", "threadId"), ("cbid", "correlationId")
#: the columns each event table's reader needs, and those read with a default when a
#: table lacks them (nsys_schema.missing, said in the warnings: build.py)
NEEDS = {**{t: nsys_schema.NEEDS[t] for t in (nsys_schema.MEMCPY, nsys_schema.MEMSET)},
         KERNEL: nsys_schema._DEVICE, CONCURRENT_KERNEL: nsys_schema._DEVICE, RUNTIME: _API_NEEDS,
         DRIVER: _API_NEEDS, MARKER: ("flags", "timestamp", "id", "objectKind", "objectId", "name")}
OPTIONAL = {**{t: nsys_schema._DEVICE_OPT for t in (nsys_schema.MEMCPY, nsys_schema.MEMSET, KERNEL,
                                                      CONCURRENT_KERNEL)}, RUNTIME: _API_OPT, DRIVER: _API_OPT}


def is_nvprof(tables: sqlite_db.Schema) -> bool:
    """nvprof's tables: its ``StringTable`` beside CUPTI activity tables (Nsight's export
    has ``StringIds`` instead)."""
    return (tables.has(STRINGS, "_id_", "value") and "StringIds" not in tables.columns
            and any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables.columns))


class Strings(nsys_tables.Strings):
    """``StringTable``: id -> text (``codes`` as Nsight's ``StringIds``)."""

    table = STRINGS

    def __init__(self, conn: sqlite3.Connection, tables: sqlite_db.Schema):
        self.missing = set()
        self.text = {int(i): str(v) for i, v in sqlite_db.rows(conn, f"SELECT _id_, value FROM {STRINGS}")
                     if isinstance(i, int) and v is not None} if tables.has(STRINGS, "_id_", "value") else {}


def export(tables: sqlite_db.Schema) -> nsys_schema.Export:
    """The layout Nsight's copy and fill readers take, with CUPTI's memory kinds."""
    ex = nsys_schema.Export(tables)
    ex.mem_kinds = dict(MEM_KINDS)
    return ex


def _opt(tables: sqlite_db.Schema, table: str, *cols: str) -> dict[str, str]:
    return {c: c for c in tables.present(table, cols)}


def kernels(conn: sqlite3.Connection, tables: sqlite_db.Schema, strings: Strings, table: str) -> Part | None:
    """``CONCURRENT_KERNEL`` (nvprof's default) or ``KERNEL`` (serialized kernels). nvprof
    keeps CUPTI's mangled name (``_Z9addKernelPiPKiS1_``), the only one its tables have;
    it is demangled, as nvprof and Nsight show it (``addKernel(int*, int const*, int const*)``)."""
    if not tables.has(table, *nsys_schema._DEVICE):
        return None
    exprs = _opt(tables, table, *_DEVICE_COLS)  # a column it lacks: a default (device_defaults), said
    exprs.update(_opt(tables, table, "name", "contextId", "registersPerThread", "gridX", "gridY", "gridZ",
                      "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "graphNodeId",
                      "graphId"))
    c = nsys_tables.device_defaults(sqlite_db.read_columns(conn, table, exprs, not_null=tables.not_null(table)))
    n = len(c["start"])
    stats: dict[str, Any] = {}
    _device_stats(c, stats)
    for key, prefix in ((keys.GRID, "grid"), (keys.BLOCK, "block")):
        if all(f"{prefix}{a}" in c for a in "XYZ"):
            stats[key] = triples(*(c[f"{prefix}{a}"] for a in "XYZ"))
    if "registersPerThread" in c:
        set_stat(stats, "registers per thread", c["registersPerThread"])
    if "staticSharedMemory" in c and "dynamicSharedMemory" in c:
        stats["shared memory"] = np.maximum(c["staticSharedMemory"], 0) + np.maximum(c["dynamicSharedMemory"], 0)
    names = strings.codes(c["name"], demangle_all) if "name" in c else one(n, "kernel")
    return _device_part(table, c, names, keys.CAT_KERNEL, stats)


def _device_stats(c: dict[str, np.ndarray], stats: dict[str, Any]) -> None:
    if "correlationId" in c:
        set_stat(stats, keys.CORRELATION_ID, c["correlationId"])
    set_stat(stats, keys.STREAM, c["streamId"], missing=nsys_tables.UNKNOWN_STREAM)
    stats[keys.DEVICE] = c["deviceId"]
    for col, key in (("contextId", "context"), ("graphNodeId", "graph node id"), ("graphId", "graph id")):
        if col in c:
            set_stat(stats, key, c[col], missing=0)


def _device_part(table: str, c: dict[str, np.ndarray], names: tuple[np.ndarray, list[str]], category: str,
                 stats: dict[str, Any]) -> Part:
    n = len(c["start"])
    return Part(table, True, c["start"], c["end"], np.full(n, -1, np.int64), c["streamId"], c["deviceId"],
                names[0], names[1], *one(n, category), stats, c.get("correlationId"))


def copies(conn: sqlite3.Connection, ex: nsys_schema.Export, notes: list[str]) -> Part | None:
    return nsys_tables.copies(conn, ex, notes)


def fills(conn: sqlite3.Connection, ex: nsys_schema.Export, notes: list[str]) -> Part | None:
    return nsys_tables.fills(conn, ex, notes)


def api_calls(conn: sqlite3.Connection, tables: sqlite_db.Schema, table: str) -> Part | None:
    """Runtime (``RUNTIME``) or driver (``DRIVER``) calls, named by their callback id."""
    if not tables.has(table, *_API_NEEDS):
        return None
    exprs = _opt(tables, table, *_API_NEEDS, *_API_OPT, "returnValue")  # without cbid or correlationId: said
    c = sqlite_db.read_columns(conn, table, exprs, not_null=tables.not_null(table))
    n = len(c["start"])
    driver = table == DRIVER
    stats: dict[str, Any] = {}
    if "cbid" in c:
        names = combined_names([c["cbid"]], lambda cbid: apis.name(cbid, driver))
        stats["cbid"] = c["cbid"]
    else:
        names = one(n, f"[unnamed CUDA {'driver' if driver else 'runtime'} call]")
    corr = c.get("correlationId")
    if corr is not None:
        set_stat(stats, keys.CORRELATION_ID, corr, missing=0)
    if "returnValue" in c:
        set_stat(stats, "return value", c["returnValue"], missing=0)
    pid = c["processId"] & 0xFFFFFFFF
    return Part(table, False, c["start"], c["end"], pid << 24, c["threadId"] & 0xFFFFFFFF, zeros(n),
                names[0], names[1], *one(n, CAT_DRIVER if driver else CAT_RUNTIME), stats,
                None if corr is None else np.where(corr > 0, corr, -1))


#: CUpti_ActivityFlag's marker bits (cupti_activity.h), and CUpti_ActivityObjectKind's
#: process and thread
_INSTANT, _START, _END = 1, 2, 4
_PROCESS, _THREAD = 1, 2
_MARKER_COLS = NEEDS[MARKER]


def markers(conn: sqlite3.Connection, tables: sqlite_db.Schema, strings: Strings) -> tuple[Part | None, int]:
    """NVTX ranges (push/pop and start/end: CUPTI records each as a start and an end
    with the same ``id``, the name on the start) and marks (instantaneous), on the
    thread the ``objectId`` names (12 bytes: process and thread ids, 32-bit little-endian);
    also the number of ranges left out because they never ended."""
    if not tables.has(MARKER, *_MARKER_COLS):
        return None, 0
    has_domain = tables.has(MARKER, "domain")
    cols = ", ".join(_MARKER_COLS + (("domain",) if has_domain else ()))
    c = _marker_columns(sqlite_db.rows(conn, f"SELECT {cols} FROM {MARKER} ORDER BY rowid"), has_domain)
    flags, ids = np.where(c["valid"], c["flags"], 0), c["id"]  # a row with a NULL is no marker
    start, instant = (flags & _START) > 0, ((flags & _INSTANT) > 0) & ((flags & (_START | _END)) == 0)
    ends = np.flatnonzero((flags & _END) > 0)
    ends = ends[np.argsort(ids[ends], kind="stable")]
    stop = c["timestamp"].copy()
    ended = np.zeros(len(flags), bool)
    if len(ends):
        at = np.minimum(np.searchsorted(ids[ends], ids), len(ends) - 1)
        ended = start & (ids[ends[at]] == ids)
        stop[ended] = c["timestamp"][ends[at[ended]]]
    keep = np.flatnonzero(ended | instant)
    nulls = [i for i, v in strings.text.items() if v == "-- null --"]  # nvprof's string for none
    codes, vals = strings.codes(np.where(member(c["name"], np.asarray(nulls, np.int64)), -1, c["name"])[keep])
    vals = ["[unnamed NVTX range]" if v == "[unnamed]" else v for v in vals]
    stats: dict[str, Any] = {}
    dom = c["domain"][keep]
    named = np.flatnonzero(member(dom, np.asarray([i for i in strings.text if i not in nulls], np.int64)))
    if len(named):
        stats["domain"] = (named, np.array([strings.text[int(d)] for d in dom[named].tolist()], dtype=object))
    kind = c["objectKind"][keep]
    pid = np.where((kind == _PROCESS) | (kind == _THREAD), c["pid"][keep], 0)
    tid = np.where(kind == _THREAD, c["tid"][keep], 0)
    return Part(MARKER, False, c["timestamp"][keep], stop[keep], pid << 24, tid, zeros(len(keep)), codes, vals,
                instant[keep].astype(np.int64), [CAT_NVTX, CAT_NVTX_MARK], stats), int((start & ~ended).sum())


def _marker_columns(got: list[tuple[Any, ...]], has_domain: bool) -> dict[str, np.ndarray]:
    """The marker table's rows as int64 columns (-1 where not an integer; ``valid``: the
    rows whose columns all are), its ``objectId`` as the process and thread ids it holds
    (0 where it holds none)."""
    def ints(i: int) -> np.ndarray:
        return np.fromiter((r[i] if type(r[i]) is int else -1 for r in got), np.int64, len(got))

    out = {k: ints(i) for i, k in enumerate(_MARKER_COLS) if k != "objectId"}
    out["valid"] = np.fromiter((all(type(r[i]) is int for i in (0, 1, 2, 3, 5)) for r in got), bool, len(got))
    out["domain"] = ints(len(_MARKER_COLS)) if has_domain else np.full(len(got), -1, np.int64)
    obj = b"".join(r[4][:8] if isinstance(r[4], bytes) and len(r[4]) >= 8 else bytes(8) for r in got)
    pt = np.frombuffer(obj, "<u4").reshape(-1, 2).astype(np.int64)
    out["pid"], out["tid"] = pt[:, 0], pt[:, 1]
    return out


#: CUPTI_ACTIVITY_KIND_DEVICE columns -> the deviceProperties names Kineto writes
_DEVICE_PROPS = {"globalMemorySize": "totalGlobalMem", "numMultiprocessors": "numSms",
                 "computeCapabilityMajor": "computeMajor", "computeCapabilityMinor": "computeMinor",
                 "maxThreadsPerBlock": "maxThreadsPerBlock", "maxRegistersPerBlock": "regsPerBlock",
                 "maxRegistersPerMultiprocessor": "regsPerMultiprocessor", "numThreadsPerWarp": "warpSize",
                 "maxSharedMemoryPerBlock": "sharedMemPerBlock",
                 "maxSharedMemoryPerMultiprocessor": "sharedMemPerMultiprocessor", "l2CacheSize": "l2CacheSize",
                 "coreClockRate": "clockRate"}


def devices(conn: sqlite3.Connection, tables: sqlite_db.Schema, strings: Strings) -> dict[int, dict[str, Any]]:
    """CUDA device index -> its properties (``CUPTI_ACTIVITY_KIND_DEVICE``, its name from
    ``StringTable``; ``globalMemoryBandwidth`` is KB/s)."""
    if not tables.has(DEVICE, "id"):
        return {}
    wanted = tables.present(DEVICE, list(_DEVICE_PROPS) + ["name", "globalMemoryBandwidth"])
    out: dict[int, dict[str, Any]] = {}
    query = f"SELECT id, {', '.join(sqlite_db.quote(c) for c in wanted)} FROM {DEVICE}" if wanted else ""
    for row in sqlite_db.rows(conn, query) if query else []:
        if not isinstance(row[0], int):
            continue
        got = {c: v for c, v in zip(wanted, row[1:]) if isinstance(v, int)}
        props: dict[str, Any] = {_DEVICE_PROPS[c]: v for c, v in got.items() if c in _DEVICE_PROPS}
        if "name" in got and got["name"] in strings.text:
            props["name"] = strings.text[got["name"]]
        if "globalMemoryBandwidth" in got:
            props["memoryBandwidth"] = got["globalMemoryBandwidth"] * 1000  # bytes/s, as Nsight's
        props["id"] = int(row[0])
        out[int(row[0])] = props
    return out
