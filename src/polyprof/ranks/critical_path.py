"""The critical path of one step of a job: the ranks' dependency graphs joined through
their matched collectives, and what-ifs on it.

Each rank's graph is ``analyze/depgraph.py``'s over the step (by position: the k-th step
of every rank). The k-th collective of a communicator (``ranks/collectives.py``: key and
sequence) ends together on every rank, once the last rank has arrived: its span on each
rank (all of it: a gloo range's parts between the ops it holds too) is replaced by edges
from every rank's start to each rank's end, weighing the end less the last arrival's
start. So a rank that waits in a collective depends on the last to arrive, and the job's
longest path names the rank and the op that hold the step. A host op that waits for a
collective's result (``wait_tensor``, tensor parallel's) holds none of that wait: its end
depends on the collective's end (:func:`_host_waits`).
Point-to-point transfers (``p2p`` rows with a peer among the job's ranks) are joined by
peer and order instead: the k-th send from rank a to b and the k-th recv on b from a; the
recv's end depends on the send's start as on its own.
The ranks' clocks are taken as they are in the traces (align them first,
``ranks/align.py``, where they differ). A collective matched on only some of the ranks
joins those (:func:`_matches`); a rank joined to none is named (``JobGraph.unjoined``).

A what-if scales each chosen event's own time on any path (every stretch of it,
:func:`with_factors`) and takes the longest path again: the step's predicted change (the
rest of the timeline kept as it was).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from ..analyze.collective_roots import ROOTED  # (the others wait for the root, which waits for none)
from ..analyze.common import qualified_names
from ..analyze.critical_path import graph_end, kind_text, path_owner, step_windows
from ..analyze.depgraph import DEPENDENCY, OPERATOR, SYNC, DepGraph, build
from ..analyze.depgraph_context import context
from ..analyze.frames import column, frame
from ..analyze.longest_path import LongestPath, longest_path
from ..derive import cache
from ..analyze.table import Table
from ..trace.core import Trace
from ..trace.sorting import unique
from .align import MATCHED, RankClock, align_ranks
from .collectives import collective_table

COLUMNS = ["rank", "name", "kind", "start_ns", "dur_ns", "on_path_ns"]



@dataclass
class JobGraph:
    """The ranks' graphs as one: graph events are numbered rank after rank (``rank``,
    ``row``: the event's rank and its row in that rank's trace)."""

    graph: DepGraph
    rank: np.ndarray
    ranks: list[int]
    traces: list[Trace]
    collectives: int  # matched collective instances joined
    start_ns: int = 0  # the step's first start over the ranks (on the aligned clock)
    #: the step marks made events (:func:`_step_leads`): each owns one edge, its lead-in
    leads: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the ranks of a job of two or more joined to no other rank in the step, and why
    #: (:func:`_unjoined_why`); those in ``left_out`` have no event in the graph
    unjoined: dict[int, str] = field(default_factory=dict)
    left_out: list[int] = field(default_factory=list)
    #: where no rank is joined and some clock is not aligned: each rank's step start (the
    #: ranks' times are on clocks of their own, so the span is the longest rank's)
    own_clocks: dict[int, int] | None = None

    @property
    def span_ns(self) -> int:
        """The step's wall time with its device work: from its first start on any rank to
        the last end of the work in the graph (``analyze.critical_path.graph_end``); with
        ``own_clocks``, the longest of the ranks' own."""
        if self.own_clocks is None:
            return max(graph_end(self.graph) - self.start_ns, 0)
        g = self.graph
        nodes = np.concatenate([g.src, g.dst]) if len(g.src) else np.arange(len(g.time))
        of = self.rank[nodes >> 1]
        return max([0] + [int(g.time[nodes[of == r]].max(initial=t0)) - t0 for r, t0 in self.own_clocks.items()])

    def event(self, rank: int, row: int) -> int:
        """The graph event of ``row`` of ``rank``'s trace (-1: not in the step's graph)."""
        hit = np.flatnonzero((self.rank == rank) & (self.graph.rows == row))
        return int(hit[0]) if len(hit) else -1


