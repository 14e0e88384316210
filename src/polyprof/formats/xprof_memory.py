"""Memory events in the shape XProf's memory_profile tool reads.

XProf builds its memory profile from ``MemoryAllocation`` / ``MemoryDeallocation``
events on the ``/host:CPU`` plane, one timeline per ``allocator_name``, with the
allocator's bytes in use after each event (``bytes_allocated``), the block's size
(``allocation_bytes``, ``requested_bytes``), its address (``addr``) and the peak so far
(``peak_bytes_in_use``). The XSpace writer adds one such line, built from polyprof's
memory series (``trace/memory.py``), to the host plane; polyprof's reader skips it (the
memory events themselves are written as they are, with their own stats).

The other way, :func:`read` makes the same events in another producer's XSpace (the
BFC allocators of TensorFlow and JAX/XLA, TPU runtimes) polyprof's memory events: the
allocator as XProf names it (``allocator_name``, else ``index_on_host`` or
``device_ordinal``), its bytes in use after each event as ``total_allocated``, so the
memory tables give the peaks XProf's memory_profile shows.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..trace import keys
from ..trace.core import Trace
from ..trace.memory import export_counters, memory_events
from ..trace.stats import StatColumn
from .xspace.names import MEMORY_LINE as LINE

ALLOC, FREE = "MemoryAllocation", "MemoryDeallocation"


def xspace_counters(trace: Trace) -> dict[str, np.ndarray]:
    """The counters an XSpace export writes: the trace's, and its memory series' but
    those of XProf's own allocation events (read from an XSpace: written back as they
    are, XProf's memory_profile reads them)."""
    return export_counters(trace, skip_names=(ALLOC, FREE))


def write_line(xp: Any, pw: Any, trace: Trace, origin: int, line_id: int) -> None:
    """Append the memory line to the XPlane ``xp`` (a host plane); ``pw`` is the plane's
    metadata writer (``writers.xspace_plane.PlaneWriter``); times relative to ``origin``.
    XProf's own allocation events are not written again (they keep their lines)."""
    m = memory_events(trace)
    own_ids = [i for i in (trace.string_id(ALLOC), trace.string_id(FREE)) if i >= 0]
    if not len(m.rows) or (own_ids and np.isin(trace.events["name"][m.rows], own_ids).all()):
        return
    xl = xp.lines.add()
    xl.id = line_id
    xl.name = LINE
    base = int(m.ts.min())
    xl.timestamp_ns = base - origin
    ids = {name: pw.stat_id(name) for name in ("allocator_name", "bytes_allocated", "bytes_reserved",
                                                "peak_bytes_in_use", "allocation_bytes", "requested_bytes",
                                                "addr")}
    kinds = {ALLOC: pw.event_id(ALLOC), FREE: pw.event_id(FREE)}
    order = np.argsort(m.ts, kind="stable")
    peak = np.zeros(len(m.rows), np.int64)
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        peak[lo:hi] = np.maximum.accumulate(np.maximum(m.level[lo:hi], m.start[s]))
    labels = [f"{d} {a}".strip() for d, a in zip(m.device, m.allocator)]
    reserved = np.nan_to_num(m.reserved, nan=0.0).astype(np.int64)
    for i in order.tolist():
        xe = xl.events.add()
        xe.metadata_id = kinds[ALLOC if m.delta[i] > 0 else FREE]
        xe.offset_ps = int(m.ts[i] - base) * 1000
        size = abs(int(m.delta[i]))
        for name, value in (("allocator_name", labels[int(m.series[i])]), ("bytes_allocated", int(m.level[i])),
                            ("bytes_reserved", int(reserved[i])), ("peak_bytes_in_use", int(peak[i])),
                            ("allocation_bytes", size), ("requested_bytes", size),
                            ("addr", int(m.addr[i]) if m.has_addr[i] else 0)):
            st = xe.stats.add()
            st.metadata_id = ids[name]
            if isinstance(value, str):
                st.str_value = value
            else:
                st.int64_value = value


#: an allocator named after its device, as TensorFlow's and XLA's BFC allocators are ("GPU_0_bfc")
_DEVICE_ALLOCATOR = re.compile(r"^(GPU|TPU|XPU|CPU)_(\d{1,9})_")  # as the reader's device indices


def read(trace: Trace) -> None:
    """Type the ``MemoryAllocation`` / ``MemoryDeallocation`` events of a trace read from
    another producer's XSpace as memory events (``trace/memory.py``), in place: the
    block's size (``allocation_bytes``, else ``requested_bytes``) signed by the event,
    the allocator (XProf's memory id), ``bytes_allocated`` / ``bytes_reserved`` as the
    allocator's totals, the memory's device where the allocator names one. Events that
    already carry ``alloc_bytes`` are left as they are. Only these events' stats are
    decoded (``StatTable.lookup_rows``), and the new columns are put without decoding
    the others."""
    ids = [i for i in (trace.string_id(ALLOC), trace.string_id(FREE)) if i >= 0]
    rows = np.flatnonzero(np.isin(trace.events["name"], ids)) if ids else np.zeros(0, np.int64)
    if not len(rows):
        return
    got = trace.stats.lookup_rows(_READ, rows)
    if keys.ALLOC_BYTES in got:
        rows = rows[~got[keys.ALLOC_BYTES][0]]
        got = trace.stats.lookup_rows(_READ, rows) if len(rows) else {}
    size, has_size = _ints(got, "allocation_bytes", len(rows))
    req, has_req = _ints(got, "requested_bytes", len(rows))
    size, has_size = np.where(has_size, size, req), has_size | has_req
    free = trace.events["name"][rows] == trace.string_id(FREE)
    alloc = _memory_ids(got, len(rows))
    if not has_size.all():  # (TPU runtimes: a free without its size) the size of its allocation
        _sizes_of_frees(trace, rows, got, free, alloc, size, has_size)
    sizes = np.where(free, -1, 1) * np.abs(size)
    _put(trace, keys.ALLOC_BYTES, rows, sizes, has_size)
    _put(trace, keys.ALLOCATOR, rows, alloc, has_size)
    for key, name in ((keys.TOTAL_ALLOCATED, "bytes_allocated"), (keys.TOTAL_RESERVED, "bytes_reserved")):
        vals, has = _ints(got, name, len(rows))
        _put(trace, key, rows, vals, has & has_size & (vals >= 0))  # bytes held: never negative
    names = {a: _device(trace, a) for a in set(alloc.tolist())}  # once per allocator, not per event
    device = np.array([names[a] for a in alloc.tolist()], dtype=object)
    _put(trace, keys.MEMORY_DEVICE, rows, device, (device != "") & has_size)


