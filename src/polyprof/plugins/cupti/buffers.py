"""Where CUPTI's completed activity buffers go, and the one form they take for decoding.

Two sinks fill the same batches, ``(records, offsets, kinds, strings, arena)``: the
valid bytes of one buffer, each record's offset (int64) and kind (int32), two string
slots per record (int64 offsets into ``arena``, NUL-terminated text; -1 for none).

- :class:`CSink` (the default): ``_cuptibuf.c`` registers two C callbacks with the
  libcupti cupti-python loaded, and walks each completed buffer with
  ``cuptiActivityGetNextRecord`` without the GIL: no Python object per record.
- :class:`PySink` (``POLYPROF_PURE_PYTHON=1``, or no C compiler at install): cupti-python's
  ``activity_register_callbacks``; the binding hands each completed buffer over as a
  list of its record objects (``ActivityKernel13`` ...), and this sink copies each
  record's bytes back into one array per buffer.

The binding's path costs a Python object per record in the binding before polyprof sees
anything (docs/benchmarks.md, "CUPTI record handling"); that is why the C sink exists.
``tests/test_cupti.py`` feeds the same records to both and checks the decoded columns
are equal. ``IMPLEMENTATION`` says which sink a session uses.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
from typing import Any, NamedTuple, Sequence

import numpy as np

from . import layout

log = logging.getLogger("polyprof")

if os.environ.get("POLYPROF_PURE_PYTHON", "") in ("", "0"):
    try:
        from . import _cuptibuf  # type: ignore[attr-defined]
    except ImportError:  # built without a C compiler
        _cuptibuf = None
else:
    _cuptibuf = None

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

IMPLEMENTATION = "c" if _cuptibuf is not None else "python"
DEFAULT_BUFFER_BYTES = 8 << 20

#: (kind, first string offset, second or -1, cache by pointer within a buffer)
STRING_TABLE = [(k, offs[0], offs[1] if len(offs) > 1 else -1, k != layout.MARKER)
                for k, offs in layout.STRING_FIELDS.items()]


class Batch(NamedTuple):
    records: bytes
    offsets: bytes  # int64 per record
    kinds: bytes  # int32 per record
    strings: bytes  # int64 pair per record
    arena: bytes


class Records(NamedTuple):
    """Every batch of a session, concatenated (what decode.py reads)."""

    blob: np.ndarray  # uint8, each batch padded to 8 bytes
    offsets: np.ndarray  # int64 into blob
    kinds: np.ndarray  # int32
    strings: np.ndarray  # (n, 2) int64 into arena, -1: none
    arena: bytes

    @staticmethod
    def of(batches: Sequence[Batch]) -> "Records":
        blobs, offs, kinds, strs, arenas = [], [], [], [], []
        base = abase = 0
        for b in batches:
            n = len(b.kinds) // 4
            pad = (-len(b.records)) % layout.ALIGNMENT
            blobs.append(np.frombuffer(b.records, np.uint8))
            if pad:
                blobs.append(np.zeros(pad, np.uint8))
            offs.append(np.frombuffer(b.offsets, np.int64)[:n] + base)
            kinds.append(np.frombuffer(b.kinds, np.int32)[:n])
            s = np.frombuffer(b.strings, np.int64)[:2 * n].reshape(n, 2)
            strs.append(np.where(s >= 0, s + abase, -1))
            arenas.append(b.arena)
            base += len(b.records) + pad
            abase += len(b.arena)
        if not blobs:
            return Records(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int32),
                           np.zeros((0, 2), np.int64), b"")
        return Records(np.concatenate(blobs), np.concatenate(offs), np.concatenate(kinds),
                       np.concatenate(strs), b"".join(arenas))


class CSink:
    """The C callbacks (``_cuptibuf.c``). ``functions`` are the addresses of libcupti's
    ``cuptiActivityGetNextRecord`` and ``cuptiActivityGetNumDroppedRecords``."""

    implementation = "c"

    def __init__(self, next_record: int, dropped: int, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        if _cuptibuf is None:
            raise RuntimeError("polyprof.plugins.cupti._cuptibuf is not built")
        _cuptibuf.discard()
        _cuptibuf.reset_counts()
        _cuptibuf.configure(int(next_record), int(dropped), int(buffer_bytes), STRING_TABLE)

    def register(self, register_address: int) -> int:
        """Hand CUPTI the two C callbacks; CUPTI's result code (0: success)."""
        return int(_cuptibuf.register_callbacks(int(register_address)))

    @staticmethod
    def addresses() -> tuple[int, int]:
        """The buffer-requested and buffer-completed callbacks (for a fake CUPTI)."""
        return int(_cuptibuf.request_address()), int(_cuptibuf.complete_address())

    def take(self) -> list[Batch]:
        return [Batch(*t) for t in _cuptibuf.take()]

    def counts(self) -> dict[str, int]:
        return dict(_cuptibuf.counts())

    def discard(self) -> None:
        _cuptibuf.discard()


