"""The job's critical path across ranks (ranks/critical_path.py): 4 ranks made from a real
trace (tests/rankmaker.py, clocks equal), joined through their matched all-reduces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.longest_path import longest_path
from polyprof.ranks.critical_path import job_graph, path_table, what_if
from rankmaker import make_ranks

SRC = Path(__file__).parent / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
STEP, SLOW = 1, 3


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    return make_ranks(SRC, tmp_path_factory.mktemp("base"), [0, 0, 0, 0]), None


def test_identical_ranks_job_path_equals_one_ranks(jobs):
    base, _ = jobs
    traces = {r: polyprof.load(p) for r, p in enumerate(base)}
    jg = job_graph(traces, STEP)
    assert jg.collectives >= 5  # the step's all-reduces, matched across the 4 ranks
    from polyprof.analyze.critical_path import critical_path

    one = critical_path(traces[0])
    steps = np.unique(column(one, "step"))
    single = int(column(one, "path_ns")[column(one, "step") == steps[STEP]][0])
    assert longest_path(jg.graph).length == single


def test_what_if_on_the_joined_graph(jobs):
    """Identical ranks hold the step together: one rank's op on the path 3 ms longer makes
    the step 3 ms longer (that rank alone now holds it), 3 ms shorter changes nothing (the
    other ranks still hold it); an op off the path changes nothing until its slack is used."""
    base, _ = jobs
    traces = {r: polyprof.load(p) for r, p in enumerate(base)}
    jg = job_graph(traces, STEP)
    p = longest_path(jg.graph)
    on = path_table(jg, p)
    assert set(column(on, "rank").tolist()) == {0}  # ties go to the first rank
    d = 3_000_000
    big = np.flatnonzero(column(on, "dur_ns") == column(on, "on_path_ns"))  # wholly on the path
    i = int(big[np.argmax(column(on, "on_path_ns")[big])])
    t = traces[SLOW]
    row = int(np.flatnonzero((t.events["start_ns"] == column(on, "start_ns")[i])
                             & (t.events["dur_ns"] == column(on, "dur_ns")[i]))[0])
    assert what_if(jg, SLOW, row, d) == d
    assert what_if(jg, SLOW, row, -d) == 0
    assert what_if(jg, 0, row, -int(column(on, "dur_ns")[i])) == 0  # rank 0 too: the others hold it
    # the job path after the change runs through that rank's op
    g = jg.graph
    e = jg.event(SLOW, row)
    w = g.weight.copy()
    w[(g.owner == e) & (g.etype == 0)] += d
    from polyprof.analyze.depgraph import DepGraph

    p2 = longest_path(DepGraph(g.rows, g.device, g.time, g.src, g.dst, w, g.etype, g.owner))
    assert e in set((p2.nodes >> 1).tolist())
    assert SLOW in set(column(path_table(jg, p2), "rank").tolist())
