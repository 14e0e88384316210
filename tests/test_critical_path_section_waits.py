"""A section of the thread's own work (a sleep, Python with no ops) beside another
thread's ops is the thread's own time on the critical path, not a wait for them
(``depgraph_sections.section_waits``), on a real torch CPU program recorded under ``polyprof
run``, against the program's own timing.

Before, a section's time in no op weighed only what no other thread or device was busy,
and the other thread's ops led from and back to it: a ``load`` section sleeping 60 ms
while an unrelated thread ran 8 matmuls had ``aten::mm`` 3.19 ms on the path, and
``--what-if 0:aten::mm:0.1`` predicted "step -2.87 ms" where the program's steps last
the sleep (60.6 to 61.4 ms, with or without the matmuls: the audit's th2). A section that
joins a thread it started still waits for it (``tests/test_critical_path_sections.py``)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

#: per step: a side thread started (on odd steps only) running 2 matmuls, once it began
#: a 'load' section sleeping 60 ms meanwhile, then the join; prints per step its time
#: and how long before the end of 'load' the side thread ended (negative: after it)
PROGRAM = r"""
import json, threading, time
import torch
import polyprof

torch.set_num_threads(1)
a = torch.randn(64, 64)
began = threading.Event()
ended = [0.0]


def side():
    with polyprof.section("side"):
        began.set()
        for _ in range(2):
            a @ a
    ended[0] = time.perf_counter()


out = []
for s in range(8):
    with polyprof.step():
        t0 = time.perf_counter()
        th = threading.Thread(target=side)
        if s % 2:
            began.clear()
            th.start()
            began.wait()
        with polyprof.section("load"):
            time.sleep(0.06)
        t1 = time.perf_counter()
        if s % 2:
            th.join()
        out.append([time.perf_counter() - t0, t1 - ended[0] if s % 2 else 0.0])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    tmp = tmp_path_factory.mktemp("section_waits")
    (tmp / "prog.py").write_text(PROGRAM)
    out = tmp / "out.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(tmp / "prog.py")],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    return out, json.loads(r.stdout.strip().splitlines()[-1])


def _beside(own: Any) -> list[int]:
    """The odd steps whose side thread ended 2 ms or more before 'load' did (the program's
    own timing says the matmuls did not hold the step; on a loaded machine they may
    outlast the sleep, and then they are on the path)."""
    steps = [k for k in (1, 3, 5, 7) if own[k][1] >= 0.002]
    assert steps, own
    return steps


def test_a_sleeping_section_beside_another_threads_ops_holds_its_time(recorded: tuple[Path, Any]) -> None:
    """Odd steps (the side thread's matmuls during 'load'): 'load' is on the path with all
    its time, the matmuls off it with slack (the side thread started before 'load' and
    ran in it: nothing in the trace says that 'load' waited for it; a thread whose whole
    life lies in a section is taken for one the section started and joined)."""
    path, own = recorded
    cp = critical_path(polyprof.load(path))
    for k in _beside(own):
        m = cp[cp["step"] == k]
        name, track = np.asarray(m["name"]), np.asarray(m["track"])
        on, dur, slack = (np.asarray(m[c], np.int64) for c in ("on_path_ns", "dur_ns", "slack_ns"))
        load = np.flatnonzero(name == "load")[0]
        assert on[load] == dur[load] >= 60_000_000, k
        side = track != "MainThread"
        assert side.any(), k
        assert int(on[side].sum()) == 0 and (slack[side] > 0).all(), k


def test_a_what_if_on_the_other_threads_ops_agrees_with_the_programs_timing(recorded: tuple[Path, Any]) -> None:
    """``--what-if 0:aten::mm:0.1`` predicts no change on those steps, as the program's own
    timing says (nothing waited for the matmuls; before: -2.87 ms predicted)."""
    path, own = recorded
    for k in _beside(own):
        r = subprocess.run([sys.executable, "-m", "polyprof", "critical-path", str(path), "--json", "--step", str(k),
                            "--what-if", "0:aten::mm:0.1"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["what_if"][0]["change_ns"] == 0, k
