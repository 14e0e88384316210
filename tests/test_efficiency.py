"""FLOPs and bytes per op, device peaks, op_efficiency and mfu (issue 31): against a
real torch CPU run recorded with torch's own FLOP counter, and shared traces."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import peaks
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.flops import estimate_one, op_costs
from polyprof.analyze.frames import column
from polyprof.errors import PeakError
from polyprof.trace.categories import Kind

PEERS = Path(__file__).parent / "data" / "peers"

DATA = Path(__file__).parent / "data" / "traces"


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    """A real CPU run of matmul, linear, conv, attention and elementwise ops, recorded
    by torch.profiler with ``with_flops=True``: (the exported trace, torch's FLOPs per
    op event in order, the events' names in order)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    x, w, b = torch.randn(8, 64), torch.randn(32, 64), torch.randn(32)
    img, cw, gw = torch.randn(2, 4, 16, 16), torch.randn(6, 4, 3, 3), torch.randn(4, 2, 3, 3)
    q = torch.randn(2, 4, 16, 8)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as p:
        torch.nn.functional.linear(x, w, b)
        torch.nn.functional.linear(x, w)
        torch.mm(x, w.t())
        torch.matmul(x, w.t())
        torch.addmm(b, x, w.t())
        torch.bmm(q[0], q[1].transpose(1, 2))
        torch.baddbmm(torch.zeros(4, 16, 16), q[0], q[1].transpose(1, 2))
        torch.nn.functional.conv2d(img, cw, stride=2, padding=1)
        torch.nn.functional.conv2d(img, cw)
        torch.nn.functional.conv2d(img, gw, stride=2, padding=2, dilation=2, groups=2)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        _ = x + x
        _ = x * x
    path = tmp_path_factory.mktemp("flops") / "run.json"
    p.export_chrome_trace(str(path))
    counted = [(e.name, int(e.flops), e.time_range.start) for e in p.events() if e.flops]
    return path, counted


def test_flops_equal_torchs_own_for_every_op_it_counts(torch_run):
    path, counted = torch_run
    assert {n for n, _, _ in counted} >= {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d",
                                           "aten::add", "aten::mul"}
    t = polyprof.load(path)
    rows = t.rows_of_kind(Kind.CPU_OP)
    c = op_costs(t, rows)
    names = t.names(rows)
    # per event: torch's events in time order against polyprof's of the same name
    mine: dict[str, list[float]] = defaultdict(list)
    for n, f in zip(names[np.argsort(t.events["start_ns"][rows], kind="stable")],
                    c.flops[np.argsort(t.events["start_ns"][rows], kind="stable")]):
        mine[n].append(f)
    theirs: dict[str, list[float]] = defaultdict(list)
    for n, f, _ in sorted(counted, key=lambda e: e[2]):
        theirs[n].append(float(f))
    for n, fl in theirs.items():
        assert mine[n] == fl, n  # the estimate from shapes alone (the export has no flops arg)
    # and the table, per op name
    oe = op_efficiency(t)
    by_name = dict(zip(column(oe, "name"), column(oe, "flops")))
    for n, fl in theirs.items():
        assert by_name[n] == sum(fl), n
    assert set(column(oe, "flops_source")) == {"shapes"}


def test_attention_and_conv_by_hand(torch_run):
    path, _ = torch_run
    t = polyprof.load(path)
    oe = op_efficiency(t)
    by_name = dict(zip(column(oe, "name"), column(oe, "flops")))
    # q, k, v [B=2, H=4, L=16, E=8]: 2·B·H·L·S·(E + Ev), the causal call half of it
    full = 2 * 2 * 4 * 16 * 16 * (8 + 8)
    assert by_name["aten::scaled_dot_product_attention"] == full + full / 2
    # conv2d 6×4×3×3 on 2×4×16×16, stride 2 pad 1 -> 8×8 out: 2·N·Cout·Hout·Wout·Cin·kh·kw
    assert estimate_one("aten::conv2d", "[[2,4,16,16],[6,4,3,3],[],[],[],[],[]]", '["float","float"]',
                        '["","","","[2, 2]","[1, 1]","[1, 1]","1"]')[0] == 2 * 2 * 6 * 8 * 8 * 4 * 9


def test_model_flops_count_each_flop_once(torch_run):
    path, counted = torch_run
    t = polyprof.load(path)
    m = mfu(t)
    assert column(m, "step").tolist() == [-1]
    # outermost ops only: linear (not its addmm), matmul (not its mm), conv2d (not
    # convolution...), sdpa (not its flash kernel), and the rest
    total = (2 * 2 * 8 * 64 * 32  # two linears
             + 2 * 8 * 64 * 32 * 3  # mm, matmul, addmm
             + 2 * 4 * 16 * 8 * 16 * 2  # bmm, baddbmm
             + sum(f for n, f, _ in counted if n == "aten::conv2d")
             + 1.5 * 2 * 2 * 4 * 16 * 16 * 16  # attention, the causal half
             + 512 * 2)  # add, mul
    assert column(m, "flops")[0] == total
    assert math.isnan(column(m, "mfu_pct")[0])  # a CPU: no peak
    m = mfu(t, peak="fp32=1e9")
    assert column(m, "mfu_pct")[0] == pytest.approx(100 * total / (column(m, "time_ns")[0] / 1e9) / 1e9)


def test_peaks_match_devices_and_overrides():
    assert peaks.match("NVIDIA A100-PG509-200").model == "NVIDIA A100 40GB"
    assert peaks.match("NVIDIA A100-SXM4-80GB").rates["hbm"] == 2.039e12
    assert peaks.match("NVIDIA H100 80GB HBM3").flops("bf16") == 989.4e12
    assert peaks.match("NVIDIA H100 PCIe").flops("bf16") == 756e12
    assert peaks.match("Tesla V100-SXM2-32GB").flops("fp16") == 125e12
    # the PCIe cards of a model whose SXM entry matches their names too (the eighth sweep's A100 80GB PCIe)
    assert peaks.match("NVIDIA A100 80GB PCIe").rates["hbm"] == 1.935e12
    assert peaks.match("NVIDIA A100-PCIE-40GB").rates["hbm"] == 1.555e12
    assert peaks.match("Tesla V100-PCIE-32GB").flops("fp16") == 112e12
    assert peaks.match("Tesla V100S-PCIE-32GB").rates["hbm"] == 1134e9
    assert peaks.match("AMD Instinct MI300X").flops("fp8") == 2614.9e12
    assert peaks.match("TPU v6 Lite").flops("bf16") == 918e12
    assert peaks.match("Some CPU") is None
    # a die of a two-die module (ROCm reports each MI250X die as a device of 110 CUs): half the rates
    die = peaks.match_properties({"name": "AMD Instinct MI250X", "numSms": 110})
    assert die.units == 110 and die.flops("bf16") == 383e12 / 2 and die.bandwidth == 3.2768e12 / 2
    assert peaks.match_properties({"name": "NVIDIA H100 PCIe", "numSms": 114}).flops("bf16") == 756e12
    assert peaks.match_properties({"name": "AMD Radeon Graphics", "numSms": 64}) is None
    for e in peaks.table():  # every figure names its document
        assert e["source"] and e["hbm"] > 0 and e["units"] > 0
    assert peaks.parse_override("bf16=989e12, hbm=3.35e12") == {"bf16_tensor": 989e12, "hbm": 3.35e12}
    for bad in ("bf17=1", "bf16", "bf16=fast", "hbm=-1"):
        with pytest.raises(PeakError, match="--peak"):
            peaks.parse_override(bad)


def test_a100_trace_finds_its_peaks_and_has_the_tables():
    t = polyprof.load(DATA / "kineto" / "a100_alexnet_small.json.gz")
    pk = peaks.device_peak(t)
    assert pk is not None and pk.model == "NVIDIA A100 40GB" and pk.flops("tf32") == 156e12
    over = peaks.device_peak(t, "bf16=1e15")
    assert over.flops("bf16") == 1e15 and over.bandwidth == 1.555e12 and over.source.endswith("given: bf16")
    # named as the user wrote them: "fp32_tensor" read as a CPU's tensor units (an auditor)
    both = peaks.device_peak(t, "fp32=1e14,bf16_vector=2e13")
    assert both.flops("fp32") == 1e14 and both.source.endswith("given: bf16_vector, fp32")


def test_roofline_on_xla_cost_stats():
    """XSpace's HLO ops carry XLA's flops and bytes_accessed; the plane XProf's peaks."""
    t = polyprof.load(DATA / "xspace" / "tpu_inference_2.xplane.pb")
    oe = op_efficiency(t)
    i = list(column(oe, "name")).index("broadcast_add_fusion")
    assert column(oe, "flops_source")[i] == "trace" and column(oe, "where")[i] == "device"
    fl, by, ns = column(oe, "flops")[i], column(oe, "bytes")[i], column(oe, "time_ns")[i]
    assert column(oe, "intensity")[i] == fl / by
    roof = min(918e12, fl / by * 1637.993152512e9)
    assert column(oe, "roofline_pct")[i] == pytest.approx(100 * (fl / ns * 1e9) / roof)
    assert column(oe, "bound_by")[i] == "memory"


def test_occupancy_equals_a_hand_computation_for_three_limits():
    """A100 (deviceProperties of the trace): 2048 threads = 64 warps, 65536 registers and
    167936 bytes of shared memory per SM, 32 blocks, 1 KiB of shared memory reserved per
    block; registers in units of 256 per warp, shared memory in units of 128 bytes."""
    from polyprof.analyze import kernel_breakdown

    kb = kernel_breakdown(polyprof.load(DATA / "kineto" / "a100_alexnet_small.json.gz"))
    rows = {n: i for i, n in enumerate(column(kb, "name"))}

    def at(prefix: str) -> tuple:
        i = next(i for n, i in rows.items() if n.startswith(prefix))
        return tuple(column(kb, c)[i] for c in ("block", "registers", "shared_mem", "occupancy", "occupancy_limit"))

    # shared memory: 128 threads = 4 warps; (32768 + 1024) B -> 167936 // 33792 = 4 blocks
    # (registers: 86 -> ceil(86·32/256)·256 = 2816 per warp, 65536 // (4·2816) = 5 blocks)
    assert at("ampere_sgemm_32x32_sliced1x4_tn") == ("128,1,1", 86, 32768, 4 * 4 / 64, "shared_mem")
    # registers: 160 per thread -> 5120 per warp, 65536 // (4·5120) = 3 blocks
    # (shared memory: 167936 // (16384 + 1024) = 9 blocks)
    assert at("cudnn_ampere_scudnn_128x64_relu") == ("128,1,1", 160, 16384, 3 * 4 / 64, "registers")
    # threads: 2048 // 128 = 16 blocks (registers: 18 -> 768 per warp, 65536 // 3072 = 21)
    assert at("void at::native::vectorized_elementwise_kernel") == ("128,1,1", 18, 0, 16 * 4 / 64, "threads")
    i = rows["Memcpy HtoD (Pageable -> Device)"]  # not a kernel: nothing
    assert column(kb, "grid")[i] == "" and math.isnan(column(kb, "occupancy")[i])


def test_summary_json_has_the_tables_and_takes_peaks():
    """``polyprof summary --json`` as a user runs it: op_efficiency and mfu on a shared
    A100 trace (no shapes: its tables are empty, its kernels keep their occupancy) and
    on one with shapes, with ``--peak`` over the (unknown) device's."""
    import json
    import subprocess
    import sys

    def summary(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", *args], capture_output=True,
                              text=True, timeout=300)

    p = summary(str(DATA / "kineto" / "a100_alexnet_small.json.gz"))
    tables = json.loads(p.stdout)["tables"]
    assert {"op_efficiency", "mfu"} <= set(tables)
    assert "occupancy" in tables["kernel_breakdown"]["columns"]
    p = summary(str(DATA / "kineto" / "sampled_rank0.json.gz"), "--all-steps", "--peak", "fp32=19.5e12,hbm=1.555e12")
    tables = json.loads(p.stdout)["tables"]
    overall = tables["mfu"]["records"][0]
    assert overall["step"] == -1 and overall["peak_flops_per_s"] == 19.5e12 and overall["precision"] == "fp32"
    assert overall["mfu_pct"] == pytest.approx(100 * overall["flops"] / (overall["time_ns"] / 1e9) / 19.5e12)
    mm = next(r for r in tables["op_efficiency"]["records"] if r["name"] == "aten::mm")
    assert mm["where"] == "device" and mm["bound_by"] in ("compute", "memory") and mm["flops"] > 0
    bad = summary(str(DATA / "kineto" / "sampled_rank0.json.gz"), "--peak", "bf16=fast")
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("polyprof: error: --peak")


def test_shared_traces_with_shapes_have_op_efficiency_and_mfu():
    """The shared Kineto traces recorded with shapes (``Input Dims``) and what their
    tables hold. a100_alexnet_small, a100_cupti_counters, a100_nccl_rank0,
    cuda_event_sync_multistream and v100_ns_resolution_rank0 have no shapes at all;
    cpu_only_rank34's shapes are of gloo:all_reduce and aten::empty only (nothing to
    count) and triton_example's of one Inductor-generated Triton kernel (not covered):
    their tables are empty. MTIA's framework ops launch none of its 974 device activities
    (its runtime's calls lie in no op): its ``aten::sub`` ran on the host, so its FLOPs
    are no model FLOPs of the device and ``mfu`` is empty. ``summary --json`` on the MI250 one, as a user runs it: its
    device ("AMD Radeon Graphics", gfx90a, 104 CUs: one die of an MI250) has half the
    module's peaks."""
    import json
    import subprocess
    import sys

    with_rows = {"mi250_rocm_minitoy": "aten::addmm", "mtia_inference_rank0": "aten::sub", "sampled_rank0": "aten::mm",
                 "sampled_rank1": "aten::mm"}
    for name in (*with_rows, "cpu_only_rank34", "triton_example"):
        t = polyprof.load(DATA / "kineto" / f"{name}.json.gz")
        assert t.stats.get("Input Dims") is not None, name
        oe, m = op_efficiency(t), mfu(t)
        if name == "mtia_inference_rank0":
            assert set(column(oe, "where")) == {"host"} and len(m) == 0
            assert "aten::sub" in set(column(oe, "name"))
        elif name in with_rows:
            assert with_rows[name] in set(column(oe, "name")) and column(m, "flops")[0] > 0, name
        else:
            assert len(oe) == 0 and len(m) == 0, name
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json",
                        str(DATA / "kineto" / "mi250_rocm_minitoy.json.gz")], capture_output=True, text=True, timeout=300)
    tables = json.loads(p.stdout)["tables"]
    addmm = next(r for r in tables["op_efficiency"]["records"] if r["name"] == "aten::addmm")
    assert addmm["flops"] == 2 * 5 * 128 * 128 and addmm["where"] == "device"  # [5, 128] x [128, 128]
    overall = tables["mfu"]["records"][0]
    assert overall["precision"] == "fp32" and overall["peak_flops_per_s"] == 90.5e12 / 2  # MI250 FP32 matrix, per die
    assert overall["mfu_pct"] == pytest.approx(100 * overall["flops"] / (overall["time_ns"] / 1e9) / 45.25e12)
    assert "104 of its 208 CUs" in overall["device"]


