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
