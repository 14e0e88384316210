"""FLOPs and bytes of XLA ops counted from the HLO a JAX GPU XSpace holds
(formats/xspace/hlo_cost.py, xla_costs.py), checked against XProf's own figures for the
same files and against XLA's cost conventions on small modules built here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.formats.xspace import hlo as H
from polyprof.formats.xspace.hlo_cost import module_costs
from polyprof.formats.xspace.hlo_pb2 import HloProto
from polyprof.formats.xspace.reader import from_bytes, load

DATA = Path(__file__).parent / "data"
TRACELENS = DATA / "peers" / "tracelens"
F32, BF16, TUPLE, U8 = 11, 16, 13, 6


def _module_of(path: Path, program: int) -> bytes:
    t = load(path)
    mods: dict = {}
    for p in t.planes:
        mods.update(H.modules(p.properties.get("xspace_event_metadata") or []))
    return next(v for k, v in mods.items() if k[1] == program)


# XProf 2.24.2's figures per execution (op_profile's rawFlops / occurrences; bytes:
# hlo_stats' FLOPs / operational intensity, or its bandwidth x time where no FLOPs)
XPROF = {
    ("jax_conv_minimal_08", 15): {
        "cudnn-conv.1": (32715571200, 579072000),  # padded 3-D conv: fewer than 2*out*k*cin
        "input_transpose_fusion": (0, 1144053760),
        "input_transpose_fusion.1": (0, 12779520),
        "loop_transpose_fusion": (0, 1310720),
    },
    ("jax_te_fused_attn_934987a2fc2f", 17): {
        "gemm_fusion_dot": (103079215104, 243269632),  # Triton gemm fusions
        "gemm_fusion_dot.6": (103079215104, 268435456),
        "gemm_fusion_dot.7": (103079215104, 218103808),
        "gemm_fusion_dot.1": (103079215104, 159383552),
        "input_reduce_fusion.1": (None, 100679680),  # XProf's GPU flavour: 3 per element
        "loop_reduce_fusion": (None, 301989888),
    },
}


@pytest.mark.parametrize("name,program", list(XPROF))
def test_per_op_flops_and_bytes_equal_xprofs(name, program):
    costs = module_costs(_module_of(TRACELENS / f"{name}.xplane.pb", program))
    for op, (flops, nbytes) in XPROF[(name, program)].items():
        c = costs[op]
        if flops is not None:
            assert c.flops == flops, op
        assert c.bytes == nbytes, op
        assert c.precision == ("bf16" if flops else c.precision), op  # a dot or conv: of its bf16 inputs


def test_elementwise_ops_count_one_flop_per_element_not_xprofs_three():
    """XLA's HloCostAnalysis: 1 FLOP per element; XProf's GPU cost analysis counts its
    clock-cycle estimate per element (3 where its table has no entry): 150994944 here."""
    costs = module_costs(_module_of(TRACELENS / "jax_te_fused_attn_934987a2fc2f.xplane.pb", 17))
    assert costs["loop_reduce_fusion.3"].flops * 3 == 150994944
    gemm = costs["custom-call.1"]  # __cublas$gemm: XProf gives it 0 (no cost), polyprof 2*M*N*K
    assert gemm.flops == 2 * 4096 * 2048 * 6144 and gemm.bytes == 2 * (4096 * 6144 + 2048 * 6144 + 4096 * 2048)
    assert math.isnan(costs["te_fused_attn_forward_ffi.10"].flops)  # an FFI kernel XLA does not count


def _module(build) -> bytes:
    p = HloProto()
    m = p.hlo_module
    build(m)
    return p.SerializeToString()


def _ins(comp, iid, name, opcode, etype, dims, operands=(), **kw):
    i = comp.instructions.add(id=iid, name=name, opcode=opcode, operand_ids=list(operands), **kw)
    i.shape.element_type = etype
    i.shape.dimensions.extend(dims)
    return i


def test_conventions_on_a_small_module():
    def build(m):
        add = m.computations.add(id=1, name="add", root_id=12)
        _ins(add, 10, "a", "parameter", F32, [])
        _ins(add, 11, "b", "parameter", F32, [])
        _ins(add, 12, "s", "add", F32, [], (10, 11))
        fused = m.computations.add(id=2, name="fused", root_id=23)
        _ins(fused, 20, "p0", "parameter", F32, [8, 16])
        _ins(fused, 21, "e", "exponential", F32, [8, 16], (20,))
        _ins(fused, 22, "m", "multiply", F32, [8, 16], (21, 20))
        _ins(fused, 23, "r", "reduce", F32, [8], (22, 24), called_computation_ids=[1])
        _ins(fused, 24, "z", "constant", F32, [])
        main = m.computations.add(id=3, name="main", root_id=35)
        _ins(main, 30, "x", "parameter", BF16, [4, 32])
        _ins(main, 31, "w", "parameter", BF16, [32, 16])
        d = _ins(main, 32, "dot.1", "dot", F32, [4, 16], (30, 31))
        d.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
        d.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
        _ins(main, 33, "y", "parameter", F32, [8, 16])
        _ins(main, 34, "fusion.1", "fusion", F32, [8], (33,), called_computation_ids=[2], fusion_kind="kLoop")
        c = _ins(main, 35, "conv", "convolution", F32, [1, 5, 2], (36, 37))  # 1-D, NWC, pad 1
        c.convolution_dimension_numbers.input_feature_dimension = 2
        c.convolution_dimension_numbers.input_spatial_dimensions.append(1)
        c.convolution_dimension_numbers.kernel_input_feature_dimension = 1
        c.convolution_dimension_numbers.kernel_output_feature_dimension = 2
        c.convolution_dimension_numbers.kernel_spatial_dimensions.append(0)
        c.convolution_dimension_numbers.output_feature_dimension = 2
        c.convolution_dimension_numbers.output_spatial_dimensions.append(1)
        c.window.dimensions.add(size=3, stride=1, padding_low=1, padding_high=1, window_dilation=1, base_dilation=1)
        c.precision_config.operand_precision.extend([2, 2])
        _ins(main, 36, "in", "parameter", F32, [1, 5, 3])
        _ins(main, 37, "k", "parameter", F32, [3, 3, 2])

    costs = module_costs(_module(build))
    dot = costs["dot.1"]
    assert (dot.flops, dot.bytes, dot.precision) == (2 * 4 * 16 * 32, 2 * (4 * 32 + 32 * 16) + 4 * 4 * 16, "bf16")
    fus = costs["fusion.1"]
    # multiply: 128 FLOPs; exp: 128 transcendentals; reduce: (128 - 8) x 1 add
    assert (fus.flops, fus.transcendentals) == (128 + 120, 128)
    assert fus.bytes == 4 * 8 * 16 + 4 * 8 and fus.precision == "fp32"
    conv = costs["conv"]
    # 5 outputs x 3 taps less the 2 that read padding = 13 positions x 3 in x 2 out x 2
    assert conv.flops == 2 * 13 * 3 * 2 and conv.precision == "fp32"  # HIGHEST: no TF32
    assert conv.bytes == 4 * (5 * 3 + 3 * 3 * 2 + 5 * 2)
    assert "p0" not in costs  # fused instructions are their fusion's


def test_a_loop_is_costed_by_its_body_ops_and_cpu_products_are_fp32():
    """A ``while`` has no figure of its own (its body's instructions are ops of their own,
    on each trip); an fp32 dot of DEFAULT precision is TF32 on a GPU, fp32 on the CPU."""
    def build(m):
        body = m.computations.add(id=1, name="body", root_id=11)
        _ins(body, 10, "carry", "parameter", F32, [4, 8])
        d = _ins(body, 11, "dot.2", "dot", F32, [4, 8], (10, 10))
        d.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
        d.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
        cond = m.computations.add(id=2, name="cond", root_id=21)
        _ins(cond, 20, "c", "parameter", F32, [4, 8])
        _ins(cond, 21, "lt", "compare", 1, [], (20, 20))
        main = m.computations.add(id=3, name="main", root_id=31)
        _ins(main, 30, "x", "parameter", F32, [4, 8])
        _ins(main, 31, "while.5", "while", F32, [4, 8], (30,), called_computation_ids=[2, 1])

    gpu, cpu = module_costs(_module(build)), module_costs(_module(build), tf32=False)
    assert "while.5" not in gpu and "while.5" not in cpu
    assert gpu["dot.2"].flops == cpu["dot.2"].flops == 2 * 4 * 8 * 8
    assert (gpu["dot.2"].precision, cpu["dot.2"].precision) == ("tf32", "fp32")


def test_jax_gpu_xspace_gets_op_efficiency_and_mfu_from_its_hlo():
    t = load(DATA / "h200" / "jax_train_step_h200.xplane.pb")
    oe = op_efficiency(t)
    names = column(oe, "name").tolist()
    assert len(names) == 8 and set(column(oe, "flops_source").tolist()) == {"hlo"}
    row = names.index("gemm_fusion_dot")
    assert column(oe, "count")[row] == 6
    # per step: its dot's 2 x 512 x 1024 x 256 and its epilogue's 2 ops x 512 x 1024 elements
    assert column(oe, "flops")[row] == 6 * (2 * 512 * 1024 * 256 + 2 * 512 * 1024)
    assert column(oe, "precision")[row] == "tf32"  # fp32 dot of DEFAULT precision on an H200
    assert np.all(np.isfinite(column(oe, "roofline_pct")))
    m = mfu(t)
    overall = column(m, "mfu_pct")[0]
    assert column(m, "precision")[0] == "tf32"
    assert 0.1 < overall < 100


def test_a_damaged_hlo_module_is_named_and_costs_nothing():
    data = (DATA / "h200" / "jax_train_step_h200.xplane.pb").read_bytes()
    t = from_bytes(data)
    for p in t.planes:  # damage the stored HLO: its ops keep no figures, the rest loads
        for e in p.properties.get("xspace_event_metadata") or []:
            if isinstance(e.get("stats"), dict) and H.HLO_PROTO in e["stats"]:
                e["stats"][H.HLO_PROTO] = b"\x0a\xff\xff"
    assert len(op_efficiency(t)) == 0
    assert any("is damaged" in w for w in t.metadata.get("warnings", []))