TRACELENS = Path(__file__).parent / "data" / "peers" / "tracelens_perf"


@pytest.mark.parametrize("trace", sorted(p.name for p in TRACELENS.glob("*.json.gz")))
def test_flops_agree_with_tracelens_perf_model(trace):
    """Every GEMM, convolution and SDPA call of TraceLens's reference perf-model CSVs
    (its public H100 and MI300X test traces): polyprof's FLOPs of the same calls in the
    same trace within 1% (TraceLens adds the bias, M·N, to a GEMM's 2·M·N·K; polyprof
    counts as torch does)."""
    import csv
    import json

    t = polyprof.load(TRACELENS / trace)
    rows = t.rows_of_kind(Kind.CPU_OP)
    c = op_costs(t, rows)
    has, dims = t.stats.lookup_rows(["Input Dims"], rows)["Input Dims"]
    ours: dict[tuple[str, str], set[float]] = defaultdict(set)
    for n, d, f in zip(t.names(rows)[has], dims, c.flops[has]):
        ours[n, json.dumps(json.loads(d))].add(float(f))
    checked = defaultdict(int)
    for table in ("GEMM", "CONV_fwd", "SDPA_fwd"):
        path = TRACELENS / trace.replace(".json.gz", f"_{table}.csv")
        if not path.exists():
            continue
        with open(path, encoding="utf-8") as f:
            for r in csv.DictReader(f):
                ref = float(r["GFLOPS_first"]) * 1e9
                mine = ours[r["name"], json.dumps(json.loads(r["Input Dims_first"]))]
                assert mine and all(abs(m - ref) <= 0.01 * ref for m in mine), (r["name"], r["Input Dims_first"])
                checked[table] += 1
    assert checked["GEMM"] >= 4 and checked["SDPA_fwd"] >= 1
    # the device is recognised, so the tables have peaks
    pk = peaks.device_peak(t)
    assert pk is not None and pk.model == ("NVIDIA H100 SXM" if trace.startswith("h100") else "AMD Instinct MI300X")
    oe = op_efficiency(t)
    i = list(column(oe, "name")).index("aten::addmm")
    assert column(oe, "precision")[i] == "bf16" and column(oe, "peak_flops_per_s")[i] == pk.flops("bf16")
    assert 0 < column(oe, "roofline_pct")[i] <= 100
    assert 0 < column(mfu(t), "mfu_pct")[0] < 100


