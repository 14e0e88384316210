"""What an Nsight Systems export holds, found by looking (export schema versions differ).

Nothing is assumed from a version number: each table and column is used when present.
Seen across versions: the metadata table is ``EXPORT_META_DATA`` (2021-2022) or
``META_DATA_EXPORT`` (2023 on); enum tables (``ENUM_CUDA_MEMCPY_OPER``,
``ENUM_NSYS_EVENT_TYPE``...) exist only in newer exports, so the numbers they name are
also listed here (the values Nsight has kept since the 2020 exports); kernel tables
gained ``graphNodeId``, ``graphId``, ``greenContextId``; NVTX text is inline (``text``)
or registered (``textId`` into ``StringIds``); the session start is
``TARGET_INFO_SESSION_START_TIME.utcEpochNs``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Mapping

from .. import sqlite_db
from ..sqlite_db import Schema

#: tables that mark a database as an Nsight Systems export (one of the event tables
#: beside StringIds, or the session metadata)
MARKERS = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
           "TARGET_INFO_SESSION_START_TIME", "EXPORT_META_DATA", "META_DATA_EXPORT")

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
GRAPH = "CUDA_GRAPH_EVENTS"
GRAPH_NODE = "CUDA_GRAPH_NODE_EVENTS"

#: tables this reader reads events or names from
READ = (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, NVTX, OSRT, GRAPH, GRAPH_NODE, "StringIds", "ThreadNames",
        "PROCESSES", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE",
        "TARGET_INFO_SYSTEM_ENV", "EXPORT_META_DATA", "META_DATA_EXPORT")

#: the columns each event table's reader needs (without one of them the table is not read,
#: said in the trace's warnings: where the events are and when)
_DEVICE = ("start", "end")
_NAMED = ("start", "end", "globalTid")
NEEDS = {KERNEL: _DEVICE, MEMCPY: _DEVICE, MEMSET: _DEVICE, SYNC: _DEVICE, RUNTIME: _NAMED,
         NVTX: ("start", "eventType", "globalTid"), OSRT: _NAMED, GRAPH: _NAMED, GRAPH_NODE: _NAMED}
#: the columns read with a default when a table lacks them (a damaged or trimmed export):
#: its rows are kept, and the warnings say what the default does (DEFAULTS)
_DEVICE_OPT = ("deviceId", "streamId", "correlationId")
OPTIONAL = {KERNEL: _DEVICE_OPT, MEMCPY: _DEVICE_OPT, MEMSET: _DEVICE_OPT, SYNC: _DEVICE_OPT,
            RUNTIME: ("correlationId", "nameId"), OSRT: ("nameId",), GRAPH: ("nameId",), GRAPH_NODE: ("nameId",)}
#: what reading without the column does to a table's rows (the nvprof reader's columns too)
DEFAULTS = {"deviceId": "on GPU 0", "streamId": "on one 'unknown stream' line per device",
            "correlationId": "without links between the calls and the device work they launched",
            "nameId": "unnamed", "cbid": "unnamed"}


def missing(tables: Schema, needs: Mapping[str, tuple[str, ...]], optional: Mapping[str, tuple[str, ...]]
            ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(each table present without a column its reader needs -> every column of ``needs``
    and ``optional`` it lacks; each table with those but without an optional column ->
    the optional columns it lacks)."""
    unread: dict[str, list[str]] = {}
    defaulted: dict[str, list[str]] = {}
    for t, need in needs.items():
        if t not in tables.columns:
            continue
        lack = [c for c in need + optional.get(t, ()) if not tables.has(t, c)]
        if any(c in need for c in lack):
            unread[t] = lack
        elif lack:
            defaulted[t] = lack
    return unread, defaulted


def defaulted_note(table: str, cols: list[str]) -> str:
    """The warning for a table read without ``cols`` (their defaults: DEFAULTS)."""
    return (f"{table} lacks {', '.join(cols)} (a damaged or trimmed file): its rows are read "
            f"{'; '.join(DEFAULTS.get(c, 'without it') for c in cols)}")


# --- enum values, for exports without their ENUM_ tables --------------------------
#: ENUM_CUDA_MEMCPY_OPER
COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD"}
#: ENUM_CUDA_MEM_KIND
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}
#: ENUM_CUPTI_SYNC_TYPE
SYNC_TYPES = {0: "Unknown", 1: "Event Synchronize", 2: "Stream Wait Event", 3: "Stream Synchronize",
              4: "Context Synchronize"}
