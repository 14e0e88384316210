"""XProf's roofline on polyprof's XSpace export of GPU PyTorch traces (issue 31): the
framework ops' FLOPs written as XLA ops of a generated HLO module (writers/xprof_costs),
so XProf itself computes each op's FLOP rate and bandwidth, equal to op_efficiency's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import peaks
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.frames import column
from polyprof.writers.xprof_costs import device_costs, exclusive, hlo_name

TRACELENS = Path(__file__).parent / "data" / "peers" / "tracelens_perf"
BERT = "h100_gaunernst_bert-small-uncased__1016001.json.gz"

_XPROF_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "roofline_model", {"use_saved_result": False})
json.dump(json.loads(data), open(sys.argv[2], "w"))
"""


def _xprof_roofline(path: Path, out: Path) -> tuple[dict, dict[str, dict]]:
    """(the table's properties, XProf's "Total" row per operation) of roofline_model,
    run offline in a subprocess as XProf's own converter."""
    p = subprocess.run([sys.executable, "-c", _XPROF_DRIVER, str(path), str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    table = json.loads(out.read_text())[0]
    ids = [c["id"] for c in table["cols"]]
    rows = {}
    for r in table["rows"]:
        row = dict(zip(ids, [x.get("v") if x else None for x in r["c"]]))
        if row["step"] == "Total":
            rows[row["operation"]] = row
    return table["p"], rows


SHARED = Path(__file__).parent / "data" / "traces" / "kineto"
#: trace -> (the ops expected to launch their work themselves, the precision of the XProf
#: peak, XProf's name of the device: from the vendor and compute capability written)
CASES = {**{p.name: ({"aten::addmm", "aten::_flash_attention_forward", "aten::native_layer_norm", "aten::gelu"},
                     "bf16", "Nvidia GPU (Hopper)" if p.name.startswith("h100") else "AMD GPU - gfx942")
            for p in TRACELENS.glob("*.json.gz")},
         "sampled_rank0.json.gz": ({"aten::mm", "aten::bmm", "aten::addmm", "aten::_softmax"}, None, "Nvidia GPU"),
         "mi250_rocm_minitoy.json.gz": ({"aten::mm", "aten::addmm", "aten::threshold_backward"}, "fp32",
                                        "AMD GPU - gfx-9XX series")}


@pytest.mark.parametrize("trace", sorted(CASES))
def test_xprof_roofline_gpu_flop_rates_equal_op_efficiency(trace, tmp_path):
    """TraceLens's H100 and MI300X traces (BERT, a ViT with convolutions), HTA's sampled
    trace and the shared MI250 one (shapes, no flops arg): XProf's measured FLOPs and
    bytes of each framework op that launched its work itself (GEMMs, attention, norms,
    elementwise ops) equal op_efficiency's over the same device time, to the rounding of
    XProf's integer FLOPs per occurrence; its peaks are polyprof's (none for the sampled
    trace's unnamed GPU); on TraceLens's traces its program's FLOPs are mfu's (within
    1e-5: the ViT's convolution wrappers keep no negative FLOPs of their own). An op
    whose calls wrap costed ops (aten::miopen_convolution around its bias aten::add_ on
    the MI300X, fb::rms_norm) shows its own part only, less time than op_efficiency's:
    skipped."""
    if importlib.util.find_spec("xprof") is None:
        pytest.skip("xprof is not installed")
    path = TRACELENS / trace if (TRACELENS / trace).exists() else SHARED / trace
    expected, precision, device_type = CASES[trace]
    t = polyprof.load(path)
    out = polyprof.export(t, tmp_path / "gpu.xplane.pb", format="xspace")
    props, theirs = _xprof_roofline(out, tmp_path / "roofline.json")
    pk = peaks.device_peak(t)
    assert props["device_type"] == device_type
    assert float(props["peak_flop_rate"]) == pytest.approx(pk.flops(precision) / 1e9 if pk else 0, rel=1e-5)
    assert float(props["peak_hbm_bw"]) == pytest.approx(pk.bandwidth / 2**30 if pk else 0, rel=1e-5)
    c = device_costs(t)
    xprof: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])  # op -> FLOPs, bytes, ns, occurrences
    for name, op in zip(c.names, c.ops):
        row = theirs[name]
        assert row["category"] == "custom-call" and row["occurrences"] > 0
        us = row["total_time"]
        x = xprof[op]
        x[0] += row["measured_flop_rate"] * 1e9 * us / 1e6
        x[1] += row["measured_memory_bw"] * 2**30 * us / 1e6
        x[2] += us * 1000
        x[3] += row["occurrences"]
    oe = op_efficiency(t)
    mine = {n: (f, b, ns) for n, f, b, ns in zip(column(oe, "name"), column(oe, "flops_per_s"),
                                                 column(oe, "bytes_per_s"), column(oe, "device_ns"))}
    equal = set()
    for op, (flops, nbytes, ns, occ) in xprof.items():
        fps, bps, dev_ns = mine[op]
        if ns < dev_ns * (1 - 1e-9):  # a call wraps costed ops that launched the rest of its work
            continue
        assert ns == pytest.approx(dev_ns, rel=1e-9), op
        assert flops == pytest.approx(np.nan_to_num(fps) * ns / 1e9, abs=occ / 2 + 1e-9 * flops), op
        assert nbytes == pytest.approx(np.nan_to_num(bps) * ns / 1e9, abs=occ / 2 + 1e-9 * nbytes), op
        equal.add(op)
    assert expected <= equal
    assert sum(1 for op in equal if xprof[op][0] > 0) >= 3
    if trace.startswith("h100_Falconsai"):
        assert "aten::cudnn_convolution" in equal
    if precision == "bf16":  # TraceLens's: every costed call launched its work: XProf's program FLOPs are the model's
        prog = theirs["Program"]
        assert prog["measured_flop_rate"] * 1e9 * prog["total_time"] / 1e6 == pytest.approx(
            column(mfu(t), "flops")[0], rel=1e-5)


