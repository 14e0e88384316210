"""The recording schedule (collect/schedule.py): which steps a session keeps, checked
against torch.profiler's own schedule, and on live torch sessions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect.schedule import ACTIVE, DONE, WAIT, WARMUP, Schedule
from polyprof.derive import cache
from polyprof.errors import PolyprofError
from polyprof.trace.metadata_keys import plugin_fit


@pytest.mark.parametrize("kw", [dict(wait=1, warmup=1, active=3, repeat=1), dict(wait=2, warmup=0, active=1, repeat=3),
                                dict(wait=0, warmup=2, active=2, repeat=0, skip_first=5),
                                dict(wait=5, warmup=2, active=3, repeat=2, skip_first=1)])
def test_states_are_torch_profilers_actions(kw: dict) -> None:
    torch = pytest.importorskip("torch")
    A = torch.profiler.ProfilerAction
    want = {A.NONE: (WAIT, DONE), A.WARMUP: (WARMUP,), A.RECORD: (ACTIVE,), A.RECORD_AND_SAVE: (ACTIVE,)}
    theirs = torch.profiler.schedule(**kw)
    ours = polyprof.schedule(**kw)
    for step in range(60):
        assert ours.state(step) in want[theirs(step)], (kw, step, ours.state(step), theirs(step))


def test_one_cycle_unless_repeat_says_otherwise() -> None:
    """polyprof's default differs from torch's (repeat=0, cycles to the end): one cycle."""
    ours = polyprof.schedule(wait=1, warmup=1, active=3)
    assert [s for s in range(1000) if ours.state(s) == ACTIVE] == [2, 3, 4]
    assert Schedule.parse("wait=1,warmup=1,active=3") == ours
    assert sum(Schedule.parse("wait=1,warmup=1,active=3,repeat=0").state(s) == ACTIVE for s in range(1000)) == 600


def test_schedule_text_and_bad_values() -> None:
    assert Schedule.parse("wait=1, warmup=2,active=3,repeat=0,skip-first=4") == Schedule(1, 2, 3, 0, 4)
    for bad in ("wait=x", "active=0", "sleep=1", "wait=-1"):
        with pytest.raises(PolyprofError) as e:
            Schedule.parse(bad)
        assert "schedule" in str(e.value)


def _train(steps: int) -> None:
    import torch

    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    for _ in range(steps):
        with polyprof.section("fwd"):
            model(x).sum().backward()
        polyprof.step()


def test_a_session_keeps_only_the_active_steps_and_torch_records_only_then() -> None:
    pytest.importorskip("torch")
    plan = polyprof.schedule(wait=2, warmup=1, active=2, repeat=2)
    with polyprof.profile(["host", "torch"], options={"host": {"sample_interval_s": 0}}, schedule=plan) as s:
        _train(14)
    t = s.trace
    steps = cache.steps(t)
    assert steps.number.tolist() == [3, 4, 8, 9]
    meta = t.metadata["schedule"]
    assert meta["recorded_steps"] == [3, 4, 8, 9] and len(meta["windows_ns"]) == 2
    windows = np.array(meta["windows_ns"])
    # one torch recording per warm-up + active stretch, nothing in between
    cycles = plugin_fit(t.metadata, "torch")["cycles"]
    assert len(cycles) == 2, cycles
    names = t.names()
    ev = t.events
    linear = np.flatnonzero(names == "aten::linear")
    assert len(linear) == 4  # one per kept step: the warm-up's were dropped
    inside = ((ev["start_ns"][linear, None] >= windows[:, 0]) & (ev["start_ns"][linear, None] < windows[:, 1]))
    assert inside.any(axis=1).all()
    assert (names == "fwd").sum() == 4
    # the default summary window analyses every recorded step (no warm-up to skip)
    from polyprof.analyze.window import AUTO, label

    assert label(t, AUTO).startswith("all 4 steps (3-4, 8-9)")


def test_the_window_is_the_recorded_steps_when_the_warm_up_is_the_first_step() -> None:
    """wait=0: the warm-up is step 0, the program's start up to its first step mark. A
    recording window opened 54 µs before that mark kept step 0's marker (1.6 s, no events
    of its own) in a ``polyprof run`` of a torch program, and the summary analysed it as
    one of "the steps the schedule recorded": MFU 0.014% where each recorded step had
    3.5%. The window is the recorded steps (the trace's shape is rebuilt here)."""
    from polyprof.analyze.window import AUTO, label, select
    from polyprof.trace import keys
    from polyprof.trace.builder import TraceBuilder

    b = TraceBuilder({"schedule": {"wait": 0, "warmup": 1, "active": 3, "recorded_steps": [1, 2, 3],
                                   "windows_ns": [[1_600_000_000 - 54_000, 1_606_000_000]]}})
    host = b.plane(keys.HOST_PLANE, "host")
    marks = b.track(host, keys.LINE_STEPS, "steps", tid=0, sort_index=-1)
    starts = np.array([0, 1_600_000_000, 1_602_000_000, 1_604_000_000])
    b.events(marks, np.array([f"step {i}" for i in range(4)], object), starts, np.diff(np.r_[starts, 1_606_000_000]),
             keys.CAT_STEP, stats={keys.STEP: np.arange(4, dtype=np.int64)})
    work = b.track(host, "main", tid=1)
    for s0 in starts[1:]:
        b.event(work, "forward", int(s0) + 1000, 500_000, "section")
    t = b.build()
    assert cache.steps(t).number.tolist() == [0, 1, 2, 3]
    sel = select(t, AUTO)
    assert cache.steps(t).number[sel.index].tolist() == [1, 2, 3]
    assert label(t, AUTO).startswith("steps 1-3 of 0-3 (the steps the schedule recorded)"), label(t, AUTO)


def test_a_run_that_ends_before_the_active_steps_says_so() -> None:
    with polyprof.profile(["host"], options={"host": {"sample_interval_s": 0}},
                          schedule=polyprof.schedule(wait=5, active=1)) as s:
        for _ in range(3):
            with polyprof.section("work"):
                pass
            polyprof.step()
    t = s.trace
    assert t.n_events == 0
    assert any("recorded no step" in w["message"] for w in t.metadata["warnings"])
    assert not any("no step seen" in w["message"] for w in t.metadata["warnings"])  # it saw three


def test_a_schedule_that_saw_no_step_says_how_to_mark_them() -> None:
    """A JAX loop (StepTraceAnnotation) under --schedule recorded nothing and said only
    that the program "ended in step 0": steps polyprof does not see live need
    ``polyprof.step()``."""
    with polyprof.profile(["host"], options={"host": {"sample_interval_s": 0}},
                          schedule=polyprof.schedule(wait=1, active=1)) as s:
        with polyprof.section("work"):
            pass
    msg = next(w["message"] for w in s.trace.metadata["warnings"] if "recorded no step" in w["message"])
    assert "ended in step 0 (no step seen: call polyprof.step() in each" in msg, msg


def test_polyprof_run_schedule(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text("import polyprof, torch\n"
                      "m = torch.nn.Linear(8, 8)\n"
                      "for i in range(30):\n"
                      "    m(torch.randn(2, 8)).sum().backward()\n"
                      "    polyprof.step()\n")
    out = tmp_path / "t.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out),
                        "--schedule", "skip_first=10,wait=1,warmup=1,active=3,repeat=1", str(script)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    t = polyprof.load(out)
    assert cache.steps(t).number.tolist() == [12, 13, 14]
    assert (t.names() == "aten::linear").sum() == 3
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--schedule", "active=two", str(script)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "schedule" in r.stderr, r.stderr


def test_a_nested_session_says_its_schedule_is_ignored(caplog):
    with polyprof.profile(["host"], options={"host": {"sample_interval_s": 0}}) as outer:
        with polyprof.profile(["host"], schedule="active=1") as inner:
            for _ in range(3):
                polyprof.step()
    assert any("schedule" in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)
    assert len(cache.steps(inner.trace)) == 3 and len(cache.steps(outer.trace)) == 3
