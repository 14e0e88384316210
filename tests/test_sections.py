"""polyprof.section in both implementations (compiled and pure Python): the records it
appends, its clock, listeners, reuse of one object across threads and recursion, and
which implementation is chosen. No timing asserts here: costs live in bench/markers.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

import polyprof
from polyprof.collect import recorder
from polyprof.trace import keys

ROOT = Path(__file__).resolve().parents[1]


def named(r: recorder.Recorder, name: str) -> list[tuple]:
    return [x for x in r.sections if x[0] == name]


def test_record_tuple(rec):
    with polyprof.section("plain"):
        pass
    with polyprof.section("with stats", layer=3, kind="attn"):
        pass
    empty = polyprof.section("empty stats")
    assert empty.stats == {}
    with empty:
        pass
    assert named(rec, "empty stats")[0][3] is None
    (plain,), (stats,) = named(rec, "plain"), named(rec, "with stats")
    assert len(plain) == 5 and plain[3] is None  # no stats: None, not {}
    assert type(plain[1]) is int and type(plain[2]) is int and plain[1] <= plain[2]
    assert plain[4] == threading.get_ident()
    assert stats[3] == {"layer": 3, "kind": "attn"}


def test_same_clock_as_perf_counter_ns(rec):
    """Each record lies between perf_counter_ns() reads taken just before and after:
    a different clock (CLOCK_MONOTONIC_RAW, wall time) is off by far more than that."""
    brackets = []
    for _ in range(500):
        a = time.perf_counter_ns()
        with polyprof.section("tick"):
            pass
        brackets.append((a, time.perf_counter_ns()))
    got = named(rec, "tick")
    assert len(got) == len(brackets)
    for (a, b), (_, t0, t1, _, _) in zip(brackets, got):
        assert a <= t0 <= t1 <= b
    if recorder._fast is not None:
        for _ in range(100):
            a = time.perf_counter_ns()
            t = recorder._fast.now_ns()
            assert a <= t <= time.perf_counter_ns()


def test_attributes_and_arguments(section_impl):
    s = polyprof.section("x", layer=1)
    assert s.name == "x" and s.stats == {"layer": 1}
    assert polyprof.section(name="kw").name == "kw"
    assert polyprof.section("empty").stats == {}
    with pytest.raises(TypeError):
        polyprof.section()
    with pytest.raises(TypeError):
        polyprof.section("a", "b")
    with pytest.raises(TypeError):
        polyprof.section("a", name="b")
    assert type(s) is section_impl


def test_enter_returns_self_exit_lets_exceptions_through(rec):
    s = polyprof.section("raises")
    with pytest.raises(ValueError):
        with s as t:
            assert t is s
            raise ValueError("user error")
    assert len(named(rec, "raises")) == 1  # still recorded
    assert s.begin() is s and s.end() is None


def test_decorator_wraps_and_records_each_call(rec):
    @polyprof.section("deco", layer=2)
    def f(x: int) -> int:
        """Doubles."""
        if x < 0:
            raise KeyError(x)
        return 2 * x

    assert f(4) == 8 and f(5) == 10
    with pytest.raises(KeyError):
        f(-1)
    assert f.__name__ == "f" and f.__doc__ == "Doubles." and f.__wrapped__.__name__ == "f"
    assert f.__qualname__.endswith("test_decorator_wraps_and_records_each_call.<locals>.f")
    got = named(rec, "deco")
    assert len(got) == 3 and all(x[3] == {"layer": 2} for x in got)
    with pytest.raises(TypeError):
        polyprof.section("two")(f, f)


def test_reused_object_sequentially(rec):
    s = polyprof.section("again")
    for _ in range(3):
        with s:
            pass
    got = named(rec, "again")
    assert len(got) == 3
    assert all(a[2] <= b[1] for a, b in zip(got, got[1:]))  # one after the other


def test_reused_object_recursion(rec):
    s = polyprof.section("rec")

    def f(n: int) -> None:
        with s:
            if n:
                f(n - 1)

    f(4)
    got = sorted(named(rec, "rec"), key=lambda x: x[1])
    assert len(got) == 5
    for outer, inner in zip(got, got[1:]):  # each opening encloses the next one
        assert outer[1] <= inner[1] and inner[2] <= outer[2]


def test_reused_object_in_threads_at_once(rec):
    """A module-level section used by several threads at the same time: every opening
    is recorded once, on its thread, inside that thread's own bracket of the block."""
    attn = polyprof.section("attn")
    n_threads, n_iter = 4, 30
    start = threading.Barrier(n_threads)
    brackets: dict[int, list[tuple[int, int]]] = {}

    def work() -> None:
        mine = brackets.setdefault(threading.get_ident(), [])
        start.wait()
        for i in range(n_iter):
            a = time.perf_counter_ns()
            with attn:
                time.sleep(0.0002 * (i % 3))  # let the others in while this one is open
            mine.append((a, time.perf_counter_ns()))

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = named(rec, "attn")
    assert len(got) == n_threads * n_iter
    for ident, mine in brackets.items():
        recs = sorted((x for x in got if x[4] == ident), key=lambda x: x[1])
        assert len(recs) == n_iter
        for (a, b), (_, t0, t1, _, _) in zip(mine, recs):
            assert a <= t0 <= t1 <= b


