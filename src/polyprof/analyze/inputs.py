"""Whether a trace holds what an analysis reads: checks the registry makes before
importing an analysis (``analyze/registry.py``, ``Analysis.present``).

Each check is exact on the "absent" side: where it says False, the analysis would
have returned its empty table, so the registry returns the declared one
(``Analysis.empty``) and a summary of a trace without CUDA graphs, CUPTI ranges or
collectives does not import those modules (tests/test_analysis_inputs.py).
"""

from __future__ import annotations

import numpy as np

from ..trace.core import Trace
from ..trace.vocabulary import GRAPH_LAUNCH_MARKERS, PROFILER_RANGE_CATEGORY
from .common import COMMUNICATION, device_view

#: the names of the CPU backends' work ranges (``analyze/collectives.py``)
CPU_PREFIXES = ("gloo:", "mpi:")


def graph_launches(trace: Trace) -> bool:
    """A name of a CUDA graph launch among the trace's names (``cuda_graphs``)."""
    return any(m in s.lower() for s in trace.strings for m in GRAPH_LAUNCH_MARKERS)


def profiler_ranges(trace: Trace) -> bool:
    """The CUPTI profiler range category among the trace's names (``cupti_counters``)."""
    return PROFILER_RANGE_CATEGORY in trace.strings


def communication(trace: Trace) -> bool:
    """A device communication activity, or a name of a CPU backend's work range
    (``collective_stats``, ``transfers``: ``collectives.collective_rows``)."""
    if bool(np.any(device_view(trace).cls == COMMUNICATION)):
        return True
    return trace.n_events > 0 and any(s.lower().startswith(CPU_PREFIXES) for s in trace.strings)
