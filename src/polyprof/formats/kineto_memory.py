"""Kineto's ``[memory]`` events -> polyprof's memory stats (``trace/keys.py``).

``torch.profiler(profile_memory=True)`` writes one instant event per allocation and
free, named ``[memory]``, on the thread that made it, with args ``Bytes`` (negative for
a free), ``Addr``, ``Total Allocated``, ``Total Reserved``, ``Device Type`` (c10's
DeviceType: 0 CPU, 1 CUDA, ...) and ``Device Id``. The first ones (2021) had only
``Bytes``, ``Device Type`` and ``Device Id`` (TensorBoard's plugin's resnet50 samples):
an event is a memory event when its ``Bytes`` is an integer beside ``Total Allocated``
or ``Device Type``; without totals, the bytes held are the running sum of ``Bytes``
(``trace/memory.py``). The reader types these at load (only
the arg batches that hold such events are decoded for it), so the memory analyses never
make the other, deferred args decode. The args also stay under their own names.

A batch's integers are read from its text in one compiled pass (``_kineto_memory.c``:
the memory events' six int64 columns, no object per event); what that pass does not
read plainly goes to msgspec's typed decode, and what that does not take (other value
types, polyprof's own spelling) to the general path over the decoded args.
``IMPLEMENTATION`` says whether the compiled pass is in use (``POLYPROF_PURE_PYTHON=1``:
msgspec's). The allocator and the device are given as codes into their few names
(``trace.stats.TextCodes``), and every stat a batch's memory events all have at one
rows array, which the Trace's columns then share.
"""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter
from typing import Any, Callable

import msgspec
import numpy as np

from ..trace import keys
from ..trace.sorting import unique_inverse
from ..trace.stats import TextCodes
from ..lowlevel.compiled import optional

_kineto_memory = optional(__package__, "_kineto_memory")  # built by setup.py; msgspec types every batch otherwise (lowlevel/compiled.py)
#: "c" (``_kineto_memory.c``) or "python" (msgspec's typed decode): which reads a batch's integers
IMPLEMENTATION = "c" if _kineto_memory is not None else "python"

#: polyprof's memory stat keys: typed at load, never left to the deferred decode
MEMORY_KEYS = frozenset({keys.ALLOC_BYTES, keys.ADDR, keys.TOTAL_ALLOCATED, keys.TOTAL_RESERVED,
                         keys.MEMORY_DEVICE, keys.ALLOCATOR, keys.MEMORY_CATEGORY})
#: a batch of args holds memory events only if its text has one of these ("Device Type":
#: the first ones (2021, torch 1.8-era), which have no "Total Allocated")
MARKERS = (b'"Total Allocated"', b'"Device Type"', b'"alloc_bytes"')
_KINETO = {"Bytes": keys.ALLOC_BYTES, "Addr": keys.ADDR, "Total Allocated": keys.TOTAL_ALLOCATED,
           "Total Reserved": keys.TOTAL_RESERVED}
#: c10::DeviceType -> polyprof's plane kind (docs: c10/core/DeviceType.h)
_DEVICE_TYPES = {1: "GPU", 4: "OpenCL", 6: "GPU", 9: "XLA", 12: "XPU", 13: "MPS", 15: "HPU", 18: "IPU",
                 19: "MTIA", 20: "PrivateUse1"}


_ABSENT = -2 ** 63
#: (rows, values) by stat key; text values as codes into their few names
_Stats = dict[str, tuple[np.ndarray, "np.ndarray | TextCodes"]]


class _KinetoMemory(msgspec.Struct, gc=False):
    """The memory args of an event, when they are integers as Kineto writes them."""

    nbytes: int = msgspec.field(default=_ABSENT, name="Bytes")
    addr: int = msgspec.field(default=_ABSENT, name="Addr")
    total: int = msgspec.field(default=_ABSENT, name="Total Allocated")
    reserved: int = msgspec.field(default=_ABSENT, name="Total Reserved")
    dtype: int = msgspec.field(default=_ABSENT, name="Device Type")
    did: int = msgspec.field(default=_ABSENT, name="Device Id")


@lru_cache(maxsize=1)
def _decode_fast() -> Callable[[bytes], list[_KinetoMemory]]:
    """msgspec's typed decoder of a batch, made on first use: a batch the compiled pass
    did not read whole (resolving the record's annotations at import cost every start)."""
    return msgspec.json.Decoder(list[_KinetoMemory]).decode

_FIELDS = (("nbytes", keys.ALLOC_BYTES), ("addr", keys.ADDR), ("total", keys.TOTAL_ALLOCATED),
           ("reserved", keys.TOTAL_RESERVED))


