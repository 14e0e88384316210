"""Which steps a time window (``delay``/``duration``) recorded, and where the first step
detected in an unmodified torch program begins (collect/schedule.py ``Timed``,
collect/steps.py, plugins/torch/steps.py), checked on real torch CPU runs against the
loop's own timestamps.

torch's profiler starts and stops only at a step boundary on the program's thread, so a
window records whole steps between the first boundary after it opens and the first after
it closes: the window's recorded steps are the steps torch recorded whole; steps cut by
its edges are markers only, and a window in which torch recorded nothing, or that holds
no whole step, says so. Step 0 of detected steps begins at the first module call, not
at the session's start (before, under ``polyprof run``, it held ``import torch``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import window as window_mod
from polyprof.collect import options as opts
from polyprof.derive.steps import find_steps

torch = pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[1] / "src"
MS = 1_000_000
#: how far the loop's own clock reading (after ``opt.step()`` returned) may lag the step's
#: end (the optimizer's hook in it): microseconds, but a thread preempted on a loaded
#: machine waits a time slice or more (a failure here was 5-7 ms off at a load of 8 on 2 cores)
SLACK = 50 * MS


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in opts.NAMES:
        monkeypatch.delenv(opts.env_name(name), raising=False)


def _until(t_ns: int) -> None:
    while (left := t_ns - time.perf_counter_ns()) > 0:
        time.sleep(min(left / 1e9, 0.005))


def _model():
    """A tiny model and its optimizer, warmed up (a first backward can take seconds on a
    loaded machine: the steps below are timed to the window)."""
    torch.set_num_threads(1)
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    m(torch.randn(4, 8)).sum().backward()
    opt.step()
    return m, opt


def _train(model, boundaries: list[int], work_first: bool = True) -> list[int]:
    """One training step per boundary (a time, ns): forward and backward, then the
    optimizer's step() at that time (``work_first=False``: the work just before it).
    The loop's own end of each step (after ``opt.step()`` returned)."""
    m, opt = model
    ends = []
    for b in boundaries:
        if not work_first:
            _until(b - 20 * MS)
        m(torch.randn(4, 8)).sum().backward()
        _until(b)
        opt.step()
        ends.append(time.perf_counter_ns())
    return ends


def _warnings(t: polyprof.Trace) -> list[str]:
    # (a plugin's warning is a dict; the session's own, a string)
    return [w if isinstance(w, str) else f"{w['plugin']}: {w['message']}" for w in t.metadata.get("warnings", [])]


def test_a_window_keeps_to_the_steps_torch_recorded_whole():
    """Window 0.6-1.6 s; steps of 200-250 ms whose boundaries lie 150 ms before it opens,
    then 100, 300, 500, 700, 900 ms and 1.15 s after: steps 2 and 7 are cut by its
    edges (step 2 began before torch resumed: its first part has no torch op), steps
    3-6 are whole. Before, the window had no recorded steps and the analyses counted all
    six (as the audit's window of 15-18 s: "all 8 steps (3-10)", step 3 with no op)."""
    model = _model()
    with polyprof.profile(["host", "torch"], delay=0.6, duration=1.0) as s:
        opened = s._driver.open_ns  # when the window opens, on the session's clock
        ends = _train(model, [opened + k * MS for k in (-350, -150, 100, 300, 500, 700, 900, 1150, 1350)])
    t = s.trace
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    assert lo == opened and hi == opened + 1000 * MS
    assert t.metadata["schedule"]["recorded_steps"] == [3, 4, 5, 6]
    steps = find_steps(t)
    assert steps.number.tolist() == [2, 3, 4, 5, 6, 7]  # the cut ones stay, as markers
    chosen = window_mod.select(t, "auto")
    assert steps.number[chosen.index].tolist() == [3, 4, 5, 6]
    assert "the steps the schedule recorded" in chosen.label
    # every recorded step holds its own torch ops: one forward addmm each
    ops = np.flatnonzero(t.names() == "aten::addmm")
    per = np.bincount(steps.of(t.events["start_ns"][ops]) + 1, minlength=len(steps) + 1)[1:]
    assert per[1:5].tolist() == [1, 1, 1, 1] and per[0] == 0  # step 2: torch was not recording
    # the first recorded step begins once torch has resumed (at the boundary where it was
    # told to): torch's start is in step 2, as in the loop's own timing, not in step 3
    (resumed_at, _), = next(iter(s._driver.stretches.values()))
    assert steps.start[0] < resumed_at < steps.start[1] == steps.end[0]
    # the steps' times are the loop's own (each ends where its optimizer step did)
    own = np.diff(np.array(ends, np.int64))  # own[k - 1]: step k's time
    took = steps.end - steps.start
    for i, n in enumerate(steps.number.tolist()):
        # step 7 ends where torch paused: its stop (tens of ms) is in the loop's step 7 and in polyprof's step 8
        assert 0 <= ends[n] - steps.end[i] < (SLACK if n < 7 else 1000 * MS)
        if 3 <= n <= 6:
            assert abs(int(took[i]) - int(own[n - 1])) < SLACK, (n, took[i], own[n - 1])
    assert not _warnings(t)


