"""FLOPs and bytes of XLA ops counted from the HLO a JAX GPU XSpace holds
(formats/xspace/hlo_cost.py, xla_costs.py), checked against XProf's own figures for the
same files and against XLA's cost conventions on small modules built here."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.formats.xspace import hlo as H
from polyprof.formats.xspace.hlo_cost import module_costs
from polyprof.formats.xspace.reader import from_bytes, load
from hlo_wire import msg, varint

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


def _shape(etype, dims) -> bytes:
    return msg((2, etype), (3, tuple(dims)))  # ShapeProto.element_type, .dimensions


def _ins(iid, name, opcode, etype, dims, operands=(), called=(), *extra) -> bytes:
    """HloInstructionProto: name 1, opcode 2, shape 3, id 35, operand_ids 36,
    called_computation_ids 38, then ``extra`` (field, value) pairs."""
    return msg((1, name), (2, opcode), (3, _shape(etype, dims)), (35, iid), (36, tuple(operands)),
                (38, tuple(called)), *extra)


def _comp(cid, name, root, *instructions) -> bytes:
    """HloComputationProto: name 1, instructions 2, id 5, root_id 6."""
    return msg((1, name), *((2, i) for i in instructions), (5, cid), (6, root))


def _module(*computations) -> bytes:
    """HloProto.hlo_module (1): HloModuleProto name 1, computations 3."""
    return msg((1, msg((1, "m"), *((3, c) for c in computations))))


DOT_DIMS = (30, msg((1, (1,)), (2, (0,))))  # DotDimensionNumbers: lhs / rhs contracting dims


def test_conventions_on_a_small_module():
    add = _comp(1, "add", 12, _ins(10, "a", "parameter", F32, []), _ins(11, "b", "parameter", F32, []),
                _ins(12, "s", "add", F32, [], (10, 11)))
    fused = _comp(2, "fused", 23, _ins(20, "p0", "parameter", F32, [8, 16]),
                  _ins(21, "e", "exponential", F32, [8, 16], (20,)),
                  _ins(22, "m", "multiply", F32, [8, 16], (21, 20)),
                  _ins(23, "r", "reduce", F32, [8], (22, 24), (1,)),
                  _ins(24, "z", "constant", F32, []))
    # a 1-D NWC convolution, padding 1: ConvolutionDimensionNumbers kernel_input_feature 3,
    # kernel_output_feature 4, kernel_spatial 6, input_feature 8, output_feature 10,
    # input_spatial 11, output_spatial 12; Window.dimensions (1): size 1, stride 2,
    # padding_low 3, padding_high 4, window_dilation 5, base_dilation 6; PrecisionConfig
    # operand_precision (1): HIGHEST 2
    conv_dims = (16, msg((3, 1), (4, 2), (6, (0,)), (8, 2), (10, 2), (11, (1,)), (12, (1,))))
    window = (15, msg((1, msg((1, 3), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)))))
    main = _comp(3, "main", 35, _ins(30, "x", "parameter", BF16, [4, 32]), _ins(31, "w", "parameter", BF16, [32, 16]),
                 _ins(32, "dot.1", "dot", F32, [4, 16], (30, 31), (), DOT_DIMS),
                 _ins(33, "y", "parameter", F32, [8, 16]),
                 _ins(34, "fusion.1", "fusion", F32, [8], (33,), (2,), (11, "kLoop")),
                 _ins(35, "conv", "convolution", F32, [1, 5, 2], (36, 37), (), conv_dims, window,
                      (51, msg((1, (2, 2))))),
                 _ins(36, "in", "parameter", F32, [1, 5, 3]), _ins(37, "k", "parameter", F32, [3, 3, 2]))

    costs = module_costs(_module(add, fused, main))
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
    body = _comp(1, "body", 11, _ins(10, "carry", "parameter", F32, [4, 8]),
                 _ins(11, "dot.2", "dot", F32, [4, 8], (10, 10), (), DOT_DIMS))
    cond = _comp(2, "cond", 21, _ins(20, "c", "parameter", F32, [4, 8]), _ins(21, "lt", "compare", 1, [], (20, 20)))
    main = _comp(3, "main", 31, _ins(30, "x", "parameter", F32, [4, 8]),
                 _ins(31, "while.5", "while", F32, [4, 8], (30,), (2, 1)))
    data = _module(body, cond, main)
    gpu, cpu = module_costs(data), module_costs(data, tf32=False)
    assert "while.5" not in gpu and "while.5" not in cpu
    assert gpu["dot.2"].flops == cpu["dot.2"].flops == 2 * 4 * 8 * 8
    assert (gpu["dot.2"].precision, cpu["dot.2"].precision) == ("tf32", "fp32")


def test_jax_gpu_xspace_gets_op_efficiency_and_mfu_from_its_hlo():
    t = load(DATA / "h200" / "jax_train_step_h200.xplane.pb")
    oe = op_efficiency(t)
    names = column(oe, "name").tolist()
    assert len(names) == 8 and set(column(oe, "flops_source").tolist()) == {"hlo"}
    row = names.index("jit_step/gemm_fusion_dot")  # (an XLA op: module/op)
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
    data = bytearray((DATA / "h200" / "jax_train_step_h200.xplane.pb").read_bytes())
    protos = [v for p in from_bytes(bytes(data)).planes
              for v in H.modules(p.properties.get("xspace_event_metadata") or []).values()]
    assert protos
    for proto in protos:  # damage the stored HLO in the file, keeping its length: the rest loads
        at = data.find(proto)
        data[at:at + len(proto)] = b"\x0a\xff\xff" + bytes(len(proto) - 3)
    t = from_bytes(bytes(data))
    assert len(op_efficiency(t)) == 0  # its ops keep no figures
    assert any("is damaged" in w for w in t.metadata.get("warnings", []))


def test_hostile_hlo_is_bounded():
    """Damaged or hostile HLO gives a ValueError (a damaged module) or unknown figures,
    fast, never a RecursionError or a loop without end."""
    def nested(depth):  # a tuple shape nested ``depth`` deep
        s = _shape(F32, [2])
        for _ in range(depth):
            s = msg((2, TUPLE), (4, s))
        return s

    deep = _module(_comp(1, "main", 1, msg((1, "p"), (2, "parameter"), (3, nested(200)), (35, 1))))
    with pytest.raises(ValueError):  # hlo.MAX_DEPTH; protobuf: its own limit
        module_costs(deep)
    assert module_costs(_module(_comp(1, "main", 1, msg((1, "p"), (2, "parameter"), (3, nested(20)),
                                                            (35, 1)))))["p"].bytes == 0
    with pytest.raises(ValueError, match="not an HLO module"):  # a length of 2**40 in a 20-byte message
        module_costs(b"\x0a" + varint(1 << 40) + bytes(16))
    # 3000 fusions, each calling the next one's computation: too deep to count, not a crash
    chain = [_comp(i, f"c{i}", 10 * i, _ins(10 * i, f"f{i}", "fusion", F32, [4], (), (i + 1,)))
             for i in range(1, 3000)] + [_comp(3000, "leaf", 30000, _ins(30000, "e", "exponential", F32, [4]))]
    costs = module_costs(_module(*chain, _comp(0, "main", 1, _ins(1, "top", "fusion", F32, [4], (), (1,)))))
    assert math.isnan(costs["top"].flops)
    # a strided convolution over 2**40 kernel positions; dimensions whose product is past a float
    window = (15, msg((1, msg((1, 1 << 40), (2, 2)))))
    conv_dims = (16, msg((6, (0,)), (8, 2), (10, 2), (11, (1,)), (12, (1,))))
    costs = module_costs(_module(_comp(1, "main", 3, _ins(1, "in", "parameter", F32, [1, 5, 3]),
                                       _ins(2, "k", "parameter", F32, [1 << 40, 3, 2]),
                                       _ins(3, "conv", "convolution", F32, [1, 5, 2], (1, 2), (), conv_dims, window),
                                       _ins(4, "huge", "add", F32, [1 << 62] * 20, (1, 1)))))
    assert math.isnan(costs["conv"].flops) and math.isnan(costs["huge"].bytes)


def test_summary_of_a_jax_xspace_imports_no_protobuf():
    """The HLO is decoded without protobuf (formats/xspace/hlo.py): importing it cost a
    fresh ``polyprof summary`` of a JAX XSpace about 20 ms of CPU, the cost pass ~1 ms."""
    files = [TRACELENS / "jax_conv_minimal_08.xplane.pb", DATA / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb"]
    code = ("import sys, io, contextlib\nfrom polyprof.cli import main\n"
            "from polyprof.analyze.flops import hlo_costs\nimport polyprof\n"
            f"for f in {[str(f) for f in files]!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(['summary', f]) == 0\n"
            "    assert len(hlo_costs(polyprof.load(f)).rows)\n"
            "print(sorted(m for m in sys.modules if m.startswith('google.protobuf')))")
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ, PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_a_convolution_windows_count_in_closed_form_equals_the_loop():
    """Per kernel position, the outputs that read the input (not its padding): a closed
    form for any stride (the loop's 10**7 steps a dimension made a real strided conv of a
    4096 kernel unknown, and a hostile module's thousand convolutions take minutes)."""
    import random
    import time

    from polyprof.formats.xspace.hlo import WindowDim
    from polyprof.formats.xspace.hlo_cost import _valid_positions

    def loop(size_in: int, size_out: int, size_k: int, w: WindowDim) -> int:
        return sum(1 for k in range(size_k) for o in range(size_out)
                   if 0 <= o * w.stride - w.padding_low + k * w.window_dilation < size_in)

    rng = random.Random(7)
    for _ in range(500):
        w = WindowDim(size=0, stride=rng.randint(1, 4), padding_low=rng.randint(-5, 8),
                      window_dilation=rng.randint(1, 3), base_dilation=1)
        a = (rng.randint(0, 20), rng.randint(0, 20), rng.randint(0, 7))
        assert _valid_positions(*a, w) == loop(*a, w), (a, w)
    big = WindowDim(size=4096, stride=2, padding_low=0, window_dilation=1, base_dilation=1)
    t0 = time.perf_counter()
    # kernel position k reads in 65536 - k // 2 of the outputs
    assert _valid_positions(2 * 65536, 65536, 4096, big) == 4096 * 65536 - 2 * (2047 * 2048 // 2)
    assert time.perf_counter() - t0 < 0.5
