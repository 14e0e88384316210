"""torch's legacy autograd profiler trace (torch 1.x ``export_chrome_trace`` without Kineto):
its devices and its ops' device time.

torch (up to 1.8) writes each op as an X event of the process ``CPU functions`` (the thread
id: the op's thread) and, recorded with ``use_cuda=True``, the CUDA time of each op as an X
event named after the op in the process ``CUDA functions``, whose thread id is the *device
index* (the kernel's ``device``), linked from the op by a ``cpu_to_cuda`` flow (``s`` at the
op's start, ``f`` at the interval's). That interval is not one kernel: it is the time
between two CUDA events recorded on the op's stream as the op began and ended, so an op's
interval holds those of the ops it called (``aten::conv2d``'s holds
``aten::cudnn_convolution``'s), and torch counts it as the op's CUDA time. polyprof reads:

- each thread of ``CUDA functions`` as the device its id names (``/device:GPU:<tid>``,
  :func:`device_plane`), where torch put all of them on one process;
- the intervals that hold another on their device as the device side of an op (category
  ``gpu_user_annotation``, as Kineto's device span of an annotation), the others as the
  device's activity (kernels): the device's work counted once (:func:`link`);
- each op and its intervals joined by an ``external_id`` stat, the op's row: with no launch
  calls in the file, ``derive.correlate`` names a device activity's op by it, so the op's
  own device time (``self_device_ns``) is its intervals', as torch's ``self_cuda_time_total``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.sorting import lexsort
from ...trace.stats import StatColumn
from .codes import _is_id

if TYPE_CHECKING:
    from .collector import _Collector

#: the processes torch's legacy export writes (string pids; "CUDA Functions" in some tools)
CPU_FUNCTIONS, CUDA_FUNCTIONS = "cpu functions", "cuda functions"
#: the category of its flows from an op to its CUDA time
FLOW_CATEGORY = "cpu_to_cuda"


def is_legacy(pid: Any, name: str) -> bool:
    """Whether a pid is the legacy export's process ``name`` (lower case)."""
    return isinstance(pid, str) and pid.strip().lower() == name


def has_cuda_functions(col: "_Collector") -> bool:
    """Whether the trace has the legacy export's ``CUDA functions`` process."""
    return any(is_legacy(pv, CUDA_FUNCTIONS) for pv in col.id_values[id(col.pids)])


def device_plane(col: "_Collector", pid: Any, tid: Any, vendor: str) -> int | None:
    """The plane of a ``CUDA functions`` thread: the device its id names (GPU 0 for an id
    that is not a device index); None for a thread of any other process."""
    if not is_legacy(pid, CUDA_FUNCTIONS):
        return None
    index = tid if _is_id(tid) and 0 <= tid < 1 << 31 else 0
    return col.b.plane(keys.device_plane("GPU", index), "device", vendor, index, index, {})


def link(trace: Trace) -> None:
    """The ops' CUDA intervals: those holding another on their device made device spans of
    ops, and each op and its intervals given the op's row as ``external_id`` (module doc).
    Only where the trace has ``cpu_to_cuda`` flows from ops to device events."""
    cat = trace.string_id(FLOW_CATEGORY)
    fl = trace.flows
    if cat < 0 or not len(fl["src"]):
        return
    ev = trace.events
    src, dst = fl["src"], fl["dst"]
    device = np.array([p.kind == "device" for p in trace.planes], bool)
    op = trace.string_id(keys.CAT_CPU_OP)
    take = (fl["category"] == cat) & (ev["category"][src] == op) & device[trace.track_plane[ev["track"][dst]]]
    if not take.any():
        return
    src, dst = src[take], dst[take]
    tracks = np.unique(ev["track"][dst])
    rows = np.flatnonzero(np.isin(ev["track"], tracks) & np.isin(ev["category"], _activity(trace)))
    holds = _holding(ev["track"][rows], ev["start_ns"][rows], ev["start_ns"][rows] + ev["dur_ns"][rows])
    if holds.any():
        ev["category"][rows[holds]] = trace.intern("gpu_user_annotation")
        trace.__dict__.pop("kinds", None)  # (cached from the categories)
    if keys.EXTERNAL_ID not in trace.stats:
        at = np.concatenate([src, dst])
        ids = np.concatenate([src, src])
        at, first = np.unique(at, return_index=True)  # an op's row once; an interval's first op
        trace.stats[keys.EXTERNAL_ID] = StatColumn(at, ids[first].astype(np.int64))


def _activity(trace: Trace) -> np.ndarray:
    """The string ids of the categories the reader gave the device's events (kernels,
    copies, fills by name)."""
    ids = [trace.string_id(c) for c in (keys.CAT_KERNEL, keys.CAT_MEMCPY, keys.CAT_MEMSET)]
    return np.array([i for i in ids if i >= 0], np.int64)


def _holding(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each interval holds another of its track (starts no later, ends no earlier;
    of two equal ones, the first). A stack per track over the intervals by start, longest
    first: an interval that ends past the top's is not in it (a partial overlap, as where
    two threads' ops shared a stream, holds nothing)."""
    order = lexsort((-end, start, track))
    out = np.zeros(len(track), bool)
    stack: list[int] = []
    last = None
    for r in order.tolist():
        if track[r] != last:
            stack, last = [], track[r]
        while stack and (start[r] >= end[stack[-1]] or end[r] > end[stack[-1]]):
            stack.pop()
        if stack:
            out[stack[-1]] = True
        stack.append(r)
    return out