def test_a_window_shorter_than_a_step_says_so():
    """The audit's `--delay 13 --duration 2` in one-second steps: the first step boundary
    in the window came 100 ms before it closed, torch resumed there, and the next step's
    ops came after it closed. Before: 2 events, no warning, and "2 steps (0-1) (the steps
    the schedule recorded)", step 0 from the session's start. Now: what torch did not
    record in the window is said, and no step is analysed that was not recorded whole."""
    model = _model()
    with polyprof.profile(["host", "torch"], delay=0.5, duration=0.3) as s:
        opened = s._driver.open_ns
        _train(model, [opened + k * MS for k in (-300, 200, 700)], work_first=False)
    t = s.trace
    said = _warnings(t)
    assert any(w.startswith("torch: recorded nothing in the window (delay=0.5 s, duration=0.3 s)")
               and "before it closed" in w for w in said), said
    assert any(w.startswith("session: the window (delay=0.5 s, duration=0.3 s) holds no step recorded whole")
               for w in said), said
    assert t.metadata["schedule"]["recorded_steps"] == []
    assert len(find_steps(t)) == 0  # the cut steps' marks are left out: a time window, analysed whole
    assert not (t.names() == "aten::addmm").any()


def test_a_window_with_no_step_boundary_says_torch_recorded_nothing():
    """No optimizer step while the window was open: torch never resumed."""
    model = _model()
    with polyprof.profile(["host", "torch"], delay=0.3, duration=0.2) as s:
        opened = s._driver.open_ns
        _train(model, [opened + k * MS for k in (-150, 450)])
    said = _warnings(s.trace)
    assert any(w.startswith("torch: recorded nothing in the window") and "none came while the window was open"
               in w and "the first after it opened came at" in w for w in said), said


def test_step_zero_begins_at_the_first_forward():
    """In a session (torch imported before it), 0.5 s of set-up then three steps: step 0
    runs from the first module call to the first optimizer step, and the one-shot
    forward hook is gone after that call. Before, step 0 held the set-up."""
    from torch.nn.modules import module as torch_module

    m, opt = _model()
    hooks = len(torch_module._global_forward_pre_hooks)
    with polyprof.profile(["host", "torch"]) as s:
        time.sleep(0.5)  # set-up: loading data, building the model
        begun = time.perf_counter_ns()
        ends = []
        for _ in range(3):
            m(torch.randn(4, 8)).sum().backward()
            opt.step()
            ends.append(time.perf_counter_ns())
        assert len(torch_module._global_forward_pre_hooks) == hooks
    steps = find_steps(s.trace)
    assert steps.number.tolist() == [0, 1, 2]
    assert begun <= steps.start[0] < begun + SLACK
    assert 0 <= ends[0] - steps.end[0] < SLACK
    assert steps.end[0] - steps.start[0] < ends[0] - begun + MS


#: an unmodified training script: set-up after `import torch` (0.4 s), then five steps;
#: it prints its own times (CLOCK_MONOTONIC, the session's clock)
SCRIPT = """\
import json, sys, time
before = time.monotonic_ns()
import torch
after = time.monotonic_ns()
torch.set_num_threads(1)
time.sleep(0.4)  # reading data, building the model
functional = sys.argv[1] == "functional"
w = torch.randn(8, 8, requires_grad=True)
m = torch.nn.Linear(8, 8)
opt = torch.optim.SGD([w] if functional else m.parameters(), lr=0.01)
loop = time.monotonic_ns()
ends = []
for i in range(5):
    x = torch.randn(4, 8)
    (x @ w if functional else m(x)).sum().backward()
    opt.step()
    ends.append(time.monotonic_ns())
print("TIMES", json.dumps({"before": before, "after": after, "loop": loop, "ends": ends}))
"""


