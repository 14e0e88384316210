"""The critical path from the thread that dispatched an XLA program on ONE device into the
program's run (``analyze/xla_links.launched_runs``, then ``launch_edges``), on real JAX
CPU programs run here.

On one device JAX 0.10.2's dispatch (``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice``)
names no ``run_id``: what ties it to the run is TSL's thread pool listener, a
``ThreadpoolListener::Record`` in the dispatch (a TraceMe producer, ``_pt`` 15 and ``_p``)
read by the ``ThreadpoolListener::StartRegion`` that the pool thread running the run records
before the run's first op (``_ct`` 15, ``_c`` the same id). Back from the run, the
Python thread's ``block_until_ready`` is a pair of ``CommonPjRtBuffer::Await`` of one
context (the wait's beginning, ``_p``, and its return, ``_c``): the run's end leads into
the return (``xla_links.await_edges``). Before those links nothing led from the Python
thread into a run, nor back: a step of ``load`` (a section) then a jitted call and
``block_until_ready`` had either ``load`` and the dispatch on its path, the run's ops
off it, or the ops alone, ``load`` off it (10 recordings of a program like the one
below, 8 steps each: ``load`` off the path in 9 of the 70 steps after the first, the
paths 23 to 99% of the steps, 72% in the median; now 45 to 99.9%, 99.7% in the median,
the 45% a step with 12 ms in no event at all).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.depgraph_context import context
from polyprof.analyze.xla_links import RUN_STAT
from polyprof.derive.intervals import union
from live import Recordings, checked

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")

TWO_JITS = Path(__file__).parent / "data" / "traces" / "jax_cpu_two_jits"
#: what jax_cpu_two_jits.py printed: its own time of each step (ms), per run (README.md)
TWO_JITS_STEPS = {"fast": [0.785, 0.358, 2.278, 0.418, 0.359, 1.035, 2.577, 0.411],
                  "slow": [1.227, 2.752, 4.449, 1.134, 0.747, 1.321, 4.711, 0.931]}
SINGLE = "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice"
AWAIT = "CommonPjRtBuffer::Await"

#: a JAX loop on the default (one) CPU device: a ``load`` section (a sleep and a small
#: NumPy matmul), then a jitted call blocking until it is ready, outside any section;
#: step 0 is the compiling call
PROGRAM = r"""
import time
import numpy as np
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
polyprof.step()
a = np.random.rand(120, 120)
for i in range(6):
    with polyprof.section("load"):
        time.sleep(0.002)
        b = a @ a
    step(w, x).block_until_ready()
    polyprof.step()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    pytest.importorskip("jax")
    return Recordings(_record, tmp_path_factory.mktemp("launch_one"))