#: the stats :func:`read` looks up at the memory events
_READ = (keys.ALLOC_BYTES, "allocation_bytes", "requested_bytes", "bytes_allocated", "bytes_reserved", keys.ADDR,
         "allocator_name", "index_on_host", "device_ordinal")


#: a byte count or index beyond this is damage (4 EiB), not memory: as absent (sums of such stay in int64)
_LIMIT = 1 << 62


def _ints(got: dict[str, tuple[np.ndarray, np.ndarray]], key: str, n: int,
          bits: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``key``'s integer values at the events (0 where absent) and which have one: those
    within +-2**62 (a damaged file's beyond, NaN and infinities as absent); ``bits``: any
    64-bit value, an unsigned one past 2**63 keeping its bits (an address)."""
    out = np.zeros(n, np.int64)
    if key not in got or got[key][1].dtype.kind not in "iuf":
        return out, np.zeros(n, bool)
    has, vals = got[key]
    has = has.copy()
    if vals.dtype.kind == "f":  # (a damaged file) a value no integer: as absent
        ok = np.isfinite(vals) & (np.abs(vals) < float(_LIMIT))
    elif bits:
        ok = np.ones(len(vals), bool)
    elif vals.dtype.kind == "u":
        ok = vals < np.uint64(_LIMIT)
    else:
        ok = (vals > -_LIMIT) & (vals < _LIMIT)
    has[has] = ok
    vals = vals[ok]
    out[has] = vals.view(np.int64) if vals.dtype == np.uint64 else vals.astype(np.int64)
    return out, has


def _sizes_of_frees(trace: Trace, rows: np.ndarray, got: dict, free: np.ndarray, alloc: np.ndarray,
                    size: np.ndarray, has_size: np.ndarray) -> None:
    """In place: the size of each free that has none, from the last allocation of the same
    allocator and address before it (as XProf pairs them); frees with no such allocation
    keep none."""
    addr, has_addr = _ints(got, keys.ADDR, len(rows), bits=True)
    live: dict[tuple[str, int], int] = {}
    for i in np.argsort(trace.events["start_ns"][rows], kind="stable").tolist():
        if not has_addr[i]:
            continue
        k = (alloc[i], int(addr[i]))
        if not free[i]:
            if has_size[i]:
                live[k] = int(size[i])
        elif not has_size[i] and k in live:
            size[i], has_size[i] = live.pop(k), True


def _memory_ids(got: dict[str, tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """XProf's memory id of each event: its ``allocator_name``, else its
    ``index_on_host`` or ``device_ordinal`` as text, else ""."""
    out = np.full(n, "", dtype=object)
    for key in ("device_ordinal", "index_on_host"):
        vals, has = _ints(got, key, n)
        out[has] = [str(v) for v in vals[has].tolist()]
    if "allocator_name" in got:
        has, vals = got["allocator_name"]
        if vals.dtype.kind not in "iuf":
            out[has] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in vals]
    return out


def _device(trace: Trace, allocator: str) -> str:
    """Plane name of the device an allocator's memory is on; "" for the host's (the
    event's own plane) or where the name does not say. A bare index names the device of
    that index when the trace's devices are all of one kind (TPU runtimes)."""
    m = _DEVICE_ALLOCATOR.match(allocator)
    if m:
        return "" if m.group(1) == "CPU" else keys.device_plane(m.group(1), int(m.group(2)))
    if allocator.isdigit() and len(allocator) <= 9:
        kinds = {p.name.split(":")[1] for p in trace.planes if p.name.startswith("/device:") and p.name.count(":") == 2}
        if len(kinds) == 1:
            return keys.device_plane(kinds.pop(), int(allocator))
    return ""


def _put(trace: Trace, key: str, rows: np.ndarray, values: np.ndarray, has: np.ndarray) -> None:
    """Add ``values`` at ``rows`` (where ``has``) to the stat ``key`` (merged with the
    rows it already has; theirs kept)."""
    rows, values = rows[has], values[has]
    if not len(rows):
        return
    old = trace.stats.get(key)
    if old is not None and len(old):
        keep = ~np.isin(rows, old.rows)
        rows = np.concatenate([old.rows, rows[keep]])
        values = np.concatenate([old.values, values[keep].astype(old.values.dtype, copy=False)])
        order = np.argsort(rows, kind="stable")
        rows, values = rows[order], values[order]
    trace.stats.put(key, StatColumn(rows.astype(np.int64), values))