@dataclass
class _Part:
    """One rank's graph of the step and what may join it to the others (events numbered
    in its own graph)."""

    g: DepGraph
    first: int  # its step's start (on the aligned clock)
    prev_end: int  # its end of the step before (int64's least: none)
    colls: list[tuple[tuple[str, int], int, str, int]]  # (key, reference seq), event, op, group size
    n_colls: int  # its collectives in the step, matched or not
    sends: list[tuple[int, int]]  # (peer rank, event)
    recvs: list[tuple[int, int]]


#: what a rank joined to none is in the graph, as the outputs say it
LEFT_OUT = "left out of the path (its waits in collectives are for ranks it is not joined to)"
ALONE = "its own graph, alone"


def unjoined_text(jg: JobGraph) -> str:
    """The ranks of ``jg`` joined to no other, why, and whether their graph is in the
    job's, as one line ("" where every rank is joined): the CLI's note and the export
    track's ``unjoined`` stat."""
    return "; ".join(f"rank {r}: {why}, {LEFT_OUT if r in jg.left_out else ALONE}"
                     for r, why in sorted(jg.unjoined.items()))


def _rank_part(t: Trace, r: int, step: int, clock: RankClock | None, ranks: Collection[int]) -> _Part:
    """Rank ``r``'s graph of the ``step``-th step and its collectives and transfers."""
    _, starts, ends = step_windows(t)
    g = build(t, int(starts[step]), int(ends[step]))
    t0 = np.array([starts[step], ends[step - 1] if step > 0 else starts[step]], np.int64)
    at = clock.fit.to_host(t0) if clock is not None else t0
    local = np.full(t.n_events, -1, np.int64)
    local[g.rows] = np.arange(len(g.rows))
    ct = collective_table(t)
    seqs = _reference_seq(clock, ct) if clock is not None else np.asarray(column(ct, "seq"), np.int64)
    rows = np.asarray(column(ct, "row"), np.int64)
    ge = np.where(rows >= 0, local[np.maximum(rows, 0)], -1)
    p2p = np.asarray(column(ct, "p2p"), bool)
    part = _Part(g, int(at[0]), int(at[1]) if step > 0 else int(np.iinfo(np.int64).min), [],
                 int(((ge >= 0) & ~p2p).sum()), [], [])
    for key, seq, e, op, is_p2p, other, group in zip(column(ct, "key").tolist(), seqs.tolist(), ge.tolist(),
                                                     column(ct, "op").tolist(), p2p.tolist(),
                                                     np.asarray(column(ct, "peer"), np.int64).tolist(),
                                                     np.asarray(column(ct, "group_size"), np.int64).tolist()):
        if e < 0:
            continue
        if not is_p2p:
            if seq >= 0:
                part.colls.append(((key, int(seq)), e, op, group))
        elif other in ranks and other != r and op in ("send", "recv"):  # a transfer with its peer
            (part.sends if op == "send" else part.recvs).append((other, e))
    return part


def _matches(parts: list[_Part], ranks: list[int]
             ) -> tuple[list[list[tuple[int, int]]], list[tuple[int, int, int, int]]]:
    """The collectives that join ranks (each a list of (rank position, event)): the k-th
    of a communicator on two ranks or more (on one rank, in a job of one), once per rank:
    an all-reduce's ranks wait for each other whichever rank is missing, but a rooted one
    (``collective_roots.ROOTED``) joins only with all its ranks (its group's size where
    known, else the job's), as a missing rank may be its root; and the transfers (send's
    rank position and event, recv's): the k-th send from rank a to b with the k-th recv
    on b from a."""
    by: dict[tuple[str, int], list[tuple[int, int]]] = {}
    what: dict[tuple[str, int], tuple[str, int]] = {}
    for i, p in enumerate(parts):
        for ks, e, op, group in p.colls:
            by.setdefault(ks, []).append((i, e))
            what.setdefault(ks, (op, group))
    least = 1 if len(ranks) == 1 else 2
    out = []
    for ks, m in by.items():
        op, group = what[ks]
        whole = len(m) == (group if group > 0 else len(ranks))
        if len(m) >= least and len({i for i, _ in m}) == len(m) and (whole or op not in ROOTED):
            out.append(m)
    pos = {r: i for i, r in enumerate(ranks)}
    sends: dict[tuple[int, int], list[int]] = {}
    recvs: dict[tuple[int, int], list[int]] = {}
    for i, p in enumerate(parts):  # (time order: the collective table's)
        for other, e in p.sends:
            sends.setdefault((i, pos[other]), []).append(e)
        for other, e in p.recvs:
            recvs.setdefault((pos[other], i), []).append(e)
    pairs = [(a, s, b, v) for (a, b), snd in sends.items() for s, v in zip(snd, recvs.get((a, b), []))]
    return out, pairs