def test_open_before_session_then_used_by_another_thread(rec):
    """The main thread entered with no recorder; another thread then opens the same
    object while recording. The main thread's exit must not close the other's opening."""
    s = polyprof.section("shared")
    recorder.activate(None)
    entered, main_left = threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def other() -> None:
        a = time.perf_counter_ns()
        with s:
            entered.set()
            main_left.wait(5)
        seen.append((threading.get_ident(), a, time.perf_counter_ns()))

    with s:  # no recorder: records nothing
        recorder.activate(rec)
        t = threading.Thread(target=other)
        t.start()
        assert entered.wait(5)
    left = time.perf_counter_ns()
    main_left.set()
    t.join()
    ((ident, a, b),) = seen
    ((_, t0, t1, _, tid),) = named(rec, "shared")
    assert tid == ident and a <= t0 and left <= t1 <= b  # closed by the other thread's exit


def test_nested_opening_after_the_slot_was_freed(rec):
    """Main's outer opening waits on its stack while another thread holds the object;
    that thread leaves, main opens it again inside: each exit closes the latest."""
    s = polyprof.section("nest")
    held, release = threading.Event(), threading.Event()

    def other() -> None:
        with s:
            held.set()
            release.wait(5)

    t = threading.Thread(target=other)
    t.start()
    assert held.wait(5)
    a = time.perf_counter_ns()
    with s:  # the other thread has the object: this opening goes to main's stack
        release.set()
        t.join()
        b = time.perf_counter_ns()
        with s:  # the object is free again: this one takes it
            pass
        c = time.perf_counter_ns()
    d = time.perf_counter_ns()
    mine = sorted((x for x in named(rec, "nest") if x[4] == threading.get_ident()), key=lambda x: x[1])
    assert len(named(rec, "nest")) == 3 and len(mine) == 2
    (_, o0, o1, _, _), (_, i0, i1, _, _) = mine
    assert a <= o0 <= b <= i0 <= i1 <= c <= o1 <= d


def test_begin_on_one_thread_end_on_another(rec):
    s = polyprof.section("handoff")
    opener: list[int] = []

    def begin() -> None:
        opener.append(threading.get_ident())
        s.begin()

    t = threading.Thread(target=begin)
    t.start()
    t.join()
    s.end()
    ((_, t0, t1, _, tid),) = named(rec, "handoff")
    assert t0 <= t1 and tid == opener[0]  # the thread that began it


