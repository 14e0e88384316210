"""The session never hurts or loses the profiled program (issue 20), through the API:
plugins that raise BaseException or hang, host data under a tiny collect limit with
busy threads, outputs that cannot be written, symlinks, argv, the journal's last
flush, forked children, nested sessions, coroutine and generator sections."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect import journal
from polyprof.collect.plugin import Plugin
from polyprof.collect.recorder import Recorder
from polyprof.trace.builder import TraceBuilder


def _count(trace, name: str) -> int:
    return int((trace.names() == name).sum()) if name in trace.strings else 0


class Faulty(Plugin):
    """A Python plugin that misbehaves in one phase (a real Plugin subclass; what it
    raises or how long it hangs is the fault)."""

    name = "faulty"

    def __init__(self, phase: str, action) -> None:
        super().__init__()
        self.phase, self.action = phase, action

    def _maybe(self, phase: str) -> None:
        if phase == self.phase:
            self.action()

    def _start(self, ctx) -> None:
        self._maybe("start")

    def _stop(self) -> None:
        self._maybe("stop")

    def _collect(self):
        self._maybe("collect")
        return TraceBuilder().build()


def _raise(exc):
    def f():
        raise exc
    return f


@pytest.mark.parametrize("phase", ["start", "stop", "collect"])
@pytest.mark.parametrize("exc", [SystemExit(7), KeyboardInterrupt(), GeneratorExit()])
def test_base_exceptions_in_a_plugin_never_reach_the_program(phase, exc):
    with polyprof.profile(plugins=["host", Faulty(phase, _raise(exc))]) as prof:
        with polyprof.section("work"):
            pass
    errs = prof.trace.metadata["plugin_errors"]
    assert [(e["plugin"], e["phase"]) for e in errs] == [("faulty", phase)]
    assert type(exc).__name__ in errs[0]["error"]
    assert _count(prof.trace, "work") == 1
    with polyprof.profile(plugins=["host"]) as again:  # profiling still works afterwards
        with polyprof.section("again"):
            pass
    assert _count(again.trace, "again") == 1


@pytest.mark.parametrize("phase", ["start", "stop"])
def test_a_hanging_plugin_is_time_limited_and_reported(phase):
    release = threading.Event()
    t0 = time.monotonic()
    with polyprof.profile(plugins=["host", Faulty(phase, lambda: release.wait(20))], call_timeout=0.5) as prof:
        with polyprof.section("work"):
            pass
    took = time.monotonic() - t0
    release.set()
    assert took < 5, took  # not the 20 s hang
    errs = prof.trace.metadata["plugin_errors"]
    assert errs and errs[0]["phase"] == phase and "did not return within 0.5 s" in errs[0]["error"]
    assert _count(prof.trace, "work") == 1


class Recorded(Plugin):
    """A plugin whose ``time_limited`` answers per call (a property, as the torch and
    OpenCL plugins'), recording on which thread each call ran."""

    name = "recorded"

    def __init__(self, limited) -> None:
        super().__init__()
        self.limited, self.threads = limited, {}

    @property
    def time_limited(self) -> bool:
        return self.limited(self._state)

    def _note(self, phase: str) -> None:
        self.threads[phase] = threading.current_thread().name

    def _start(self, ctx) -> None:
        self._note("start")

    def _stop(self) -> None:
        self._note("stop")

    def _collect(self):
        self._note("collect")
        return TraceBuilder().build()


def test_time_limited_is_asked_before_each_call():
    """A plugin limited until it stops (its collect works on memory only) is started
    and stopped in helper threads, collected on the session's thread."""
    p = Recorded(lambda state: state != "stopped")
    with polyprof.profile(plugins=["host", p]) as prof:
        pass
    here = threading.current_thread().name
    assert p.threads == {"start": "polyprof-start-recorded", "stop": "polyprof-stop-recorded", "collect": here}
    assert prof.trace.metadata["plugins"]["recorded"] == "ok"


def test_a_time_limited_that_raises_keeps_the_limit():
    def broken(state):
        raise RuntimeError("no answer")

    p = Recorded(broken)
    with polyprof.profile(plugins=["host", p]) as prof:
        pass
    assert p.threads == {ph: f"polyprof-{ph}-recorded" for ph in ("start", "stop", "collect")}
    assert prof.trace.metadata["plugins"]["recorded"] == "ok" and prof.trace.metadata["plugin_errors"] == []


def test_host_data_is_never_dropped_by_the_collect_limit():
    """8 CPU-bound threads, 1,000,000 sections in all, a collect limit far shorter than
    the host collect takes: every section is kept (the limit is for device plugins)."""
    n_threads, per = 8, 125_000
    done = threading.Event()
    recorded = threading.Barrier(n_threads + 1)

    def worker():
        for _ in range(per):
            with polyprof.section("s"):
                pass
        recorded.wait()
        x = 0
        while not done.is_set():  # keep the CPU busy while the session stops and collects
            x += 1

    with polyprof.profile(plugins=["host"], collect_timeout=0.001) as prof:
        threads = [threading.Thread(target=worker) for _ in range(n_threads)]
        for t in threads:
            t.start()
        recorded.wait()
    done.set()
    for t in threads:
        t.join()
    assert prof.trace.metadata["plugin_errors"] == []
    assert _count(prof.trace, "s") == n_threads * per


# ---------------------------------------------------------------------------- outputs
def _small_trace(tmp_path: Path, output: Path, **kw):
    with polyprof.profile(plugins=["host"], output=output, **kw) as prof:
        with polyprof.section("work"):
            pass
    return prof


def test_missing_directories_are_made(tmp_path):
    out = tmp_path / "a" / "b" / "x.polyprof"
    prof = _small_trace(tmp_path, out)
    assert prof.written.path == out and not prof.written.fell_back
    assert _count(polyprof.load(out), "work") == 1
    assert not journal.path_for(out).exists()


@pytest.mark.parametrize("kind", ["dev-full", "directory", "symlink", "unwritable-dir"])
def test_an_output_that_cannot_be_written_falls_back_and_says_where(tmp_path, kind):
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    if kind == "dev-full":
        out = Path("/dev/full")
    elif kind == "directory":
        out = tmp_path / "dir.polyprof"
        out.mkdir()
    elif kind == "symlink":
        out = tmp_path / "link.polyprof"
        out.symlink_to(target)
    else:
        parent = tmp_path / "file-not-dir"
        parent.write_text("")
        out = parent / "x.polyprof"  # its "directory" is a file: cannot be made
    prof = _small_trace(tmp_path, out)
    w = prof.written
    assert w.fell_back and w.path.is_file() and w.error
    assert _count(polyprof.load(w.path), "work") == 1
    assert target.read_text() == "keep me"  # a planted link's target is never overwritten
    if kind == "symlink":
        assert out.is_symlink() and "symbolic link" in w.error
        assert not journal.path_for(out).exists() or not journal.path_for(out).is_symlink()
    w.path.unlink()


def test_symlink_followed_when_asked(tmp_path):
    target = tmp_path / "real.polyprof"
    link = tmp_path / "link.polyprof"
    link.symlink_to(target)
    prof = _small_trace(tmp_path, link, follow_symlinks=True)
    assert not prof.written.fell_back and link.is_symlink()
    assert _count(polyprof.load(target), "work") == 1


def test_journal_never_follows_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "x.polyprof"
    journal.path_for(out).symlink_to(victim)
    prof = _small_trace(tmp_path, out)
    assert victim.read_text() == "precious"
    assert any("no crash journal" in w for w in prof.trace.metadata["warnings"])
    assert _count(polyprof.load(out), "work") == 1


def test_a_write_cut_short_leaves_no_file_and_no_claim(tmp_path):
    """A disk that fills during the write (RLIMIT_FSIZE makes every write past 2 kB
    fail with EFBIG, in the output's directory and the fallback's alike): no file at
    the output, no 'written', the failure said."""
    code = f"""
import resource, signal, polyprof
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
with polyprof.profile(plugins=["host"], output={str(tmp_path / 'x.polyprof')!r}) as p:
    for i in range(2000):
        with polyprof.section("work%d" % i):
            pass
print("path", p.written.path, "error", p.written.error)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "path None" in r.stdout and "File too large" in r.stdout
    assert not (tmp_path / "x.polyprof").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_argv_left_out_unless_asked(tmp_path):
    code = f"""
import sys, polyprof
sys.argv = ["train.py", "--api-key=sekrit", "x"]
for keep in (False, True):
    out = {str(tmp_path)!r} + "/k%d.polyprof" % keep
    with polyprof.profile(plugins=["host"], output=out, record_argv=keep,
                          options={{"host": {{"journal_interval_s": 0.01}}}}) as p:
        import time; time.sleep(0.05)
        print(open(out + ".partial", "rb").read().count(b"sekrit"))
    print(p.trace.metadata["session"]["argv"])
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "0" and "sekrit" not in lines[1] and "train.py" in lines[1] and lines[1].count("<argument>") == 2
    assert lines[2] != "0" and "--api-key=sekrit" in lines[3]


def test_journal_flushes_everything_on_close(tmp_path):
    rec = Recorder()
    path = tmp_path / "j.partial"
    w = journal.JournalWriter(path, {"start_ns": 0, "wall_anchor": {}}, rec, interval=3600)
    n = 600_000  # more than a flush writes at once (4 chunks of 2**18)
    rec.sections.extend(("s", i, i + 1, None, 1) for i in range(n))
    w.close(delete=False)
    tr = polyprof.load(path)
    assert _count(tr, "s") == n


# ---------------------------------------------------------------------------- fork
FORKING = """
import os, sys, threading, time, polyprof
out = sys.argv[1]
def busy():
    for i in range(100000):
        with polyprof.section("busy"):
            pass
with polyprof.profile(plugins=["host"], output=out, options={"host": {"journal_interval_s": 0.001}}):
    t = threading.Thread(target=busy); t.start()
    kids = []
    for k in range(20):
        time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            with polyprof.section("child"):
                polyprof.mark("child mark")
            with polyprof.profile(plugins=["host"]) as own:  # a child may profile itself
                with polyprof.section("own"):
                    pass
            assert own.trace.names().tolist() == ["own"], own.trace.names()
            sys.exit(0)  # leaves the parent's profiled region: must not write or delete its files
        kids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids]
    t.join()
with polyprof.section("after"):
    pass
print("codes", codes)
"""


def test_forked_children_never_deadlock_or_touch_the_parents_files(tmp_path):
    script = tmp_path / "f.py"
    script.write_text(FORKING)
    out = tmp_path / "f.polyprof"
    r = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "codes [" + ", ".join(["0"] * 20) + "]" in r.stdout
    tr = polyprof.load(out)
    assert _count(tr, "busy") == 100_000
    assert _count(tr, "child") == 0 and _count(tr, "own") == 0
    assert tr.metadata["session"]["pid"] != 0 and not journal.path_for(out).exists()


# ---------------------------------------------------------------------------- nesting
def test_nested_session_sees_its_window_and_the_outer_sees_all(tmp_path):
    inner_out = tmp_path / "inner.polyprof"
    with polyprof.profile(plugins=["host"]) as outer:
        polyprof.mark("outer mark")
        with polyprof.profile(output=inner_out) as inner:
            with polyprof.section("inside"):
                polyprof.counter("c", 1.0)
    assert polyprof.load(inner_out).names().tolist().count("inside") == 1
    assert "outer mark" not in inner.trace.names().tolist()
    assert _count(outer.trace, "polyprof.profile") == 1 and _count(outer.trace, "inside") == 1


# ---------------------------------------------------------------------------- async, generators
def test_coroutine_and_generator_sections_time_the_work(section_impl):
    @polyprof.section("co")
    async def co(d):
        await asyncio.sleep(d)
        return d

    @polyprof.section("gen")
    def gen(n):
        for i in range(n):
            time.sleep(0.01)
            yield i
        return "done"

    @polyprof.section("agen")
    async def agen(n):
        for i in range(n):
            await asyncio.sleep(0.01)
            got = yield i
            if got == "stop":
                return

    async def main():
        t0 = time.perf_counter_ns()
        assert await asyncio.gather(co(0.05), co(0.01)) == [0.05, 0.01]
        wall = time.perf_counter_ns() - t0
        a = agen(10)
        assert await a.__anext__() == 0
        assert await a.asend(None) == 1
        with pytest.raises(StopAsyncIteration):
            await a.asend("stop")
        return wall

    with polyprof.profile(plugins=["host"]) as prof:
        wall = asyncio.run(main())
        g = gen(3)
        time.sleep(0.02)  # created, not yet run: not part of the section
        t0 = time.perf_counter_ns()
        assert list(g) == [0, 1, 2]
        gen_wall = time.perf_counter_ns() - t0
    ev, tr = prof.trace.events, prof.trace
    co_d = np.sort(ev["dur_ns"][tr.names() == "co"])
    assert len(co_d) == 2
    assert 8e6 <= co_d[0] < co_d[1] and 48e6 <= co_d[1] <= wall  # each task its own duration
    (gd,) = ev["dur_ns"][tr.names() == "gen"]
    assert 28e6 <= gd <= gen_wall
    (ad,) = ev["dur_ns"][tr.names() == "agen"]
    assert ad >= 18e6  # two resumes of >= 10 ms, closed when it returned


# ---------------------------------------------------------------------------- signals during the save
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_during_stop_is_delivered_after_the_save(tmp_path, sig):
    """A plugin whose stop() gets the process signalled (as a user's Ctrl-C or a job
    scheduler's SIGTERM arriving during the save): the trace is written first, then the
    signal acts as it would have (SIGTERM kills, SIGINT raises KeyboardInterrupt)."""
    out = tmp_path / "x.polyprof"
    code = f"""
import os, signal, polyprof
from polyprof.collect.plugin import Plugin
from polyprof.trace.builder import TraceBuilder
class Signaller(Plugin):
    name = "signaller"
    def _start(self, ctx): pass
    def _stop(self):
        os.kill(os.getpid(), signal.{sig})
        import time; time.sleep(0.2)  # the signal arrives while we are still stopping
    def _collect(self): return TraceBuilder().build()
try:
    with polyprof.profile(plugins=["host", Signaller()], output={str(out)!r}):
        with polyprof.section("work"):
            pass
except KeyboardInterrupt:
    print("KeyboardInterrupt after save:", os.path.exists({str(out)!r}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if sig == "SIGTERM":
        assert r.returncode == -15, r.stderr
    else:
        assert r.returncode == 0 and "KeyboardInterrupt after save: True" in r.stdout, r.stderr
    assert "received while saving the trace" in r.stderr
    assert _count(polyprof.load(out), "work") == 1


def test_one_section_object_shared_by_asyncio_tasks_times_each_task(section_impl):
    """``ATTN = section("attn")`` entered by several tasks interleaved on one thread,
    at different times: each task's exit closes its own opening (before, it closed the
    thread's latest one: for these tasks ~0, 40 and 60 ms instead of 10, 30, 60)."""
    shared = polyprof.section("shared")
    plan = [(0.0, 0.06), (0.01, 0.01), (0.02, 0.03)]  # (start after, duration) per task
    reads = {}  # task -> clock reads just before and inside its entry, inside and after its exit

    async def task(i, start, dur):
        await asyncio.sleep(start)
        a = time.perf_counter_ns()
        with shared:
            b = time.perf_counter_ns()
            await asyncio.sleep(dur)
            c = time.perf_counter_ns()
        reads[i] = (a, b, c, time.perf_counter_ns())

    async def main():
        await asyncio.gather(*(task(i, a, d) for i, (a, d) in enumerate(plan)))

    with polyprof.profile(plugins=["host"]) as prof:
        asyncio.run(main())
    sel = prof.trace.names() == "shared"
    starts, durs = prof.trace.events["start_ns"][sel], prof.trace.events["dur_ns"][sel]
    assert len(starts) == 3
    # each task's opening is recorded between its own clock reads around the entry (no
    # await there: the tasks' entry windows are disjoint), and closed between its own reads
    # around the exit: its own time, not another task's, whatever the machine's load (an
    # order of the durations, 10 < 30 < 60 ms, is not: a stall of the loop lengthens one)
    for i, (_, want) in enumerate(plan):
        a, b, c, d = reads[i]
        mine = np.flatnonzero((a <= starts) & (starts <= b))
        assert len(mine) == 1, (i, reads, starts)
        end = int(starts[mine[0]] + durs[mine[0]])
        assert c <= end <= d, (i, reads[i], end)
        assert want * 1e9 * 0.9 <= durs[mine[0]], (durs, plan)  # at least its own sleep


def test_journal_says_how_far_behind_it_fell(tmp_path, monkeypatch):
    """More sections per interval than one flush writes (here 4 batches of 2**16): the
    flush leaves the rest for the next one and the count is kept; close writes them all."""
    monkeypatch.setattr(journal, "MAX_SECTION_BATCHES", 4)
    rec = Recorder()
    path = tmp_path / "j.partial"
    w = journal.JournalWriter(path, {"start_ns": 0, "wall_anchor": {}}, rec, interval=3600)
    n = 4 * journal.SECTION_CHUNK + 1000
    t = time.perf_counter_ns()  # the session clock
    rec.sections.extend(("s", t, t, None, 1) for i in range(n))
    time.sleep(0.05)
    w.flush()
    assert w.behind == 1000 and w.max_behind == 1000
    assert 50e6 <= w.max_lag_ns < 60e9  # the oldest unwritten section had waited >= 50 ms
    w.close(delete=False)
    assert _count(polyprof.load(path), "s") == n
