"""op_efficiency of JAX/XLA device work: one row per HLO op (its kernels' time summed,
its FLOPs and bytes counted once per execution), as XProf's hlo_stats / op_profile
group it, checked against XProf 2.24.2's hlo_stats of TraceLens's JAX XSpaces; and the
summary's MFU line, which says why where it has no utilisation."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.analyze.peaks import ENV
from polyprof.cli import main

DATA = Path(__file__).parent / "data"
TRACELENS = DATA / "peers" / "tracelens"
CPU = DATA / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb"
GIB = 2**30

#: XProf 2.24.2's hlo_stats (``xspace_to_tool_data(..., "hlo_stats")``): op -> (occurrences:
#: kernels, not executions; total time in µs; model FLOP rate in GFLOP/s; memory
#: bandwidth in GiB/s). XProf gives every kernel of an op the op's whole cost.
XPROF = {
    "jax_conv_minimal_08": {
        "input_transpose_fusion": (40, 14344.14, 0.0, 2971.2010431067147),
        "cudnn-conv.1": (79, 12531.616, 206240.7693309466, 3399.7948268037426),
        "input_transpose_fusion.1": (39, 481.4, 0.0, 964.213467555567),
        "loop_transpose_fusion": (40, 193.52, 0.0, 252.31565212897888),
    },
    "jax_te_fused_attn_934987a2fc2f": {
        "te_fused_attn_backward_ffi.18": (25, 2330.62, 0.0, 0.0),
        "te_fused_attn_backward_ffi.12": (25, 2315.14, 0.0, 0.0),
        "te_fused_attn_forward_ffi.10": (10, 1069.529, 0.0, 0.0),
        "gemm_fusion_dot": (5, 857.328, 601165.5696769498, 1321.3291762312674),
        "gemm_fusion_dot.3": (5, 855.927, 602149.5706059044, 1323.4919566738752),
        "gemm_fusion_dot.6": (5, 835.887, 616585.8250218031, 1495.4174427883192),
        "gemm_fusion_dot.1": (5, 485.285, 1062048.2304625118, 1529.3847945021996),
        "loop_reduce_fusion.2": (5, 167.601, 4504.595557305744, 6292.847298047148),
        "loop_reduce_fusion.3": (5, 171.642, 4398.543013947635, 6144.693606459957),
        "input_reduce_fusion.1": (5, 234.603, 1608.785565401977, 1998.381495314691),
    },
}
#: executions of the ops run as several kernels per execution (the others: one kernel each)
EXECUTIONS = {"cudnn-conv.1": 40, "te_fused_attn_backward_ffi.18": 5, "te_fused_attn_backward_ffi.12": 5,
              "te_fused_attn_forward_ffi.10": 5}
#: XLA's elementwise count (1 FLOP per element) against XProf's GPU one (its cycle
#: estimate, 3 per element here); the FFI attention kernels XProf counts 0, polyprof NaN
DIFFERENT_FLOPS = {"loop_reduce_fusion.2", "loop_reduce_fusion.3", "input_reduce_fusion.1"}


def _rows(name: str) -> dict[str, dict[str, object]]:
    """op_efficiency's rows by op: an XLA op is named ``module/op`` (its ``module``
    apart), XProf's hlo_stats gives the program apart; each file is one module."""
    oe = op_efficiency(polyprof.load(TRACELENS / f"{name}.xplane.pb"))
    cols = ("category", "count", "flops", "bytes", "time_ns", "flops_per_s", "bytes_per_s", "where", "kernels",
            "module")
    names, mods = column(oe, "name").tolist(), column(oe, "module").tolist()
    assert len(set(mods)) == 1 and all(n.startswith(f"{m}/") for n, m in zip(names, mods))
    return {n[len(m) + 1:]: {c: column(oe, c)[i] for c in cols} for i, (n, m) in enumerate(zip(names, mods))}


@pytest.mark.parametrize("name", sorted(XPROF))
def test_op_efficiency_has_a_row_per_hlo_op_as_xprof(name):
    mine = _rows(name)
    for op, (occ, us, gflops, gib) in XPROF[name].items():
        row = mine[op]
        execs = EXECUTIONS.get(op, occ)
        assert row["where"] == "device" and row["count"] == execs, op
        assert row["time_ns"] == round(us * 1000), op  # the kernels' time summed, as XProf's self time
        # XProf's FLOPs and bytes are per kernel: the op's per execution, times its kernels
        per_kernel = us / 1e6 / occ
        if op not in DIFFERENT_FLOPS and gflops:
            assert row["flops"] / execs == pytest.approx(gflops * 1e9 * per_kernel, rel=1e-9), op
        if gib:
            assert row["bytes"] / execs == pytest.approx(gib * GIB * per_kernel, rel=1e-9), op
        if execs == occ and op not in DIFFERENT_FLOPS:  # one kernel per execution: XProf's rates
            assert row["flops_per_s"] == pytest.approx(gflops * 1e9, rel=1e-6), op
            assert row["bytes_per_s"] == pytest.approx(gib * GIB, rel=1e-6), op


