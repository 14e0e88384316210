"""Arrow IPC written in Python from :class:`~.arrow_columns.Column` buffers, without pyarrow.

``polyprof run`` writes a crash journal (an IPC stream) while the program runs and a
``.polyprof`` file (IPC files in a zip) at its end; importing pyarrow for that cost
every run time and memory. This writes the same formats for the flat
schemas polyprof uses (ints, floats, bools, strings, binary; no nesting, no
dictionaries, no compression). pyarrow reads what it writes (tests/test_arrow_write.py
reads it with pyarrow and with polyprof's readers, and compares it with what pyarrow
writes from the same data).

The format (Arrow's columnar format, "Serialization and Interprocess Communication"):
an *encapsulated message* is ``0xFFFFFFFF``, the int32 length of the metadata, the
metadata (a flatbuffer ``Message``, padded to 8 bytes), then the body (the buffers,
each padded to 8 bytes). A *stream* is a schema message, then record batch messages,
then ``0xFFFFFFFF 0x00000000``. A *file* is ``ARROW1\\0\\0``, the stream, a flatbuffer
``Footer`` (the schema again and each batch's ``Block``: offset, metadata length, body
length), the footer's int32 length and ``ARROW1``. The flatbuffer tables written
(``format/Schema.fbs``, ``Message.fbs``, ``File.fbs``; slot numbers in brackets)::

    Message {version [0]: short = V5; header_type [1]: ubyte; header [2];
             bodyLength [3]: long}
    Schema {endianness [0]: short; fields [1]: [Field]; custom_metadata [2]: [KeyValue]}
    Field {name [0]: string; nullable [1]: bool; type_type [2]: ubyte; type [3];
           children [5]: [Field]}
    Int {bitWidth [0]: int; is_signed [1]: bool}   FloatingPoint {precision [0]: short}
    KeyValue {key [0]: string; value [1]: string}
    RecordBatch {length [0]: long; nodes [1]: [FieldNode {length, null_count: long}];
                 buffers [2]: [Buffer {offset, length: long}]}
    Footer {version [0]: short; schema [1]: Schema; dictionaries [2]: [Block];
            recordBatches [3]: [Block {offset: long; metaDataLength: int; bodyLength: long}]}
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO, Union

from .arrow_columns import NUMERIC, Column

CONTINUATION = b"\xff\xff\xff\xff"
END_OF_STREAM = CONTINUATION + b"\x00\x00\x00\x00"
FILE_MAGIC = b"ARROW1"
_V5 = 4  # MetadataVersion
_SCHEMA, _RECORD_BATCH = 1, 3  # MessageHeader union tags
#: Type union tags of the types written
_TYPE_TAGS = {"int": 2, "float": 3, "binary": 4, "string": 5, "bool": 6, "large_binary": 19, "large_string": 20}
_PRECISION = {16: 0, 32: 1, 64: 2}  # HALF, SINGLE, DOUBLE


# ----------------------------------------------------------------------- flatbuffers
# Plain classes, not dataclasses: making a dataclass is slower in each `polyprof run`
# (which writes the crash journal's schema at start).
class _Table:
    __slots__ = ("fields",)

    def __init__(self, fields: dict[int, Any] | None = None):
        #: slot -> (struct format, value) for a scalar, or a child node (table, vector, string)
        self.fields: dict[int, Any] = {} if fields is None else fields


class _Vector:
    __slots__ = ("items",)

    def __init__(self, items: list[Any]):
        self.items = items  # tables or strings, stored as offsets


class _Structs:
    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int):
        self.data = data  # the structs, laid out already
        self.count = count


_Node = Union[_Table, _Vector, _Structs, bytes]  # bytes: a string


class _Builder:
    """A flatbuffer written front to back: each table's vtable just before it, its
    children after it (flatbuffer offsets point forward), every scalar aligned to its
    size from the buffer's start (tables start at multiples of 8)."""

    def __init__(self) -> None:
        self.buf = bytearray(4)  # the root offset

    def _pad(self, align: int, extra: int = 0) -> None:
        self.buf += bytes(-(len(self.buf) + extra) % align)

    def _link(self, at: int, node: _Node) -> None:
        target = self._node(node)
        struct.pack_into("<I", self.buf, at, target - at)

    def finish(self, root: _Table) -> bytes:
        self._link(0, root)
        self._pad(8)
        return bytes(self.buf)

    def _node(self, node: _Node) -> int:
        if isinstance(node, _Table):
            return self._table(node)
        if isinstance(node, _Vector):
            self._pad(4)
            at = len(self.buf)
            self.buf += struct.pack("<I", len(node.items)) + bytes(4 * len(node.items))
            for i, item in enumerate(node.items):
                self._link(at + 4 + 4 * i, item)
            return at
        if isinstance(node, _Structs):
            self._pad(8, 4)  # the structs (of longs) after the count start at a multiple of 8
            at = len(self.buf)
            self.buf += struct.pack("<I", node.count) + node.data
            return at
        self._pad(4)
        at = len(self.buf)
        self.buf += struct.pack("<I", len(node)) + node + b"\x00"
        return at

    def _table(self, table: _Table) -> int:
        sizes = {slot: struct.calcsize(v[0]) if isinstance(v, tuple) else 4 for slot, v in table.fields.items()}
        offsets, end = {}, 4  # the table starts with the int32 offset to its vtable
        for slot in sorted(sizes, key=lambda s: (-sizes[s], s)):
            end += -end % sizes[slot]
            offsets[slot] = end
            end += sizes[slot]
        n_slots = max(table.fields, default=-1) + 1
        self._pad(2)
        vtable = len(self.buf)
        self.buf += struct.pack(f"<{2 + n_slots}H", 4 + 2 * n_slots, end, *(offsets.get(s, 0) for s in range(n_slots)))
        self._pad(8)
        at = len(self.buf)
        inline = bytearray(end)
        struct.pack_into("<i", inline, 0, at - vtable)
        for slot, v in table.fields.items():
            if isinstance(v, tuple):
                struct.pack_into(v[0], inline, offsets[slot], v[1])
        self.buf += inline
        for slot, v in table.fields.items():
            if not isinstance(v, tuple):
                self._link(at + offsets[slot], v)
        return at


