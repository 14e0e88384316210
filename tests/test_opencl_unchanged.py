"""What an OpenCL program sees under polyprof is what it sees without it, on a real
device (PoCL through pyopencl): a queue it closed (``with CommandQueue(...) as q``) is
not touched at stop (pyopencl would warn ``CommandQueueUsedAfterExit`` into its stderr),
``queue.properties`` is what it asked for, ``CommandQueue``'s names are pyopencl's; and
markers, barriers, finish and waits are not counted as launches without device activity."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl  # conftest: skipped, with the reason, where no device compiles

import polyprof  # noqa: E402
from polyprof.derive.correlate import correlate  # noqa: E402
from polyprof.plugins.opencl import OpenCLPlugin  # noqa: E402

if not OpenCLPlugin.availability():
    pytest.skip(f"no OpenCL device: {OpenCLPlugin.availability().reason}", allow_module_level=True)

#: prints what a program may look at; its launches: 5 kernels, 1 write, 1 read, 1 fill
PROGRAM = r"""
import numpy as np
import pyopencl as cl
P = cl.command_queue_properties
ctx = cl.create_some_context(interactive=False)
plain = cl.CommandQueue(ctx)
ooo = cl.CommandQueue(ctx, properties=P.OUT_OF_ORDER_EXEC_MODE_ENABLE)
prof = cl.CommandQueue(ctx, properties=P.PROFILING_ENABLE)
print("properties", plain.properties, ooo.properties, prof.properties)
print("class", cl.CommandQueue.__module__, cl.CommandQueue.__name__, cl.CommandQueue.__qualname__)
class MyQueue(cl.CommandQueue):
    pass
print("subclass", MyQueue(ctx).properties, MyQueue.__mro__[1].__name__, MyQueue.__mro__[1].__module__)
k = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *x) { x[get_global_id(0)] *= 2.0f; }").build(), "k")
x = np.ones(256, np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, x.nbytes)
with cl.CommandQueue(ctx) as q:  # closed at the end of the block, before polyprof stops
    cl.enqueue_copy(q, buf, x)
    k(q, x.shape, None, buf)
    cl.enqueue_marker(q)
    cl.enqueue_barrier(q)
    e = k(q, x.shape, None, buf)
    e.wait()
    cl.wait_for_events([e])
    q.finish()
k(plain, x.shape, None, buf)
k(prof, x.shape, None, buf).wait()
cl.enqueue_fill_buffer(plain, buf, np.float32(3), 0, 64)
cl.enqueue_copy(plain, x, buf)
plain.finish()
try:
    ev = k(plain, x.shape, None, buf)
    ev.wait()
    ev.profile.end
    print("profile on a queue that did not ask: read")
except cl.RuntimeError:
    print("profile on a queue that did not ask: refused")
print("result", float(x.sum()))
"""
LAUNCHES = 5 + 1 + 1 + 1  # kernels, write, read, fill

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("unchanged")
    (d / "program.py").write_text(PROGRAM)
    plain = _run(["program.py"], d)
    assert plain.returncode == 0, plain.stderr
    profiled = _run(["-m", "polyprof", "run", "--no-summary", "-o", "t.polyprof", "program.py"], d)
    assert profiled.returncode == 0, profiled.stderr
    return {"plain": plain, "profiled": profiled, "trace": polyprof.load(d / "t.polyprof")}


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith("polyprof: trace written")]


def test_the_programs_output_is_its_own(runs: dict) -> None:
    plain, profiled = runs["plain"], runs["profiled"]
    expected = plain.stdout.splitlines()
    got = profiled.stdout.splitlines()
    assert expected[:3] == ["properties 0 1 2", "class pyopencl._cl CommandQueue CommandQueue",
                            "subclass 0 CommandQueue pyopencl._cl"]
    # event.profile on a queue that did not ask for profiling works under polyprof
    # (docs/plugins.md); every other line is the same
    differ = [(a, b) for a, b in zip(expected, got) if a != b]
    assert len(got) == len(expected) and all("profile on a queue" in a for a, _ in differ), differ
    assert "CommandQueueUsedAfterExit" not in profiled.stderr, profiled.stderr
    assert _lines(profiled.stderr) == _lines(plain.stderr)


def test_launch_calls_are_the_enqueues_of_device_work(runs: dict) -> None:
    trace = runs["trace"]
    counts = correlate(trace).counts
    df = trace.to_pandas()
    names = set(df[df.category == "opencl_api"].name)
    assert {"clEnqueueMarkerWithWaitList", "clEnqueueBarrierWithWaitList", "clFinish", "clWaitForEvents"} <= names
    assert counts["launch_calls"] == LAUNCHES, counts
    assert counts["launch_calls_without_device_activity"] == 0, counts
    # the closed queue's commands are on the device, timed
    assert (df.category == "kernel").sum() == 5 and trace.metadata["opencl"]["unprofiled"] == 0


def test_stop_does_not_touch_a_queue_the_program_closed() -> None:
    ctx = cl.create_some_context(interactive=False)
    k = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *x) { x[get_global_id(0)] += 1.0f; }").build(), "k")
    x = np.zeros(64, np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with polyprof.profile(plugins=["opencl"]) as prof:
            with cl.CommandQueue(ctx) as closed:
                for _ in range(3):
                    k(closed, x.shape, None, buf)
            still_open = cl.CommandQueue(ctx)
            k(still_open, x.shape, None, buf)
        cl.enqueue_copy(still_open, x, buf)
    assert not [w for w in got if "UsedAfterExit" in type(w.message).__name__], [str(w.message) for w in got]
    assert (x == 4).all()
    df = prof.trace.to_pandas()
    dev = df[df.plane == "/device:OpenCL:0"]
    assert (dev.name == "k").sum() == 4 and set(dev.track) == {"Queue 0", "Queue 1"}
