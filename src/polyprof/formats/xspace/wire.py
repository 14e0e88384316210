"""Access to the XSpace bytes: the protobuf classes, parsing with validation, gzip,
the cheap wire-format checks that recognise an XSpace from its first bytes, and a
small decoder of protobuf messages (:func:`fields`) for what is read without protobuf
(the HLO modules an XSpace holds, ``hlo.py``)."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Iterator

from ...errors import TraceFormatError
from ..safety import XZ_MAGIC, Inflation

#: XSpace's fields (planes, errors, warnings, hostnames), all length-delimited: their tags
_XSPACE_TAGS = (0x0A, 0x12, 0x1A, 0x22)
#: XPlane's first field tags (id, name, lines, event_metadata, stat_metadata, stats)
_XPLANE_TAGS = (0x08, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A)


def pb() -> Any:
    """The generated protobuf module (imported on first use: protobuf is heavy)."""
    from .. import xplane_pb2  # protobuf: only on the message path

    return xplane_pb2


def read_file(path: Path) -> bytes:
    """The bytes of an ``.xplane.pb`` file, inflated if gzipped or xz-compressed."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        data = gunzip(data, path)
    elif data[:len(XZ_MAGIC)] == XZ_MAGIC:
        del data
        data = unxz(path)
    return data


def unxz(path: Path) -> bytes:
    """An xz file's streams inflated, within the inflation limits (``formats/inflate.py``'s
    reader of them: corrupt or truncated data is a TraceFormatError naming the file)."""
    from ..inflate import Decompressed  # xz's stream reader: only for an xz file

    return b"".join(Decompressed(path, 1 << 24).blocks())


def gunzip(data: bytes, path: Path) -> bytes:
    """Inflate every gzip member, within the inflation limits (safety.Inflation)."""
    inflation = Inflation(path, len(data))
    out: list[bytes] = []
    rest = data
    # compressed bytes inflated so far, over all members (the bomb check's basis); at a
    # member's end zlib leaves the rest of the input as both unused_data and
    # unconsumed_tail (ISA-L as unused_data only): only one of them is not yet read
    consumed = 0
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            while rest:
                chunk = d.decompress(rest, 1 << 24)
                consumed += len(rest) - len(d.unused_data if d.eof else d.unconsumed_tail)
                inflation.add(len(chunk), consumed)
                out.append(chunk)
                rest = d.unconsumed_tail
                if d.eof:
                    break
            if not d.eof:
                raise TraceFormatError(path, "truncated gzip data: the compressed stream ends early")
            rest = d.unused_data
            if rest and rest[:2] != b"\x1f\x8b":
                break  # trailing bytes after the last member, as gzip(1) allows
    except zlib.error as e:
        raise TraceFormatError(path, f"truncated or corrupt gzip data ({e})") from None
    return b"".join(out)


def parse(data: bytes, source: str = "<bytes>") -> Any:
    """The XSpace message in ``data``; TraceFormatError if it is not one."""
    from google.protobuf.message import DecodeError

    space = pb().XSpace()
    try:
        space.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        detail = str(e).split(": ")[-1] if str(e) else "decode error"
        raise TraceFormatError(source, f"not a valid XSpace protobuf ({detail}): truncated, "
                                       "damaged, or not an .xplane.pb file") from None
    check_planes(len(space.planes), any(p.name for p in space.planes), len(data), source)
    return space


def check_planes(n_planes: int, any_named: bool, size: int, source: str) -> None:
    """TraceFormatError unless the message has planes, some of them named."""
    if not n_planes:
        if size:
            raise TraceFormatError(source, "parses as protobuf but holds no XSpace planes: "
                                           "not an .xplane.pb file")
        raise TraceFormatError(source, "empty file: no XSpace planes")
    if not any_named:
        raise TraceFormatError(source, "protobuf whose planes have no names: not an XSpace profile")


