"""The summary's MFU line on a device trace that counts no FLOPs while its kernels are a
matrix library's: it says how much kernel time they are and why no MFU is given, rather
than say nothing (before: no MFU line at all). The trace stands in for a kernel-only
export (Nsight Systems, rocprofv3) of a GEMM-bound program, which no GPU here can
record: kernels and their launches, no framework ops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.common import matrix_kernel_pct
from polyprof.cli import main
from polyprof.trace.categories import MATRIX_KERNEL

CUBLAS = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_execute_segment_k_off_kernel__5x_cublas"
TENSILE = "Cijk_Alik_Bljk_SB_MT128x128x16_MI32x32x2x1_SN_1LDSB0_APM1_ABV0"


def _kernels(path: Path, names: list[str], durs: list[float]) -> Path:
    """Ten rounds of one launch per kernel of ``names`` (each ``durs`` µs), on GPU 0."""
    ev: list[dict] = [{"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
                      {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    t, corr = 1000.0, 1
    for _ in range(10):
        for name, dur in zip(names, durs):
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                       "ts": t, "dur": 3.0, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 5, "dur": dur,
                       "args": {"correlation": corr, "stream": 7, "device": 0}})
            t, corr = t + dur + 10, corr + 1
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def _mfu_lines(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The summary's MFU lines, each unwrapped (a wide terminal)."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("COLUMNS", "400")
        assert main(["summary", str(path)]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("MFU")]


@pytest.mark.parametrize("gemm", [CUBLAS, TENSILE])
def test_matrix_kernels_without_flops_say_why_the_mfu_is_unknown(
        gemm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _kernels(tmp_path / "t.json", [gemm, "vectorized_elementwise_kernel_convert"], [8.0, 2.0])
    assert matrix_kernel_pct(polyprof.load(path)) == pytest.approx(80.0)
    (line,) = _mfu_lines(path, capsys)
    assert line.startswith("MFU unknown: 80% of kernel time ran in matrix kernels (GEMM, convolution), but the "
                           "trace counts no FLOPs for them")


def test_no_line_where_few_kernels_are_matrix_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A program that is not matrix-bound (an HPC stencil, a reduction) gets no MFU line:
    4% of its kernel time in a GEMM is under the 5% the line needs."""
    path = _kernels(tmp_path / "t.json", [CUBLAS, "stencil_kernel"], [1.0, 24.0])
    assert matrix_kernel_pct(polyprof.load(path)) == pytest.approx(4.0)
    assert _mfu_lines(path, capsys) == []


def test_the_names_it_takes_for_matrix_kernels() -> None:
    yes = [CUBLAS, TENSILE, "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT", "ampere_sgemm_128x64_nn",
           "cutlass::Kernel<cutlass_80_tensorop_s1688gemm>", "void cudnn::cnn::conv2d_grouped_direct_kernel",
           "miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1", "triton_tem_fused_addmm_0_matmul"]
    no = ["vectorized_elementwise_kernel_convert", "triton_poi_fused_relu_0", "ncclKernel_AllReduce_RING_LL_Sum",
          "reduce_kernel", "Memcpy DtoH"]
    assert [n for n in yes if not MATRIX_KERNEL.search(n)] == []
    assert [n for n in no if MATRIX_KERNEL.search(n)] == []
