"""The findings of a rank summarised window by window (``ranks/stepwise.py``).

A rule that reads only tables (host-bound, input-bound, idle between steps, exposed
communication, a memory peak held by one allocation, low MFU, low occupancy) runs once,
at the end, on the rank's merged tables, exactly as on the whole rank: the trace it is
handed is a *shell*, the rank's planes, tracks, strings and metadata without events,
with the rank's analysed span and steps. A rule that reads the events themselves
(launch-bound, copy-bound, synchronisation stalls, queued stalls, pageable and small copies, memory
growth, out of memory, cached memory, fusable chains, recompiles) runs on each window; the rank keeps,
per rule, the worst window's finding: by severity, then its main number (its share; a
window's share can be above the rank's: synchronisation 54.9% in one window of the H200
transformer, 49.3% over the rank). docs/store.md names them. The list is then made as :func:`analyze.findings.findings` makes it:
unsynchronised devices left out and named, worst first, one finding per rule.
"""

from __future__ import annotations

from typing import Callable

from ..analyze import copy_findings as cop
from ..analyze.compile_findings import compile_findings
from ..analyze import efficiency_findings as eff
from ..analyze.findings import (_copy_bound, _exposed_comm, _host_bound, _idle_between_steps, _input_bound,
                                _launch_bound, _one_per_rule, _sync_stalls, _unsynchronised, by_severity,
                                SEVERITY_ORDER)
from ..analyze import memory_findings as mem
from ..analyze.stall_findings import queued_stall_findings
from ..analyze.finding import Finding, main_number
from ..analyze.registry import Tables
from ..analyze.table import Table
from ..derive.steps import Steps
from ..trace.core import Trace
from . import window_memory

Rule = Callable[..., list[Finding]]
#: every rule in the order ``analyze.findings.findings`` runs them, and whether it reads events
ORDER: tuple[tuple[Rule, bool], ...] = (
    (_host_bound, False), (_input_bound, False), (_launch_bound, True), (_copy_bound, True), (_sync_stalls, True),
    (queued_stall_findings, True), (_idle_between_steps, False), (_exposed_comm, False), (cop.pageable_copies, True), (cop.small_copies, True),
    (mem._peak_dominated, False), (lambda trace, t: mem._growth(trace), True),
    (lambda trace, t: mem._out_of_memory(trace), True), (lambda trace, t: mem._cached(trace), True),
    (eff._low_mfu, False), (lambda trace, t: eff._fusable_chains(trace), True), (eff._low_occupancy, False),
    (compile_findings, True))


class Shell(Trace):
    """The rank without its events: what the table-only rules read of a trace."""

    whole_span: tuple[int, int] = (0, 0)

    @property
    def span_ns(self) -> tuple[int, int]:
        return self.whole_span


def window_findings(view: Trace, tables: dict[str, Table]) -> dict[int, list[Finding]]:
    """The findings of the rules that read events, on one window's view, by rule position."""
    t = Tables(view, tables).__getitem__
    return {i: rule(view, t) for i, (rule, events) in enumerate(ORDER) if events}


def rank_findings(shell: Shell, tables: dict[str, Table], parts: list[dict[int, list[Finding]]],
                  unsynced: dict[str, str], holders: window_memory.Holders | None = None) -> list[Finding]:
    """The rank's findings from its merged ``tables``, its windows' findings ``parts`` and
    the allocations live at each memory peak (``holders``, ``ranks/window_memory.py``)."""
    t = Tables(shell, tables).__getitem__
    out: list[Finding] = []
    for i, (rule, events) in enumerate(ORDER):
        if rule is mem._peak_dominated:  # its holders from the window holding each peak, not the shell's events
            out.extend(mem._peak_dominated(shell, t, lambda by: window_memory.holder_table(holders or {}, by)))
        elif not events:
            out.extend(rule(shell, t))
            continue
        found = [f for p in parts for f in p.get(i, [])]
        if found:  # the worst window's: by severity, then its main number (its share)
            out.append(min(found, key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), -main_number(f))))
    if unsynced:
        out = [f for f in out if f.plane not in unsynced] + _unsynchronised(shell, unsynced)
    return _one_per_rule(by_severity(out))


def shell(trace: Trace, span: tuple[int, int], analysed: tuple[int, int], steps: Steps,
          unsynced: dict[str, str], device: bool) -> Shell:
    """A :class:`Shell` of ``trace`` (the rank read without events; ``device``: whether a
    device plane has events in some window, as ``analyze.common.on_device`` reads)."""
    out = Shell.__new__(Shell)
    out.__dict__.update(trace.__dict__)
    out.whole_span = span
    out.__dict__["_polyprof_memo"] = {"analysed_span": analysed, "steps": steps, "unsynchronised": unsynced,
                                      "on_device": device}
    return out
