"""Kineto's ``[memory]`` events -> polyprof's memory stats (``trace/keys.py``).

``torch.profiler(profile_memory=True)`` writes one instant event per allocation and
free, named ``[memory]``, on the thread that made it, with args ``Bytes`` (negative for
a free), ``Addr``, ``Total Allocated``, ``Total Reserved``, ``Device Type`` (c10's
DeviceType: 0 CPU, 1 CUDA, ...) and ``Device Id``. The reader types these at load (only
the arg batches that hold such events are decoded for it), so the memory analyses never
make the other, deferred args decode. The args also stay under their own names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace import keys

#: polyprof's memory stat keys: typed at load, never left to the deferred decode
MEMORY_KEYS = frozenset({keys.ALLOC_BYTES, keys.ADDR, keys.TOTAL_ALLOCATED, keys.TOTAL_RESERVED,
                         keys.MEMORY_DEVICE, keys.ALLOCATOR, keys.MEMORY_CATEGORY})
#: a batch of args holds memory events only if its text has one of these
MARKERS = (b'"Total Allocated"', b'"alloc_bytes"')
_KINETO = {"Bytes": keys.ALLOC_BYTES, "Addr": keys.ADDR, "Total Allocated": keys.TOTAL_ALLOCATED,
           "Total Reserved": keys.TOTAL_RESERVED}
#: c10::DeviceType -> polyprof's plane kind (docs: c10/core/DeviceType.h)
_DEVICE_TYPES = {1: "GPU", 4: "OpenCL", 6: "GPU", 9: "XLA", 12: "XPU", 13: "MPS", 15: "HPU", 18: "IPU",
                 19: "MTIA", 20: "PrivateUse1"}


def has_memory(text: bytes) -> bool:
    return any(m in text for m in MARKERS)


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


def memory_stats(args: list, base: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
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
        if "Total Allocated" in a and _int(a.get("Bytes")) is not None:  # Kineto's spelling
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
    out = {}
    for key, (rows, vals) in cols.items():
        if rows:
            kind = object if key in (keys.MEMORY_DEVICE, keys.ALLOCATOR, keys.MEMORY_CATEGORY) else np.int64
            out[key] = (np.asarray(rows, np.int64), np.asarray(vals, dtype=kind))
    return out
