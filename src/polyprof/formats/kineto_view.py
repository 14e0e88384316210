"""What polyprof's Kineto export (``writers/kineto.py``) writes of a trace where Kineto's
conventions differ from the trace's own: its time base (wall-clock µs from a whole
second), the pid of each plane and tid of each track,
the ``stream`` of device activity that has none (OpenCL queues, XLA ops: its track's
tid), which stream args are handles, and the names of copies and fills that HTA would
not type as memory. ``--window hta`` (``analyze/hta_compat.py``) reads a trace HTA
cannot read itself as HTA reads its export, through these same functions."""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from ..derive.correlate import device_activity_rows
from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.categories import Kind
from ..trace.copy_kind import copy_kind
from ..trace.core import Trace
from ..trace.memory import export_counters
from ..trace.sorting import unique_inverse
from .jsonfile import EXACT_IN_JS

#: the names HTA types as memory kernels (``hta/utils/utils.py``: ``MEMORY_KERNEL_RE``);
#: compiled on first use (re's cache), not at import
HTA_MEMORY = r"(^Memcpy)|(^Memset)|(^dma)"


def wall_shift(trace: Trace) -> int:
    """ns to add to the trace's times to get wall-clock ns (0 if already wall): Kineto's
    timestamps are wall-clock based; a trace on CLOCK_MONOTONIC moves by its ``wall_anchor``."""
    if trace.metadata.get(mkeys.CLOCK_NAME) == "wall":
        return 0
    anchor = trace.metadata.get(mkeys.SOURCE_WALL_ANCHOR)
    if isinstance(anchor, dict) and "mono_ns" in anchor and "wall_ns" in anchor:
        return int(anchor["wall_ns"]) - int(anchor["mono_ns"])
    return 0


def time_base(trace: Trace, counters: dict[str, np.ndarray] | None = None) -> tuple[int, int]:
    """(shift, base): :func:`wall_shift`, and the export's ``baseTimeNanoseconds``, the
    first time it writes (an event's start, a counter's: ``counters``, the trace's
    ``export_counters`` when not given) moved by ``shift`` and floored to a whole second
    (0 where nothing is after the epoch). An event's ``ts`` is ``start + shift - base``
    in µs, which is what HTA rounds (``analyze/hta_compat.py: base_time_ns``)."""
    shift = wall_shift(trace)
    c = export_counters(trace) if counters is None else counters
    times = [trace.events["start_ns"] + shift] if trace.n_events else []
    if len(c["ts_ns"]):
        times.append(c["ts_ns"] + shift)
    origin = int(min(int(t.min()) for t in times)) if times else 0
    return shift, (origin // 1_000_000_000) * 1_000_000_000 if origin > 0 else 0


def kineto_ids(trace: Trace) -> tuple[list[int], list[int]]:
    """Kineto pid per plane and tid per track, unique where the viewer needs them to be:
    a device plane's pid is its index, a host plane keeps its process id."""
    pids: list[int] = []
    used: set[int] = set()
    for p in trace.planes:
        if p.kind == "device":
            pid = p.index
        else:
            pid = p.pid if isinstance(p.pid, int) and 0 < p.pid <= EXACT_IN_JS else 1_000_000 + p.id
        while pid in used:
            pid += 1_000_000
        used.add(pid)
        pids.append(pid)
    tids: list[int] = []
    seen: set[tuple[int, int]] = set()
    for t in trace.tracks:
        tid = t.tid if isinstance(t.tid, int) else 0
        if not 0 <= tid <= EXACT_IN_JS or (t.plane, tid) in seen:
            tid = 2_000_000 + t.id
        seen.add((t.plane, tid))
        tids.append(tid)
    return pids, tids


def device_streams(trace: Trace, tids: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows, stream): the device activity (``derive.correlate.device_activity_rows``)
    with no ``stream`` stat, and the ``stream`` the export gives it, its track's tid
    (``tids``: :func:`kineto_ids`'): HTA takes device kernels to be the rows with a stream."""
    rows = device_activity_rows(trace)
    col = trace.stats.get(keys.STREAM)
    if col is not None and len(rows):
        rows = rows[~col.lookup(rows)[0]]
    tid = np.asarray(kineto_ids(trace)[1] if tids is None else tids, np.int64)
    return rows, tid[trace.events["track"][rows]] if len(rows) else np.zeros(0, np.int64)


def stream_handles(trace: Trace) -> np.ndarray:
    """Per event: a runtime call on the host, whose ``stream`` arg the export writes as a
    handle (``"0x0"``, as ROCm's runtime calls carry it), not as a stream number."""
    on_host = np.array([p.kind != "device" for p in trace.planes], bool)
    return on_host[trace.track_plane][trace.events["track"]] & (trace.kinds == Kind.RUNTIME)


class CopyNames(NamedTuple):
    """The device copies and fills renamed in the export, and their new names."""

    rows: np.ndarray  # event rows, ascending
    which: np.ndarray  # index into names, per row
    names: list[str]  # the distinct new names


def copy_names(trace: Trace) -> CopyNames:
    """The copies and fills on devices whose names HTA would not type as memory
    (:data:`HTA_MEMORY`: OpenCL's ``WriteBuffer (HtoD)``, rpd's ``CopyHostToDevice``,
    XLA's ``CopyDeviceToDevice``), named as Kineto names them with the name they had
    in parentheses: ``Memcpy HtoD (WriteBuffer (HtoD))``, ``Memset (FillBuffer)``; the
    kind (``trace/copy_kind.py``) ``Unknown`` where the name does not tell it."""
    rows = device_activity_rows(trace)
    kinds = trace.kinds[rows]
    rows = rows[(kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET)]
    if not len(rows):
        return CopyNames(rows, np.zeros(0, np.int64), [])
    key = trace.events["name"][rows].astype(np.int64) * 2 + (trace.kinds[rows] == Kind.MEMSET)
    uniq, inv = unique_inverse(key)
    new: list[str | None] = []
    for k in uniq.tolist():
        name = trace.strings[k >> 1]
        kind = copy_kind(name)
        if re.match(HTA_MEMORY, name):
            new.append(None)
        elif k & 1 or kind == "memset":
            new.append(f"Memset ({name})")
        else:
            new.append(f"Memcpy {'Unknown' if kind in ('unknown', 'map') else kind} ({name})")
    renamed = np.array([n is not None for n in new], bool)
    names = sorted({n for n in new if n is not None})
    at = {n: i for i, n in enumerate(names)}
    index = np.array([-1 if n is None else at[n] for n in new], np.int64)
    keep = renamed[inv]
    return CopyNames(rows[keep], index[inv][keep], names)
