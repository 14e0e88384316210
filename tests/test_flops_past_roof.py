"""No op past its device's roof on the shared traces: the byte model's out= variants,
fills and expanded inputs, matrix products whose recorded shapes are not a product's,
and the share of the roof where a rate is past it anyway (docs/analysis.md, "FLOPs,
bytes, roofline and MFU")."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.efficiency import op_efficiency, resolve_peak
from polyprof.analyze.kernel_roofline import kernel_efficiency
from polyprof.analyze.flops import estimate_one, op_costs
from polyprof.analyze.frames import column
from polyprof.trace.categories import Kind

DATA = Path(__file__).parent / "data"
TB = DATA / "peers" / "tb_plugin" / "resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.xz"
H200 = DATA / "h200" / "torch_transformer_h200.json.gz"
SAMPLED = DATA / "traces" / "kineto" / "sampled_rank0.json.gz"


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """tb_plugin's torch 1.8 ResNet-50 sample (Tesla V100-DGXS), as the .json it was."""
    out = tmp_path_factory.mktemp("tb") / TB.name[:-3]
    out.write_bytes(lzma.decompress(TB.read_bytes()))
    return polyprof.load(out)


@pytest.fixture(scope="module")
def h200():
    return polyprof.load(H200)


def _row(oe, name: str, where: str = "device") -> int:
    return next(i for i, (n, w) in enumerate(zip(column(oe, "name"), column(oe, "where"))) if (n, w) == (name, where))


def _calls(trace, name: str) -> tuple[np.ndarray, np.ndarray]:
    rows = trace.rows_of_kind(Kind.CPU_OP)
    rows = rows[trace.names(rows) == name]
    return rows, op_costs(trace, rows).bytes


def test_torch18_clamp_min_out_writes_its_out_tensor_once(resnet):
    """torch 1.8's ``relu_`` -> ``clamp_min_`` -> ``aten::clamp_min`` (clamp_min.out with
    ``out`` = ``self``: ``[[32, 64, 112, 112], [], [32, 64, 112, 112]]``): one read and
    one write of the activation, as its ``clamp_min_`` and ``relu_`` parents; the out
    tensor counted as a third read put it at 138% of the V100's 900 GB/s."""
    oe = op_efficiency(resnet)
    i = _row(oe, "aten::clamp_min")
    assert column(oe, "bytes")[i] == column(oe, "bytes")[_row(oe, "aten::clamp_min_")] \
        == column(oe, "bytes")[_row(oe, "aten::relu_")]
    rows, nbytes = _calls(resnet, "aten::clamp_min")
    dims = json.loads(resnet.event_stats(int(rows[0]))["Input Dims"])
    assert len(dims) == 3 and dims[0] == dims[2]
    assert nbytes[0] == 2 * 4 * np.prod(dims[0])
    bw = resolve_peak(resnet, None).bandwidth
    assert column(oe, "bytes_per_s")[i] < bw and 85 < column(oe, "roofline_pct")[i] <= 100  # 92%
    # aten::add(a, b, alpha) of two equal shapes: two reads and a write, no out tensor
    rows, nbytes = _calls(resnet, "aten::add")
    dims = [json.loads(resnet.event_stats(int(r))["Input Dims"]) for r in rows]
    big = [k for k, d in enumerate(dims) if d[0] == [32, 256, 56, 56]]
    assert big and all(nbytes[k] == 3 * 4 * 32 * 256 * 56 * 56 for k in big)


def test_fill_writes_and_reads_nothing(resnet, h200):
    """``fill_`` (as ``zero_`` calls it) writes its tensor and reads none: counted as a
    read too, the H200's fills ran at 170% of its 4.8 TB/s and the V100's at 145%."""
    for trace, lo in ((resnet, 60), (h200, 75)):
        oe = op_efficiency(trace)
        i = _row(oe, "aten::fill_")
        rows, nbytes = _calls(trace, "aten::fill_")
        dims = [json.loads(trace.event_stats(int(r))["Input Dims"])[0] for r in rows]
        sizes = [4 if "float" in trace.event_stats(int(r))["Input type"] else 1 for r in rows]
        assert nbytes.tolist() == [float(s * np.prod(d)) for s, d in zip(sizes, dims)]
        share = 100 * column(oe, "bytes_per_s")[i] / resolve_peak(trace, None).bandwidth
        assert lo < share < 100  # 72% (V100) and 85% (H200)


