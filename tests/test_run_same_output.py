"""Two ``polyprof run`` with the same ``-o`` at once keep both traces (collect/output.py).

Before: each run renamed its trace over the output at its end, so the run that ended
last replaced the other's whole trace without a word (their crash journals were
already kept apart: tests/test_journal_fds.py). Now a run replaces only the file it
found at the output when it started; one another run wrote since is kept, and this
run's trace goes to the first free ``t.N.polyprof`` beside it, said on stderr. A run
again after the first one ended still replaces its trace, as before.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import polyprof
from polyprof.collect import output
from polyprof.trace.builder import TraceBuilder

# waits until the test says stop (a file), about a second in all, inside a section named
# after the run: each trace's own events
PROGRAM = """
import os, sys, time, polyprof
name, stop = sys.argv[1], sys.argv[2]
with polyprof.section(name):
    open("started." + name, "w").close()
    t0 = time.monotonic()
    while not os.path.exists(stop) and time.monotonic() - t0 < 60:
        time.sleep(0.02)
"""


def _run(tmp_path: Path, name: str, stop: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "-o", "t.polyprof",
           "prog.py", name, stop]
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_started(tmp_path: Path, name: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not (tmp_path / f"started.{name}").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"run {name} did not start"
        time.sleep(0.02)


def _finish(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return err


def _names(path: Path) -> set[str]:
    return set(polyprof.load(path).names())


def _traces(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".polyprof"))


@pytest.mark.parametrize("order", ["first-started-ends-first", "second-started-ends-first", "both-at-once"])
def test_two_runs_at_once_with_the_same_output_keep_both_traces(tmp_path, order):
    (tmp_path / "prog.py").write_text(PROGRAM)
    stops = {"a": "stop.a", "b": "stop.b"} if order != "both-at-once" else {"a": "stop", "b": "stop"}
    a = _run(tmp_path, "a", stops["a"])
    b = None
    try:
        _wait_started(tmp_path, "a", a)
        b = _run(tmp_path, "b", stops["b"])
        _wait_started(tmp_path, "b", b)  # both sessions run now
        if order == "both-at-once":
            (tmp_path / "stop").touch()
            errs = {"a": _finish(a), "b": _finish(b)}
            first = "a" if _names(tmp_path / "t.polyprof") == {"a"} else "b"
        else:
            first, last = ("a", "b") if order == "first-started-ends-first" else ("b", "a")
            procs = {"a": a, "b": b}
            (tmp_path / stops[first]).touch()
            errs = {first: _finish(procs[first])}
            (tmp_path / stops[last]).touch()
            errs[last] = _finish(procs[last])
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    last = "b" if first == "a" else "a"
    # the run that ended first wrote the output; the other's trace is beside it, its own events each
    assert _traces(tmp_path) == ["t.1.polyprof", "t.polyprof"]
    assert _names(tmp_path / "t.polyprof") == {first}
    assert _names(tmp_path / "t.1.polyprof") == {last}
    assert errs[first].endswith("polyprof: trace written to t.polyprof (1 events)\n"), errs[first]
    assert "another run (or program)" not in errs[first], errs[first]
    assert ("polyprof: WARNING: t.polyprof was written by another run (or program) while this one ran: not "
            "replaced; this run's trace is t.1.polyprof\n") in errs[last], errs[last]
    assert errs[last].endswith("polyprof: trace written to t.1.polyprof instead of t.polyprof (1 events)\n"), \
        errs[last]
    # both journals were deleted at the normal stops, no temporary file is left
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name or p.name.startswith(".")) == []


def test_a_run_again_after_the_first_ended_replaces_its_trace(tmp_path):
    """Sequential runs with the same ``-o``: the later one replaces the output, as
    documented, and nothing goes beside it; with another run's trace already beside
    (``t.1.polyprof`` of an earlier pair), a run at once with this one goes to ``t.2``."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "stop").touch()
    for name in ("a", "b"):
        err = _finish(_run(tmp_path, name, "stop"))
        assert "another run" not in err, err
        assert _traces(tmp_path) == ["t.polyprof"] and _names(tmp_path / "t.polyprof") == {name}
    earlier = b"the trace of an earlier pair's second run"
    (tmp_path / "t.1.polyprof").write_bytes(earlier)
    (tmp_path / "stop").unlink()
    c = _run(tmp_path, "c", "stop")
    try:
        _wait_started(tmp_path, "c", c)
        (tmp_path / "t.polyprof").write_bytes(b"another writer's")  # written in place while c runs
        (tmp_path / "stop").touch()
        err = _finish(c)
    finally:
        if c.poll() is None:
            c.kill()
            c.communicate()
    assert (tmp_path / "t.polyprof").read_bytes() == b"another writer's"
    assert (tmp_path / "t.1.polyprof").read_bytes() == earlier
    assert _names(tmp_path / "t.2.polyprof") == {"c"}
    assert err.endswith("polyprof: trace written to t.2.polyprof instead of t.polyprof (1 events)\n"), err


