"""A window of the user's own (``--all-steps``, ``--skip-first N``, ``--steps A:B``) on a
trace a schedule or time window recorded keeps to the steps it recorded whole, as the
default window does (``analyze/window.py``, ``_whole``): the steps its edges cut stay in
the trace as marks but are not analysed, and the window's line says so; a time window
that holds no whole step is analysed as that window. Before, ``--all-steps`` took every
step mark: a ``polyprof run --delay 9 --duration 1.5`` of a torch loop read "all 3 steps
(0-2) (all steps; the 0 ns between its 2 recorded stretches is not analysed)", step 0
the 10.1 s from the program's start (torch not recording), idle all through, where the
default reads "step 1 of 0-2 (the steps the schedule recorded)"; and a window holding no
whole step was analysed as the whole run. A schedule's cycles (``--schedule``,
``torch.profiler.schedule``) hold only whole steps: ``--all-steps`` analyses what the
default does there already. Real torch CPU runs in process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.steps import step_stats
from polyprof.analyze.frames import column
from polyprof.analyze.window import AUTO, Window, select
from polyprof.collect import options as opts
from polyprof.derive.steps import find_steps
from polyprof.errors import WindowError

torch = pytest.importorskip("torch")

from test_window_steps import _model  # noqa: E402  (pytest puts tests/ on sys.path; after the skip)

MS = 1_000_000


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in opts.NAMES:
        monkeypatch.delenv(opts.env_name(name), raising=False)


def _train(model, boundaries: list[int]) -> None:
    """One training step per boundary (a time, ns): forward and backward, then the
    optimizer's step() at that time."""
    m, opt = model
    for b in boundaries:
        m(torch.randn(4, 8)).sum().backward()
        while (left := b - time.perf_counter_ns()) > 0:
            time.sleep(min(left / 1e9, 0.005))
        opt.step()


@pytest.fixture(scope="module")
def cut(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Window 0.6-1.6 s; steps ending 0.8 s and 0.15 s before it opens, then 100, 300,
    500, 700, 900 ms and 1.15 s after: steps 2 (begun 150 ms before it opened, torch
    resumed at its end) and 7 (past the window's end) cut by its edges, 3-6 whole.
    Saved, for the command line."""
    model = _model()
    with polyprof.profile(["host", "torch"], delay=0.6, duration=1.0) as s:
        opened = s._driver.open_ns  # when the window opens, on the session's clock
        _train(model, [opened + k * MS for k in (-800, -150, 100, 300, 500, 700, 900, 1150, 1350)])
    path = tmp_path_factory.mktemp("cut") / "cut.polyprof"
    polyprof.export(s.trace, path)
    return path


def test_all_steps_leaves_the_cut_steps_out(cut: Path) -> None:
    t = polyprof.load(cut)
    rec = t.metadata["schedule"]["recorded_steps"]
    steps = find_steps(t)
    marks = steps.number.tolist()
    assert set(rec) < set(marks) and rec == list(range(rec[0], rec[-1] + 1))  # cut steps at both ends, as marks
    gone = [n for n in marks if n not in rec]
    auto = select(t, AUTO)
    for w in (Window(skip_first=0), Window.parse(":100", 0), Window.parse(f"{marks[0]}:", 0)):
        sel = select(t, w)
        assert steps.number[sel.index].tolist() == rec == steps.number[auto.index].tolist(), w  # before: every mark
        assert (sel.lo, sel.hi) == (auto.lo, auto.hi)
        said = sel.label.split("; step", 1)[1]
        assert said.endswith("not recorded whole (cut by the recording's edges): not analysed)"), sel.label
        assert all(str(n) in said for n in gone)
    # the first recorded step skipped: by position among the whole steps
    assert steps.number[select(t, Window(skip_first=1)).index].tolist() == rec[1:]
    # only cut steps asked for: said, with the steps recorded whole
    with pytest.raises(WindowError) as e:
        select(t, Window.parse(str(gone[0]), 0))
    assert f"step {gone[0]} not recorded whole" in str(e.value)
    assert str(e.value).endswith(f"; the recording holds steps {rec[0]}-{rec[-1]} whole")
    # the analyses: the recorded steps' own times (before, the first cut step's 0.65 s as a step, idle)
    ss = step_stats(t, Window(skip_first=0))
    assert sorted(set(column(ss, "step").tolist())) == rec


def test_all_steps_on_the_command_line(cut: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(cut), "--all-steps", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    words = out["overview"]["window"]
    assert "not recorded whole (cut by the recording's edges): not analysed" in words, words
    rec = polyprof.load(cut).metadata["schedule"]["recorded_steps"]
    assert sorted({x["step"] for x in out["tables"]["step_stats"]["records"]}) == rec


def test_a_window_with_no_whole_step_is_the_time_window_under_all_steps() -> None:
    """A 0.3 s window in longer steps: no whole step, its steps' marks left out, analysed
    as the window (AUTO's). ``--all-steps`` analysed the whole run instead (the view was
    the trace itself); a step range asks for steps it does not hold whole: said."""
    model = _model()
    with polyprof.profile(["host", "torch"], delay=0.5, duration=0.3) as s:
        opened = s._driver.open_ns
        _train(model, [opened + k * MS for k in (-300, 200, 700)])
    t = s.trace
    assert t.metadata["schedule"]["recorded_steps"] == []
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    auto = select(t, AUTO)
    assert auto.timed and lo <= auto.lo < auto.hi <= hi  # (the window, clipped to the trace)
    for w in (Window(skip_first=0), Window(skip_first=0, span="device")):
        sel = select(t, w)
        assert sel.restricted and sel.timed and (sel.lo, sel.hi) == (auto.lo, auto.hi)  # before: the whole trace
        assert sel.span == w.span and sel.stretches is None
        assert sel.label.startswith(auto.label) and auto.label.startswith("the time window the schedule recorded")
    for w in (Window.parse("0:5", 0), Window(skip_first=1)):
        with pytest.raises(WindowError, match="the recording holds no whole step"):
            select(t, w)


def test_a_schedules_cycles_hold_whole_steps_all_steps_is_the_default() -> None:
    """``schedule(wait=2, warmup=1, active=2, repeat=2)``: the trace's steps are the
    recorded ones (3-4, 8-9), whole; ``--all-steps`` analyses them, in the same two
    stretches, as the default does (it did before this change too)."""
    m = torch.nn.Linear(8, 8)
    with polyprof.profile(["host", "torch"], schedule=polyprof.schedule(wait=2, warmup=1, active=2, repeat=2)) as s:
        for _ in range(12):
            m(torch.randn(4, 8)).sum().backward()
            time.sleep(0.02)
            polyprof.step()
    t = s.trace
    assert find_steps(t).number.tolist() == t.metadata["schedule"]["recorded_steps"] == [3, 4, 8, 9]
    auto, every = select(t, AUTO), select(t, Window(skip_first=0))
    assert every.index.tolist() == auto.index.tolist() == [0, 1, 2, 3]
    assert np.array_equal(every.stretches, auto.stretches) and len(every.stretches) == 2
    assert "not recorded whole" not in every.label
