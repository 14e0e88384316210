"""What ``polyprof run`` takes as its program and its ``-o``, decided before the program runs.

The program, as python takes it (cli/run.py ``_prepared``, cli/script_exec.py ``unrunnable``). Before, anything but a regular file was "no such
script" (exit 2), though ``python DIR`` runs a directory's ``__main__.py``, ``python
app.pyz`` a zip application's and ``python /dev/null`` an empty program; now those run
as under python (its ``sys.argv[0]``, ``sys.path[0]``, ``__file__``), and what polyprof
cannot run says why instead.

The output: ``-o DIR/`` wrote a file named DIR, and ``-o DIR`` (a directory there) ran
the whole program, then put the trace under a random name in the temporary directory
with exit status 0. Now ``-o DIR/`` writes ``DIR/SCRIPT_STEM.polyprof`` (as ``export``
and ``report`` write in ``-o DIR/``: cli/common.py ``names_directory``), and a directory
without the separator, or a file where the directory is to be, is refused before the
program runs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"
_MAIN = """\
import sys
import polyprof
with polyprof.section("work"):
    print("argv", sys.argv)
    print("path0", sys.path[0])
    print("file", __file__)
    print("spec", __spec__.name if __spec__ else None)
import atexit
atexit.register(lambda: print("at exit", getattr(sys.modules["__main__"], "__file__", None), sys.path[0]))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("POLYPROF_PLUGINS", "POLYPROF_OUTPUT", "POLYPROF_SERVE"):
        env.pop(name, None)
    return env


def _polyprof(cwd: Path, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", *words],
                          capture_output=True, text=True, cwd=cwd, env=_env(), timeout=180)


def _python(cwd: Path, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *words], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=180)


def _app(tmp_path: Path, kind: str) -> str:
    if kind == "directory":
        (tmp_path / "app").mkdir()
        (tmp_path / "app" / "__main__.py").write_text(_MAIN)
        return "app"
    with zipfile.ZipFile(tmp_path / "app.pyz", "w") as z:
        z.writestr("__main__.py", _MAIN)
    return "app.pyz"


@pytest.mark.parametrize("kind", ["directory", "zip"])
def test_a_directory_or_zip_with_a_main_runs_as_python_runs_it(tmp_path: Path, kind: str) -> None:
    target = _app(tmp_path, kind)
    r = _polyprof(tmp_path, target, "x")
    assert r.returncode == 0, r.stderr  # before: "app: no such script", exit 2
    assert "no such script" not in r.stderr
    assert r.stdout == _python(tmp_path, target, "x").stdout  # argv as typed, sys.path[0] the app, __file__ kept
    assert f"argv ['{target}', 'x']" in r.stdout and f"path0 {tmp_path / target}\n" in r.stdout
    trace = polyprof.load(tmp_path / "app.polyprof")  # named after it, as a script's
    assert "work" in set(trace.names(range(trace.n_events)))


def test_dev_null_runs_as_an_empty_program(tmp_path: Path) -> None:
    r = _polyprof(tmp_path, "-o", "n.polyprof", os.devnull)
    assert r.returncode == 0, r.stderr  # before: "/dev/null: no such script", exit 2
    assert polyprof.load(tmp_path / "n.polyprof").n_events == 0


def test_a_directory_without_main_says_so_as_python(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    r = _polyprof(tmp_path, "lib")
    assert r.returncode == _python(tmp_path, "lib").returncode == 1
    assert "lib: a directory without a __main__.py" in r.stderr and "no such script" not in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "lib.polyprof").exists()


def test_a_pipe_is_refused_saying_why(tmp_path: Path) -> None:
    """runpy reads the script twice (compiled code first): a pipe would run as an empty
    program, without a word; python reads it once."""
    os.mkfifo(tmp_path / "fifo")
    r = _polyprof(tmp_path, "fifo")  # (refused before it is opened: no writer needed)
    assert r.returncode == 2 and "fifo: not a file (a pipe or a device)" in r.stderr, r.stderr


def test_a_missing_script_is_still_no_such_script(tmp_path: Path) -> None:
    r = _polyprof(tmp_path, "nope.py")
    assert r.returncode == 2 and "nope.py: no such script" in r.stderr


