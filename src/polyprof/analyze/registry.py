"""Every analysis table, in one list: what the summary, the HTML report, ``--json``,
the ranks and store views and the findings compute from a trace.

An analysis is a function ``(trace, *tables it needs) -> Table`` documenting its
columns (``analyze/table.py``; built with ``analyze.frames.frame``); a new one is one
module plus one :class:`Analysis` line below, and it then appears in
``polyprof summary --json`` and is there for findings and reports to use.
"""

from __future__ import annotations

import importlib
from typing import Callable, Iterator, Mapping, NamedTuple

import numpy as np

from ..trace.core import Trace
from .table import Table, _table


class Analysis(NamedTuple):
    #: the table's name in reports and ``--json``
    name: str
    #: ``"module:function"`` (imported when first computed)
    function: str
    #: tables passed to the function after the trace, in order
    needs: tuple[str, ...] = ()
    #: one row per event (grows with the trace, not with its distinct names): a job's
    #: report leaves such tables with their rank (``ranks``, stores) and gathers the rest
    per_event: bool = False
    #: ``"module:function"``, trace -> bool: whether the trace holds what the analysis
    #: reads (``analyze/inputs.py``); where not, the table is :attr:`empty` and the
    #: analysis's module is not imported
    present: str = ""
    #: (column, NumPy dtype) of the table without its inputs: what the function returns
    #: then (tests/test_analysis_inputs.py)
    empty: tuple[tuple[str, str], ...] = ()

    def run(self, trace: Trace, *inputs: Table) -> Table:
        """The table (a function that returns a pandas DataFrame, say a third party's, has
        it converted: every analysis gives a :class:`Table`)."""
        if self.present and not _call(self.present)(trace):
            return _table({c: np.zeros(0, d) for c, d in self.empty})
        out = _call(self.function)(trace, *inputs)
        return out if isinstance(out, Table) else Table.from_pandas(out)


def _call(target: str) -> Callable[..., object]:
    module, _, fn = target.partition(":")
    f: Callable[..., object] = getattr(importlib.import_module(module), fn)
    return f


def _columns(spec: str) -> tuple[tuple[str, str], ...]:
    """``"name:dtype ..."`` as (column, dtype) pairs."""
    return tuple((c, d) for c, _, d in (x.partition(":") for x in spec.split()))


_IN = "polyprof.analyze.inputs:"

#: in report order
ANALYSES: tuple[Analysis, ...] = (
    Analysis("temporal_breakdown", "polyprof.analyze.breakdown:temporal_breakdown"),
    Analysis("idle_time_breakdown", "polyprof.analyze.breakdown:idle_time_breakdown"),
    Analysis("comm_comp_overlap", "polyprof.analyze.breakdown:comm_comp_overlap"),
    Analysis("kernel_breakdown", "polyprof.analyze.breakdown:kernel_breakdown"),
    Analysis("op_stats", "polyprof.analyze.ops:op_stats"),
    Analysis("section_stats", "polyprof.analyze.sections:section_stats"),
    Analysis("step_stats", "polyprof.analyze.steps:step_stats"),
    Analysis("launch_stats", "polyprof.analyze.ops:launch_stats", per_event=True),
    Analysis("launch_summary", "polyprof.analyze.ops:launch_summary", needs=("launch_stats",)),
    Analysis("event_stats", "polyprof.analyze.events:event_stats"),
    Analysis("memory_peak", "polyprof.analyze.memory:memory_peak", present=_IN + "memory_events",
             empty=_columns("device:O allocator:O start_bytes:i8 peak_bytes:i8 peak_ns:i8 end_bytes:i8 "
                            "allocations:i8 frees:i8 allocated_total_bytes:i8 live_at_peak:i8 "
                            "live_at_peak_bytes:i8 from_allocator:i8")),
    Analysis("memory_at_peak", "polyprof.analyze.memory:memory_at_peak", present=_IN + "memory_events",
             empty=_columns("device:O allocator:O bytes:i8 ts_ns:i8 addr:i8 thread:O op:O section:O stack:O")),
    Analysis("counter_stats", "polyprof.analyze.counters:counter_stats"),
    Analysis("device_op_breakdown", "polyprof.analyze.devops:device_op_breakdown"),
    Analysis("kernel_state_breakdown", "polyprof.analyze.kernel_states:kernel_state_breakdown"),
    Analysis("queue_length_summary", "polyprof.analyze.queues:queue_length_summary"),
    Analysis("op_efficiency", "polyprof.analyze.efficiency:op_efficiency"),
    Analysis("mfu", "polyprof.analyze.efficiency:mfu"),
    Analysis("kernel_efficiency", "polyprof.analyze.efficiency:kernel_efficiency"),
    Analysis("critical_path", "polyprof.analyze.critical_path:critical_path", per_event=True),
    Analysis("cuda_graphs", "polyprof.analyze.cuda_graphs:cuda_graphs", present=_IN + "graph_launches",
             empty=_columns("graph:O replays:i8 device_ns:i8 kernels_per_replay:i8 captured_ops:i8 "
                            "attributed_pct:i8 first_kernel:O")),
    Analysis("cupti_counters", "polyprof.analyze.cupti_ranges:cupti_counters", per_event=True,
             present=_IN + "profiler_ranges",
             empty=_columns("range:i8 name:O start_ns:i8 launch_ns:i8 top_op:O bottom_op:O op_stack:O flops:f8")),
    Analysis("collective_stats", "polyprof.analyze.collectives:collective_summary", present=_IN + "communication",
             empty=_columns("op:O bytes:f8 count:f8 ranks:f8 total_ns:f8 mean_ns:f8 max_ns:f8 algbw_gbps:f8 "
                            "busbw_gbps:f8")),
    Analysis("transfers", "polyprof.analyze.transfers:transfers", present=_IN + "communication",
             empty=_columns("src:i8 dst:i8 op:O bytes:i8 count:i8 total_bytes:i8 bytes_per_step:i8 time_ns:i8 "
                            "time_per_step_ns:i8 blocking_ns:i8 peer_from:O")),
)
_BY_NAME = {a.name: a for a in ANALYSES}


def by_name(name: str) -> Analysis:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no analysis named {name!r}; known: {', '.join(_BY_NAME)}") from None


class Tables(Mapping[str, Table]):
    """The analysis tables of one trace, each computed on first use (with what it needs)
    and kept; ``given`` are tables already computed elsewhere."""

    def __init__(self, trace: Trace, given: Mapping[str, Table] | None = None):
        self.trace = trace
        self._done: dict[str, Table] = dict(given or {})

    def __getitem__(self, name: str) -> Table:
        if name not in self._done:
            a = by_name(name)
            inputs = [self[n] for n in a.needs]
            self._done[name] = a.run(self.trace, *inputs)
        return self._done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_BY_NAME)

    def __len__(self) -> int:
        return len(_BY_NAME)

    def computed(self) -> dict[str, Table]:
        return dict(self._done)


#: the tables a job's report leaves with each rank (see :attr:`Analysis.per_event`)
PER_EVENT = tuple(a.name for a in ANALYSES if a.per_event)


def compute_all(trace: Trace) -> dict[str, Table]:
    """Every table of :data:`ANALYSES`, in report order."""
    t = Tables(trace)
    return {a.name: t[a.name] for a in ANALYSES}


def getter(trace: Trace, tables: Mapping[str, Table] | None) -> Callable[[str], Table]:
    """``name -> table`` for rules that need some tables: reuses ``tables``, computes the rest."""
    t = tables if isinstance(tables, Tables) else Tables(trace, tables)
    return t.__getitem__
