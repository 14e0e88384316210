"""A ``polyprof.section`` on the critical path (``analyze/depgraph_sections.py``: a
section's time in no op is its thread's; where its thread waited in it, for a thread it
started and joined or an XLA program it blocked on, it weighs what of it that work did not
cover, and the work leads back to its thread, ``thread_links.section_wait_edges``), on
real torch and JAX CPU programs recorded here under ``polyprof run``. (A section of the
thread's own work beside another thread's: ``tests/test_critical_path_section_waits.py``.)
A check a loaded machine's recording fails is tried on a fresh one (``tests/live.py``).

Before, the graph took host ops and runtime calls alone (HTA's rule): a step of
``with polyprof.section("load"): time.sleep(0.01)`` then a few small matmuls read
"critical path 1.31 ms of the step's 12 ms", the 10 ms section nowhere in the table.
Then (3f1239a) a section that waited (a ``join``, a ``block_until_ready``) gave its time
to the work it waited for, but that work led back to nothing: the path was the worker's
ops alone, or the section's load then nothing (8.4 of a 13.5 ms JAX step); a background
thread's periodic small op took a sleeping section off the path (busy from its first op
to its last); and the report's track drew a section's slice for its whole stretch, not
its weight (``load`` 15.0 ms on the track, 3.39 ms in the table).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.critical_path_track import TRACK, with_critical_path
from live import Recordings, checked

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

#: what the torch programs share: one intra-op thread, a 128x128 matrix, mm(n): n
#: matmul+tanh ops
TORCH_HEAD = r"""
import threading, time
import torch
import polyprof

torch.set_num_threads(1)
x = torch.randn(128, 128)


def mm(n):
    y = x
    for _ in range(n):
        y = torch.tanh(y @ x)
"""

#: steps 0-3: the step's time in a section, in no op, nothing else running; steps 4-7: the
#: same with a background thread doing one small matmul every 2 ms; steps 8-11: a section
#: the thread spends joining a worker thread running matmuls, then a few of its own
PROGRAM = TORCH_HEAD + r"""

stop = threading.Event()


def background():
    while not stop.is_set():
        mm(1)
        time.sleep(0.002)


bg = None
for i in range(12):
    if i == 4:
        bg = threading.Thread(target=background, daemon=True)
        bg.start()
    if i == 8:
        stop.set()
        bg.join()
    if i < 8:
        with polyprof.section("load"):
            time.sleep(0.012)
    else:
        with polyprof.section("wait"):
            t = threading.Thread(target=mm, args=(60,))
            t.start()
            t.join()
    mm(4)
    polyprof.step()
"""

#: a JAX loop: a ``load`` section sleeping 8 ms, then a ``compute`` section dispatching a
#: jitted function and blocking until it is ready (the audit's j1)
JAX_PROGRAM = r"""
import time
import jax, jax.numpy as jnp
import polyprof


@jax.jit
def step(w, x):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return x


w = jnp.ones((256, 256)) * 0.01
x = jnp.ones((512, 256))
step(w, x).block_until_ready()
for i in range(8):
    with polyprof.section("load"):
        time.sleep(0.008)
    with polyprof.section("compute"):
        step(w, x).block_until_ready()
    polyprof.step()
"""


#: a section joining a worker that pauses between bursts of matmuls (the verifier's gap
#: case): the main thread waits for every burst and every pause
BURST_PROGRAM = TORCH_HEAD + r"""

def worker():
    mm(10)
    time.sleep(0.006)
    mm(10)
    time.sleep(0.004)
    mm(10)


