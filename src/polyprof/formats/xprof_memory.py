"""Memory events in the shape XProf's memory_profile tool reads.

XProf builds its memory profile from ``MemoryAllocation`` / ``MemoryDeallocation``
events on the ``/host:CPU`` plane, one timeline per ``allocator_name``, with the
allocator's bytes in use after each event (``bytes_allocated``), the block's size
(``allocation_bytes``, ``requested_bytes``), its address (``addr``) and the peak so far
(``peak_bytes_in_use``). The XSpace writer adds one such line, built from polyprof's
memory series (``trace/memory.py``), to the host plane; polyprof's reader skips it (the
memory events themselves are written as they are, with their own stats).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace.core import Trace
from ..trace.memory import memory_events
from .xspace.names import MEMORY_LINE as LINE

ALLOC, FREE = "MemoryAllocation", "MemoryDeallocation"


def write_line(xp: Any, pw: Any, trace: Trace, origin: int, line_id: int) -> None:
    """Append the memory line to the XPlane ``xp`` (a host plane); ``pw`` is the plane's
    metadata writer (``writers.xspace_plane.PlaneWriter``); times relative to ``origin``."""
    m = memory_events(trace)
    if not len(m.rows):
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