def test_a_shell_shim_is_refused_before_the_session_says_what_it_is(tmp_path: Path) -> None:
    """pyenv's ``torchrun`` is a bash script that starts the real one: ``polyprof run
    $(which torchrun) ...`` printed a Python SyntaxError after the session began, and
    wrote an empty trace; now one line names the interpreter, exit 1 as python's, no trace."""
    shim = tmp_path / "torchrun"
    shim.write_text('#!/usr/bin/env bash\nexec python -m torch.distributed.run "$@"\n')
    shim.chmod(0o755)
    r = _polyprof(tmp_path, str(shim), "--nproc-per-node", "2", "train.py")
    assert r.returncode == _python(tmp_path, str(shim)).returncode == 1
    assert r.stderr.count("\n") == 1 and "not a Python program but a bash script (its first line: " \
        "#!/usr/bin/env bash)" in r.stderr and "-m torch.distributed.run" in r.stderr, r.stderr
    assert not (tmp_path / "torchrun.polyprof").exists()
    r = _polyprof(tmp_path, "/bin/true")  # (a compiled executable)
    assert r.returncode == 1 and "not a Python program but a compiled executable" in r.stderr, r.stderr


def test_pips_launcher_of_a_long_interpreter_path_runs(tmp_path: Path) -> None:
    """pip writes ``#!/bin/sh`` and a shell ``exec`` that is a string to Python where the
    interpreter's path is too long for a ``#!`` line: a Python program, run."""
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n'''exec' \"" + sys.executable + "\" \"$0\" \"$@\"\n' '''\nprint('ran')\n")
    r = _polyprof(tmp_path, str(tool))
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr


_SCRIPT = "import polyprof\nwith polyprof.section('work'):\n    open('ran', 'w').close()\n"


@pytest.mark.parametrize("given", ["runs/", "runs/deeper/", "there/"])
def test_an_output_directory_gets_the_default_name_in_it(tmp_path: Path, given: str) -> None:
    (tmp_path / "there").mkdir()
    (tmp_path / "s1.py").write_text(_SCRIPT)
    r = _polyprof(tmp_path, "-o", given, "s1.py")
    assert r.returncode == 0, r.stderr
    out = tmp_path / given / "s1.polyprof"
    assert out.is_file() and f"trace written to {Path(given) / 's1.polyprof'}" in r.stderr, r.stderr
    assert "instead" not in r.stderr  # before: "... is a directory; the trace was written to /tmp/...-XXXX.polyprof instead"
    trace = polyprof.load(out)
    assert "work" in set(trace.names(range(trace.n_events)))


def test_an_existing_directory_without_the_separator_is_refused_before_the_program_runs(tmp_path: Path) -> None:
    """As ``export``'s and ``report``'s writers refuse it at once; the line says how to write in it."""
    (tmp_path / "there").mkdir()
    (tmp_path / "s1.py").write_text(_SCRIPT)
    r = _polyprof(tmp_path, "-o", "there", "s1.py")
    assert r.returncode == 1, r.stderr  # before: 0, the program run, the trace in /tmp under a random name
    assert "there is a directory: give -o there/ to write s1.polyprof in it" in r.stderr, r.stderr
    assert not (tmp_path / "ran").exists() and not list((tmp_path / "there").iterdir())


def test_polyprof_output_naming_a_directory_too(tmp_path: Path) -> None:
    (tmp_path / "s1.py").write_text(_SCRIPT)
    env = dict(_env(), POLYPROF_OUTPUT="fromenv/")
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--plugins", "host", "--no-summary", "s1.py"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180)
    assert r.returncode == 0 and (tmp_path / "fromenv" / "s1.polyprof").is_file(), r.stderr


@pytest.mark.parametrize("given", ["notes.txt/", "notes.txt/sub/t.polyprof"])
def test_a_file_where_the_directory_is_to_be_is_refused_before_the_program_runs(tmp_path: Path, given: str) -> None:
    (tmp_path / "s1.py").write_text(_SCRIPT)
    (tmp_path / "notes.txt").write_text("mine\n")
    r = _polyprof(tmp_path, "-o", given, "s1.py")
    assert r.returncode == 1 and "notes.txt is a file, not a directory" in r.stderr, r.stderr
    assert not (tmp_path / "ran").exists() and (tmp_path / "notes.txt").read_text() == "mine\n"
