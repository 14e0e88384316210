"""torch's CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``, the pickles
pytorch.org/memory_viz opens) as memory events.

A snapshot is a pickled dict of plain data: ``segments`` (what the caching allocator
holds when the snapshot was taken: each segment's blocks, their ``state`` and, with
history recorded, the stack that allocated them) and ``device_traces`` (one list per
device: the allocator's history, oldest first, each entry a dict with ``action``,
``addr``, ``size``, ``stream``, ``time_us`` (torch 2.1 and later) and ``frames``, the
stack innermost first). It is read with an unpickler that refuses every Python object
a pickle may name (a snapshot names none), so a hostile file cannot run code.

Each device's history becomes one series of allocation events (``trace/keys.py``:
``alloc_bytes``, ``addr``, ``memory_device`` ``/device:GPU:N``, ``allocator`` torch),
on the host plane's ``CUDA caching allocator`` track, each with the allocator's
totals after it (``total_allocated``, ``total_reserved``), the stack as text
(``stack``, Python frames outermost first, where the stack has them) and the
innermost ATen op in it (``op``):

- ``alloc`` allocates; ``free_completed`` frees (the block is back in the allocator's
  cache: what ``torch.cuda.memory_allocated`` counts, as memory_viz's trace does);
  ``free_requested`` is the program's ``del``, not counted (the block may still be in
  use on a stream); ``free`` (older torch) frees;
- ``segment_alloc`` / ``segment_map`` reserve, ``segment_free`` / ``segment_unmap``
  give back (``total_reserved``: the segments held at the snapshot, less what the
  history reserved since its start);
- ``oom`` is an ``OutOfMemoryError`` event (``alloc_bytes`` 0, ``requested_bytes`` and
  ``device_free``), ``snapshot`` marks are left out.

Memory allocated before the history began is not in it: a free of a block the history
never allocated, and a block still allocated at the snapshot that the history never
allocated, are allocations at the history's start (with the block's own stack where
the snapshot has it), so every level is what the allocator held. A snapshot without
history gives its allocated blocks at time 0. Times are ``time_us``; a history without
them (torch before 2.1, or torch's converter of a profile,
``torch.cuda._memory_viz._profile_to_snapshot``) is given 1 µs per entry, in order, and
its metadata says so.

The file names its devices by index only: ``/device:GPU:N`` for index N (the profile
converter puts the CPU after the GPUs; with none, at 0).
"""

from __future__ import annotations

import io
import logging
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from ..trace.stats import TextCodes
from .safety import guarded

log = logging.getLogger("polyprof")

#: a snapshot's history is bounded by ``max_entries``; its Python objects are ~4.5x the file
_MAX_BYTES = 1 << 30
_FIRST_KEYS = (b"segments", b"device_traces")
_OP = re.compile(r"at::_ops::([A-Za-z0-9_]+)::(?:call|redispatch)\(")
#: the allocator's own frames at the top of every stack: not where the memory was asked for
_OWN_FRAMES = ("torch::unwind", "torch::CapturedTraceback", "torch::cuda::", "c10::cuda::CUDACachingAllocator",
               "c10::")
_STACK_DEPTH = 12
_NODE = re.compile(r"torch::autograd::generated::([A-Za-z0-9_]+)::apply\(")
#: ATen ops that only allocate: the op a block is charged to is the innermost other one
_FACTORIES = ("aten::empty", "aten::new_empty")
#: the stack of a block allocated before the history began, which the snapshot lacks
BEFORE = "(allocated before the snapshot's history began)"
TRACK = "CUDA caching allocator"
_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


def sniff(head: bytes, path: Path) -> bool:
    """A pickle (protocol 2 or later) whose first dict key is a snapshot's."""
    return len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and any(k in head[:80] for k in _FIRST_KEYS)