#: ENUM_NSYS_EVENT_TYPE, the NVTX ones read (names as Nsight writes them)
NVTX_TYPES = {"NvtxMark": 34, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
#: ENUM_NSYS_EVENT_CLASS of the CUDA API calls: runtime and driver
API_CLASSES = {"TRACE_PROCESS_EVENT_CUDA_RUNTIME": 0, "TRACE_PROCESS_EVENT_CUDA_DRIVER": 1}


@dataclass
class Export:
    """One export's layout: its tables, version text, and enum names."""

    tables: Schema
    version: dict[str, str] = field(default_factory=dict)
    copy_kinds: dict[int, str] = field(default_factory=lambda: dict(COPY_KINDS))
    mem_kinds: dict[int, str] = field(default_factory=lambda: dict(MEM_KINDS))
    sync_types: dict[int, str] = field(default_factory=lambda: dict(SYNC_TYPES))
    nvtx_types: dict[str, int] = field(default_factory=lambda: dict(NVTX_TYPES))
    api_classes: dict[str, int] = field(default_factory=lambda: dict(API_CLASSES))

    def has(self, table: str, *cols: str) -> bool:
        return self.tables.has(table, *cols)

    def cols(self, table: str) -> tuple[str, ...]:
        return self.tables.columns.get(table, ())

    def lacking(self) -> dict[str, list[str]]:
        """Event tables present without a column their reader needs: table -> every
        column of its reader's it lacks."""
        return missing(self.tables, NEEDS, OPTIONAL)[0]

    def defaulted(self) -> dict[str, list[str]]:
        """Event tables read with defaults for the optional columns they lack: table ->
        those columns."""
        return missing(self.tables, NEEDS, OPTIONAL)[1]

    def unread(self) -> list[str]:
        """Tables this reader does not read (enum tables aside)."""
        return sorted(t for t in self.tables.columns if t not in READ and not t.startswith("ENUM_"))


def is_nsys(tables: Schema) -> bool:
    return "StringIds" in tables.columns and any(t in tables.columns for t in MARKERS)


def _enum(conn: sqlite3.Connection, tables: Schema, name: str) -> dict[int, str]:
    if not tables.has(name, "id"):
        return {}
    label = "label" if tables.has(name, "label") else "name" if tables.has(name, "name") else None
    if label is None:
        return {}
    return {int(i): str(v) for i, v in sqlite_db.rows(conn, f"SELECT id, {label} FROM {sqlite_db.quote(name)}")
            if isinstance(i, int) and v is not None}


def _names(conn: sqlite3.Connection, tables: Schema, name: str) -> dict[str, int]:
    if not tables.has(name, "id", "name"):
        return {}
    return {str(v): int(i) for i, v in sqlite_db.rows(conn, f"SELECT id, name FROM {sqlite_db.quote(name)}")
            if isinstance(i, int) and v is not None}


def inspect(conn: sqlite3.Connection, tables: Schema) -> Export:
    ex = Export(tables)
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if tables.has(meta, "name", "value"):
            ex.version.update({str(k): str(v) for k, v in sqlite_db.rows(
                conn, f"SELECT name, value FROM {meta}") if k is not None})
    # the short names above win (they are what Kineto and Nsight's reports print); an
    # enum table names the values this list does not know
    ex.copy_kinds = {**_enum(conn, tables, "ENUM_CUDA_MEMCPY_OPER"), **COPY_KINDS}
    ex.mem_kinds = {**_enum(conn, tables, "ENUM_CUDA_MEM_KIND"), **MEM_KINDS}
    ex.sync_types = {**_enum(conn, tables, "ENUM_CUPTI_SYNC_TYPE"), **SYNC_TYPES}
    types = _names(conn, tables, "ENUM_NSYS_EVENT_TYPE")
    ex.nvtx_types.update({k: v for k, v in types.items() if k in NVTX_TYPES})
    classes = _names(conn, tables, "ENUM_NSYS_EVENT_CLASS")
    ex.api_classes.update({k: v for k, v in classes.items() if k in API_CLASSES})
    return ex
