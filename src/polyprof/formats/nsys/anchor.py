"""Where an Nsight Systems export's times sit on the wall clock: its wall anchor.

``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is the session's start on the wall clock
(UTC, ns since the epoch). An export's times count from that start (time 0) unless
``nsys export`` was told otherwise, which newer exports record in their metadata
(``META_DATA_EXPORT``): ``EXPORT_PARAM_TIME_NORMALIZE`` true (``--ts-normalize``: every
time moved to UTC, ns since the epoch) and ``EXPORT_PARAM_TIME_SHIFT`` (``--ts-shift``:
every time moved by that many ns, after the normalisation). The anchor pairs the
session start's time in the export with ``utcEpochNs``. Only what the export states
is used: ``systemClockNs`` (the session start on the system clock, in newer exports)
does not say the times are on that clock, and a first event far into the session (a
capture range, ``--delay``) looks like one on the system clock, so the times' size is no
guide. Ranks without collectives are placed by these anchors (``ranks/align.py``); an
export without the table has no anchor.
"""

from __future__ import annotations

import sqlite3

from .. import sqlite_db
from .schema import Export

TABLE = "TARGET_INFO_SESSION_START_TIME"
#: the export's metadata (``Export.version``) naming how its times were written
NORMALIZE = "EXPORT_PARAM_TIME_NORMALIZE"
SHIFT = "EXPORT_PARAM_TIME_SHIFT"


def time_base(ex: Export) -> tuple[bool, int]:
    """(times moved to UTC, shift in ns) as the export's metadata states them; (False, 0),
    nsys's default (ns since the session start), where it states neither."""
    normalized = ex.version.get(NORMALIZE, "").strip().lower() == "true"
    try:
        shift = int(ex.version.get(SHIFT, "0").strip() or 0)
    except ValueError:
        shift = 0
    return normalized, shift


def clock_name(ex: Export) -> str:
    """The trace's ``clock`` metadata for this export's times."""
    normalized, shift = time_base(ex)
    name = "nsys UTC time (ns since the epoch)" if normalized else "nsys session time (ns since the session start)"
    return name + (f", shifted by {shift} ns" if shift else "")


def session_anchor(conn: sqlite3.Connection, ex: Export) -> dict[str, int] | None:
    """The export's wall anchor (``mono_ns``, ``wall_ns``, ``uncertainty_ns``: a time of
    the export and the wall-clock time of the same instant), or None where it records no
    session start."""
    if not ex.has(TABLE, "utcEpochNs"):
        return None
    got = sqlite_db.rows(conn, f"SELECT utcEpochNs FROM {TABLE} LIMIT 1")
    if not got or not isinstance(got[0][0], int):
        return None
    wall = int(got[0][0])
    normalized, shift = time_base(ex)
    return {"mono_ns": (wall if normalized else 0) + shift, "wall_ns": wall, "uncertainty_ns": 0}
