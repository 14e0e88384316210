"""A CPU run's findings give CPU advice: threads, oneDNN/MKL, batch size, bf16 only where
the CPU runs it natively, torch.compile where the program is not compiled yet; never
tensor cores, TF32, CUDA graphs or pinned copies. A compiled CPU run gets the text for
both; a GPU run keeps its own. Real recordings: tests/data/traces/mlp_shapes_cpu (eager
and compiled MLP with shapes), compile_cpu (compiled, no shapes), jax_cpu_job, and the
H200 traces."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import polyprof
import polyprof.analyze as A
from polyprof.analyze import peaks
from polyprof.analyze.advice import ADVICE, VARIANTS, suggestion
from polyprof.analyze.efficiency import mfu
from polyprof.analyze.efficiency_findings import LOW_MFU_LEAD
from polyprof.analyze.frames import column
from polyprof.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
SHAPES = DATA / "traces" / "mlp_shapes_cpu"
EAGER, COMPILED = SHAPES / "eager_mlp_cpu.json.gz", SHAPES / "compiled_mlp_cpu.json.gz"
RECOMPILE = DATA / "traces" / "compile_cpu" / "recompile_cpu.json.gz"
JAX_CPU = DATA / "traces" / "jax_cpu_job" / "rank0.xplane.pb.gz"
#: words of GPU advice, wrong for a CPU run
GPU_WORDS = ("CUDA", "GPU", "tensor core", "TF32", "pin_memory", "on chip", "cuda")
#: the rules that can fire on a run without device activity (the others need a device's
#: idle time, kernels, copies or syncs)
CPU_RULES = ("input_bound", "low_mfu", "fusable_chain", "memory_peak_held_by_one", "memory_growth",
             "out_of_memory", "recompiles")


def _gpu_words(text: str) -> list[str]:
    return [w for w in GPU_WORDS if w in text]


@pytest.mark.parametrize("path", [COMPILED, RECOMPILE], ids=["compiled_mlp_cpu", "recompile_cpu"])
def test_a_compiled_cpu_run_gets_compiled_cpu_advice(path: Path) -> None:
    """Before, the ``@compiled`` text (written for a GPU: TF32, matrix units) won over the
    ``@cpu`` one for a compiled CPU run, and the input-bound advice pinned memory."""
    trace = polyprof.load(path)
    for rule in CPU_RULES:
        assert not _gpu_words(suggestion(trace, rule)), (rule, suggestion(trace, rule))
    text = suggestion(trace, "low_mfu")
    assert "compiled already" in text and "torch.set_num_threads" in text and "oneDNN" in text, text
    assert "AVX512-BF16" in text and "freezing" in text
    assert "torch.compile)" not in text.replace("(torch.compile)", "")  # not told to compile
    chain = suggestion(trace, "fusable_chain")
    assert "compiled regions" in chain and "in cache" in chain, chain


def test_an_eager_cpu_run_gets_cpu_advice() -> None:
    trace = polyprof.load(EAGER)
    for rule in CPU_RULES:
        assert not _gpu_words(suggestion(trace, rule)), (rule, suggestion(trace, rule))
    text = suggestion(trace, "low_mfu")
    assert text.startswith("On a CPU") and "torch.set_num_threads" in text and "oneDNN" in text, text
    assert "AMX or AVX512-BF16" in text and "torch.compile" in text  # an eager program is told to compile
    assert "compiled already" not in text
    assert "persistent_workers" in suggestion(trace, "input_bound")


def _findings(path: Path, peak: str | None) -> tuple[polyprof.Trace, list[A.Finding]]:
    trace = polyprof.load(path)  # (a trace per peak: its tables are kept with it)
    with peaks.using(peak):
        return trace, A.findings(trace, window="auto")


@pytest.mark.parametrize("path", [EAGER, COMPILED], ids=["eager", "compiled"])
def test_low_mfu_of_a_cpu_run_waits_for_a_peak_then_speaks_of_the_cpu(path: Path) -> None:
    """No CPU is in the peaks table: MFU is unknown (the summary's MFU line says how to
    give a peak) and the finding stays silent. With ``--peak fp32=1e12`` the MFU is the
    model's FLOPs over time x that peak, and the finding gives the CPU advice without the
    lead about listed ops, as host ops have no roofline share to list them by."""
    trace, found = _findings(path, None)
    with peaks.using(None):
        m = mfu(trace)
    overall = np.flatnonzero(column(m, "step") == -1)[0]
    assert column(m, "flops")[overall] > 5e8 and math.isnan(column(m, "mfu_pct")[overall])
    assert "low_mfu" not in {f.id for f in found}

    trace, found = _findings(path, "fp32=1e12")
    low = next(f for f in found if f.id == "low_mfu")
    ev = low.evidence
    assert ev["peak_flops_per_s"] == 1e12 and ev["precision"] == "fp32"
    assert ev["mfu_pct"] == pytest.approx(100 * ev["flops"] / (ev["time_ns"] * 1e-9 * 1e12), rel=1e-9)
    assert 0.5 < ev["mfu_pct"] < 3  # 10-12 GFLOP/s on one core of the recording host
    assert low.events == [] and low.suggestion == suggestion(trace, "low_mfu")
    assert not low.suggestion.startswith(LOW_MFU_LEAD) and not _gpu_words(low.suggestion)


def _summary(*args: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["summary", *args]) == 0
    return " ".join(buf.getvalue().replace("│", " ").split())


def test_the_summary_of_a_compiled_cpu_run(monkeypatch) -> None:
    """What ``polyprof summary`` prints: without a peak the MFU line asks for one and no
    low-MFU finding; with one, the finding's advice is the compiled CPU text."""
    monkeypatch.setenv("COLUMNS", "200")
    text = _summary(str(COMPILED))
    assert "MFU unknown (fp32): 546 MFLOP in 45.6 ms" in text
    assert "no fp32 peak known for this CPU: give one with --peak fp32=<FLOP/s>" in text
    assert "Model FLOPs utilisation" not in text
    monkeypatch.setenv(peaks.ENV, "")  # --peak sets it for the process: put back as it was after the test
    given = _summary(str(COMPILED), "--peak", "fp32=1e12")
    assert "MFU 1.2% (fp32): 546 MFLOP in 45.6 ms, 12 GFLOP/s of 1 TFLOP/s peak" in given
    assert "Model FLOPs utilisation is 1.2% (fp32)" in given
    assert "try: The program is compiled already (torch.compile): on a CPU Inductor" in given
    assert not _gpu_words(given.split("Model FLOPs utilisation", 1)[1].split("╰", 1)[0])


