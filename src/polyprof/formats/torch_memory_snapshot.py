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

- ``alloc`` allocates; ``free_completed`` frees; ``free_requested`` is the program's
  ``del``, not counted (the block may still be in use on a stream); ``free`` (older
  torch) frees. The levels are memory_viz's Active Memory Timeline: the sizes asked for,
  held until the free completes. ``torch.cuda.memory_allocated`` counts the blocks'
  rounded sizes and drops at ``free_requested`` (on a transformer's step 0.5% above);
- ``segment_alloc`` / ``segment_map`` reserve, ``segment_free`` / ``segment_unmap``
  give back (``total_reserved``: the segments held at the snapshot, less what the
  history reserved since its start);
- ``oom`` is an ``OutOfMemoryError`` event (``alloc_bytes`` 0, ``requested_bytes``,
  ``device_free``, ``memory_device``), ``snapshot`` marks are left out.

Memory allocated before the history began is no event: it is the level the first event
starts from (``memory_peak``'s ``start_bytes``): the blocks still allocated at the
snapshot that the history never allocated, and the blocks the history frees without
having allocated them. A snapshot without history gives its allocated blocks as
allocations at time 0, as does a pickled ``torch.cuda.memory_snapshot()`` (the list of
segments alone, which torch's ``_memory_viz.py`` also reads). Times are ``time_us``; a
history without them (torch before 2.1, or torch's converter of a profile,
``torch.cuda._memory_viz._profile_to_snapshot``) is given 1 µs per entry, in order, and
a warning says so.

The file names its devices by index only: ``/device:GPU:N`` for index N, except the
profile converter's last index, the CPU's (``/host:CPU``); the converter's segments' sizes
are address spans, not memory reserved, so its events carry no ``total_reserved``. Reading is bounded in work by
the file: the pure-Python unpickler (a dict memo), stacks made once per distinct stack
and from their innermost 256 frames, ``allocator_settings`` kept only as scalars.
"""

from __future__ import annotations

import io
import logging
import pickle
import re
import struct
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
_NODE = re.compile(r"torch::autograd::generated::([A-Za-z0-9_]+)::apply\(")
#: the allocator's own frames at the top of every stack: not where the memory was asked for
_OWN_FRAMES = ("torch::unwind", "torch::CapturedTraceback", "torch::cuda::", "c10::cuda::CUDACachingAllocator",
               "c10::")
_STACK_DEPTH = 12
#: frames of a stack looked at, innermost first (real stacks hold 30-80): a crafted file's
#: stack of a million frames costs no more than this
_MAX_FRAMES = 256
#: ATen ops that only allocate: the op a block is charged to is the innermost other one
_FACTORIES = ("aten::empty", "aten::new_empty")
#: the stack of a block of a snapshot without history that has none
BEFORE = "(allocated before the snapshot's history began)"
TRACK = "CUDA caching allocator"
_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
_LIMIT = 1 << 62
#: what of ``allocator_settings`` is kept in the metadata: scalars, and dicts of them one level down
_SETTINGS_KEYS, _SETTINGS_TEXT = 64, 200


def sniff(head: bytes, path: Path) -> bool:
    """A pickle (protocol 2 or later) whose first dict key is a snapshot's, or a list whose
    first dict is a segment (``torch.cuda.memory_snapshot()``: the segments alone)."""
    if not (len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5):
        return False
    if any(k in head[:80] for k in _FIRST_KEYS):
        return True
    top = 11 if head[2:3] == b"\x95" else 2  # after protocol 4's FRAME opcode, if any
    return head[top:top + 1] == b"]" and b"device" in head[top:top + 40] and b"total_size" in head[top:top + 200]


class _PlainData(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """Plain data only: any Python object the pickle names is refused. The pure-Python
    unpickler: its memo is a dict, where the C one's is an array as long as the largest
    index a file names (42 bytes asking for index 2**26 took 1 GB)."""

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
            MemoryError, RecursionError, struct.error) as e:
        raise TraceFormatError(path, f"not a readable memory snapshot pickle: {e or type(e).__name__}") from None
    if isinstance(doc, list):  # torch.cuda.memory_snapshot(): the segments alone (as _memory_viz.py reads it)
        doc = {"segments": doc, "device_traces": []}
    if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
        raise TraceFormatError(path, "a pickle, but not a torch memory snapshot: expected a dict with 'segments' "
                                     "and 'device_traces' (torch.cuda.memory._dump_snapshot)")
    if not isinstance(doc.get("device_traces", []), list):
        raise TraceFormatError(path, "a memory snapshot whose 'device_traces' is not a list")
    return doc


def _int(path: Path, where: str, v: object) -> int:
    if type(v) is not int or not -_LIMIT <= v < _LIMIT:
        raise TraceFormatError(path, f"a memory snapshot with {where} {v!r}: expected an integer")
    return v


Entry = tuple[str, int, int, object, "int | None", str, int]


def _entries(path: Path, dev: int, trace: object) -> list[Entry]:
    """(action, addr, size, frames, time_us or None, category, device_free) of a
    device's history, checked (the messages made only for an entry that fails)."""
    if not isinstance(trace, list):
        raise TraceFormatError(path, f"a memory snapshot whose device {dev} history is not a list")
    out = []
    for i, e in enumerate(trace):
        if not isinstance(e, dict) or type(e.get("action")) is not str:
            raise TraceFormatError(path, f"a memory snapshot whose device {dev} entry {i} is not an action dict")
        a, z, t, f = e.get("addr", 0), e.get("size", 0), e.get("time_us"), e.get("device_free", 0)
        if not (type(a) is int and type(z) is int and type(f) is int and (t is None or type(t) is int)
                and -_LIMIT <= a < _LIMIT and -_LIMIT <= z < _LIMIT and (t is None or -_LIMIT <= t < _LIMIT)):
            where = f"device {dev} entry {i} ({e['action']})"
            for name, v in (("addr", a), ("size", z), ("device_free", f), ("time_us", 0 if t is None else t)):
                _int(path, f"{where} {name}", v)
        cat = e.get("category")
        out.append((e["action"], a, z, e.get("frames"), t, cat if type(cat) is str else "", f))
    return out


def _segments(path: Path, segments: list[Any]) -> dict[int, tuple[list[tuple[int, int, object]], int]]:
    """Per device: (addr, size, frames) of its blocks allocated at the snapshot, and the
    bytes its segments reserved. A block's size is the size asked for (``requested_size``;
    torch 2.0's blocks: their ``history``'s ``real_size``), as the history records sizes."""
    out: dict[int, tuple[list[tuple[int, int, object]], int]] = {}
    for s in segments:
        if not isinstance(s, dict):
            continue
        dev = _int(path, "a segment's device", s.get("device", 0))
        blocks, reserved = out.get(dev, ([], 0))
        reserved += _int(path, "a segment's total_size", s.get("total_size", 0))
        at = s.get("address") or 0  # blocks without an address lie one after another (memory_viz)
        for b in s.get("blocks") or ():
            if not isinstance(b, dict):
                continue
            addr = _int(path, "a block's address", b.get("address", at))
            at = addr + _int(path, "a block's size", b.get("size", 0))
            if b.get("state") == "active_allocated":
                hist = b.get("history")
                first = hist[0] if isinstance(hist, list) and hist and isinstance(hist[0], dict) else {}
                size = b.get("requested_size", first.get("real_size", b.get("size", 0)))
                blocks.append((addr, _int(path, "a block's size", size), b.get("frames") or first.get("frames")))
        out[dev] = (blocks, reserved)
    return out


class _Stacks:
    """Each stack's (text, op), made once per distinct stack: a history's entries share a
    few hundred stacks (a transformer's step: 178 of 19,342 entries)."""

    def __init__(self) -> None:
        self.by_list: dict[int, tuple[str, str]] = {}
        self.by_frames: dict[tuple[int, ...], tuple[str, str]] = {}

    def text(self, frames: object) -> tuple[str, str]:
        if frames == BEFORE:
            return BEFORE, ""
        if not isinstance(frames, list) or not frames:
            return "", ""
        got = self.by_list.get(id(frames))
        if got is None:
            head = frames[:_MAX_FRAMES]
            key = tuple(map(id, head))
            got = self.by_frames.get(key)
            if got is None:
                got = self.by_frames[key] = _text(head)
            self.by_list[id(frames)] = got
        return got


def _file_name(path: str) -> str:
    """A path's last part, whichever its separator (a snapshot taken on Windows names
    ``D:\\Dev\\model.py``)."""
    return path[max(path.rfind("/"), path.rfind("\\")) + 1:]


def _text(frames: list[Any]) -> tuple[str, str]:
    """(stack, op) of a stack given innermost first: its Python frames outermost first
    (``file.py:line function``), else (an autograd thread's C++ stack) its autograd nodes
    and ATen ops, else the frames' names; and the innermost ATen op that is not a bare
    allocation (``empty*``), as ATen's operator struct names it (``mul_Tensor``: the
    overload joined by ``_``)."""
    fr = [f for f in frames if isinstance(f, dict)]
    names = [str(f.get("name", "")) for f in fr]
    ops = [f"aten::{m.group(1)}" for n in names if (m := _OP.match(n))]
    op = next((o for o in ops if not o.startswith(_FACTORIES)), ops[0] if ops else "")
    py = [(str(f.get("filename", "")), f) for f in fr]
    parts = [f"{_file_name(file)}:{f.get('line', 0)} {f.get('name', '')}" for file, f in py
             if file.endswith(".py")]
    if not parts:
        marks = [f"aten::{m.group(1)}" if (m := _OP.match(n)) else a.group(1) if (a := _NODE.match(n)) else ""
                 for n in names]
        kept = [x for x in marks if x]
        parts = [x for i, x in enumerate(kept) if i == 0 or x != kept[i - 1]]  # (call, then redispatch)
        parts = parts or [n for n in names if not n.startswith(_OWN_FRAMES)]
    return " > ".join(reversed(parts[:_STACK_DEPTH])), op


def _device(path: Path, entries: list[Entry], blocks: list[tuple[int, int, object]], reserved_end: int,
            stacks: _Stacks) -> dict[str, Any] | None:
    """One device's memory events as columns (None: nothing on it). Memory held before
    the history began is no event (it is the level the first event starts from); a
    snapshot without history gives its allocated blocks as allocations at time 0."""
    if not entries and not blocks:
        return None
    timed = bool(entries) and all(e[4] is not None for e in entries)
    t_us = [int(e[4]) for e in entries] if timed else list(range(len(entries)))  # type: ignore[arg-type]
    rows: list[tuple[int, str, int, int, object, int]] = []  # (time, kind, bytes, addr, frames, reserve delta)
    category: dict[int, str] = {}  # row -> what the block holds (a profile converter's entries say)
    ooms: dict[int, tuple[int, int]] = {}  # row -> (bytes asked for, bytes the device had free)
    live: dict[int, int] = {}
    baseline = 0
    for (action, addr, size, frames, _, cat, free), t in zip(entries, t_us):
        if action == "alloc":
            live[addr] = size
            if cat:
                category[len(rows)] = cat
            rows.append((t, "[memory]", size, addr, frames, 0))
        elif action in ("free_completed", "free"):
            if live.pop(addr, None) is None:
                baseline += size  # allocated before the history began
            rows.append((t, "[memory]", -size, addr, frames, 0))
        elif action in _RESERVE:
            rows.append((t, "[segment]", 0, addr, frames, _RESERVE[action] * size))
        elif action == "oom":
            ooms[len(rows)] = (size, free)
            rows.append((t, "OutOfMemoryError", 0, addr, frames, 0))
    before = [b for b in blocks if b[0] not in live]
    if entries:
        baseline += sum(size for _, size, _ in before)
    else:
        rows = [(0, "[memory]", size, addr, frames or BEFORE, 0) for addr, size, frames in before]
    n = len(rows)
    delta = np.fromiter((r[2] for r in rows), np.int64, n)
    reserve = np.fromiter((r[5] for r in rows), np.int64, n)
    texts = [stacks.text(r[4]) for r in rows]
    return {"ts": np.fromiter((r[0] for r in rows), np.int64, n) * 1000, "name": [r[1] for r in rows],
            "delta": delta, "addr": np.fromiter((r[3] for r in rows), np.int64, n),
            "allocated": baseline + np.cumsum(delta), "reserved": reserved_end - int(reserve.sum()) + np.cumsum(reserve),
            "category": category, "ooms": ooms, "timed": timed or not entries,
            "stack": [s for s, _ in texts], "op": [o for _, o in texts]}


def _settings(v: object) -> dict[str, Any] | None:
    """``allocator_settings`` as metadata can hold it: scalars, and dicts of scalars one
    level down, text cut short (a crafted file's shared or circular lists are dropped)."""
    def scalar(x: object) -> bool:
        return x is None or type(x) in (bool, int, float) or (type(x) is str and len(x) <= _SETTINGS_TEXT)

    if not isinstance(v, dict):
        return None
    out: dict[str, Any] = {}
    for k, x in list(v.items())[:_SETTINGS_KEYS]:
        if type(k) is not str:
            continue
        if scalar(x):
            out[k] = x
        elif isinstance(x, dict):
            out[k] = {str(a): y for a, y in list(x.items())[:_SETTINGS_KEYS] if type(a) is str and scalar(y)}
    return out


def _converted(doc: dict[str, Any]) -> bool:
    """Whether the snapshot is torch's converter of a profile (``_profile_to_snapshot``):
    its segments carry no ``segment_type`` (the allocator's do), and their ``total_size``
    is the span from the lowest to the highest address it saw, not memory reserved."""
    segs = [s for s in doc["segments"] if isinstance(s, dict)]
    return bool(segs) and not any("segment_type" in s for s in segs)


def _plane_names(devices: list[int], n_traces: int, converted: bool) -> dict[int, str]:
    """Per device index, the plane its memory is on: ``/device:GPU:N``, but the last index
    of torch's converter of a profile, which is the CPU's."""
    return {d: keys.HOST_PLANE if converted and d == n_traces - 1 else f"/device:GPU:{d}" for d in devices}


@guarded
def load(path: str | Path) -> Trace:
    """Read a torch memory snapshot pickle (see the module doc)."""
    path = Path(path)
    doc = _read(path)
    traces = doc.get("device_traces") or []
    segments = _segments(path, doc["segments"])
    devices = sorted({i for i, t in enumerate(traces) if t} | set(segments))
    converted = _converted(doc)
    planes = _plane_names(devices, len(traces), converted)
    b = TraceBuilder({"title": f"torch memory snapshot {path.name}"})
    track = b.track(b.plane(keys.HOST_PLANE, "host"), TRACK)
    untimed, stacks = [], _Stacks()
    for dev in devices:
        blocks, reserved = segments.get(dev, ([], 0))
        cols = _device(path, _entries(path, dev, traces[dev] if dev < len(traces) else []), blocks, reserved, stacks)
        if cols is None:
            continue
        if not cols["timed"]:
            untimed.append(dev)
        if converted:  # (its segments' sizes are address spans, not reserved memory)
            del cols["reserved"]
        _add(b, track, cols, planes[dev])
    if untimed:
        b.metadata[mkeys.WARNINGS] = [f"memory snapshot: the history of device(s) {untimed} has no times (torch "
                                      "before 2.1, or a profile's converter): its entries are 1 µs apart, in order"]
    settings = _settings(doc.get("allocator_settings"))
    b.metadata[mkeys.TORCH_MEMORY_SNAPSHOT] = {
        "devices": devices, "entries": [len(t) if isinstance(t, list) else 0 for t in traces],
        "segments": len(doc["segments"]), **({"allocator_settings": settings} if settings is not None else {})}
    return b.build()


def _add(b: TraceBuilder, track: int, cols: dict[str, Any], plane_name: str) -> None:
    """One device's columns as events and their stats."""
    alloc = np.array([nm == "[memory]" for nm in cols["name"]], bool)
    rows = b.events(track, np.asarray(cols["name"], object), cols["ts"], np.zeros(len(cols["ts"]), np.int64),
                    keys.CAT_MEMORY)
    m = np.flatnonzero(alloc)
    b.add_stat(keys.ALLOC_BYTES, rows[m], cols["delta"][m])
    b.add_stat(keys.ADDR, rows[m], cols["addr"][m])
    b.add_stat(keys.MEMORY_DEVICE, rows[m], TextCodes(np.zeros(len(m), np.uint8), (plane_name,)))
    b.add_stat(keys.ALLOCATOR, rows[m], TextCodes(np.zeros(len(m), np.uint8), ("torch",)))
    b.add_stat(keys.TOTAL_ALLOCATED, rows[m], cols["allocated"][m])
    if "reserved" in cols:
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