def sniff(head: bytes, path: Path) -> bool:
    """True if ``head`` (first bytes, maybe ``GZ``-prefixed) starts an XSpace message.

    An XSpace begins with its first plane (field 1, length-delimited) whose first field
    is one of XPlane's. Files named ``*.xplane.pb`` are claimed too, so damaged ones get
    an error that says what is wrong instead of "unrecognised format".
    """
    body = head[2:] if head.startswith(b"GZ") else head
    if path.name.endswith((".xplane.pb", ".xplane.pb.gz", ".xspace.pb")):
        return True
    if len(body) < 3 or body[0] != 0x0A:
        return False
    length, pos = varint(body, 1)
    if length is None or length <= 0 or pos >= len(body):
        return False
    return body[pos] in (0x08, 0x12, 0x1A, 0x22, 0x2A, 0x32)


def is_protobuf_xspace(body: bytes, total: int | None) -> bool:
    """True if ``body`` (the first bytes of a file of ``total`` bytes, None if unknown)
    walks as XSpace's top-level fields: tag, length, next tag, ... each field inside
    the file, the first one a plane starting with an XPlane field.

    JSON text can start the same way (``\\n[`` is a plane of 91 bytes), but its bytes do
    not walk: every hop must land on a field tag and, in a small file, end exactly at
    its end."""
    if len(body) < 3 or body[0] != 0x0A:
        return False
    pos = 0
    fields = 0
    while pos < len(body):
        if body[pos] not in _XSPACE_TAGS:
            return False
        length, start = varint(body, pos + 1)
        if length is None:
            return start >= len(body) and fields > 0  # the varint runs past the head
        if fields == 0 and (length == 0 or start < len(body) and body[start] not in _XPLANE_TAGS):
            return False
        end = start + length
        if total is not None and end > total:
            return False
        pos, fields = end, fields + 1
    return pos == len(body) or total is None or pos <= total


def varint(data: bytes, pos: int) -> tuple[int | None, int]:
    """(value, next position) of the varint at ``pos``; value None if it runs past ``data``."""
    shift = value = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None, pos


_U64 = (1 << 64) - 1


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a protobuf message: ints for varints (as
    unsigned 64-bit: :func:`signed` for int32/int64 fields) and fixed fields, bytes for
    length-delimited ones (a sub-message, a string, a packed repeated field). ValueError
    where the bytes are damaged; nothing is allocated past the message's own bytes."""
    pos, end = 0, len(data)
    while pos < end:
        key = data[pos]
        pos += 1
        if key >= 0x80:  # fields 1-15 take one byte, 16-2047 two: the common cases inline
            if pos < end and data[pos] < 0x80:
                key = (key & 0x7F) | data[pos] << 7
                pos += 1
            else:
                k, pos = varint(data, pos - 1)
                if k is None:
                    raise ValueError("truncated key")
                key = k
        wire = key & 7
        if key < 8:
            raise ValueError("field number 0")
        if wire == 2:
            if pos >= end:
                raise ValueError("truncated field")
            n = data[pos]
            pos += 1
            if n >= 0x80:
                if pos < end and data[pos] < 0x80:
                    n = (n & 0x7F) | data[pos] << 7
                    pos += 1
                else:
                    m, pos = varint(data, pos - 1)
                    if m is None:
                        raise ValueError("truncated field")
                    n = m
            if pos + n > end:
                raise ValueError("truncated field")
            yield key >> 3, data[pos:pos + n]
            pos += n
        elif wire == 0:
            if pos < end and data[pos] < 0x80:
                yield key >> 3, data[pos]
                pos += 1
                continue
            val, pos = varint(data, pos)
            if val is None:
                raise ValueError("truncated varint")
            yield key >> 3, val & _U64
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise ValueError("truncated fixed field")
            yield key >> 3, int.from_bytes(data[pos:pos + size], "little")
            pos += size
        else:
            raise ValueError(f"wire type {wire}")


def packed(value: int | bytes) -> list[int]:
    """The varints of a repeated integer field's one occurrence: a packed run (bytes) or
    one unpacked value (an int); ValueError where the run is damaged."""
    if isinstance(value, int):
        return [value]
    out = []
    pos, end = 0, len(value)
    while pos < end:
        b = value[pos]
        if b < 0x80:
            out.append(b)
            pos += 1
            continue
        v, pos = varint(value, pos)
        if v is None:
            raise ValueError("truncated packed varint")
        out.append(v & _U64)
    return out


def signed(v: int) -> int:
    """An int32/int64 field's value from its (unsigned 64-bit) varint."""
    return v - (1 << 64) if v >= 1 << 63 else v
