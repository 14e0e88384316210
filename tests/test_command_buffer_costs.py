"""The library kernels XLA ran inside a command buffer (``formats/xspace/command_buffer_costs.py``):
cuBLAS ``sm90_xmma_gemm_*`` kernels of a CUDA graph keep ``hlo_op`` ``command_buffer_1``,
and no HLO instruction has their names. Before, they counted no FLOPs: the H200 JAX
transformer's MFU read 2.0% (tests/data/h200, a real profile)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.flops import hlo_costs
from polyprof.analyze.frames import column
from polyprof.formats.xspace.command_buffer_costs import library_calls
from polyprof.formats.xspace.gpu import hlo_modules

PATH = Path(__file__).parent / "data" / "h200" / "jax_transformer_h200.xplane.pb.gz"
#: the step's matrix products (scripts/gpu_bench_traces.py's model: 6 layers, d 1024, 8 x
#: 512 tokens, 16 heads), 2·M·N·K each: forward qkv, q·kᵀ, ·v, o, w1, w2; the backward
#: pass twice that, less the input gradient of the first layer's qkv (x is no parameter)
_BT, _D = 8 * 512, 1024
_LAYER = 2 * _BT * _D * (3 * _D + _D + 4 * _D + 4 * _D) + 2 * (2 * 8 * 16 * 512 * 512 * 64)
DOTS_PER_STEP = 3 * 6 * _LAYER - 2 * _BT * _D * 3 * _D
#: XLA's own count of the step (``step.lower(...).compile().cost_analysis()["flops"]``,
#: jax 0.10.2, compiled for the CPU: products and elementwise ops)
XLA_PER_STEP = 1_989_996_314_624


def test_the_library_kernels_carry_the_library_calls_cost() -> None:
    t = polyprof.load(PATH)
    hc = hlo_costs(t)
    lib = hc.op_name[hc.op] == "command_buffer_1"
    names = set(t.names(hc.rows[lib]).tolist())
    assert names and all("gemm" in n for n in names)  # the cuBLAS kernels, not the graph's memsets
    modules = hlo_modules(t)
    step = modules.module(("jit_step", 9959))
    assert step is not None
    assert len(library_calls(step, set())) == 71  # cuBLAS calls a step: 71 gemm kernels per launch
    per_step = float(np.nansum(hc.flops)) / 200  # 200 launches of the graph, 200 steps
    assert DOTS_PER_STEP <= per_step <= DOTS_PER_STEP * 1.01
    assert math.isclose(per_step, XLA_PER_STEP, rel_tol=0.002)
    assert float(np.nansum(hc.flops[lib])) / float(np.nansum(hc.flops)) > 0.9  # before: 0
    # each kernel counted once by the efficiency tables: a pseudo-op per kernel name, its mean
    eff = op_efficiency(t)
    names_col, flops_col = column(eff, "name"), np.asarray(column(eff, "flops"), np.float64)
    at = np.array(["command_buffer_1" in str(n) for n in names_col], bool)
    assert math.isclose(float(np.nansum(flops_col[at])), float(np.nansum(hc.flops[lib])), rel_tol=1e-9)


def test_the_mfu_counts_them() -> None:
    m = mfu(polyprof.load(PATH))
    pct = float(np.asarray(column(m, "mfu_pct"))[0])
    assert 24.0 < pct < 25.5, pct  # before: 2.0


def test_library_calls_in_a_loop_body_are_not_guessed() -> None:
    """A library call in a ``while`` body runs once per trip, which the HLO does not say:
    such a module's library kernels get no figure (None), rather than one trip's."""
    from polyprof.formats.xspace.hlo import Computation, Instruction, Module

    def ins(iid: int, name: str, opcode: str, called: list[int] | None = None) -> Instruction:
        i = Instruction(b"")
        i.id, i.name, i.opcode, i.called_computation_ids = iid, name, opcode, called or []
        return i

    body = Computation(2, 20, [ins(20, "cublas-gemm.1", "custom-call")])
    entry = Computation(1, 11, [ins(10, "gemm.0", "custom-call"), ins(11, "while.0", "while", [2])])
    assert library_calls(Module("m", [entry, body]), set()) is None
    assert library_calls(Module("m", [entry]), set()) == {"gemm.0"}
    fused = Computation(3, 30, [ins(30, "inner", "custom-call")])
    outer = Computation(1, 12, [ins(12, "fusion.0", "fusion", [3])])
    assert library_calls(Module("m", [outer, fused]), set()) == set()  # inside a fusion: not a call of its own

