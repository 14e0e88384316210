"""The crash journal's file against a program that closes descriptors it did not open,
and against another run writing the same output (collect/journal_file.py).

Before: the journal wrote through the descriptor number it was given at the start; a
program that ran ``os.closerange(3, 4096)`` and then opened a file got that number
back, and the journal's Arrow bytes went into the program's file; its close raised
EBADF out of the host plugin's stop, and the trace had 0 events. A second run with the
same ``-o`` took the first run's live journal for a killed run's and moved it aside;
the first run's stop then deleted the second's journal by its path.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


import polyprof
from polyprof.collect import journal
from polyprof.collect import recorder as rec

HIGH_FD = 1000  # lowlevel.descriptors.HIGH_FD
FAST = json.dumps({"host": {"journal_interval_s": 0.05}})


def run_cmd(script: str, out: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "--plugin-options", FAST,
            "-o", out, script, *args]


def names(path: Path) -> list[str]:
    return list(polyprof.load(path).names())


def wait_for(path: Path, name: str, count: int, timeout: float = 60.0) -> int:
    """Wait (bounded) until the live journal at ``path`` holds ``count`` sections ``name``."""
    deadline = time.monotonic() + timeout
    snap = path.with_name("snap.polyprof.partial")
    held = 0
    while time.monotonic() < deadline:
        if path.is_file():
            shutil.copy(path, snap)
            try:
                held = names(snap).count(name)
            except Exception:  # the header not yet written
                held = 0
            if held >= count:
                return held
        time.sleep(0.05)
    raise AssertionError(f"{path} holds {held} sections {name!r} after {timeout} s, not {count}")


CLOSES_AND_OPENS = """
import os, time, polyprof
os.closerange(3, 4096)
f = open("mydata.txt", "w")
for i in range(20):
    with polyprof.section("w"):
        f.write("line %d\\n" % i); f.flush(); time.sleep(0.1)
f.close()
"""


def test_a_program_that_closes_inherited_descriptors_keeps_its_file_and_its_trace(tmp_path):
    (tmp_path / "prog.py").write_text(CLOSES_AND_OPENS)
    r = subprocess.run(run_cmd("prog.py", "t.polyprof"), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expected = "".join(f"line {i}\n" for i in range(20)).encode()
    assert (tmp_path / "mydata.txt").read_bytes() == expected  # byte for byte: no journal bytes in it
    assert names(tmp_path / "t.polyprof").count("w") == 20, r.stderr
    assert "failed in stop" not in r.stderr and "Bad file descriptor" not in r.stderr, r.stderr
    assert not (tmp_path / "t.polyprof.partial").exists()  # a normal stop leaves no journal


CLOSES_ONLY = """
import os, signal, sys, time, polyprof
os.closerange(3, 4096)
for i in range(20):
    with polyprof.section("w"):
        time.sleep(0.02)
if sys.argv[1] == "kill":  # the journal goes on after the close: what it holds when killed
    while True:
        time.sleep(0.05)
