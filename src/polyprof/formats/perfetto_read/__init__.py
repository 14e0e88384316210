"""Perfetto protobuf traces (``.pftrace``, ``.perfetto-trace``; gzipped, xz-compressed or not) into a Trace.

What Perfetto's SDK, its tracing service, rocprofv3 and polyprof's own writer
(``writers/perfetto.py``) write: ``TracePacket`` s holding ``TrackEvent`` s (slice begin
and end, instants, legacy complete slices, counters, flows, debug annotations), their
interned strings and incremental state, track descriptors (processes, threads, named
and counter tracks under their parents), clock snapshots, the GPU messages
``GpuRenderStageEvent`` and ``GpuCounterEvent``, and the device properties polyprof's
export keeps in Chrome metadata (``chrome_events``). Streamed a run of packets at a time,
into columns: track events, counter events and interned data walked in C from the wire
(``walked.py``), the other packets decoded with the protobuf library (``trace.proto``,
the part of Perfetto's protos read here, generated into ``trace_pb2``).

The stages, one module each, in the order data flows:

- ``shape.py``: the content test for sniffing (protobuf field shapes);
- ``packets.py``: the file as runs of whole packets (gzip and xz streamed), truncation and
  foreign bytes reported with their offset;
- ``collector.py``: each packet into columns, with ``sequences.py`` (per-sequence
  interned data, defaults, validity) and ``clocks.py`` (snapshots, scoped clocks);
  ``walked.py`` + ``_walk.c``: the same for the common packets, compiled;
- ``slices.py``: begin/end pairs and flow chains, vectorised;
- ``tracks.py``: Perfetto's tracks -> polyprof's planes and tracks;
- ``build.py``: the Trace.

What is not read: ftrace and other system data (scheduling, CPU frequency, Android
logs), heap and CPU profiles, Chrome's typed event payloads beyond their debug
annotations; the trace's ``warnings`` count what was skipped.
"""

from __future__ import annotations

import gc
from functools import partial
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from ..safety import guarded
from .shape import looks_like_packets, varint

if TYPE_CHECKING:
    from ...trace.core import Trace

__all__ = ["load", "sniff"]


def pb() -> Any:
    """The generated protobuf module (imported on first use: protobuf is heavy)."""
    from . import trace_pb2  # protobuf: only when a Perfetto file is read

    return trace_pb2


def sniff(head: bytes, path: Path) -> bool:
    """True if ``head`` (the first bytes; ``GZ`` + inflated bytes for gzip) starts a
    Perfetto trace, by its protobuf field shapes (``packets.looks_like_packets``)."""
    if head.startswith(b"GZ"):
        return looks_like_packets(head[2:], None)
    return looks_like_packets(head, path.stat().st_size)


@guarded
def load(path: str | Path, progress: bool = False) -> "Trace":
    """Read a Perfetto protobuf trace into a Trace."""
    from google.protobuf.message import DecodeError

    # the reader's stages only when a file is read (sniffing imports this module)
    from ...errors import TraceFormatError  # (as above)
    from ..kineto.progress import _Progress  # (as above)
    from ..safety import check_events  # (as above)
    from . import packets  # (as above)
    from .build import build  # (as above)
    from .collector import Collector  # (as above)
    from .walked import IMPLEMENTATION, Walked  # (as above)

    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    size = path.stat().st_size
    if not size:
        raise TraceFormatError(path, "empty file")
    Trace_ = pb().Trace
    col = Collector()
    walked = Walked(col) if IMPLEMENTATION == "c" else None
    bar = _Progress(progress, path, size)
    gc_was_on = gc.isenabled()
    gc.disable()  # the decoded messages make no cycles; the collector would only rescan them
    n_packets = 0
    try:
        for offset, data in packets.chunks(path, bar):
            if walked is not None:
                n_packets += 1  # a run holds one packet at least
                walked.add(data, partial(_packet, path, offset))
            else:
                try:
                    msg = Trace_.FromString(data)
                except (DecodeError, ValueError, RuntimeError) as e:
                    raise _first_damaged(path, offset, data, e) from None
                n_packets += len(msg.packet)
                col.add(msg)
                del msg
            check_events(path, col.n, so_far=True)
        if not n_packets:
            raise TraceFormatError(path, "holds no Perfetto packets")
        bar.stop()
        return build(col, path)
    finally:
        bar.stop()
        if gc_was_on:
            gc.enable()


def _packet(path: Path, offset: int, data: bytes, start: int, end: int) -> Any:
    """The message of the packet at ``data[start:end]`` (its tag and length included) of
    the run at ``offset``."""
    from google.protobuf.message import DecodeError

    try:
        return pb().TracePacket.FromString(data[varint(data, start + 1)[1]:end])
    except (DecodeError, ValueError, RuntimeError) as e:
        raise _damaged(path, offset + start, e) from None


def _damaged(path: Path, offset: int, e: Exception) -> Exception:
    from ...errors import TraceFormatError  # (as in load)

    return TraceFormatError(path, f"damaged Perfetto trace: the packets from byte {offset:,} do not decode as "
                                  f"TracePackets ({str(e) or 'decode error'})")


def _first_damaged(path: Path, offset: int, data: bytes, e: Exception) -> Exception:
    """The error of the first packet of a run that does not decode (both paths name it)."""
    from google.protobuf.message import DecodeError

    pos = 0
    while pos < len(data):
        length, start = varint(data, pos + 1)
        end = start + (length or 0)
        try:
            pb().TracePacket.FromString(data[start:end])
        except (DecodeError, ValueError, RuntimeError) as bad:
            return _damaged(path, offset + pos, bad)
        pos = end
    return _damaged(path, offset, e)