def test_listeners_bracket_the_record(rec):
    calls: list[tuple[str, bool, int]] = []
    rec.listeners.append(lambda name, enter: calls.append((name, enter, time.perf_counter_ns())))
    with polyprof.section("a"):
        with polyprof.section("b"):
            pass
    assert [(n, e) for n, e, _ in calls] == [("a", True), ("b", True), ("b", False), ("a", False)]
    (a,) = named(rec, "a")
    assert calls[0][2] <= a[1] and a[2] <= calls[3][2]  # told before the start, after the end


def test_failing_listener_does_not_break_the_program(rec):
    def bad(name: str, enter: bool) -> None:
        raise RuntimeError("listener bug")

    rec.listeners.append(bad)
    with polyprof.section("survives"):
        pass
    assert len(named(rec, "survives")) == 1


def test_no_recorder_records_nothing(rec):
    recorder.activate(None)
    s = polyprof.section("idle")
    with s:
        pass
    s.begin()
    s.end()
    recorder.activate(rec)
    assert rec.sections == []
    with s:
        pass
    assert len(named(rec, "idle")) == 1


# ----------------------------------------------------------------- which implementation


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_extension_built_where_a_compiler_exists() -> None:
    """`pip install -e .` (CI) builds the extension into src/; a missing build would
    silently fall back to the slower pure-Python section."""
    if os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("POLYPROF_PURE_PYTHON is set")
    if _compiler() is None:
        pytest.skip("no C compiler: the fallback is expected")
    assert recorder.IMPLEMENTATION == "c"
    assert recorder.section is recorder._fast.section
    assert Path(recorder._fast.__file__).suffix in (".so", ".pyd")


def _run(code: str, **env: str) -> str:
    e = {**os.environ, **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=e)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


RECORDS = """
import polyprof
from polyprof.collect import recorder
with polyprof.profile(plugins=["host"]) as p:
    with polyprof.section("s"):
        pass
print(recorder.IMPLEMENTATION, type(polyprof.section).__name__, (p.trace.names() == "s").sum())
"""


def test_fallback_when_extension_missing() -> None:
    hide = 'import sys; sys.modules["polyprof.collect._fastsection"] = None\n'  # import fails
    assert _run(hide + RECORDS) == "python type 1"
    assert _run(RECORDS, POLYPROF_PURE_PYTHON="1") == "python type 1"
    if recorder._fast is not None:
        assert _run(RECORDS) == "c type 1"


def test_installed_copy_has_the_extension(tmp_path: Path) -> None:
    """Build a wheel from this checkout, install it in a directory, import it from there."""
    if _compiler() is None:
        pytest.skip("no C compiler")
    pytest.importorskip("setuptools")
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and importlib.util.find_spec("wheel") is None:
        pytest.skip("this setuptools cannot build wheels offline (needs >= 70.1 or the wheel package)")
    src = tmp_path / "src-copy"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "*.so", "*.pyd", "__pycache__", "tests", "bench", "examples"))
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
                   check=True, capture_output=True, timeout=600)
    (whl,) = wheels.glob("polyprof-*.whl")
    assert any("_fastsection" in n for n in zipfile.ZipFile(whl).namelist())
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(whl)],
                   check=True, capture_output=True, timeout=600)
    out = _run("import polyprof; print(polyprof.__file__)\n" + RECORDS, PYTHONPATH=str(target))
    where, result = out.splitlines()
    assert where.startswith(str(target)) and result == "c type 1"


