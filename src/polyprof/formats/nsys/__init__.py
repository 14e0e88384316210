"""Nsight Systems' SQLite export (``nsys export --type sqlite``) as a Trace.

A package by stage: ``schema`` finds what the export holds (tables, columns, enum
names: versions differ), ``tables`` reads each event table as NumPy columns, ``build``
makes the Trace (a source per process, planes per device, tracks per thread and stream,
flows by correlation id). ``load`` is the reader; docs/formats.md says what is read.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Callable

from ...errors import TraceFormatError
from ...trace.core import Trace
from .. import sqlite_db
from ..safety import guarded
from . import schema, tables
from .build import build

log = logging.getLogger("polyprof")

__all__ = ["load", "sniff", "read"]


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite file with Nsight Systems' tables."""
    return sqlite_db.sniff(head, path, schema.is_nsys, compressed=True)


def read(conn: sqlite3.Connection, path: Path) -> Trace:
    tabs = sqlite_db.schema(conn)
    if not schema.is_nsys(tabs):
        raise TraceFormatError(path, not_an_export(tabs))
    ex = schema.inspect(conn, tabs)
    strings = tables.Strings(conn, ex)
    info: list[str] = []
    notes: list[str] = []

    def runtime() -> tables.Part | None:
        part, dropped = tables.api_calls(conn, ex, strings, notes)
        if dropped:
            info.append(f"{dropped} CUDA API rows of another event class repeat a call already read "
                        "(same correlation id) and are left out")
        return part

    def marks() -> tables.Part | None:
        part, unended = tables.nvtx(conn, ex, strings, notes)
        if unended:
            notes.append(f"nsys: {unended} NVTX ranges never ended and are left out")
        return part

    readers: list[Callable[[], tables.Part | None]] = [
        runtime, lambda: tables.kernels(conn, ex, strings), lambda: tables.copies(conn, ex, notes),
        lambda: tables.fills(conn, ex, notes), lambda: tables.syncs(conn, ex), marks,
        lambda: tables.os_calls(conn, ex, strings, notes),
        lambda: tables.graph_table(conn, ex, strings, schema.GRAPH, notes),
        lambda: tables.graph_table(conn, ex, strings, schema.GRAPH_NODE, notes),
        lambda: strings.note_missing(notes)]  # (after every reader that names rows)
    unread = ex.unread()
    if unread:
        log.info("%s: %d tables not read (%s)", path, len(unread), ", ".join(unread[:12])
                 + (", ..." if len(unread) > 12 else ""))
    trace = build(conn, ex, readers, path, notes, info)
    for n in notes:
        log.warning("%s: %s", path, n)
    for n in info:
        log.info("%s: %s", path, n)
    return trace


def not_an_export(tabs: sqlite_db.Schema) -> str:
    names = sorted(tabs.columns)
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    if is_rocprof_v1_db(tabs):
        return (f"rocprof (v1)'s results.db (tables {shown}): not read; polyprof reads the results.json "
                "rocprof writes beside it (--hip-trace, --hsa-trace or --sys-trace), its results.csv (a row per "
                "kernel dispatch) and rocprofv3's outputs")
    return ("an SQLite database, but not an Nsight Systems export (no StringIds with CUPTI/NVTX tables), "
            "a rocpd database (no rocpd_kernel_dispatch, rocpd_region or rocpd_memory_copy), "
            "an RPD database (no rocpd_api and rocpd_op) "
            f"nor an nvprof file (no StringTable beside CUPTI_ACTIVITY_KIND_ tables); its tables: {shown or 'none'}")


#: the tables of rocprof (v1)'s results.db (the CSV files it also writes, as tables)
_ROCPROF_V1_TABLES = frozenset({"HIP", "HSA", "OPS", "COPY", "KERN", "KFD", "ROCTX"})


def is_rocprof_v1_db(tabs: sqlite_db.Schema) -> bool:
    """Whether an SQLite file's tables are rocprof (v1)'s results.db (not read: its
    results.json and results.csv hold the same events)."""
    names = set(tabs.columns)
    return bool(names) and names <= _ROCPROF_V1_TABLES and any(tabs.has(t, "BeginNs", "EndNs") for t in names)


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read an Nsight Systems SQLite export."""
    return sqlite_db.read_file(path, read)
