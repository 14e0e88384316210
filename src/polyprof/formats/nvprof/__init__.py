"""nvprof's output files (``nvprof -o prof.nvvp`` / ``.nvprof``: CUDA 11 and earlier) as a Trace.

An nvprof file is an SQLite database of CUPTI's activity records, a table per kind
(``CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL``, ``_MEMCPY``, ``_MEMSET``, ``_RUNTIME``,
``_DRIVER``...) with names in ``StringTable``. Read: kernels, copies, memsets, runtime
and driver calls (named by their callback ids: ``apis.py``; linked to the device work
they launched by correlation id), NVTX ranges and marks (``MARKER``) and the devices'
properties; the other tables are listed in the trace's metadata as not read.
``tables.py`` reads each table (Nsight's copy and fill readers where the tables match),
``build.py`` makes the Trace as Nsight's reader lays it out.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Callable

from ...errors import TraceFormatError
from ...trace import metadata_keys as mkeys
from ...trace.core import Trace
from .. import sqlite_db
from ..parts import Part
from ..safety import guarded
from . import tables as T
from .build import build

log = logging.getLogger("polyprof")

__all__ = ["load", "sniff", "read"]


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite file with nvprof's tables."""
    return sqlite_db.sniff(head, path, T.is_nvprof, compressed=True)


def read(conn: sqlite3.Connection, path: Path) -> Trace:
    tabs = sqlite_db.schema(conn)
    if not T.is_nvprof(tabs):
        raise TraceFormatError(path, "an SQLite database, but not an nvprof file (no StringTable beside "
                                     "CUPTI_ACTIVITY_KIND_ tables)")
    strings = T.Strings(conn, tabs)
    ex = T.export(tabs)
    notes: list[str] = []
    readers: list[Callable[[], Part | None]] = [
        lambda: T.api_calls(conn, tabs, T.RUNTIME), lambda: T.api_calls(conn, tabs, T.DRIVER),
        lambda: T.kernels(conn, tabs, strings, T.CONCURRENT_KERNEL), lambda: T.kernels(conn, tabs, strings, T.KERNEL),
        lambda: T.copies(conn, ex, notes), lambda: T.fills(conn, ex, notes),
        lambda: _markers(conn, tabs, strings, notes),
        lambda: strings.note_missing(notes)]  # (after every reader that names rows)
    unread = sorted(t for t in tabs.columns if t not in T.READ)
    got = sqlite_db.rows(conn, "SELECT version FROM Version LIMIT 1") if tabs.has("Version", "version") else []
    version = got[0][0] if got and isinstance(got[0][0], int) else None
    trace = build(conn, tabs, readers, T.devices(conn, tabs, strings), path, unread, version, notes)
    for n in trace.metadata.get(mkeys.WARNINGS, []):
        log.warning("%s: %s", path, n)
    return trace


def _markers(conn: sqlite3.Connection, tabs: sqlite_db.Schema, strings: T.Strings, notes: list[str]) -> Part | None:
    part, unended = T.markers(conn, tabs, strings)
    if unended:
        notes.append(f"{unended} NVTX range(s) left out: started but never ended (the program ended or the "
                     "profile stopped first)")
    return part


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read an nvprof output file."""
    return sqlite_db.read_file(path, read)
