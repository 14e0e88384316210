"""A time window (``polyprof run --delay D --duration T``) over real torch and JAX CPU
programs, run as a user runs them: what the plugins record in it, and why, when it is
empty (collect/schedule.py ``Timed``, plugins/torch/plugin.py, plugins/jax.py).

Each program times its steps to the window (the session's ``open_ns``, on the same
clock as ``time.perf_counter_ns()``), so a loaded machine changes only how long its
set-up takes: a set-up that ends after the window opened leaves nothing to check, and
the test is skipped (said on its stdout as ``LATE``).

Before: torch's first profiler start (Kineto's initialisation, 1.5-2 s on a loaded
2-core machine) came at the first step boundary in the window, so a 0.6 s window
recorded no torch op; a JAX program whose first JAX call came after the window closed
(``import jax`` takes seconds) wrote "0 events" and no word of why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.collect import options as opts
from polyprof.trace.metadata_keys import plugin_fit

SRC = Path(__file__).resolve().parents[1] / "src"

#: steps timed to the window (ms from its opening), torch ops between them, no section
TORCH = """
import sys, time
import polyprof
from polyprof.collect.session import active_session
import torch
torch.set_num_threads(1)
a = torch.randn(64, 64)
a = torch.tanh(a @ a)
MS = 1_000_000
open_ns = active_session()._driver.open_ns
print("LATE" if time.perf_counter_ns() > open_ns - 300 * MS else "ON TIME", flush=True)
for k in [int(x) for x in sys.argv[1].split(",")]:
    while time.perf_counter_ns() < open_ns + k * MS:
        a = torch.tanh(a @ a)
    polyprof.step()
"""

#: a jitted function in steps timed to the window, a section around each step's calls
JAX = """
import sys, time
import polyprof
from polyprof.collect.session import active_session
import jax, jax.numpy as jnp
f = jax.jit(lambda a: jnp.tanh(a @ a))
x = f(jnp.ones((64, 64))).block_until_ready()
MS = 1_000_000
open_ns = active_session()._driver.open_ns
print("LATE" if time.perf_counter_ns() > open_ns - 300 * MS else "ON TIME", flush=True)
for k in (-100, 100, 300, 500, 700, 900):
    with polyprof.section("work"):
        while time.perf_counter_ns() < open_ns + k * MS:
            x = f(x).block_until_ready()
    polyprof.step()
"""

#: JAX imported and used only after the window closed (as a slow `import jax` does)
JAX_LATE = """
import time
from polyprof.collect.session import active_session
drv = active_session()._driver
while time.perf_counter_ns() < drv.close_ns + 200_000_000:
    time.sleep(0.01)
import jax, jax.numpy as jnp
x = jax.jit(lambda a: a * 2)(jnp.ones(8)).block_until_ready()
"""


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in opts.NAMES:
        monkeypatch.delenv(opts.env_name(name), raising=False)


#: ``polyprof run`` itself (``polyprof.cli.entry``, as ``python -m polyprof``), with the JAX
#: plugin's part (the raw events it hands over, before the session cuts them to the
#: window) summed up in the JSON file named by its first argument
RUN_KEEPING_JAX_PART = """
import json, sys
from polyprof.plugins.jax import JaxPlugin
out, sys.argv = sys.argv[1], ["polyprof", *sys.argv[2:]]
collect = JaxPlugin._collect
def kept(self):
    part = collect(self)
    ends = part.start_ns + part.dur_ns
    with open(out, "w") as f:
        json.dump({"n": int(part.n_events), "first": int(part.start_ns.min()), "last": int(ends.max()),
                   "recorded_ns": part.metadata["jax"].get("recorded_ns")}, f)
    return part
