"""``polyprof run python x.py``: the interpreter word users type before the script is
dropped, and the script (or ``-m`` module) runs as ``polyprof run x.py`` runs it
(cli/run.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"
_PROG = """\
import sys
import polyprof
with polyprof.section("work"):
    print("args", sys.argv[1:])
"""


def _run(tmp_path: Path, *words: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "prog.py").write_text(_PROG)
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("POLYPROF_PLUGINS", None)
    env.pop("POLYPROF_OUTPUT", None)
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", *words],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180)


@pytest.mark.parametrize("interpreter", ["python", "python3", "python3.11", Path(sys.executable).name,
                                         sys.executable])
def test_an_interpreter_before_the_script_is_dropped(tmp_path, interpreter):
    """``polyprof run python x.py`` said "python: no such script"."""
    r = _run(tmp_path, interpreter, "prog.py", "a", "-b")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "args ['a', '-b']\n", r.stderr
    trace = polyprof.load(tmp_path / "prog.polyprof")  # named after the script, as without the word
    assert "work" in set(trace.names(range(trace.n_events)))


def test_an_interpreter_before_dash_m_runs_the_module(tmp_path):
    r = _run(tmp_path, "-o", "m.polyprof", "python", "-m", "prog", "x")
    assert r.returncode == 0 and r.stdout == "args ['x']\n", r.stderr
    assert (tmp_path / "m.polyprof").is_file()


@pytest.mark.parametrize("words", [["python"], ["python", "-u", "prog.py"]])
def test_an_interpreter_without_a_script_says_what_run_takes(tmp_path, words):
    """Python's own options are not taken: one line says how to call polyprof run."""
    r = _run(tmp_path, *words)
    assert r.returncode == 2 and r.stdout == ""
    assert "polyprof run runs the script itself" in r.stderr and "polyprof run x.py" in r.stderr, r.stderr


def test_a_script_named_python_stays_a_script(tmp_path):
    """A (non-executable) script file named like an interpreter is run, not dropped."""
    (tmp_path / "python3").write_text("print('mine')\n")
    r = _run(tmp_path, "-o", "p.polyprof", "python3")
    assert r.returncode == 0 and r.stdout == "mine\n", r.stderr
