"""Analyses: functions from a Trace to polyprof's Table (``analyze/table.py``; ``.to_pandas()``
for a DataFrame). Each documents its columns."""

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_names
from .breakdown import comm_comp_overlap, idle_time_breakdown, kernel_breakdown, temporal_breakdown
from .events import event_stats
from .counters import counter_stats
from .findings import Finding, findings
from . import memory_findings  # noqa: F401  (findings() runs its rules every time; it imports .findings)
from .ops import launch_stats, launch_summary, op_stats
from .sections import section_stats
from .devops import device_op_breakdown
from .kernel_states import kernel_state_breakdown
from .queues import queue_length, queue_length_summary
from .steps import step_stats
from .sync import sync_by_thread
from .window import AUTO, Window  # noqa: F401  (the analysed window; not an analysis)

__all__ = ["section_stats", "event_stats", "temporal_breakdown", "idle_time_breakdown", "kernel_breakdown",
           "op_stats", "launch_stats", "launch_summary", "comm_comp_overlap", "step_stats", "sync_by_thread", "findings", "Finding",
           "memory_timeline", "memory_peak", "memory_at_peak", "counter_stats", "device_op_breakdown",
           "kernel_state_breakdown", "queue_length", "queue_length_summary"]

if TYPE_CHECKING:
    from . import memory  # noqa: F401  (the module, an attribute as before)
    from .memory import memory_at_peak, memory_peak, memory_timeline

_on_first_use = lazy_names(__name__, {"memory_at_peak": "memory", "memory_peak": "memory", "memory_timeline": "memory"})


def __getattr__(name: str) -> Any:
    """The memory tables and their module, imported on first use: a summary of a trace
    without memory events does not import them (``analyze/inputs.py``: the registry's
    check gives their empty tables)."""
    return _on_first_use(name)  # (the module ``memory`` too, as any submodule: _lazy.submodule)
