"""Whether a trace holds what an analysis reads: checks the registry makes before
importing an analysis (``analyze/registry.py``, ``Analysis.present``).

Each check is exact on the "absent" side: where it says False, the analysis would
have returned its empty table, so the registry returns the declared one
(``Analysis.empty``) and a summary of a trace without CUDA graphs, CUPTI ranges or
collectives does not import those modules (tests/test_analysis_inputs.py).
"""

from __future__ import annotations

import re

import numpy as np

from ..derive import cache
from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import member
from ..trace.vocabulary import (GRAPH_LAUNCH_MARKERS, PROFILER_RANGE_CATEGORY, XLA_COLLECTIVE_OP,
                                  XLA_COLLECTIVE_OPS)
from .common import COMMUNICATION, device_view

#: the names of the CPU backends' work ranges (``analyze/collectives.py``)
CPU_PREFIXES = ("gloo:", "mpi:")


def graph_launches(trace: Trace) -> bool:
    """A name of a CUDA graph launch among the trace's names (``cuda_graphs``; once per
    trace: ``graph_costs`` asks too)."""
    return cache.memo(trace, "graph_launch_names",
                      lambda t: any(m in s.lower() for s in t.strings for m in GRAPH_LAUNCH_MARKERS))


def profiler_ranges(trace: Trace) -> bool:
    """The CUPTI profiler range category among the trace's names (``cupti_counters``)."""
    return PROFILER_RANGE_CATEGORY in trace.strings


def cpu_comm_rows(trace: Trace) -> np.ndarray:
    """Rows of the CPU backends' work ranges (``gloo:*``, ``mpi:*``) that last."""
    if not trace.n_events:
        return np.zeros(0, np.int64)
    ids = [i for i, s in enumerate(trace.strings) if s.lower().startswith(CPU_PREFIXES)]
    if not ids:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.isin(trace.events["name"], ids) & (trace.events["dur_ns"] > 0))


def xla_host_rows(trace: Trace) -> np.ndarray:
    """Rows of XLA's collective HLO ops run on host threads (``all-reduce.2``,
    ``all-gather-start.1``: :data:`~polyprof.trace.vocabulary.XLA_COLLECTIVE_OP`): XLA's
    CPU backend runs a program's ops as host events (kind KERNEL on a host plane), which
    the device activity leaves out. Its passes' TraceMe (``all-reduce-combiner``) are not
    ops."""
    if not trace.n_events:
        return np.zeros(0, np.int64)
    ids = [i for i, s in enumerate(trace.strings) if s.startswith(XLA_COLLECTIVE_OPS) and re.match(XLA_COLLECTIVE_OP, s)]
    if not ids:
        return np.zeros(0, np.int64)
    ev = trace.events
    rows = np.flatnonzero(member(ev["name"], np.array(ids, np.int64)) & (trace.kinds == Kind.KERNEL))
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)
    tr = ev["track"][rows]
    return rows[host[trace.track_plane[tr]] & ~derived[tr]]


def communication(trace: Trace) -> bool:
    """What ``collectives.collective_rows`` finds: a device communication activity, else
    a CPU backend's work range or an XLA collective op on a host thread
    (``collective_stats``, ``transfers``)."""
    return (bool(np.any(device_view(trace).cls == COMMUNICATION)) or len(cpu_comm_rows(trace)) > 0
            or len(xla_host_rows(trace)) > 0)


def memory_events(trace: Trace) -> bool:
    """A numeric ``alloc_bytes`` stat on some event: what ``trace/memory.py`` reads memory
    events from (``memory_peak``, ``memory_at_peak``, the memory findings)."""
    col = trace.stats.get(keys.ALLOC_BYTES)
    return col is not None and col.kind in "iuf" and len(col) > 0


def copies(trace: Trace) -> bool:
    """A memory copy or fill among the trace's events (``copies``)."""
    k = trace.kinds
    return bool(np.any((k == Kind.MEMCPY) | (k == Kind.MEMSET)))
