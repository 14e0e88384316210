"""A diff's traces left out (no steps) are out of its samples' labels too, and a rank
whose test was skipped is no look of the correction across ranks.

Real recordings made here (``python -m polyprof run`` of a loop of two ``time.sleep``
sections, as tests/test_diff_samples.py). Before: ``_leave_out`` fixed the counts but
left the traces in ``trace_of``, so a run of a stepped rank-0 trace and a stepless
rank-1 trace was not one trace per run: its rank 0 was compared with nothing of a run
whose one kept trace is rank 1 ("no rank is in both runs"). And ``compare`` multiplied
the most-changed rank's p by every rank, also those whose test was skipped."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.diff_stats import Samples, compare, smallest_p

PROGRAM = """\
import os, time, polyprof
for _ in range(int(os.environ.get("STEPS", "6"))):
    with polyprof.section("work"):
        time.sleep(0.002)
    with polyprof.section("io_wait"):
        time.sleep(0.003)
    if not os.environ.get("NO_STEP"):
        polyprof.step()
"""


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, polyprof.Trace]:
    """Two recordings of 6 steps and one of 12 iterations without steps."""
    d = tmp_path_factory.mktemp("left_out")
    (d / "loop.py").write_text(PROGRAM)
    envs = {"a": {}, "b": {}, "nostep": {"STEPS": "12", "NO_STEP": "1"}}
    procs = {k: subprocess.Popen([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o",
                                  str(d / f"{k}.polyprof"), str(d / "loop.py")], cwd=d,
                                 env={**os.environ, **e}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True) for k, e in envs.items()}
    for proc in procs.values():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    return {k: polyprof.load(d / f"{k}.polyprof") for k in envs}


def test_a_run_left_with_one_trace_is_one_trace_per_run(traces):
    """A: rank 0 stepped, rank 1 without steps; B: rank 0 without steps, rank 1 stepped.
    Each run keeps one trace, so their ranks are one stratum and the steps are tested."""
    d = diff([traces["a"], traces["nostep"]], [traces["nostep"], traces["b"]])
    o = d.overview
    assert [x["rank"] for x in o["a"]["left_out"]] == [1] and [x["rank"] for x in o["b"]["left_out"]] == [0]
    assert o["ranks"] == [0], o["ranks"]
    assert o["untestable"] is None, o["untestable"]
    assert o["ranks_not_tested"] == {"a": [], "b": []}
    assert not any("some are in one run only" in line for line in d.verdict), d.verdict


def test_a_rank_whose_test_was_skipped_is_no_look():
    """Rank 0: 5 steps a side wholly apart; rank 1: one step a side (the rank test cannot
    run). The row's p is rank 0's alone, the smallest its sizes give, as ``smallest_p``
    says. Before: rank 0's p doubled (two ranks counted), 2 x 2/252."""
    run = np.zeros(6, np.int64)
    rank = np.array([0, 0, 0, 0, 0, 1])
    a = Samples(np.array([[1e6, 1.1e6, 1.2e6, 1.3e6, 1.4e6, 1e6]]), run, rank)
    b = Samples(np.array([[2e6, 2.1e6, 2.2e6, 2.3e6, 2.4e6, 2e6]]), run, rank)
    c = compare(a, b, "rank")
    assert c.strata == [0, 1] and c.sizes == [(5, 5, False)]
    assert float(c.p[0]) == pytest.approx(2 / 252)
    assert c.min_p == pytest.approx(float(c.p[0])) == pytest.approx(smallest_p(c.sizes, len(c.sizes), "rank"))
    # three ranks, two tested: the correction counts two
    run3 = np.zeros(11, np.int64)
    rank3 = np.array([0] * 5 + [1] * 5 + [2])
    x = np.array([[1e6, 1.1e6, 1.2e6, 1.3e6, 1.4e6] * 2 + [1e6]])
    c3 = compare(Samples(x, run3, rank3), Samples(x + 1e6, run3, rank3), "rank")
    assert c3.sizes == [(5, 5, False)] * 2
    assert c3.min_p == pytest.approx(float(c3.p[0]))
