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

import logging
import operator
import os
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

_KIND = operator.attrgetter("kind")

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
        self._counts = {"buffers_requested": 0, "buffers_completed": 0, "records": 0, "dropped": 0,
                        "buffers_not_allocated": 0, "walks_cut_short": 0, "bytes": 0}

    def request(self) -> tuple[int, int]:
        """The binding's buffer-requested callback: (buffer size, max records: 0 = any)."""
        self._counts["buffers_requested"] += 1
        return self.buffer_bytes, 0

    def complete(self, activities: Sequence[Any]) -> None:
        """The binding's buffer-completed callback. Its record objects expose their
        struct's bytes (the buffer protocol): the kinds in one pass, the bytes of every
        record in one ``bytes.join``; the strings of the few kinds that point to some."""
        n = len(activities)
        kinds = np.fromiter(map(_KIND, activities), np.int32, n)
        sizes = self._sizes_of(kinds, activities)
        pad = (-sizes) % layout.ALIGNMENT
        if pad.any():  # CUPTI's structs are multiples of 8 bytes; pad any that is not
            parts: list[Any] = []
            for a, p in zip(activities, pad.tolist()):
                parts.append(a)
                if p:
                    parts.append(bytes(p))
            blob = b"".join(parts)
        else:
            blob = b"".join(activities)
        offsets = np.zeros(n, np.int64)
        if n:
            np.cumsum((sizes + pad)[:-1], out=offsets[1:])
        strings, arena = self._strings(activities, kinds, offsets, np.frombuffer(blob, np.uint8))
        batch = Batch(blob, offsets.tobytes(), kinds.tobytes(), strings.tobytes(), bytes(arena))
        with self._lock:
            self._batches.append(batch)
            self._counts["buffers_completed"] += 1
            self._counts["records"] += n
            self._counts["bytes"] += len(batch.records)

    @staticmethod
    def _strings(activities: Sequence[Any], kinds: np.ndarray, offsets: np.ndarray,
                 blob: np.ndarray) -> tuple[np.ndarray, bytes]:
        """The string slots and arena of one buffer, as the C sink makes them: a kind whose
        strings CUPTI shares (kernel names) is read once per distinct pointer; NVTX names
        once per record."""
        n = len(kinds)
        strings = np.full((n, 2), -1, np.int64)
        arena = bytearray()
        memo: dict[str, int] = {}

        def put(text: str) -> int:
            at = memo.get(text)
            if at is None:
                at = memo[text] = len(arena)
                arena.extend(text.encode("utf-8", "surrogateescape") + b"\0")
            return at

        for kind, cache_by_pointer, offs in [(k, c, (o1,) if o2 < 0 else (o1, o2)) for k, o1, o2, c in STRING_TABLE]:
            rows = np.flatnonzero(kinds == kind)
            if not len(rows):
                continue
            if cache_by_pointer:
                pos = offsets[rows] + offs[0]
                ptr = blob[pos[:, None] + np.arange(8)].copy().view(np.uint64).reshape(-1)
                uniq, first, inv = np.unique(ptr, return_index=True, return_inverse=True)
                table = np.array([-1 if p == 0 else put(activities[rows[f]].name or "") for p, f in
                                  zip(uniq.tolist(), first.tolist())], np.int64)
                strings[rows, 0] = table[inv.reshape(-1)]
                continue
            for i in rows.tolist():  # NVTX: the binding's "" is a NULL pointer
                a = activities[i]
                for j, text in enumerate((a.name, a.domain)[:len(offs)]):
                    if text:
                        strings[i, j] = put(text)
        return strings, bytes(arena)

    @staticmethod
    def _sizes_of(kinds: np.ndarray, activities: Sequence[Any]) -> np.ndarray:
        """sizeof() of each record's struct: the first record of each kind tells it."""
        uniq, first, inv = np.unique(kinds, return_index=True, return_inverse=True)
        table = np.fromiter((memoryview(activities[f]).nbytes for f in first.tolist()), np.int64, len(uniq))
        return table[inv.reshape(-1)]

    def take(self) -> list[Batch]:
        with self._lock:
            out, self._batches = self._batches, []
        return out

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def discard(self) -> None:
        self.take()