class _PlainData(pickle.Unpickler):
    """Plain data only: any Python object the pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names a Python object, {module}.{name}, which a memory snapshot never "
                                     "does (refused: unpickling it could run code)")


def _read(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > _MAX_BYTES:
            raise TraceFormatError(path, f"a memory snapshot of {size / 2**30:.1f} GiB, more than 1 GiB (its Python "
                                         "objects take ~4.5x the file): record a shorter history "
                                         "(_record_memory_history(max_entries=...))")
        raw = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    try:
        doc = _PlainData(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError) as e:
        raise TraceFormatError(path, f"not a readable memory snapshot pickle: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
        raise TraceFormatError(path, "a pickle, but not a torch memory snapshot: expected a dict with 'segments' "
                                     "and 'device_traces' (torch.cuda.memory._dump_snapshot)")
    if not isinstance(doc.get("device_traces", []), list):
        raise TraceFormatError(path, "a memory snapshot whose 'device_traces' is not a list")
    return doc


def _int(path: Path, where: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**62) <= v < 2**62:
        raise TraceFormatError(path, f"a memory snapshot with {where} {v!r}: expected an integer")
    return v


Entry = tuple[str, int, int, object, "int | None", str, int]


def _entries(path: Path, dev: int, trace: object) -> list[Entry]:
    """(action, addr, size, frames, time_us or None, category, device_free) of a
    device's history, checked."""
    if not isinstance(trace, list):
        raise TraceFormatError(path, f"a memory snapshot whose device {dev} history is not a list")
    out = []
    for i, e in enumerate(trace):
        if not isinstance(e, dict) or not isinstance(e.get("action"), str):
            raise TraceFormatError(path, f"a memory snapshot whose device {dev} entry {i} is not an action dict")
        where = f"device {dev} entry {i} ({e['action']})"
        t = e.get("time_us")
        out.append((e["action"], _int(path, f"{where} addr", e.get("addr", 0)),
                    _int(path, f"{where} size", e.get("size", 0)), e.get("frames"),
                    None if t is None else _int(path, f"{where} time_us", t), str(e.get("category") or ""),
                    _int(path, f"{where} device_free", e.get("device_free", 0))))
    return out


def _live_blocks(path: Path, segments: list[Any], dev: int) -> list[tuple[int, int, object]]:
    """(addr, size, frames) of the blocks allocated on device ``dev`` at the snapshot,
    and the bytes its segments reserved (as the last item's size, addr -1)."""
    out, reserved = [], 0
    for s in segments:
        if not isinstance(s, dict) or s.get("device", 0) != dev:
            continue
        reserved += _int(path, "a segment's total_size", s.get("total_size", 0))
        at = s.get("address") or 0  # blocks without an address lie one after another (memory_viz)
        for b in s.get("blocks") or ():
            if not isinstance(b, dict):
                continue
            addr = _int(path, "a block's address", b.get("address", at))
            at = addr + _int(path, "a block's size", b.get("size", 0))
            if b.get("state") == "active_allocated":
                out.append((addr,
                            _int(path, "a block's size", b.get("requested_size", b.get("size", 0))), b.get("frames")))
    out.append((-1, reserved, None))
    return out


def _text(frames: object) -> tuple[str, str]:
    """(stack, op) of a stack given innermost first: its Python frames outermost first
    (``file.py:line function``), else (an autograd thread's C++ stack) its autograd nodes
    and ATen ops, else the frames' names; and the innermost ATen op that is not a bare
    allocation (``empty*``), as ATen's operator struct names it (``mul_Tensor``: the
    overload joined by ``_``)."""
    if frames == BEFORE:
        return BEFORE, ""
    if not isinstance(frames, list) or not frames:
        return "", ""
    names = [str(f.get("name", "")) for f in frames if isinstance(f, dict)]
    ops = [f"aten::{m.group(1)}" for n in names if (m := _OP.match(n))]
    op = next((o for o in ops if not o.startswith(_FACTORIES)), ops[0] if ops else "")
    py = [f for f in frames if isinstance(f, dict) and str(f.get("filename", "")).endswith(".py")]
    if py:
        parts = [f"{Path(str(f['filename'])).name}:{f.get('line', 0)} {f.get('name', '')}" for f in py]
    else:
        marks = [f"aten::{m.group(1)}" if (m := _OP.match(n)) else a.group(1) if (a := _NODE.match(n)) else ""
                 for n in names]
        kept = [x for x in marks if x]
        parts = [x for i, x in enumerate(kept) if i == 0 or x != kept[i - 1]]  # (call, then redispatch)
        parts = parts or [n for n in names if not n.startswith(_OWN_FRAMES)]
    return " > ".join(reversed(parts[:_STACK_DEPTH])), op