def test_a_jax_cpu_run_lists_its_ops_and_gets_xla_cpu_advice() -> None:
    """XLA's CPU ops are the program's device work, costed from its HLO: the finding lists
    them (so its advice leads with them) and speaks of jax.jit and the CPU's cores."""
    trace, found = _findings(JAX_CPU, None)
    assert "low_mfu" not in {f.id for f in found}
    trace, found = _findings(JAX_CPU, "fp32=1e12")
    low = next(f for f in found if f.id == "low_mfu")
    assert low.events and low.suggestion == LOW_MFU_LEAD + suggestion(trace, "low_mfu")
    assert "jax.jit" in low.suggestion and "On a CPU" in low.suggestion and not _gpu_words(low.suggestion)
    # a collective (all-reduce.2, 24 ms of 126) waits on the network and the other rank: not
    # lost against a roofline; an MFU of 0.034% is not titled 0.0%
    assert low.events and not any(e["name"].startswith("all-reduce") for e in low.events), low.events
    assert low.title.startswith(f"Model FLOPs utilisation is {low.evidence['mfu_pct']:.3g}% (fp32)"), low.title


def test_without_a_bandwidth_elementwise_ops_are_not_lost_against_the_compute_roof() -> None:
    """``--peak fp32=1e12`` gives a compute roof and no bandwidth: an op of under 4 FLOPs
    per byte (wrapped_add.1, an elementwise add of the JAX CPU scan) has no known ridge and
    was listed as lost in full against the compute roof; the fusions that do compute stay."""
    trace, found = _findings(DATA / "traces" / "jax_cpu_scan" / "run_a.xplane.pb.gz", "fp32=1e12")
    low = next(f for f in found if f.id == "low_mfu")
    names = [e["name"] for e in low.events]
    # (an XLA op is named module/op: op_efficiency's rows, as event_stats names them)
    assert names and not any("/wrapped_add" in n for n in names) and "jit_step/ynn_fusion.1" in names, names


def test_gpu_runs_keep_their_gpu_advice() -> None:
    compiled = polyprof.load(DATA / "h200" / "torch_compile_h200.json.gz")
    low = next(f for f in A.findings(compiled) if f.id == "low_mfu")
    assert low.events and low.suggestion.startswith(LOW_MFU_LEAD)
    assert "tensor cores" in low.suggestion and "TF32" in low.suggestion and "compiled regions" in low.suggestion
    assert "On a CPU" not in low.suggestion and "oneDNN" not in low.suggestion
    eager = polyprof.load(DATA / "h200" / "torch_bf16_mm_h200.json.gz")
    text = suggestion(eager, "low_mfu")
    assert "tensor units" in text and "TF32" in text and "(torch.compile)" in text and "oneDNN" not in text
    assert "pin_memory" in suggestion(eager, "input_bound")


def test_a_rule_with_compiled_and_cpu_texts_has_one_for_both() -> None:
    """A compiled CPU run takes ``rule@compiled@cpu`` first: where a rule has a
    ``@compiled`` and a ``@cpu`` text for a framework, it must have that one too (else the
    GPU-worded compiled text would win)."""
    for key, texts in VARIANTS.items():
        rule, *variants = key.split("@")
        assert rule in ADVICE and set(variants) <= {"compiled", "cpu"}, key
        for fw in texts:
            if key.endswith("@compiled") and fw in VARIANTS.get(f"{rule}@cpu", {}):
                assert fw in VARIANTS.get(f"{rule}@compiled@cpu", {}), (rule, fw)
