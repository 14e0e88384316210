"""What `polyprof run` does around the program, kept cheap (issue 17, item 3;
bench/run_cost.py measures it) without changing what the program sees.

* ``import polyprof`` in a program that only marks sections imports neither the
  session nor NumPy nor the readers; each lazy name still resolves.
* The plugins' discovery imports no device-recording code: that comes with the
  program's own ``import pyopencl`` / ``import torch`` (and OpenCL is still recorded).
* polyprof starts with the garbage collector off and freezes what it made before the
  program starts (``gc.freeze``), then turns the collector back on: the program's own
  garbage is collected (by the collector's own runs too) and finalized, during the run
  and at its exit, as under plain ``python`` (compared with plain python here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import polyprof

SRC = Path(__file__).resolve().parents[1] / "src"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _python(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_import_polyprof_imports_no_numpy_and_no_session():
    out = _python("import sys, polyprof\n"
                  "with polyprof.section('x'): pass\n"
                  "polyprof.mark('m'); polyprof.counter('c', 1.0); polyprof.step()\n"
                  "print(sorted(m for m in ('numpy', 'polyprof.collect.session', 'polyprof.trace.core', "
                  "'polyprof.formats.detect', 'polyprof.collect.schedule') if m in sys.modules))")
    assert out == "[]"


def test_every_lazy_name_resolves_to_its_module_object():
    out = _python(
        "import polyprof, polyprof.collect as c, polyprof.formats as f, polyprof.plugins.torch as t\n"
        "from polyprof.collect.session import Session, profile\n"
        "from polyprof.collect.schedule import schedule\n"
        "from polyprof.formats.detect import load\n"
        "from polyprof.formats.registry import write\n"
        "from polyprof.trace.core import Trace\n"
        "from polyprof.collect.plugin import Availability, Plugin, SessionContext\n"
        "from polyprof.plugins.torch import ingest\n"
        "ok = [polyprof.Session is Session, polyprof.profile is profile, polyprof.schedule is schedule,\n"
        "      polyprof.load is load, polyprof.export is write, polyprof.Trace is Trace, c.Session is Session,\n"
        "      c.profile is profile, c.Plugin is Plugin, c.Availability is Availability,\n"
        "      c.SessionContext is SessionContext, f.load is load, t.ingest_kineto is ingest.ingest_kineto,\n"
        "      t.STEP_PREFIX == ingest.STEP_PREFIX, t.SYNC_NAME == ingest.SYNC_NAME,\n"
        "      set(polyprof.__all__) <= set(dir(polyprof))]\n"
        "print(ok)")
    assert out == str([True] * 16)
    with pytest.raises(AttributeError):
        import polyprof

        polyprof.no_such_name  # noqa: B018
    from polyprof import formats

    with pytest.raises(AttributeError):
        formats.no_such_name  # noqa: B018


def test_discovery_imports_no_device_recording_code():
    """A session's discovery loads each plugin's class (and checks it can run): the
    OpenCL recorder, torch's Kineto ingest and the clock service wait for the
    program's import of pyopencl or torch."""
    out = _python("import sys\n"
                  "from polyprof.collect.registry import discover\n"
                  "found = discover(session=True)\n"
                  "print(sorted(n for n in ('host', 'opencl', 'torch', 'jax') if n in found and found[n].factory),\n"
                  "      sorted(m for m in ('polyprof.plugins.opencl.calls', 'polyprof.plugins.opencl.intercept', "
                  "'polyprof.plugins.opencl.probe', 'polyprof.plugins.torch.ingest', 'polyprof.plugins.torch.memory', "
                  "'polyprof.trace.clock', 'polyprof.collect.native', 'pyopencl', 'torch', 'jax') "
                  "if m in sys.modules))")
    assert out == "['host', 'jax', 'opencl', 'torch'] []"


