"""The crash journal of a run with a time window (``--delay``/``--duration``) keeps the
window (audit: a killed windowed run's ``.partial`` had the whole run's steps and no
schedule metadata, so its summary analysed every step). The header holds the window;
the recovered trace's ``schedule`` has it, with the steps wholly inside it as the
recorded steps, which the summary keeps to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"

LOOP = ("import time, polyprof\n"
        "while True:\n"
        "    with polyprof.section('work'):\n"
        "        time.sleep(0.02)\n"
        "    polyprof.step()\n")


def test_a_killed_windowed_run_journal_keeps_its_window(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}, "PYTHONPATH": str(SRC)}
    p = subprocess.Popen([sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--delay", "0.5",
                          "--duration", "0.6", "-o", "w.polyprof", "loop.py"], cwd=tmp_path, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    part = tmp_path / "w.polyprof.partial"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not part.is_file():
        time.sleep(0.05)
    time.sleep(2.5)  # past the window's end, and a journal flush after it (every 0.5 s)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    t = polyprof.load(part)
    sched = t.metadata.get("schedule")
    assert isinstance(sched, dict), t.metadata  # before: none
    (lo, hi), = sched["windows_ns"]
    assert (sched["delay_s"], sched["duration_s"]) == (0.5, 0.6) and hi - lo == 600_000_000
    from polyprof.derive.steps import find_steps

    steps = find_steps(t)
    inside = steps.number[(steps.start >= lo) & (steps.end <= hi)].tolist()
    assert len(inside) > 10 and sched["recorded_steps"] == inside and len(steps) > len(inside) + 20
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(part)], capture_output=True, text=True,
                         env={**env, "COLUMNS": "200"}, timeout=240)
    assert out.returncode == 0, out.stderr
    assert f"steps {inside[0]}-{inside[-1]} of" in out.stdout and "(the steps the schedule recorded)" in out.stdout, \
        out.stdout[:2000]
