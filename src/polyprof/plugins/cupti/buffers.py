"""Where CUPTI's completed activity buffers go, and the one form they take for decoding.

Two sinks fill the same batches, ``(records, offsets, kinds, strings, arena)``: the
valid bytes of one buffer, each record's offset (int64) and kind (int32), two string
slots per record (int64 offsets into ``arena``, NUL-terminated text; -1 for none).

- :class:`CSink` (the default): ``_cuptibuf.c`` registers two C callbacks with the
  libcupti cupti-python loaded, and walks each completed buffer with
  ``cuptiActivityGetNextRecord`` without the GIL: no Python object per record.
- :class:`PySink` (``POLYPROF_PURE_PYTHON=1``, or no C compiler at install): cupti-python's
  ``activity_register_callbacks``; the binding hands each completed buffer over as a
  list of its record objects (``ActivityKernel13`` ...), and this sink copies the
  buffer's records in one span, from their addresses (``.ptr``), not their objects.

The binding's path costs a Python object per record in the binding before polyprof sees
anything (docs/benchmarks.md, "CUPTI record handling"); that is why the C sink exists.
``tests/test_cupti.py`` feeds the same records to both and checks the decoded columns
are equal. ``IMPLEMENTATION`` says which sink a session uses.

Both leave out the runtime and driver calls they are given as ``not_kept`` (``(kind,
cbid)`` pairs: the plugin's calls that only query state), counting each one's calls and
time instead (``calls_not_kept()``); the C sink also moves their bytes out of the buffer.
"""

from __future__ import annotations

from types import ModuleType

import ctypes
import logging
import operator
import threading
from typing import Any, NamedTuple, Sequence

import numpy as np

from . import layout
from ...lowlevel.compiled import optional

log = logging.getLogger("polyprof")

_cuptibuf = optional(__package__, "_cuptibuf")  # the Python sink otherwise (lowlevel/compiled.py)


def _compiled() -> ModuleType:
    """The compiled buffers (the class below is used only with them)."""
    if _cuptibuf is None:
        raise RuntimeError("polyprof.plugins.cupti._cuptibuf is not built")
    return _cuptibuf


