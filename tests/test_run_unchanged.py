"""``polyprof run`` (and ``--serve``) against plain ``python``: what the program sees of
polyprof's own signal handlers, its recursion depth, its standard streams (docs/capture.md,
cli/run.py). Each test runs both and compares."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
HAS_GRPC = importlib.util.find_spec("grpc") is not None


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _both(tmp_path: Path, code: str, *polyprof_args: str, args: tuple[str, ...] = ()
          ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    script = tmp_path / "prog.py"
    script.write_text(code)
    plain = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                           timeout=120)
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", *polyprof_args, str(script), *args],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    return plain, ours


_VIEW = """\
import signal
def mine(signum, frame):
    pass
print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)
print(signal.signal(signal.SIGTERM, mine) is signal.SIG_DFL, signal.getsignal(signal.SIGTERM) is mine)
print(signal.signal(signal.SIGTERM, signal.SIG_DFL) is mine)
"""


@pytest.mark.parametrize("mode", ["run", "serve"])
def test_the_program_sees_its_signal_handlers_as_under_python(tmp_path, mode):
    """polyprof's unwinding handler for SIGTERM/SIGHUP/SIGUSR1/2 was what
    ``signal.getsignal`` answered (and ``signal.signal`` returned), so a program (or a
    library such as Lightning) that sets its handler only where none is set, or calls
    the one it found, behaved otherwise than under python."""
    if mode == "serve" and not HAS_GRPC:
        pytest.skip("polyprof[serve] (grpcio) is not installed")
    extra = ("--serve", "127.0.0.1:0") if mode == "serve" else ("--no-summary", "-o", "v.polyprof")
    plain, ours = _both(tmp_path, _VIEW, *extra)
    # (SIGHUP is SIG_IGN, not SIG_DFL, where the tests run under nohup: the program's view
    # is then that, under python and under polyprof alike)
    assert plain.stdout.startswith("True ") and plain.stdout.endswith("\nTrue True\nTrue\n"), plain.stderr
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr


_SWALLOWS = """\
import time
said = False
while True:
    try:  # a loop that survives anything (the inner loop's jump back is inside this try)
        while True:
            try:
                if not said:  # from inside the loop: no signal can find the program outside it
                    said = print("ready", flush=True) or True
                time.sleep(0.05)
            except BaseException:
                pass
    except BaseException:
        pass