def test_plugins_command_shows_the_implementation() -> None:
    r = subprocess.run([sys.executable, "-m", "polyprof", "plugins"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0
    expected = "compiled" if recorder.IMPLEMENTATION == "c" else "pure Python"
    assert f"sections: {expected}" in " ".join(r.stdout.split())



def test_growth_hook_runs_on_the_recording_thread_and_a_bad_one_turns_off(rec):
    """The crash journal's back-pressure (issue 34): ``set_growth(fn, at)`` calls fn on the
    thread that records once the list holds ``at`` sections; fn says when to call again.
    A hook that raises is turned off and the program never sees it."""
    import threading

    calls: list[tuple[int, int]] = []

    def hook() -> int:
        calls.append((len(rec.sections), threading.get_ident()))
        return len(rec.sections) + 10

    recorder.set_growth(hook, 5)
    try:
        for _ in range(30):
            with polyprof.section("g"):
                pass
        assert [n for n, _ in calls] == [5, 15, 25]
        assert {t for _, t in calls} == {threading.get_ident()}
        for _ in range(10):  # begin()/end() sections are looked at as well
            b = polyprof.section("g")
            b.begin()
            b.end()
        assert [n for n, _ in calls] == [5, 15, 25, 35]

        def bad() -> int:
            raise RuntimeError("hook broke")

        recorder.set_growth(bad, len(rec.sections) + 1)
        for _ in range(5):
            with polyprof.section("g"):
                pass
        assert len(named(rec, "g")) == 45  # every section recorded, nothing raised
        recorder.set_growth(hook, len(rec.sections) + 1)  # a new hook after a bad one works
        with polyprof.section("g"):
            pass
        assert calls[-1][0] == 46
    finally:
        recorder.set_growth(None, 0)


# ------------------------------------------- one track per thread, idents reused or not

#: threads one after another (each may get the ident CPython gave the one before: a
#: pthread_t, reused once a thread has exited), then two thread pools one after the
#: other; every thread records sections and a mark. Prints what each track should hold.
THREADS = """
import json, os, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
import polyprof

expected = {}  # "name tid" -> sections
lock = threading.Lock()

def work(name, n):
    t = threading.current_thread()
    for _ in range(n):
        with polyprof.section(name):
            pass
    polyprof.mark(name + " done")
    with lock:
        key = f"{t.name} {threading.get_native_id()}"
        expected[key] = expected.get(key, 0) + n

def gone(native_id):
    # the OS thread has ended: the next thread gets its stack, so its ident (a pthread_t)
    end = time.monotonic() + 2
    while os.path.exists(f"/proc/self/task/{native_id}") and time.monotonic() < end:
        time.sleep(0.001)
    time.sleep(0.002)

def one_after_another():
    idents = []
    for name, n in (("A", 3), ("B", 5)):
        t = threading.Thread(target=work, args=(name, n), name="worker-" + name)
        t.start(); t.join(); idents.append(t.ident)
        gone(t.native_id)
    idle = threading.Thread(target=time.sleep, args=(0.01,), name="idle-C")  # records nothing
    idle.start(); idle.join(); idents.append(idle.ident)
    return len(set(idents)) < len(idents)

def pools():
    for p in range(2):
        with ThreadPoolExecutor(2, thread_name_prefix=f"pool{p}") as ex:
            list(ex.map(lambda i: work("task", 2), range(10)))
        for key in list(expected):
            gone(key.split()[-1])

def main():
    reused = one_after_another()
    pools()
    return reused

if __name__ == "__main__":
    reused = main()
    json.dump({"expected": expected, "reused": reused}, open(sys.argv[1], "w"))
"""


def test_a_record_belongs_to_the_thread_born_last_with_its_ident() -> None:
    """The rule behind the tracks, with birth times given: a record's thread is the one
    born last with its ident at or before the record's start; a live thread seen later
    (a snapshot, its first mark) is the known one of that ident and OS id."""
    import numpy as np

    r = recorder.Recorder()
    assert r._note(9, "A", 200, 1000) == 9  # the first thread with ident 9: its ident is its key
    assert r._note(9, "B", 201, 2000) == -1  # ident 9 again, once A has ended: a key of its own
    assert r._note(9, "B renamed", 201, None) == -1  # B seen by a snapshot
    assert r._note(9, "A", 200, None) == 9  # a snapshot taken while A still ran, noted late
    assert r._note(5, "other", 300, None) == 5
    assert r._note(9, "C", 202, None) == -2  # not seen born (not a threading.Thread): born now
    keys = r.thread_keys(np.array([9, 9, 9, 5, 9]), np.array([500, 1999, 2000, 2500, 3000]))
    assert keys.tolist() == [9, 9, -1, 5, -1]
    assert r.threads == {9: ("A", 200), -1: ("B renamed", 201), 5: ("other", 300), -2: ("C", 202)}
    assert r.keyed_sections([("s", 2500, 2600, None, 9), ("t", 1, 2, None, 5)]) == [
        ("s", 2500, 2600, None, -1), ("t", 1, 2, None, 5)]
    fresh = recorder.Recorder()  # no ident had twice: the idents are the keys, the list is the same
    secs = [("s", 1, 2, None, 9)]
    assert fresh.keyed_sections(secs) is secs and fresh.thread_keys(np.array([9]), np.array([1])).tolist() == [9]


def _thread_sections(tr: Any) -> dict[str, int]:
    """'track name tid' -> the sections on that thread track."""
    got: dict[str, int] = {}
    for t in tr.events["track"][tr.categories() == keys.CAT_SECTION].tolist():
        key = f"{tr.tracks[t].name} {tr.tracks[t].tid}"
        got[key] = got.get(key, 0) + 1
    return got


def _marks_on_their_tracks(tr: Any) -> None:
    """Each thread's 'X done' mark is on a track that holds X's sections."""
    names, track = tr.names(), tr.events["track"]
    for m in ("A", "B", "task"):
        mark_tracks = set(track[names == m + " done"].tolist())
        assert mark_tracks and mark_tracks <= set(track[names == m].tolist()), m


def _load_program(tmp_path: Path) -> Any:
    prog = tmp_path / "threads_prog.py"
    prog.write_text(THREADS)
    spec = importlib.util.spec_from_file_location("threads_prog", prog)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reused_thread_idents_get_their_own_tracks_in_process(section_impl, tmp_path):
    """A thread that ends and a later one that gets its ident (threading.get_ident) are
    two tracks, each with its own name, OS thread id, sections and marks: the session's
    trace and the crash journal's alike (sections are recorded by ident)."""
    from polyprof.collect import journal
    from test_journal import snapshot_holding

    prog = _load_program(tmp_path)
    out = tmp_path / "inproc.polyprof"
    with polyprof.profile(plugins=["host"], output=out, options={"host": {"journal_interval_s": 0.05}}) as prof:
        reused = prog.main()
        # the journal's thread writes every 0.05 s, when the machine lets it: wait (bounded)
        # until it holds all the program's sections, not a fixed time
        snapshot_holding(journal.path_for(out), tmp_path / "snap.partial",
                         {"A": 3, "B": 5, "task": 2 * 10 * 2, "A done": 1, "B done": 1, "task done": 2 * 10})
    if sys.platform.startswith("linux"):  # else this test would not test anything
        assert reused, "no thread got the ident of one that had ended"
    for tr in (prof.trace, polyprof.load(tmp_path / "snap.partial")):
        got = _thread_sections(tr)
        assert {k: v for k, v in got.items() if not k.startswith("MainThread")} == prog.expected
        assert not any(k.startswith("idle-C") for k in got)
        _marks_on_their_tracks(tr)


def test_reused_thread_idents_get_their_own_tracks_under_polyprof_run(tmp_path):
    """The same program as users run it: ``python -m polyprof run prog.py``."""
    prog, result, out = tmp_path / "prog.py", tmp_path / "expected.json", tmp_path / "run.polyprof"
    prog.write_text(THREADS)
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(prog),
                        str(result)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    want = json.loads(result.read_text())
    tr = polyprof.load(out)
    got = _thread_sections(tr)
    assert {k: v for k, v in got.items() if not k.startswith("MainThread")} == want["expected"]
    assert sum(1 for k in got if k.startswith("pool")) == sum(1 for k in want["expected"] if k.startswith("pool"))
    _marks_on_their_tracks(tr)
