"""The diff's "Ranks apart" line: which rows measure waiting, and who waited for whom.

Real 2-rank DDP jobs on gloo (torchrun, ``polyprof run``, exported as Kineto JSON):
tests/data/traces/gloo_ddp_compute, where rank 1 of ``slow`` computes more each step
(the job report: rank 1 last at 19 of 19 collectives, the others waited 1.96 s for it)
and ``fast`` has no slow rank; and tests/data/traces/gloo_ddp's ``late`` (rank 1 sleeps in
steps 3-5) and ``even``. Before, ``polyprof diff slow fast`` named ``c10d::allreduce_``,
the op that only posts DDP's all-reduce to gloo's worker thread, and said "rank 1
waiteded for rank 0 in A": a typo, and the other way round from the straggler table."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polyprof
from polyprof.analyze.diff import diff
from polyprof.analyze.diff_apart import _apart, measures_wait
from polyprof.analyze.frames import column
from polyprof.analyze.units import fmt_ns

UNITS = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}


def _job(traces_dir, folder: str, run: str) -> list:
    return [polyprof.load(f) for f in sorted((traces_dir / folder).glob(f"{run}.rank*.pt.trace.json.*"))]


def _apart_lines(d) -> list[str]:
    return [line for line in d.verdict if line.startswith("Ranks apart")]


def _ns(value: str, unit: str) -> float:
    return float(value) * UNITS[unit]


def test_the_line_says_waited_once(traces_dir):
    """`late` then `even` (B faster): rank 0 waited for rank 1 in A. Before: "rank 0
    waiteded for rank 1 in A?" (two chained replaces of "wait")."""
    d = diff(_job(traces_dir, "gloo_ddp", "late"), _job(traces_dir, "gloo_ddp", "even"))
    lines = _apart_lines(d)
    assert len(lines) == 1, d.verdict
    assert "waiteded" not in d.text
    # a rank's time in it is the union of its ranges on its two gloo threads (DDP's two buckets overlap); the
    # figures were their sums: "fell (55.7 ms -> 13.7 ms per step) while rank 1's grew (22.4 ms -> 24.7 ms)",
    # rank 0 "in" it 55.7 ms a step of 47.7 (the traces' unions per step: 30.7, 8.98, 15.6 and 13.4 ms)
    assert lines[0].startswith("Ranks apart in section gloo:all_reduce, a collective: rank 0's time in it fell "
                               "(30.7 ms -> 8.98 ms per step) while rank 1's fell less (15.6 ms -> 13.4 ms)"), lines[0]
    assert "rank 0 waited for rank 1 in A (rank 0's time in it 15.2 ms per step over rank 1's in A, -4.45 ms in B)." \
        in lines[0], lines[0]


def test_an_op_that_posts_a_collective_is_no_wait(traces_dir):
    """`slow` then `fast`: the verdict names gloo's all-reduce (rank 0 waited for rank 1
    in A), not `c10d::allreduce_`, whose time on rank 1 fell and on rank 0 grew (6.56 ms ->
    1.47 ms, 855 µs -> 2.32 ms a step) though it only enqueues the work. Before, that op
    was the line ("rank 1 waiteded for rank 0 in A?") and gloo:all_reduce none: rank 1's
    time in it fell too (10.7 -> 8.7 ms), by far less than rank 0's (106 -> 5.33 ms)."""
    d = diff(_job(traces_dir, "gloo_ddp_compute", "slow"), _job(traces_dir, "gloo_ddp_compute", "fast"))
    ops = d.tables["ops"]
    i = column(ops, "name").tolist().index("c10d::allreduce_")
    assert column(ops, "change")[i] == "faster" and column(ops, "rank_decided")[i] == 1  # called, on rank 1
    lines = _apart_lines(d)
    assert not [line for line in lines if "c10d::" in line], lines
    # (gloo:broadcast, a rooted collective, no longer: tests/test_diff_apart_rooted.py)
    assert [line.split(",")[0] for line in lines] == ["Ranks apart in section gloo:all_reduce"], lines
    assert ("rank 0's time in it fell (106 ms -> 5.33 ms per step) while rank 1's fell less (10.7 ms -> 8.7 ms); "
            "the last rank to arrive waits least: rank 0 waited for rank 1 in A (rank 0's time in it 94.9 ms per "
            "step over rank 1's in A, -3.37 ms in B).") in lines[0], lines[0]
    assert all("rank 0 waited for rank 1 in A" in line for line in lines), lines


