"""The critical path of an OpenCL program (PoCL through pyopencl): the host's waits
(``Event.wait``, ``cl.wait_for_events``, ``clFinish``, a blocking read) depend on the
device work they wait for (``analyze/wait_links.py``), so the path holds that kernel,
for as long as its own profiling timestamps say it ran, and the waits hold nothing.
Before, the waits were linked to nothing: the path was the waits' own time (98.7% of it
``clWaitForEvents`` in the audited run) and the kernel was not on it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl  # conftest: skipped, with the reason, where no device compiles

import polyprof  # noqa: E402
from polyprof.analyze import depgraph  # noqa: E402
from polyprof.analyze.critical_path import critical_path, step_windows  # noqa: E402
from polyprof.analyze.critical_path_track import with_critical_path  # noqa: E402
from polyprof.plugins.opencl import OpenCLPlugin  # noqa: E402
from polyprof.ranks.critical_path import job_critical_path  # noqa: E402

if not OpenCLPlugin.availability():
    pytest.skip(f"no OpenCL device: {OpenCLPlugin.availability().reason}", allow_module_level=True)

SRC = """
__kernel void heavy(__global float* y, int iters) {
  int i = get_global_id(0); float v = y[i];
  for (int k = 0; k < iters; k++) v = sin(v) * 0.99f + 0.01f;
  y[i] = v;
}
__kernel void light(__global float* y) { int i = get_global_id(0); y[i] = y[i] * 0.5f; }
"""
N = 1 << 16
ITERS = 8  # ~40-120 ms a run on PoCL with two cores: far longer than an enqueue call
RUNS = 3
#: per way of waiting, the host call that waits and the device activity it waits for (a
#: blocking read waits for its own copy, which the queue runs after the kernel)
WAITS = {"event_wait": ("clWaitForEvents", "heavy"), "wait_for_events": ("clWaitForEvents", "heavy"),
         "finish": ("clFinish", "heavy"), "blocking_read": ("clEnqueueReadBuffer", "ReadBuffer (DtoH)")}


@pytest.fixture(scope="module")
def program() -> Any:
    ctx = cl.create_some_context(interactive=False)
    return ctx, cl.Program(ctx, SRC).build()


def _profile(program: Any, how: str) -> tuple[polyprof.Trace, int]:
    """RUNS times: a light kernel, the heavy one, then the host waits for it ``how``.
    Returns the trace and the heavy kernels' own profiled time (their events' end less start)."""
    ctx, prg = program
    y = np.random.default_rng(0).random(N).astype(np.float32)
    out = np.empty_like(y)
    heavy_events = []
    with polyprof.profile(plugins=["opencl"]) as prof:
        q = cl.CommandQueue(ctx)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=y)
        heavy, light = cl.Kernel(prg, "heavy"), cl.Kernel(prg, "light")
        for _ in range(RUNS):
            light(q, (N,), None, buf)
            e = heavy(q, (N,), None, buf, np.int32(ITERS))
            heavy_events.append(e)
            if how == "event_wait":
                e.wait()
            elif how == "wait_for_events":
                cl.wait_for_events([e])
            elif how == "finish":
                q.finish()
            else:  # a blocking read: waits for its own copy, which runs after the kernel
                cl.enqueue_copy(q, out, buf, is_blocking=True)
    own = sum(int(e.profile.end - e.profile.start) for e in heavy_events)
    return prof.trace, own


def _on_path(table: Any, name: str) -> int:
    names, on = np.asarray(table["name"]), np.asarray(table["on_path_ns"], np.int64)
    return int(on[names == name].sum())


@pytest.mark.parametrize("how", list(WAITS))
def test_the_path_holds_the_kernel_the_host_waits_for(program: Any, how: str) -> None:
    for _ in range(3):  # (a loaded machine holds the host thread off the cores between the
        trace, own = _profile(program, how)  # kernels: its own time then fills the path;
        table = critical_path(trace)          # CI at load 10, 44%: recorded again)
        if _on_path(table, "heavy") >= 0.8 * int(np.asarray(table["path_ns"])[0]):
            break
    call, waited = WAITS[how]
    # each wait's end depends on the end of the activity it waited for, on the same queue
    _, t0, t1 = step_windows(trace)
    g = depgraph.build(trace, int(t0[0]), int(t1[0]))
    names = trace.names(g.rows)
    sync = g.etype == depgraph.SYNC
    links = sorted(zip(names[g.src[sync] >> 1].tolist(), names[g.dst[sync] >> 1].tolist(),
                       (g.src[sync] & 1).tolist(), (g.dst[sync] & 1).tolist()))
    assert links.count((waited, call, 1, 1)) == RUNS, links
    path = int(np.asarray(table["path_ns"])[0])
    heavy = _on_path(table, "heavy")
    # the kernel's whole time is on the path, as its own profiling timestamps give it
    # (the trace's are on the host clock: a fit of ppm drift, a few ns of rounding)
    assert abs(heavy - own) <= 1e-4 * own + 1_000, (heavy, own)
    assert heavy >= 0.8 * path, (heavy, path)
    # the waits hold none of it
    assert _on_path(table, call) == 0
    # `polyprof critical-path` of the one trace takes the same graph
    job = job_critical_path({0: trace})
    assert _on_path(job, "heavy") == heavy
    assert int(np.asarray(job["path_ns"])[0]) == path


def test_the_track_shows_the_kernel_not_the_wait(program: Any) -> None:
    trace, own = _profile(program, "event_wait")
    t = with_critical_path(trace)
    track = next(tr.id for tr in t.tracks if tr.name == "critical path")
    mine = np.flatnonzero(np.asarray(t.events["track"]) == track)
    names = t.names(mine)
    dur = np.asarray(t.events["dur_ns"], np.int64)[mine]
    assert abs(int(dur[names == "heavy"].sum()) - own) <= 1e-4 * own + 1_000
    assert "clWaitForEvents" not in set(names.tolist())
