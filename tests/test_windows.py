"""Long unmodified programs (issue 34): a time window (``delay``/``duration``, as nsys's
``--delay``/``--duration``) through every entry of the session's options, and steps
detected without ``polyprof.step()`` (torch's optimizer steps), so ``--schedule`` and
the window work on a training script that was not changed for polyprof."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect import options as opts
from polyprof.derive.steps import find_steps
from polyprof.errors import SessionError

SRC = Path(__file__).resolve().parents[1] / "src"

#: sections for 1.6 s, then the program ends
SECTIONS = ("import time, polyprof\n"
            "end = time.monotonic() + 1.6\n"
            "while time.monotonic() < end:\n"
            "    with polyprof.section('tick'):\n"
            "        time.sleep(0.01)\n")

#: an unmodified torch training loop: no polyprof anywhere
TRAIN = ("import sys, torch\n"
         "torch.set_num_threads(1)\n"
         "torch.manual_seed(0)\n"
         "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))\n"
         "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
         "x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))\n"
         "for i in range(int(sys.argv[1])):\n"
         "    opt.zero_grad()\n"
         "    torch.nn.functional.cross_entropy(model(x), y).backward()\n"
         "    opt.step()\n"
         "print('trained')\n")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in opts.NAMES:
        monkeypatch.delenv(opts.env_name(name), raising=False)


def _check_window(t: polyprof.Trace, delay: float, duration: float) -> None:
    """Only what overlaps [start + delay, start + delay + duration] is kept."""
    w = t.metadata["schedule"]
    assert (w["delay_s"], w["duration_s"]) == (delay, duration)
    lo, hi = w["windows_ns"][0]
    assert hi - lo == int(duration * 1e9)
    ev = t.events
    ticks = t.names() == "tick"
    s, e = ev["start_ns"][ticks], ev["start_ns"][ticks] + ev["dur_ns"][ticks]
    assert len(s) and (e > lo).all() and (s < hi).all()
    # 10 ms ticks over the window: about duration / 10 ms of them (fewer on a loaded machine)
    assert 3 <= len(s) <= duration / 0.01 + 2


def _run(tmp_path: Path, script: str, args: list[str], env: dict[str, str] | None = None,
         argv: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    path = tmp_path / "prog.py"
    path.write_text(script)
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", *args,
                        str(path), *argv], capture_output=True, text=True, env=full, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_window_through_the_context_manager():
    with polyprof.profile(["host"], delay=0.4, duration=0.8) as s:
        exec(SECTIONS, {})
    _check_window(s.trace, 0.4, 0.8)


def test_window_through_the_decorator():
    @polyprof.profile(["host"], delay=0.4, duration=0.8)
    def work() -> None:
        exec(SECTIONS, {})

    work()
    _check_window(work.trace, 0.4, 0.8)


def test_window_through_run_flags_and_the_environment(tmp_path):
    _run(tmp_path, SECTIONS, ["--delay", "0.4", "--duration", "0.8", "-o", "f.polyprof"])
    _check_window(polyprof.load(tmp_path / "f.polyprof"), 0.4, 0.8)
    _run(tmp_path, SECTIONS, ["-o", "e.polyprof"], {"POLYPROF_DELAY": "0.4", "POLYPROF_DURATION": "0.8"})
    _check_window(polyprof.load(tmp_path / "e.polyprof"), 0.4, 0.8)


def test_window_options_are_checked():
    with pytest.raises(SessionError, match="give one of them"):
        polyprof.profile(schedule="active=2", duration=1)
    with pytest.raises(SessionError, match="duration=0.0: expected a number of seconds above 0"):
        polyprof.profile(duration=0.0)
    with pytest.raises(SessionError, match="delay=-1"):
        polyprof.profile(delay=-1)
    with pytest.raises(SessionError, match=r"\$POLYPROF_DURATION='soon'"):
        opts.make({"POLYPROF_DURATION": "soon"})


def test_a_window_that_never_opens_says_so():
    with polyprof.profile(["host"], delay=30) as s:
        with polyprof.section("early"):
            pass
    assert "early" not in set(s.trace.names())
    assert any("recorded nothing" in w["message"] for w in s.trace.metadata["warnings"])


def test_torch_follows_the_window_at_step_boundaries():
    """torch records only in the window (paused and resumed on the program's thread, at
    the optimizer steps detected without polyprof.step())."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    m = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with polyprof.profile(["host", "torch"], delay=0.5, duration=1.0) as s:
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            with polyprof.section("tick"):
                m(torch.randn(2, 4)).sum().backward()
                opt.step()
            time.sleep(0.01)
    t = s.trace
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    ops = np.flatnonzero(t.names() == "aten::addmm")
    assert len(ops) > 3
    st = t.events["start_ns"][ops]
    assert (st >= lo).all() and (st < hi + 200_000_000).all()  # within the window (and one step past it)
    steps = find_steps(t)
    assert len(steps) > 3 and steps.number[0] > 0  # detected steps, numbered from the program's start