def _run(tmp_path: Path, kind: str) -> tuple[polyprof.Trace, dict]:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch", "-o",
                        f"{kind}.polyprof", "train.py", kind], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    own = json.loads(r.stdout.split("TIMES", 1)[1])
    return polyprof.load(tmp_path / f"{kind}.polyprof"), own


def test_run_step_zero_is_the_script_first_iteration(tmp_path):
    """`polyprof run` of an unmodified script: step 0 is its first iteration (from the
    first forward to the first optimizer step), as long as the script's own count of it
    (which also holds the batch's making), not the session's start through `import torch`
    and the set-up (before: the audit's 3.6 s step 0 against an 88 ms first iteration)."""
    t, own = _run(tmp_path, "module")
    steps = find_steps(t)
    ends = own["ends"]
    assert steps.number.tolist() == [0, 1, 2, 3, 4]
    assert own["loop"] <= steps.start[0] <= ends[0]
    first = ends[0] - own["loop"]
    assert steps.end[0] - steps.start[0] <= first and 0 <= ends[0] - steps.end[0] < SLACK
    for k in range(1, 5):  # the later steps are the script's own, to the optimizer step's end
        assert abs(int(steps.end[k] - steps.start[k]) - (ends[k] - ends[k - 1])) < SLACK


def test_run_step_zero_of_code_without_modules_begins_after_the_import(tmp_path):
    """No `nn.Module` call before the first optimizer step: step 0 begins where `import
    torch` ended (the set-up after it stays in step 0), not at the session's start."""
    t, own = _run(tmp_path, "functional")
    steps = find_steps(t)
    assert len(steps) == 5
    assert own["before"] < steps.start[0] <= own["after"]
    assert 0 <= own["ends"][0] - steps.end[0] < SLACK


def test_a_window_in_a_program_without_torch_says_nothing_of_torch(tmp_path):
    """The torch plugin in a session whose program never imports torch: it had nothing to
    record, so the window names it in no warning (its ``idle``)."""
    (tmp_path / "prog.py").write_text("import time, polyprof\nend = time.monotonic() + 1.0\n"
                                      "while time.monotonic() < end:\n    with polyprof.section('tick'):\n"
                                      "        time.sleep(0.01)\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch",
                        "--delay", "0.3", "--duration", "0.4", "-o", "p.polyprof", "prog.py"], capture_output=True,
                       text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    t = polyprof.load(tmp_path / "p.polyprof")
    # (a loaded machine may add the host plugin's own journal-lag warning: not of the window)
    said = [w for w in _warnings(t) if not w.startswith("host: the crash journal fell")]
    assert not said and "torch" not in r.stderr, (_warnings(t), r.stderr[-2000:])
    assert t.metadata["schedule"]["recorded_steps"] == [] and (t.names() == "tick").sum() >= 10


COMPILED = """
import torch
import torch._dynamo

m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
opt = torch.optim.SGD(m.parameters(), lr=0.01)
f = torch.compile(lambda x: m(x).sum(), fullgraph=True, backend="eager")
for _ in range(3):
    f(torch.randn(4, 8)).backward()
    opt.step()
print("breaks", sum(torch._dynamo.utils.counters["graph_break"].values()))
"""


def test_the_first_forward_hook_is_not_traced_by_torch_compile(tmp_path):
    """The hook that marks step 0's start is global: a module first called inside
    torch.compile had Dynamo trace it, and it could not (fullgraph=True: Unsupported, the
    program exited 1; without fullgraph a graph break, the model run uncompiled)."""
    (tmp_path / "comp.py").write_text(COMPILED)
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch", "-o",
                        "c.polyprof", "comp.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "breaks 0" in r.stdout


COMPILED_MODULE = """
import warnings
import torch

m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
opt = torch.optim.SGD(m.parameters(), lr=0.01)
cm = torch.compile(m, backend="eager")
for _ in range(3):
    cm(torch.randn(4, 8)).sum().backward()
    opt.step()
print("filter left", any(f[1] is not None and "global hooks" in f[1].pattern for f in warnings.filters))
"""


def test_a_compiled_module_hears_nothing_of_the_hook(tmp_path):
    """torch warns when a compiled module is called while a global module hook is there:
    every torch.compile(module) program under polyprof run printed a UserWarning about
    hooks it never registered. The hook's filter goes with the hook."""
    (tmp_path / "comp.py").write_text(COMPILED_MODULE)
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,torch", "-o",
                        "c.polyprof", "comp.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "global hooks" not in r.stderr
    assert "filter left False" in r.stdout