def test_an_op_run_as_two_kernels_is_one_row_counted_once_per_execution():
    """jax_conv_minimal_08's convolution runs as an im2col kernel and a gemm (one im2col is
    missing from the trace: 39 and 40 kernels): one row, 40 executions of the op's
    32,715,571,200 FLOPs (XProf's op_profile: 79 times them, once per kernel); mfu
    counts the same FLOPs. Before, two rows by kernel name with shares of the FLOPs."""
    mine = _rows("jax_conv_minimal_08")
    conv = mine["cudnn-conv.1"]
    assert conv["category"] == "custom-call"
    assert conv["flops"] == 40 * 32715571200 and conv["bytes"] == 40 * 579072000
    kernels = str(conv["kernels"]).split("; ")  # (named as kernel_breakdown's rows: module/kernel)
    assert conv["module"] == "jit_forward_3d_conv"
    assert len(kernels) == 2 and kernels[0].startswith("jit_forward_3d_conv/Cijk_")  # longest first
    assert kernels[1] == "jit_forward_3d_conv/Im3d2Col.kd"
    assert not any(n.startswith(("Cijk_", "Im3d2Col")) for n in mine)
    m = mfu(polyprof.load(TRACELENS / "jax_conv_minimal_08.xplane.pb"))
    assert column(m, "flops")[0] == 40 * 32715571200


def test_ops_sharing_a_kernel_name_are_rows_of_their_own():
    """gemm_fusion_dot and gemm_fusion_dot.3 both ran as ``gemm_fusion_dot.kd``: two rows,
    as XProf's (before, one row of 10 calls); the fused attention's kernels (fills, the
    dQ/dK/dV kernel...) are one row per op."""
    mine = _rows("jax_te_fused_attn_934987a2fc2f")
    assert mine["gemm_fusion_dot"]["kernels"] == mine["gemm_fusion_dot.3"]["kernels"] == "jit_loss_fn/gemm_fusion_dot.kd"
    assert mine["gemm_fusion_dot"]["count"] == mine["gemm_fusion_dot.3"]["count"] == 5
    assert mine["gemm_fusion_dot.3"]["category"] == "fusion"
    bwd = mine["te_fused_attn_backward_ffi.12"]
    assert math.isnan(float(bwd["flops"])) and len(str(bwd["kernels"]).split("; ")) == 4  # XLA counts no FFI
    assert "gemm_fusion_dot.kd" not in mine and not any(n.startswith("void ck_tile") for n in mine)


def test_an_op_name_of_two_modules_is_two_rows():
    """On the CPU, ``ynn_fusion`` of jit_loss (3 runs) and of jit_rnn (12: a loop's body)
    are two ops: each op named in its module (``module/op``, as event_stats names it)."""
    oe = op_efficiency(polyprof.load(CPU))
    rows = dict(zip(column(oe, "name").tolist(), zip(column(oe, "count").tolist(), column(oe, "flops").tolist())))
    # per run: 131,072 FLOPs in jit_loss, 32,768 in jit_rnn (on each trip of its loop)
    assert rows["jit_loss/ynn_fusion"] == (3, 3 * 2 * 64 * 16 * 64)
    assert rows["jit_rnn/ynn_fusion"] == (12, 12 * 32768) and "ynn_fusion" not in rows
    assert rows["jit_loss/dot"][0] == 3 and set(column(oe, "kernels").tolist()) == {""}  # the CPU runtime's events are ops


def _summary(*args: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["summary", *args]) == 0
    return " ".join(buf.getvalue().split())


def test_summary_says_why_a_cpu_run_has_no_mfu(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = _summary(str(CPU))
    assert "MFU unknown (fp32): 2.13 MFLOP in" in text
    assert "no fp32 peak known for this CPU: give one with --peak fp32=<FLOP/s>" in text
    monkeypatch.setenv(ENV, "")  # --peak sets it for the process: put back as it was after the test
    given = _summary(str(CPU), "--peak", "fp32=1e9")
    assert "MFU unknown" not in given and "of 1 GFLOP/s peak" in given


def test_summary_mfu_line_of_a_gpu_run_and_none_without_flops(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = _summary(str(DATA / "h200" / "jax_train_step_h200.xplane.pb"))
    assert "MFU 0.88% (tf32): 4.72 GFLOP in 1.08 ms, 4.35 TFLOP/s of 495 TFLOP/s peak" in text
    t = polyprof.load(DATA / "h200" / "torch_cuda_graph_h200.json.gz")
    assert not len(mfu(t)) or not np.nansum(column(mfu(t), "flops"))
    # no FLOPs: graph replays captured before the trace, which the MFU line says (not a percentage)
    line = " ".join(_summary(str(DATA / "h200" / "torch_cuda_graph_h200.json.gz")).split())
    assert "MFU unknown: 93% of kernel time ran in CUDA/HIP graph replays" in line and "MFU 0" not in line


def test_calls_of_one_multi_kernel_op_with_nothing_costed_between_stay_apart():
    """jax_conv_minimal_08's convolution runs as an im2col and a gemm kernel, 40 times,
    with transpose fusions between the calls. With those left uncosted (their ``hlo_op``
    names no instruction: as a loop of one jitted convolution), the runs of the op's
    kernels on the stream join into a few: each further gemm (the op's lead kernel) now
    starts an execution. Before, 40 executions read as 8 and the FLOPs fell by 5x."""
    from polyprof.trace import keys
    from polyprof.trace.stats import StatColumn

    t = polyprof.load(TRACELENS / "jax_conv_minimal_08.xplane.pb")
    col = t.stats[keys.HLO_OP]
    vals = np.array(col.values, dtype=object)
    vals[np.array(["transpose" in str(v) for v in vals])] = "not_in_module"
    t.stats.put(keys.HLO_OP, StatColumn(col.rows, vals))
    oe = op_efficiency(t)
    i = list(column(oe, "name")).index("jit_forward_3d_conv/cudnn-conv.1")
    assert int(column(oe, "count")[i]) == 40
    assert float(column(oe, "flops")[i]) == pytest.approx(40 * 32_715_571_200)
    assert float(column(mfu(t), "flops")[0]) == pytest.approx(40 * 32_715_571_200)