# ----------------------------------------------------------------------- messages
def _field(name: str, type: str) -> _Table:
    if type in NUMERIC:
        bits = NUMERIC[type]().itemsize * 8
        if type.startswith("float"):
            tag, spec = _TYPE_TAGS["float"], _Table({0: ("<h", _PRECISION[bits])})
        else:
            tag, spec = _TYPE_TAGS["int"], _Table({0: ("<i", bits), 1: ("<?", not type.startswith("u"))})
    elif type in _TYPE_TAGS:
        tag, spec = _TYPE_TAGS[type], _Table()
    else:
        raise ValueError(f"Arrow type {type!r} is not written by this writer")
    return _Table({0: name.encode("utf-8", "surrogatepass"), 1: ("<?", True), 2: ("<B", tag), 3: spec,
                   5: _Vector([])})


def _schema(fields: Sequence[tuple[str, str]], metadata: Mapping[str | bytes, object] | None) -> _Table:
    table = _Table({0: ("<h", 0), 1: _Vector([_field(n, t) for n, t in fields])})
    if metadata:
        table.fields[2] = _Vector([_Table({0: _bytes(k), 1: _bytes(v)}) for k, v in metadata.items()])
    return table


def _bytes(s: object) -> bytes:
    return s if isinstance(s, bytes) else str(s).encode()


def _message(header_type: int, header: _Table, body_length: int) -> bytes:
    meta = _Builder().finish(_Table({0: ("<h", _V5), 1: ("<B", header_type), 2: header, 3: ("<q", body_length)}))
    return CONTINUATION + struct.pack("<i", len(meta)) + meta


def schema_message(fields: Sequence[tuple[str, str]], metadata: Mapping[str | bytes, object] | None = None) -> bytes:
    """The encapsulated schema message of ``fields`` ((name, type) pairs)."""
    return _message(_SCHEMA, _schema(fields, metadata), 0)


def batch_message(fields: Sequence[tuple[str, str]], columns: Sequence[Column]) -> tuple[bytes, list[Any]]:
    """(metadata, body parts) of one record batch of ``columns``, of the types ``fields`` say."""
    if len(columns) != len(fields):
        raise ValueError(f"{len(columns)} columns for a schema of {len(fields)} fields")
    n = columns[0].length if columns else 0
    nodes, buffers, parts, pos = [], [], [], 0
    for (name, type), col in zip(fields, columns):
        if col.type != type or col.length != n:
            raise ValueError(f"column {name!r} is {col.length} x {col.type}, expected {n} x {type}")
        nodes.append(struct.pack("<qq", col.length, col.null_count))
        for b in col.buffers:
            size = 0 if b is None else (b.nbytes if hasattr(b, "nbytes") else len(b))
            buffers.append(struct.pack("<qq", pos, size))
            if size:
                parts.append(memoryview(b).cast("B") if not isinstance(b, bytes) else b)
                if size % 8:
                    parts.append(bytes(-size % 8))
            pos += size + -size % 8
    header = _Table({0: ("<q", n), 1: _Structs(b"".join(nodes), len(nodes)),
                     2: _Structs(b"".join(buffers), len(buffers))})
    return _message(_RECORD_BATCH, header, pos), parts


# ----------------------------------------------------------------------- stream and file
class StreamWriter:
    """An IPC stream to a binary file: the schema message at once, then one ``write()``
    call per record batch (a process killed in the middle leaves whole batches before
    it; readers drop the cut one). ``close()`` writes the end-of-stream marker."""

    def __init__(self, sink: BinaryIO, fields: Sequence[tuple[str, str]], metadata: Mapping[str | bytes, object] | None = None,
                 position: int = 0):
        self.sink, self.fields = sink, list(fields)
        #: where the next message starts in the file (``position``: where the stream starts)
        self.position = position
        #: (offset, metadata length, body length) of each batch, for a file's footer
        self.blocks: list[tuple[int, int, int]] = []
        self._write(schema_message(self.fields, metadata))

    def _write(self, data: bytes) -> None:
        self.sink.write(data)
        self.position += len(data)

    def write_batch(self, columns: Sequence[Column]) -> None:
        meta, parts = batch_message(self.fields, columns)
        body = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
        self.blocks.append((self.position, len(meta), body))
        self._write(b"".join([meta, *parts]))

    def close(self) -> None:
        self._write(END_OF_STREAM)


def file_bytes(columns: Mapping[str, Column], metadata: Mapping[str | bytes, object] | None = None) -> bytes:
    """An IPC file of one record batch of ``columns`` (name -> column)."""
    fields = [(name, col.type) for name, col in columns.items()]
    sink = io.BytesIO()
    sink.write(FILE_MAGIC + b"\x00\x00")
    stream = StreamWriter(sink, fields, metadata, position=8)
    stream.write_batch(list(columns.values()))
    stream.close()
    blocks = b"".join(struct.pack("<qi4xq", *b) for b in stream.blocks)
    footer = _Builder().finish(_Table({0: ("<h", _V5), 1: _schema(fields, metadata), 2: _Structs(b"", 0),
                                       3: _Structs(blocks, len(stream.blocks))}))
    sink.write(footer + struct.pack("<i", len(footer)) + FILE_MAGIC)
    return sink.getvalue()
