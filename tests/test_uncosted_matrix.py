"""The MFU is a floor where matrix kernels run for ops whose FLOPs are unknown
(analyze/uncosted.py): tb_plugin's 2021 ResNet-50 samples record each convolution's input
shapes but not its stride and padding, so their FLOPs count the elementwise ops alone
("MFU 0.0536%"), while 84% of their compute time is in cuDNN's kernels. The MFU line says
the MFU is a floor and no low-MFU finding is made of it; traces whose matrix kernels run
for counted ops (the H200 transformer's aten::mm, a torch.compile program's CUDA graph
launches) are unchanged."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze import findings
from polyprof.analyze.uncosted import uncosted_matrix_pct
from polyprof.analyze.window import AUTO, view
from polyprof.report.tables import build
from polyprof.report.terminal import NOT_SHOWN, render

DATA = Path(__file__).parent / "data"
RESNET = DATA / "peers" / "tb_plugin" / "resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.xz"


def _mfu_line(trace) -> str:
    from rich.console import Console

    buf = io.StringIO()
    render(build(trace, AUTO, leave_out=NOT_SHOWN), 15, Console(file=buf, width=300, color_system=None))
    return next(line for line in buf.getvalue().splitlines() if line.startswith("MFU"))


@pytest.fixture(scope="module")
def resnet():
    return polyprof.load(RESNET)


def test_resnet50_of_2021_has_an_mfu_floor_and_no_low_mfu_finding(resnet):
    v = view(resnet, AUTO)
    assert uncosted_matrix_pct(v) == pytest.approx(83.8, abs=0.5)
    line = _mfu_line(resnet)
    assert line.startswith("MFU 0.0536% (fp32)") and "84% of compute time ran in matrix kernels" in line, line
    assert line.endswith("the MFU is a floor"), line
    assert "low_mfu" not in {f.id for f in findings(resnet, window=AUTO)}


@pytest.mark.parametrize("name", ["torch_transformer_h200.json.gz", "torch_compile_h200.json.gz",
                                  "torch_bf16_mm_h200.json.gz"])
def test_matrix_kernels_of_counted_ops_are_no_floor(name):
    """aten::mm / aten::addmm with shapes, and a compiled graph's cudaGraphLaunch whose
    replays carry the captured ops' FLOPs, hold their GEMM kernels' FLOPs."""
    t = polyprof.load(DATA / "h200" / name)
    assert uncosted_matrix_pct(view(t, AUTO)) == 0.0
    assert "floor" not in _mfu_line(t)


def test_a_trace_without_compute_kernels_has_none():
    t = polyprof.load(DATA / "traces" / "kineto" / "cpu_only_rank34.json.gz")
    assert uncosted_matrix_pct(t) == 0.0

