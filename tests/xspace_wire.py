"""An independent decoder of .xplane.pb files, straight from the protobuf wire format
(no generated code), so the XSpace tests do not check polyprof's reader against itself.

Field numbers are XSpace's (DESIGN.md §7).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def fields(buf: bytes):
    """(field number, wire type, raw value) for each field of one message."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass
class Stat:
    metadata_id: int
    kind: str  # double uint64 int64 str bytes ref
    value: Any


def _stat(buf: bytes) -> Stat:
    mid, kind, value = 0, "none", None
    for num, _, v in fields(buf):
        if num == 1:
            mid = _signed(v)
        elif num == 2:
            kind, value = "double", struct.unpack("<d", v)[0]
        elif num == 3:
            kind, value = "uint64", v
        elif num == 4:
            kind, value = "int64", _signed(v)
        elif num == 5:
            kind, value = "str", v.decode()
        elif num == 6:
            kind, value = "bytes", bytes(v)
        elif num == 7:
            kind, value = "ref", v
    return Stat(mid, kind, value)


@dataclass
class Event:
    metadata_id: int = 0
    offset_ps: int = 0
    num_occurrences: int | None = None
    duration_ps: int = 0
    stats: list[Stat] = field(default_factory=list)


@dataclass
class Line:
    id: int = 0
    name: str = ""
    display_name: str = ""
    timestamp_ns: int = 0
    events: list[Event] = field(default_factory=list)


@dataclass
class Metadata:
    name: str = ""
    display_name: str = ""
    stats: list[Stat] = field(default_factory=list)


@dataclass
class Plane:
    id: int = 0
    name: str = ""
    lines: list[Line] = field(default_factory=list)
    event_metadata: dict[int, Metadata] = field(default_factory=dict)
    stat_names: dict[int, str] = field(default_factory=dict)
    stats: list[Stat] = field(default_factory=list)

    def value(self, st: Stat) -> Any:
        """A stat's value as polyprof should read it (ref -> referenced name)."""
        return self.stat_names.get(st.value, "") if st.kind == "ref" else st.value


def _entry(buf: bytes) -> tuple[int, bytes]:
    key, val = 0, b""
    for num, _, v in fields(buf):
        if num == 1:
            key = _signed(v)
        elif num == 2:
            val = v
    return key, val


def decode(data: bytes) -> list[Plane]:
    planes = []
    for num, _, pbuf in fields(data):
        if num != 1:
            continue
        p = Plane()
        for pn, _, v in fields(pbuf):
            if pn == 1:
                p.id = _signed(v)
            elif pn == 2:
                p.name = v.decode()
            elif pn == 3:
                line = Line()
                for ln, _, lv in fields(v):
                    if ln == 1:
                        line.id = _signed(lv)
                    elif ln == 2:
                        line.name = lv.decode()
                    elif ln == 11:
                        line.display_name = lv.decode()
                    elif ln == 3:
                        line.timestamp_ns = _signed(lv)
                    elif ln == 4:
                        ev = Event()
                        for en, _, evv in fields(lv):
                            if en == 1:
                                ev.metadata_id = _signed(evv)
                            elif en == 2:
                                ev.offset_ps = _signed(evv)
                            elif en == 5:
                                ev.num_occurrences = _signed(evv)
                            elif en == 3:
                                ev.duration_ps = _signed(evv)
                            elif en == 4:
                                ev.stats.append(_stat(evv))
                        line.events.append(ev)
                p.lines.append(line)
            elif pn == 4:
                key, mbuf = _entry(v)
                md = Metadata()
                for mn, _, mv in fields(mbuf):
                    if mn == 2:
                        md.name = mv.decode()
                    elif mn == 4:
                        md.display_name = mv.decode()
                    elif mn == 5:
                        md.stats.append(_stat(mv))
                p.event_metadata[key] = md
            elif pn == 5:
                key, sbuf = _entry(v)
                for sn, _, sv in fields(sbuf):
                    if sn == 2:
                        p.stat_names[key] = sv.decode()
            elif pn == 6:
                p.stats.append(_stat(v))
        planes.append(p)
    return planes


def expected_events(planes: list[Plane]) -> list[tuple[str, str, str, int, int, dict[str, Any]]]:
    """(plane, line, name, start_ns, dur_ns, stats) per event, in file order, with
    metadata stats inherited and event stats winning (XProf's reading); ps times go to
    ns with starts rounded down and ends up."""
    out = []
    for p in planes:
        for line in p.lines:
            for ev in line.events:
                md = p.event_metadata.get(ev.metadata_id, Metadata())
                name = md.display_name or md.name
                stats: dict[str, Any] = {}
                for st in md.stats:
                    stats[p.stat_names.get(st.metadata_id, "")] = p.value(st)
                for st in ev.stats:
                    stats[p.stat_names.get(st.metadata_id, "")] = p.value(st)
                begin = line.timestamp_ns * 1000 + ev.offset_ps
                start = begin // 1000
                end = -(-(begin + ev.duration_ps) // 1000) if ev.duration_ps else start
                out.append((p.name, line.name or line.display_name, name, start, end - start, stats))
    return out