_OP_PROFILE_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "op_profile", {"use_saved_result": False})
json.dump(json.loads(data), open(sys.argv[2], "w"))
"""


def test_xprof_op_profile_has_the_flops(tmp_path):
    """XProf's op_profile on the H100 BERT export: under the program
    polyprof_framework_ops, each instruction's FLOPs (``rawFlops``) and time are the
    written ones, addmm's polyprof's own to the rounding of its occurrences."""
    if importlib.util.find_spec("xprof") is None:
        pytest.skip("xprof is not installed")
    t = polyprof.load(TRACELENS / BERT)
    out = polyprof.export(t, tmp_path / "gpu.xplane.pb", format="xspace")
    res = tmp_path / "op_profile.json"
    p = subprocess.run([sys.executable, "-c", _OP_PROFILE_DRIVER, str(out), str(res)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    prog = next(c for c in json.loads(res.read_text())["byProgram"]["children"]
                if c["name"].startswith("polyprof_framework_ops"))
    nodes = {n["name"]: n["metrics"] for cat in prog["children"] for n in cat["children"]}
    c = device_costs(t)
    n = np.bincount(c.instruction, minlength=len(c.names))
    dur = t.events["dur_ns"][c.rows]
    assert set(nodes) == set(c.names)
    for i, name in enumerate(c.names):
        assert nodes[name]["rawFlops"] == c.flops[i] * n[i], name
        assert nodes[name]["rawTime"] == dur[c.instruction == i].sum() * 1000, name  # ps
    oe = op_efficiency(t)
    addmm = float(column(oe, "flops")[list(column(oe, "name")).index("aten::addmm")])
    assert abs(nodes["aten__addmm"]["rawFlops"] - addmm) <= n[c.names.index("aten__addmm")] / 2


def test_xla_op_view_of_the_framework_ops():
    """What the writer adds, on the H100 ViT trace: each device activity names the
    instruction of (its innermost costed op, its device op); that op's own FLOPs (less
    its costed children's: aten::linear keeps none of aten::addmm's) are shared over the
    activities it launched, every occurrence of an instruction carrying the same value."""
    t = polyprof.load(TRACELENS / "h100_Falconsai_nsfw_image_detection__1016002.json.gz")
    c = device_costs(t)
    assert c is not None
    oe = op_efficiency(t)
    by_name = dict(zip(column(oe, "name"), column(oe, "flops")))
    n = np.bincount(c.instruction, minlength=len(c.names))
    total: dict[str, float] = defaultdict(float)
    for i, op in enumerate(c.ops):
        total[op] += float(c.flops[i] * n[i])
    for op in ("aten::addmm", "aten::cudnn_convolution", "aten::_flash_attention_forward", "aten::gelu"):
        assert total[op] == pytest.approx(by_name[op], abs=float(n.sum())), op  # rounded per occurrence
    assert "aten::linear" not in c.ops and "aten::conv2d" not in c.ops
    assert "aten__addmm" in c.names and "aten___flash_attention_forward" in c.names
    assert hlo_name("aten::addmm") == "aten__addmm" and hlo_name("9x") == "_x" and hlo_name("__y") == "a_y"


def test_exclusive_figures_by_hand():
    """Spans on two threads: a parent with two children (one nested twice), an instant
    child: each keeps its value less its direct children's, never below 0."""
    th = np.array([0, 0, 0, 0, 1, 0])
    st = np.array([0, 10, 12, 50, 0, 60])
    en = np.array([100, 40, 20, 90, 100, 60])
    val = np.array([100.0, 30.0, 5.0, 80.0, 7.0, 1.0])
    # 0 holds 1 and 3 (and the instant 5 at 60, inside 3); 1 holds 2; thread 1 apart
    assert exclusive(th, st, en, val).tolist() == [0.0, 25.0, 5.0, 79.0, 7.0, 1.0]


