"""The ``recompiles`` finding: torch.compile compiling inside the analysed steps, on a
real recording (tests/data/traces/compile_cpu), checked against the raw JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polyprof
from polyprof import analyze as A

DATA = Path(__file__).parent / "data" / "traces" / "compile_cpu" / "recompile_cpu.json.gz"


def test_a_recompile_in_the_analysed_steps_is_found_with_its_time() -> None:
    """The batch size changes at step 4: torch compiles the frame again there. The
    finding gives that step, one frame, and the union of the compile ranges in the window
    (the frame's compile ranges and Inductor's, its backward's after it, read here)."""
    events = json.loads(gzip.decompress(DATA.read_bytes()))["traceEvents"]
    steps = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")}
    lo, hi = steps["ProfilerStep#1"][0], steps["ProfilerStep#7"][1]  # the window: every step but the first
    marks = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)", "compile_fx_inner (dynamo_timed)",
             "inductor_compile", "entire_backward_compile")
    ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("name") in marks and lo <= e["ts"] < hi)
    took, end = 0.0, float("-inf")
    for s, e in ranges:  # their union
        took += max(0.0, e - max(s, end))
        end = max(end, e)
    trace = polyprof.load(DATA)
    found = next(f for f in A.findings(trace, window="auto") if f.id == "recompiles")
    assert found.evidence["steps"] == [4] and found.evidence["frames"] == 1
    assert abs(found.evidence["compile_ns"] - took * 1000) <= 10 * len(ranges)  # µs text to ns
    assert found.severity == "high" and "mark_dynamic" in found.suggestion
    assert "recompiles" not in {f.id for f in A.findings(polyprof.load(
        Path(__file__).parent / "data" / "h200" / "torch_compile_train_h200.json.gz"), window="auto")}


def _kineto(tmp_path: Path, regions: bool) -> Path:
    """Steps 0-4 of 200 ms: a frame compiles in step 1 (100 ms) and again in step 3 (50
    ms, Inductor's range inside it), each followed by its compiled region (0/0, then 0/1)
    where ``regions``; the set-up in step 0 compiles nothing."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
           "ts": 200_000 * i, "dur": 200_000} for i in range(5)]

    def x(name: str, ts: int, dur: int) -> None:
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})

    for step, took, g in ((1, 100_000, 0), (3, 50_000, 1)):
        t0 = 200_000 * step + 10_000
        x("entire_frame_compile", t0, took)
        x("compile_fx_inner (dynamo_timed)", t0 + 1_000, took - 2_000)
        if regions:
            x(f"Torch-Compiled Region: 0/{g}", t0 + took + 5_000, 1_000)
    p = tmp_path / f"compile_{regions}.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_the_first_compilation_is_no_recompile_in_any_window(tmp_path: Path) -> None:
    """torch's regions say which compilation ran (0/0: the frame's first): the first one
    is left out whether the window keeps its step (``with polyprof.step():`` makes the
    set-up step 0, so the first loop step is 1; ``--all-steps``) or not."""
    trace = polyprof.load(_kineto(tmp_path, regions=True))
    for window in ("auto", None):  # the default; every step
        found = [f for f in A.findings(trace, window=window) if f.id == "recompiles"]
        assert [(f.evidence["steps"], f.evidence["compile_ns"]) for f in found] == [([3], 50_000_000)], window


def test_without_regions_a_compilation_after_the_first_step_counts(tmp_path: Path) -> None:
    """No compiled regions in the trace: a compilation counts only in a step after the
    first, whatever the window; a trace without steps has no recompile to tell."""
    trace = polyprof.load(_kineto(tmp_path, regions=False))
    found = [f for f in A.findings(trace) if f.id == "recompiles"]
    assert [f.evidence["steps"] for f in found] == [[1, 3]]
    cupti_only = Path(__file__).parent / "data" / "h200" / "torch_compile_cupti.polyprof"  # one compilation, no steps
    assert "recompiles" not in {f.id for f in A.findings(polyprof.load(cupti_only))}