def test_who_waited_agrees_with_the_straggler_table(traces_dir):
    """The job report of the same runs (arrivals on the aligned clocks,
    ``ranks/stragglers.py``): in `slow` rank 1 came last and rank 0 waited 1.96 s for it;
    the diff names the same two ranks, and its waits per step over the analysed steps add
    up to that time at the all-reduces (within 3%; it names no rooted collective). In
    `fast` rank 0 came last more often: the diff's rank 0 spent less than rank 1 in the
    all-reduce there."""
    runs = {s: sorted((traces_dir / "gloo_ddp_compute").glob(f"{s}.rank*")) for s in ("slow", "fast")}
    reports = {s: polyprof.load_ranks(files).analyze("serial") for s, files in runs.items()}
    st = reports["slow"].tables["stragglers"]
    rows = {r: i for i, r in enumerate(column(st, "rank").tolist())}
    last = int(column(st, "rank")[int(np.argmax(column(st, "last_count")))])
    waited_ns = float(column(st, "waited_ns")[rows[0]])
    assert last == 1 and 1.9e9 < waited_ns < 2.0e9
    d = diff([polyprof.load(f) for f in runs["slow"]], [polyprof.load(f) for f in runs["fast"]])
    said = [re.search(r"rank (\d) waited for rank (\d) in A \(rank \d's time in it (-?[\d.]+) (ns|µs|ms|s) per "
                      r"step over rank \d's in A, (-?[\d.]+) (ns|µs|ms|s) in B\)", line) for line in _apart_lines(d)]
    assert said and all(m is not None for m in said), d.verdict
    assert {(int(m[1]), int(m[2])) for m in said} == {(0, last)}
    steps = d.overview["a"]["steps"] / len(d.overview["ranks"])  # analysed steps a rank
    total = steps * sum(_ns(m[3], m[4]) for m in said)
    # the all-reduces' waits (the diff names no rooted collective: DDP's 2 broadcasts, 155 ms, are out)
    ev = reports["slow"].tables["straggler_collectives"]
    reduce_ns = float(column(ev, "wait_ns").astype(np.float64)[column(ev, "op") == "allreduce"].sum())
    assert total == pytest.approx(reduce_ns, rel=0.03), (fmt_ns(total), fmt_ns(reduce_ns))
    fast = reports["fast"].tables["stragglers"]
    caused = dict(zip(column(fast, "rank").tolist(), column(fast, "caused_wait_ns").tolist()))
    assert caused[0] > caused[1] and _ns(said[0][5], said[0][6]) < 0


def test_which_rows_measure_waiting():
    """A collective's own run on each rank (it lasts until the last rank comes), not the
    op that posts it, a wait op, or an XLA async half."""
    assert measures_wait("sections", "gloo:all_reduce", "")
    assert measures_wait("ops", "mpi:allreduce", "")
    assert measures_wait("kernels", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
                                    "ncclWork*)", "communication")
    assert measures_wait("kernels", "all-reduce.2", "communication")  # XLA's CPU collective, run whole
    for table, name, kind in (("ops", "c10d::allreduce_", ""), ("ops", "nccl:all_reduce", ""),
                              ("ops", "record_param_comms", ""), ("ops", "_c10d_functional::wait_tensor", ""),
                              ("ops", "c10d::wait", ""), ("sections", "nccl:all_reduce", ""),
                              ("kernels", "all-reduce-start.1", "communication"),
                              ("kernels", "all-gather-done", "communication"),
                              ("kernels", "ncclAllReduceKernel", "compute")):
        assert not measures_wait(table, name, kind), name


def test_a_collective_longer_on_every_rank_is_no_wait():
    """A larger message makes the collective longer on every rank: the last rank's time
    grows with the others', no rank's wait for it does (not named). A straggler gone
    shortens the waiting rank's time by far more than the last rank's: named, though the
    last rank's time fell too (before: not named, as rank 1 "fell" by the floors)."""
    floors = (0.05, 20_000.0)
    ms = 1e6
    assert _apart("gloo:all_reduce", "sections", "slower", np.array([10.0, 10.0]) * ms,
                  np.array([20.0, 19.5]) * ms, [0, 1], floors, fmt_ns) is None
    got = _apart("gloo:all_reduce", "sections", "faster", np.array([105.6, 10.7]) * ms,
                 np.array([5.3, 8.7]) * ms, [0, 1], floors, fmt_ns)
    assert got is not None
    u, moved, waited, text = got
    assert u == 0 and moved == pytest.approx(100.3 * ms) and waited == pytest.approx(98.3 * ms)
    assert "rank 1's fell less (10.7 ms -> 8.7 ms)" in text and "rank 0 waited for rank 1 in A" in text, text
    # three ranks, two waiting for rank 2 in B
    three = _apart("gloo:all_reduce", "sections", "slower", np.array([8.0, 8.0, 8.0]) * ms,
                   np.array([30.0, 20.0, 4.0]) * ms, [0, 1, 2], floors, fmt_ns)
    assert three is not None and three[0] == 0
    assert "2 ranks' time in it grew (most rank 0's: 8 ms -> 30 ms per step)" in three[3], three[3]
    assert "they wait for rank 2 in B (rank 0's time in it 26 ms per step over rank 2's in B, 0 ns in A)" in three[3]
