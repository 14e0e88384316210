"""Whether bytes start a Perfetto trace, by their protobuf field shapes (no imports:
sniffing runs for every file ``polyprof.load`` opens)."""

from __future__ import annotations

_PACKET_TAG = 0x0A  # Trace.packet: field 1, length-delimited

# field numbers of TracePacket whose wire type is a varint (the rest that matter are
# length-delimited); used only to recognise the format
_VARINT_FIELDS = frozenset((3, 8, 10, 13, 41, 42, 58, 79, 87))
_LEN_FIELDS = frozenset((1, 2, 5, 6, 11, 12, 33, 36, 43, 44, 52, 53, 59, 60, 62, 63, 71))


def varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int | None, int]:
    """(value, next position) of the varint at ``pos``; value None if it runs past ``data``."""
    shift = value = 0
    n = len(data)
    while pos < n and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None, pos


def _only_varints(body: bytes | bytearray | memoryview, pos: int, end: int, most: int) -> bool:
    """Whether ``body[pos:end]`` is a message of varint fields numbered 1..``most`` only."""
    while pos < end:
        key, pos = varint(body, pos)
        if key is None or key & 7 or not 1 <= key >> 3 <= most:
            return False
        _, pos = varint(body, pos)
    return pos == end


def _clock_snapshot(body: bytes | bytearray | memoryview, pos: int, end: int) -> bool:
    """Whether ``body[pos:end]`` (``end`` may run past the head) has a ``ClockSnapshot``'s
    shape: ``clocks`` (field 1, length-delimited, each ``Clock`` of varint fields 1-4:
    id, timestamp, incremental, unit) and ``primary_trace_clock`` (2, a varint), one
    clock at least. TracePacket's field 6 is the snapshot; XPlane's is ``stats``, and an
    XStat's field 1 (its metadata id) is a varint, never length-delimited, so a plane's
    stat never has this shape. A trace may hold nothing else in its first packet (or at
    all: Perfetto's own tests have such traces)."""
    stop, clocks = min(end, len(body)), 0
    while pos < stop:
        key, pos = varint(body, pos)
        if key is None:
            break
        if key == 0x10:  # primary_trace_clock
            _, pos = varint(body, pos)
            continue
        if key != 0x0A:
            return False
        size, pos = varint(body, pos)
        if size is None:
            break
        if pos + size <= len(body):  # a clock the head holds whole
            if not _only_varints(body, pos, pos + size, 4):
                return False
            clocks += 1
        pos += size
    return clocks > 0


def _packet_fields(body: bytes | bytearray | memoryview, start: int, end: int) -> bool | None:
    """Walk one packet's fields in ``body[start:end]`` (``end`` may run past the head):
    None if a field is not of TracePacket's wire type, else whether one of them cannot
    be an XPlane's (XPlane's fields are 1-7, its field 1 a varint and 3 length-delimited):
    a field numbered 8 or more, field 1 length-delimited (``ftrace_events``), field 3 a
    varint (``trusted_uid``) or field 6 a clock snapshot (:func:`_clock_snapshot`)."""
    pos, distinct = start, False
    stop = min(end, len(body))
    while pos < stop:
        key, pos = varint(body, pos)
        if key is None:
            break
        field, wire = key >> 3, key & 7
        if field == 0 or wire in (3, 4, 6, 7):
            return None
        if (field in _VARINT_FIELDS and wire != 0) or (field in _LEN_FIELDS and wire != 2):
            return None
        distinct = distinct or field >= 8 or (field == 1 and wire == 2) or (field == 3 and wire == 0)
        if wire == 0:
            value, pos = varint(body, pos)
            if value is None:
                break
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            size, pos = varint(body, pos)
            if size is None:
                break
            distinct = distinct or (field == 6 and _clock_snapshot(body, pos, pos + size))
            pos += size
    if pos > end:
        return None
    return distinct


def looks_like_packets(body: bytes, total: int | None) -> bool:
    """True if ``body`` (the first bytes of a file of ``total`` bytes, None if unknown)
    starts as a Perfetto trace: ``Trace.packet`` fields only, each packet's fields (as
    far as the head goes) of TracePacket's wire types, and one of them not an XPlane's
    (:func:`_packet_fields`): every packet a tracing service or SDK writes carries a
    sequence id (field 10) or a timestamp (8); hand-written traces often start with a
    packet of ftrace events (1) or a bare clock snapshot (6) instead. XSpace, the other
    protobuf polyprof reads, never has such a field in its planes. Empty packets carry
    nothing and are passed over (Perfetto's own test traces start with one); the first
    packet with fields is held to the rules above."""
    if len(body) < 4 or body[0] != _PACKET_TAG:
        return False
    pos, first, distinct = 0, True, False
    while pos < len(body):
        if body[pos] != _PACKET_TAG:
            return False
        length, start = varint(body, pos + 1)
        if length is None:
            break
        if length == 0:
            pos = start
            continue
        if first and (length < 2 or (total is not None and start + length > total)):
            return False
        fields = _packet_fields(body, start, start + length)
        if fields is None:
            return False
        distinct = distinct or fields
        pos, first = start + length, False
    return distinct



#: the most one packet may be (``packets.MAX_PACKET``; here for the sniffs, which import nothing)
_MAX_PACKET = 1 << 30


def damaged_packets(body: bytes, total: int | None, named: bool) -> bool:
    """True if ``body`` (the first bytes of a file of ``total`` bytes, None if unknown)
    starts as a Perfetto trace that :func:`looks_like_packets` does not take, for its
    reader to say where and what is wrong: a TracePacket's tag, then a length and as
    many of the packet's fields as the head holds of TracePacket's wire types, and that
    length running past the file (or past any packet's limit: a trace cut or damaged
    inside its first packet). A file ``named`` as Perfetto's tools name their traces
    needs only the first packet's start (its packets damaged further on), or a length
    cut short by the file's end; its empty packets first (Android's traces start with one)
    are passed over. Text, a zip, ... so named are not taken (nor replaced
    as an output: ``writers``' check of what is at the output is :func:`detect`)."""
    pos = 0
    while True:
        if len(body) < pos + 2 or body[pos] != _PACKET_TAG:
            return False
        length, start = varint(body, pos + 1)
        if length is None:
            return named and start >= len(body)  # the head (the file) ends inside the length
        if length or not named:
            break
        pos = start  # an empty packet (a real Android trace starts with one): the next one's start
    if length < 2:
        return False
    if not named and length <= _MAX_PACKET and (total is None or start + length <= total):
        return False
    return _packet_fields(body, start, start + length) is not None