def test_round_trip_leaves_out_what_was_added_for_xprof(tmp_path):
    """polyprof -> XSpace -> polyprof: no hlo_op / program_id / flops / bytes_accessed
    stats, no /host:metadata plane, the GPU plane's properties as they were, and the
    same op_efficiency."""
    t = polyprof.load(TRACELENS / BERT)
    u = polyprof.load(polyprof.export(t, tmp_path / "gpu.xplane.pb", format="xspace"))
    assert not {"hlo_op", "program_id", "flops", "bytes_accessed"} & set(u.stats.keys())
    assert [p.name for p in u.planes] == [p.name for p in t.planes]
    for p, q in zip(t.planes, u.planes):
        assert set(q.properties) == set(p.properties), p.name
    a, b = op_efficiency(t), op_efficiency(u)
    assert dict(zip(column(a, "name"), column(a, "flops"))) == dict(zip(column(b, "name"), column(b, "flops")))


def test_export_cli_gives_xprof_the_peaks_asked_for(tmp_path):
    """``polyprof export -f xspace --peak`` on a trace of an unnamed GPU (HTA's sampled
    trace): the GPU plane carries XProf's peak stats from --peak (fp32: the precision of
    its model FLOPs); polyprof reads the file back without them."""
    from polyprof.formats.xspace.wire import pb

    out = tmp_path / "s.xplane.pb"
    trace = Path(__file__).parent / "data" / "traces" / "kineto" / "sampled_rank0.json.gz"
    p = subprocess.run([sys.executable, "-m", "polyprof", "export", "-f", "xspace", "-o", str(out), "--peak",
                        "fp32=19.5e12,hbm=1.555e12", str(trace)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    space = pb().XSpace()
    space.ParseFromString(out.read_bytes())
    gpu = next(x for x in space.planes if x.name == "/device:GPU:0")
    names = {k: m.name for k, m in gpu.stat_metadata.items()}
    stats = {names[s.metadata_id]: s for s in gpu.stats}
    assert stats["peak_teraflops_per_second"].double_value == 19.5
    assert stats["memory_bandwidth"].int64_value == 1_555_000_000_000
    back = polyprof.load(out)
    assert not {"peak_teraflops_per_second", "memory_bandwidth"} & set(back.planes[gpu_index(back)].properties)
    bad = subprocess.run([sys.executable, "-m", "polyprof", "export", "-f", "xspace", "-o", str(out), "--force",
                          "--peak", "bf16=fast", str(trace)], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("polyprof: error: --peak")


def gpu_index(t) -> int:
    return next(p.id for p in t.planes if p.name == "/device:GPU:0")


def test_trace_with_a_flops_arg_keeps_it_and_xprof_gets_the_device_ones(tmp_path):
    """TraceLens's H100 BERT trace with torch's ``flops`` arg put on its aten::addmm calls
    (2·M·K·N, as older torch exports wrote it): the export adds the device activities'
    flops on the GPU plane alone; XProf's addmm rate is op_efficiency's (its FLOPs from
    the trace now); polyprof reads back the host ops' flops and nothing else."""
    import gzip

    doc = json.loads(gzip.decompress((TRACELENS / BERT).read_bytes()))
    n = 0
    for e in doc["traceEvents"]:
        if e.get("name") == "aten::addmm" and "Input Dims" in e.get("args", {}):
            _, (m, k), (_, nn) = e["args"]["Input Dims"][:3]
            e["args"]["flops"] = 2 * m * k * nn
            n += 1
    assert n == 26
    src = tmp_path / "bert_flops.json"
    src.write_text(json.dumps(doc))
    t = polyprof.load(src)
    oe = op_efficiency(t)
    i = list(column(oe, "name")).index("aten::addmm")
    assert column(oe, "flops_source")[i] == "trace"
    out = polyprof.export(t, tmp_path / "gpu.xplane.pb", format="xspace")
    back = polyprof.load(out)
    for tr in (t, back):  # rows are numbered anew on reading: the same events by name and value
        col = tr.stats.get("flops")
        assert set(tr.names(col.rows)) == {"aten::addmm"} and len(col.rows) == n
        assert sorted(col.values.tolist()) == sorted(t.stats.get("flops").values.tolist())
    assert dict(zip(column(op_efficiency(back), "name"), column(op_efficiency(back), "flops"))) == \
        dict(zip(column(oe, "name"), column(oe, "flops")))
    assert "hlo_op" not in back.stats and "bytes_accessed" not in back.stats
    if importlib.util.find_spec("xprof") is None:
        pytest.skip("xprof is not installed")
    _, theirs = _xprof_roofline(out, tmp_path / "roofline.json")
    row = theirs["aten__addmm"]
    assert row["measured_flop_rate"] == pytest.approx(column(oe, "flops_per_s")[i] / 1e9, rel=1e-6)
