"""A program that replaces itself (``os.execv`` and its family) or ends by ``os._exit``
under ``polyprof run`` or its own session: the exec or exit still happens as under python
(same argv, environment, descriptors, status), and the trace recorded up to it is written
first, with a line on stderr saying where (collect/exits.py). Real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"

# the new program prints what it was given: its argv, an environment variable, its open descriptors
SHOW = ("import json, os, sys; fds = sorted(int(f) for f in os.listdir('/proc/self/fd')); "
        "print(json.dumps({'argv': sys.argv, 'env': os.environ.get('EXEC_VAR'), 'fds': fds}))")

WORK = """\
import os, sys, polyprof
for i in range(3):
    with polyprof.section("work"):
        sum(range(1000))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONUNBUFFERED", None)  # the program's stdout buffered, as in a pipe by default
    return env


def _both(tmp_path: Path, code: str, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                           subprocess.CompletedProcess[str]]:
    script = tmp_path / "prog.py"
    script.write_text(code)
    plain = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                           env=_env(), timeout=120)
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host",
                           "-o", "t.polyprof", str(script), *args],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    return plain, ours


def _sections(trace: polyprof.Trace, name: str) -> int:
    return list(trace.names()).count(name)


@pytest.mark.parametrize("call", [
    "os.execv(sys.executable, [sys.executable, '-c', SHOW, 'a b'])",
    "os.execve(sys.executable, [sys.executable, '-c', SHOW, 'a b'], dict(os.environ, EXEC_VAR='given'))",
    "os.execl(sys.executable, sys.executable, '-c', SHOW, 'a b')",
    # a PATH search with a miss first
    "os.environ.update(PATH='/no/such/dir:' + os.path.dirname(sys.executable)); "
    "os.execlp(os.path.basename(sys.executable), 'py', '-c', SHOW, 'a b')",
])
def test_exec_writes_the_trace_first_and_the_new_program_gets_the_same(tmp_path, call):
    """Before: the process was replaced before the trace was written; only the crash
    journal was left, and nothing was said."""
    code = WORK + f"SHOW = {SHOW!r}\n" + "extra = open(__file__)  # an inheritable descriptor of the program's\n" \
        "os.set_inheritable(extra.fileno(), True)\nprint('before', flush=True)\n" + call + "\n"
    plain, ours = _both(tmp_path, code)
    assert plain.returncode == 0, plain.stderr
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    shown = json.loads(ours.stdout.splitlines()[1])
    assert shown["argv"] == ["-c", "a b"]
    assert len(shown["fds"]) == 5  # 0, 1, 2, the program's file, listdir's own
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert _sections(trace, "work") == 3
    assert trace.metadata["session"]["ended_by"] == f"os.{'execve' if 'execve' in call else 'execv'}({sys.executable})"
    assert any("replaces the process" in str(w) for w in trace.metadata["warnings"])
    assert not (tmp_path / "t.polyprof.partial").exists()
    line = [x for x in ours.stderr.splitlines() if x.startswith("polyprof:")]
    assert len(line) == 1 and "replaces the process: trace written to t.polyprof (3 events)" in line[0], ours.stderr


def test_os_exit_writes_the_trace_and_keeps_status_and_lost_buffers(tmp_path):
    """``os._exit`` ended the run with nothing written (the journal, empty in a short run)
    and nothing said. Buffered output the program did not flush stays lost, as under python."""
    code = WORK + "print('flushed', flush=True)\nprint('buffered, lost')\nos._exit(3)\n"
    plain, ours = _both(tmp_path, code)
    assert (plain.returncode, plain.stdout) == (3, "flushed\n")
    assert (ours.returncode, ours.stdout) == (3, "flushed\n"), ours.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert _sections(trace, "work") == 3
    assert trace.metadata["session"]["ended_by"] == "os._exit(3)"
    assert "os._exit(3) ends the process: trace written to t.polyprof (3 events)" in ours.stderr


def test_an_exec_that_fails_changes_nothing(tmp_path):
    """A missing program (``execvp``'s misses too) raises before anything is replaced:
    the session goes on and the trace has what came after."""
    code = WORK + """\
for call in (lambda: os.execv('/no/such/prog', ['x']), lambda: os.execvp('no-such-prog-h8', ['x']),
             lambda: os.execv(sys.executable, [])):
    try:
        call()
    except (OSError, ValueError) as e:
        print(type(e).__name__)
with polyprof.section("after"):
    pass
"""
    plain, ours = _both(tmp_path, code)
    assert plain.stdout == "FileNotFoundError\nFileNotFoundError\nValueError\n"
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert (_sections(trace, "work"), _sections(trace, "after")) == (3, 1)
    assert "ended_by" not in trace.metadata["session"]
    assert "replaces" not in ours.stderr


