"""Where step 0 begins with ``with polyprof.step():`` (collect/steps.py): each block is a
step and the first block is step 0, from its entry; what runs before it (imports, a
context, a model) is set-up, kept in the trace but in no step. Before, polyprof made that
set-up step 0, so AUTO's window ("skip the first step as warm-up") skipped the set-up and
analysed the program's real first iteration: an OpenCL loop whose first kernel launch
compiled for 1.1 s read "device idle 81%" (8% with plain calls, whose step 0 holds both
the set-up and the first iteration). Plain calls keep step 0 from the session's start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.window import select
from polyprof.collect import steps as steps_mod
from polyprof.collect.recorder import StepBlock

from opencl_programs import head, record

SETUP_S = 0.05
WORK_S = 0.01


def _steps(tr: polyprof.Trace) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(tr.categories() == "step")
    rows = rows[np.argsort(tr.start_ns[rows])]
    return tr.start_ns[rows], tr.end_ns[rows]


def _helper() -> StepBlock:
    return polyprof.step()


@pytest.mark.parametrize("form", ["block", "helper", "plain"])
def test_step_0_is_the_first_block(form: str) -> None:
    """Blocks (written as ``with polyprof.step():``, or through a helper that returns
    ``polyprof.step()``): one step per block, step 0 from the first block's entry, the
    set-up before it in no step but in the trace. Plain calls: as before, step 0 from
    where the program resumed after the session's start (its plugins started:
    tests/test_session_step0_startup.py) to the first call."""
    with polyprof.profile(plugins=["host"], output=None) as prof:
        body = time.perf_counter_ns()
        with polyprof.section("setup"):
            time.sleep(SETUP_S)
        before, enter = time.perf_counter_ns(), []
        for _ in range(3):
            if form == "plain":
                time.sleep(WORK_S)
                polyprof.step()
                continue
            with (polyprof.step() if form == "block" else _helper()):
                enter.append(time.perf_counter_ns())
                time.sleep(WORK_S)
    tr = prof.trace
    start, end = _steps(tr)
    setup = np.flatnonzero(tr.names() == "setup")
    assert len(setup) == 1  # the set-up stays in the trace
    assert len(start) == 3 and np.all(start[1:] == end[:-1])
    if form == "plain":
        assert tr.metadata["session"]["start_ns"] <= start[0] <= body
        assert tr.start_ns[setup[0]] >= start[0]  # step 0 holds the set-up
        return
    assert before <= start[0] <= enter[0]  # the first block's entry
    assert tr.end_ns[setup[0]] <= start[0]  # the set-up: before step 0
    assert np.all((end - start) < (SETUP_S + WORK_S) * 1e9)


def test_a_block_entered_later_counts_as_a_plain_call() -> None:
    """A ``step()`` result kept and entered later (``s = polyprof.step(); with s:``) is
    not told from a plain call when it is made: its boundary stays there (step 0 the
    set-up), as documented in collect/steps.py."""
    with polyprof.profile(plugins=["host"], output=None) as prof:
        body = time.perf_counter_ns()
        time.sleep(SETUP_S)
        for _ in range(3):
            s = polyprof.step()
            with s:
                time.sleep(WORK_S)
    start, _ = _steps(prof.trace)
    assert len(start) == 4 and prof.trace.metadata["session"]["start_ns"] <= start[0] <= body


class _Probe:
    """What ``opens_block`` said of the call that made it, as a context manager."""

    said: list[bool] = []

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


def _probe() -> _Probe:
    _Probe.said.append(steps_mod.opens_block(sys._getframe(1)))  # the frame recorder.step passes
    return _Probe()


def _probe_helper() -> _Probe:
    return _probe()


def test_opens_block_reads_the_caller() -> None:
    """The instruction after the call: a ``with`` (directly, past a conditional
    expression's jump, through a helper that returns it, as a later item) or anything
    else (a plain call, a result kept)."""
    _Probe.said.clear()
    cond = len(_Probe.said) == 0
    with _probe():
        pass
    _probe()
    kept = _probe()
    with (_probe() if cond else _Probe()):
        pass
    with _probe_helper():
        pass
    with _Probe(), _probe():
        pass
    kept = _probe_helper()
    with kept:
        pass
    assert _Probe.said == [True, False, False, True, True, True, False]


def test_a_schedule_counts_the_first_block_as_step_0() -> None:
    """The schedule counts the boundaries the trace has: ``wait=1, active=2`` over blocks
    records the second and third blocks, numbered 1 and 2 in the trace and in
    ``recorded_steps`` (before: the set-up was step 0, so it recorded the first two
    blocks as steps 1 and 2)."""
    with polyprof.profile(plugins=["host"], output=None, schedule=polyprof.schedule(wait=1, active=2)) as prof:
        time.sleep(SETUP_S)
        for i in range(5):
            with polyprof.step():
                with polyprof.section(f"block{i}"):
                    time.sleep(WORK_S)
    tr = prof.trace
    assert tr.metadata["schedule"]["recorded_steps"] == [1, 2]
    rows = np.flatnonzero(tr.categories() == "step")
    assert {1, 2} <= set(tr.stats["step"].lookup(rows)[1].tolist())  # (step 0's mark touches the window)
    names = {str(n) for n in tr.names().tolist() if str(n).startswith("block")}
    assert names == {"block1", "block2"}, names


_LOOP = """
POLYPROF_BEFORE = time.perf_counter_ns()
enter = []
for i in range(5):
    with polyprof.step():
        enter.append(time.perf_counter_ns())
        knl(q, a.shape, None, da, db, np.int32(100))
        q.finish()
        cl.enqueue_copy(q, a, da)
print("BEFORE", POLYPROF_BEFORE, "ENTER", enter[0])
"""


@pytest.mark.opencl
def test_opencl_blocks_under_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real OpenCL (PoCL) program under ``polyprof run``, its loop in blocks, kernels
    compiled at the first launch (POCL_KERNEL_CACHE=0): 5 steps, step 0 from the first
    block's entry, the context and program set-up before it in no step, and AUTO's window
    skips the first block (before: 6 steps, the set-up skipped, the first launch's
    compilation analysed as step 1)."""
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    program = "import polyprof\nwith polyprof.section('setup'):\n" + "\n".join(
        "    " + line for line in head(1 << 14).strip().splitlines()) + "\n" + _LOOP
    tr, out = record(tmp_path, "blocks", program, [], [], summary=False)
    words = out.split()
    before, enter = int(words[words.index("BEFORE") + 1]), int(words[words.index("ENTER") + 1])
    start, end = _steps(tr)
    assert len(start) == 5 and np.all(start[1:] == end[:-1])
    assert before <= start[0] <= enter
    setup = np.flatnonzero(tr.names() == "setup")
    assert len(setup) == 1 and tr.end_ns[setup[0]] <= start[0]
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(tmp_path / "blocks.polyprof")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    overview = json.loads(r.stdout)["overview"]
    assert overview["steps"] == 4 and overview["analysed_span_start_ns"] >= end[0], overview  # after the first block
    assert select(tr, "auto").index.tolist() == [1, 2, 3, 4]


_TORCH = """
import time
import torch
import polyprof
with polyprof.section("setup"):
    m = torch.nn.Sequential(torch.nn.LazyLinear(64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(32, 16)
before, enter = time.perf_counter_ns(), []
for i in range(5):
    with polyprof.step():
        enter.append(time.perf_counter_ns())
        m(x).sum().backward()
print("BEFORE", before, "ENTER", enter[0])
"""


def test_torch_blocks_under_run(tmp_path: Path) -> None:
    """A torch CPU program under ``polyprof run``, its loop in blocks (the first one
    initialises a lazy layer): 5 steps, step 0 from the first block's entry, the set-up's
    torch ops in the trace before it, and AUTO's window skips the first block."""
    pytest.importorskip("torch")
    script, out = tmp_path / "torch_blocks.py", tmp_path / "torch_blocks.polyprof"
    script.write_text(_TORCH)
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(script)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    words = r.stdout.split()
    before, enter = int(words[words.index("BEFORE") + 1]), int(words[words.index("ENTER") + 1])
    tr = polyprof.load(out)
    start, end = _steps(tr)
    assert len(start) == 5 and np.all(start[1:] == end[:-1])
    assert before <= start[0] <= enter
    names = tr.names()
    randn = np.flatnonzero(names == "aten::randn")
    assert len(randn) and np.all(tr.end_ns[randn] <= start[0])  # the set-up's ops: kept, in no step
    assert select(tr, "auto").index.tolist() == [1, 2, 3, 4]
