"""``polyprof run`` ends a script as python does (collect/script_end.py): the program's
non-daemon threads are waited for while the session still records, so their work is in
the trace; the output, its order and the exit code are plain python's (the atexit
callbacks run at the real exit, after the session: libraries tear their runtimes down
there). Each program is run both ways and compared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"

#: work left after the script's last line: a non-daemon thread and an atexit callback
TAIL = """\
import atexit, os, signal, sys, threading, time
import polyprof
def worker():
    for i in range(3):
        with polyprof.section("thread_work"):
            time.sleep(0.03)
    print("worker done", flush=True)
def at_exit():
    with polyprof.section("atexit_work"):
        time.sleep(0.03)
    print("atexit done", flush=True)
atexit.register(at_exit)
threading.Thread(target=worker).start()
print("main returns", flush=True)
"""


def _run(tmp_path: Path, code: str, ours: bool) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-o", "t.polyprof"] \
        if ours else [sys.executable]
    return subprocess.run([*cmd, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def _sections(tmp_path: Path) -> list[str]:
    return sorted(n for n in polyprof.load(tmp_path / "t.polyprof").names() if n.endswith("_work"))


@pytest.mark.parametrize("end, code", [
    ("", 0),
    ("sys.exit(3)", 3),
    ("raise ValueError('at the end')", 1),
])
def test_threads_work_is_recorded_and_output_in_pythons_order(tmp_path: Path, end: str, code: int) -> None:
    program = TAIL + end + "\n"
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == code
    assert plain.stdout == ours.stdout == "main returns\nworker done\natexit done\n"
    assert ("ValueError: at the end" in ours.stderr) == ("ValueError: at the end" in plain.stderr) == (code == 1)
    assert _sections(tmp_path) == ["thread_work"] * 3  # they were lost: the session had stopped
    assert "trace written to t.polyprof" in ours.stderr


@pytest.mark.parametrize("signame, code", [("SIGINT", 0), ("SIGTERM", -15)])
def test_a_signal_during_the_wait_ends_it_as_in_python(tmp_path: Path, signame: str, code: int) -> None:
    """Ctrl-C while python waits for the threads ends the wait (python says so and runs
    the callbacks; exit code 0); SIGTERM kills it, no callback run. The trace is written."""
    program = (TAIL.replace("range(3)", "range(100)")
               + f"threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.{signame})).start()\n")
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)
    assert plain.returncode == ours.returncode == code
    assert plain.stdout == ours.stdout == "main returns\n" + ("atexit done\n" if signame == "SIGINT" else "")
    if signame == "SIGINT":
        assert "KeyboardInterrupt" in plain.stderr and "KeyboardInterrupt" in ours.stderr
    assert 1 <= _sections(tmp_path).count("thread_work") < 100


def test_threads_alive_before_the_script_are_not_waited_for(tmp_path: Path) -> None:
    """``polyprof.cli.main(["run", ...])`` inside another program (a test runner) waits
    for the script's threads only, not for the caller's own non-daemon threads."""
    import threading

    from polyprof.cli import main

    release = threading.Event()
    callers = threading.Thread(target=release.wait, args=(20,), name="the caller's")  # non-daemon
    callers.start()
    script = tmp_path / "prog.py"
    script.write_text(TAIL.replace("atexit.register(at_exit)\n", ""))
    try:
        assert main(["run", "--no-summary", "--plugins", "host", "-o", str(tmp_path / "t.polyprof"), str(script)]) == 0
        assert callers.is_alive()  # run returned without waiting for it (it would have ended after 20 s)
    finally:
        release.set()
        callers.join()
    assert _sections(tmp_path) == ["thread_work"] * 3


@pytest.mark.parametrize("executor", ["ThreadPoolExecutor(2)", "ProcessPoolExecutor(1)"])
def test_an_executor_never_shut_down_does_not_hold_the_run(tmp_path: Path, executor: str) -> None:
    """An executor the program keeps and never shuts down leaves idle non-daemon threads
    (workers, a process pool's manager) that python's own exit hook ends: polyprof run
    must not wait for them (it hung: they wait for work for ever)."""
    program = ("import sys\nfrom concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor\n"
               f"if __name__ == '__main__':\n    sys.kept = {executor}\n"
               "    print(sys.kept.submit(abs, -42).result(), flush=True)\n")
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)  # a hang: TimeoutExpired
    assert plain.returncode == ours.returncode == 0 and plain.stdout == ours.stdout == "42\n"


def test_a_thread_an_exit_hook_stops_does_not_hold_the_run(tmp_path: Path) -> None:
    """A library's non-daemon thread stopped by its own ``threading._register_atexit``
    hook (a bound method of the object holding it, as anyio's socket selector): python
    ends it at exit, polyprof run must not wait for it."""
    program = """\
import threading
class Selector:
    def __init__(self):
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._stopped.wait)
        self._thread.start()
        threading._register_atexit(self._stop)
    def _stop(self):
        self._stopped.set()
        self._thread.join()
sel = Selector()
print("started", flush=True)
"""
    plain, ours = _run(tmp_path, program, False), _run(tmp_path, program, True)  # a hang: TimeoutExpired
    assert plain.returncode == ours.returncode == 0 and plain.stdout == ours.stdout == "started\n"
