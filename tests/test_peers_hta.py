"""Holistic Trace Analysis's own asserted values (facebookresearch/HolisticTraceAnalysis
tests/), checked on the same files, which are in tests/data/traces (HTA's tests/data,
renamed). Each value below is the literal HTA's test asserts; the test it comes from is
named. What HTA asserts on files not kept here (too big, or stored outside its
repository), or on analyses polyprof does not have, is listed in docs/analysis.md with
the reason.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import polyprof
from polyprof.derive import cache
from polyprof.trace.categories import Kind

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"


def test_nccl_metadata_of_the_longest_allreduce() -> None:
    """HTA test_trace_parse.py test_nccl_parser_config (nccl_parser_config/nccl_data.json.gz)."""
    t = polyprof.load(KINETO / "a100_nccl_rank0.json.gz")
    names = t.names().astype(str)
    nccl = np.flatnonzero((np.char.find(names, "ncclKernel") >= 0) & (t.kinds == Kind.KERNEL))
    assert len(nccl) == 21
    top = nccl[np.argmax(t.events["dur_ns"][nccl])]
    got = {k: t.stats[k].lookup(np.array([top]))[1][0] for k in (
        "Collective name", "In msg nelems", "Out msg nelems", "In split size", "Out split size",
        "Process Group Name", "Process Group Description", "Process Group Ranks")}
    assert got == {"Collective name": "allreduce", "In msg nelems": 2049000, "Out msg nelems": 2049000,
                   "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                   "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]"}
    # the same values are on the op that launched it (record_param_comms), by correlation
    corr = cache.correlation(t)
    op = corr.op[np.flatnonzero(corr.device_rows == top)[0]]
    assert t.strings[t.events["name"][op]] == "record_param_comms"
    assert t.stats["In msg nelems"].lookup(np.array([op]))[1].tolist() == [2049000]


def test_iteration_551_is_a_step() -> None:
    """HTA test_trace_filter.py testIterationFilter (trace_filter/sampled_rank-0.json.gz):
    iteration 551 is present (and 552)."""
    steps = cache.steps(polyprof.load(KINETO / "sampled_rank0.json.gz"))
    assert steps.number.tolist() == [551, 552]


def test_cupti_profiler_ranges() -> None:
    """HTA test_cupti_profiler.py (cupti_profiler/...trace.json.gz): 77 counter rows, the
    6th kernel by time an ``fft2d_r2c_32x32`` with 86,114,304 fadd instructions, its top and
    bottom op aten::conv2d and aten::cudnn_convolution (every range against HTA run live:
    tests/test_cupti_ranges.py)."""
    t = polyprof.load(KINETO / "a100_cupti_counters.json.gz")
    rows = np.flatnonzero(np.asarray(t.categories()) == "cuda_profiler_range")
    assert len(rows) == 77
    fifth = rows[np.argsort(t.events["start_ns"][rows], kind="stable")][5]
    assert "fft2d_r2c_32x32" in t.strings[t.events["name"][fifth]]
    col = t.stats["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"]
    assert col.lookup(np.array([fifth]))[1].tolist() == [86114304]
    from polyprof.analyze.cupti_ranges import cupti_counters

    tb = cupti_counters(t)
    assert (tb["top_op"][5], tb["bottom_op"][5]) == ("aten::conv2d", "aten::cudnn_convolution")