def test_a_session_nested_with_the_runs_output_is_replaced_as_before(tmp_path):
    """A script under ``polyprof run`` that profiles itself to the same output: its
    trace there is this process's own, so the run's whole trace replaces it, unsaid."""
    (tmp_path / "prog.py").write_text(
        "import polyprof\n"
        "with polyprof.profile(output='t.polyprof'):\n"
        "    with polyprof.section('inner'):\n"
        "        pass\n"
        "with polyprof.section('outer'):\n"
        "    pass\n")
    cmd = [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "-o", "t.polyprof", "prog.py"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "another run" not in p.stderr and _traces(tmp_path) == ["t.polyprof"], p.stderr
    assert {"inner", "outer"} <= _names(tmp_path / "t.polyprof")


def _trace(name: str) -> polyprof.Trace:
    b = TraceBuilder()
    b.event(b.track(b.plane("/host:CPU", "host"), "main", "thread"), name, 0, 10, "python")
    return b.build()


def test_a_second_save_of_the_session_replaces_its_own_file_only(tmp_path):
    """A session saved again (an exec that failed after the save: collect/exits.py)
    replaces the file its first save wrote, beside the output or at it, and nothing else."""
    out = tmp_path / "t.polyprof"
    found = output.stamp(out)
    out.write_bytes(b"another run's")
    w = output.save(_trace("first"), out, found=found)
    assert w.path == tmp_path / "t.1.polyprof" and w.fell_back and out.read_bytes() == b"another run's"
    w2 = output.save(_trace("again"), out, found=found, again=w)
    assert w2.path == w.path and _names(w.path) == {"again"} and w2.fell_back
    assert _traces(tmp_path) == ["t.1.polyprof", "t.polyprof"]
    # at the output: replaced while it is as the first save left it
    out.unlink()
    w3 = output.save(_trace("first"), out, found=None)
    assert w3.path == out and not w3.fell_back
    w4 = output.save(_trace("again"), out, found=None, again=w3)
    assert w4.path == out and _names(out) == {"again"}
    # written by another since: kept, and the second save goes beside it
    os.utime(out, ns=(1, 1))
    w5 = output.save(_trace("third"), out, found=None, again=w4)
    assert w5.path == tmp_path / "t.2.polyprof" and _names(out) == {"again"}


def test_the_look_and_the_rename_wait_for_another_run_saving_there(tmp_path):
    """Two runs ending at once: the look at the output and the rename over it are done
    under a lock on its folder, so the second looks only after the first renamed (held
    here by the test, as another run's save holds it)."""
    out = tmp_path / "t.polyprof"
    found = output.stamp(out)  # nothing there when the session started
    held = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    went: list[output.Written] = []
    saving = threading.Thread(target=lambda: went.append(output.save(_trace("mine"), out, found=found)))
    try:
        saving.start()
        time.sleep(0.5)
        assert saving.is_alive() and not out.exists()  # waits for the other run's rename
        out.write_bytes(b"the other run's trace")
    finally:
        os.close(held)
    saving.join(30)
    assert went[0].path == tmp_path / "t.1.polyprof" and _names(went[0].path) == {"mine"}
    assert out.read_bytes() == b"the other run's trace"
