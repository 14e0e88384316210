"""Every analysis table, in one list: what the summary, the HTML report, ``--json``,
the ranks and store views and the findings compute from a trace.

An analysis is a function ``(trace, *tables it needs) -> Table`` documenting its
columns (``analyze/table.py``; built with ``analyze.frames.frame``); a new one is one
module plus one :class:`Analysis` line below, and it then appears in
``polyprof summary --json`` and is there for findings and reports to use.

Another package adds analyses through the ``polyprof.analyses`` entry-point group (an
:class:`Analysis`, or a callable returning one) and finding rules through
``polyprof.findings`` (``(trace, t) -> list[Finding]``), found once per process when
every table or finding is asked for (:func:`analyses`, :func:`extension_rules`). One that
raises, or returns what is not a table, gives an empty table and one warning; a rule that
raises or returns what is not a list of findings gives none and one warning. Both are
given the analysed window as a trace of its own (``analyze/package_trace.py``), not the
window's view that the built-in analyses read.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np

from .. import entrypoints
from ..errors import one_line
from ..trace.core import Trace
from .finding import Finding
from .table import Table, _table

log = logging.getLogger("polyprof")


class Analysis(NamedTuple):
    #: the table's name in reports and ``--json``
    name: str
    #: ``"module:function"`` (imported when first computed), or the function
    function: str | Callable[..., object]
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


def _call(target: str | Callable[..., object]) -> Callable[..., object]:
    if callable(target):
        return target
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
    Analysis("copies", "polyprof.analyze.copies:copies", present=_IN + "copies",
             empty=_columns("device:O kind:O count:i8 total_bytes:i8 total_ns:i8 bandwidth_gbps:f8 min_gbps:f8 "
                            "median_gbps:f8 max_gbps:f8 small:i8 pageable:i8 unsized:i8 sized_ns:i8")),
    Analysis("op_efficiency", "polyprof.analyze.efficiency:op_efficiency"),
    Analysis("mfu", "polyprof.analyze.efficiency:mfu"),
    Analysis("kernel_efficiency", "polyprof.analyze.kernel_roofline:kernel_efficiency"),
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
        pass
    for a in extensions():  # another package's (looked for only for a name no built-in one has)
        if a.name == name:
            return a
    raise KeyError(f"no analysis named {name!r}; known: {', '.join(a.name for a in analyses())}") from None


def analyses() -> tuple[Analysis, ...]:
    """Every analysis: :data:`ANALYSES`, then those of other packages (``polyprof.analyses``)."""
    return ANALYSES + extensions()


class Tables(Mapping[str, Table]):
    """The analysis tables of one trace, each computed on first use (with what it needs)
    and kept, but a per-event table made only as another's input (:meth:`_need`);
    ``given`` are tables already computed elsewhere."""

    def __init__(self, trace: Trace, given: Mapping[str, Table] | None = None):
        self.trace = trace
        self._done: dict[str, Table] = dict(given or {})
        self._running: set[str] = set()  # other packages' tables being computed (a cycle of needs)

    def __getitem__(self, name: str) -> Table:
        if name not in self._done:
            a = by_name(name)
            if name in _BY_NAME:
                inputs = [self._need(n) for n in a.needs]
                self._done[name] = a.run(self.trace, *inputs)
                del inputs
            else:  # another package's: its failure (its inputs' included) is an empty table and a warning
                self._done[name] = _run_extension(a, self)
        return self._done[name]

    def _need(self, name: str) -> Table:
        """A built-in table another one reads: kept (as :meth:`__getitem__` keeps it) unless
        it has a row per event and was not asked for itself. Such a table (``launch_stats``:
        17 columns per launch, 40 bytes per event of a summary of launches) then lives only
        while the table that reads it is made; asked for later, it is made again."""
        a = _BY_NAME.get(name)
        if name in self._done or a is None or not a.per_event:
            return self[name]
        return a.run(self.trace, *[self._need(n) for n in a.needs])

    def __iter__(self) -> Iterator[str]:
        return iter([a.name for a in analyses()])

    def __len__(self) -> int:
        return len(analyses())

    def computed(self) -> dict[str, Table]:
        return dict(self._done)


#: the built-in tables a job's report leaves with each rank (see :attr:`Analysis.per_event`)
PER_EVENT = tuple(a.name for a in ANALYSES if a.per_event)


def per_event_tables() -> tuple[str, ...]:
    """Every table a job's report leaves with each rank: :data:`PER_EVENT`, then those of
    other packages whose :class:`Analysis` says ``per_event=True``."""
    return PER_EVENT + tuple(a.name for a in extensions() if a.per_event)


def compute_all(trace: Trace) -> dict[str, Table]:
    """Every table of :func:`analyses`, in report order."""
    t = Tables(trace)
    return {a.name: t[a.name] for a in analyses()}


def getter(trace: Trace, tables: Mapping[str, Table] | None) -> Callable[[str], Table]:
    """``name -> table`` for rules that need some tables: reuses ``tables``, computes the rest."""
    t = tables if isinstance(tables, Tables) else Tables(trace, tables)
    return t.__getitem__


# ------------------------------------------------------------------ analyses and findings of other packages
GROUP = "polyprof.analyses"
FINDINGS_GROUP = "polyprof.findings"
_extensions: tuple[Analysis, ...] | None = None
#: analysis or rule name -> the entry point it came from, as warnings name it
_ORIGIN: dict[str, str] = {}
_rules: tuple[tuple[str, Callable[..., object]], ...] | None = None
_warned: set[str] = set()


def extensions() -> tuple[Analysis, ...]:
    """The analyses other packages declare (``polyprof.analyses``), checked; found on first
    use, once per process (``polyprof/entrypoints.py``)."""
    global _extensions
    if _extensions is None:
        found = entrypoints.load(GROUP, _analysis_of, lambda ep, a: a.name, _BY_NAME)
        _ORIGIN.update((a.name, ep.describe(GROUP)) for ep, a in found)
        _extensions = tuple(a for _, a in found)
    return _extensions


def _analysis_of(obj: object, ep: entrypoints.EntryPoint) -> Analysis:
    a = obj if isinstance(obj, Analysis) or not callable(obj) else obj()
    if not isinstance(a, Analysis):
        raise entrypoints.ExtensionError(f"it gives {entrypoints.a_type(a)}, not a polyprof.analyze.registry.Analysis")
    if not isinstance(a.name, str) or not a.name.strip():
        raise entrypoints.ExtensionError("its Analysis has no name")
    if not callable(a.function) and not (isinstance(a.function, str) and ":" in a.function):
        raise entrypoints.ExtensionError(f"the function of its Analysis {a.name!r} is neither 'module:function' "
                                         "nor a function")
    if not isinstance(a.needs, tuple) or not all(isinstance(n, str) for n in a.needs) or a.name in a.needs:
        raise entrypoints.ExtensionError(f"the needs of its Analysis {a.name!r} are not a tuple of other tables")
    if not isinstance(a.per_event, bool):
        raise entrypoints.ExtensionError(f"the per_event of its Analysis {a.name!r} is not True or False")
    return a


def _run_extension(a: Analysis, tables: Tables) -> Table:
    """Another package's table; an empty one (its declared columns, if any) and one
    warning where it (or a table it needs) raises, or it gives what is not a table."""
    mine = a.name not in tables._running
    try:
        if not mine:
            raise ValueError(f"{a.name!r} needs itself (through {', '.join(sorted(tables._running - {a.name}))})")
        tables._running.add(a.name)
        inputs = [tables[n] for n in a.needs]
        trace = _package_trace(tables.trace)
        with entrypoints.quiet():
            return a.run(trace, *inputs)
    except Exception as e:  # noqa: BLE001 - a vendor's table must not fail the summary
        _warn_once(a.name, f"{_ORIGIN.get(a.name, a.name)}: the analysis failed ({type(e).__name__}: "
                           f"{one_line(e)}); its table {a.name!r} is left empty")
        try:
            return _table({c: np.zeros(0, d) for c, d in a.empty})
        except Exception:  # noqa: BLE001 - its declared columns are no NumPy types either
            return _table({})
    finally:
        if mine:
            tables._running.discard(a.name)


def extension_rules() -> tuple[tuple[str, Callable[..., object]], ...]:
    """(where it came from, rule) of each finding rule other packages declare
    (``polyprof.findings``), found once per process."""
    global _rules
    if _rules is None:
        found = entrypoints.load(FINDINGS_GROUP, _rule_of, lambda ep, r: ep.name, ())
        _rules = tuple((ep.describe(FINDINGS_GROUP), rule) for ep, rule in found)
    return _rules


def _rule_of(obj: object, ep: entrypoints.EntryPoint) -> Callable[..., object]:
    if not callable(obj) or isinstance(obj, type):
        raise entrypoints.ExtensionError(f"it gives {entrypoints.a_type(obj)}, not a rule (trace, t) -> list[Finding]")
    if not hasattr(obj, "__module__") or not hasattr(obj, "__qualname__"):
        raise entrypoints.ExtensionError("its rule is not a function")
    return obj


def extension_findings(trace: Trace, t: Callable[[str], Table]) -> list[Finding]:
    """What the rules of other packages find; a rule that raises or gives anything but a
    list of findings gives none, with one warning."""
    out: list[Finding] = []
    rules = extension_rules()
    mine = _package_trace(trace) if rules else trace
    for where, rule in rules:
        try:
            with entrypoints.quiet():
                got: Any = rule(mine, t)
            found = list(got)
            bad = next((f for f in found if not isinstance(f, Finding)), None)
            if bad is not None:
                raise TypeError(f"it gave {entrypoints.a_type(bad)} among its findings, not a Finding")
        except Exception as e:  # noqa: BLE001 - a vendor's rule must not fail the summary
            _warn_once(where, f"{where}: the finding rule failed ({type(e).__name__}: {one_line(e)}); skipped")
            continue
        out.extend(found)
    return out


def _package_trace(trace: Trace) -> Trace:
    """The window of ``trace`` (a report's view) as a trace of its own: what another
    package's analysis and rule read (``analyze/package_trace.py``)."""
    from .package_trace import package_trace  # only where another package's table or rule runs

    return package_trace(trace)


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        log.debug("%s", message)
        return
    _warned.add(key)
    log.warning("%s", message)

