"""`polyprof run` against a program that closes or reuses its stdout and stderr.

Each case runs the program under plain python and under `polyprof run` (real
subprocesses, bounded): the exit code and what the program wrote are python's, the trace
is written (no `.partial` left), and polyprof's own lines reach the stderr polyprof was
started with, never a file the program opened at fd 1 or 2 (cli/own_output.py).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import polyprof
from polyprof import logs
from polyprof.cli.run import run_script

TIMEOUT = 120


def _python(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script)], capture_output=True, timeout=TIMEOUT, cwd=script.parent)


def _polyprof(script: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "host", *extra, "-o", "t.polyprof",
                           str(script)], capture_output=True, timeout=TIMEOUT, cwd=script.parent)


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(text)
    return path


def _written(tmp_path: Path) -> None:
    """The trace is whole at t.polyprof, and no crash journal is left beside it."""
    assert polyprof.load(tmp_path / "t.polyprof").metadata["plugins"]["host"] == "ok"
    assert not list(tmp_path.glob("t.polyprof.partial*"))


def test_sys_exit_message_with_stderr_closed(tmp_path):
    # before: polyprof's print of the message raised ValueError; exit 1, "lost sys.stderr",
    # only t.polyprof.partial
    script = _script(tmp_path, "import sys\nsys.stderr.close()\nsys.exit('bye')\n")
    py, pp = _python(script), _polyprof(script, "--no-summary")
    assert (py.returncode, py.stderr) == (1, b"\n")  # python: only its newline, on fd 2
    # the same; polyprof's lines are lost with the stream the program closed (docs/reliability.md)
    assert (pp.returncode, pp.stderr) == (1, b"\n")
    _written(tmp_path)


def test_sys_exit_object_whose_str_raises(tmp_path):
    # before: "polyprof: error: internal error (RuntimeError: boom)", exit 1, only the .partial
    script = _script(tmp_path, "import sys\nclass E:\n    def __str__(self): raise RuntimeError('boom')\n"
                               "sys.exit(E())\n")
    py, pp = _python(script), _polyprof(script, "--no-summary")
    assert (py.returncode, py.stderr) == (1, b"\n")
    assert pp.returncode == 1 and b"internal error" not in pp.stderr and b"boom" not in pp.stderr
    assert pp.stderr.startswith(b"\npolyprof: trace written to t.polyprof"), pp.stderr
    _written(tmp_path)


def test_sys_exit_message_with_stderr_none(tmp_path):
    # python writes the message to fd 2 when sys.stderr is None; polyprof's print() put it on stdout
    script = _script(tmp_path, "import sys\nsys.stderr = None\nsys.exit('bye')\n")
    py, pp = _python(script), _polyprof(script, "--no-summary")
    assert (py.returncode, py.stdout, py.stderr) == (1, b"", b"bye\n")
    assert (pp.returncode, pp.stdout) == (1, b"")
    assert pp.stderr.startswith(b"bye\npolyprof: trace written to t.polyprof"), pp.stderr
    _written(tmp_path)


def test_uncaught_exception_with_stderr_closed(tmp_path):
    # before: the traceback's print raised out of run_script: only the .partial was left
    script = _script(tmp_path, "import sys\nsys.stderr.close()\nraise ValueError('x')\n")
    py, pp = _python(script), _polyprof(script, "--no-summary")
    assert py.returncode == pp.returncode == 1
    assert py.stderr.endswith(b"lost sys.stderr\n") and pp.stderr == b"lost sys.stderr\n"
    _written(tmp_path)


def test_program_that_closes_fd_1_and_2_keeps_its_exit_code(tmp_path):
    # before: write(2, "polyprof: trace written...") failed with EBADF: exit 1 instead of 3
    script = _script(tmp_path, "import os, sys\nprint('hi', flush=True)\nos.closerange(0, 3)\nsys.exit(3)\n")
    py, pp = _python(script), _polyprof(script)
    assert py.returncode == pp.returncode == 3
    assert py.stdout == b"hi\n" and pp.stdout.startswith(b"hi\n")
    # polyprof's lines still reach the caller: the summary on stdout, where the trace went on stderr
    assert b"Counters" in pp.stdout or b"process.threads" in pp.stdout, pp.stdout
    assert b"polyprof: trace written to t.polyprof (0 events)" in pp.stderr
    assert b"Bad file descriptor" not in pp.stderr
    _written(tmp_path)


def test_polyprof_lines_never_go_to_a_file_the_program_opened_at_fd_2(tmp_path):
    # before: "polyprof: trace written ..." and its note were written into prog.log
    script = _script(tmp_path, "import os\nos.close(2)\nLOG = open('prog.log', 'w')\n"
                               "assert LOG.fileno() == 2\nLOG.write('program line\\n'); LOG.flush()\n")
    assert _python(script).returncode == 0
    assert (tmp_path / "prog.log").read_bytes() == b"program line\n"
    pp = _polyprof(script, "--no-summary")
    assert pp.returncode == 0, pp.stderr
    assert (tmp_path / "prog.log").read_bytes() == b"program line\n"
    assert b"polyprof: trace written to t.polyprof" in pp.stderr
    _written(tmp_path)


def test_program_that_closes_every_descriptor_above_2_and_opens_files(tmp_path):
    """polyprof's copies of fd 1 and 2 are closed by ``os.closerange(3, ...)`` and their
    numbers taken by the program's files: polyprof writes to fd 1 and 2 then (still the
    same files), and nothing into the program's files."""
    script = _script(tmp_path, "import os\nos.closerange(3, 4096)\n"
                               "fs = [open(f'f{i}.txt', 'w') for i in range(150)]\n"
                               "print('last fd', fs[-1].fileno())\n")
    pp = _polyprof(script)
    assert pp.returncode == 0, pp.stderr
    assert int(pp.stdout.split(b"\n", 1)[0].split()[-1]) > 100  # the program's files took the copies' numbers
    assert b"process.threads" in pp.stdout  # the summary
    assert b"polyprof: trace written to t.polyprof" in pp.stderr
    assert all(f.stat().st_size == 0 for f in tmp_path.glob("f*.txt"))
    _written(tmp_path)