def _device(path: Path, doc: dict[str, Any], dev: int, trace: object) -> dict[str, Any] | None:
    """One device's memory events as columns (None: nothing on it)."""
    entries = _entries(path, dev, trace)
    *blocks, (_, reserved_end, _) = _live_blocks(path, doc["segments"], dev)
    if not entries and not blocks:
        return None
    timed = bool(entries) and all(e[4] is not None for e in entries)
    t_us = [int(e[4]) for e in entries] if timed else list(range(len(entries)))  # type: ignore[arg-type]
    start = min(t_us) if t_us else 0
    rows: list[tuple[int, str, int, int, object, int]] = []  # (time, kind, bytes, addr, frames, reserve delta)
    category: dict[int, str] = {}  # row -> what the block holds (a profile converter's entries say)
    ooms: dict[int, tuple[int, int]] = {}  # row -> (bytes asked for, bytes the device had free)
    live: dict[int, int] = {}
    before: list[tuple[int, int, object]] = []
    for (action, addr, size, frames, _, cat, free), t in zip(entries, t_us):
        if action == "alloc":
            live[addr] = size
            if cat:
                category[len(rows)] = cat
            rows.append((t, "[memory]", size, addr, frames, 0))
        elif action in ("free_completed", "free"):
            if live.pop(addr, None) is None:
                before.append((addr, size, frames))  # allocated before the history began
            rows.append((t, "[memory]", -size, addr, frames, 0))
        elif action in _RESERVE:
            rows.append((t, "[segment]", 0, addr, frames, _RESERVE[action] * size))
        elif action == "oom":
            ooms[len(rows)] = (size, free)
            rows.append((t, "OutOfMemoryError", 0, addr, frames, 0))
    before += [b for b in blocks if b[0] not in live]
    rows = [(start, "[memory]", size, addr, frames or BEFORE, 0) for addr, size, frames in before] + rows
    category = {i + len(before): c for i, c in category.items()}
    ooms = {i + len(before): v for i, v in ooms.items()}
    n = len(rows)
    delta = np.fromiter((r[2] for r in rows), np.int64, n)
    reserve = np.fromiter((r[5] for r in rows), np.int64, n)
    reserved = reserved_end - int(reserve.sum()) + np.cumsum(reserve)
    texts = [_text(r[4]) for r in rows]
    return {"ts": np.fromiter((r[0] for r in rows), np.int64, n) * 1000, "name": [r[1] for r in rows],
            "delta": delta, "addr": np.fromiter((r[3] for r in rows), np.int64, n), "allocated": np.cumsum(delta),
            "reserved": reserved, "category": category, "ooms": ooms, "timed": timed,
            "stack": [s for s, _ in texts], "op": [o for _, o in texts]}


@guarded
def load(path: str | Path) -> Trace:
    """Read a torch memory snapshot pickle (see the module doc)."""
    path = Path(path)
    doc = _read(path)
    traces = doc.get("device_traces") or []
    devices = sorted({i for i in range(len(traces))} | {int(s.get("device", 0)) for s in doc["segments"]
                                                         if isinstance(s, dict) and isinstance(s.get("device", 0), int)})
    b = TraceBuilder({"title": f"torch memory snapshot {path.name}"})
    host = b.plane(keys.HOST_PLANE, "host")
    track = b.track(host, TRACK)
    untimed = []
    for dev in devices:
        cols = _device(path, doc, dev, traces[dev] if dev < len(traces) else [])
        if cols is None:
            continue
        if not cols["timed"] and len(cols["ts"]):
            untimed.append(dev)
        alloc = np.array([nm == "[memory]" for nm in cols["name"]], bool)
        rows = b.events(track, np.asarray(cols["name"], object), cols["ts"], np.zeros(len(cols["ts"]), np.int64),
                        keys.CAT_MEMORY)
        m = np.flatnonzero(alloc)
        plane_name = f"/device:GPU:{dev}"
        b.add_stat(keys.ALLOC_BYTES, rows[m], cols["delta"][m])
        b.add_stat(keys.ADDR, rows[m], cols["addr"][m])
        b.add_stat(keys.MEMORY_DEVICE, rows[m], TextCodes(np.zeros(len(m), np.uint8), (plane_name,)))
        b.add_stat(keys.ALLOCATOR, rows[m], TextCodes(np.zeros(len(m), np.uint8), ("torch",)))
        b.add_stat(keys.TOTAL_ALLOCATED, rows[m], cols["allocated"][m])
        b.add_stat(keys.TOTAL_RESERVED, rows, cols["reserved"])
        for key, vals in ((keys.STACK, cols["stack"]), (keys.OP, cols["op"])):
            have = np.flatnonzero(np.asarray([bool(v) for v in vals], bool))
            if len(have):
                b.add_stat(key, rows[have], np.asarray([vals[i] for i in have], object))
        if cols["category"]:
            at = np.fromiter(cols["category"], np.int64, len(cols["category"]))
            b.add_stat(keys.MEMORY_CATEGORY, rows[at], np.asarray(list(cols["category"].values()), object))
        for i, (asked, free) in cols["ooms"].items():
            b.add_stat("requested_bytes", rows[i:i + 1], np.asarray([asked], np.int64))
            b.add_stat("device_free", rows[i:i + 1], np.asarray([free], np.int64))
            b.add_stat(keys.MEMORY_DEVICE, rows[i:i + 1], TextCodes(np.zeros(1, np.uint8), (plane_name,)))
    if untimed:
        b.metadata[mkeys.WARNINGS] = [f"memory snapshot: the history of device(s) {untimed} has no times (torch "
                                      "before 2.1, or a profile's converter): its entries are 1 µs apart, in order"]
    settings = doc.get("allocator_settings")
    b.metadata[mkeys.TORCH_MEMORY_SNAPSHOT] = {
        "devices": devices, "entries": [len(t) if isinstance(t, list) else 0 for t in traces],
        "segments": len(doc["segments"]), **({"allocator_settings": settings} if isinstance(settings, dict) else {})}
    return b.build()
