"""The notes ``polyprof run`` adds after a program's run when its trace cannot hold what
the program did (cli/run.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"
NOTE = "polyprof: note: the program ran JAX"

_JAX = """\
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x @ x).sum())
print(round(float(f(jnp.ones((8, 8)) * 0.1)), 4))
"""


def _run(tmp_path: Path, code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("POLYPROF_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", *flags,
                           str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180)


def test_a_jax_program_without_the_jax_plugin_is_told_how_to_record_it(tmp_path):
    """A Flax/Optax or Keras-on-JAX program under plain ``polyprof run`` (jax is opt-in)
    gave "trace written (0 events)" and nothing else: nothing said that JAX's work was
    not recorded, or how to record it."""
    pytest.importorskip("jax")
    r = _run(tmp_path, _JAX)
    assert r.returncode == 0 and r.stdout == "5.1091\n", r.stderr
    assert polyprof.load(tmp_path / "t.polyprof").metadata["plugins"].get("jax") is None
    assert r.stderr.count(NOTE) == 1 and "--plugins jax" in r.stderr, r.stderr
    # with the plugin: JAX's work is in the trace, and no note
    r = _run(tmp_path, _JAX, "--plugins", "jax")
    assert r.returncode == 0 and r.stdout == "5.1091\n", r.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert any(n.startswith("PjitFunction(") for n in trace.names(range(trace.n_events)))
    assert NOTE not in r.stderr, r.stderr


def test_no_jax_note_for_a_program_that_only_imports_jax(tmp_path):
    """Importing jax (as many libraries do) makes no computation: no note."""
    pytest.importorskip("jax")
    r = _run(tmp_path, "import jax\nprint('ok')\n")
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert NOTE not in r.stderr, r.stderr


_EMPTY_NOTE = "polyprof: note: nothing the program ran was recorded"
_NUMPY = """\
import numpy as np
a = np.arange(200_000, dtype=np.float64)
print(float((a * a).sum()))
"""


def test_a_program_nothing_records_is_told_to_mark_sections(tmp_path):
    """A Polars/DuckDB/NumPy program (nothing a plugin records) gave "trace written
    (0 events)" and a table of counters: now a note says how to see its time (sections);
    a program with a section gets no note."""
    r = _run(tmp_path, _NUMPY, "--plugins", "host")
    assert r.returncode == 0 and r.stdout == "2666646666700000.0\n", r.stderr
    assert polyprof.load(tmp_path / "t.polyprof").n_events == 0
    assert r.stderr.count(_EMPTY_NOTE) == 1 and "polyprof.section(" in r.stderr, r.stderr
    marked = "import polyprof\nwith polyprof.section('stage'):\n" + "".join("    " + line + "\n"
                                                                          for line in _NUMPY.splitlines())
    r = _run(tmp_path, marked, "--plugins", "host")
    assert r.returncode == 0 and r.stdout == "2666646666700000.0\n", r.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert trace.n_events == 1 and trace.names([0]).tolist() == ["stage"]
    assert _EMPTY_NOTE not in r.stderr, r.stderr


def test_no_empty_note_where_the_schedule_said_why(tmp_path):
    """A schedule that recorded no step says so itself: no second note."""
    r = _run(tmp_path, _NUMPY, "--plugins", "host", "--schedule", "wait=1,warmup=1,active=2")
    assert r.returncode == 0 and r.stdout == "2666646666700000.0\n", r.stderr
    assert "recorded no step" in r.stderr and _EMPTY_NOTE not in r.stderr, r.stderr


_FORKED = """\
import os, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        burn(0.4)
        os._exit(0)
    kids.append(pid)
burn(1.2)  # the parent does more than its children (as importing torch does)
for pid in kids:
    os.waitpid(pid, 0)
print("done")
"""


def test_an_empty_trace_names_its_forked_childrens_work(tmp_path):
    """Forked workers did 0.8 s of CPU beside a parent that did more (importing torch):
    the children's warning was kept for children that outworked their parent, so the
    empty trace said nothing of them and the note asked for sections. An empty trace
    names the children's CPU at any share."""
    r = _run(tmp_path, _FORKED, "--plugins", "host")
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert trace.n_events == 0
    said = [w["message"] for w in trace.metadata.get("warnings", []) if "child processes" in w["message"]]
    assert len(said) == 1 and float(said[0].split(" s of CPU")[0]) >= 0.7, said
    assert "child processes" in r.stderr and _EMPTY_NOTE not in r.stderr, r.stderr


def test_a_tensorflow_program_is_told_how_to_record_it(tmp_path):
    """TensorFlow is not installed here: a module registered as ``tensorflow`` stands in
    for a Keras-on-TensorFlow program, which polyprof run records nothing of."""
    fake = "import sys, types\nsys.modules['tensorflow'] = types.ModuleType('tensorflow')\nprint('fit')\n"
    r = _run(tmp_path, fake, "--plugins", "host")
    assert r.returncode == 0 and r.stdout == "fit\n", r.stderr
    assert "the program ran TensorFlow" in r.stderr and "tf.profiler.experimental.start" in r.stderr
    assert _EMPTY_NOTE not in r.stderr, r.stderr
