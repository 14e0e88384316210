"""The diff's per-step samples are kept sparse (the (name, step) cells with events) and
tested a bounded block of rows at a time: its memory grows with the events, not with
names x steps (25k unique kernel names a side took 284 MiB, 100k 3.6 GB, 500k was
killed at 22.6 GB), and its statistics are the dense matrix's (its means bit for bit, its p-values to
about an ulp)."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import diff_stats
from polyprof.analyze.diff import diff
from polyprof.analyze.diff_stats import Samples, SparseSamples, compare


def _unique_kernels(path: Path, n_ops: int, names: int) -> None:
    """A Kineto trace of one kernel per op, ``names`` unique kernel names (as compiled
    or autotuned kernels are), 200 ops a step (the reviewer's generator). A fake: GPU
    hardware is not here; the diff reads it as it reads a recorded one."""
    ev = []
    t = 1_000_000
    for i in range(n_ops):
        if i % 200 == 0:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i // 200}", "pid": 1, "tid": 1,
                       "ts": t, "dur": 800})
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"a{i % 50}", "pid": 1, "tid": 1, "ts": t, "dur": 3})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1,
                   "dur": 1, "args": {"correlation": i}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"k{i % names}", "pid": 0, "tid": 7, "ts": t + 2, "dur": 2,
                   "args": {"correlation": i, "device": 0, "stream": 7}})
        t += 4
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [
        {"id": 0, "name": "A100", "totalGlobalMem": 85_000_000_000, "numSms": 108}], "traceEvents": ev}))


def test_diff_memory_grows_with_events_not_names_by_steps(tmp_path):
    # 20k unique kernel names over 200 steps: names x steps is 4M cells (32 MB a float
    # matrix, several copies in the test) where 40k (name, step) cells have events
    _unique_kernels(tmp_path / "a.json", 40_000, 20_000)
    a = polyprof.load(tmp_path / "a.json")
    b = polyprof.load(tmp_path / "a.json")
    gc.collect()
    tracemalloc.start()
    try:
        d = diff(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(d.tables["kernels"]) == 20_000
    assert d.tables["kernels"]["step_mean_ns_a"][0] == pytest.approx(2000 * 2 / 199)  # 2 calls in 199 steps
    # measured 297 MiB before (dense names x steps), 41 MiB after
    assert peak < 100 * 2**20, f"diff's peak {peak / 2**20:.0f} MiB"


def _random_side(rng, rows: int, ranks: int, runs: int, steps: int, fill: float) -> Samples:
    n = ranks * runs * steps
    x = np.where(rng.random((rows, n)) < fill, rng.integers(0, 50_000, (rows, n)), 0).astype(np.float64)
    x[0] = 0.0  # a row in no step of this side
    x[1] = 7_000.0  # a row of one constant time in every step
    x[2, ::3] = 0.0  # one absent from a third of the steps
    rank = np.repeat(np.arange(ranks), runs * steps)
    run = np.tile(np.repeat(np.arange(runs), steps), ranks)
    return Samples(x, run.astype(np.int64), rank.astype(np.int64))


def _sparse(s: Samples) -> SparseSamples:
    row, col = np.nonzero(s.x)
    return SparseSamples(row, col, s.x[row, col].astype(np.int64), s.x.shape[0], s.run, s.rank)


@pytest.mark.parametrize("test", ["t", "rank"])
@pytest.mark.parametrize("runs", [(1, 1), (3, 2)])
def test_sparse_samples_test_as_the_dense_matrix(monkeypatch, test, runs):
    rng = np.random.default_rng(7)
    a = _random_side(rng, 40, 3, runs[0], 12, 0.6)
    b = _random_side(rng, 40, 3, runs[1], 10, 0.4)
    dense = compare(a, b, test)
    monkeypatch.setattr(diff_stats, "BLOCK_CELLS", 50)  # many blocks of a few rows
    sparse = compare(_sparse(a), _sparse(b), test)
    for f in ("mean_a", "mean_b", "rank_decided", "rank_mean_a", "rank_mean_b", "means_a", "means_b"):
        np.testing.assert_array_equal(getattr(sparse, f), getattr(dense, f), err_msg=f)
    # the p-values to the last bits: the t test's incomplete beta iterates until every row
    # of its batch has converged, so a row's p moves by an ulp or so with the rows beside it
    for f in ("p", "p_ranks"):
        np.testing.assert_allclose(getattr(sparse, f), getattr(dense, f), rtol=1e-12, atol=0, err_msg=f)
    assert (sparse.strata, sparse.method, sparse.untestable) == (dense.strata, dense.method, dense.untestable)
    sa = _sparse(a)
    np.testing.assert_array_equal(sa.row_max(), np.maximum(a.x.max(axis=1), 0))
    np.testing.assert_array_equal(sa.row_min(), a.x.min(axis=1))
    np.testing.assert_array_equal(sa.dense(), a.x)


def test_sparse_samples_without_rows_say_why_untestable():
    one = np.zeros(1, np.int64)
    empty = SparseSamples(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 0, one, one)
    c = compare(empty, empty)
    assert len(c.p) == 0 and c.untestable == "rank 0: 1 vs 1 samples (the t test needs 2 a side)"
