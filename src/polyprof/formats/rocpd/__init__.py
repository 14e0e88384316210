"""rocpd: the SQLite database rocprofv3 writes (``--output-format rocpd``), as a Trace.

A package by stage: ``layout`` finds the runs (table suffixes) and the schema version's
layout (3.x or 4.x), ``tables`` reads each run's kernel dispatches, memory copies and
regions (HIP/HSA/RCCL API calls, ROCTx ranges and marks) as parts, and
formats/rocm_trace.py makes the Trace (the same builder as rocprofv3's JSON).
docs/formats.md says what is read.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from ...errors import TraceFormatError
from ...trace.core import Trace
from .. import rocm_trace, sqlite_db
from ..parts import Part
from ..safety import guarded
from . import layout, tables

log = logging.getLogger("polyprof")

__all__ = ["load", "sniff", "read"]


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite file with rocpd's event tables."""
    return sqlite_db.sniff(head, path, layout.is_rocpd, compressed=True)


def read(conn: sqlite3.Connection, path: Path) -> Trace:
    tabs = sqlite_db.schema(conn)
    runs = layout.runs(tabs)
    if not runs:
        from ..nsys import not_an_export  # the shared message, only for a file that is no database of either

        raise TraceFormatError(path, not_an_export(tabs))
    parts: list[Part] = []
    processes: dict[int, rocm_trace.Process] = {}
    agents: dict[tuple[int, int], rocm_trace.Agent] = {}
    queue_names: dict[tuple[int, int, int], str] = {}
    versions, unread = [], []
    notes: list[str] = []  # warnings: rows left out, or named by their ids (tables.Info.notes)
    for i, run in enumerate(runs):
        info = tables.Info(conn, run, i)
        for read_part in (tables.kernels, tables.copies, tables.regions):
            p = read_part(conn, info)
            if p is not None:
                parts.append(p)
        notes += info.notes
        processes.update(info.processes)
        agents.update(info.agents)
        queue_names.update(info.queue_names)
        if run.has("rocpd_metadata", "tag", "value"):
            meta = dict(sqlite_db.rows(conn, f"SELECT tag, value FROM {sqlite_db.quote(run.t('rocpd_metadata'))}"))
            versions.append(str(meta.get("schema_version", "")))
        unread.extend(run.unread())
    if unread:
        log.info("%s: %d tables not read (%s)", path, len(unread), ", ".join(sorted(unread)[:12]))
    md = {"clock": "rocprofiler-sdk timestamps (ns)",
          "rocpd": {"runs": len(runs), "schema_versions": versions,
                    "layout": "4.x (tracks)" if runs[0].tracked else "3.x", "tables_not_read": sorted(unread)}}
    if notes:
        md["warnings"] = notes
        for note in notes:
            log.warning("%s: %s", path, note)
    return rocm_trace.build(parts, processes, agents, queue_names, md, path.name)


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read a rocpd database."""
    return sqlite_db.read_file(path, read)
