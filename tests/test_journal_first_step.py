"""A killed run's crash journal says where step 0 begins (collect/journal.py, a
FIRST_STEP record, formats/journal_layout.py), so its ``.partial`` read back has the
steps the finished trace would: step 0 from the first ``with polyprof.step():`` block's
entry, or, for steps detected in an unmodified torch program, from where the first
step's work began (collect/steps.py ``first_start``). Before, the journal kept the
boundaries only and a trace read back from it began step 0 at the session's start: the
set-up (imports, a model) counted as the first step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.derive.steps import find_steps

SRC = Path(__file__).resolve().parents[1] / "src"

#: 0.4 s of set-up, then blocks of 20 ms; inside the fourth, after a journal flush
#: (every 0.5 s), the program kills itself by SIGKILL
BLOCKS = """\
import json, os, signal, sys, time
import polyprof

time.sleep(0.4)  # set-up: no step
times = {"before": time.perf_counter_ns(), "entered": []}
for i in range(6):
    with polyprof.step():
        times["entered"].append(time.perf_counter_ns())
        time.sleep(0.02)
        if i == 3:
            print("TIMES", json.dumps(times), flush=True)
            time.sleep(1.2)
            os.kill(os.getpid(), signal.SIGKILL)
"""

#: an unmodified torch loop (steps detected at the optimizer's step()), killed in its
#: fourth iteration after a journal flush
TORCH = """\
import json, os, signal, time
import torch
torch.set_num_threads(1)
time.sleep(0.4)  # reading data, building the model
m = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
loop, ends = time.perf_counter_ns(), []
for i in range(6):
    m(torch.randn(4, 8)).sum().backward()
    if i == 3:
        print("TIMES", json.dumps({"loop": loop, "ends": ends}), flush=True)
        time.sleep(1.2)
        os.kill(os.getpid(), signal.SIGKILL)
    opt.step()
    ends.append(time.perf_counter_ns())
"""


def _killed(tmp_path: Path, program: str, plugins: str) -> tuple[polyprof.Trace, dict]:
    (tmp_path / "prog.py").write_text(program)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", plugins, "-o",
                        "p.polyprof", "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "TIMES" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    partial = tmp_path / "p.polyprof.partial"
    assert partial.exists() and not (tmp_path / "p.polyprof").exists()
    return polyprof.load(partial), json.loads(r.stdout.split("TIMES", 1)[1])


def test_a_killed_run_of_blocks_begins_step_0_at_the_first_block(tmp_path: Path) -> None:
    """Blocks, killed in the fourth: steps 0-2 whole (the fourth's block never ended),
    step 0 from the first block's entry, not the session's start 0.4 s before."""
    t, own = _killed(tmp_path, BLOCKS, "host")
    steps = find_steps(t)
    entered = own["entered"]
    assert steps.number.tolist()[:3] == [0, 1, 2], steps.number
    assert own["before"] <= steps.start[0] <= entered[0], (steps.start[0], own["before"], entered[0])
    assert np.all(np.abs(steps.start[1:3] - np.asarray(entered[1:3])) < 5_000_000)  # each block's entry
    session = t.metadata["session"]["start_ns"]
    assert steps.start[0] - session > 300_000_000  # the set-up is in no step


def test_a_killed_torch_run_begins_detected_step_0_where_its_work_began(tmp_path: Path) -> None:
    """Steps detected at the optimizer's ``step()``: step 0 from the first ``nn.Module``
    call (after ``import torch`` and the set-up), as in the finished trace."""
    pytest.importorskip("torch")
    t, own = _killed(tmp_path, TORCH, "host,torch")
    steps = find_steps(t)
    assert steps.number.tolist()[:3] == [0, 1, 2], steps.number
    assert own["loop"] <= steps.start[0] <= own["ends"][0], (steps.start[0], own)