JaxPlugin._collect = kept
from polyprof.cli import entry
entry()
"""


def _run(tmp_path: Path, script: str, flags: list[str], argv: tuple[str, ...] = (),
         jax_part: Path | None = None) -> polyprof.Trace:
    """The trace of ``polyprof run FLAGS script ARGV``; ``jax_part``: a JSON file for the JAX
    plugin's raw part (``RUN_KEEPING_JAX_PART``)."""
    path = tmp_path / "prog.py"
    path.write_text(script)
    out = tmp_path / "prog.polyprof"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-m", "polyprof"]
    if jax_part is not None:
        (tmp_path / "run_keeping_jax_part.py").write_text(RUN_KEEPING_JAX_PART)
        cmd = [sys.executable, str(tmp_path / "run_keeping_jax_part.py"), str(jax_part)]
    r = subprocess.run([*cmd, "run", "--no-summary", "-o", str(out), *flags, str(path), *argv],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    if "LATE" in r.stdout:
        pytest.skip("the program's set-up ended after the window opened (a loaded machine): nothing to check")
    return polyprof.load(out)


def _warnings(t: polyprof.Trace) -> list[str]:
    return [w if isinstance(w, str) else f"{w['plugin']}: {w['message']}" for w in t.metadata.get("warnings", [])]


def _inside(t: polyprof.Trace, rows: np.ndarray) -> np.ndarray:
    """The rows of ``rows`` (a mask) that begin inside the window."""
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    s = t.events["start_ns"]
    return np.flatnonzero(rows & (s >= lo) & (s < hi))


@pytest.mark.parametrize("plugins", [[], ["--plugins", "host,torch"]], ids=["default", "named"])
def test_torch_ops_in_a_window_shorter_than_torch_s_first_start(tmp_path, plugins):
    """Window 0-600 ms, step boundaries at -100, 100, 300, 500, 700 and 900 ms: torch
    resumes at 100 ms and records steps 2 and 3 whole. Before, its first start there
    (Kineto's initialisation) outlasted the window: no torch op, no recorded step."""
    pytest.importorskip("torch")
    t = _run(tmp_path, TORCH, [*plugins, "--delay", "10", "--duration", "0.6"], ("-100,100,300,500,700,900",))
    ops = _inside(t, np.char.startswith(t.names().astype(str), "aten::"))
    assert len(ops) > 10, _warnings(t)
    assert t.metadata["schedule"]["recorded_steps"] == [2, 3], _warnings(t)
    assert not [w for w in _warnings(t) if w.startswith("torch:")]


def test_torch_window_inside_one_step_says_why_it_is_empty(tmp_path):
    """The window (0-600 ms) lies inside one step (-100 to 900 ms): torch starts and stops
    only at step boundaries on the program's thread, so it records nothing, and the
    program has no section: the trace's warnings say both, not a bare "0 events"."""
    pytest.importorskip("torch")
    t = _run(tmp_path, TORCH, ["--plugins", "host,torch", "--delay", "10", "--duration", "0.6"], ("-100,900",))
    said = _warnings(t)
    assert t.n_events == 0
    assert any(w.startswith("torch: recorded nothing in the window (delay=10 s, duration=0.6 s)")
               and "none came while the window was open" in w for w in said), said
    assert any(w.startswith("session: the window (delay=10 s, duration=0.6 s, 10.000-10.600 s) holds no event but "
                            "the marks of the steps it cuts: the run's other events lie outside it") for w in said), said


def test_jax_records_the_window_only(tmp_path):
    """XLA ops, JAX's runtime events and the program's sections in the window are kept,
    and JAX's profiler recorded the window only: the plugin is paused outside it, and the
    window's timer resumes and pauses it as the window opens and closes, so every raw
    event it hands over lies in the window (up to the timer's lateness at its close).
    Before, JAX's profiler recorded the whole run from the program's first JAX call, and
    the session dropped what lay outside the window (a loaded run: 216k events held,
    stop() took 18 s)."""
    pytest.importorskip("jax")
    raw = tmp_path / "jax_part.json"
    t = _run(tmp_path, JAX, ["--plugins", "jax", "--delay", "5", "--duration", "0.6"], jax_part=raw)
    cats = t.categories()
    assert len(_inside(t, cats == "xla_op")) > 10, _warnings(t)
    assert len(_inside(t, cats == "xla_runtime")) > 10
    assert len(_inside(t, t.names() == "work")) >= 2
    assert t.metadata["schedule"]["recorded_steps"] == [2, 3]
    assert not [w for w in _warnings(t) if "recorded nothing" in w or w.startswith("session:")]
    part = json.loads(raw.read_text())
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    unc = plugin_fit(t.metadata, "jax")["uncertainty_ns"]
    early, late = (lo - part["first"]) / 1e6, (part["last"] - hi) / 1e6
    assert early <= unc / 1e6 and late < 500, \
        f"raw events from {early:.1f} ms before the window opened to {late:.1f} ms after it closed ({part['n']:,})"
    assert part["recorded_ns"] is not None and len(part["recorded_ns"]) == 1, part
    (a, b), = part["recorded_ns"]  # JAX's start and stop called at the opening and at the close
    assert lo <= a and hi <= b, (a - lo, b - hi)
    assert a - unc <= part["first"]


def test_jax_first_call_after_the_window_says_why_it_is_empty(tmp_path):
    """JAX's profiler starts at the program's first JAX call; one after the window closed
    (`import jax` takes seconds on a loaded machine: the audit's `--delay 1 --duration
    0.3` of a several-second jitted loop) leaves the window empty. Before, the trace
    said "0 events" and nothing else. (JAX, paused since the window closed, records
    nothing after it either: no event in the whole run, as the session says.)"""
    pytest.importorskip("jax")
    t = _run(tmp_path, JAX_LATE, ["--plugins", "jax", "--delay", "0.3", "--duration", "0.3"])
    said = _warnings(t)
    assert t.n_events == 0
    assert any(w.startswith("jax: recorded nothing in the window (delay=0.3 s, duration=0.3 s); it records from "
                            "the program's first JAX call") and "after the window closed (at 0.600 s)" in w
               for w in said), said
    assert any(w.startswith("session: the window (delay=0.3 s, duration=0.3 s, 0.300-0.600 s) holds no event: "
                            "no plugin recorded any event in the whole run") for w in said), said