def test_opencl_is_recorded_when_the_program_imports_pyopencl_after_the_start(tmp_path):
    """The OpenCL plugin's recording code is imported at the program's own
    ``import pyopencl`` (through the import hook), and records as before: a kernel
    launch on the host track, its execution on a device track, linked by a flow."""
    pytest.importorskip("pyopencl")
    from polyprof.plugins.opencl import OpenCLPlugin

    if not OpenCLPlugin.availability().ok:
        pytest.skip(OpenCLPlugin.availability().reason)
    script = tmp_path / "cl.py"
    script.write_text(
        "import numpy as np, pyopencl as cl\n"
        "from polyprof.plugins.opencl import probe\n"
        "dev, _ = probe.first_compiling()\n"
        "ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)\n"
        "prg = cl.Program(ctx, '__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2; }').build()\n"
        "a = np.ones(256, np.float32)\n"
        "buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)\n"
        "prg.twice(q, a.shape, None, buf)\n"
        "cl.enqueue_copy(q, a, buf); q.finish()\n"
        "assert (a == 2).all()\n")
    out = tmp_path / "cl.polyprof"
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(out), str(script)],
                       capture_output=True, text=True, env=_env(), timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    import polyprof

    t = polyprof.load(out)
    meta = t.metadata["opencl"]
    assert meta["api_calls"] >= 3 and meta["device_events"] >= 2, meta
    names = set(t.names().tolist())
    assert "twice" in names
    assert len(t.flows["src"]) >= 1


_FINALIZERS = """\
import gc, sys
out = sys.argv[1]

class Node:
    def __init__(self, tag):
        self.tag, self.other = tag, None
    def __del__(self, _open=open):  # `open` itself may be gone late in the shutdown
        with _open(out, "a") as f:
            f.write(self.tag + "\\n")

def cycle(tag):
    a, b = Node(tag), Node(tag + "'")
    a.other, b.other = b, a
    return a

class Loop:
    finalized = 0
    def __init__(self):
        self.me = self
    def __del__(self):
        Loop.finalized += 1

for _ in range(5000):  # garbage found by the collector's own runs (none is asked for)
    Loop()
with open(out, "a") as f:
    f.write(f"enabled {gc.isenabled()}, collected on its own {Loop.finalized > 0}\\n")
cycle("collected")  # garbage at once: found by the collection below
gc.collect()
with open(out, "a") as f:
    f.write("after collect\\n")
KEPT = cycle("at exit")  # alive until the program ends: then garbage, finalized by a collection
"""


def test_the_programs_garbage_is_collected_and_finalized_as_under_plain_python(tmp_path):
    """Had polyprof frozen the program's objects (a ``gc.freeze`` after the program, say),
    the cycle left alive would never be finalized."""
    script = tmp_path / "fin.py"
    script.write_text(_FINALIZERS)
    plain, profiled = tmp_path / "plain.txt", tmp_path / "profiled.txt"
    p = subprocess.run([sys.executable, str(script), str(plain)], capture_output=True, text=True, env=_env(),
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(tmp_path / "f.polyprof"),
                        str(script), str(profiled)], capture_output=True, text=True, env=_env(), timeout=300,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(plain.read_text().splitlines()) == sorted(profiled.read_text().splitlines())
    lines = profiled.read_text().splitlines()
    assert lines[0] == "enabled True, collected on its own True"  # the collector is on, as under python
    assert lines.index("after collect") == 3 and set(lines[1:3]) == {"collected", "collected'"}
    assert set(lines[4:]) == {"at exit", "at exit'"}


@pytest.mark.parametrize("enabled", [True, False])
def test_main_leaves_the_collector_as_it_found_it(tmp_path, enabled):
    """``polyprof.cli.main(["run", ...])`` called in a process: the program runs with
    the collector on or off as the caller had it, and main() returns it so."""
    script = tmp_path / "s.py"
    script.write_text(f"import gc\nopen({str(tmp_path / 'seen.txt')!r}, 'w').write(str(gc.isenabled()))\n")
    out = _python(f"import gc\n{'' if enabled else 'gc.disable()'}\n"
                  "from polyprof.cli import main\n"
                  f"rc = main(['run', '--no-summary', '-o', {str(tmp_path / 's.polyprof')!r}, {str(script)!r}])\n"
                  "print(rc, gc.isenabled())")
    assert out == f"0 {enabled}"
    assert (tmp_path / "seen.txt").read_text() == str(enabled)


