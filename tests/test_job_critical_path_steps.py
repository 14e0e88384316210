"""The job's critical path of consecutive steps when the ranks are out of step
(``ranks/critical_path.py``, ``_step_leads``), on real gloo jobs recorded with torchrun.

A rank's step k window starts where its own step k starts, and the job's step k at the
first rank's start: where a rank ends step k-1 after another began step k the job's
windows overlap. A rank's lead-in (its step mark's edge from the job's step start to its
first call) counted that overlap, which is its step k-1, on that step's graph and path:
the same time on two steps' paths. DDP with rank 1 sleeping 50 ms at the start of steps
3-5 (gloo_ddp ``late``): rank 1 ended step 4 10.3 ms after rank 0 began step 5, and the
paths of steps 4 and 5 held it twice (77.1 + 88.2 ms over the 157.7 ms from step 4's
start to step 5's end); the what-if removing rank 1's step-5 delay (its 50 ms sleep and
the host time between its ops) predicted -61.7 ms. FSDP2 and tensor parallel on gloo,
where the late rank sleeps in the step before the one the others wait in: the one 200 ms
sleep on both steps' paths (485.5 ms of paths over 303.9 ms of steps; 414.6 over 214.7).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import step_windows
from polyprof.analyze.longest_path import longest_path
from polyprof.ranks.critical_path import align, job_graph, n_steps
from polyprof.ranks.what_if import what_if_op

DATA = Path(__file__).parent / "data" / "traces"
JOBS = {"ddp_late": ("gloo_ddp/late.rank0.pt.trace.json.gz", "gloo_ddp/late.rank1.pt.trace.json.gz"),
        "fsdp2": ("gloo_fsdp2/rank0.pt.trace.json.gz", "gloo_fsdp2/rank1.pt.trace.json.gz"),
        "tp": ("gloo_tp/tp.rank0.pt.trace.json.gz", "gloo_tp/tp.rank1.pt.trace.json.gz")}


def _job(name: str) -> dict[int, polyprof.Trace]:
    return {r: polyprof.load(DATA / f) for r, f in enumerate(JOBS[name])}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_steps_paths_do_not_count_the_overlap_twice(name):
    """Each rank's lead-in starts no earlier than its own end of the step before (on the
    aligned clock), and the steps' paths together are no longer than the steps: from the
    first step's start to the last step's end (each step's path a chain inside its own
    window, which overlap only by the ranks' concurrent work)."""
    traces = _job(name)
    clocks = align(traces)
    total, first, last = 0, None, 0
    for k in range(n_steps(traces)):
        jg = job_graph(traces, k, clocks)
        g = jg.graph
        total += longest_path(g).length
        first = jg.start_ns if first is None else first
        last = max(last, jg.start_ns + jg.span_ns)
        for mark in jg.leads.tolist():
            lead = np.flatnonzero((g.owner == mark) & (g.src == 2 * mark))
            if not len(lead) or k == 0:
                continue
            r = int(jg.rank[mark])
            ends = step_windows(traces[r])[2]
            prev_end = int(clocks[r].fit.to_host(np.array([ends[k - 1]], np.int64))[0])
            (e,) = lead.tolist()
            assert int(g.time[g.dst[e]]) - int(g.weight[e]) >= prev_end, (k, r)
    assert first is not None and total <= last - first, (total, last - first)


def test_what_if_on_a_late_ranks_step_is_its_own_delay():
    """DDP, rank 1 sleeping 50 ms at the start of step 5 after ending step 4 10.3 ms after
    rank 0 began step 5: taking away rank 1's step-5 delay (its step mark: the lead-in and
    the host time between its ops, the sleep among them) predicts about the sleep, not
    the sleep and the end of step 4 (before: -61.7 ms)."""
    traces = _job("ddp_late")
    clocks = align(traces)
    numbers = step_windows(traces[1])[0].tolist()
    k = numbers.index(5)
    jg = job_graph(traces, k, clocks)
    starts = [int(clocks[r].fit.to_host(step_windows(traces[r])[1][k:k + 1])[0]) for r in (0, 1)]
    assert 10_000_000 < starts[1] - starts[0] < 11_000_000  # rank 1 began step 5 10.3 ms late
    change, n = what_if_op(jg, 1, "ProfilerStep#5", 0.0)
    assert n == 1 and -53_000_000 <= change <= -45_000_000, change