def test_an_exec_that_fails_late_is_said_once_and_the_trace_says_so(tmp_path):
    """An exec the kernel refuses after the checks (ENOEXEC: an executable text file
    without a shebang) raises as under python, after the trace was written. Before:
    ``polyprof run`` said "trace written to t.polyprof" twice (at the exec, then at its
    end), and the trace's warning said the exec replaced the process. Now one line, and
    the trace (saved again) says the exec failed and that the rest is not recorded."""
    (tmp_path / "notexe").write_text("echo hi\n")
    (tmp_path / "notexe").chmod(0o755)
    code = WORK + """\
try:
    os.execv('./notexe', ['./notexe'])
except OSError as e:
    print('caught', e.errno)
with polyprof.section("after"):
    pass
"""
    plain, ours = _both(tmp_path, code)
    assert plain.stdout == "caught 8\n"
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    lines = [x for x in ours.stderr.splitlines() if x.startswith("polyprof")]
    assert sum("trace written to t.polyprof" in x for x in lines) == 1, ours.stderr
    assert len(lines) == 2 and "os.execv(./notexe) failed (Exec format error)" in lines[1], ours.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert (_sections(trace, "work"), _sections(trace, "after")) == (3, 0)
    assert trace.metadata["session"]["ended_by"] == "os.execv(./notexe)"
    assert trace.metadata["session"]["exec_failed"] == "Exec format error"
    said = [str(w) for w in trace.metadata["warnings"]]
    assert not any("replaces the process" in w for w in said), said
    assert any("which failed (Exec format error)" in w and "not in it" in w for w in said), said
    assert not (tmp_path / "t.polyprof.partial").exists()


def test_a_forked_child_execs_and_exits_without_touching_the_parents_trace(tmp_path):
    """fork + exec (pty.spawn's way) and a child's ``os._exit`` (multiprocessing's): the
    child writes nothing and says nothing; the parent records on."""
    code = WORK + f"SHOW = {SHOW!r}\n" + """\
import multiprocessing
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, '-c', 'print("child ran")'])
os.waitpid(pid, 0)
ctx = multiprocessing.get_context("fork")
p = ctx.Process(target=print, args=("mp child",))
p.start(); p.join()
with polyprof.section("after"):
    pass
print("parent done", p.exitcode)
"""
    plain, ours = _both(tmp_path, code)
    assert plain.stdout == "child ran\nmp child\nparent done 0\n", plain.stderr
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert (_sections(trace, "work"), _sections(trace, "after")) == (3, 1)
    assert "ended_by" not in trace.metadata["session"]
    assert [x for x in ours.stderr.splitlines() if "trace written" in x] == \
        ["polyprof: trace written to t.polyprof (4 events)"], ours.stderr


def test_a_program_with_its_own_sessions_execs_from_a_thread(tmp_path):
    """An in-program session (nested in ``polyprof run``'s, and alone under python) and
    an exec from another thread than the session's: every trace is written, innermost first."""
    code = WORK + """\
import threading
with polyprof.profile(output="inner.polyprof", plugins=["host"]):
    with polyprof.section("inside"):
        pass
    t = threading.Thread(target=os.execv, args=(sys.executable, [sys.executable, '-c', 'print("new")']))
    t.start(); t.join()
"""
    plain, ours = _both(tmp_path, code)
    assert (plain.returncode, plain.stdout) == (0, "new\n"), plain.stderr
    assert "replaces the process: trace written to inner.polyprof (1 events)" in plain.stderr
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    outer, inner = polyprof.load(tmp_path / "t.polyprof"), polyprof.load(tmp_path / "inner.polyprof")
    assert (_sections(outer, "work"), _sections(outer, "inside"), _sections(inner, "inside")) == (3, 1, 1)
    assert inner.metadata["session"]["ended_by"] == outer.metadata["session"]["ended_by"] == \
        f"os.execv({sys.executable})"
    written = [x for x in ours.stderr.splitlines() if "trace written" in x]
    assert [w.split(" to ")[1].split(" ")[0] for w in written] == ["inner.polyprof", "t.polyprof"], ours.stderr