def _record(tmp: Path) -> Path:
    (tmp / "prog.py").write_text(PROGRAM)
    out = tmp / "out.polyprof"
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "jax", "-o", str(out),
                        str(tmp / "prog.py")], capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_each_dispatch_is_given_the_run_its_pool_task_started(recorded: Recordings) -> None:
    """Per step 1 to 6: the step's one dispatch is given the ``run_id`` of the step's ops
    (``Context.launched_run``), and the graph has a launch edge from the Python thread,
    within the dispatch or at its end, into the run's pool thread, forward in time and at
    or before the run's first op; and one edge from the run's last op's end into the
    Python thread's return from ``block_until_ready`` (the ``CommonPjRtBuffer::Await``
    consuming the context of the one that began the wait, ``xla_links.await_edges``),
    weighing the time between, nobody's. (Before: neither edge on one device.)"""
    def check(path: Path) -> None:
        trace = polyprof.load(path)
        ctx = context(trace)
        number, lo, hi = step_windows(trace)
        run = ctx.stat(RUN_STAT)
        track = np.asarray(trace.events["track"], np.int64)
        unwaited: list[int] = []
        for k, t0, t1 in zip(number.tolist(), lo.tolist(), hi.tolist()):
            if k < 1:
                continue
            g = depgraph.build(trace, t0, t1, ctx)
            host = g.rows[~g.device]
            disp = host[ctx.names[host] == trace.string_id(SINGLE)]
            ops = host[ctx.xla_op[host]]
            assert len(disp) == 1 and len(ops) and len(set(run[ops].tolist())) == 1, k
            given = ctx.launched_run(disp, run[disp])
            assert given.tolist() == [int(run[ops][0])], k
            e = np.flatnonzero(g.etype == depgraph.LAUNCH)
            assert len(e) == 1, k
            src, dst = g.rows[g.src[e[0]] >> 1], g.rows[g.dst[e[0]] >> 1]
            d = disp[0]
            assert ctx.start[d] <= g.time[g.src[e[0]]] <= ctx.end[d], k
            assert g.time[g.src[e[0]]] <= g.time[g.dst[e[0]]] <= ctx.start[ops].min(), k
            first = ops[np.argmin(ctx.start[ops])]
            assert track[src] != track[first] and track[dst] == track[first], k
            # the run's end into the Python thread's return from ``block_until_ready``: from
            # the run's call that ended last by the return (its ops and the pool thread's wait
            # for them; on a loaded machine that wait may end after the thread returned)
            awaits = host[(ctx.names[host] == trace.string_id(AWAIT)) & (track[host] == track[d])]
            if not len(awaits):  # (JAX recorded no wait: the result was ready when asked for; seen on a loaded machine)
                unwaited.append(k)
                continue
            calls = host[(ctx.xla_op[host] | ctx.xla_wait[ctx.names[host]]) & (run[host] == run[ops][0])]
            ends = 2 * np.flatnonzero(np.isin(g.rows, calls)) + 1
            into = g.rows[g.dst >> 1]
            back = np.flatnonzero((g.etype == depgraph.SYNC) & np.isin(g.src, ends) & (track[into] == track[d])
                                  & (ctx.names[into] == trace.string_id(AWAIT)))
            assert len(back) == 1, k
            ret = g.rows[g.dst[back[0]] >> 1]
            assert trace.strings[int(ctx.names[ret])] == AWAIT and track[ret] == track[d], k
            end = int(ctx.end[g.rows[g.src[back[0]] >> 1]])
            assert end == int(ctx.end[calls][ctx.end[calls] <= ctx.start[ret]].max()), k
            assert g.time[g.dst[back[0]]] == ctx.start[ret] >= end, k
            assert g.weight[back[0]] == ctx.start[ret] - end and g.owner[back[0]] == -1, k
        assert len(unwaited) <= 1, unwaited  # (the back edge checked in the others)

    checked(recorded, check)


def test_load_then_the_run_are_on_the_path_in_every_step(recorded: Recordings) -> None:
    """Steps 1 to 6: ``load`` on the path with all its time, then the dispatch, the run's
    ops (the op ending last, all its time), then the Python thread's return from
    ``block_until_ready``: the path is 95% of the step's recorded time or more (the union
    of its events; time in no event at all, as a program descheduled on a loaded
    machine, is nobody's: 12 ms once here, between ``load`` and the jitted call) and
    of the step itself in the median. Before, ``load`` and the ops were never both on a
    step's path; with the launch alone, the thread's wake-up after the run (up to 11.5
    ms on a loaded 2-core machine) was off it (78.7% of a step). A recording the machine's load
    descheduled past that (a CI run at load 8) is taken again, at most twice
    (``tests/live.py``)."""
    def check(path: Path) -> None:
        failed = _path_shares(path)
        assert failed is None, failed

    checked(recorded, check)


def _path_shares(recorded: Path) -> str | None:
    """Why the recording fails the test above (None: it passes)."""
    trace = polyprof.load(recorded)
    cp = critical_path(trace)
    number, lo, hi = step_windows(trace)
    ratios = []
    for k in number[number >= 1].tolist():
        m = cp[cp["step"] == k]
        name = np.asarray(m["name"]).astype(str)
        start, dur, on = (np.asarray(m[c], np.int64) for c in ("start_ns", "dur_ns", "on_path_ns"))
        i = np.flatnonzero(name == "load")
        if not (len(i) == 1 and on[i[0]] == dur[i[0]] >= 2_000_000):
            return f"step {k}: load {on[i]} on the path of {dur[i]}"
        ops = np.char.find(name, "jit_step/") == 0
        last = np.flatnonzero(ops)[np.argmax((start + dur)[ops])]
        if not on[last] == dur[last] > 0:
            return f"step {k}: the last op {name[last]} not all on the path"
        a, b = int(lo[number == k][0]), int(hi[number == k][0])
        path = int(m["path_ns"][0])
        if path > int(m["span_ns"][0]) or path < 0.95 * _recorded(trace, a, b):
            return f"step {k}: path {path} of {_recorded(trace, a, b)} recorded, span {int(m['span_ns'][0])}"
        ratios.append(path / (b - a))
    if not (len(ratios) == 6 and float(np.median(ratios)) >= 0.95):
        return f"path shares of the steps: {ratios}"
    return None


