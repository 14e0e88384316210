"""The events of an XSpace as columns: the compiled walk of the wire format
(``_wire.c``) or, without it, the same columns from protobuf's message objects.

Both give an :class:`EventColumns` over every event of every line, in plane / line /
event order (the order of the protobuf message), so the reader never touches one
Python object per event when the extension is built. ``IMPLEMENTATION`` says which is
in use (``POLYPROF_PURE_PYTHON=1`` forces the Python one, as it does for sections);
tests/test_xspace_decode.py checks the two agree.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger("polyprof")

if os.environ.get("POLYPROF_PURE_PYTHON", "") in ("", "0"):
    try:
        from . import _wire  # type: ignore[attr-defined]
    except ImportError:  # built without a C compiler: the message walk below
        _wire = None
else:  # the pure-Python reference, as for sections (collect/recorder.py)
    _wire = None

IMPLEMENTATION = "c" if _wire is not None else "python"

#: XStat value oneof member -> kind code (0: no value)
KIND_OF = {"double_value": 1, "uint64_value": 2, "int64_value": 3, "str_value": 4, "bytes_value": 5,
           "ref_value": 6}
_U64 = 1 << 64


@dataclass
class EventColumns:
    """Every event and event stat of an XSpace, flat. Counts give the nesting: plane ``i``
    has ``plane_lines[i]`` lines, line ``j`` has ``line_events[j]`` events, event ``k``
    has ``ev_stats[k]`` stats, each run in order."""

    plane_lines: np.ndarray  # int64
    line_events: np.ndarray  # int64
    ev_mid: np.ndarray  # int64 XEvent.metadata_id
    ev_off: np.ndarray  # int64 offset_ps (0 where data is num_occurrences)
    ev_dur: np.ndarray  # int64 duration_ps
    ev_nocc: np.ndarray  # int64 num_occurrences (0 unless ev_isnocc)
    ev_isnocc: np.ndarray  # bool: XEvent.data is num_occurrences
    ev_stats: np.ndarray  # int64 stats per event
    st_mid: np.ndarray  # int64 XStat.metadata_id
    st_kind: np.ndarray  # uint8: 0 unset, 1 double, 2 uint64, 3 int64, 4 str, 5 bytes, 6 ref
    st_int: np.ndarray  # int64: uint64 (as its bits), int64 or ref value
    st_dbl: np.ndarray  # float64: double value
    st_obj: np.ndarray  # object: the str / bytes value, None for other kinds

    @property
    def n_events(self) -> int:
        return len(self.ev_mid)


def columns(space: Any, data: bytes | None) -> EventColumns:
    """The columns of ``space`` (parsed from ``data`` when given, else serialized here)."""
    if _wire is not None:
        raw = data if data is not None else space.SerializeToString()
        try:
            cols = columns_from_bytes(raw)
        except (ValueError, UnicodeDecodeError) as e:  # protobuf accepted what the walk did not
            log.debug("xspace: compiled decode failed (%s); reading through protobuf", e)
        else:
            if _same_shape(cols, space):
                return cols
            log.warning("xspace: compiled decode disagrees with protobuf on the file's layout; "
                        "reading through protobuf")
    return columns_from_messages(space)


def _same_shape(cols: EventColumns, space: Any) -> bool:
    if cols.plane_lines.tolist() != [len(p.lines) for p in space.planes]:
        return False
    return cols.line_events.tolist() == [len(line.events) for p in space.planes for line in p.lines]


def columns_from_bytes(data: bytes) -> EventColumns:
    """The compiled walk (``_wire.columns``); ValueError on malformed wire data."""
    assert _wire is not None
    (plane_lines, line_events, mid, off, dur, nocc, isnocc, nstats, smid, skind, sint, sdbl,
     objs) = _wire.columns(data)
    i64 = lambda b: np.frombuffer(b, np.int64)
    kind = np.frombuffer(skind, np.uint8)
    obj = np.full(len(kind), None, object)
    if objs:
        obj[(kind == 4) | (kind == 5)] = objs
    return EventColumns(i64(plane_lines), i64(line_events), i64(mid), i64(off), i64(dur), i64(nocc),
                        np.frombuffer(isnocc, np.uint8).astype(bool), i64(nstats), i64(smid), kind,
                        i64(sint), np.frombuffer(sdbl, np.float64), obj)


def columns_from_messages(space: Any) -> EventColumns:
    """The same columns from protobuf's objects: the pure-Python reference, one Python
    object access per event and stat."""
    plane_lines, line_events = [], []
    mid, off, dur, nocc, isnocc, nstats = [], [], [], [], [], []
    smid, skind, sint, sdbl, sobj = [], [], [], [], []
    for plane in space.planes:
        plane_lines.append(len(plane.lines))
        for line in plane.lines:
            line_events.append(len(line.events))
            for e in line.events:
                mid.append(e.metadata_id)
                n = e.WhichOneof("data") == "num_occurrences"
                isnocc.append(n)
                off.append(0 if n else e.offset_ps)
                nocc.append(e.num_occurrences if n else 0)
                dur.append(e.duration_ps)
                nstats.append(len(e.stats))
                for st in e.stats:
                    which = st.WhichOneof("value")
                    k = KIND_OF.get(which or "", 0)
                    smid.append(st.metadata_id)
                    skind.append(k)
                    v = getattr(st, which) if which else 0
                    sint.append(v - _U64 if k in (2, 6) and v >= 1 << 63 else v if k in (2, 3, 6) else 0)
                    sdbl.append(v if k == 1 else 0.0)
                    sobj.append(v if k in (4, 5) else None)
    i64 = lambda v: np.asarray(v, np.int64)
    obj = np.empty(len(sobj), object)
    obj[:] = sobj
    return EventColumns(i64(plane_lines), i64(line_events), i64(mid), i64(off), i64(dur), i64(nocc),
                        np.asarray(isnocc, bool), i64(nstats), i64(smid), np.asarray(skind, np.uint8),
                        i64(sint), np.asarray(sdbl, np.float64), obj)