"""


def test_a_program_that_swallows_the_unwinding_is_ended_by_the_next_sigterm(tmp_path):
    """The first SIGTERM unwinds the program (SystemExit) so the trace is written; a
    program that catches every exception swallowed it, and polyprof's handler swallowed
    every later SIGTERM too: under polyprof the program could not be stopped by SIGTERM
    at all. The second one now acts as python's default (status -15)."""
    script = tmp_path / "swallow.py"
    script.write_text(_SWALLOWS)
    p = subprocess.Popen([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "s.polyprof", str(script)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env())
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        p.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert p.poll() is None  # swallowed, as the program wrote
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


_DEPTH = """\
import sys
if len(sys.argv) > 1:
    sys.setrecursionlimit(int(sys.argv[1]))
def f(n):
    try:
        return f(n + 1)
    except RecursionError:
        return n
print(f(0), sys.getrecursionlimit())
"""


@pytest.mark.parametrize("limit", [None, 40, 5000])
def test_the_program_recurses_as_deep_as_under_python(tmp_path, limit):
    """The frames of ``polyprof run`` beneath the script (the command's, runpy's) counted
    toward the recursion limit: the program hit RecursionError 12 calls sooner than under
    python (15 under ``python -m polyprof``). The script now runs at the depth python
    gives it, and reads the same limit."""
    args = () if limit is None else (str(limit),)
    plain, ours = _both(tmp_path, _DEPTH, "--no-summary", "-o", "d.polyprof", args=args)
    assert plain.returncode == 0 and int(plain.stdout.split()[0]) > 30, plain.stderr
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr


def test_without_the_compiled_module_the_depth_is_the_same_too(tmp_path, monkeypatch):
    """Without ``lowlevel._unseen`` (POLYPROF_PURE_PYTHON=1) the limit is raised by the
    frames beneath while the script runs: the same depth, a higher limit read."""
    monkeypatch.setenv("POLYPROF_PURE_PYTHON", "1")
    plain, ours = _both(tmp_path, _DEPTH, "--no-summary", "-o", "d.polyprof")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.split()[0] == plain.stdout.split()[0]
    assert int(ours.stdout.split()[1]) > int(plain.stdout.split()[1])


def test_a_program_that_closes_stdout_keeps_its_exit_code(tmp_path):
    """``sys.stdout.close()`` in the program: polyprof's flush after the script raised
    ValueError and ``polyprof run`` ended with 1 and an internal error, where python
    exits 0. The trace is written and said on stderr."""
    plain, ours = _both(tmp_path, "import sys\nprint('before')\nsys.stdout.close()\n", "-o", "c.polyprof")
    assert plain.returncode == 0
    assert (ours.returncode, ours.stdout) == (0, "before\n"), ours.stderr
    assert "internal error" not in ours.stderr and "trace written to c.polyprof" in ours.stderr
    assert (tmp_path / "c.polyprof").is_file()


_LOGS = """\
import atexit, sys
sys.stdout = sys.stderr = open("prog.log", "w")
print("into the log")
atexit.register(lambda: print("atexit into the log"))
"""


def test_a_program_that_sets_its_own_streams_keeps_its_files_as_under_python(tmp_path):
    """A program that sets ``sys.stdout``/``sys.stderr`` to a log file of its own found
    polyprof's summary and ``trace written`` line in that file. They go to the streams
    polyprof started with; the program's ``atexit`` output still goes to its file."""
    plain, _ = _both(tmp_path, _LOGS)
    log = (tmp_path / "prog.log").read_text()
    assert log == "into the log\natexit into the log\n"
    (tmp_path / "prog.log").unlink()
    _, ours = _both(tmp_path, _LOGS, "-o", "l.polyprof")
    assert ours.returncode == 0 and (tmp_path / "prog.log").read_text() == log
    assert "trace written to l.polyprof" in ours.stderr and "polyprof summary" in ours.stdout


def test_run_takes_peak_for_its_summary_without_telling_the_program(tmp_path):
    """The summary's MFU line asks for ``--peak`` where no peak is known; ``run`` took no
    such option. It is checked before the program runs and handed to the analyses after
    it: the program's environment has no POLYPROF_PEAK."""
    script = tmp_path / "env.py"
    script.write_text("import os\nopen('ran', 'w').write(os.environ.get('POLYPROF_PEAK', 'none'))\n")
    base = [sys.executable, "-m", "polyprof", "run", "-o", str(tmp_path / "t.polyprof")]
    bad = subprocess.run([*base, "--peak", "fp32=fast", str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert bad.returncode != 0 and "--peak" in bad.stderr and not (tmp_path / "ran").exists()
    ok = subprocess.run([*base, "--peak", "fp32=1e12", str(script)], capture_output=True, text=True,
                        cwd=tmp_path, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ran").read_text() == "none"


@pytest.mark.parametrize("pure", ["0", "1"])
def test_the_script_sees_the_builtins_module(tmp_path, monkeypatch, pure):
    """python's ``__main__`` holds the builtins module as ``__builtins__``; under polyprof
    run it was its dict (runpy's exec put it there), so ``__builtins__.name = ...`` raised
    AttributeError (an auditor). With and without the compiled module."""
    monkeypatch.setenv("POLYPROF_PURE_PYTHON", pure)
    code = "print(type(__builtins__).__name__)\n__builtins__.mine = 7\nprint(mine)\n"
    plain, ours = _both(tmp_path, code, "--no-summary", "-o", "b.polyprof")
    assert plain.stdout == "module\n7\n" and ours.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout
