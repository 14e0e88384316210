"""Captures of an OpenCL program served by ``polyprof run --serve`` and by
``POLYPROF_SERVE``: the program makes its queue at its start, long before any capture,
and the captures still get its kernels on the device (the server makes queues profile
from the start, plugins/opencl/early.py); the program's output is its own."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

cl = pytest.importorskip("pyopencl")
pytest.importorskip("grpc")
pytestmark = pytest.mark.opencl  # conftest: skipped, with the reason, where no device compiles

from capture_helpers import Program, free_port  # noqa: E402
from polyprof.capture import client  # noqa: E402
from polyprof.plugins.opencl import OpenCLPlugin  # noqa: E402

if not OpenCLPlugin.availability():
    pytest.skip(f"no OpenCL device: {OpenCLPlugin.availability().reason}", allow_module_level=True)

#: makes its queue first, says so in READY, then launches kernels until STOP (at most 60 s)
OCL_PROGRAM = r"""
import os, sys, time
import numpy as np
import pyopencl as cl
if os.environ.get("IMPORT_POLYPROF"):
    import polyprof  # POLYPROF_SERVE: the server starts here, after pyopencl's import
ready, stop = sys.argv[1], sys.argv[2]
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
print("queue properties", q.properties, flush=True)
k = cl.Kernel(cl.Program(ctx, "__kernel void served(__global float *x) "
                              "{ x[get_global_id(0)] += 1.0f; }").build(), "served")
x = np.zeros(1024, np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
open(ready, "w").close()
t_end = time.monotonic() + 60
n = 0
while time.monotonic() < t_end and not os.path.exists(stop):
    k(q, x.shape, None, buf)
    q.finish()
    n += 1
    time.sleep(0.002)
cl.enqueue_copy(q, x, buf)
print("ran", n > 0, bool(x[0] == n), flush=True)
"""


def _wait_for(path: Path, prog: Program, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert prog.proc.poll() is None, prog.proc.communicate()
        assert time.monotonic() < deadline, f"{path} not written in {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["run --serve", "POLYPROF_SERVE"])
def test_captures_of_queues_made_before_them_have_device_activity(tmp_path: Path, how: str) -> None:
    script = tmp_path / "ocl_program.py"
    script.write_text(OCL_PROGRAM)
    port = free_port()
    ready, stop = tmp_path / "ready", tmp_path / f"stop-{port}"
    address = f"127.0.0.1:{port}"
    if how == "run --serve":
        cmd, env = [sys.executable, "-m", "polyprof", "run", "--serve", address], {}
    else:
        cmd, env = [sys.executable], {"POLYPROF_SERVE": address, "IMPORT_POLYPROF": "1"}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_SERVE")}, **env}
    prog = Program(tmp_path, [*cmd, str(script), str(ready), str(stop)], port, env=env)
    try:
        _wait_for(ready, prog)
        captured = client.capture([address], 400)
        assert captured[0].ok, captured[0].error
        trace = captured[0].trace()
    finally:
        rc, out, err = prog.stop()
    assert rc == 0, err[-3000:]
    assert out.splitlines() == ["queue properties 0", "ran True True"], out  # what it asked for
    assert "no profiling information" not in err and "Warning" not in err, err[-3000:]
    df = trace.to_pandas()
    kernels = df[(df.category == "kernel") & (df.name == "served")]
    launches = df[df.name == "clEnqueueNDRangeKernel"]
    assert len(kernels) > 5 and len(kernels) == len(launches), (len(kernels), len(launches))
    assert kernels.plane.str.startswith("/device:OpenCL").all()
    assert not [w for w in trace.metadata.get("warnings", []) if w.startswith("opencl")]
    assert trace.metadata["opencl"]["unprofiled"] == 0


#: a server started while the program's own session runs, and a session while it serves
NESTED = r"""
import pyopencl as cl, polyprof
import numpy as np
P = cl.command_queue_properties
ctx = cl.create_some_context(interactive=False)
k = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *x) { x[get_global_id(0)] += 1.0f; }").build(), "k")
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
with polyprof.profile(plugins=["opencl"]):  # the session's factory is in place...
    server = polyprof.serve(0, plugins=["opencl"])  # ...and the server keeps it
q = cl.CommandQueue(ctx)
real = int(q.get_info(cl.command_queue_info.PROPERTIES))
print("after the session", bool(real & P.PROFILING_ENABLE), q.properties)
with polyprof.profile(plugins=["opencl"]) as prof:  # a session while serving
    k(q, (64,), None, buf)
    q.finish()
df = prof.trace.to_pandas()
print("kernels", int((df.category == "kernel").sum()))
server.stop()
q2 = cl.CommandQueue(ctx)
print("after both", bool(int(q2.get_info(cl.command_queue_info.PROPERTIES)) & P.PROFILING_ENABLE))
"""


def test_a_server_keeps_queues_profiling_across_sessions(tmp_path: Path) -> None:
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYPROF_SERVE")}
    p = subprocess.run([sys.executable, "-c", NESTED], capture_output=True, text=True, timeout=240, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["after the session True 0", "kernels 1", "after both True"], p.stdout
    assert "Warning" not in p.stderr, p.stderr
