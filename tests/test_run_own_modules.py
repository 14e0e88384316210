"""Under ``polyprof run`` a script's own modules beside it (``-m``: in the current
directory) are the ones its imports give, as under ``python script.py``
(cli/script_modules.py). Before: polyprof had imported ``token``, ``uuid``, ``platform``,
``logging``, ``json``... before the script started, so a script's ``token.py`` beside it
was the standard library's under polyprof run (``AttributeError: module 'token' has no
attribute 'API_TOKEN'``) and its own under python. What does not shadow under python
either (``os``, a directory without ``__init__.py``) stays the standard library's; the
summary and the trace are still written with polyprof's modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import polyprof
from polyprof.cli.run import run_script

SRC = Path(__file__).resolve().parents[1] / "src"

#: the script's own modules: name -> (file, its text)
OWN = {
    "token": ("token.py", "API_TOKEN = 'mine-token'\n"),
    "uuid": ("uuid.py", "def make():\n    return 'mine-uuid'\n"),
    "json": ("json.py", "def dumps(o):\n    return 'mine-json'\n"),
    "platform": ("platform.py", "def system():\n    return 'mine-platform'\n"),
    "logging": ("logging/__init__.py", "MINE = 'mine-logging'\n"),
    "logging.handlers": ("logging/handlers.py", "MINE = 'mine-handlers'\n"),
    "os": ("os.py", "raise SystemExit('the os module python started with is the one a script gets')\n"),
    "string": ("string/data.txt", "a directory without __init__.py: python goes on to the standard library's\n"),
}

PROGRAM = """\
import atexit, sys
import token, uuid, json, platform, logging, logging.handlers, os, string
import polyprof
with polyprof.section("work"):
    print("mine:", token.API_TOKEN, uuid.make(), json.dumps(1), platform.system(), logging.MINE, logging.handlers.MINE)
print("stdlib:", os.sep, string.ascii_lowercase[:3])

def at_exit():
    import token, logging.handlers
    print("at exit:", token.API_TOKEN, logging.handlers.MINE, flush=True)

atexit.register(at_exit)
"""


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))


def _python(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *cmd], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=120)


def _program_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("mine:", "stdlib:", "at exit:"))]


def test_a_script_gets_its_own_modules_beside_it_as_under_python(tmp_path):
    app = _tree(tmp_path / "app", {**dict(OWN.values()), "prog.py": PROGRAM})
    plain = _python([str(app / "prog.py")], tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert _program_lines(plain.stdout) == [
        "mine: mine-token mine-uuid mine-json mine-platform mine-logging mine-handlers",
        "stdlib: / abc",
        "at exit: mine-token mine-handlers",
    ]
    ours = _python(["-m", "polyprof", "run", "--plugins", "host", "-o", "t.polyprof", str(app / "prog.py")], tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert _program_lines(ours.stdout) == _program_lines(plain.stdout)  # before: AttributeError (token.API_TOKEN)
    # polyprof's own work after the script, with its own modules: the summary, the trace
    assert "polyprof summary" in ours.stdout and "work" in ours.stdout
    assert "trace written to t.polyprof" in ours.stderr
    trace = polyprof.load(tmp_path / "t.polyprof")
    assert "work" in set(trace.names())


def test_a_module_run_gets_the_modules_of_the_current_directory(tmp_path):
    """``-m``: the current directory comes first, as ``python -m`` puts it (``-P``: the
    interpreter itself does not put it there for polyprof's own start)."""
    _tree(tmp_path, {"token.py": OWN["token"][1], "uuid.py": OWN["uuid"][1],
                     "app.py": "import token, uuid\nprint('mine:', token.API_TOKEN, uuid.make())\n"})
    plain = _python(["-m", "app"], tmp_path)
    assert _program_lines(plain.stdout) == ["mine: mine-token mine-uuid"], plain.stderr
    ours = _python(["-P", "-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", "-m", "app"], tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert _program_lines(ours.stdout) == _program_lines(plain.stdout)
    assert (tmp_path / "t.polyprof").is_file()


def test_a_numpy_py_beside_the_script_is_said(tmp_path):
    """What polyprof's recording imports by name while the script runs stays polyprof's:
    a warning names the script's file (python would have given it)."""
    app = _tree(tmp_path / "app", {"numpy.py": "MINE = 1\n", "prog.py": (
        "import numpy, polyprof\nwith polyprof.section('s'):\n    print('mine:', hasattr(numpy, 'MINE'))\n")})
    ours = _python(["-m", "polyprof", "run", "--no-summary", "--plugins", "host", "-o", "t.polyprof",
                    str(app / "prog.py")], tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert _program_lines(ours.stdout) == ["mine: False"]
    assert f"{app / 'numpy.py'}: the script's own numpy is not what its `import numpy` gives" in ours.stderr
    assert polyprof.load(tmp_path / "t.polyprof").n_events == 1


def test_polyprofs_modules_are_back_after_a_script_run_in_a_program(tmp_path, monkeypatch):
    """``run_script`` in a program (not the ``polyprof`` command): the script has its own
    package while it runs; after it, the program's (polyprof's) module and submodule are
    back and the script's are gone from ``sys.modules``."""
    theirs, sub = ModuleType("shadowed_by_script"), ModuleType("shadowed_by_script.sub")
    monkeypatch.setitem(sys.modules, "shadowed_by_script", theirs)  # imported after polyprof: "polyprof's"
    monkeypatch.setitem(sys.modules, "shadowed_by_script.sub", sub)
    out = tmp_path / "seen.txt"
    script = _tree(tmp_path, {"shadowed_by_script/__init__.py": "", "shadowed_by_script/sub.py": "X = 1\n",
                              "prog.py": f"import shadowed_by_script.sub as s\nopen({str(out)!r}, 'w').write(s.__file__)\n"})
    assert run_script(str(script / "prog.py"), []) == 0
    assert out.read_text() == str(tmp_path / "shadowed_by_script" / "sub.py")
    assert sys.modules["shadowed_by_script"] is theirs and sys.modules["shadowed_by_script.sub"] is sub
