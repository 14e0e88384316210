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
             "inductor_compile")
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
