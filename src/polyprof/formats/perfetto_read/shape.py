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


def looks_like_packets(body: bytes, total: int | None) -> bool:
    """True if ``body`` (the first bytes of a file of ``total`` bytes, None if unknown)
    starts as a Perfetto trace: ``Trace.packet`` fields only, the first packet's fields
    of TracePacket's wire types, and one of them numbered 8 or more (every packet a
    tracing service or SDK writes carries a sequence id, field 10, or a timestamp, 8).
    XSpace, the other protobuf polyprof reads, never has such a field in its first
    plane (XPlane's fields are 1-7)."""
    if len(body) < 4 or body[0] != _PACKET_TAG:
        return False
    length, start = varint(body, 1)
    if length is None or length < 2 or (total is not None and start + length > total):
        return False
    end = min(start + length, len(body))
    pos, high = start, False
    while pos < end:
        key, pos = varint(body, pos)
        if key is None:
            break
        field, wire = key >> 3, key & 7
        if field == 0 or wire in (3, 4, 6, 7):
            return False
        if (field in _VARINT_FIELDS and wire != 0) or (field in _LEN_FIELDS and wire != 2):
            return False
        high = high or field >= 8
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
            pos += size
    if pos > start + length:
        return False
    # the packets after the first (as far as the head goes) start with the packet tag
    pos = start + length
    while pos < len(body):
        if body[pos] != _PACKET_TAG:
            return False
        size, nxt = varint(body, pos + 1)
        if size is None:
            break
        pos = nxt + size
    return high
