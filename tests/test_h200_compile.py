"""FLOPs, tensor cores and CUDA graphs recorded on a real NVIDIA H200 by
``scripts/gpu_compile_mfu.py`` (tests/data/h200/README.md): bf16 products of known size,
and ``torch.compile(mode="reduce-overhead")``, whose graph is captured inside the
profiled steps. The truth is the programs' own figures (``compile_truth.json``) and the
raw Kineto JSON read here; not polyprof's earlier output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof import analyze as A
from polyprof.analyze import efficiency_findings
from polyprof.analyze.cuda_graphs import cuda_graphs, self_captured
from polyprof.analyze.efficiency import mfu, op_efficiency
from polyprof.analyze.kernel_roofline import kernel_efficiency
from polyprof.analyze.frames import column, frame

DATA = Path(__file__).parent / "data" / "h200"
TRUTH = json.loads((DATA / "compile_truth.json").read_text())


def raw(name: str) -> list[dict]:
    return json.loads(gzip.decompress((DATA / name).read_bytes()))["traceEvents"]


def test_bf16_products_flops_time_and_tensor_cores() -> None:
    name = "torch_bf16_mm_h200.json.gz"
    truth = TRUTH[name]
    kernels = [e for e in raw(name) if e.get("cat") == "kernel"]
    trace = polyprof.load(DATA / name)
    oe = op_efficiency(trace)
    mm = list(column(oe, "name")).index("aten::mm")
    assert column(oe, "flops")[mm] == truth["flops"]
    assert column(oe, "precision")[mm] == "bf16"
    ke = kernel_efficiency(trace)
    names = list(column(ke, "name"))
    gemm = next(i for i, n in enumerate(names) if n.startswith("nvjet_sm90"))  # cuBLASLt's Hopper GEMM
    assert column(ke, "tensor_core")[gemm]
    assert column(ke, "flops")[gemm] == truth["flops"]
    raw_ns = sum(round(e["dur"] * 1000) for e in kernels if e["name"].startswith("nvjet"))
    assert abs(column(ke, "device_ns")[gemm] - raw_ns) <= len(kernels)  # µs text to ns
    # the products' time under the profiler is the CUDA events' time of the same loop without it
    assert column(ke, "device_ns")[gemm] / 1e6 == pytest.approx(truth["plain_ms_for_50"], rel=0.02)
    m = mfu(trace)
    whole = list(column(m, "step")).index(-1)
    assert column(m, "precision")[whole] == "bf16"
    assert column(m, "mfu_pct")[whole] == pytest.approx(
        100 * column(m, "flops")[whole] / column(m, "time_ns")[whole] * 1e9 / column(m, "peak_flops_per_s")[whole])


def test_fp32_cuda_core_gemms_are_not_tensor_core() -> None:
    """cuBLAS's fp32 ``sm80_xmma_gemm_..._ffma`` and CUTLASS's ``simt_sgemm`` run on CUDA
    cores (an H200's fp32 products reach 51 TFLOP/s, past no tensor-core rate)."""
    ke = kernel_efficiency(polyprof.load(DATA / "torch_copies_h200.json.gz"))
    tc = dict(zip(column(ke, "name"), column(ke, "tensor_core")))
    ffma = [n for n in tc if "xmma" in n and "ffma" in n]
    simt = [n for n in tc if "simt" in n]
    assert ffma and simt and not any(tc[n] for n in ffma + simt)


def test_compiled_graph_captured_in_the_trace_maps_its_replays_to_the_captured_ops() -> None:
    name = "torch_compile_h200.json.gz"
    truth = TRUTH[name]
    trace = polyprof.load(DATA / name)
    g = cuda_graphs(trace)
    # one graph: its first replay's fill is "Memset (Unknown)", the others' "Memset (Device)"
    assert list(column(g, "replays")) == [truth["replays"]]
    assert list(column(g, "kernels_per_replay")) == [truth["kernels_per_replay"]]
    assert list(column(g, "captured_ops")) == [len(set(truth["captured"]))]
    assert list(column(g, "attributed_pct")) == [100.0]
    mapped = self_captured(trace)
    assert mapped is not None
    assert mapped.op_name.tolist() == truth["captured"] * truth["replays"]


def test_mfu_counts_the_flops_each_replay_ran() -> None:
    """The captured aten::mm and aten::addmm (shapes in the raw JSON) run once per replay."""
    name = "torch_compile_h200.json.gz"
    truth = TRUTH[name]
    dims = {e["name"]: e["args"]["Input Dims"] for e in raw(name) if e.get("name") in ("aten::mm", "aten::addmm")}
    (m, k), (_, n) = dims["aten::mm"][:2]
    (_, (m2, k2), (_, n2)) = dims["aten::addmm"][:3]
    per_replay = 2 * m * k * n + 2 * m2 * k2 * n2
    assert per_replay == truth["flops_per_replay"]
    trace = polyprof.load(DATA / name)
    whole = mfu(trace)
    assert column(whole, "flops")[0] == truth["replays"] * per_replay
    assert list(column(whole, "flops")[1:]) == [per_replay] * 8 + [0]  # one replay per step; the last is empty
    found = {f.id: f for f in A.findings(trace)}
    assert found["low_mfu"].evidence["flops"] == truth["replays"] * per_replay


def test_low_mfu_is_silent_when_no_flops_were_counted() -> None:
    """MFU of a trace whose FLOPs are unknown is unknown, not 0%."""
    m = frame({"step": np.array([-1]), "flops": np.array([0.0]), "time_ns": np.array([1e6]),
               "flops_per_s": np.array([0.0]), "precision": np.array([""], object), "devices": np.array([1]),
               "peak_flops_per_s": np.array([67e12]), "mfu_pct": np.array([0.0]), "device": np.array(["x"], object)})
    trace = polyprof.load(DATA / "torch_compile_h200.json.gz")
    assert efficiency_findings._low_mfu(trace, lambda name: m) == []


def test_replayed_gemms_share_their_captured_ops_flops_per_replay() -> None:
    """kernel_efficiency: each replayed GEMM carries its captured op's FLOPs once per
    replay (8 x 2 x 256 x 1024 x 4096), named by that op; its rate from its own time."""
    name = "torch_compile_h200.json.gz"
    truth = TRUTH[name]
    ke = kernel_efficiency(polyprof.load(DATA / name))
    by_op = {op: i for i, op in enumerate(column(ke, "op"))}
    for op in ("aten::mm", "aten::addmm"):
        i = by_op[op]
        assert column(ke, "count")[i] == truth["replays"]
        assert column(ke, "flops")[i] == truth["replays"] * truth["flops_per_replay"] // 2
        assert column(ke, "flops_per_s")[i] == pytest.approx(column(ke, "flops")[i] / column(ke, "device_ns")[i] * 1e9)


def test_a_compiled_train_step_counts_forward_and_backward_graphs() -> None:
    """torch.compile's train step records two graphs (forward: 2 addmm, backward: 3 mm),
    each replayed once a step: every GEMM's FLOPs counted at every replay."""
    from polyprof.analyze.efficiency import model_rows

    name = "torch_compile_train_h200.json.gz"
    truth = TRUTH[name]
    trace = polyprof.load(DATA / name)
    g = cuda_graphs(trace)
    assert list(column(g, "replays")) == [truth["replays_per_graph"]] * truth["graphs"]
    assert list(column(g, "attributed_pct")) == [100.0] * truth["graphs"]
    rows, flops, _ = model_rows(trace)
    replayed = np.array([trace.strings[trace.events["name"][r]] == "cudaGraphLaunch" for r in rows.tolist()])
    assert flops[replayed].sum() == truth["replays_per_graph"] * truth["gemm_flops_per_step"]
    per_step = column(mfu(trace), "flops")[1:-1]  # the last step is empty
    eager = flops[~replayed].sum() / truth["replays_per_graph"]  # the loss's elementwise ops, outside the graphs
    assert list(per_step) == [truth["gemm_flops_per_step"] + eager] * truth["replays_per_graph"]


def test_fusable_chains_stop_at_a_graph_replay_and_at_steps(monkeypatch) -> None:
    """The loss's eager backward (div, pow, mul, mul) runs once a step, between compiled
    regions whose graph replays launch the GEMMs: a chain of 4, not 28 ops across steps.
    (1.6% of the device's busy time: under the finding's threshold, lowered here.)"""
    from polyprof.analyze import efficiency_findings

    monkeypatch.setattr(efficiency_findings, "CHAIN_SHARE", 1.0)
    trace = polyprof.load(DATA / "torch_compile_train_h200.json.gz")
    chain = next(f for f in A.findings(trace) if f.id == "fusable_chain")
    assert chain.evidence["chain_ops"] == 4
    assert chain.events[0]["chain"] == "aten::div → aten::pow → aten::mul → aten::mul"


def test_replays_of_a_graph_captured_before_the_trace_are_said_uncounted(tmp_path: Path, capsys) -> None:
    """The train step with its captures cut out, as a profile that starts after
    torch.compile recorded its graphs: MFU counts the eager ops alone, so no low-MFU
    finding, and the MFU line says how much device time it could not count."""
    from polyprof.analyze.efficiency import uncounted_replays as uncounted_share
    from polyprof.cli import main

    doc = json.loads(gzip.decompress((DATA / "torch_compile_train_h200.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "Capture" not in e.get("name", "")]
    p = tmp_path / "no_capture.json"
    p.write_text(json.dumps(doc))
    trace = polyprof.load(p)
    share = uncounted_share(trace)
    assert 85 < share < 95  # the GEMMs and Triton kernels of both graphs
    assert "low_mfu" not in {f.id for f in A.findings(trace)}
    assert main(["summary", str(p)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{share:.0f}% of kernel time ran in CUDA/HIP graph replays captured before the trace" in out
    assert uncounted_share(polyprof.load(DATA / "torch_compile_train_h200.json.gz")) == 0.0


def test_op_efficiency_counts_a_call_of_each_captured_op_per_replay() -> None:
    """The train step's 2 addmm and 3 mm run at each of the 8 replays of their graphs:
    op_efficiency lists their device calls (16 and 24, with the replays' FLOPs and the
    device time of their kernels), beside the capture's own host calls."""
    trace = polyprof.load(DATA / "torch_compile_train_h200.json.gz")
    oe = op_efficiency(trace)
    rows = [(n, w) for n, w in zip(column(oe, "name"), column(oe, "where"))]
    per = 2 * 256 * 1024 * 4096
    for name, calls in (("aten::addmm", 16), ("aten::mm", 24)):
        i = rows.index((name, "device"))
        assert column(oe, "count")[i] == calls and column(oe, "flops")[i] == calls * per
        assert column(oe, "host_ns")[i] == 0 and column(oe, "device_ns")[i] > 0
        assert column(oe, "count")[rows.index((name, "host"))] == calls // 8  # the captures
    found = next(f for f in A.findings(trace) if f.id == "low_mfu")
    assert [e["name"] for e in found.events[:2]] == ["aten::addmm", "aten::mm"]


def test_xla_command_buffers_kernels_with_their_own_flops_are_counted() -> None:
    """JAX's command buffers replay kernels that carry their XLA FLOPs: none uncounted,
    and the low-MFU finding is there (0.88% MFU on the H200 train step)."""
    from polyprof.analyze.efficiency import uncounted_replays as uncounted_share

    trace = polyprof.load(DATA / "jax_train_step_h200.xplane.pb")
    assert uncounted_share(trace) == 0.0
    assert "low_mfu" in {f.id for f in A.findings(trace)}


def test_a_torch_trace_without_shapes_says_how_to_get_mfu(tmp_path: Path, capsys) -> None:
    """The bf16 products' trace with its ops' input shapes taken out: no FLOPs, and the
    MFU line says the shapes are missing and how to record them."""
    from polyprof.cli import main

    doc = json.loads(gzip.decompress((DATA / "torch_bf16_mm_h200.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Input Dims", None)
    p = tmp_path / "no_shapes.json"
    p.write_text(json.dumps(doc))
    assert main(["summary", str(p)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "MFU unknown: the ops carry no input shapes" in out and "record_shapes" in out
    assert main(["summary", str(DATA / "torch_bf16_mm_h200.json.gz")]) == 0
    assert "no input shapes" not in capsys.readouterr().out


def test_a_trace_of_graph_replays_alone_says_why_mfu_is_unknown(capsys) -> None:
    """A graph captured before torch.profiler started, replayed 5 times (93% of the kernel
    time): no FLOPs to count, and the MFU line says why instead of nothing."""
    from polyprof.cli import main

    assert main(["summary", str(DATA / "torch_cuda_graph_h200.json.gz")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "MFU unknown: 93% of kernel time ran in CUDA/HIP graph replays captured before the trace" in out