def _recorded(trace: polyprof.Trace, a: int, b: int) -> int:
    """The time from ``a`` to ``b`` in some event of a thread (not the step marks)."""
    start = np.asarray(trace.events["start_ns"], np.int64)
    end = start + np.asarray(trace.events["dur_ns"], np.int64)
    real = np.array([t.kind != "derived" and t.name != "Steps" for t in trace.tracks], bool)
    r = np.flatnonzero(real[np.asarray(trace.events["track"], np.int64)] & (start < b) & (end > a) & (end > start))
    s, e = union(np.maximum(start[r], a), np.minimum(end[r], b))
    return int((e - s).sum())


@needs_jax
def test_a_profile_jax_records_itself_links_the_same(tmp_path: Path) -> None:
    """The same link on an XSpace ``jax.profiler.trace`` writes (no polyprof session):
    each of the 3 traced calls' dispatch is given the ``run_id`` of the ops run after
    it, each a different run."""
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda w, x: jnp.tanh(jnp.tanh(x @ w) @ w))\n"
        "w, x = jnp.ones((128, 128)) * 0.01, jnp.ones((256, 128))\n"
        "f(w, x).block_until_ready()\n"
        f"with jax.profiler.trace({str(tmp_path / 'prof')!r}):\n"
        "    for _ in range(3):\n"
        "        f(w, x).block_until_ready()\n")
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (xplane,) = sorted((tmp_path / "prof").rglob("*.xplane.pb"))
    trace = polyprof.load(xplane)
    ctx = context(trace)
    run = ctx.stat(RUN_STAT)
    disp = np.flatnonzero(ctx.names == trace.string_id(SINGLE))
    disp = disp[np.argsort(ctx.start[disp])]
    given = ctx.launched_run(disp, run[disp])
    ops = np.flatnonzero(ctx.xla_op)
    assert len(disp) == 3 and len(set(given.tolist())) == 3 and bool((given != -1).all())
    for d, r_id in zip(disp.tolist(), given.tolist()):
        mine = ops[run[ops] == r_id]  # (its run's ops: all after the dispatch began)
        assert len(mine) and int(ctx.start[mine].min()) >= int(ctx.start[d])


@pytest.mark.parametrize("run", ["fast", "slow"])
def test_the_paths_follow_the_programs_own_step_times(run: str) -> None:
    """tests/data/traces/jax_cpu_two_jits (two jitted calls a step, ``jax.profiler.trace``,
    one device): each step's path is 85% of the time the program measured for the step
    or more (fast run 87.7 to 97.3%, slow 93.9 to 98.3%), within the step's span. In the
    fast run's step 2 the Python thread returned from ``block_until_ready`` 2.05 ms after
    the runs ended: that edge, nobody's, is on the path. Before the dispatch led into its
    run and the run back to the waiting thread, the paths were the runs' ops alone: 5 to
    66% of the fast run's steps (0.115 of 2.278 ms in step 2)."""
    trace = polyprof.load(TWO_JITS / f"run_{run}.xplane.pb.gz")
    cp = critical_path(trace)
    step = np.asarray(cp["step"])
    path, span = (np.asarray(cp[c], np.int64) for c in ("path_ns", "span_ns"))
    for k, ms in enumerate(TWO_JITS_STEPS[run]):
        m = step == k
        assert 0.85 * ms * 1e6 <= int(path[m][0]) <= int(span[m][0]), (k, int(path[m][0]), ms)
    if run == "fast":
        number, lo, hi = step_windows(trace)
        g = depgraph.build(trace, int(lo[number == 2][0]), int(hi[number == 2][0]))
        back = np.flatnonzero((g.etype == depgraph.SYNC) & (g.weight > 2_000_000))
        assert len(back) == 1 and g.owner[back[0]] == -1
        assert trace.strings[int(np.asarray(trace.events["name"])[g.rows[g.dst[back[0]] >> 1]])] == AWAIT
