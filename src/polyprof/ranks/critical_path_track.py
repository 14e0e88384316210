"""The job's critical path as a track: ``with_job_critical_path(merged, traces)`` is a job's
merged trace (``TraceSet.merged``: every rank on the reference rank's clock) plus a derived
track "critical path" on a host plane of its own, named "critical path" (of the first
rank's source: not one more process named after rank 0), one slice per stretch of each
step's path through the joined ranks (``ranks/critical_path.py``), so Perfetto and Chrome
JSON show which rank and op hold the step, and where the path crosses from rank to rank.
Where the ranks are out of step, step k's path can end on one rank after step k+1's has
begun on another: then step k+1 goes on a second track, "critical path (2)", as
``analyze/critical_path_track.path_lanes`` places them (no two slices of a track overlap).

A slice is a path edge with weight: it ends at the edge's end on the aligned clock and lasts
the edge's weight (a collective's stretch runs from the last rank's arrival to the end), so
a step's slices sum to its path length. Named as in ``analyze/critical_path_track.py``
(the event it belongs to, an XLA op as ``module/op``, else "launch delay", "kernel gap",
"wait"), with the stats ``step`` (the first rank's step number, as the one-rank track), ``rank`` (of the event, or of the edge's end), ``edge`` and ``on`` (the track),
and where a step joined some rank to no other (``JobGraph.unjoined``), ``unjoined`` on
every slice: which ranks, why, and whether they are in the graph
(``critical_path.unjoined_text``; "" in the steps that joined every rank).
"""

from __future__ import annotations

import numpy as np

from ..analyze.common import qualified_names
from ..analyze.critical_path import path_owner, step_windows
from ..analyze.critical_path_track import UNOWNED, add_path_tracks, is_path_track
from ..analyze.depgraph import EDGE_TYPES
from ..analyze.longest_path import longest_path
from ..trace import metadata_keys as mkeys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from .align import RankClock
from .critical_path import job_graph, n_steps, unjoined_text
from ..trace.sorting import unique

#: the name of the plane (a process in Perfetto and Chrome JSON) that holds the track
PROCESS = "critical path"


def with_job_critical_path(merged: Trace, traces: dict[int, Trace],
                           clocks: dict[int, RankClock] | None = None) -> Trace:
    """``merged`` plus the job's "critical path" track (``merged`` is not changed; one that
    has the track already is returned as it is). ``traces``: the ranks, as loaded;
    ``clocks``: their alignment onto the clock ``merged`` is on (``critical_path.align``)."""
    if any(is_path_track(t) for t in merged.tracks):
        return merged
    host = next((p for p in merged.planes if p.kind == "host"), None)
    if host is None:
        return merged
    parts: list[tuple[np.ndarray, ...]] = []
    unowned = np.array([UNOWNED[x] for x in EDGE_TYPES], dtype=object)
    numbers = step_windows(traces[min(traces)])[0] if traces else np.zeros(0, np.int64)  # the first rank's
    for k in range(n_steps(traces)):
        jg = job_graph(traces, k, clocks)
        g = jg.graph
        p = longest_path(g)
        e = p.edges[g.weight[p.edges] > 0]
        own = path_owner(g, e)
        ev = np.where(own >= 0, own, g.dst[e] >> 1)
        rank = jg.rank[ev]
        label = unowned[g.etype[e]]
        on = np.full(len(e), "", dtype=object)
        for r in unique(rank).tolist():
            t = jg.traces[jg.ranks.index(r)]
            m = np.flatnonzero((rank == r) & (own >= 0))
            rows = g.rows[ev[m]]
            codes, labels, _ = qualified_names(t, rows)  # an XLA op: module/op, as the rank's tables name it
            label[m] = labels[codes]
            on[m] = np.array([tr.name for tr in t.tracks], dtype=object)[t.events["track"][rows]]
        end, w = g.time[g.dst[e]], g.weight[e]
        parts.append((end - w, w, label, np.full(len(e), numbers[k], np.int64), rank,
                      np.array(EDGE_TYPES, dtype=object)[g.etype[e]], on, np.full(len(e), unjoined_text(jg), object)))
    if not parts or not sum(len(x[0]) for x in parts):
        return merged
    start, dur, label, step, rank, etype, on, unjoined = (np.concatenate([x[i] for x in parts]) for i in range(8))
    b = TraceBuilder(metadata={})
    pid = b.plane(PROCESS, host.kind, host.vendor, host.index, 0, {}, source=host.source)
    stats = {"step": step, "rank": rank, "edge": etype, "on": on}
    if any(unjoined):  # (only where some step joined a rank to none)
        stats["unjoined"] = unjoined
    add_path_tracks(b, pid, label, start, dur, stats)
    lines = b.build()
    lines.metadata[mkeys.DERIVED] = merged.metadata.get(mkeys.DERIVED, False)
    return merged.extend(lines)
