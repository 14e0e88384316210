"""An XSpace as columns: the compiled walk of the wire format (``_wire.c``) or, without
it, the same columns from protobuf's message objects.

Both give an :class:`EventColumns`: every event of every line, in plane / line / event
order (the order of the protobuf message), the event metadata, and the small rest as
Python objects, so the reader never touches one Python object per event, nor imports
protobuf, when the extension is built. ``IMPLEMENTATION`` says which is
in use (``POLYPROF_PURE_PYTHON=1`` forces the Python one, as it does for sections);
tests/test_xspace_decode.py checks the two agree.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from ...errors import TraceFormatError
from ...lowlevel.compiled import optional

if TYPE_CHECKING:
    from ..xplane_pb2 import XSpace, XStat

log = logging.getLogger("polyprof")

_wire = optional(__package__, "_wire")  # the message walk below otherwise (lowlevel/compiled.py)

IMPLEMENTATION = "c" if _wire is not None else "python"

#: XStat value oneof member -> kind code (0: no value)
KIND_OF = {"double_value": 1, "uint64_value": 2, "int64_value": 3, "str_value": 4, "bytes_value": 5,
           "ref_value": 6}
_U64 = 1 << 64


class EventColumns:
    """Every event and event stat of an XSpace, flat. Counts give the nesting: plane ``i``
    has ``plane_lines[i]`` lines, line ``j`` has ``line_events[j]`` events, event ``k``
    has ``ev_stats[k]`` stats, each run in order."""

    # a plain class, not a dataclass: making one is slower at import, in every cold load
    __slots__ = ("plane_lines", "line_events", "ev_mid", "ev_off", "ev_dur", "ev_nocc", "ev_isnocc", "ev_stats",
                 "st_mid", "st_kind", "st_int", "st_dbl", "st_text", "plane_mds", "md_key", "md_name", "md_display",
                 "md_meta", "md_stats", "md_children", "md_child", "ms_mid", "ms_kind", "ms_int", "ms_dbl", "ms_obj",
                 "planes", "lines", "texts")
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
    # st_int holds every stat's value (one column, 8 bytes a stat): a uint64 (as its bits), int64 or
    # ref value, a double's bits, a str / bytes value's place in st_text
    st_int: np.ndarray  # int64
    st_dbl: np.ndarray  # float64: st_int's memory as doubles (the double value where st_kind is 1)
    st_text: np.ndarray  # object: the distinct str / bytes values, first seen first (dictionary-coded:
    # a value a million stats hold is one object; :func:`stat_objects` gives them per stat)
    # XPlane.event_metadata, entry by entry (a key given twice: the last entry counts)
    plane_mds: np.ndarray  # int64 entries per plane
    md_key: np.ndarray  # int64 map key (the metadata id events refer to)
    md_name: np.ndarray  # object str
    md_display: np.ndarray  # object str
    md_meta: np.ndarray  # object bytes (XEventMetadata.metadata)
    md_stats: np.ndarray  # int64 stats per entry
    md_children: np.ndarray  # int64 child ids per entry
    md_child: np.ndarray  # int64
    ms_mid: np.ndarray  # the metadata stats, as st_*
    ms_kind: np.ndarray
    ms_int: np.ndarray
    ms_dbl: np.ndarray
    ms_obj: np.ndarray
    # the small rest, as Python objects
    planes: list[tuple[int, str, dict[int, str], list[tuple[int, int, Any]]]]  # id, name, stat names, stats
    lines: list[tuple[int, int, str, str, int, int]]  # id, display_id, name, display_name, timestamp_ns, duration_ps
    texts: tuple[list[str], list[str], list[str]]  # XSpace errors, warnings, hostnames

    def __init__(self, *values: object):
        if len(values) != len(self.__slots__):
            raise TypeError(f"EventColumns takes {len(self.__slots__)} columns, not {len(values)}")
        for name, value in zip(self.__slots__, values):
            setattr(self, name, value)

    @property
    def n_events(self) -> int:
        return len(self.ev_mid)

    def drop_events(self) -> None:
        """Free the per-event columns and the stats' metadata ids once every event is read
        (the reader then needs only the stats' values: ``deferred.StatValues``)."""
        empty = np.zeros(0, np.int64)
        self.ev_mid = self.ev_off = self.ev_dur = self.ev_nocc = self.ev_stats = self.st_mid = empty
        self.ev_isnocc = np.zeros(0, bool)


def columns(data: bytes, source: str) -> EventColumns:
    """The columns of the serialized XSpace ``data``: the compiled walk, or protobuf's
    reading where the walk is missing or refuses the bytes (TraceFormatError, naming
    ``source``, if protobuf refuses them too)."""
    if _wire is not None:
        try:
            return columns_from_bytes(data)
        except (ValueError, UnicodeDecodeError) as e:
            log.debug("xspace %s: compiled decode refused the bytes (%s); reading through protobuf", source, e)
        except OverflowError as e:  # too many planes, lines or metadata for its size: not read whole
            raise TraceFormatError(source, f"not an XSpace profile: it {e}") from None
    from .wire import parse  # protobuf's messages only when the compiled walk refuses the bytes

    return columns_from_messages(parse(data, source))


def columns_of_space(space: XSpace) -> EventColumns:
    """The columns of a parsed XSpace message."""
    if _wire is not None:
        try:
            return columns_from_bytes(space.SerializeToString())
        except (ValueError, UnicodeDecodeError, OverflowError) as e:  # (parsed: its memory is spent)
            log.debug("xspace: compiled decode refused a parsed message (%s)", e)
    return columns_from_messages(space)


def columns_from_bytes(data: bytes) -> EventColumns:
    """The compiled walk (``_wire.columns``); ValueError on malformed wire data."""
    assert _wire is not None
    (plane_lines, line_events, mid, off, dur, nocc, isnocc, nstats, smid, skind, sint, sdbl,
     plane_mds, md_key, md_stats, md_children, md_child, msmid, mskind, msint, msdbl,
     objs, mdtext, mdobjs, planes, lines, texts) = _wire.columns(data)
    i64 = lambda b: np.frombuffer(b, np.int64)
    kind, mkind = np.frombuffer(skind, np.uint8), np.frombuffer(mskind, np.uint8)
    text = _objects(mdtext)
    is_nocc = np.frombuffer(isnocc, np.uint8).astype(bool)
    # num_occurrences, where no event has one, is one value repeated (no memory)
    ints = i64(sint)
    return EventColumns(i64(plane_lines), i64(line_events), i64(mid), i64(off), i64(dur),
                        i64(nocc) if is_nocc.any() else _repeated(0, len(is_nocc), np.int64),
                        is_nocc, i64(nstats), i64(smid), kind,
                        ints, ints.view(np.float64), _objects(objs),
                        i64(plane_mds), i64(md_key), text[0::3], text[1::3], text[2::3], i64(md_stats),
                        i64(md_children), i64(md_child), i64(msmid), mkind, i64(msint),
                        np.frombuffer(msdbl, np.float64), _values(mkind, mdobjs), planes, lines, texts)


def _objects(values: Sequence[object]) -> np.ndarray:
    out = np.empty(len(values), object)
    out[:] = values
    return out


def stat_objects(kind: np.ndarray, ints: np.ndarray, texts: np.ndarray) -> np.ndarray:
    """Stats' str/bytes values (``kind``, ``ints`` and ``texts`` as ``EventColumns``'
    st_kind, st_int, st_text) as an object column: each text stat's value, None elsewhere."""
    out = np.full(len(kind), None, object)
    t = np.flatnonzero((kind == 4) | (kind == 5))
    if len(t):
        out[t] = texts[ints[t]]
    return out


def _values(kind: np.ndarray, objs: list[Any]) -> np.ndarray:
    """The object column of stats: their str/bytes values in place, None elsewhere."""
    if not objs:
        return _repeated(None, len(kind), object)
    out = np.full(len(kind), None, object)
    out[(kind == 4) | (kind == 5)] = objs
    return out


def _repeated(value: object, n: int, dtype: type) -> np.ndarray:
    """A read-only column of ``n`` times ``value`` that holds one value (stride 0): what
    indexing it gives is an ordinary array."""
    one: np.ndarray = np.empty(1, dtype)
    one[0] = value
    return np.broadcast_to(one, (n,))


def columns_from_messages(space: XSpace) -> EventColumns:
    """The same columns from protobuf's objects: the pure-Python reference, one Python
    object access per event and stat."""
    plane_lines, line_events = [], []
    ev: tuple[list[Any], ...] = ([], [], [], [], [], [])  # mid, off, dur, nocc, isnocc, nstats
    st: tuple[list[Any], ...] = ([], [], [], [], [])  # mid, kind, int, dbl, distinct text values
    seen: dict[tuple[int, Any], int] = {}  # (kind, text value) -> its place in st[4]
    plane_mds = []
    md: tuple[list[Any], ...] = ([], [], [], [], [], [], [])  # key, name, display, meta, nstats, nchild, child
    ms: tuple[list[Any], ...] = ([], [], [], [], [])
    planes: list[tuple[int, str, dict[int, str], list[tuple[int, int, Any]]]] = []
    lines: list[tuple[int, int, str, str, int, int]] = []
    for plane in space.planes:
        stats = []
        for st_msg in plane.stats:
            which = st_msg.WhichOneof("value")
            stats.append((st_msg.metadata_id, KIND_OF.get(which or "", 0), getattr(st_msg, which) if which else None))
        planes.append((plane.id, plane.name, {int(k): m.name for k, m in plane.stat_metadata.items()}, stats))
        plane_lines.append(len(plane.lines))
        for line in plane.lines:
            lines.append((line.id, line.display_id, line.name, line.display_name, line.timestamp_ns,
                          line.duration_ps))
            line_events.append(len(line.events))
            for e in line.events:
                n = e.WhichOneof("data") == "num_occurrences"
                for col, v in zip(ev, (e.metadata_id, 0 if n else e.offset_ps, e.duration_ps,
                                       e.num_occurrences if n else 0, n, len(e.stats))):
                    col.append(v)
                _stats(e.stats, st, seen)
        plane_mds.append(len(plane.event_metadata))
        for key, m in plane.event_metadata.items():
            for col, v in zip(md, (key, m.name, m.display_name, bytes(m.metadata), len(m.stats), len(m.child_id))):
                col.append(v)
            md[6].extend(m.child_id)
            _stats(m.stats, ms)
    i64 = lambda v: np.asarray(v, np.int64)
    kind, ints = np.asarray(st[1], np.uint8), i64(st[2])
    dbl = kind == 1  # the doubles' bits into the value column, as the compiled walk puts them
    ints[dbl] = np.asarray(st[3], np.float64)[dbl].view(np.int64)
    return EventColumns(i64(plane_lines), i64(line_events), i64(ev[0]), i64(ev[1]), i64(ev[2]), i64(ev[3]),
                        np.asarray(ev[4], bool), i64(ev[5]), i64(st[0]), kind, ints, ints.view(np.float64),
                        _objects(st[4]),
                        i64(plane_mds), i64(md[0]), _objects(md[1]), _objects(md[2]), _objects(md[3]), i64(md[4]),
                        i64(md[5]), i64(md[6]), i64(ms[0]), np.asarray(ms[1], np.uint8), i64(ms[2]),
                        np.asarray(ms[3], np.float64), _objects(ms[4]), planes, lines,
                        (list(space.errors), list(space.warnings), list(space.hostnames)))


def _stats(stats: Iterable[XStat], out: tuple[list[Any], ...], seen: dict[tuple[int, Any], int] | None = None) -> None:
    """XStat messages appended to the (mid, kind, int, double, object) lists; with
    ``seen`` (event stats), text values as the compiled walk gives them: each distinct
    value once in the object list, its place there in the int list (keyed by kind and
    value: a str and a bytes value never share)."""
    smid, skind, sint, sdbl, sobj = out
    for st in stats:
        which = st.WhichOneof("value")
        k = KIND_OF.get(which or "", 0)
        smid.append(st.metadata_id)
        skind.append(k)
        v = getattr(st, which) if which else 0
        if seen is not None and k in (4, 5):
            at = seen.get((k, v))
            if at is None:
                at = seen[(k, v)] = len(sobj)
                sobj.append(v)
            sint.append(at)
        else:
            sint.append(v - _U64 if k in (2, 6) and v >= 1 << 63 else v if k in (2, 3, 6) else 0)
            if seen is None:
                sobj.append(v if k in (4, 5) else None)
        sdbl.append(v if k == 1 else 0.0)


def spans(starts: np.ndarray, counts: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + counts[i]`` of every ``i``, concatenated, as
    ``dtype`` (int32 only where they fit: a caller that keeps them)."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype)
    first = np.asarray(starts, np.int64) - np.cumsum(counts) + counts
    if dtype is not np.int64 and int(first.max()) + total > np.iinfo(dtype).max:
        dtype = np.int64
    out = np.repeat(first.astype(dtype, copy=False), counts)
    out += np.arange(total, dtype=dtype)
    return out