def test_the_script_sees_what_python_gives_it(tmp_path):
    """``__file__`` absolute (python's since 3.9), ``sys.argv[0]`` as typed, and an
    uncaught exception's traceback from the script's frame on, as plain python prints
    them: polyprof's and runpy's frames beneath the script were printed too."""
    (tmp_path / "where.py").write_text("import sys\nprint(__file__)\nprint(sys.argv[0])\n"
                                       "def f():\n    raise ValueError('boom')\nf()\n")
    (tmp_path / "mod.py").write_text("import sys\nprint(__file__)\nprint(sys.argv[0])\n")
    for args in (["where.py"], ["-m", "mod"]):
        plain = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", *args],
                              capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
        assert ours.returncode == plain.returncode and ours.stdout == plain.stdout, (ours, plain)
        assert [ln for ln in ours.stderr.splitlines() if not ln.startswith("polyprof: ")] == \
            plain.stderr.splitlines(), ours.stderr
    assert plain.stdout.splitlines()[0] == str(tmp_path / "mod.py")


_LOGS = """\
import logging
logging.basicConfig(level=logging.INFO, format="%(levelname)s [train] %(message)s")
logging.getLogger("train").info("epoch 1 loss 0.5")
logging.warning("a warning")
"""


def test_the_scripts_logging_is_its_own(tmp_path):
    """The program's ``logging.basicConfig`` configures the root logger as under plain
    python: polyprof sets up only its own logger (it had called ``basicConfig`` first,
    so the program's call did nothing: its INFO line vanished and its warning came out
    as ``polyprof: WARNING: ...``). A library's INFO logger prints nothing under
    either; polyprof's own lines still say ``polyprof:`` and go to stderr once."""
    (tmp_path / "logs.py").write_text(_LOGS)
    plain = subprocess.run([sys.executable, "logs.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", "logs.py"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert plain.stderr.splitlines() == ["INFO [train] epoch 1 loss 0.5", "WARNING [train] a warning"]
    assert [ln for ln in ours.stderr.splitlines() if not ln.startswith("polyprof: ")] == plain.stderr.splitlines()
    # a library's INFO logger (as dask.distributed sets its own): shown only with a root handler
    (tmp_path / "quiet.py").write_text("import logging\nlogging.getLogger('some.library').setLevel(logging.INFO)\n"
                                       "logging.getLogger('some.library').info('nanny started')\n")
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "q.polyprof", "quiet.py"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert ours.returncode == 0 and "nanny started" not in ours.stderr, ours.stderr
    assert ours.stderr.count("polyprof: trace written to") == 1


def test_polyprofs_warnings_name_it_once_in_and_out_of_the_command(tmp_path):
    """A session a program starts itself (``polyprof.profile()``) prints its warnings as
    ``polyprof: WARNING: ...`` (they came bare, as Python's last-resort handler prints),
    and under ``polyprof run`` once (they read ``polyprof: WARNING: polyprof: ...``)."""
    (tmp_path / "own.py").write_text("import polyprof\nwith polyprof.profile(plugins=['host'], "
                                     "options={'nosuch': {'a': 1}}):\n    pass\n")
    own = subprocess.run([sys.executable, "own.py"], capture_output=True, text=True, cwd=tmp_path, env=_env(),
                         timeout=120)
    assert own.returncode == 0, own.stderr
    assert "polyprof: WARNING: plugin options for 'nosuch' not used" in own.stderr, own.stderr
    (tmp_path / "nested.py").write_text("import polyprof\nwith polyprof.profile(schedule=polyprof.schedule("
                                        "wait=1, warmup=1, active=1)):\n    pass\n")
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "n.polyprof", "nested.py"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert ours.returncode == 0, ours.stderr
    assert "polyprof: WARNING: schedule or window ignored" in ours.stderr, ours.stderr
    assert "polyprof: WARNING: polyprof:" not in ours.stderr


_POOL = """\
import multiprocessing as mp, sys, time
def work(n):
    t = time.process_time()
    while time.process_time() - t < 0.3:
        sum(range(1000))
    return n
if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as p:
        print(sum(p.map(work, range(int(sys.argv[1])))))
"""


def test_work_done_in_child_processes_is_named(tmp_path):
    """A program whose work runs in a multiprocessing pool (Dask's processes, DataLoader
    workers alike) left a trace of nothing without a word. The trace now says how much
    CPU its ended children used, and warns when they did more than the process."""
    (tmp_path / "pool.py").write_text(_POOL)
    for n, warned in ((4, True), (0, False)):
        out = f"p{n}.polyprof"
        p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", out, "pool.py", str(n)],
                           capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
        assert p.returncode == 0, p.stderr
        assert ("CPU ran in child processes" in p.stderr) is warned, p.stderr
        trace = polyprof.load(tmp_path / out)
        assert (trace.metadata["session"]["children_cpu_s"] >= 1.0) is warned
        doc = json.loads(subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", out],
                                        capture_output=True, text=True, cwd=tmp_path, timeout=120).stdout)
        said = [w for w in doc["overview"]["warnings"] if "child processes" in w]
        assert len(said) == int(warned) and all(w.startswith("session: ") for w in said), doc["overview"]["warnings"]


def test_a_program_that_changes_directory(tmp_path):
    """The trace goes where it was asked for from the directory polyprof started in, and
    the crash journal beside it is removed: a program that changed directory (Hydra
    before 1.2 does by default) had its trace written relative to its new directory and
    left the stale ``.partial`` journal, which made ``summary`` call the run killed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cd.py").write_text(f"import os\nos.chdir({str(elsewhere)!r})\nraise SystemExit(3)\n")
    for argv, name in ((["-o", "t.polyprof"], "t.polyprof"), ([], "cd.polyprof")):
        p = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", *argv, "cd.py"],
                           capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
        assert p.returncode == 3, p.stderr
        assert (tmp_path / name).is_file() and not (elsewhere / name).exists()
        assert not list(tmp_path.glob("*.partial")) and f"trace written to {name} " in p.stderr


_CHAINS = """\
import os, signal, sys, time
seen = []
previous = signal.getsignal(signal.SIGTERM)
def handler(signum, frame):  # as Lightning's: its own, then any handler there was but SIG_DFL
    seen.append(signum)
    if previous not in (None, signal.SIG_DFL, signal.SIG_IGN):
        previous(signum, frame)
signal.signal(signal.SIGTERM, handler)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.1)
print("shut down gracefully", seen)
"""


def test_a_program_that_handles_sigterm_and_calls_the_previous_handler(tmp_path):
    """Lightning's SIGTERM handler notes the signal, calls any handler it found that is
    not SIG_DFL, and shuts down gracefully (exit 0). polyprof's, found there, raised
    SystemExit(143) in the middle of a step. Called by the program's own, it now does
    nothing, as SIG_DFL, which python would have left there, is never called."""
    (tmp_path / "chains.py").write_text(_CHAINS)
    plain = subprocess.run([sys.executable, "chains.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    ours = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", "c.polyprof", "chains.py"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert plain.returncode == 0 and plain.stdout == "shut down gracefully [15]\n"
    assert (ours.returncode, ours.stdout) == (plain.returncode, plain.stdout), ours.stderr
    assert (tmp_path / "c.polyprof").is_file()


def test_a_failing_summary_keeps_the_scripts_exit_code(tmp_path, monkeypatch, capsys):
    """An error in the end-of-run summary (an analysis's bug) was the run's error: exit
    code 1 where the script's was 0, and no line saying where the trace went."""
    from polyprof.cli import main, run as run_mod

    def broken(trace):
        raise NameError("name 'backward_callers' is not defined")

    monkeypatch.setattr(run_mod, "print_summary", broken)
    (tmp_path / "ok.py").write_text("print('done')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-o", "ok.polyprof", "ok.py"]) == 0
    err = capsys.readouterr().err
    assert "internal error (NameError" in err and "(in the summary; the trace is written)" in err
    assert "trace written to ok.polyprof" in err and (tmp_path / "ok.polyprof").is_file()