def test_unmodified_torch_script_follows_a_schedule(tmp_path):
    """No polyprof.step() in the script: steps are its optimizer's step() calls; 1,000 steps
    and the schedule of the issue, one cycle (polyprof's default repeat=1)."""
    pytest.importorskip("torch")
    r = _run(tmp_path, TRAIN, ["--plugins", "host,torch", "--schedule", "wait=1,warmup=1,active=3", "-o",
                               "s.polyprof"], argv=("1000",))
    assert "trained" in r.stdout
    t = polyprof.load(tmp_path / "s.polyprof")
    assert t.metadata["schedule"]["recorded_steps"] == [2, 3, 4]
    names = t.names()
    assert 3 <= int((names == "aten::addmm").sum()) // 2 <= 4  # two linears per step, 3 steps (+ a boundary)


def test_explicit_steps_win_and_a_second_optimizer_is_not_counted():
    torch = pytest.importorskip("torch")
    from polyprof.collect.recorder import active_recorder

    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    with polyprof.profile(["host", "torch"]) as s:
        for _ in range(4):
            (a(torch.ones(1, 2)).sum() + b(torch.ones(1, 2)).sum()).backward()
            oa.step()
            ob.step()  # the same step's second optimizer
        rec = active_recorder()
        assert len(rec.auto_steps) == 4 and rec.steps == []
    assert len(find_steps(s.trace)) == 4  # detected steps are the trace's steps
    with polyprof.profile(["host", "torch"]) as s:
        for _ in range(3):
            a(torch.ones(1, 2)).sum().backward()
            oa.step()  # detected first...
            polyprof.step()  # ...but the program counts its own steps: those are kept
        rec = active_recorder()
        assert len(rec.steps) == 3 and len(rec.auto_steps) == 1
    assert find_steps(s.trace).number.tolist() == [0, 1, 2]  # from the 3 explicit calls


MANY = ("import polyprof\n"
        "for i in range(30_000):\n"
        "    with polyprof.section(f's{i}'):\n"
        "        pass\n")


def _check_capped(t: polyprof.Trace, n: int) -> None:
    names = t.names()
    kept = [int(x[1:]) for x in names[np.char.startswith(names.astype(str), "s")]]
    # exactly n, the newest (trimmed in chunks while recording, to n at the end: it kept up to n + n/8)
    assert len(kept) == n and max(kept) == 29_999 and min(kept) == 30_000 - n
    assert any(f"oldest sections were dropped to keep {n:,}" in str(w) for w in t.metadata["warnings"])


def test_max_events_keeps_the_newest_sections_through_every_entry(tmp_path, monkeypatch):
    with polyprof.profile(["host"], max_host_events=5000) as s:
        exec(MANY, {})
    _check_capped(s.trace, 5000)

    @polyprof.profile(["host"], max_host_events=5000)
    def work() -> None:
        exec(MANY, {})

    work()
    _check_capped(work.trace, 5000)
    _run(tmp_path, MANY, ["--max-events", "5000", "-o", "f.polyprof"])
    _check_capped(polyprof.load(tmp_path / "f.polyprof"), 5000)
    _run(tmp_path, MANY, ["-o", "e.polyprof"], {"POLYPROF_MAX_HOST_EVENTS": "5000"})
    _check_capped(polyprof.load(tmp_path / "e.polyprof"), 5000)
    with pytest.raises(SessionError, match="max_host_events=0"):
        polyprof.profile(max_host_events=0)
