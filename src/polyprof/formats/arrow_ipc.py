"""Arrow IPC read with its compressed buffers bounded before anything is inflated.

Arrow IPC compresses each buffer of a record batch on its own (LZ4 frame or zstd) and
prefixes it with its uncompressed length (little-endian int64; -1: stored as is). When
pyarrow reads a batch it allocates that declared length and inflates into it, so a
small file can ask for any amount of memory. Here every message is read as a stream
(``pyarrow.ipc.MessageReader``; no buffer is inflated by that), the record batch's
buffer list is read from the message's flatbuffer, the declared lengths are summed
against :class:`~polyprof.formats.safety.Inflation` (``max_inflated_bytes``,
``max_inflate_ratio``) and only then is the batch decoded
(``pyarrow.ipc.read_record_batch``) and validated in full.

The IPC *file* format (``.polyprof`` members) is the stream format between a magic and
a footer: the messages are read in order and the footer is not used, so what is
checked is what is decoded (a footer could point elsewhere).

The flatbuffer layouts read (Arrow's ``format/Message.fbs``)::

    table Message { version: short; header: MessageHeader (union: type, value);
                    bodyLength: long; custom_metadata }
    table RecordBatch { length: long; nodes: [FieldNode]; buffers: [Buffer];
                        compression: BodyCompression; ... }
    struct Buffer { offset: long; length: long }
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import TraceFormatError
from .safety import Inflation

FILE_MAGIC = b"ARROW1"
_RECORD_BATCH = 3  # MessageHeader union tag


class _Flat:
    """Bounds-checked reads of a flatbuffer (a damaged offset is an error, not a crash)."""

    def __init__(self, buf: bytes):
        self.buf = buf

    def _unpack(self, fmt: str, pos: int) -> int:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise ValueError(f"flatbuffer offset {pos} out of range")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def root(self) -> int:
        return self._unpack("<I", 0)

    def field(self, table: int, slot: int) -> int:
        """Position of a table's field ``slot``; 0 when absent."""
        vtable = table - self._unpack("<i", table)
        vsize = self._unpack("<H", vtable)
        entry = 4 + 2 * slot
        if entry + 2 > vsize:
            return 0
        off = self._unpack("<H", vtable + entry)
        return table + off if off else 0

    def scalar(self, table: int, slot: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, slot)
        return self._unpack(fmt, pos) if pos else default

    def ref(self, table: int, slot: int) -> int:
        """Position of a table or vector a field points to; 0 when absent."""
        pos = self.field(table, slot)
        return pos + self._unpack("<I", pos) if pos else 0

    def structs(self, vector: int, size: int) -> Iterator[int]:
        n = self._unpack("<I", vector)
        if vector + 4 + n * size > len(self.buf):
            raise ValueError(f"flatbuffer vector of {n} elements runs past the end")
        return (vector + 4 + i * size for i in range(n))


def declared_bytes(message: pa.ipc.Message) -> int:
    """What decoding this record batch message allocates for its compressed buffers:
    the sum of their declared uncompressed lengths (0 when it is not compressed)."""
    fb = _Flat(message.metadata.to_pybytes())
    msg = fb.root()
    if fb.scalar(msg, 1, "<B") != _RECORD_BATCH:
        return 0
    batch = fb.ref(msg, 2)
    if not batch or not fb.ref(batch, 3):  # no BodyCompression: buffers are read in place
        return 0
    buffers = fb.ref(batch, 2)
    if not buffers:
        return 0
    body = message.body
    view = memoryview(body) if body is not None else memoryview(b"")
    total = 0
    for b in fb.structs(buffers, 16):
        offset, length = struct.unpack_from("<qq", fb.buf, b)
        if length < 8:  # empty, or too short to hold a length: pyarrow refuses it by name
            continue
        if offset < 0 or offset + 8 > len(view):
            raise ValueError(f"buffer at {offset} lies outside the message body ({len(view)} bytes)")
        n = struct.unpack_from("<q", view, offset)[0]
        total += length - 8 if n == -1 else max(n, 0)
    return total


class Stream:
    """The record batches of an IPC stream in ``data``, each counted in ``inflation``
    before it is decoded and validated in full after. Arrow's own errors (``pa.ArrowException``,
    ``ValueError``, ``OSError``) pass through for the caller to name; a bound crossed is
    a :class:`TraceFormatError`."""

    def __init__(self, data: pa.Buffer, inflation: Inflation):
        self.reader = ipc.MessageReader.open_stream(pa.BufferReader(data))
        try:
            first = self.reader.read_next_message()
        except StopIteration:
            raise ValueError("no schema message") from None
        if first.type != "schema":  # read_schema on a message of another or unknown type crashes pyarrow
            raise ValueError(f"the stream starts with a message of type {first.type!r}, not a schema")
        self.schema = ipc.read_schema(first)
        self.names = self.schema.names  # decoded now: a name that is not UTF-8 raises here (a ValueError)
        self.inflation = inflation

    def next_batch(self) -> pa.RecordBatch:
        """The next batch; ``StopIteration`` at the end of the stream."""
        message = self.reader.read_next_message()
        if message.type != "record batch":  # polyprof writes no dictionaries or tensors
            raise ValueError(f"unexpected IPC message of type {message.type!r}")
        self.inflation.add(declared_bytes(message))
        batch = ipc.read_record_batch(message, self.schema)
        batch.validate(full=True)
        return batch

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            try:
                yield self.next_batch()
            except StopIteration:
                return


def _stream_part(data: bytes) -> pa.Buffer:
    """The stream inside an IPC file: after the magic (padded to 8 bytes), up to the
    footer when the trailer (footer length, magic) is whole; so a writer that leaves
    out the stream's end-of-stream marker is read too."""
    end = len(data)
    if end >= 18 and data.endswith(FILE_MAGIC):
        (footer,) = struct.unpack_from("<i", data, end - 10)
        if 0 < footer <= end - 18:
            end -= 10 + footer
    return pa.py_buffer(data)[8:end]


def read_file(data: bytes, path: Path, name: str, inflation: Inflation) -> pa.Table:
    """An IPC file (a ``.polyprof`` member) as a table, its buffers counted in
    ``inflation`` before they are inflated; any damage is a :class:`TraceFormatError`
    naming ``path`` and ``name``."""
    try:
        if not data.startswith(FILE_MAGIC):
            raise ValueError("no Arrow file magic")
        stream = Stream(_stream_part(data), inflation)
        return pa.Table.from_batches(list(stream), schema=stream.schema)
    except TraceFormatError:
        raise
    except (pa.ArrowException, ValueError, OSError, struct.error) as e:  # ArrowInvalid is a ValueError
        raise TraceFormatError(path, f"damaged .polyprof file: {name} is not valid Arrow data ({e})") from None
