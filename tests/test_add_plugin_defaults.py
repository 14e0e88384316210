"""`polyprof run --add-plugin X` runs the default plugins as a plain run has them, plus X.

Before, the defaults were turned into plain names when --add-plugin was given, and a
named plugin gets the full availability check as the session starts: the opencl
plugin's imported pyopencl and built its probe kernel in the program's process (35 ->
142 MiB, +0.4 s) for a program that never imports pyopencl. Now the defaults keep
the check a run that names no plugins makes (``session_availability``: they attach
when the program imports their runtime); a plugin the user names (``--plugins``, or a
default given again with ``--add-plugin NAME``) still gets the full check."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.cli.common import plugin_list
from polyprof.collect import registry

ROOT = Path(__file__).resolve().parents[1]

#: the plugin --add-plugin adds: records nothing
TICK = '''
from polyprof.collect.plugin import Plugin
from polyprof.trace.builder import TraceBuilder

class Tick(Plugin):
    name = "tick"
    def _start(self, ctx): pass
    def _stop(self): pass
    def _collect(self): return TraceBuilder().build()
'''

#: an installed default plugin that says which of its checks it was asked
ASKED = '''
from polyprof.collect.plugin import Availability, Plugin
from polyprof.trace.builder import TraceBuilder

ASKED = []

class Lazy(Plugin):
    name = "apd-lazy"
    def _start(self, ctx): pass
    def _stop(self): pass
    def _collect(self): return TraceBuilder().build()
    @classmethod
    def availability(cls):
        ASKED.append("availability")
        return Availability(True)
    @classmethod
    def session_availability(cls):
        ASKED.append("session_availability")
        return Availability(True)
'''

#: what the program saw: the heavy modules it never imported, in sys.modules or not
HEAVY = ("pyopencl", "torch", "jax", "cupti", "cuda")
SEEN = f"import json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"


def _run(tmp_path: Path, out: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """``polyprof run --no-summary -o OUT ARGS seen.py``: the heavy modules the program
    found in sys.modules, and the trace's metadata["plugins"]."""
    (tmp_path / "tick_plugin.py").write_text(TICK)
    (tmp_path / "seen.py").write_text(SEEN)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]))
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", out, *args, "seen.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1]), polyprof.load(tmp_path / out).metadata["plugins"]


def test_add_plugin_keeps_the_defaults_lazy_and_loads_nothing_the_program_did_not_import(tmp_path):
    plain_seen, plain = _run(tmp_path, "plain.polyprof")
    seen, added = _run(tmp_path, "added.polyprof", "--add-plugin", "tick_plugin:Tick")
    assert plain_seen == [] and seen == []  # before: ['pyopencl'] with --add-plugin
    ok = {name for name, what in plain.items() if what == "ok"}
    assert "host" in ok
    assert {name for name, what in added.items() if what == "ok"} == ok | {"tick"}


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """apd_polyprof as pip leaves it (a module and a dist-info naming ``apd-lazy``), on sys.path."""
    site = tmp_path / "site"
    (site / "apd_polyprof").mkdir(parents=True)
    (site / "apd_polyprof" / "__init__.py").write_text(ASKED)
    info = site / "apd_polyprof-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apd-polyprof\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[polyprof.plugins]\napd-lazy = apd_polyprof:Lazy\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_STUCK", {}, raising=False)
    import apd_polyprof

    monkeypatch.setitem(sys.modules, "apd_polyprof", apd_polyprof)  # removed again after the test
    return apd_polyprof


def test_the_defaults_of_add_plugin_get_the_default_check_and_a_named_one_the_full_check(tmp_path, monkeypatch):
    mod = _site(tmp_path, monkeypatch)
    asked: list[str] = mod.ASKED  # type: ignore[attr-defined]
    args = argparse.Namespace(plugins=None, plugin=["host"])  # the defaults, plus host again, by name
    spec = plugin_list(args)
    assert spec is not None and "apd-lazy" in spec and "host" in spec
    asked.clear()
    infos = {i.name: i for i in registry.resolve([p for p in spec if isinstance(p, str)])}
    assert infos["apd-lazy"].availability.ok and asked == ["session_availability"]
    # named (--plugins host,apd-lazy, or --add-plugin apd-lazy): the full check
    asked.clear()
    assert registry.resolve(["host", "apd-lazy"])[1].availability.ok and asked == ["availability"]
    spec = plugin_list(argparse.Namespace(plugins=None, plugin=["apd-lazy"]))
    assert spec is not None and spec.count("apd-lazy") == 1
    asked.clear()
    registry.resolve([p for p in spec if isinstance(p, str)])
    assert asked == ["availability"]


OPENCL_PROGRAM = '''
import numpy as np
import pyopencl as cl
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
prg = cl.Program(ctx, "__kernel void twice(__global float *a) { int i = get_global_id(0); a[i] *= 2.0f; }").build()
a = np.ones(1024, np.float32)
d = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
prg.twice(q, a.shape, None, d)
q.finish()
print("[]")
'''


@pytest.mark.opencl
def test_a_program_that_imports_pyopencl_is_still_recorded_with_add_plugin(tmp_path):
    """The opencl default attaches at the program's import of pyopencl: its kernel is in the trace."""
    (tmp_path / "tick_plugin.py").write_text(TICK)
    (tmp_path / "cl_prog.py").write_text(OPENCL_PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]))
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "cl.polyprof",
                        "--add-plugin", "tick_plugin:Tick", "cl_prog.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    trace = polyprof.load(tmp_path / "cl.polyprof")
    assert trace.metadata["plugins"]["opencl"] == "ok" and trace.metadata["plugins"]["tick"] == "ok"
    assert any(p.name.startswith("/device:OpenCL") for p in trace.planes)
    assert "twice" in set(trace.names())
