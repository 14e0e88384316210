"""Protobuf wire encoding of many messages at once, with NumPy.

A *batch* is ``(data, lens)``: the encodings of n byte strings concatenated in ``data``
(uint8) with their lengths in ``lens`` (int64); a string may be empty (a field that one
message lacks). Messages are built field by field: each field is a batch with one entry
per message, and :func:`join` concatenates them message by message. No Python object is
made per message, so a million events encode at the speed of a few NumPy passes.

Only what the Perfetto writer needs: varints (uint64 / two's complement int64), fixed64,
constant bytes, length-delimited fields, and repeated items grouped per message.

The two loops every field goes through, :func:`varints` and :func:`join`, run in C
(``_perfetto_wire.c``, optional like the other extensions; ``IMPLEMENTATION`` says which
is in use, ``POLYPROF_PURE_PYTHON=1`` forces NumPy's); both give the same bytes.
"""

from __future__ import annotations

import numpy as np

from ..lowlevel.compiled import optional

_c = optional(__package__, "_perfetto_wire")  # built by setup.py; NumPy encodes otherwise (lowlevel/compiled.py)
#: "c" (``_perfetto_wire.c``) or "numpy": which encodes varints and joins batches
IMPLEMENTATION = "c" if _c is not None else "numpy"

Batch = tuple[np.ndarray, np.ndarray]
#: debug annotations as columns: packet, name iid, value kind (0 int, 1 uint, 2 double,
#: 3 bool, 4 string iid), value bits (uint64)
Items = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_EMPTY = np.zeros(0, np.uint8)


def tag(field: int, wire_type: int) -> bytes:
    """The key of a field (its number and wire type) as varint bytes."""
    return varint_bytes((field << 3) | wire_type)


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varints(values: np.ndarray) -> Batch:
    """Varint encodings of integers (negative int64: 10 bytes, two's complement)."""
    v = np.asarray(values)
    v = v.view(np.uint64) if v.dtype == np.int64 else v.astype(np.uint64)
    n = len(v)
    if not n:
        return _EMPTY, np.zeros(0, np.int64)
    if _c is not None:
        data, lens_ = _c.varints(np.ascontiguousarray(v))
        return np.frombuffer(data, np.uint8), np.frombuffer(lens_, np.int64)
    lens = np.ones(n, np.int64)
    rest = v >> np.uint64(7)
    while rest.any():
        lens += rest != 0
        rest >>= np.uint64(7)
    width = int(lens.max())
    k = np.arange(width)
    groups = ((v[:, None] >> _SHIFTS[:width]) & np.uint64(0x7F)).astype(np.uint8)
    groups |= np.where(k[None, :] < (lens[:, None] - 1), 0x80, 0).astype(np.uint8)
    return groups[k[None, :] < lens[:, None]], lens


def fixed64(values: np.ndarray) -> Batch:
    """Little-endian 8-byte encodings (float64 -> double, integers -> fixed64)."""
    v = np.asarray(values)
    v = v.astype("<f8") if v.dtype.kind == "f" else v.astype("<u8")
    return v.view(np.uint8).copy(), np.full(len(v), 8, np.int64)


def const(value: bytes, mask: np.ndarray) -> Batch:
    """``value`` for the messages where ``mask`` is set, nothing for the others."""
    m = np.asarray(mask, bool)
    data = np.tile(np.frombuffer(value, np.uint8), int(m.sum())) if value else _EMPTY
    return data, np.where(m, len(value), 0).astype(np.int64)


def masked(batch: Batch, mask: np.ndarray) -> Batch:
    """``batch`` (one entry per set mask position) spread over all messages; empty elsewhere."""
    data, lens = batch
    m = np.asarray(mask, bool)
    out = np.zeros(len(m), np.int64)
    out[m] = lens
    return data, out


def join(parts: list[Batch]) -> Batch:
    """Message by message concatenation of batches with equally many entries."""
    lens = np.zeros(len(parts[0][1]), np.int64)
    for _, l in parts:
        lens += l
    out = np.empty(int(lens.sum()), np.uint8)
    if _c is not None:
        _c.join(out, [(np.ascontiguousarray(d, np.uint8), np.ascontiguousarray(l, np.int64)) for d, l in parts])
        return out, lens
    cur = np.cumsum(lens) - lens  # where each message's next bytes go
    for data, l in parts:
        if not len(data):
            continue
        width = int(l[0])
        if len(data) == width * len(l) and (l == width).all():  # all as long: one broadcast
            out[cur[:, None] + np.arange(width)] = data.reshape(len(l), width)
        else:
            src_start = np.cumsum(l) - l
            out[np.arange(len(data)) + np.repeat(cur - src_start, l)] = data
        cur += l
    return out, lens


