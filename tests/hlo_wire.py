"""A small protobuf encoder for the tests that build XLA HloProto messages by hand
(field numbers of xla/service/hlo.proto and xla/xla_data.proto), written apart from
polyprof's decoder so the tests do not check it against itself: a message is a list of
(field number, value) pairs, a value an int (varint), str/bytes (length-delimited), a
tuple of ints (packed) or a nested message's bytes."""

from __future__ import annotations


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def msg(*pairs: tuple[int, int | str | bytes | tuple[int, ...]]) -> bytes:
    """A protobuf message: ints as varints, str/bytes length-delimited, tuples packed."""
    out = []
    for num, v in pairs:
        if isinstance(v, int):
            out.append(varint(num << 3) + varint(v))
            continue
        b = v.encode() if isinstance(v, str) else b"".join(map(varint, v)) if isinstance(v, tuple) else v
        out.append(varint(num << 3 | 2) + varint(len(b)) + b)
    return b"".join(out)