class PySink:
    """cupti-python's own buffer callbacks: each completed buffer arrives as a list of
    the binding's record objects; their bytes are copied into one array per buffer."""

    implementation = "python"

    def __init__(self, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self.buffer_bytes = int(buffer_bytes)
        self._lock = threading.Lock()
        self._batches: list[Batch] = []
        self._sizes: dict[type, int] = {}
        self._counts = {"buffers_requested": 0, "buffers_completed": 0, "records": 0, "dropped": 0,
                        "buffers_not_allocated": 0, "walks_cut_short": 0, "bytes": 0}

    def request(self) -> tuple[int, int]:
        """The binding's buffer-requested callback: (buffer size, max records: 0 = any)."""
        self._counts["buffers_requested"] += 1
        return self.buffer_bytes, 0

    def _size(self, a: Any) -> int:
        """sizeof() of the struct behind one of the binding's record objects: the itemsize
        of the binding's dtype for its class (``ActivityMemcpyPtoP4`` ->
        ``activity_memcpy_pto_p4_dtype``)."""
        t = type(a)
        size = self._sizes.get(t)
        if size is None:
            from cupti import cupti as binding

            snake = _CAMEL.sub("_", t.__name__).lower()
            dtype = getattr(binding, snake + "_dtype", None)
            size = int(dtype.itemsize) if dtype is not None else layout.RECORD_SIZE[int(a.kind)]
            self._sizes[t] = size
        return size

    def complete(self, activities: Sequence[Any]) -> None:
        """The binding's buffer-completed callback."""
        n = len(activities)
        kinds = np.fromiter((a.kind for a in activities), np.int32, n)
        sizes = np.fromiter((self._size(a) for a in activities), np.int64, n)
        padded = sizes + (-sizes) % layout.ALIGNMENT
        offsets = np.zeros(n, np.int64)
        if n:
            np.cumsum(padded[:-1], out=offsets[1:])
        blob = np.zeros(int(padded.sum()), np.uint8)
        base = blob.ctypes.data
        memmove = ctypes.memmove
        for a, off, size in zip(activities, offsets.tolist(), sizes.tolist()):
            memmove(base + off, a.ptr, size)
        strings = np.full((n, 2), -1, np.int64)
        arena = bytearray()
        for i in np.flatnonzero(np.isin(kinds, list(layout.STRING_FIELDS))).tolist():
            a = activities[i]
            texts = (a.name, a.domain) if kinds[i] == layout.MARKER else (a.name,)
            for j, text in enumerate(texts):
                if text:  # the binding gives "" for a NULL pointer
                    strings[i, j] = len(arena)
                    arena += text.encode("utf-8", "surrogateescape") + b"\0"
        batch = Batch(blob.tobytes(), offsets.tobytes(), kinds.tobytes(), strings.tobytes(), bytes(arena))
        with self._lock:
            self._batches.append(batch)
            self._counts["buffers_completed"] += 1
            self._counts["records"] += n
            self._counts["bytes"] += len(batch.records)

    def take(self) -> list[Batch]:
        with self._lock:
            out, self._batches = self._batches, []
        return out

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def discard(self) -> None:
        self.take()