def take(batch: Batch, order: np.ndarray) -> Batch:
    """The entries of ``batch`` in ``order``."""
    data, lens = batch
    new = lens[order]
    total = int(new.sum())
    if not total:
        return _EMPTY, new
    start = np.cumsum(lens) - lens
    dst = np.cumsum(new) - new
    return data[np.arange(total) + np.repeat(start[order] - dst, new)], new


def group(rows: np.ndarray, batch: Batch, n: int) -> Batch:
    """Items of repeated fields (entry i belongs to message ``rows[i]``) -> one entry per
    message, its items concatenated in their given order."""
    if not len(rows):
        return _EMPTY, np.zeros(n, np.int64)
    order = np.argsort(rows, kind="stable")
    data, lens = take(batch, order)
    return data, np.bincount(rows, weights=batch[1], minlength=n).astype(np.int64)


def field_varint(field: int, values: np.ndarray) -> Batch:
    return join([const(tag(field, 0), np.ones(len(values), bool)), varints(values)])


def field_fixed64(field: int, values: np.ndarray) -> Batch:
    return join([const(tag(field, 1), np.ones(len(values), bool)), fixed64(values)])


def field_bytes(field: int, batch: Batch, present: np.ndarray | None = None) -> Batch:
    """A length-delimited field holding each entry of ``batch``; where ``present`` is
    false the field is left out (those entries must be empty)."""
    data, lens = batch
    has = np.ones(len(lens), bool) if present is None else np.asarray(present, bool)
    return join([const(tag(field, 2), has), masked(varints(lens[has]), has), batch])


def strings(values: list[str]) -> Batch:
    """UTF-8 encodings of strings."""
    enc = [s.encode("utf-8", "surrogatepass") for s in values]
    data = np.frombuffer(b"".join(enc), np.uint8)
    return data, np.fromiter(map(len, enc), np.int64, len(enc))


def message(fields: list[tuple[int, object]]) -> bytes:
    """One small message from (field, value) pairs: int -> varint, float -> fixed64,
    str/bytes -> length-delimited, a list -> that field repeated. For descriptors and
    interned data (few per trace), not events."""
    out = bytearray()
    for number, value in fields:
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, bool) or isinstance(v, int):
                out += tag(number, 0) + varint_bytes(int(v))
            elif isinstance(v, float):
                out += tag(number, 1) + np.float64(v).tobytes()
            else:
                b = v.encode("utf-8", "surrogatepass") if isinstance(v, str) else bytes(v)  # type: ignore[arg-type]
                out += tag(number, 2) + varint_bytes(len(b)) + b
    return bytes(out)


def no_items() -> Items:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint64)


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def track_events(ts: np.ndarray, seq: bytes, types: np.ndarray, uuids: np.ndarray, named: np.ndarray,
                 name: np.ndarray | None, cat: np.ndarray | None, counter: np.ndarray | None, items: Items,
                 flows: tuple[np.ndarray, np.ndarray], terminating: tuple[np.ndarray, np.ndarray]) -> bytes:
    """Whole ``Trace.packet`` fields of track events, compiled (``IMPLEMENTATION == "c"``):
    per event ``TracePacket{timestamp, <seq>, track_event{type, track_uuid,
    [double_counter_value], [name_iid, category_iids where named], debug_annotations...,
    flow_ids..., terminating_flow_ids...}}``, the bytes the writer's field-by-field NumPy
    joins give. Repeated parts are (packet, ...) columns sorted by packet."""
    assert _c is not None
    at, key, kind, bits = items
    return _c.track_events(
        _i64(ts), seq, _i64(types), _i64(uuids), None if name is None else _i64(name),
        None if cat is None else _i64(cat), np.ascontiguousarray(named, np.uint8),
        None if counter is None else np.ascontiguousarray(counter, np.float64), _i64(at), _i64(key),
        np.ascontiguousarray(kind, np.uint8), np.ascontiguousarray(bits, np.uint64), _i64(flows[0]),
        np.ascontiguousarray(flows[1], np.uint64), _i64(terminating[0]), np.ascontiguousarray(terminating[1], np.uint64))