"""


def test_closing_descriptors_without_opening_keeps_the_trace(tmp_path):
    (tmp_path / "prog.py").write_text(CLOSES_ONLY)
    r = subprocess.run(run_cmd("prog.py", "t.polyprof", "end"), cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert names(tmp_path / "t.polyprof").count("w") == 20, r.stderr
    assert "failed in stop" not in r.stderr and "Bad file descriptor" not in r.stderr, r.stderr
    assert not (tmp_path / "t.polyprof.partial").exists()


def test_the_journal_goes_on_after_the_program_closed_its_descriptor(tmp_path):
    """The journal is opened again by its path and appended to: a program killed after
    closing every descriptor leaves a journal with the sections recorded after the close."""
    (tmp_path / "prog.py").write_text(CLOSES_ONLY)
    p = subprocess.Popen(run_cmd("prog.py", "t.polyprof", "kill"), cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(tmp_path / "t.polyprof.partial", "w", 20)
    finally:
        p.send_signal(signal.SIGKILL)
        _, err = p.communicate(timeout=60)
    assert p.returncode == -9, err
    assert names(tmp_path / "t.polyprof.partial").count("w") == 20


def test_a_descriptor_number_taken_over_is_never_written_or_closed(tmp_path):
    """The race-free part of the check in one process: the journal's descriptor number
    made to refer to another file (as a program's close + open or ``dup2`` does). The
    other file is never written or closed; the journal goes on at its path."""
    r = rec.Recorder()
    w = journal.JournalWriter(tmp_path / "j.partial", {"pid": 1}, r, None, interval=3600)
    try:
        fd = w._file.fileno()
        high = not os.get_inheritable(fd) and fd >= HIGH_FD  # close-on-exec: never a child's
        victim = tmp_path / "program.txt"
        victim.write_bytes(b"the program's data\n")
        v = os.open(victim, os.O_RDWR)
        os.dup2(v, fd)  # the number is the program's file now
        os.close(v)
        r.sections.extend(("s", i, i + 5, None, 1) for i in range(10))
        w.flush()
        w.close(delete=False)
        assert victim.read_bytes() == b"the program's data\n"
        os.fstat(fd)  # still open: the program's, not closed by the journal
        os.close(fd)
        assert names(tmp_path / "j.partial").count("s") == 10
        # where a program's open() (the lowest free number) does not land
        assert high or resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2 * HIGH_FD
    finally:
        w.close(delete=False)


def test_a_live_journal_is_never_moved_and_only_our_own_is_deleted(tmp_path):
    asked = tmp_path / "o.polyprof.partial"
    a = journal.JournalWriter(asked, {"pid": 1}, rec.Recorder(), None, interval=3600)
    b = journal.JournalWriter(asked, {"pid": 2}, rec.Recorder(), None, interval=3600)
    try:
        assert a.path == asked and b.path == tmp_path / "o.polyprof.partial.1"
        assert journal.keep_earlier(asked) is None and asked.is_file()  # locked: a live run's
        # the notes on a trace not written name where this process's journal is (the latest)
        from polyprof.collect.output import journal_note

        assert journal.where(asked) == b.path
        assert journal_note(tmp_path / "o.polyprof").endswith("o.polyprof.partial.1 holds no event either")
    finally:
        a.close(delete=False)
        b.close(delete=False)
    journal.discard(asked)
    assert not asked.exists() and not b.path.exists()
    c = journal.JournalWriter(asked, {"pid": 3}, rec.Recorder(), None, interval=3600)
    c.close(delete=False)
    asked.unlink()
    asked.write_bytes(b"another run's journal")  # took the name since
    journal.discard(asked)
    assert asked.read_bytes() == b"another run's journal"


LOOPS = """
import os, sys, time, polyprof
stop = sys.argv[2]
t0 = time.monotonic()
while not os.path.exists(stop) and time.monotonic() - t0 < 60:
    with polyprof.section(sys.argv[1]):
        time.sleep(0.02)
"""


def _start(tmp_path: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(run_cmd("loops.py", "same.polyprof", name, f"stop.{name}"), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _two_runs(tmp_path: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    (tmp_path / "loops.py").write_text(LOOPS)
    a = _start(tmp_path, "a")
    wait_for(tmp_path / "same.polyprof.partial", "a", 1)
    b = _start(tmp_path, "b")
    return a, b


def _end(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=60)


def test_two_runs_with_the_same_output_keep_both_journals(tmp_path):
    """The first run ends normally, the second is killed: the second's journal is kept."""
    a, b = _two_runs(tmp_path)
    try:
        partial, second = tmp_path / "same.polyprof.partial", tmp_path / "same.polyprof.partial.1"
        wait_for(second, "b", 1, timeout=30)  # the second run writes its own journal beside
        (tmp_path / "stop.a").touch()
        _, a_err = a.communicate(timeout=60)
        assert a.returncode == 0, a_err
        assert "earlier run" not in a_err, a_err
        assert set(names(tmp_path / "same.polyprof")) == {"a"}
        assert not partial.exists()  # the first run deleted its own journal only
        held = wait_for(second, "b", names(second).count("b") + 5)
        b.send_signal(signal.SIGKILL)
        _, b_err = b.communicate(timeout=60)
        assert b.returncode == -9
        assert ("another run writes the same output now (its crash journal same.polyprof.partial is in use): "
                "this run's crash journal is same.polyprof.partial.1") in b_err, b_err
        assert "earlier run (killed?)" not in b_err, b_err
        kept = names(second)  # recoverable, whole, and the second run's only
        assert set(kept) == {"b"} and kept.count("b") >= held
    finally:
        _end(a, b)


def test_the_run_that_ends_first_deletes_only_its_own_journal(tmp_path):
    """The second run ends normally, the first is killed: the first's journal is kept,
    and the second's (beside it) is deleted at its normal stop."""
    a, b = _two_runs(tmp_path)
    try:
        partial, second = tmp_path / "same.polyprof.partial", tmp_path / "same.polyprof.partial.1"
        wait_for(second, "b", 1, timeout=30)
        (tmp_path / "stop.b").touch()
        _, b_err = b.communicate(timeout=60)
        assert b.returncode == 0, b_err
        a.send_signal(signal.SIGKILL)
        a.communicate(timeout=60)
        assert partial.is_file() and set(names(partial)) == {"a"}
        assert not second.exists()
    finally:
        _end(a, b)


GROWS = """
import os, sys
from pathlib import Path
from polyprof.lowlevel import descriptors
def size():
    return next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("FDSize:"))
before, fds = size(), sorted(os.listdir("/proc/self/fd"))
descriptors.reserve()
print(before, size(), fds == sorted(os.listdir("/proc/self/fd")))
"""


def test_reserve_grows_the_descriptor_table_and_leaves_nothing_open():
    """lowlevel/descriptors.py: the table holds HIGH_FD afterwards, and no descriptor is
    left open. (A fresh interpreter's table is 64 or 256 entries, unless the process that
    started it had a larger one: a child's table is copied at the fork.)"""
    out = subprocess.run([sys.executable, "-c", GROWS], capture_output=True, text=True, timeout=60, check=True)
    before, after, same = out.stdout.split()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert (int(after) > HIGH_FD or soft < 2 * HIGH_FD) and int(after) >= int(before)
    assert same == "True"


#: records, when `polyprof run` grows the descriptor table, how many threads the process
#: has and whether NumPy (whose OpenBLAS starts threads) was imported
WATCHES_RESERVE = """
import os, sys
from polyprof.lowlevel import descriptors
real = descriptors.reserve
def watched():
    print("reserve", len(os.listdir("/proc/self/task")), "numpy" in sys.modules, file=sys.stderr)
    real()
descriptors.reserve = watched
sys.argv = ["polyprof", *sys.argv[1:]]
from polyprof.cli import entry
entry()
"""


def test_run_grows_the_descriptor_table_before_any_thread_starts(tmp_path):
    """Growing the table once another thread runs waits for an RCU grace period (4-25 ms
    of each `polyprof run` here, in the journal's start): `polyprof run` grows it first,
    with one thread and NumPy not yet imported, and the journal's descriptor is high."""
    script = tmp_path / "fds.py"
    script.write_text("import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd'))[-1])\n")
    out = subprocess.run([sys.executable, "-c", WATCHES_RESERVE, "run", "--plugins", "host", "--no-summary",
                          "-o", str(tmp_path / "t.polyprof"), str(script)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "reserve 1 False" in out.stderr.splitlines()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    floor = HIGH_FD if soft == resource.RLIM_INFINITY else min(HIGH_FD, soft - 24)
    assert int(out.stdout.split()[-1]) >= floor  # the journal, open while the program runs