def test_exec_in_a_shell_and_posix_spawn_are_not_this_process(tmp_path):
    """``subprocess`` running ``sh -c 'exec ...'`` and ``os.posix_spawn`` start other
    processes: the session goes on and ends normally."""
    code = WORK + """\
import subprocess
print(subprocess.run(["sh", "-c", "exec echo shell"], capture_output=True, text=True).stdout.strip())
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 4"], os.environ)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
with polyprof.section("after"):
    pass
"""
    plain, ours = _both(tmp_path, code)
    assert plain.stdout == "shell\n4\n"
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert _sections(trace, "after") == 1 and "ended_by" not in trace.metadata["session"]


@pytest.mark.parametrize("failure", ["OutputError", "RuntimeError"])
def test_a_save_that_fails_is_said_and_the_exit_still_happens(tmp_path, failure):
    """Nothing raises into the program: the output and its fallback refused (or a bug in
    the save) is one line naming the crash journal, and ``os._exit`` ends as asked."""
    code = WORK + f"""\
from polyprof.collect import output
from polyprof.errors import OutputError
def refuse(*a, **k):
    raise {failure}("disk on fire")
output.write_atomic = refuse
os._exit(5)
"""
    plain, ours = _both(tmp_path, code)
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout) == (5, ""), ours.stderr
    assert not (tmp_path / "t.polyprof").exists()
    assert (tmp_path / "t.polyprof.partial").is_file()
    last = ours.stderr.splitlines()[-1]
    assert last.startswith("polyprof: error:") and "before os._exit(5)" in last and "disk on fire" in last, ours.stderr
    assert last.endswith("; the host data recorded so far (3 events) is in t.polyprof.partial"), ours.stderr
    assert "Traceback" not in ours.stderr


FATAL = """\
import ctypes, faulthandler, os, time, polyprof
for i in range(3):
    with polyprof.section("work"):
        sum(range(1000))
time.sleep(1.2)  # the crash journal flushes every half second
if {handler}:
    faulthandler.enable()  # the program's own: it chains to what was there
pid = os.fork()
if pid == 0:  # a forked child's crash is not the session's
    ctypes.string_at(0)
print("child", os.waitpid(pid, 0)[1] & 0x7f, flush=True)
{crash}
"""


@pytest.mark.parametrize("crash, signum", [("ctypes.string_at(0)", 11), ("os.abort()", 6)])
@pytest.mark.parametrize("handler", [False, True])
def test_a_fatal_signal_says_where_the_crash_journal_is(tmp_path, crash, signum, handler):
    """SIGSEGV or SIGABRT ended the run with the crash journal left and nothing said; now
    one line names it (a forked child's crash says nothing), and the status is python's."""
    plain, ours = _both(tmp_path, FATAL.format(crash=crash, handler=handler))
    assert (plain.returncode, plain.stdout) == (-signum, "child 11\n"), plain.stderr
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    name = {11: "SIGSEGV", 6: "SIGABRT"}[signum]
    lines = [x for x in ours.stderr.splitlines() if x.startswith("polyprof:")]
    assert lines == [f"polyprof: the program was killed by {name}; the host data recorded up to its last flush "
                     "(every half second) is in t.polyprof.partial"], ours.stderr
    assert ("Fatal Python error" in ours.stderr) == ("Fatal Python error" in plain.stderr) == handler
    partial = tmp_path / "t.polyprof.partial"
    assert _sections(polyprof.load(partial), "work") == 3
    summary = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(partial)], capture_output=True,
                             text=True, env=_env(), timeout=120)
    assert summary.returncode == 0 and "recovered from the crash journal" in summary.stdout, summary.stderr


def test_a_programs_wrapper_over_an_earlier_sessions_is_reached_not_looped(tmp_path):
    """A program wraps ``os._exit`` while one session runs; a second session starts after
    the first stopped. Each install wraps what it found: the second's reaches the
    program's wrapper, which reaches the first's, which passes through. Before, both
    shared one function reading one global "real", which was the program's wrapper: a
    RecursionError escaped into the program and it never exited."""
    script = tmp_path / "rewrap.py"
    script.write_text(
        "import os, sys, polyprof\n"
        f"s = polyprof.Session(output={str(tmp_path / 'one.polyprof')!r}); s.start()\n"
        "prev = os._exit\n"
        "def program_exit(code):\n"
        "    sys.stdout.write('program wrapper\\n'); sys.stdout.flush()\n"
        "    return prev(code)\n"
        "os._exit = program_exit\n"
        "s.stop()\n"
        f"s2 = polyprof.Session(output={str(tmp_path / 'two.polyprof')!r}); s2.start()\n"
        "os._exit(7)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 7, out.stderr
    assert out.stdout == "program wrapper\n" and "RecursionError" not in out.stderr
    assert (tmp_path / "two.polyprof").is_file()
