"""Findings suggest what fits the program in the trace: PyTorch advice for torch, JAX /
XLA advice for XLA, OpenCL advice for OpenCL, never another framework's tools."""

from __future__ import annotations

import pytest

import polyprof
import polyprof.analyze as A
from polyprof.analyze.advice import ADVICE, VARIANTS, framework, mentions, suggestion
from polyprof.trace import TraceBuilder

US = 1000
FOREIGN = {"torch": ("jax.jit", "clFinish"), "jax": ("DataLoader", "torch.compile", "CUDA graph", "clFinish"),
           "opencl": ("DataLoader", "torch.compile", "CUDA graph", "jax.jit", "non_blocking")}


def opencl_like() -> polyprof.Trace:
    """The shape of the OpenCL demo (its live run needs PoCL, which cannot build kernels on
    this host's CPU): a host thread enqueuing short kernels with long host gaps and a
    clFinish after each, on an OpenCL device plane."""
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=1)
    th = b.track(host, "MainThread", "thread", tid=1)
    dev = b.plane("/device:OpenCL:0", "device", vendor="pocl", index=0)
    q = b.track(dev, "queue 0", "stream", tid=0)
    for k in range(20):
        o = k * 1000 * US
        b.event(th, "clEnqueueNDRangeKernel", o + 800 * US, 10 * US, "opencl_api", correlation_id=k + 1, queue="0")
        b.event(q, "blur", o + 815 * US, 50 * US, "kernel", correlation_id=k + 1)
        b.event(th, "clFinish", o + 812 * US, 60 * US, "opencl_api", queue="0")
    return b.build()


@pytest.fixture(scope="module")
def traces(traces_dir):
    return {"torch": polyprof.load(traces_dir / "kineto" / "a100_nccl_rank0.json.gz"),
            "jax": polyprof.load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb"),
            "opencl": opencl_like()}


def test_framework_is_read_from_the_trace(traces):
    for want, t in traces.items():
        assert framework(t) == want


def test_findings_speak_the_programs_language(traces):
    fired = 0
    for fw, t in traces.items():
        for f in A.findings(t):
            fired += 1
            # (a finding may lead with its own subject: "Lowering the peak starts with 'x': ...")
            assert f.suggestion.endswith(suggestion(t, f.id)), (f.id, f.suggestion)
            assert not set(mentions(f.suggestion)) & set(FOREIGN[fw]), (fw, f.id, f.suggestion)
    assert fired >= 3
    assert any(f.id == "host_bound" for f in A.findings(traces["opencl"]))


def test_every_rule_has_advice_for_every_framework_or_a_generic_one():
    for rule, texts in ADVICE.items():
        assert "generic" in texts, rule
        for fw, words in FOREIGN.items():
            text = texts.get(fw, texts["generic"])
            assert not set(mentions(text.format(graphs="", graphs_tail=""))) & set(words), (rule, fw)


def test_a_compiled_program_is_not_told_to_compile_and_a_cpu_run_not_of_tensor_cores(tmp_path):
    """torch.compile's regions in the trace: the host-bound, launch-bound, low-MFU and
    fusable-chain advice speaks of graph breaks and what ran outside the compiled regions,
    not of compiling; a CPU run's low-MFU advice speaks of its threads and matrix units,
    not TF32 and tensor cores. Every variant names a known rule and formats."""
    import json as _json
    from pathlib import Path

    h200 = Path(__file__).resolve().parents[1] / "data" / "h200"
    trace = polyprof.load(h200 / "torch_compile_train_h200.json.gz")
    for rule in ("host_bound", "launch_bound", "low_mfu", "fusable_chain"):
        text = suggestion(trace, rule)
        assert "compiled already" in text or "compiled regions" in text, (rule, text)
    eager = polyprof.load(h200 / "torch_transformer_h200.json.gz")
    assert "(torch.compile," in suggestion(eager, "fusable_chain")  # an eager program is told to compile
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
                            "args": {"Input Dims": [[64, 64], [64, 64]]}}]}
    cpu = tmp_path / "cpu.json"
    cpu.write_text(_json.dumps(doc))
    text = suggestion(polyprof.load(cpu), "low_mfu")
    assert "On a CPU" in text and "TF32" not in text
    for key, texts in VARIANTS.items():
        assert key.split("@")[0] in ADVICE, key
        for t in texts.values():
            t.format(graphs="", graphs_tail="", reduce_overhead="")


def test_vllms_compiled_graphs_count_as_compiled_and_titles_name_an_op_once():
    """vLLM's trace leaves only ``## Call CompiledFxGraph ...`` of torch.compile: still a
    compiled program. An HLO op named thrice among the ops losing most (its rows per
    kernel) is named once in the low-MFU title."""
    from pathlib import Path

    from polyprof.analyze.advice import compiled

    data = Path(__file__).resolve().parents[1] / "data"
    assert compiled(polyprof.load(data / "peers" / "tracelens" / "vllm_decode_full_graph_capture_bs32.json.gz"))
    assert not compiled(polyprof.load(data / "h200" / "torch_transformer_h200.json.gz"))
    jax = polyprof.load(data / "h200" / "jax_transformer_h200.xplane.pb.gz")
    title = next(f.title for f in A.findings(jax) if f.id == "low_mfu")
    named = title.split("most lost in ", 1)[1].split(", ")
    assert len(named) == len(set(named)), title
