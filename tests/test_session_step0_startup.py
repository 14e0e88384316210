"""Step 0 of plain ``polyprof.step()`` calls begins where the program's code resumed,
once the session's plugins had started (collect/session.py ``Session._resumes``,
collect/steps.py ``program_resumes``), not at the session's start before them. Before,
step 0 held polyprof's own start-up: torch.profiler's start made it 3.84 s against the
program's own 107 ms, and the analysed span 3.94 s. The trace's span and
``session.start_ns`` keep the session's start; the crash journal says the same step 0.

``SlowStart`` is a real plugin object (the plugin API a third-party package uses) whose
start takes 0.4 s, as a device runtime's does; one test uses the torch plugin itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect.clock import now_ns
from polyprof.collect.plugin import Plugin, SessionContext
from polyprof.derive.steps import find_steps
from polyprof.trace import TraceBuilder

SRC = Path(__file__).resolve().parents[1] / "src"
START_S = 0.4


class SlowStart(Plugin):
    """A plugin whose start takes ``START_S`` (a device runtime's initialisation)."""

    name = "slowstart"

    def _start(self, ctx: SessionContext) -> None:
        time.sleep(START_S)

    def _stop(self) -> None:
        pass

    def _collect(self):
        return TraceBuilder().build()


def _steps(trace: polyprof.Trace) -> tuple[np.ndarray, np.ndarray]:
    st = find_steps(trace)
    return np.asarray(st.start, np.int64), np.asarray(st.end, np.int64)


def test_plain_steps_begin_step_0_where_the_program_resumed() -> None:
    with polyprof.profile(plugins=["host", SlowStart()]) as p:
        body = now_ns()
        for _ in range(2):
            time.sleep(0.03)
            polyprof.step()
    start, end = _steps(p.trace)
    assert len(start) == 2
    # step 0 begins just before the body (the session's start returning), not 0.4 s before it
    assert body - 5_000_000 <= start[0] <= body, (body - start[0]) / 1e6
    assert end[0] - start[0] < 0.2e9, (end[0] - start[0]) / 1e6  # ~30 ms, not 430 ms
    # the plugins' start-up stays in the trace, before step 0 in no step
    session = p.trace.metadata["session"]["start_ns"]
    assert start[0] - session >= START_S * 1e9 * 0.9


def test_blocks_begin_at_their_entry_after_a_slow_start() -> None:
    """The first ``with polyprof.step():`` block's entry stays step 0's start, after where
    the program resumed (collect/steps.py ``on_enter``)."""
    with polyprof.profile(plugins=["host", SlowStart()]) as p:
        time.sleep(0.1)
        entered = []
        for _ in range(3):
            with polyprof.step():
                entered.append(now_ns())
                time.sleep(0.01)
    start, _ = _steps(p.trace)
    assert len(start) == 3
    assert 0 <= entered[0] - start[0] < 2_000_000, (entered[0] - start[0]) / 1e6


#: plain steps after a slow plugin start; killed after a journal flush
KILLED = f"""\
import json, os, signal, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
import polyprof
from polyprof.collect.clock import now_ns
from test_session_step0_startup import SlowStart

p = polyprof.profile(plugins=["host", SlowStart()], output="p.polyprof")
p.start()
body = now_ns()
for i in range(3):
    time.sleep(0.03)
    polyprof.step()
print("TIMES", json.dumps({{"body": body}}), flush=True)
time.sleep(1.2)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_runs_journal_has_the_same_step_0(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(KILLED)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "TIMES" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    body = json.loads(r.stdout.split("TIMES", 1)[1])["body"]
    start, end = _steps(polyprof.load(tmp_path / "p.polyprof.partial"))
    assert len(start) == 3
    assert body - 5_000_000 <= start[0] <= body, (body - start[0]) / 1e6
    assert end[0] - start[0] < 0.2e9


#: the audit's program: torch.profiler takes seconds to start; the program times its steps
#: two steps the program times itself (a product and a 50 ms sleep each)
LOOP = """\
own = []
for i in range(2):
    t0 = now_ns()
    torch.randn(200, 200) @ torch.randn(200, 200)
    time.sleep(0.05)
    polyprof.step()
    own.append(now_ns() - t0)
"""

TORCH = f"""\
import json, time
import polyprof, torch
from polyprof.collect.clock import now_ns
before = now_ns()
with polyprof.profile(plugins=["host", "torch"], output="t.polyprof"):
    body = now_ns()
{textwrap.indent(LOOP, "    ")}print("TIMES", json.dumps({{"before": before, "body": body, "own": own}}), flush=True)
"""


def test_torch_profilers_start_is_not_in_step_0(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "prog.py").write_text(TORCH)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "TIMES" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    own = json.loads(r.stdout.split("TIMES", 1)[1])
    start, end = _steps(polyprof.load(tmp_path / "t.polyprof"))
    assert len(start) == 2
    assert own["body"] - 5_000_000 <= start[0] <= own["body"]
    # step 0 as the program timed it (its own count starts a few µs later), not the profiler's start too
    assert abs((end[0] - start[0]) - own["own"][0]) < 5_000_000, ((end - start) / 1e6, own["own"])


RUN_TORCH = f"""\
import json, time
from polyprof.collect.clock import now_ns
import torch, polyprof
after_import = now_ns()
{LOOP}print("TIMES", json.dumps({{"after_import": after_import, "own": own}}), flush=True)
"""


def test_under_run_torch_profilers_start_at_import_is_not_in_step_0(tmp_path: Path) -> None:
    """Under ``polyprof run``, the torch plugin starts torch.profiler at the program's
    ``import torch`` (1.5-4 s on a loaded machine), after the session's start: step 0
    held it (3.95 s against the program's own 132 ms, an auditor). The program resumes
    after that start, as after a session's plugin start-up."""
    pytest.importorskip("torch")
    (tmp_path / "prog.py").write_text(RUN_TORCH)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", "prog.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "TIMES" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    own = json.loads(r.stdout.split("TIMES", 1)[1])
    start, end = _steps(polyprof.load(tmp_path / "t.polyprof"))
    assert len(start) == 2
    assert start[0] <= own["after_import"]  # (the profiler started inside the import)
    # step 0 as the program timed it from its import on (give or take the few lines between), not the start too
    assert abs((end[0] - start[0]) - own["own"][0]) < 20_000_000, ((end - start) / 1e6, own["own"])