_XPROF_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "roofline_model", {"use_saved_result": False})
json.dump(json.loads(data), open(sys.argv[2], "w"))
"""


def test_xprof_roofline_on_polyprofs_export_equals_op_efficiency(tmp_path):
    """XProf's roofline_model (installed, run offline in a subprocess) on polyprof's
    XSpace export of the TPU trace: each XLA op's FLOP rate and memory bandwidth equal
    op_efficiency's. (GPU PyTorch traces: tests/test_xprof_costs.py.)"""
    import importlib.util
    import json
    import subprocess
    import sys

    if importlib.util.find_spec("xprof") is None:
        pytest.skip("xprof is not installed")
    t = polyprof.load(DATA / "xspace" / "tpu_inference_2.xplane.pb")
    out = polyprof.export(t, tmp_path / "tpu.xplane.pb", format="xspace")
    res = tmp_path / "roofline.json"
    p = subprocess.run([sys.executable, "-c", _XPROF_DRIVER, str(out), str(res)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    table = json.loads(res.read_text())[0]
    ids = [c["id"] for c in table["cols"]]
    theirs = {}
    for r in table["rows"]:
        c = [x.get("v") for x in r["c"]]
        if c[ids.index("step")] == "Total":
            theirs[c[ids.index("operation")]] = (c[ids.index("measured_flop_rate")], c[ids.index("measured_memory_bw")])
    oe = op_efficiency(t)
    checked = 0
    for name, fps, bps in zip(column(oe, "name"), column(oe, "flops_per_s"), column(oe, "bytes_per_s")):
        if name in theirs and fps > 0:
            assert theirs[name][0] == pytest.approx(fps / 1e9, rel=1e-6), name  # GFLOP/s
            assert theirs[name][1] == pytest.approx(bps / 2 ** 30, rel=1e-6), name  # GiB/s
            checked += 1
    assert checked >= 3


def test_efficiency_findings_on_tracelens_h100_bert():
    """The three efficiency findings on TraceLens's H100 BERT trace (bf16, no steps)."""
    from polyprof.analyze import kernel_breakdown
    from polyprof.report.tables import build

    t = polyprof.load(TRACELENS / "h100_gaunernst_bert-small-uncased__1016001.json.gz")
    found = {f.id: f for f in build(t).findings}
    m = mfu(t)
    low = found["low_mfu"]
    assert low.evidence["mfu_pct"] == pytest.approx(column(m, "mfu_pct")[0]) and low.evidence["precision"] == "bf16"
    assert low.severity == "high" and low.events[0]["lost_ns"] >= low.events[-1]["lost_ns"] > 0
    # the time each named op loses: its time less its roofline share of it
    e = low.events[0]
    assert e["lost_ns"] == pytest.approx(e["time_ns"] * (1 - e["roofline_pct"] / 100), rel=1e-3)  # pct rounded

    chain = found["fusable_chain"]
    # (its attention mask's aten::eq, a comparison, is costed since audF F5: one more memory-bound op of the chain)
    assert chain.events[0]["chain"] == ("aten::embedding → aten::embedding → aten::add → aten::embedding → "
                                        "aten::add_ → aten::layer_norm → aten::eq")
    assert chain.evidence["share_pct"] >= 5.0

    occ = found["low_occupancy"]
    kb = kernel_breakdown(t)
    i = next(i for i, n in enumerate(column(kb, "name")) if "s16816gemm_bf16_256x128" in n)
    # H100 (deviceProperties): 256 threads = 8 warps; 230 registers -> ceil(230·32/256)·256 =
    # 7424 per warp, 65536 // (8·7424) = 1 block; shared memory (147456 + 1024) -> 233472 //
    # 148480 = 1 block too: the first limit in order, registers. 1·8/64 warps = 0.125
    assert (column(kb, "occupancy")[i], column(kb, "occupancy_limit")[i]) == (8 / 64, "registers")
    assert any(ev["name"] == column(kb, "name")[i] for ev in occ.events)


def test_html_report_draws_the_roofline(tmp_path):
    """The report's roofline: one point per op with a FLOP rate and an intensity, under
    the H100's bf16 roof; in headless Chromium (when installed) the page renders it."""
    import re

    from polyprof.report.html import write
    from polyprof.report.roofline_view import roofline_svg
    from polyprof.report.tables import build

    t = polyprof.load(TRACELENS / "h100_gaunernst_bert-small-uncased__1016001.json.gz")
    rep = build(t)
    svg = roofline_svg(rep)
    oe = rep.tables["op_efficiency"]
    x, y = column(oe, "intensity"), column(oe, "flops_per_s")
    points = int((np.isfinite(x) & (x > 0) & np.isfinite(y) & (y > 0)).sum())
    assert points >= 4 and svg.count("<circle") == points
    assert "bf16 989.4 TFLOP/s" in svg and "<polyline" in svg
    html = write(t, tmp_path / "report.html", report=rep)
    from analysis import browser

    if browser.chromium() is None:
        pytest.skip("chromium not installed")
    dom, log = browser.dump_dom(html)
    assert 'data-rendered="1"' in re.search(r"<html[^>]*>", dom).group(0)
    chart = dom.split('id="roofline-chart"', 1)[1].split("</section>", 1)[0]
    assert chart.count("<circle") == points and "roofs: NVIDIA H100 SXM" in chart


def test_polyprof_torch_profile_with_flops_live():
    """The drop-in ``polyprof.torch.profile(with_flops=True)`` (no record_shapes): its
    trace's op_efficiency has torch's own FLOPs for every op torch counts."""
    torch = pytest.importorskip("torch")
    import polyprof.torch as pt

    x, w, img, cw = torch.randn(8, 64), torch.randn(32, 64), torch.randn(2, 3, 16, 16), torch.randn(4, 3, 3, 3)
    with pt.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as p:
        torch.nn.functional.linear(x, w)
        torch.matmul(x, w.t())
        torch.nn.functional.conv2d(img, cw, padding=1)
    theirs: dict[str, float] = defaultdict(float)
    for e in p.events():
        if e.flops:
            theirs[e.name] += e.flops
    oe = op_efficiency(p.trace)
    mine = dict(zip(column(oe, "name"), column(oe, "flops")))
    assert theirs and {n: mine[n] for n in theirs} == dict(theirs)


def test_kernel_efficiency_shares_each_ops_figures_among_its_kernels():
    """Per kernel: the launching op's FLOPs split by duration among its kernels, so the
    kernels of aten::addmm add up to aten::addmm's FLOPs; tensor-core GEMMs marked."""
    from polyprof.analyze.kernel_roofline import kernel_efficiency

    t = polyprof.load(TRACELENS / "h100_gaunernst_bert-small-uncased__1016001.json.gz")
    ke, oe = kernel_efficiency(t), op_efficiency(t)
    op = column(ke, "op")
    addmm = float(column(oe, "flops")[list(column(oe, "name")).index("aten::addmm")])
    assert column(ke, "flops")[op == "aten::addmm"].sum() == pytest.approx(addmm)
    names, tc = column(ke, "name"), column(ke, "tensor_core")
    assert all(tc[i] for i, n in enumerate(names) if ("tensorop" in n or "xmma" in n) and "ffma" not in n)
    assert not any(tc[i] for i, n in enumerate(names) if "elementwise" in n)
    i = int(np.argmax(column(ke, "device_ns")))
    assert column(ke, "flops_per_s")[i] == pytest.approx(column(ke, "flops")[i] / column(ke, "device_ns")[i] * 1e9)


def test_kineto_export_keeps_flops(tmp_path):
    """XLA's flops stats through polyprof's Kineto export and back: op_efficiency agrees."""
    t = polyprof.load(DATA / "xspace" / "tpu_inference_2.xplane.pb")
    u = polyprof.load(polyprof.export(t, tmp_path / "tpu.json.gz", format="kineto"))
    a, b = op_efficiency(t), op_efficiency(u)
    assert dict(zip(column(a, "name"), column(a, "flops"))) == dict(zip(column(b, "name"), column(b, "flops")))
    assert set(column(b, "flops_source")) == {"trace"}


def test_cupti_flop_counters_are_measured_flops():
    """a100_cupti_counters: CUPTI's range profiler counted each kernel's executed FP
    instructions; FLOPs = add + mul + 2·fma per precision (Nsight Compute's sum)."""
    import gzip
    import json

    raw = json.load(gzip.open(DATA / "kineto" / "a100_cupti_counters.json.gz"))["traceEvents"]
    ranges = [e for e in raw if e.get("cat") == "cuda_profiler_range"]
    by_name: dict[str, float] = defaultdict(float)
    for e in ranges:
        a = e["args"]
        by_name[e["name"]] += sum((2 if k.split("_")[-3].endswith("fma") else 1) * v for k, v in a.items()
                                  if k.startswith("smsp__sass_thread_inst_executed_op_"))
    oe = op_efficiency(polyprof.load(DATA / "kineto" / "a100_cupti_counters.json.gz"))
    src = column(oe, "flops_source")
    ours = {n: f for n, f, s in zip(column(oe, "name"), column(oe, "flops"), src) if s == "counters"}
    assert ours == pytest.approx(dict(by_name)) and len(ours) >= 10
    assert {"fp16", "fp32"} <= set(column(oe, "precision")[src == "counters"])


def test_conv_backward_counts_only_the_gradients_asked_for():
    """torch records ``output_mask`` of ``aten::convolution_backward`` as Python
    (``[False, True, True]``: the first convolution's input needs no gradient); it was
    read as text and both gradients counted, 2x the forward's FLOPs where only the
    weight's gradient (1x) ran. torch's FlopCounterMode agrees on a plain convolution."""
    import json

    dims = json.dumps([[8, 16, 30, 30], [8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], [], [], [], []])
    types = json.dumps(["float", "float", "float"])
    conc = ["", "", "", "[16]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]
    fwd = 2.0 * (8 * 16 * 30 * 30) * 3 * 9
    for mask, parts in (("[False, True, True]", 1), ("[True, True, False]", 2), ("[True, False, False]", 1)):
        assert estimate_one("aten::convolution_backward", dims, types, json.dumps(conc + [mask]))[0] == fwd * parts


def test_op_efficiency_counts_the_analysed_steps_as_op_stats_does():
    """The summary's default window leaves out the first step (warm-up): op_efficiency
    counted every call of the trace (795 aten::mm on the H200 transformer) where
    op_stats and mfu count the window's (742)."""
    from polyprof.analyze.frames import column
    from polyprof.analyze.ops import op_stats
    from polyprof.analyze.window import AUTO, view

    t = polyprof.load(Path(__file__).parent / "data" / "h200" / "torch_transformer_h200.json.gz")
    for window in (None, AUTO):
        v = view(t, window)
        oe, st = op_efficiency(v), op_stats(v)
        calls = dict(zip(column(st, "name").tolist(), column(st, "count").tolist()))
        counted = defaultdict(int)
        for name, n in zip(column(oe, "name").tolist(), column(oe, "count").tolist()):
            counted[name] += n
        both = [n for n in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear") if n in calls]
        assert len(both) >= 2
        for name in both:
            assert counted[name] == calls[name], (window, name)
    assert counted["aten::mm"] == 742


def test_mfu_times_a_step_by_its_device_work_when_the_host_ran_ahead():
    """AMD's HPCTrainingExamples event-replay trace (MI300X): the host marks nine steps in
    841 µs and their convolutions run 18.6 ms on the GPU after them. The FLOPs were timed by
    the marks alone (MFU 0.878%, 36x too high); each step's time is now the span of the
    device work launched in it where that is longer: the ops' own device time here."""
    from polyprof.analyze.window import AUTO, view
    from polyprof.derive import cache

    t = view(polyprof.load(PEERS / "hpctraining" / "replay_trace.json.gz"), AUTO)
    steps = cache.steps(t)
    assert len(steps) == 9 and int((steps.end - steps.start).sum()) == 841_429
    m = mfu(t)
    whole = {c: column(m, c)[0] for c in ("step", "flops", "time_ns", "mfu_pct")}
    assert whole["step"] == -1 and whole["flops"] == pytest.approx(9.664e9, rel=1e-3)
    corr = cache.correlation(t)
    ev = t.events
    conv = t.string_id("aten::convolution_backward")
    by_conv = corr.op >= 0
    by_conv[by_conv] = ev["name"][corr.op[by_conv]] == conv
    by_conv &= steps.of(ev["start_ns"][np.maximum(corr.launch, 0)]) >= 0  # launched in the window's steps
    device = int(ev["dur_ns"][corr.device_rows[by_conv]].sum())  # back to back on one stream
    assert 18.5e6 < device < 18.7e6
    assert whole["time_ns"] == pytest.approx(device, rel=0.01)
    peak = column(m, "peak_flops_per_s")[0]
    assert whole["mfu_pct"] == pytest.approx(100 * whole["flops"] / (whole["time_ns"] / 1e9) / peak)
    assert whole["mfu_pct"] < 0.05
    per_step = np.asarray(column(m, "time_ns")[1:], np.float64)
    assert per_step.sum() == pytest.approx(whole["time_ns"])
    launched_in = steps.of(ev["start_ns"][corr.launch[corr.launch >= 0]])
    rows = corr.device_rows[corr.launch >= 0]
    for i in range(len(steps)):  # each step: the span of its launches' device work, longer than its marks
        mine = rows[launched_in == i]
        span = int((ev["start_ns"][mine] + ev["dur_ns"][mine]).max() - ev["start_ns"][mine].min())
        assert per_step[i] == span > 3 * int(steps.end[i] - steps.start[i])


def test_step_times_do_not_count_device_work_of_two_steps_twice():
    """HTA's trace_compare base trace: a kernel launched in step 1009 runs at 157.4 ms,
    after step 1010's kernels began (100.8 ms): each step's time ends where the next
    step's device work begins, so the two add up to the 274.5 ms from the first step's
    start to the last device work's end, not 331.1 ms."""
    from polyprof.analyze.efficiency import step_times
    from polyprof.derive import cache

    t = polyprof.load(PEERS / "hta_trace_compare" / "base" / "base.json.gz")
    steps = cache.steps(t)
    got = step_times(t, steps)
    corr = cache.correlation(t)
    last = int(t.end_ns[corr.device_rows].max())
    assert got.sum() == pytest.approx(last - int(steps.start[0]), abs=100_000)


def test_the_occupancy_findings_share_counts_no_row_below_zero():
    """Under ``--window hta`` HTA's rounding takes a sub-µs copy to -1 µs, and the kernel
    table's shares sum the rows as they are (HTA's): nano-vllm's decode read "1 kernel(s)
    with 105.7% of device time run at ≤25% theoretical occupancy". The finding's share is
    of the rows' time with none below 0."""
    from polyprof.analyze.efficiency_findings import _low_occupancy
    from polyprof.analyze.frames import frame
    from polyprof.trace import TraceBuilder

    kb = frame({"name": np.array(["k", "Memcpy DtoH", "Memcpy HtoD"], object), "count": np.array([2, 2, 1]),
                "total_ns": np.array([37_000, -1_000, -1_000]), "share_pct": np.array([105.7, -2.9, -2.9]),
                "block": np.array(["16,4,1", "", ""], object), "registers": np.array([168, -1, -1]),
                "shared_mem": np.array([272, -1, -1]), "occupancy": np.array([0.25, np.nan, np.nan]),
                "occupancy_limit": np.array(["registers", "", ""], object)})
    (f,) = _low_occupancy(TraceBuilder().build(), {"kernel_breakdown": kb}.__getitem__)
    assert f.evidence["share_pct"] == 100.0 and f.events[0]["share_pct"] == 100.0, f
    assert "1 kernel(s) with 100.0% of device time" in f.title, f.title
