"""Where an Nsight Systems export's times sit on the wall clock: its wall anchor.

``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is the session's start on the wall clock
(UTC, ns since the epoch). The export's times count from that start (time 0), so the
anchor pairs 0 with it. Newer exports also give the start on the clock the times were
taken on (``systemClockNs``); an export whose times were left on that clock rather than
counted from the session start pairs ``systemClockNs`` with ``utcEpochNs`` instead. Which
one a file holds is read from its times: counted from the session start, the first event
is far below ``systemClockNs`` (the time since the machine booted), on the system clock it
is at or after it. Ranks without collectives are placed by these anchors
(``ranks/align.py``); an export without the table has no anchor.
"""

from __future__ import annotations

import sqlite3

from .. import sqlite_db
from .schema import Export

TABLE = "TARGET_INFO_SESSION_START_TIME"
#: events recorded this long before the session start still count as on the system
#: clock (a process's first records may precede the session's start by a little)
EARLY_NS = 1_000_000_000


def session_anchor(conn: sqlite3.Connection, ex: Export, first_ns: int | None) -> dict[str, int] | None:
    """The export's wall anchor (``mono_ns``, ``wall_ns``, ``uncertainty_ns``: a time of
    the export and the wall-clock time of the same instant), or None where it records no
    session start. ``first_ns``: the export's earliest event time (None: no events)."""
    if not ex.has(TABLE, "utcEpochNs"):
        return None
    cols = ["utcEpochNs"] + (["systemClockNs"] if ex.has(TABLE, "systemClockNs") else [])
    got = sqlite_db.rows(conn, f"SELECT {', '.join(cols)} FROM {TABLE} LIMIT 1")
    if not got or not isinstance(got[0][0], int):
        return None
    wall, system = int(got[0][0]), got[0][1] if len(cols) > 1 else None
    if isinstance(system, int) and system > EARLY_NS and first_ns is not None and first_ns >= system - EARLY_NS:
        return {"mono_ns": system, "wall_ns": wall, "uncertainty_ns": 0}
    return {"mono_ns": 0, "wall_ns": wall, "uncertainty_ns": 0}
