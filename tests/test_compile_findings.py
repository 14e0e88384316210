"""The ``recompiles`` finding: torch.compile compiling inside the analysed steps, on a
real recording (tests/data/traces/compile_cpu), checked against the raw JSON."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof import analyze as A
from polyprof.trace.builder import TraceBuilder

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
    is left out in any window. Here it runs in step 1, after a set-up step 0 (as plain
    ``polyprof.step()`` calls make it; blocks begin step 0 at the first block), so both
    AUTO's window (step 0 skipped as warm-up) and every step (``--all-steps``) keep it."""
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


def _recompiling_reference(trace: polyprof.Trace, rows: np.ndarray) -> np.ndarray:
    """``_recompiling`` written plainly (string by string, row by row): what the columnar
    one must give."""
    from polyprof.analyze.compile_findings import FRAME_COMPILE
    from polyprof.derive import cache

    ev = trace.events
    rows = rows[np.argsort(ev["start_ns"][rows], kind="stable")]
    which = {}
    for i, text in enumerate(trace.strings):
        m = re.match(r"^Torch-Compiled Region: (\d+)/(\d+)$", text)
        if m:
            which[i] = int(m.group(2))
    if not which:
        steps = cache.steps(trace)
        return rows[steps.of(ev["start_ns"][rows]) >= 1] if len(steps) else rows[:0]
    regions = trace.rows_named(*(trace.strings[i] for i in which))
    regions = regions[np.argsort(ev["start_ns"][regions], kind="stable")]
    r_start = ev["start_ns"][regions].astype(np.int64)
    frame_ids = {trace.string_id(f) for f in FRAME_COMPILE}
    keep, again = [], False
    for r in rows.tolist():
        if int(ev["name"][r]) in frame_ids:
            j = int(np.searchsorted(r_start, int(ev["start_ns"][r]) + int(ev["dur_ns"][r])))
            again = j < len(regions) and which[int(ev["name"][regions[j]])] > 0
        keep.append(again)
    return rows[np.asarray(keep, bool)]


def _compile_trace(seed: int) -> polyprof.Trace:
    """Frames compiled at random times, each maybe followed by a region of a random G
    (some ending exactly where a region starts, some after the last region), Inductor's
    ranges before the first frame compilation and between, ties in start times, and
    strings that look like regions but are not (prefix inside, a suffix, too short)."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    tr = b.track(b.plane("/host:CPU", "host"), "thread 1", "thread", tid=1)
    for s in ("x Torch-Compiled Region: 0/1", "Torch-Compiled Region: 0/1 extra", "Torch-Compiled",
              "Torch-Compiled Region: ", "", "Torch-Compiled Region: 2/3\n"):
        b.event(tr, s, int(rng.integers(0, 10_000)), 1, "user_annotation")
    frames = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)")
    inductor = ("compile_fx_inner (dynamo_timed)", "inductor_compile", "entire_backward_compile")
    for _ in range(int(rng.integers(0, 4))):  # compiling before any frame's compilation
        b.event(tr, str(rng.choice(inductor)), int(rng.integers(0, 2_000)), 50, "user_annotation")
    for _ in range(int(rng.integers(1, 12))):
        t0 = int(rng.integers(0, 100)) * 100
        b.event(tr, str(rng.choice(frames)), t0, int(rng.integers(0, 3)) * 50, "user_annotation")
        for _ in range(int(rng.integers(0, 3))):
            b.event(tr, str(rng.choice(inductor)), t0 + int(rng.integers(0, 400)), 20, "user_annotation")
        if rng.random() < 0.8:
            b.event(tr, f"Torch-Compiled Region: {rng.integers(0, 3)}/{rng.integers(0, 3)}",
                    t0 + int(rng.integers(0, 3)) * 50, 10, "user_annotation")
    return b.build()


@pytest.mark.parametrize("seed", range(60))
def test_recompiling_matches_the_plain_reference(seed: int) -> None:
    """The columnar carry of the latest frame compilation gives the rows the plain loop
    gives."""
    from polyprof.analyze import compile_findings as C

    trace = _compile_trace(seed)
    rows = trace.rows_named(*C.FRAME_COMPILE, *C.INDUCTOR_COMPILE)
    want = _recompiling_reference(trace, rows)
    assert C._recompiling(trace, rows).tolist() == want.tolist()
    if seed == 0:  # the regions found: exactly the strings that are one (the one with a newline too: re's $)
        regions = {trace.strings[i]: g for i, g in C._region_strings(trace.strings).items()}
        assert regions["Torch-Compiled Region: 2/3\n"] == 3
        assert all(s.startswith("Torch-Compiled Region: ") and s[23:].rstrip("\n").replace("/", "").isdigit()
                   for s in regions)


def test_no_region_strings_in_a_table_of_many() -> None:
    """A long table without regions, and with one at its very end."""
    from polyprof.analyze import compile_findings as C

    strings = [f"aten::op_{i}" for i in range(5_000)]
    assert C._region_strings(strings) == {}
    assert C._region_strings([*strings, "Torch-Compiled Region: 7/2"]) == {5_000: 2}
    assert C._region_strings([]) == {}