for i in range(6):
    with polyprof.section("wait"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    mm(2)
    polyprof.step()
"""


def _record(tmp: Path, program: str, plugins: tuple[str, ...] = ()) -> Path:
    (tmp / "prog.py").write_text(program)
    out = tmp / "out.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", *plugins, "-o", str(out), str(tmp / "prog.py")],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    return Recordings(lambda d: _record(d, PROGRAM), tmp_path_factory.mktemp("sections"))


@pytest.fixture(scope="module")
def burst_recorded(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    return Recordings(lambda d: _record(d, BURST_PROGRAM), tmp_path_factory.mktemp("sections_burst"))


@pytest.fixture(scope="module")
def jax_recorded(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    pytest.importorskip("jax")
    return Recordings(lambda d: _record(d, JAX_PROGRAM, ("--plugins", "jax")), tmp_path_factory.mktemp("sections_jax"))


def _step_ns(trace: polyprof.Trace, k: int) -> int:
    number, lo, hi = step_windows(trace)
    return int(hi[number == k][0] - lo[number == k][0])


def test_a_section_that_holds_the_step_is_on_the_path(recorded: Recordings) -> None:
    """Steps 1-3 (step 0 holds the program's start): the ``load`` section is on the path
    with all its time (12 ms or more), and the path is 75% of the step or more (before
    3f1239a: the matmuls alone, a few ms of ~16; 90% or more on a quiet machine, 79% once
    beside the suite's other worker, where the gaps between the ops grow)."""
    def check(path: Path) -> None:
        trace = polyprof.load(path)
        cp = critical_path(trace)
        for k in range(1, 4):
            m = cp[cp["step"] == k]
            i = np.flatnonzero(np.asarray(m["name"]) == "load")
            assert len(i) == 1, k
            on, dur = int(m["on_path_ns"][i[0]]), int(m["dur_ns"][i[0]])
            assert on == dur >= 12_000_000 and m["kind"][i[0]] == "annotation", k
            assert int(m["path_ns"][0]) >= 0.75 * _step_ns(trace, k), k

    checked(recorded, check)


def test_a_background_threads_small_ops_take_only_their_own_time(recorded: Recordings) -> None:
    """Steps 5-7 (step 4 starts the thread): a background thread runs one small matmul
    every 2 ms while ``load`` sleeps 12 ms. Its ops take only their own time from the
    section (before: the thread was busy from its first op in the section to its last,
    and ``load`` kept 3 to 6 of its 12 ms and more): ``load`` keeps 80% of its time on the
    path or more (all but the background thread's ops, about 1 ms), and the path is 80%
    of the step or more."""
    def check(path: Path) -> None:
        trace = polyprof.load(path)
        cp = critical_path(trace)
        ran = 0  # steps in which the background thread's ops are (a loaded machine may not run it in one)
        for k in range(5, 8):
            m = cp[cp["step"] == k]
            name, track = np.asarray(m["name"]), np.asarray(m["track"])
            ran += bool((track != "MainThread").any())
            i = np.flatnonzero(name == "load")[0]
            assert int(m["on_path_ns"][i]) >= 0.8 * int(m["dur_ns"][i]), k
            assert int(m["path_ns"][0]) >= 0.8 * _step_ns(trace, k), k
        assert ran, "the background thread ran in none of steps 5-7"

    checked(recorded, check)


def test_a_joined_workers_ops_then_the_threads_own_are_on_the_path(recorded: Recordings) -> None:
    """Steps 9-11: the ``wait`` section joins a worker thread running 60 matmuls, then the
    main thread runs 4 of its own. The path runs through the worker's ops and then the
    main thread's ops after the join (all of them: before, the path was the worker's ops
    alone, 37.9 of a 53.8 ms step, or the section's own time alone), and it is 80% of
    the step or more: the worker's start-up and exit are the section's own time. (A
    quarter of the worker's ops' time at least: the time between two of them is the
    section's own, and on a loaded machine, the worker descheduled between them, the
    path may run from the section into a later op of the worker, its time before that
    the section's.)"""
    def check(path: Path) -> None:
        trace = polyprof.load(path)
        cp = critical_path(trace)
        for k in range(9, 12):
            m = cp[cp["step"] == k]
            name, track = np.asarray(m["name"]), np.asarray(m["track"])
            start, dur, on = (np.asarray(m[c], np.int64) for c in ("start_ns", "dur_ns", "on_path_ns"))
            i = np.flatnonzero(name == "wait")[0]
            worker = track != "MainThread"
            after = ~worker & (start >= start[i] + dur[i])
            top = np.isin(name, ["aten::matmul", "aten::tanh"])  # (each step's top-level ops)
            assert int((top & worker).sum()) == 120 and int((top & after).sum()) == 8, k
            # (``on_path_ns`` is an op's own time, its children's theirs: the rows' sum is the ops')
            assert int(on[worker].sum()) >= 0.25 * int(dur[top & worker].sum()), k
            assert int(on[after].sum()) == int(dur[top & after].sum()) > 0, k
            assert int(m["path_ns"][0]) >= 0.8 * _step_ns(trace, k), k
            assert int(m["path_ns"][0]) <= int(m["span_ns"][0]), k

    checked(recorded, check)


def test_a_worker_pausing_between_bursts_has_every_burst_and_pause_on_the_path(burst_recorded: Recordings) -> None:
    """Steps 1-5: ``wait`` joins a worker running 10 matmuls, sleeping 6 ms, 10 more,
    sleeping 4 ms, 10 more. The section waits for all of it: the path runs through every
    burst, the pauses between as the section's own time, and is 90% of the step or more
    (before: the bursts or the pauses, never both, 18.95 of a 27.26 ms step, bursts 1
    and 3 off the path). The bursts: the worker's top-level ops split at their two
    largest gaps. (On a loaded machine the worker, descheduled between two ops, may
    leave a gap longer than a pause, and the path may run from the section into a
    later op of the worker, its time before that the section's, as in the test above:
    so two bursts of three at least, and 85% of the step: a CI run on 2 cores once
    failed the stricter checks.)"""
    def check(path: Path) -> None:
        trace = polyprof.load(path)
        cp = critical_path(trace)
        for k in range(1, 6):
            m = cp[cp["step"] == k]
            name, track = np.asarray(m["name"]), np.asarray(m["track"])
            start, dur, on = (np.asarray(m[c], np.int64) for c in ("start_ns", "dur_ns", "on_path_ns"))
            top = np.flatnonzero(np.isin(name, ["aten::matmul", "aten::tanh"]) & (track != "MainThread"))
            assert len(top) == 60, k
            top = top[np.argsort(start[top], kind="stable")]
            gaps = start[top[1:]] - (start + dur)[top[:-1]]
            cuts = np.sort(np.argsort(gaps)[-2:]) + 1
            assert sum(int(on[burst].sum()) > 0 for burst in np.split(top, cuts)) >= 2, k
            assert int(m["path_ns"][0]) >= 0.85 * _step_ns(trace, k), k
            assert int(m["path_ns"][0]) <= int(m["span_ns"][0]), k
            assert int(on.sum()) == int(m["path_ns"][0]) and bool((np.asarray(m["slack_ns"]) >= 0).all()), k
        track, table = _track_vs_table(trace)
        assert track == table

    checked(burst_recorded, check)


def test_a_jax_step_blocking_until_ready_runs_load_then_the_ops(jax_recorded: Recordings) -> None:
    """Steps 1-7 of the JAX loop: the path runs through ``load``, the dispatch, into the
    run it launched (its first op on the path: ``xla_links.launched_runs``), through the
    XLA ops the ``compute`` section blocked for (the run's last op, all its time), then
    the thread again: 95% of the step or more (99.6 to 99.8% in 6 recordings here; before:
    8.4 to 9.8 ms of 13.5 ms steps, ``load`` and the dispatch, the ops off the path with
    3.35 ms of slack; then the ops through the section's wait, but nothing led from the
    dispatch into the run, and ``load`` could be off the path)."""
    def check(path: Path) -> None:
        trace = polyprof.load(path)
        cp = critical_path(trace)
        for k in range(1, 8):
            m = cp[cp["step"] == k]
            name, kind = np.asarray(m["name"]), np.asarray(m["kind"])
            start, dur, on = (np.asarray(m[c], np.int64) for c in ("start_ns", "dur_ns", "on_path_ns"))
            i = np.flatnonzero(name == "load")[0]
            assert on[i] == dur[i] >= 8_000_000, k
            ops = np.char.find(name.astype(str), "jit_step/") == 0  # (the XLA ops, by their module)
            # the dispatch leads into the run (its first op: on the path, its own time, which
            # is its time outside a pool wait nested in it) and the run's last op back to the thread
            first = np.flatnonzero(ops)[np.argmin(start[ops])]
            last = np.flatnonzero(ops)[np.argmax((start + dur)[ops])]
            assert on[first] > 0 and on[last] == dur[last] > 0, (k, name[first], name[last], kind[last])
            assert int(m["path_ns"][0]) >= 0.95 * _step_ns(trace, k), k

    checked(jax_recorded, check)


def _track_vs_table(trace: polyprof.Trace) -> tuple[dict, dict]:
    """Per (step, name): the critical path track's time (``with_critical_path``, what every
    writer draws) and the ``critical_path`` table's ``on_path_ns``."""
    cp = critical_path(trace)
    table: dict[tuple[int, str], int] = {}
    for k, n, v in zip(np.asarray(cp["step"]).tolist(), np.asarray(cp["name"]).tolist(),
                       np.asarray(cp["on_path_ns"], np.int64).tolist()):
        if v:
            table[(k, n)] = table.get((k, n), 0) + v
    t = with_critical_path(trace)
    ev = t.events
    tracks = [i for i, tr in enumerate(t.tracks) if tr.name.startswith(TRACK) and tr.kind == "derived"]
    rows = np.flatnonzero(np.isin(np.asarray(ev["track"], np.int64), tracks))
    steps = np.asarray(t.stat_dense("step", -1))[rows]
    track: dict[tuple[int, str], int] = {}
    names, durs = np.asarray(ev["name"], np.int64)[rows], np.asarray(ev["dur_ns"], np.int64)[rows]
    for j in range(len(rows)):
        key = (int(steps[j]), t.strings[int(names[j])])
        track[key] = track.get(key, 0) + int(durs[j])
    return track, table


def test_the_track_agrees_with_the_table(recorded: Recordings) -> None:
    """The critical path track (HTML report, exports) gives each event the time the table
    gives it, a section whose weight is cut included (before: the track drew the section's
    whole stretch, ``load`` 15.0 ms where the table had 3.39 ms)."""
    def check(path: Path) -> None:
        track, table = _track_vs_table(polyprof.load(path))
        assert track == table
        assert any(n == "load" and 5 <= k < 8 for k, n in track)

    checked(recorded, check)
