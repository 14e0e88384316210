"""Runs of packets walked in C (``_walk.c``) into the collector's columns.

The compiled walk reads the packets nearly every trace is made of (track events with
their interned names, categories, debug annotations and flow ids; counter events;
interned data) straight from the wire format into the columns :class:`Collector`
builds, through the same per-sequence state, track codes and string table, in file
order. A packet it does not read exactly as the collector would (descriptors, clock
snapshots, GPU messages, legacy events, nested annotations, odd wire shapes, damage) it
leaves whole: :meth:`Walked.add` decodes that one packet with protobuf and hands it to
:meth:`Collector.packet`, then walks on. Rows stay in file order: the walk's columns are
taken before Python adds rows, and Python's lists flushed before the walk adds rows. So
both paths make the same Trace (tests/test_perfetto_walk.py).

``POLYPROF_PURE_PYTHON=1`` or a build without the extension: every run is decoded by
protobuf and read by the collector (``IMPLEMENTATION`` says which is in use).
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from .collector import Collector, _values
from ...lowlevel.compiled import optional

_walk = optional(__package__, "_walk")  # built by setup.py; protobuf reads every packet otherwise (lowlevel/compiled.py)
#: "c" (``_walk.c``) or "python" (every packet decoded by protobuf): which one is in use
IMPLEMENTATION = "c" if _walk is not None else "python"

_END, _SLOW, _FLUSH = 0, 1, 2
_EVENT_COLUMNS = (("kind", np.int8), ("track", np.int64), ("ts", np.int64), ("clock", np.int64),
                  ("dur", np.int64), ("name", np.int32), ("cat", np.int32))
_COUNTER_COLUMNS = (("track", np.int64), ("ts", np.int64), ("clock", np.int64), ("value", np.float64))
_STAT_TYPES = {"b": np.bool_, "u": np.uint64, "i": np.int64, "f": np.float64}


class _Walker(Protocol):
    """``_walk.Walker``: one file's walk (its buffers live as long as the reader)."""

    def walk(self, data: bytes, pos: int, n: int, pending: bool) -> tuple[int, int, int, int]: ...

    def take(self) -> tuple: ...

    def pending(self) -> bool: ...


def frame(buf: bytes | bytearray) -> int:
    """Offset of the first packet of ``buf`` that is not plainly whole (0 without the
    extension): ``packets.py`` checks the packets from there on itself."""
    return _walk.frame(buf) if _walk is not None else 0


class Walked:
    """The compiled walk of one file, feeding ``col``."""

    def __init__(self, col: Collector):
        assert _walk is not None
        self.col = col
        self.w: _Walker = _walk.Walker(col, col.tracks, col.tracks.uuids, col.b.intern, col.b.strings, col._texts)

    def add(self, data: bytes, decode: Callable[[bytes, int, int], object]) -> None:
        """Every packet of ``data`` (a run of whole packets); ``decode(data, start, end)``
        is the protobuf message of the packet at ``data[start:end]`` (its tag and length
        included), for the packets the walk leaves to the collector."""
        col, w = self.col, self.w
        pos, end = 0, len(data)
        while pos < end:
            pos, col.n, status, nxt = w.walk(data, pos, col.n, col.pending())
            if status == _END:
                break
            if status == _FLUSH:
                col.flush()
                continue
            self.take()
            col.packet(decode(data, pos, nxt))
            pos = nxt
        self.take()
        col.flush()

    def take(self) -> None:
        """The walk's columns so far into the collector's parts (as ``Collector.flush`` does)."""
        if not self.w.pending():
            return
        col = self.col
        *cols, flows, stats = self.w.take()
        ev = {k: np.frombuffer(b, t) for (k, t), b in zip(_EVENT_COLUMNS, cols[:7])}
        if len(ev["kind"]):
            col.parts.append(ev)
        ct = {k: np.frombuffer(b, t) for (k, t), b in zip(_COUNTER_COLUMNS, cols[7:])}
        if len(ct["track"]):
            col.counter_parts.append(ct)
        for key, kind, rows, vals in stats:
            values = _values("s", vals) if kind == "s" else np.frombuffer(vals, _STAT_TYPES[kind]).copy()
            col.stats.setdefault(key, {}).setdefault(kind, []).append((np.frombuffer(rows, np.int64).copy(), values))
        if flows:
            col.flow_parts.append(np.frombuffer(flows, np.int64).reshape(-1, 4))