def has_memory(text: bytes) -> bool:
    return any(m in text for m in MARKERS)


def batch_stats(text: bytes, base: int, decode_any: Any) -> _Stats:
    """The memory stats of one batch of args (JSON text ``[args, ...]`` from row
    ``base``): typed columns straight from the text when the args are Kineto's integers
    (no dict per event), else through ``memory_stats`` on the decoded args."""
    got = _kineto_memory.columns(text) if _kineto_memory is not None else None
    if got is not None and not got[10]:  # read whole, and no "alloc_bytes" in the text (found by the same pass)
        out = _compiled_columns(got, base)
        if out is not None:
            return _bounded(out)
    if b'"alloc_bytes"' not in text:
        try:
            return _bounded(_columns(_decode_fast()(text), base))
        except (msgspec.ValidationError, msgspec.DecodeError, OverflowError):
            pass  # other values, or an address beyond 64 bits: the general path
    return _bounded(memory_stats(decode_any(text), base))


#: a byte count at or beyond this (4 EiB) is damage, not memory (and two such overflow int64)
_LIMIT = 1 << 62
#: the least value each byte count may hold: a block's size may be negative (a free), bytes held not
_LEAST = {keys.ALLOC_BYTES: 1 - _LIMIT, keys.TOTAL_ALLOCATED: 0, keys.TOTAL_RESERVED: 0}


def _bounded(out: _Stats) -> _Stats:
    """``out`` without byte counts beyond +-2**62 or totals below 0 (a damaged file's
    values: an event whose size is dropped is no memory event), in place, alike on
    every path."""
    for key, least in _LEAST.items():
        rows, vals = out.get(key, (None, None))
        if rows is None or not isinstance(vals, np.ndarray):
            continue
        ok: np.ndarray = (vals >= least) & (vals < _LIMIT)
        if not ok.all():
            if ok.any():
                out[key] = (rows[ok], vals[ok])
            else:
                del out[key]
    return out


def _compiled_columns(got: tuple, base: int) -> _Stats | None:
    """:func:`_columns` of the compiled pass's columns (the memory events' alone); None
    where msgspec's path would not take the batch (an address beyond int64 beside a
    negative or missing one)."""
    index, nbytes, addr, total, reserved, dtype, did = (np.frombuffer(b, np.int64) for b in got[:7])
    absent, mixed, one_device = got[7:10]
    if not len(index):
        return {}
    if mixed:
        return None  # as uint64, msgspec's path overflows: the general one reads it
    rows = index + base
    out: _Stats = {}
    for i, (vals, key) in enumerate(((nbytes, keys.ALLOC_BYTES), (addr, keys.ADDR), (total, keys.TOTAL_ALLOCATED),
                                     (reserved, keys.TOTAL_RESERVED))):
        if absent >> i & 1:
            _put(out, key, rows, vals, vals != _ABSENT)
        else:  # every memory event has it (the pass says so): no mask to make
            out[key] = (rows, vals)
    _devices(out, rows, dtype[:1] if one_device else dtype, did[:1] if one_device else did)
    return out


def _column(items: list, field: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(field), items), np.int64, len(items))


def _columns(items: list, base: int) -> _Stats:
    mem = np.flatnonzero((_column(items, "nbytes") != _ABSENT)
                         & ((_column(items, "total") != _ABSENT) | (_column(items, "dtype") != _ABSENT)))
    out: _Stats = {}
    if not len(mem):
        return out
    items = [items[i] for i in mem.tolist()]
    rows = mem + base
    for f, key in _FIELDS:
        if f == "addr":  # addresses are unsigned: the upper half wraps to negative int64
            vals = np.fromiter(map(attrgetter("addr"), items), np.uint64 if _unsigned(items) else np.int64,
                               len(items)).astype(np.int64)
        else:
            vals = _column(items, f)
        _put(out, key, rows, vals, vals != _ABSENT)
    _devices(out, rows, _column(items, "dtype"), _column(items, "did"))
    return out


def _put(out: _Stats, key: str, rows: np.ndarray, vals: np.ndarray, has: np.ndarray) -> None:
    """``key``'s values where ``has``; at ``rows`` itself where every row has one (the
    builder then joins the memory stats' rows once for all of them)."""
    if has.all():
        out[key] = (rows, vals)
    elif has.any():
        out[key] = (rows[has], vals[has])


