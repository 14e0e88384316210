"""The Trace of an nvprof file's parts, laid out as Nsight's export is (``nsys/build.py``).

One source per process; per source a ``/host:CPU`` plane with a track per thread and a
``/device:GPU:<cuda device>`` plane per device with a track per stream. Device work
takes the process of the runtime or driver call with its correlation id, and a flow
links them. Times stay nvprof's (CUPTI timestamps, ns): wall-clock time since the Unix
epoch in the files nvprof writes on Linux, so a trace whose times are past 2001 gets a
wall anchor at 0.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from .. import sqlite_db
from ..nsys import schema as nsys_schema
from ..nsys.build import add_flows, add_part, fill_process
from .tables import NEEDS, OPTIONAL
from ..parts import Part, read_parts

#: CUPTI timestamps from this value on (2001-09-09 in ns since the epoch) are taken as
#: wall-clock time (nvprof's on Linux); earlier ones as a clock of their own
_EPOCH_FROM = 10**18


def build(conn: sqlite3.Connection, tables: sqlite_db.Schema, readers: list[Callable[[], Part | None]],
          gpus: dict[int, dict[str, Any]], path: Path, unread: list[str], version: int | None,
          notes: list[str] | None = None) -> Trace:
    """The Trace of the parts ``readers`` return, the runtime and driver calls first
    (device work takes their processes); ``notes``: warnings the readers add as they run;
    ``tables``: the file's, whose damage (a table without a column) is said."""
    b = TraceBuilder()
    source_of: dict[int, int] = {}
    launches: list[tuple[np.ndarray, np.ndarray]] = []
    linked: list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]] = []
    first = None

    def source(g: int, pid: int) -> int:
        return b.source(pid=pid, label=f"pid {pid}")

    damaged: list[str] = []
    for p in read_parts(readers, damaged):
        fill_process(p, launches, set(source_of))
        lo = int(p.start.min())
        first = lo if first is None else min(first, lo)
        rows = add_part(b, p, source_of, gpus, source, pid_of=lambda g: g >> 24 if g >= 0 else 0,
                        host_properties=lambda g: None, thread_name=lambda g, t: "")
        if p.corr is not None:
            linked.append((p.device, p.gpid, p.corr, rows))
            if not p.device:
                launches.append((p.gpid, p.corr))
        del p, rows
    notes = list(notes or []) + column_notes(conn, tables) + damaged
    lacking = [f"{t} lacks {', '.join(miss)}" for t, miss in nsys_schema.missing(tables, NEEDS, OPTIONAL)[0].items()
               if _has_rows(conn, t)]
    if lacking:  # rows polyprof would read, but not the columns it reads them by: never silently left out
        notes.append(f"{'nothing polyprof reads: ' if not source_of else ''}{'; '.join(lacking)} (columns its "
                     "reader needs), so those rows are not read")
    elif not source_of:
        other = [t for t in unread if _has_rows(conn, t)]
        notes.append("nothing polyprof reads: no kernel, copy, memset, runtime or driver rows (the file holds "
                     f"other data; its tables with rows: {', '.join(other[:8]) + (', ...' if len(other) > 8 else '') or 'none'})")
    for s in b.sources:
        s.label = f"{path.name} pid {s.pid}" if len(b.sources) > 1 else ""
    add_flows(b, linked)
    md: dict[str, Any] = {"clock": "nvprof (CUPTI) timestamps, ns",
                          "nvprof": {"version": version, "tables_not_read": [t for t in unread if _has_rows(conn, t)]}}
    if first is not None and first >= _EPOCH_FROM:
        md["wall_anchor"] = {"mono_ns": 0, "wall_ns": 0, "uncertainty_ns": 0}
        for s in b.sources:
            s.clock["wall_anchor"] = dict(md["wall_anchor"])
    if gpus:
        md["deviceProperties"] = [gpus[k] for k in sorted(gpus)]
    if notes:
        md["warnings"] = notes
    b.metadata.update(md)
    return b.build()


def column_notes(conn: sqlite3.Connection, tables: sqlite_db.Schema) -> list[str]:
    """A warning per event table with rows read without a column it lacks (its default:
    nsys_schema.DEFAULTS)."""
    return [nsys_schema.defaulted_note(t, miss) for t, miss in nsys_schema.missing(tables, NEEDS, OPTIONAL)[1].items()
            if _has_rows(conn, t)]


def _has_rows(conn: sqlite3.Connection, table: str) -> bool:
    try:
        return bool(sqlite_db.rows(conn, f"SELECT 1 FROM {sqlite_db.quote(table)} LIMIT 1"))
    except sqlite3.Error:
        return False