def test_a_forked_daemon_does_not_hold_the_callers_pipe(tmp_path):
    """The copies are close-on-exec and closed in a forked child: a daemon the program
    forks (closing its own fd 0-2) leaves the caller's pipes, so the caller reads to their
    end when polyprof exits, not when the daemon does."""
    script = _script(tmp_path, "import os, time\nif os.fork() == 0:\n"
                               "    open('daemon.pid', 'w').write(str(os.getpid()))\n"
                               "    os.closerange(0, 3)\n    time.sleep(30)\n    os._exit(0)\n"
                               "print('parent done')\n")
    start = time.monotonic()
    try:
        pp = _polyprof(script, "--no-summary")
        took = time.monotonic() - start
    finally:
        pid = tmp_path / "daemon.pid"
        if pid.exists():
            try:
                os.kill(int(pid.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert pp.returncode == 0 and pp.stdout == b"parent done\n", pp.stderr
    assert took < 25
    assert b"polyprof: trace written to t.polyprof" in pp.stderr


def test_polyprof_log_lines_go_to_its_own_stderr():
    """While ``logs.own_stderr`` holds (polyprof run), polyprof's log handler writes there,
    not to the program's ``sys.stderr``."""
    handler, mine, programs = logs.StderrHandler(), io.StringIO(), io.StringIO()
    saved = sys.stderr
    sys.stderr = programs
    try:
        assert handler.stream is programs
        with logs.own_stderr(mine):
            assert handler.stream is mine
        assert handler.stream is programs
    finally:
        sys.stderr = saved


@pytest.mark.parametrize("closed", ["close", "none"])
def test_run_script_never_raises(closed, tmp_path, monkeypatch):
    """run_script's own contract, in process: a message it cannot print is dropped."""
    script = _script(tmp_path, "import sys\nclass E:\n    def __str__(self): raise RuntimeError('boom')\n"
                               "sys.exit(E())\n")
    err = io.StringIO()
    if closed == "close":
        err.close()
    monkeypatch.setattr(sys, "stderr", err if closed == "close" else None)
    assert run_script(str(script), []) == 1
