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
from polyprof import outfile
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


def _hold(lock: Path) -> int:
    """The lock file ``lock`` held by the test, as another run's save holds it (flock on a
    descriptor of its own: a lock of another open file, as another process's)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_the_look_and_the_rename_wait_for_another_run_saving_there(tmp_path):
    """Two runs ending at once: the look at the output and the rename over it are done
    under the lock file beside it, so the second looks only after the first renamed; the
    lock file is removed after."""
    out = tmp_path / "t.polyprof"
    found = output.stamp(out)  # nothing there when the session started
    held = _hold(tmp_path / ".t.polyprof.polyprof-lock")
    went: list[output.Written] = []
    saving = threading.Thread(target=lambda: went.append(output.save(_trace("mine"), out, found=found)))
    try:
        saving.start()
        time.sleep(0.5)
        assert saving.is_alive() and not out.exists()  # waits for the other run's rename
        out.write_bytes(b"the other run's trace")
        os.unlink(tmp_path / ".t.polyprof.polyprof-lock")  # as the other run gives it back
    finally:
        os.close(held)
    saving.join(30)
    assert went[0].path == tmp_path / "t.1.polyprof" and _names(went[0].path) == {"mine"}
    assert out.read_bytes() == b"the other run's trace"
    assert _traces(tmp_path) == ["t.1.polyprof", "t.polyprof"] and not list(tmp_path.glob(".*"))


def test_a_lock_not_given_back_or_not_taken_is_waited_for_briefly_and_said(tmp_path, monkeypatch, caplog):
    """A lock file held past the wait (a run stopped while it saved), or one that cannot
    be locked (here a folder in its place; a read-only folder, NFS without locks): the
    save goes on without it after at most ``LOCK_WAIT_S``, and a warning says what is
    then not sure. Before, the folder's own lock was waited for 10 s, said at debug level."""
    monkeypatch.setattr(output, "LOCK_WAIT_S", 0.3)
    out = tmp_path / "t.polyprof"
    held = _hold(tmp_path / ".t.polyprof.polyprof-lock")
    try:
        t0 = time.monotonic()
        with caplog.at_level("WARNING", logger="polyprof"):
            w = output.save(_trace("mine"), out, found=None)
        assert 0.3 <= time.monotonic() - t0 < 3
    finally:
        os.close(held)
    assert w.path == out and _names(out) == {"mine"}
    assert "t.polyprof: saved without its lock" in caplog.text and "holds it for over 0.3 s" in caplog.text
    assert "could replace this trace, or have it replaced" in caplog.text
    caplog.clear()
    os.unlink(tmp_path / ".t.polyprof.polyprof-lock")
    (tmp_path / ".t.polyprof.polyprof-lock").mkdir()
    with caplog.at_level("WARNING", logger="polyprof"):
        w = output.save(_trace("again"), out, found=output.stamp(out))
    assert w.path == out and _names(out) == {"again"} and "saved without its lock" in caplog.text


def test_the_lock_file_is_held_by_one_at_a_time_though_each_removes_it(tmp_path):
    """The holder removes the lock file as it gives the lock back; one that waited on the
    removed file opens the new one, so two never hold it at once (checked by a count
    inside, from threads that each open the file themselves, as processes do)."""
    lock = tmp_path / ".t.polyprof.polyprof-lock"
    inside, most, errors = [0], [0], []

    def work() -> None:
        try:
            for _ in range(150):
                fd = outfile.take_lock(lock, 30)
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                time.sleep(0.0002)
                inside[0] -= 1
                outfile.drop_lock(lock, fd)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and most[0] == 1 and not lock.exists()


#: keeps the folder's own lock to its end, to stay the only instance there (as a job
#: serialiser, ``flock . cmd``, holds it around the run)
SELF_LOCKING = """
import fcntl, os
fd = os.open(".", os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
""" + PROGRAM


@pytest.mark.parametrize("holder", ["another-process", "the-program"])
def test_a_lock_on_the_output_folder_does_not_hold_up_the_runs(tmp_path, holder):
    """``flock . polyprof run -o t.polyprof ...`` (jobs serialised on the folder), or a
    program that locks its own folder: the runs end at once, and two of them with the
    same output still keep both traces. Before, each save waited 10 s for the folder's
    lock, then wrote without any."""
    (tmp_path / "prog.py").write_text(SELF_LOCKING if holder == "the-program" else PROGRAM)
    keeper = None
    if holder == "another-process":
        keeper = subprocess.Popen(["flock", "-x", str(tmp_path), "sh", "-c", "touch held; sleep 120"], cwd=tmp_path)
        deadline = time.monotonic() + 30
        while not (tmp_path / "held").exists():
            assert time.monotonic() < deadline and keeper.poll() is None, "flock did not take the folder's lock"
            time.sleep(0.02)
    a = b = None
    try:
        a = _run(tmp_path, "a", "stop")
        _wait_started(tmp_path, "a", a)
        if holder == "the-program":  # a second instance would find the folder locked
            (tmp_path / "prog.py").write_text(PROGRAM)
        b = _run(tmp_path, "b", "stop")
        _wait_started(tmp_path, "b", b)
        t0 = time.monotonic()
        (tmp_path / "stop").touch()
        errs = {"a": _finish(a), "b": _finish(b)}
        took = time.monotonic() - t0
    finally:
        for p in (a, b, keeper):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert took < 4, (took, errs)  # a run ends in a fraction of a second after its program
    assert _traces(tmp_path) == ["t.1.polyprof", "t.polyprof"]
    assert {frozenset(_names(tmp_path / t)) for t in _traces(tmp_path)} == {frozenset("a"), frozenset("b")}
    assert not any("without its lock" in e for e in errs.values()), errs
    assert not list(tmp_path.glob(".*"))


#: profiles itself to the run's output, after another run with that output ended
NESTING = """
import os, time, polyprof
with polyprof.section("outer-work"):
    open("started.a", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.02)
with polyprof.profile(output="t.polyprof"):
    with polyprof.section("inner"):
        pass
"""


def test_a_session_nested_with_the_runs_output_keeps_another_runs_trace(tmp_path):
    """Run A's script opens ``profile(output=OUT)`` with A's own ``-o`` after run B (the
    same ``-o``) ended: B's trace at OUT is kept, and A's (the inner session's file, then
    the run's whole trace over it) goes beside. Before, the inner session took B's file
    for what it found at its start and replaced it, and the run accepted the inner's file
    as this process's own: B's trace was lost though B said it was written."""
    (tmp_path / "nest.py").write_text(NESTING)
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "stop").touch()
    cmd = [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "-o", "t.polyprof", "nest.py"]
    a = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_started(tmp_path, "a", a)
        err_b = _finish(_run(tmp_path, "b", "stop"))
        (tmp_path / "go").touch()
        err_a = _finish(a)
    finally:
        if a.poll() is None:
            a.kill()
            a.communicate()
    assert err_b.endswith("polyprof: trace written to t.polyprof (1 events)\n"), err_b
    assert _traces(tmp_path) == ["t.1.polyprof", "t.polyprof"]
    assert _names(tmp_path / "t.polyprof") == {"b"}
    assert {"outer-work", "inner"} <= _names(tmp_path / "t.1.polyprof")
    assert err_a.count("polyprof: WARNING: t.polyprof was written by another run") == 1, err_a
    assert "trace written to t.1.polyprof instead of t.polyprof" in err_a, err_a