def _unjoined_why(part: _Part, clock: RankClock | None) -> str:
    """Why a rank is joined to no other in the step."""
    if clock is not None and clock.fit.method not in MATCHED:
        said = clock.message.split(":", 1)[0] or clock.fit.method  # (align.py's reason, before its details)
        return f"its clock was not aligned from collectives ({said}), so none of them is known to match"
    if not part.n_colls:
        return "it has no collective in the step"
    return "none of its collectives in the step matched another rank's"


def job_graph(traces: dict[int, Trace], step: int, clocks: dict[int, RankClock] | None = None) -> JobGraph:
    """The joined graph of the ``step``-th step (by position) of every rank; ``clocks``
    (``ranks/align.py``'s, see :func:`align`) put each rank's times on one clock and
    number its collectives as the reference rank does; without them the traces' own
    clocks and sequence numbers are taken. A collective matched on some of the ranks
    joins those (:func:`_matches`); a rank joined to none is named in
    ``JobGraph.unjoined``, and where others are joined it is left out of the graph
    (``left_out``) if it has a collective in the step (its wait there is for ranks it is
    not joined to: its own path would hold that wait as its own time) or a clock not
    aligned from events (its times are on another clock); else it stays, alone."""
    ranks = sorted(traces)
    parts = [_rank_part(traces[r], r, step, clocks.get(r) if clocks else None, traces) for r in ranks]
    full_local, pairs = _matches(parts, ranks)
    joined = {i for m in full_local for i, _ in m} | {x for a, _, b, _ in pairs for x in (a, b)}
    unjoined = {ranks[i]: _unjoined_why(p, clocks.get(ranks[i]) if clocks else None)
                for i, p in enumerate(parts) if i not in joined} if len(ranks) > 1 else {}
    out = sorted(i for i, p in enumerate(parts) if i not in joined and len(ranks) > 1 and joined and
                 (p.n_colls > 0 or not getattr((clocks or {}).get(ranks[i]), "aligned", True)))
    for i in out:  # (its events and edges none)
        g = parts[i].g
        parts[i].g = DepGraph(*(x[:0] for x in g))
    graphs = [p.g for p in parts]
    ev_off = np.cumsum([0] + [len(g.rows) for g in graphs]).tolist()
    first = [p.first for p in parts]
    job_start = min((first[i] for i in range(len(parts)) if i not in out), default=0)
    rank = np.concatenate([np.full(len(g.rows), r, np.int64) for r, g in zip(ranks, graphs)])
    rows = np.concatenate([g.rows for g in graphs])
    device = np.concatenate([g.device for g in graphs])
    time = np.concatenate([clocks[r].fit.to_host(g.time) if clocks and r in clocks else g.time
                           for r, g in zip(ranks, graphs)])
    src = np.concatenate([g.src + 2 * ev_off[i] for i, g in enumerate(graphs)])
    dst = np.concatenate([g.dst + 2 * ev_off[i] for i, g in enumerate(graphs)])
    weight = np.concatenate([g.weight for g in graphs])
    etype = np.concatenate([g.etype for g in graphs])
    owner = np.concatenate([np.where(g.owner >= 0, g.owner + ev_off[i], -1) for i, g in enumerate(graphs)])
    full = [[(i, e + ev_off[i]) for i, e in m] for m in full_local]
    joins = _joining_edges(full, [(s + ev_off[a], v + ev_off[b]) for a, s, b, v in pairs], time)
    drop = _own_spans(etype, src, dst, owner, [o for *_, o in joins], len(ranks) == 1)
    host_joined = {i for m in full for i, e in m if not device[e]} if len(ranks) > 1 else set()
    e_off = np.cumsum([0] + [len(g.src) for g in graphs])
    gaps = {i: _host_gaps(graphs[i], traces[ranks[i]]) for i in sorted(host_joined)}
    x_rank, x_rows, x_time, x_edges, marks = _step_leads(ranks, full, device, ev_off, time, step,
                                                         [traces[r] for r in ranks], first, len(rows), host_joined,
                                                         {i for i, (e, _) in gaps.items() if len(e)},
                                                         [p.prev_end for p in parts], job_start)
    for i, mark in marks.items():  # the host time between a joined rank's ops, its step mark's
        e, w = gaps.get(i, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        weight[e + e_off[i]], owner[e + e_off[i]] = w, mark
    for i in sorted(host_joined):  # a host op that waits for a joined collective: the collective's end
        e, w, waits = _host_waits(graphs[i], traces[ranks[i]])
        weight[e + e_off[i]] = w
        x_edges += [(a + 2 * ev_off[i], b + 2 * ev_off[i], ww, o + ev_off[i]) for a, b, ww, o in waits]
    if x_rows:
        rank = np.concatenate([rank, np.array(x_rank, np.int64)])
        rows = np.concatenate([rows, np.array(x_rows, np.int64)])
        device = np.concatenate([device, np.zeros(len(x_rows), bool)])
        time = np.concatenate([time, np.array(x_time, np.int64)])
    keep = ~drop
    x = np.array(joins + x_edges, np.int64).reshape(-1, 4)  # (source node, destination node, weight, owner)
    joined_g = DepGraph(rows, device, time, np.concatenate([src[keep], x[:, 0]]),
                        np.concatenate([dst[keep], x[:, 1]]), np.concatenate([weight[keep], x[:, 2]]),
                        np.concatenate([etype[keep], np.full(len(x), SYNC, np.int8)]),
                        np.concatenate([owner[keep], x[:, 3]]))
    mixed = len(ranks) > 1 and not joined and any(not c.aligned for c in (clocks or {}).values())
    return JobGraph(joined_g, rank, ranks, [traces[r] for r in ranks], len(full), job_start,
                    np.arange(len(x_rows), dtype=np.int64) + len(rows) - len(x_rows), unjoined,
                    [ranks[i] for i in out], dict(zip(ranks, first)) if mixed else None)


def _joining_edges(full: list[list[tuple[int, int]]], pairs: list[tuple[int, int]],
                   time: np.ndarray) -> list[tuple[int, int, int, int]]:
    """The edges (source node, destination node, weight, owner) that join the ranks: each
    matched collective's (``full``: its events, one per rank) from every rank's start to
    each rank's end, weighing the end less the last arrival's start; each transfer
    (``pairs``: its send's event, its recv's): the recv's end depends on the send's start
    as on its own."""
    out: list[tuple[int, int, int, int]] = []
    for m in full:
        evs = [e for _, e in m]
        last = max(int(time[2 * e]) for e in evs)
        out += [(2 * s, 2 * e + 1, max(int(time[2 * e + 1]) - last, 0), e) for s in evs for e in evs]
    for a_ev, b_ev in pairs:
        last = max(int(time[2 * a_ev]), int(time[2 * b_ev]))
        out += [(s, 2 * b_ev + 1, max(int(time[2 * b_ev + 1]) - last, 0), b_ev) for s in (2 * a_ev, 2 * b_ev)]
    return out


#: host ops that wait for a collective's result (functional collectives: DTensor, tensor parallel)
WAIT_OPS = ("_c10d_functional::wait_tensor", "c10d_functional::wait_tensor")


def _host_waits(g: DepGraph, trace: Trace) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int, int]]]:
    """A rank joined through a CPU backend's collective whose host waits for one in an op
    (``wait_tensor``: tensor parallel's functional collectives): the op's time until the
    collective it waits for ends (the one of the rank's collectives that ended last
    within the op) is that collective's wait, which the joining edges carry from the last
    arrival. So the parts of the op's span before that end weigh nothing, and the op's
    end depends on the collective's end. Before, the waiting rank's op kept the wait as
    its own time: with the late rank's lead-in taken away (``--what-if 0:step:0``) the
    path still ran through it (-2.9 ms of a 206 ms lead-in). Returns the op's span edges
    and their weights, and the new edges (source node, destination node, weight, owner),
    in ``g``'s numbering."""
    ids = [i for i in (trace.string_id(n) for n in WAIT_OPS) if i >= 0]
    none = np.zeros(0, np.int64)
    if not ids or not len(g.rows):
        return none, none, []
    host = np.flatnonzero(~g.device)
    waits = host[np.isin(np.asarray(trace.events["name"], np.int64)[g.rows[host]], ids)]
    comm = np.flatnonzero(np.isin(g.rows, context(trace).host_comm))
    c_end = g.time[2 * comm + 1]
    edges, weights, new = [none], [none], []
    for w in waits.tolist():
        start, end = int(g.time[2 * w]), int(g.time[2 * w + 1])
        inside = (c_end >= start) & (c_end <= end)
        if not inside.any():
            continue
        c = int(comm[inside][np.argmax(c_end[inside])])
        done = int(g.time[2 * c + 1])
        own = np.flatnonzero((g.owner == w) & (g.etype == OPERATOR))
        edges.append(own)
        weights.append(np.maximum(g.time[g.dst[own]] - np.maximum(g.time[g.src[own]], done), 0))
        new.append((2 * c + 1, 2 * w + 1, end - done, w))
    return np.concatenate(edges), np.concatenate(weights), new


