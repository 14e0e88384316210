"""A ``polyprof.section`` on the critical path (``analyze/depgraph.py``: a section's time in
no op weighs what of it no other thread's op nor device work covers), on a real torch CPU
program recorded here under ``polyprof run``.

Before, the graph took host ops and runtime calls alone (HTA's rule): a step of
``with polyprof.section("load"): time.sleep(0.01)`` then a few small matmuls read
"critical path 1.31 ms of the step's 12 ms", the 10 ms section nowhere in the table.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path, step_windows

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

#: steps 0-4: the step's time in a section, in no op, nothing else running; steps 5-9: a
#: section the thread spends waiting for another thread's ops (a join)
PROGRAM = r"""
import threading, time
import torch
import polyprof

x = torch.randn(64, 64)


def work():
    y = x
    for _ in range(200):
        y = torch.tanh(y @ x)


for i in range(10):
    if i < 5:
        with polyprof.section("load"):
            time.sleep(0.01)
    else:
        with polyprof.section("wait"):
            t = threading.Thread(target=work)
            t.start()
            t.join()
    y = x
    for _ in range(4):
        y = torch.tanh(y @ x)
    polyprof.step()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sections")
    (tmp / "prog.py").write_text(PROGRAM)
    out = tmp / "out.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(tmp / "prog.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def _union_in(spans: list[tuple[int, int]], lo: int, hi: int) -> int:
    """The time of ``[lo, hi]`` that ``spans`` cover."""
    busy, cur = 0, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi):
        if cur is None or a > cur[1]:
            busy += 0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return busy + (0 if cur is None else cur[1] - cur[0])


def test_a_section_that_holds_the_step_is_on_the_path(recorded: Path) -> None:
    """Steps 1-4 (step 0 holds the program's start): the ``load`` section is on the path
    with all its time (10 ms or more), and the path is 90% of the step or more (before:
    the matmuls alone)."""
    trace = polyprof.load(recorded)
    cp = critical_path(trace)
    number, lo, hi = step_windows(trace)
    for k in range(1, 5):
        m = cp[cp["step"] == k]
        i = np.flatnonzero(np.asarray(m["name"]) == "load")
        assert len(i) == 1, k
        on, dur = int(m["on_path_ns"][i[0]]), int(m["dur_ns"][i[0]])
        assert on == dur >= 10_000_000 and m["kind"][i[0]] == "annotation", k
        step_ns = int(hi[number == k][0] - lo[number == k][0])
        assert int(m["path_ns"][0]) >= 0.9 * step_ns, k


def test_a_section_waiting_for_another_threads_ops_gives_them_the_time(recorded: Path) -> None:
    """Steps 5-9: the ``wait`` section's thread joins a worker thread running matmuls. The
    section has on the path at most its time that the worker does not cover (from its
    first op in it to its last: the thread's start and exit), so the time is not counted
    twice, and where the worker's ops outweigh the main thread's ops and that time, the
    path runs through them (the main thread's own matmuls after the join can be the
    longer on a loaded machine: then the path is theirs)."""
    trace = polyprof.load(recorded)
    cp = critical_path(trace)
    through = 0
    for k in range(5, 10):
        m = cp[cp["step"] == k]
        name, track, dur = np.asarray(m["name"]), np.asarray(m["track"]), np.asarray(m["dur_ns"], np.int64)
        i = np.flatnonzero(name == "wait")[0]
        s, d = int(m["start_ns"][i]), int(dur[i])
        worker = track != "MainThread"
        first = int(np.asarray(m["start_ns"])[worker].min())
        last = int((np.asarray(m["start_ns"]) + dur)[worker].max())
        idle = d - (min(last, s + d) - max(first, s))
        assert 0 < idle < 0.5 * d, k
        assert int(m["on_path_ns"][i]) <= idle, k
        top = np.isin(name, ["aten::matmul", "aten::tanh"])  # (each step's top-level ops)
        if int(dur[top & worker].sum()) > int(dur[top & ~worker].sum()) + idle:
            assert int(m["on_path_ns"][worker].sum()) > 0.9 * int(dur[top & worker].sum()), k
            through += 1
        assert int(m["path_ns"][0]) <= int(m["span_ns"][0]), k
    assert through >= 2
