"""The file as runs of whole ``TracePacket`` s.

A Perfetto trace is a ``Trace`` message: nothing but field 1 (``packet``, length-
delimited) repeated. The file is read in blocks (gzip or xz inflated as a stream, within the
inflation limits: ``formats/inflate.py``), the packet boundaries are found by reading
each packet's tag and length, and runs of whole packets of about ``CHUNK_BYTES`` (1 MiB) are
handed on as one ``Trace`` message to decode. Only the current run and one block are
held, whatever the size of the file. A file cut inside a packet, or bytes where no
packet can start, is a :class:`~polyprof.errors.TraceFormatError` naming the file and
the byte offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ...errors import TraceFormatError
from ..inflate import Decompressed
from ..kineto.progress import _Progress
from .shape import _PACKET_TAG, varint
from .walked import frame

CHUNK_BYTES = 1 << 20  # a decoded run's messages take several times its bytes
_BLOCK = 1 << 20
#: the most one packet may be (Perfetto's own limit for a packet is far below this)
MAX_PACKET = 1 << 30


def chunks(path: Path, progress: _Progress) -> Iterator[tuple[int, bytes]]:
    """(offset of the run's first packet in the inflated file, bytes of whole packets)."""
    buf = bytearray()
    base = 0  # file offset of buf[0]
    for block in Decompressed(path, _BLOCK, progress.advance).blocks():
        buf += block
        if len(buf) < CHUNK_BYTES:
            continue
        end = _whole(buf, base, path, final=False)
        if end:
            yield base, bytes(buf[:end])
            del buf[:end]
            base += end
    end = _whole(buf, base, path, final=True)
    if end:
        yield base, bytes(buf[:end])


def _whole(buf: bytearray, base: int, path: Path, final: bool) -> int:
    """Length of the longest run of whole packets at the start of ``buf``. With ``final``
    the run must be all of ``buf``: a packet cut short is an error."""
    pos, n = frame(buf), len(buf)  # the compiled framing's whole packets, then the rest checked here
    while pos < n:
        if buf[pos] != _PACKET_TAG:
            raise TraceFormatError(path, f"not a Perfetto trace at byte {base + pos:,}: 0x{buf[pos]:02x} where a "
                                         "TracePacket (field 1, length-delimited: 0x0a) must start")
        length, start = varint(buf, pos + 1)
        if length is None:
            if not final and n - pos < 11:
                return pos
            raise TraceFormatError(path, _cut(base + pos, None, n - pos) if final else
                                   f"not a Perfetto trace at byte {base + pos:,}: the packet's length is not a varint")
        if length > MAX_PACKET:
            raise TraceFormatError(path, f"not a Perfetto trace at byte {base + pos:,}: a packet of {length:,} bytes")
        if start + length > n:
            if final:
                raise TraceFormatError(path, _cut(base + pos, length, n - start))
            return pos
        pos = start + length
    return pos


def _cut(offset: int, length: int | None, have: int) -> str:
    if length is None:
        return f"truncated Perfetto trace: the file ends inside the header of the packet at byte {offset:,}"
    return (f"truncated Perfetto trace: the packet at byte {offset:,} needs {length:,} bytes but the file "
            f"ends after {max(have, 0):,} of them (cut mid-packet)")
