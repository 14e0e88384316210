"""``POLYPROF_SERVE`` in the environment and an explicit ``polyprof run`` (audit: with it
set, ``polyprof run -o X`` refused to run, blaming a "--serve" the user never gave, and
without ``-o`` the run served and wrote no trace without saying why).

Now flags that ask for a recording (``-o``, ``--delay``, ``--schedule``...) win over the
environment's ``POLYPROF_SERVE``: the run records as asked and says the variable is
ignored; a run without them serves, and says it does because of ``POLYPROF_SERVE`` and
that it writes no trace of its own. ``--serve`` with them is refused, naming them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

pytest.importorskip("grpc")

from capture_helpers import free_port  # noqa: E402

SCRIPT = "import polyprof\nfor i in range(3):\n    with polyprof.section('tick'):\n        sum(range(1000))\n" \
         "print('ran', flush=True)\n"


def _run(tmp_path: Path, *args: str, serve: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "prog.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_")}
    if serve is not None:
        env["POLYPROF_SERVE"] = serve
    return subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", *args, "prog.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, env=env)


def test_an_output_flag_records_though_polyprof_serve_is_set(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    r = _run(tmp_path, "--plugins", "host", "-o", "envo.polyprof", serve=address)
    assert r.returncode == 0, r.stderr  # before: 1, "--serve records what a capture client asks for..."
    assert r.stdout == "ran\n"
    assert f"POLYPROF_SERVE={address} is set in the environment, but --output asks for a recording" in r.stderr
    assert "--serve" not in r.stderr.replace("give --serve to serve", "")
    assert polyprof.load(tmp_path / "envo.polyprof").rows_named("tick").size == 3


def test_a_window_flag_records_though_polyprof_serve_is_set(tmp_path):
    r = _run(tmp_path, "--plugins", "host", "--duration", "5", serve=f"127.0.0.1:{free_port()}")
    assert r.returncode == 0, r.stderr
    assert "--duration asks for a recording" in r.stderr and (tmp_path / "prog.polyprof").is_file()


def test_polyprof_serve_alone_serves_and_says_why_no_trace_is_written(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    r = _run(tmp_path, "--plugins", "host", serve=address)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert (f"serving captures on {address} (auth: none), as POLYPROF_SERVE={address} in the environment asks: "
            "this run writes no trace of its own") in r.stderr, r.stderr
    assert not list(tmp_path.glob("*.polyprof"))


def test_serve_flag_with_an_output_is_refused_naming_them(tmp_path):
    r = _run(tmp_path, "--serve", f"127.0.0.1:{free_port()}", "-o", "x.polyprof", serve=None)
    assert r.returncode == 1
    assert "--serve records what a capture client asks for, with the plugins given; --output applies to a run " \
           "without it" in r.stderr
