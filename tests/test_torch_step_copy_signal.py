"""A torch step loop ended by SIGTERM (audit: 2 of 10 runs): the summary analysed one
2-4 ms step, torch's ``ProfilerStep#N`` of the step that was starting when the signal
came, instead of the thousands of ``polyprof.step()`` steps.

Two parts, each tested here with a real torch program under ``polyprof run``:

- the torch plugin notes its copy of a step before torch opens it, so a signal between
  the two no longer leaves the copy in the trace (plugins/torch/plugin.py ``_on_step``;
  the stop completes the note). The program makes the signal come at that moment: it
  wraps the plugin's torch range opener so that SIGTERM is raised right after torch
  opened the copy, the one point the audit's runs hit by chance;
- ``find_steps`` leaves out the ``ProfilerStep#N`` ranges that lie outside the span of
  polyprof's own steps (derive/steps.py ``_covered``), so one such range (here one the
  program opens itself after its loop, named as torch's step copies are) no longer
  replaces the Steps line. Kineto traces, which have no polyprof steps, are unchanged.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import polyprof  # noqa: E402
from polyprof.derive.steps import find_steps  # noqa: E402

PROGRAM = """
import signal, sys, torch, polyprof
from polyprof.plugins.torch import plugin as tp
m = torch.nn.Linear(8, 8); x = torch.randn(2, 8)
for i in range(30):
    if i == 20 and sys.argv[1] == "signal":
        r = tp.active_plugin()._ranges
        enter = r.enter
        def late(name):  # SIGTERM right after torch opened the copy of step 21
            h = enter(name)
            signal.raise_signal(signal.SIGTERM)
            return h
        r.enter = late
    with polyprof.step():
        m(x)
if sys.argv[1] == "annotation":  # a range after the loop, named as torch's step copies are
    with torch.autograd.profiler.record_function("ProfilerStep#30"):
        m(x)
print("done")
"""


def _run(tmp_path: Path, mode: str) -> polyprof.Trace:
    script = tmp_path / "loop.py"
    script.write_text(PROGRAM)
    out = tmp_path / f"{mode}.polyprof"
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(script), mode],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == (-15 if mode == "signal" else 0), p.stderr[-3000:]
    return polyprof.load(out)


def _profiler_steps(tr: polyprof.Trace) -> list[str]:
    names = tr.names().astype(str)
    return sorted(names[np.char.startswith(names, "ProfilerStep#")].tolist())


def test_sigterm_as_a_step_opens_its_torch_copy(tmp_path: Path) -> None:
    tr = _run(tmp_path, "signal")
    assert _profiler_steps(tr) == []  # before: ['ProfilerStep#21'], 4 ms from the signal to the stop
    s = find_steps(tr)
    assert s.source == "polyprof" and s.number.tolist() == list(range(21))
    assert (tr.names() == "aten::linear").sum() >= 20


def test_a_lone_profiler_step_after_the_steps_line_is_not_the_steps(tmp_path: Path) -> None:
    tr = _run(tmp_path, "annotation")
    assert _profiler_steps(tr) == ["ProfilerStep#30"]  # the program's own range stays in the trace
    s = find_steps(tr)
    assert s.source == "polyprof" and len(s) == 30  # before: "ProfilerStep", 1 step (30)
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path / "annotation.polyprof")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "(step events)" in p.stdout and "1 step (ProfilerStep)" not in p.stdout, p.stdout[:2000]
