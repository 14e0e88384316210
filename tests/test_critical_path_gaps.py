"""A gap on a stream on the critical path belongs to no event (``critical_path.path_owner``):
in the per-rank table, the job's table and both critical-path tracks. HTA's graph gives
the gap to the activity before it, so a kernel had more time on the path than it lasted
(the job table of HTA's two sampled ranks: 295 rows, 50.9 ms too much in step 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.critical_path_track import with_critical_path
from polyprof.analyze.depgraph import KERNEL_KERNEL, build, context
from polyprof.analyze.frames import column
from polyprof.analyze.longest_path import longest_path
from polyprof.derive import cache
from polyprof.ranks.critical_path import align, job_graph, n_steps, path_table

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"
RANKS = [KINETO / "sampled_rank0.json.gz", KINETO / "sampled_rank1.json.gz"]


def test_no_event_has_more_time_on_the_path_than_it_lasted() -> None:
    traces = {r: polyprof.load(p) for r, p in enumerate(RANKS)}
    clocks = align(traces)
    gaps = 0
    for k in range(n_steps(traces)):
        jg = job_graph(traces, k, clocks)
        p = longest_path(jg.graph)
        gaps += int((jg.graph.etype[p.edges] == KERNEL_KERNEL).sum())
        table = path_table(jg, p)
        assert (np.asarray(table["on_path_ns"]) <= np.asarray(table["dur_ns"])).all(), k
    assert gaps > 0  # the paths do cross stream gaps
    for t in traces.values():
        cp = critical_path(t)
        assert (np.asarray(column(cp, "on_path_ns")) <= np.asarray(column(cp, "dur_ns"))).all()


def test_the_track_names_a_stream_gap_as_a_gap() -> None:
    t = polyprof.load(RANKS[1])
    steps = cache.steps(t)
    g = build(t, int(steps.start[0]), int(steps.end[0]), context(t))
    p = longest_path(g)
    e = p.edges[(g.weight[p.edges] > 0) & (g.etype[p.edges] == KERNEL_KERNEL)]
    assert len(e)
    tracked = with_critical_path(t)
    track = [i for i, tr in enumerate(tracked.tracks) if tr.kind == "derived" and "critical" in tr.name]
    rows = np.flatnonzero(np.isin(tracked.events["track"], track))
    names = tracked.names(rows)
    starts = tracked.events["start_ns"][rows]
    gap_starts = set(g.time[g.src[e]].tolist())
    labelled = {str(n) for n, s in zip(names.tolist(), starts.tolist()) if int(s) in gap_starts}
    assert labelled == {"kernel gap"}, labelled
