"""The JAX plugin on a real jax.jit training loop (JAX on the CPU backend)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import polyprof
from polyprof.errors import PluginStateError
from polyprof.plugins.jax import JaxPlugin
from polyprof.trace import keys
from polyprof.trace.metadata_keys import plugin_fit

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

STEPS = 4


def _mlp():
    def init(key, sizes):
        params = []
        for m, n in zip(sizes[:-1], sizes[1:]):
            key, k = jax.random.split(key)
            params.append((jax.random.normal(k, (m, n)) * 0.1, jnp.zeros(n)))
        return params

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jnp.tanh(h @ w + b)
        w, b = params[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    @jax.jit
    def train_step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)], value

    return init(jax.random.PRNGKey(0), [64, 128, 128, 1]), train_step


@pytest.fixture(scope="module")
def session():
    params, train_step = _mlp()
    y = jnp.ones((256, 1))
    params, loss = train_step(params, jnp.ones((256, 64)), y)  # compile outside the session
    loss.block_until_ready()
    rng = np.random.default_rng(0)
    with polyprof.profile(plugins=["jax"]) as prof:
        for i in range(STEPS):
            with polyprof.section("data"):
                x = jnp.asarray(rng.random((256, 64), dtype=np.float32))
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                with polyprof.section("train_step"):
                    params, loss = train_step(params, x, y)
                    loss.block_until_ready()
            polyprof.step()
    return prof


def _intervals(trace, rows):
    return np.stack([trace.start_ns[rows], trace.end_ns[rows]], axis=1)


def test_plugin_ran_and_kept_the_session_clock(session) -> None:
    trace = session.trace
    assert trace.metadata["plugins"] == {"host": "ok", "jax": "ok"}
    assert trace.metadata["plugin_errors"] == []
    assert trace.metadata["clock"] == "CLOCK_MONOTONIC"  # the session's, not the XSpace's
    sync = plugin_fit(trace.metadata, "jax")
    assert sync["method"] == "traceme_bracket"
    assert 0 <= sync["uncertainty_ns"] < 100_000
    # the markers that measured the offset are not left in the trace
    assert not any(n.startswith("polyprof.clock_sync") for n in trace.names())
    # JAX's host plane and polyprof's are one plane
    assert [p.name for p in trace.planes].count(keys.HOST_PLANE) == 1


def test_sections_xla_ops_modules_and_steps(session) -> None:
    trace = session.trace
    names, cats = trace.names(), trace.categories()
    assert (names[cats == keys.CAT_SECTION] == "train_step").sum() == STEPS
    assert (names[cats == keys.CAT_SECTION] == "data").sum() == STEPS
    ops = np.flatnonzero(cats == "xla_op")
    assert len(ops) >= STEPS * 3
    mask, modules = trace.stats[keys.HLO_MODULE].lookup(ops)
    assert mask.all()
    assert "jit_train_step" in set(modules)
    mask, hlo = trace.stats[keys.HLO_OP].lookup(ops)
    assert mask.all() and any("dot" in h for h in hlo)
    assert trace.stats[keys.PROGRAM_ID].lookup(ops)[0].all()
    # StepTraceAnnotation -> step events with their numbers
    step = trace.stats[keys.STEP]
    jax_steps = step.rows[names[step.rows] == "train"]
    assert sorted(step.lookup(jax_steps)[1].tolist()) == list(range(STEPS))
    assert set(cats[jax_steps]) == {keys.CAT_STEP}


def test_jitted_ops_inside_the_window_and_their_section(session) -> None:
    trace = session.trace
    names, cats = trace.names(), trace.categories()
    s = trace.metadata["session"]
    jax_rows = np.flatnonzero(cats != keys.CAT_SECTION)
    jax_rows = jax_rows[np.isin(cats[jax_rows], ["xla_op", "traceme"])]
    assert trace.start_ns[jax_rows].min() >= s["start_ns"]
    assert trace.end_ns[jax_rows].max() <= s["stop_ns"]
    sections = _intervals(trace, np.flatnonzero((cats == keys.CAT_SECTION) & (names == "train_step")))
    ops = np.flatnonzero(cats == "xla_op")
    modules = trace.stats[keys.HLO_MODULE].lookup(ops)[1]
    step_ops = ops[modules == "jit_train_step"]
    inside = [((sections[:, 0] <= a) & (b <= sections[:, 1])).any() for a, b in _intervals(trace, step_ops)]
    assert np.mean(inside) >= 0.9, np.mean(inside)
    for a, b in sections:  # every step ran some of its ops inside its section
        assert ((trace.start_ns[step_ops] >= a) & (trace.end_ns[step_ops] <= b)).any()
    # and the JAX step annotation i encloses polyprof's section i (same thread, nested)
    unc = plugin_fit(trace.metadata, "jax")["uncertainty_ns"]
    jax_steps = _intervals(trace, np.flatnonzero((names == "train") & (cats == keys.CAT_STEP)))
    jax_steps = jax_steps[np.argsort(jax_steps[:, 0])]
    for (sa, sb), (a, b) in zip(jax_steps, sections[np.argsort(sections[:, 0])]):
        assert sa - unc <= a and b <= sb + unc


def test_availability_and_lifecycle(monkeypatch: pytest.MonkeyPatch) -> None:
    assert JaxPlugin.availability().ok
    assert JaxPlugin.default is False and JaxPlugin.device_kinds == ("CPU", "GPU", "TPU")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "jax" else real(n, *a))
    av = JaxPlugin.availability()
    assert not av.ok and "jax" in av.reason
    monkeypatch.undo()
    p = JaxPlugin()
    with pytest.raises(PluginStateError):
        p.stop()
    with pytest.raises(PluginStateError):
        p.collect()


def test_keep_logdir_for_xprof(tmp_path) -> None:
    x = jnp.ones((32, 32))
    f = jax.jit(lambda a: (a @ a).sum())
    f(x).block_until_ready()
    with polyprof.profile(plugins=["jax"], options={"jax": {"keep_logdir": str(tmp_path)}}) as prof:
        with polyprof.section("matmul"):
            f(x).block_until_ready()
    assert prof.trace is not None
    kept = prof.trace.metadata["jax"]["xplane"]
    assert kept.startswith(str(tmp_path)) and kept.endswith(".xplane.pb")
    assert polyprof.load(kept).n_events > 0


def test_jax_profiler_already_running_is_skipped_with_a_warning(tmp_path) -> None:
    """Only one jax.profiler trace can run: with the program's own running when the
    session starts, the plugin records no JAX, says so, and leaves the program's trace
    alone (its stop_trace still stops it; polyprof's stop did not)."""
    with jax.profiler.trace(str(tmp_path)):
        with polyprof.profile(plugins=["jax"]) as prof:
            with polyprof.section("work"):
                jnp.ones(8).block_until_ready()
        assert jax._src.profiler._profile_state.profile_session is not None, "the program's trace runs on"
    assert list(tmp_path.glob("plugins/profile/*/*.xplane.pb")), "the program's trace has its profile"
    trace = prof.trace
    assert trace is not None
    assert trace.metadata["plugins"]["jax"] == "ok" and trace.metadata["plugin_errors"] == []
    assert [w for w in trace.metadata["warnings"] if "own jax.profiler trace was running" in w]
    assert trace.metadata["jax"]["jax_used"] and "program_trace" in trace.metadata["jax"]
    assert "work" in set(trace.names())


def test_plugin_never_collected_leaves_no_temp_dir():
    """(JAX's backends made first: the plugin begins recording, and makes its folder, at
    its start only where they exist; this test ran after others that had made them.)"""
    import gc
    import os

    import jax

    from polyprof.collect.clock import now_ns, wall_anchor
    from polyprof.collect.plugin import SessionContext
    from polyprof.plugins.jax import JaxPlugin

    jax.devices()
    p = JaxPlugin()
    p.start(SessionContext(start_ns=now_ns(), wall_anchor=wall_anchor()))
    d = p._logdir
    assert os.path.isdir(d)
    p.stop()
    del p
    gc.collect()
    assert not os.path.exists(d)


_DEVICES = """\
import os, sys
{before}
import jax
{after}
import jax.numpy as jnp
print(jax.device_count())
print(float(jax.jit(lambda a: jnp.tanh(a @ a).sum())(jnp.ones((32, 32)))))
"""


@pytest.mark.parametrize("before, after", [
    ('os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"', ""),
    ("", 'jax.config.update("jax_num_cpu_devices", 4)'),
], ids=["xla_flags_before_import", "config_after_import"])
def test_the_program_chooses_its_devices(tmp_path, before: str, after: str) -> None:
    """The program sets up JAX's backends before its first JAX call; the plugin starts
    jax.profiler (which makes the backends) only then. Started with the session, it made
    them first: one CPU device where the program asked for four (XLA_FLAGS set in the
    script), or a RuntimeError from jax.config.update raised into the program."""
    import subprocess
    import sys

    script = tmp_path / "devices.py"
    script.write_text(_DEVICES.format(before=before, after=after))
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,jax",
                        "-o", str(tmp_path / "d.polyprof"), str(script)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "4", p.stdout
    t = polyprof.load(tmp_path / "d.polyprof")
    assert any("tanh" in str(n) for n in set(t.names().tolist())), "the jitted call was recorded"


def test_a_program_that_never_uses_jax(tmp_path) -> None:
    """Nothing of JAX is started (not even imported) for a program that does not use it,
    and the session says so instead of failing the plugin."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint('jax' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,jax",
                        "-o", str(tmp_path / "p.polyprof"), str(script)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "False", (p.stdout, p.stderr)
    t = polyprof.load(tmp_path / "p.polyprof")
    assert t.metadata["jax"] == {"jax_used": False}
    assert not [w for w in t.metadata.get("warnings", []) if "jax" in str(w)], t.metadata.get("warnings")


def test_jax_calls_are_on_the_programs_thread(session) -> None:
    """JAX numbers its host threads by a hash of its own and names the main one after the
    process: the main thread's JAX calls were a thread of their own ("polyprof",
    -7129835086377936097), apart from the sections made on it. Its line now has the OS
    thread id and name, so sections and JAX calls are one thread."""
    import threading

    from polyprof.derive.memo import threads

    trace = session.trace
    names, cats = trace.names(), trace.categories()
    thread_of = threads(trace)[trace.events["track"]]
    section = np.flatnonzero((cats == keys.CAT_SECTION) & (names == "train_step"))
    pjit = np.flatnonzero(np.char.startswith(names.astype(str), "PjitFunction"))
    assert len(pjit) >= STEPS
    assert set(thread_of[section].tolist()) == set(thread_of[pjit].tolist())
    line = trace.tracks[int(trace.events["track"][pjit[0]])]
    assert (line.tid, line.name) == (threading.get_native_id(), "MainThread (jax)")


# ---------------------------------------------------------------- the program's own jax.profiler trace
_OWN_TRACE = """\
import glob, os, sys
import jax, jax.numpy as jnp
own = sys.argv[1]
f = jax.jit(lambda a: jnp.tanh(a @ a).sum())
{warm}
{body}
print(len(glob.glob(os.path.join(own, "plugins", "profile", "*", "*.xplane.pb"))))
try:
    jax.profiler.stop_trace()