def test_expanded_input_is_read_once_per_distinct_element(h200):
    """The mean's gradient on the H200: ``aten::div`` of ``[8, 512, 1024]`` with strides
    ``[0, 0, 0]`` (one element expanded) by a scalar reads one element and writes 4 Mi."""
    rows, nbytes = _calls(h200, "aten::div")
    assert len(rows) == 30
    for r, b in zip(rows.tolist(), nbytes.tolist()):
        assert json.loads(h200.event_stats(r)["Input Strides"])[0] == [0, 0, 0]
        assert b == 4 * (8 * 512 * 1024 + 1)
    # the same op without strides (torch 1.x) counts every element read
    assert estimate_one("aten::div", "[[8,512,1024],[]]", '["float","Scalar"]')[1] == 2 * 4 * 8 * 512 * 1024
    assert estimate_one("aten::div", "[[8,512,1024],[]]", '["float","Scalar"]', "",
                        "[[524288,1024,1],[]]")[1] == 2 * 4 * 8 * 512 * 1024


def test_spliced_product_shapes_have_no_flops():
    """HTA's sampled trace splices several calls' shapes into some ``aten::linear`` records
    (``[[2048, 160, 606], [2048, 3906], [2048, 3906], [2048, 512], [3906, 512], [3906]]``):
    their inner dimensions differ, so no FLOPs (counted, linear read 385 TFLOP/s in fp32,
    16x its own addmm's rate); the calls that are a linear's keep 2·rows·K·N."""
    raw = json.load(gzip.open(SAMPLED))["traceEvents"]
    want = 0.0
    for e in raw:
        if e.get("name") == "aten::linear" and e.get("ph") == "X":
            d = e["args"]["Input Dims"]
            if len(d) <= 4 and d[0][-1] == d[1][-1]:
                want += 2.0 * np.prod(d[0][:-1]) * d[0][-1] * d[1][0]
    t = polyprof.load(SAMPLED)
    oe = op_efficiency(t)
    i = _row(oe, "aten::linear")
    assert column(oe, "flops")[i] == pytest.approx(want, rel=1e-12)
    assert column(oe, "flops_per_s")[i] < 2 * column(oe, "flops_per_s")[_row(oe, "aten::addmm")]
    assert np.isnan(estimate_one("aten::linear", "[[2048,160,606],[2048,3906],[2048,3906],[2048,512],[3906,512],[3906]]",
                                 '["float","float","float","float","float","float"]')[0])
    assert np.isnan(estimate_one("aten::mm", "[[8,64],[32,64]]", '["float","float"]')[0])
    assert estimate_one("aten::mm", "[[8,64],[64,32],[8,32]]", '["float","float","float"]')[0] == 2 * 8 * 64 * 32
    assert np.isnan(estimate_one("aten::matmul", "[[64],[32]]", '["float","float"]')[0])
    # _addmm_activation(bias, mat1, mat2, beta, alpha, use_gelu): the bias first, as addmm's
    assert estimate_one("aten::_addmm_activation", "[[32],[8,64],[64,32],[],[],[]]",
                        '["float","float","float"]')[0] == 2 * 8 * 64 * 32


def test_no_share_of_the_roof_past_100_on_the_shared_traces(resnet, h200):
    """Every op and kernel of the shared traces with a roof: at most 100% of it. Two are
    still past it by their rates and show NaN instead: torch 1.8's ``aten::div`` of an
    expanded gradient (no strides recorded: 1.07 TB/s of the V100's 0.9 over its
    modelled bytes; 119% before) and two H200 elementwise kernels on a 16 MiB tensor
    just written, from L2 (103%, 106% before)."""
    import glob

    traces = [resnet, h200] + [polyprof.load(f) for f in sorted(
        glob.glob(str(DATA / "traces" / "kineto" / "*.json.gz")) + glob.glob(str(DATA / "peers" / "tracelens_perf" / "*.json.gz"))
        + glob.glob(str(DATA / "peers" / "hta_critical_path" / "**" / "*.json.gz"), recursive=True))]
    for t in traces:
        for table in (op_efficiency(t), kernel_efficiency(t)):
            pct = column(table, "roofline_pct")
            assert not (pct > 100).any(), t.sources[0].label
    oe = op_efficiency(resnet)
    i = _row(oe, "aten::div")
    assert column(oe, "bytes_per_s")[i] > resolve_peak(resnet, None).bandwidth and np.isnan(column(oe, "roofline_pct")[i])
    ke = kernel_efficiency(h200)
    past = column(ke, "bytes_per_s") > resolve_peak(h200, None).bandwidth
    assert sorted(column(ke, "op")[past]) == ["aten::mul", "aten::pow"] and np.isnan(column(ke, "roofline_pct")[past]).all()