_KIND = operator.attrgetter("kind")
_PTR = operator.attrgetter("ptr")

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
    def of(batches: list[Batch]) -> "Records":
        """The batches concatenated. ``batches`` is emptied as it is copied: each batch's
        memory goes as soon as its bytes are in place, so the peak is one copy of a
        session's records and one batch, not two copies."""
        sizes = [(len(b.kinds) // 4, len(b.records) + (-len(b.records)) % layout.ALIGNMENT, len(b.arena))
                 for b in batches]
        n, nbytes, narena = (sum(col) for col in zip(*sizes)) if sizes else (0, 0, 0)
        blob = np.zeros(nbytes, np.uint8)
        offsets = np.empty(n, np.int64)
        kinds = np.empty(n, np.int32)
        strings = np.empty((n, 2), np.int64)
        arena = bytearray(narena)
        row = base = abase = 0
        batches.reverse()  # popped from the end: the first batch first
        for m, size, asize in sizes:
            b = batches.pop()
            blob[base:base + len(b.records)] = np.frombuffer(b.records, np.uint8)
            offsets[row:row + m] = np.frombuffer(b.offsets, np.int64)[:m] + base
            kinds[row:row + m] = np.frombuffer(b.kinds, np.int32)[:m]
            s = np.frombuffer(b.strings, np.int64)[:2 * m].reshape(m, 2)
            strings[row:row + m] = np.where(s >= 0, s + abase, -1)
            arena[abase:abase + asize] = b.arena
            del b
            row, base, abase = row + m, base + size, abase + asize
        return Records(blob, offsets, kinds, strings, bytes(arena))


class CSink:
    """The C callbacks (``_cuptibuf.c``). ``functions`` are the addresses of libcupti's
    ``cuptiActivityGetNextRecord`` and ``cuptiActivityGetNumDroppedRecords``."""

    implementation = "c"

    def __init__(self, next_record: int, dropped: int, buffer_bytes: int = DEFAULT_BUFFER_BYTES,
                 not_kept: Sequence[tuple[int, int]] = ()) -> None:
        _compiled().discard()
        _compiled().reset_counts()
        _compiled().configure(int(next_record), int(dropped), int(buffer_bytes), STRING_TABLE, list(not_kept))

    def register(self, register_address: int) -> int:
        """Hand CUPTI the two C callbacks; CUPTI's result code (0: success)."""
        return int(_compiled().register_callbacks(int(register_address)))

    @staticmethod
    def addresses() -> tuple[int, int]:
        """The buffer-requested and buffer-completed callbacks (for a fake CUPTI)."""
        return int(_compiled().request_address()), int(_compiled().complete_address())

    def take(self) -> list[Batch]:
        return [Batch(*t) for t in _compiled().take()]

    def counts(self) -> dict[str, int]:
        return dict(_compiled().counts())

    def calls_not_kept(self) -> list[tuple[int, int, int, int]]:
        """(kind, cbid, calls, total ns) of each call left out."""
        return [tuple(t) for t in _compiled().calls_not_kept()]

    def discard(self) -> None:
        _compiled().discard()


class PySink:
    """cupti-python's own buffer callbacks: each completed buffer arrives as a list of
    the binding's record objects. Their records lie one after the other in CUPTI's buffer,
    and every record object has the address of its record (``.ptr``, cupti-python 13.0 and
    13.4; 13.0's objects do not expose their bytes otherwise): the span from the first
    record to the end of the last is copied once, each record's offset is its address
    less the first's. Strings are read through their pointers while CUPTI holds them.

    A buffer this sink cannot read (an exception in the binding's callback, which the
    binding would swallow) is never silent: its records are counted as dropped and the
    first lines of why are kept in ``problems`` (the plugin puts them in the trace's
    cupti metadata and the session's warnings)."""

    implementation = "python"
    MAX_PROBLEMS = 5

    def __init__(self, buffer_bytes: int = DEFAULT_BUFFER_BYTES, not_kept: Sequence[tuple[int, int]] = ()) -> None:
        self.buffer_bytes = int(buffer_bytes)
        self._lock = threading.Lock()
        self._batches: list[Batch] = []
        self.problems: list[str] = []
        self._counts = {"calls_not_kept": 0, "buffers_requested": 0, "buffers_completed": 0, "records": 0,
                        "dropped": 0, "buffers_not_allocated": 0, "walks_cut_short": 0, "bytes": 0,
                        "buffers_not_read": 0}
        #: kind * 2**32 + cbid of the calls left out, sorted; what they were: calls, ns
        self._skip = np.unique(np.array([k << 32 | c for k, c in not_kept], np.int64))
        self._not_kept: dict[int, list[int]] = {}

    def request(self) -> tuple[int, int]:
        """The binding's buffer-requested callback: (buffer size, max records: 0 = any)."""
        self._counts["buffers_requested"] += 1
        return self.buffer_bytes, 0

    def complete(self, activities: Sequence[Any]) -> None:
        """The binding's buffer-completed callback: never raises (the binding would
        swallow it); a buffer it cannot read is counted and said."""
        try:
            batch = self.batch(activities)
        except Exception as e:
            n = len(activities) if hasattr(activities, "__len__") else 0
            with self._lock:
                self._counts["dropped"] += n
                self._counts["buffers_not_read"] += 1
                if len(self.problems) < self.MAX_PROBLEMS:
                    self.problems.append(f"the Python buffer sink could not read a completed CUPTI buffer of {n} "
                                         f"records ({type(e).__name__}: {e}); they are counted as dropped")
            return
        with self._lock:
            self._batches.append(batch)
            self._counts["buffers_completed"] += 1
            self._counts["records"] += len(batch.kinds) // 4
            self._counts["bytes"] += len(batch.records)

    def _leave_out(self, kinds: np.ndarray, offsets: np.ndarray, blob: np.ndarray) -> np.ndarray:
        """The rows to keep: the calls of ``not_kept`` counted (calls, time) and left out."""
        api = np.flatnonzero((kinds == layout.DRIVER) | (kinds == layout.RUNTIME))
        if not len(api) or not len(self._skip):
            return np.arange(len(kinds))

        def field(off: int, dtype: type) -> np.ndarray:
            return gather(blob, offsets[api] + off, dtype)

        key = kinds[api].astype(np.int64) << 32 | field(4, np.uint32).astype(np.int64)
        sel = np.isin(key, self._skip)
        out = api[sel]
        if len(out):
            start, end = field(8, np.uint64)[sel], field(16, np.uint64)[sel]
            ns = np.where(end > start, end - start, 0).astype(np.int64)
            uniq, inv = np.unique(key[sel], return_inverse=True)
            calls = np.bincount(inv.reshape(-1), minlength=len(uniq))
            total = np.bincount(inv.reshape(-1), weights=ns, minlength=len(uniq))
            with self._lock:
                self._counts["calls_not_kept"] += len(out)
                for k, c, t in zip(uniq.tolist(), calls.tolist(), total.tolist()):
                    was = self._not_kept.setdefault(k, [0, 0])
                    was[0] += int(c)
                    was[1] += int(t)
        keep = np.ones(len(kinds), bool)
        keep[out] = False
        return np.flatnonzero(keep)

    def calls_not_kept(self) -> list[tuple[int, int, int, int]]:
        """(kind, cbid, calls, total ns) of each call left out."""
        with self._lock:
            return [(k >> 32, k & 0xFFFFFFFF, c, t) for k, (c, t) in sorted(self._not_kept.items())]

    def batch(self, activities: Sequence[Any]) -> Batch:
        """One buffer's records as a Batch: one copy of CUPTI's bytes, offsets from ``.ptr``."""
        n = len(activities)
        if not n:
            return Batch(b"", b"", b"", b"", b"")
        kinds = np.fromiter(map(_KIND, activities), np.int32, n)
        ptrs = np.fromiter(map(_PTR, activities), np.uint64, n)
        offsets = (ptrs - ptrs[0]).astype(np.int64)
        if n > 1 and not (np.diff(offsets) > 0).all():
            raise ValueError("the records' addresses do not increase through the buffer")
        if (offsets % layout.ALIGNMENT).any():
            raise ValueError(f"a record is not {layout.ALIGNMENT}-byte aligned in the buffer")
        last = int(offsets[-1])
        end = last + layout.RECORD_SIZE.get(int(kinds[-1]), layout.ALIGNMENT)
        if last + layout.ALIGNMENT > self.buffer_bytes:
            raise ValueError(f"the records span {last + layout.ALIGNMENT} bytes, more than the "
                             f"{self.buffer_bytes}-byte buffer")
        end = min(end, self.buffer_bytes)  # the last record's struct may be smaller in older CUPTI
        blob = ctypes.string_at(int(ptrs[0]), end)
        blob += bytes((-len(blob)) % layout.ALIGNMENT)
        keep = self._leave_out(kinds, offsets, np.frombuffer(blob, np.uint8))
        kinds, offsets = kinds[keep], offsets[keep]  # the calls left out stay in the copied span, unread
        strings, arena = _strings(kinds, offsets, np.frombuffer(blob, np.uint8))
        return Batch(blob, offsets.tobytes(), kinds.tobytes(), strings.tobytes(), arena)

    def take(self) -> list[Batch]:
        with self._lock:
            out, self._batches = self._batches, []
        return out

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def discard(self) -> None:
        self.take()


def gather(blob: np.ndarray, pos: np.ndarray, dtype: type | np.dtype) -> np.ndarray:
    """The values of ``dtype`` at the byte positions ``pos`` of ``blob`` (uint8), whatever
    their alignment: a byte gather."""
    size = np.dtype(dtype).itemsize
    return np.ascontiguousarray(blob[pos[:, None] + np.arange(size)]).view(dtype).reshape(-1)


def _strings(kinds: np.ndarray, offsets: np.ndarray, blob: np.ndarray) -> tuple[np.ndarray, bytes]:
    """The string slots and arena of one buffer, as the C sink makes them, read through
    CUPTI's pointers while CUPTI holds the strings: a kind whose strings CUPTI shares
    (kernel names) is read once per distinct pointer; NVTX names once per record."""
    n = len(kinds)
    strings = np.full((n, 2), -1, np.int64)
    arena = bytearray()
    memo: dict[bytes, int] = {}

    def put(ptr: int) -> int:
        if ptr == 0:
            return -1
        text = ctypes.string_at(ptr)
        at = memo.get(text)
        if at is None:
            at = memo[text] = len(arena)
            arena.extend(text + b"\0")
        return at

    for kind, o1, o2, cache_by_pointer in STRING_TABLE:
        rows = np.flatnonzero(kinds == kind)
        if not len(rows):
            continue
        for slot, off in enumerate((o1,) if o2 < 0 else (o1, o2)):
            pos = offsets[rows] + off
            ptr = gather(blob, pos, np.uint64)
            if cache_by_pointer:
                uniq, inv = np.unique(ptr, return_inverse=True)
                table = np.array([put(p) for p in uniq.tolist()], np.int64)
                strings[rows, slot] = table[inv.reshape(-1)]
            else:
                strings[rows, slot] = [put(p) for p in ptr.tolist()]
    return strings, bytes(arena)