except RuntimeError as e:
    print("stop:", e)
"""
_WARM = 'print("warm", float(f(jnp.ones((16, 16)))))'
_BODIES = {
    "trace_context": "with jax.profiler.trace(own):\n    print('own', float(f(jnp.full((16, 16), 0.5))))",
    "start_stop": ("jax.profiler.start_trace(own)\nprint('own', float(f(jnp.full((16, 16), 0.5))))\n"
                   "jax.profiler.stop_trace()"),
}


def _run_program(tmp_path, name: str, warm: bool, polyprof_run: bool):
    import os
    import subprocess
    import sys

    script = tmp_path / f"{name}.py"
    script.write_text(_OWN_TRACE.format(warm=_WARM if warm else "", body=_BODIES[name]))
    own = tmp_path / ("own_pp" if polyprof_run else "own_plain")
    out = tmp_path / f"{name}.polyprof"
    cmd = ([sys.executable, "-m", "polyprof", "run", "--no-summary", "--plugins", "host,jax", "-o", str(out)]
           if polyprof_run else [sys.executable])
    p = subprocess.run(cmd + [str(script), str(own)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return p, own, out


def _own_profile(own) -> set[str]:
    files = list(own.glob("plugins/profile/*/*.xplane.pb"))
    assert len(files) == 1, files
    return set(polyprof.load(files[0]).names().tolist())


@pytest.mark.parametrize("warm", [True, False], ids=["polyprof_recording", "first_jax_call"])
@pytest.mark.parametrize("name", sorted(_BODIES))
def test_the_programs_own_jax_trace_works_under_polyprof(tmp_path, name: str, warm: bool) -> None:
    """JAX runs one trace at a time. A program that starts its own (``jax.profiler.trace``,
    ``start_trace``) under ``polyprof run --plugins jax`` got "RuntimeError: Profile has
    already been started" (polyprof's trace began at its first JAX call), or hung when
    that call was its first JAX call (JAX's start_trace makes the backends while holding
    its lock; the plugin's start waited for that lock). Now polyprof's JAX recording ends
    (what it holds is kept) or never begins, with a warning, and the program's call, its
    output and its own profile are what plain python gives."""
    plain, own_plain, _ = _run_program(tmp_path, name, warm, polyprof_run=False)
    assert plain.returncode == 0, plain.stderr
    p, own, out = _run_program(tmp_path, name, warm, polyprof_run=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == plain.stdout
    assert p.stdout.splitlines()[-2:] == ["1", "stop: No profile started"]
    assert "own jax.profiler trace" in p.stderr, p.stderr
    names = _own_profile(own)
    assert "PjitFunction(<lambda>)" in names and "PjitFunction(<lambda>)" in _own_profile(own_plain)
    assert not [n for n in names if n.startswith("polyprof.")], "none of polyprof's markers in the program's profile"
    t = polyprof.load(out)
    assert t.metadata["plugins"]["jax"] == "ok", t.metadata["plugin_errors"]
    assert [w for w in t.metadata["warnings"] if "own jax.profiler trace" in w]
    assert "own jax.profiler trace" in t.metadata["jax"]["program_trace"]
    if warm:  # polyprof's recording until the program's trace began is kept
        assert "PjitFunction(<lambda>)" in set(t.names().tolist())
        assert plugin_fit(t.metadata, "jax")["method"] == "traceme_bracket"


def test_the_programs_stop_trace_leaves_polyprofs_trace(tmp_path) -> None:
    """The program's ``stop_trace()`` while only polyprof's trace runs raises as under plain
    python (no profile of the program's is running) and ends nothing of polyprof's."""
    f = jax.jit(lambda a: (a * 3).sum())
    f(jnp.ones(8)).block_until_ready()
    with polyprof.profile(plugins=["jax"]) as prof:
        with pytest.raises(RuntimeError, match="No profile started"):
            jax.profiler.stop_trace()
        with polyprof.section("after"):
            f(jnp.ones(8)).block_until_ready()
    trace = prof.trace
    assert trace is not None
    assert trace.metadata["plugins"]["jax"] == "ok" and "program_trace" not in trace.metadata["jax"]
    assert "PjitFunction(<lambda>)" in set(trace.names().tolist())
    assert jax.profiler.start_trace is jax._src.profiler.start_trace  # jax's own functions back
    assert jax.profiler.stop_trace.__module__ == "jax._src.profiler"


# ---------------------------------------------------------------- pause and resume
class _Kept(JaxPlugin):
    """The JAX plugin, keeping the part it hands over (the raw events, before the
    session's cut to a window or a schedule's stretches)."""

    part = None

    def _collect(self):
        self.part = super()._collect()
        return self.part


def _calls_in(trace, section_name):
    """The PjitFunction calls inside each opening of section ``section_name`` (per opening)."""
    names, cats = trace.names(), trace.categories()
    pjit = np.flatnonzero(names == "PjitFunction(<lambda>)")
    spans = _intervals(trace, np.flatnonzero((cats == keys.CAT_SECTION) & (names == section_name)))
    return [int(((trace.start_ns[pjit] >= a) & (trace.end_ns[pjit] <= b)).sum()) for a, b in spans]


def test_paused_stretches_are_not_recorded_and_threads_keep_their_names() -> None:
    """Paused before the session starts (a window's delay), resumed and paused twice, the
    plugin hands over the two resumed stretches only: each one recording of JAX's
    profiler, the paused calls in none. The resumes and pauses come from another thread
    (a window's timer): the program's thread line is still named after it (the warm-up
    at the first JAX call, on that thread). Before, the plugin had no pause(): JAX's
    profiler recorded the whole session, and the session dropped what lay outside."""
    import threading

    f = jax.jit(lambda a: jnp.tanh(a @ a))
    x = f(jnp.ones((32, 32))).block_until_ready()

    def on_another_thread(fn):
        t = threading.Thread(target=fn, name="polyprof-window")
        t.start()
        t.join()

    p = _Kept()
    p.pause()
    with polyprof.profile(plugins=[p]) as prof:
        for _ in range(2):
            with polyprof.section("paused"):
                x = f(x).block_until_ready()
            on_another_thread(p.resume)
            with polyprof.section("recorded"):
                x = f(f(x)).block_until_ready()
            on_another_thread(p.pause)
        with polyprof.section("paused"):
            x = f(x).block_until_ready()
    part, trace = p.part, prof.trace
    assert trace.metadata["plugins"]["jax"] == "ok", trace.metadata["plugin_errors"]
    stretches = part.metadata["jax"]["recorded_ns"]
    assert len(stretches) == 2 and all(a < b for a, b in stretches)
    # each between the calls of JAX's start and stop (its stop halts its tracers within ms)
    slack = plugin_fit(trace.metadata, "jax")["uncertainty_ns"] + 100_000_000
    inside = np.zeros(part.n_events, bool)
    for a, b in stretches:
        inside |= (part.start_ns >= a - slack) & (part.end_ns <= b + slack)
    assert inside.all(), f"{int((~inside).sum())} of {part.n_events} raw events outside the recorded stretches"
    recorded = _calls_in(trace, "recorded")  # (JAX nests two PjitFunction events per call)
    assert recorded[0] >= 2 and recorded == [recorded[0]] * 2
    assert _calls_in(trace, "paused") == [0, 0, 0]
    pjit = np.flatnonzero(trace.names() == "PjitFunction(<lambda>)")
    lines = {(trace.tracks[int(t)].tid, trace.tracks[int(t)].name) for t in trace.events["track"][pjit]}
    assert lines == {(threading.get_native_id(), "MainThread (jax)")}
    assert not any(n.startswith("polyprof.clock_sync") for n in trace.names())
    assert not [t.name for t in trace.tracks if t.name.startswith("polyprof-window")], "no line of markers only"


def test_a_schedule_records_each_active_stretch() -> None:
    """A schedule of two cycles (wait 1 step, record 1): two recordings, each holding its
    active step's calls and nothing of the wait steps'."""
    f = jax.jit(lambda a: jnp.tanh(a @ a))
    x = f(jnp.ones((32, 32))).block_until_ready()
    p = _Kept()
    with polyprof.profile(plugins=[p], schedule=polyprof.schedule(wait=1, active=1, repeat=2)) as prof:
        for i in range(5):
            with polyprof.section(f"step{i}"):
                x = f(x).block_until_ready()
            polyprof.step()
    trace = prof.trace
    assert trace.metadata["schedule"]["recorded_steps"] == [1, 3]
    assert len(p.part.metadata["jax"]["recorded_ns"]) == 2
    (one,), (three,) = [_calls_in(trace, f"step{i}") for i in (1, 3)]
    assert one > 0 and one == three
    windows = trace.metadata["schedule"]["windows_ns"]
    pjit = np.flatnonzero(p.part.names() == "PjitFunction(<lambda>)")
    in_any = np.zeros(len(pjit), bool)
    for a, b in windows:
        in_any |= (p.part.start_ns[pjit] >= a) & (p.part.end_ns[pjit] <= b)
    assert in_any.all() and len(pjit) == one + three, "the wait steps' calls are not recorded"


def test_the_programs_trace_while_paused_ends_polyprofs_recording(tmp_path) -> None:
    """The program starts its own trace while polyprof's is paused: polyprof's does not
    resume (JAX runs one trace at a time), says so, and keeps what it recorded; the
    program's trace records as under plain python."""
    @jax.jit
    def before(a):
        return (a * 3).sum()

    @jax.jit
    def during(a):
        return (a * 2).sum()

    before(jnp.ones(8)).block_until_ready()
    during(jnp.ones(8)).block_until_ready()
    p = _Kept()
    with polyprof.profile(plugins=[p]) as prof:
        before(jnp.ones(8)).block_until_ready()
        p.pause()
        jax.profiler.start_trace(str(tmp_path))
        p.resume()
        during(jnp.ones(8)).block_until_ready()
        jax.profiler.stop_trace()
        p.resume()
        during(jnp.ones(8)).block_until_ready()
    assert len(list(tmp_path.glob("plugins/profile/*/*.xplane.pb"))) == 1
    trace = prof.trace
    assert trace.metadata["plugins"]["jax"] == "ok", trace.metadata["plugin_errors"]
    assert len(p.part.metadata["jax"]["recorded_ns"]) == 1
    assert "recording ended there" in trace.metadata["jax"]["program_trace"]
    names = set(trace.names().tolist())
    assert "PjitFunction(before)" in names and "PjitFunction(during)" not in names
    assert "PjitFunction(during)" in _own_profile(tmp_path)