def _own_spans(etype: np.ndarray, src: np.ndarray, dst: np.ndarray, owner: np.ndarray, events: list[int],
               one_rank: bool) -> np.ndarray:
    """Per edge: is it part of the own span of one of ``events`` (the joined collectives and
    transfers), which the joining edges replace. All of each span, its parts between the
    ops it holds too: a gloo range holds the ops that copy the result in after the wait,
    and a part left would carry the rank's wait past the joining edges. In a job of one
    rank, which waits for none, the start-to-end edge alone (its own graph's path)."""
    drop = (etype == OPERATOR) & np.isin(owner, np.asarray(events, np.int64))
    if one_rank:
        drop &= (src == 2 * owner) & (dst == 2 * owner + 1)
    return drop


def _reference_seq(c: RankClock, ct: Table) -> np.ndarray:
    """The reference rank's seq of each of a rank's collectives (-1: none), all -1 for a
    rank whose clock was not aligned from collectives: none of its collectives was found
    to match (joining them by their own order would join different collectives, and
    could make the graph cyclic)."""
    if c.fit.method not in MATCHED:
        return np.full(len(ct), -1, np.int64)
    return c.reference_seq(ct)


def _host_gaps(g: DepGraph, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """A rank joined through a CPU backend's collective: the edges of its own graph
    ``g`` that join two consecutive top-level calls of a thread, with the time between them
    that no wait explains. The time a rank's host spends between its ops (a sleep, data
    loading, Python) delays its arrival at the next collective as much as an op would;
    HTA's graph weighs it nothing, so a late rank's sleep mid-step left the path. Left
    out: the backend's worker threads (between two collectives they wait for work), a
    gap the backward pass fills on another thread (its own edges carry it), and the part
    of a gap while one of the rank's collectives was in flight: the thread may be waiting
    for it (DDP's reducer does, recording nothing), and a wait for the others holds no
    time of its own (the collective's range can even end after the thread goes on)."""
    n_e = len(g.src)
    if not n_e:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ev = np.asarray(trace.events["track"], np.int64)[g.rows]
    thread = np.where(g.device, -1, np.asarray(cache.threads(trace), np.int64)[ev])
    ctx = context(trace)  # the backend's ranges, and XLA's CPU ops (their threads wait for work alike)
    worker = np.isin(g.rows, ctx.host_comm) | (ctx.xla_op[g.rows] & ~g.device)
    thread[np.isin(thread, thread[worker])] = -1  # (a thread holding a collective's range or XLA's ops)
    sa, sd = g.src >> 1, g.dst >> 1
    cross = (g.etype == DEPENDENCY) & (thread[sa] != thread[sd])  # the backward pass's links
    gap = ((g.etype == DEPENDENCY) & (g.owner < 0) & (g.src % 2 == 1) & (g.dst % 2 == 0)
           & (thread[sa] == thread[sd]) & (thread[sa] >= 0) & ~np.isin(g.src, g.src[cross]))
    at = np.flatnonzero(gap)
    t_a, t_b = g.time[g.src[at]], g.time[g.dst[at]]
    comm = np.flatnonzero(worker)
    o = np.argsort(g.time[2 * comm], kind="stable")
    c_start = g.time[2 * comm[o]]
    c_end = np.maximum.accumulate(g.time[2 * comm[o] + 1]) if len(comm) else np.zeros(1, np.int64)
    i = np.searchsorted(c_start, t_b, "left") - 1  # the last end of the collectives begun before the gap's end
    busy = np.where(i >= 0, c_end[np.maximum(i, 0)], np.iinfo(np.int64).min)
    w = t_b - np.maximum(t_a, busy)  # the gap after that end: none while one was in flight
    keep = w > 0
    return at[keep], w[keep]


def _step_leads(ranks: list[int], full: list[list[tuple[int, int]]], device: np.ndarray, ev_off: list[int],
                time: np.ndarray, step: int, traces: list[Trace], first: list[int], n_rows: int,
                host_joined: Collection[int], gaps: Collection[int] = (), prev_end: list[int] | None = None,
                job_start: int | None = None
                ) -> tuple[list[int], list[int], list[int], list[tuple[int, int, int, int]], dict[int, int]]:
    """A rank's arrival at a collective waits for its host to reach the call, and the
    graph's weights leave out the time before the rank's first call (no node before
    it): a rank that began its step after the others (``first``: each rank's step start
    on the aligned clock; its host still in the step before, or outside the recorded
    steps) arrives late at the step's first collective. In a job of two ranks or more,
    each rank joined through a collective gets its step's mark as an event, at the job's
    step start (the first rank's), with one edge into its first call's start weighing
    how much later its step began; for a rank joined through a CPU backend's collective
    the time from its step's start to its first call counts too (a late rank's sleep,
    data loading, Python outside any op), so from the job's step start to that call.
    For device collectives that time stays weightless, as in one rank's graph (HTA's
    weights). That event's time on the path is the edge's weight.

    A lead-in counts only from the end of the rank's step before (``prev_end``, on the
    aligned clock): a rank still in that step is in its graph, and on that step's path.
    Where ranks are out of step their step windows overlap (a gloo DDP job whose rank 1
    ended step 4 10.3 ms after rank 0 began step 5), and that time was on both steps'
    paths: rank 1's step-4 work, then its step-5 lead-in (the two paths 165.3 ms of the
    157.7 ms from step 4's start to step 5's end), and a what-if on step 5's mark took
    it away too.

    ``job_start``: the job's step start (default: the first of ``first``; a rank left out
    of the graph has none). ``host_joined``: the ranks joined through a CPU backend's
    collective. A rank in
    ``gaps`` (host time between its ops weighs: :func:`_host_gaps`) gets its step mark
    even without a lead-in, to own that time.

    Returns the new events' ranks, rows (the step marks) and node times, their edges
    (source node, destination node, weight, owner event), and per rank (its position)
    its step mark's event."""
    job_start = min(first, default=0) if job_start is None else job_start
    lead = sorted({i for m in full if len(ranks) > 1 for i, _ in m})
    x_rank: list[int] = []
    x_rows: list[int] = []
    x_time: list[int] = []
    edges: list[tuple[int, int, int, int]] = []
    marks: dict[int, int] = {}
    for i in lead:
        steps = cache.steps(traces[i])
        host_ev = np.arange(ev_off[i], ev_off[i + 1])
        host_ev = host_ev[~device[host_ev]]
        if not len(steps) or step >= len(steps.rows) or not len(host_ev):
            continue
        first_ev = int(host_ev[np.argmin(time[2 * host_ev])])
        at = int(time[2 * first_ev])
        since = max(job_start, prev_end[i]) if prev_end else job_start
        weight = at - since if i in host_joined else min(first[i], at) - since
        if weight <= 0 and i not in gaps:
            continue
        ev = n_rows + len(x_rows)
        marks[i] = ev
        x_rank.append(ranks[i])
        x_rows.append(int(steps.rows[step]))
        x_time += [job_start, job_start]
        if weight > 0:
            edges.append((2 * ev, 2 * first_ev, weight, ev))
    return x_rank, x_rows, x_time, edges, marks


def path_table(jg: JobGraph, p: LongestPath) -> Table:
    """The events on the job's path with their time on it, by rank then start."""
    g = jg.graph
    own = path_owner(g, p.edges)
    ok = own >= 0
    on = np.bincount(own[ok], weights=g.weight[p.edges][ok], minlength=len(g.rows)).astype(np.int64)
    ev = np.flatnonzero(on > 0)
    names = np.zeros(len(ev), dtype=object)
    kinds = np.zeros(len(ev), dtype=object)
    for r in unique(jg.rank[ev]).tolist():  # an XLA op: module/op, as each rank's tables name it
        at = np.flatnonzero(jg.rank[ev] == r)
        t = jg.traces[jg.ranks.index(int(r))]
        codes, labels, _ = qualified_names(t, g.rows[ev[at]])
        names[at] = labels[codes]
        kinds[at] = kind_text(t, g.rows[ev[at]], g.device[ev[at]])  # (the summary's kind words)
    starts, durs = [], []
    for e in ev.tolist():  # the path's events: a few hundred per step
        t = jg.traces[jg.ranks.index(int(jg.rank[e]))]
        row = int(g.rows[e])
        starts.append(int(t.events["start_ns"][row]))
        durs.append(int(t.events["dur_ns"][row]))
    return frame({"rank": jg.rank[ev], "name": names, "kind": kinds,
                  "start_ns": np.array(starts, np.int64), "dur_ns": np.array(durs, np.int64), "on_path_ns": on[ev]})


JOB_COLUMNS = ["step", "rank", "name", "kind", "start_ns", "dur_ns", "on_path_ns", "path_ns", "span_ns"]


def align(traces: dict[int, Trace]) -> dict[int, RankClock]:
    """Each rank's clock onto the lowest rank's, from the matched collectives
    (``ranks/align.py``; a rank without a match keeps its own clock)."""
    return align_ranks({r: collective_table(t) for r, t in traces.items()})


def n_steps(traces: dict[int, Trace]) -> int:
    """Steps every rank has (by position; a trace without steps is one)."""
    return min((len(step_windows(t)[0]) for t in traces.values()), default=0)


def job_critical_path(traces: dict[int, Trace], steps: list[int] | None = None,
                      clocks: dict[int, RankClock] | None = None) -> Table:
    """The job's critical path of each step (by position; default every step all ranks
    have): the events on it, with ``step``, ``rank``, ``name``, ``kind``, ``start_ns``
    and ``dur_ns`` (on the rank's own clock), ``on_path_ns`` (its time on the path) and
    ``path_ns`` (the step's path length), ``span_ns`` (:attr:`JobGraph.span_ns`: the path
    is never longer). By step, then rank, then start. For one trace the path is the one of
    ``analyze.critical_path`` (the summary's ``critical_path`` table): the same graph."""
    parts = []
    for k in (range(n_steps(traces)) if steps is None else steps):
        jg = job_graph(traces, k, clocks)
        p = longest_path(jg.graph)
        t = path_table(jg, p)
        cols = {c: np.asarray(t[c]) for c in t.columns}
        n = len(cols["rank"])
        parts.append({"step": np.full(n, k, np.int64), **cols, "path_ns": np.full(n, p.length, np.int64),
                      "span_ns": np.full(n, jg.span_ns, np.int64)})
    if not parts:
        return frame({c: np.zeros(0, object if c in ("name", "kind") else np.int64) for c in JOB_COLUMNS})
    out = {c: np.concatenate([x[c] for x in parts]) for c in JOB_COLUMNS}
    o = np.lexsort((out["start_ns"], out["rank"], out["step"]))
    return frame({c: v[o] for c, v in out.items()})