def _devices(out: _Stats, rows: np.ndarray, dtype: np.ndarray, did: np.ndarray) -> None:
    """The memory's device (from Device Type and Id, by distinct pair) and the allocator,
    as codes into their few names (``TextCodes``: no object per event). ``dtype`` and
    ``did`` are one per row, or one for all of them."""
    if len(dtype) == 1 or (len(dtype) and dtype.min() == dtype.max() and did.min() == did.max()):
        zeros = np.zeros(len(rows), np.uint8)  # one device for the whole batch (the usual case)
        name = _plane(int(dtype[0]), int(did[0]))
        if name is not None:
            out[keys.MEMORY_DEVICE] = (rows, TextCodes(zeros, (name,)))
        out[keys.ALLOCATOR] = (rows, TextCodes(zeros, ("torch",)))
        return
    span = 1 << 21  # (type + 1, id + 1) as one non-negative code, as _plane clips them
    code = (np.clip(np.where(dtype == _ABSENT, -1, dtype), -1, 1 << 20) + 1) * span + np.clip(did, -1, span - 2) + 1
    uniq, inv = unique_inverse(code)  # sorted: np.unique's first call imports numpy.ma
    names = [_plane(c // span - 1, c % span - 1) for c in uniq.tolist()]
    valid = np.array([n is not None for n in names], bool)
    planes = [n for n in names if n is not None]
    if valid.all():
        out[keys.MEMORY_DEVICE] = (rows, TextCodes(inv, planes))
    elif valid.any():  # host memory (the event's own plane) left out
        on = valid[inv]
        out[keys.MEMORY_DEVICE] = (rows[on], TextCodes((np.cumsum(valid) - 1)[inv[on]], planes))
    out[keys.ALLOCATOR] = (rows, TextCodes(np.zeros(len(rows), np.uint8), ("torch",)))


def _plane(dtype: int, did: int) -> str | None:
    """:func:`_device` of a Device Type and Id as int64 (absent: INT64_MIN), clipped to
    the codes' range."""
    dtype = -1 if dtype == _ABSENT else min(max(dtype, -1), 1 << 20)
    if dtype < 0:
        return None
    return _device({"Device Type": dtype, "Device Id": min(max(did, -1), (1 << 21) - 2)})


def _unsigned(items: list) -> bool:
    """Whether an address is beyond int64 (then every one is read as uint64)."""
    try:
        return max(map(attrgetter("addr"), items)) >= 2 ** 63
    except ValueError:
        return False


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -2 ** 63 <= v < 2 ** 63 else None
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 63:
        return int(v)
    return None


def _addr(v: Any) -> int | None:
    """An address as int64: one above 2**63 (a high half of the address space) wraps."""
    if isinstance(v, int) and not isinstance(v, bool) and 2 ** 63 <= v < 2 ** 64:
        return v - 2 ** 64
    return _int(v)


def _device(args: dict) -> str | None:
    """Plane name of the memory's device; None for host memory (the event's own plane)."""
    dt, di = _int(args.get("Device Type")), _int(args.get("Device Id"))
    if dt is None or dt == 0:
        return None
    return keys.device_plane(_DEVICE_TYPES.get(dt, f"DeviceType{dt}"), max(di or 0, 0))


def memory_stats(args: list, base: int) -> _Stats:
    """(rows, values) per memory stat key for one batch of args (``[args, ...]`` from row
    ``base``). An event counts when its ``Bytes`` (or ``alloc_bytes``) is an integer."""
    cols: dict[str, tuple[list[int], list[Any]]] = {k: ([], []) for k in MEMORY_KEYS}

    def put(key: str, row: int, v: Any) -> None:
        if v is not None:
            cols[key][0].append(row)
            cols[key][1].append(v)

    for row, a in enumerate(args, base):
        if type(a) is not dict:
            continue
        if ("Total Allocated" in a or "Device Type" in a) and _int(a.get("Bytes")) is not None:  # Kineto's
            for name, key in _KINETO.items():
                put(key, row, (_addr if key == keys.ADDR else _int)(a.get(name)))
            put(keys.MEMORY_DEVICE, row, _device(a))
            put(keys.ALLOCATOR, row, "torch")
        elif _int(a.get(keys.ALLOC_BYTES)) is not None:  # polyprof's own (its writers)
            for key in (keys.ALLOC_BYTES, keys.ADDR, keys.TOTAL_ALLOCATED, keys.TOTAL_RESERVED):
                put(key, row, (_addr if key == keys.ADDR else _int)(a.get(key)))
            for key in (keys.MEMORY_DEVICE, keys.ALLOCATOR, keys.MEMORY_CATEGORY):
                v = a.get(key)
                put(key, row, v if isinstance(v, str) else None)
    out: _Stats = {}
    for key, (rows, vals) in cols.items():
        if rows:
            kind = object if key in (keys.MEMORY_DEVICE, keys.ALLOCATOR, keys.MEMORY_CATEGORY) else np.int64
            out[key] = (np.asarray(rows, np.int64), np.asarray(vals, dtype=kind))
    return out