@pytest.mark.parametrize("call, reads, writes", [
    # (name, dims, types): an out= call records its output last
    (("aten::add", "[[4,8],[4,8],[]]", '["float","float","Scalar"]'), 2, 1),
    (("aten::add", "[[4,8],[4,8],[],[4,8]]", '["float","float","Scalar","float"]'), 2, 1),
    (("aten::add_", "[[4,8],[4,8],[]]", '["float","float","Scalar"]'), 2, 1),
    (("aten::mul", "[[4,8],[4,8]]", '["float","float"]'), 2, 1),
    (("aten::mul", "[[4,8],[],[4,8]]", '["float","long int","float"]'), 1, 1),
    (("aten::clamp_min", "[[4,8],[]]", '["float","Scalar"]'), 1, 1),
    (("aten::clamp_min", "[[4,8],[],[4,8]]", '["float","Int","float"]'), 1, 1),
    (("aten::clamp_min", "[[4,8],[4,8]]", '["float","float"]'), 2, 1),  # clamp_min.Tensor
    (("aten::div", "[[4,8],[4,8],[]]", '["float","float",""]'), 2, 1),  # rounding_mode
    (("aten::div", "[[4,8],[4,8],[4,8]]", '["float","float","float"]'), 2, 1),
    (("aten::div", "[[4,8],[4,8],[],[4,8]]", '["float","float","","float"]'), 2, 1),
    # a where's bool mask at its own byte per element (a quarter of an fp32 one): before, the mask's size
    # was the whole op's (1 byte per element of every tensor: 3.25x too few bytes)
    (("aten::where", "[[4,8],[4,8],[4,8]]", '["bool","float","float"]'), 2.25, 1),
    (("aten::where", "[[4,8],[4,8],[4,8],[4,8]]", '["bool","float","float","float"]'), 2.25, 1),
    (("aten::eq", "[[4,8],[4,8]]", '["float","float"]'), 2, 0.25),  # a comparison writes bool
    (("aten::lt", "[[4,8],[]]", '["float","Scalar"]'), 1, 0.25),
    (("aten::copy_", "[[4,8],[4,8],[]]", '["c10::BFloat16","float","Scalar"]'), 1, 0.5),  # a cast: fp32 read, bf16 written
    (("aten::sigmoid", "[[4,8],[4,8]]", '["float","float"]'), 1, 1),
    (("aten::gelu", "[[4,8],[]]", '["float",""]'), 1, 1),
    (("aten::gelu", "[[4,8],[4,8]]", '["float","float"]'), 1, 1),  # torch 1.x gelu.out
    (("aten::threshold_backward", "[[4,8],[4,8],[]]", '["float","float","Int"]'), 2, 1),
    (("aten::threshold_backward", "[[4,8],[4,8],[],[4,8]]", '["float","float","Int","float"]'), 2, 1),
    (("aten::add", "[[4,8],[8],[]]", '["float","float","Scalar"]'), 1.25, 1),  # broadcast
    (("aten::fill_", "[[4,8],[]]", '["float","Scalar"]'), 0, 1),
    (("aten::copy_", "[[4,8],[4,8],[]]", '["float","float","Scalar"]'), 1, 1),
])
def test_elementwise_bytes_read_and_written(call, reads, writes):
    """``reads`` and ``writes`` in fp32 elements (4 bytes), of 32-element tensors; each tensor at its own size."""
    assert estimate_one(*call)[1] == 4 * 32 * (reads + writes)
    assert estimate_one(*call)[2] == ("bf16" if "BFloat16" in call[2] else "fp32")  # the data's, not a mask's


def test_out_calls_cost_what_their_functional_calls_cost(tmp_path):
    """A live torch run (CPU): each op called with ``out=`` and without has the same
    FLOPs and bytes in polyprof; in place (``out`` its input) too."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    x, y, o = torch.randn(64, 32), torch.randn(64, 32), torch.empty(64, 32)
    calls = [(torch.clamp_min, (x, 0.0)), (torch.add, (x, y)), (torch.sub, (x, y)), (torch.div, (x, y)),
             (torch.mul, (x, y)), (torch.sigmoid, (x,)), (torch.where, (x > 0, x, y)), (torch.pow, (x, 2)),
             (torch.maximum, (x, y)), (torch.addcmul, (x, x, y)), (torch.lerp, (x, y, 0.5))]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for f, args in calls:
            f(*args)
            f(*args, out=o)
        torch.clamp_min(x, 0.0, out=x)
    p.export_chrome_trace(str(tmp_path / "out.json"))
    t = polyprof.load(tmp_path / "out.json")
    rows = t.rows_of_kind(Kind.CPU_OP)
    rows = rows[np.argsort(t.events["start_ns"][rows], kind="stable")]
    c = op_costs(t, rows)
    names = t.names(rows)
    by: dict[str, list[tuple[float, float]]] = {}
    for n, f, b in zip(names, c.flops, c.bytes):
        if not np.isnan(b) and n.split("::")[-1] in {g.__name__ for g, _ in calls}:
            by.setdefault(n, []).append((f, b))
    assert len(by) == len(calls)
    for n, fb in by.items():
        assert len(set(fb)) == 1 and fb[0][1] > 0, (n, fb)
