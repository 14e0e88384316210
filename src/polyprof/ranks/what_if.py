"""What-ifs on a step's joined graph (``critical_path.JobGraph``): the step's predicted
change if events took longer or shorter (``polyprof critical-path --what-if``), from the
longest path of the graph with their edges reweighed; docs/analysis.md, "Across ranks"."""

from __future__ import annotations

import numpy as np

from ..analyze.critical_path import path_owner
from ..analyze.depgraph import OPERATOR, SYNC, DepGraph
from ..analyze.longest_path import longest_path
from .critical_path import JobGraph


def what_if(jg: JobGraph, rank: int, row: int, delta_ns: int) -> int:
    """The step's predicted change (ns) if ``row`` of ``rank``'s trace took ``delta_ns``
    longer (negative: shorter), from the joined graph's longest path: longer, its end
    that much later (:func:`with_deltas`); shorter, its own time on any path (all of its
    stretches, :func:`with_factors`) scaled as its duration would be, by
    ``(duration + delta_ns) / duration`` (so a section of 90 ms, 80 of them its own time
    outside its ops, taken down by 90 ms loses those 80 ms; its ops keep theirs)."""
    e = jg.event(rank, row)
    if e < 0:
        return 0
    if delta_ns >= 0:
        return with_deltas(jg, np.array([e], np.int64), np.array([delta_ns], np.int64))
    dur = int(jg.traces[jg.ranks.index(rank)].events["dur_ns"][row])
    factor = max(dur + delta_ns, 0) / dur if dur > 0 else 1.0
    return with_factors(jg, np.array([e], np.int64), np.array([factor]))


def with_deltas(jg: JobGraph, events: np.ndarray, deltas: np.ndarray) -> int:
    """The step's predicted change (ns) if each graph event of ``events`` ended its
    ``deltas`` later (made longer at its end: the edges into its end node that carry its
    time change by it, none below 0). For an event made shorter or scaled, all of whose
    own time changes, :func:`with_factors`."""
    g = jg.graph
    if not len(events):
        return 0
    base = longest_path(g).length
    by_event = np.zeros(len(g.rows), np.int64)
    by_event[events] = deltas
    own = np.maximum(g.owner, 0)
    span = (g.owner >= 0) & (g.dst == 2 * own + 1) & ((g.etype == OPERATOR) | (g.etype == SYNC))
    span |= _lead_edges(jg)
    w = g.weight.copy()
    w[span] = np.maximum(w[span] + by_event[own[span]], 0)
    changed = DepGraph(g.rows, g.device, g.time, g.src, g.dst, w, g.etype, g.owner)
    return longest_path(changed).length - base


def with_factors(jg: JobGraph, events: np.ndarray, factors: np.ndarray | float) -> int:
    """The step's predicted change (ns) if each graph event of ``events`` took its
    ``factors`` times as long: every edge whose time the path gives to the event
    (``analyze.critical_path.path_owner``: all of its own time, each stretch of it before,
    between and after its children, a section's idle time on the work it waited for, a
    joined collective's stretch after the last arrival, a step mark's lead-in and the
    host time between its rank's ops) takes that many times its weight; its children
    keep theirs (each scaled only where it is among ``events`` too). So a what-if scales
    what the path's table says an event holds: before, only the edges into an event's
    end changed, by its whole duration's share, and a ``load`` section 80.5 ms on the
    path, sleeping before its one op, predicted -19.1 us (its stretch after that op)."""
    g = jg.graph
    if not len(events):
        return 0
    by_event = np.ones(len(g.rows), np.float64)
    by_event[events] = factors
    own = path_owner(g, np.arange(len(g.src)))
    scaled = own >= 0
    scaled[scaled] = by_event[own[scaled]] != 1.0
    if not scaled.any():
        return 0
    base = longest_path(g).length
    w = g.weight.copy()
    w[scaled] = np.maximum(np.round(g.weight[scaled] * by_event[own[scaled]]), 0).astype(np.int64)
    changed = DepGraph(g.rows, g.device, g.time, g.src, g.dst, w, g.etype, g.owner)
    return longest_path(changed).length - base


def _lead_edges(jg: JobGraph) -> np.ndarray:
    """Per edge of the joined graph: is it a step mark's lead-in (:func:`_step_leads`)."""
    g = jg.graph
    if not len(jg.leads):
        return np.zeros(len(g.src), bool)
    is_lead = np.zeros(len(g.rows), bool)
    is_lead[jg.leads] = True
    return (g.owner >= 0) & is_lead[np.maximum(g.owner, 0)] & (g.src == 2 * np.maximum(g.owner, 0))


def what_if_op(jg: JobGraph, rank: int, pattern: str, factor: float) -> tuple[int, int]:
    """(the step's predicted change in ns, events changed) if every op, call, section or
    device activity of ``rank`` in the step whose name holds ``pattern``
    (case-insensitive) took ``factor`` times as long (0.8: 20% faster): each one's own
    time on any path scaled (:func:`with_factors`), as the path's table counts it. A step
    mark on the path (kind ``step``: the time from the job's step start to the rank's
    first call, :func:`_step_leads`, and for a rank joined through a CPU collective the
    host time between its ops, :func:`_host_gaps`) is that time, not the step: ``1:step
    3:0`` asks what if rank 1 reached its first call of step 3 at the job's step start
    and lost no time between its ops."""
    g = jg.graph
    mine = np.flatnonzero(jg.rank == rank)
    if not len(mine):
        return 0, 0
    t = jg.traces[jg.ranks.index(rank)]
    want = pattern.lower()
    hit = np.fromiter((want in s.lower() for s in t.strings), bool, len(t.strings))
    ev = mine[hit[np.asarray(t.events["name"], np.int64)[g.rows[mine]]]]
    return with_factors(jg, ev, factor), len(ev)
