"""A capture's session stops while the program runs on: the sections open then are
recorded cut at the window's end, with the stat ``open_at_stop`` (collect/opened.py),
not dropped while the device work launched inside them is kept (audit: a capture of an
OpenCL program had the last partial step's launches and kernels but no ``step_work``
section around them; the host's sections ended 47 ms before the window closed).

A plain session's stop (the program's end, or a ``with polyprof.profile()`` block)
still records only the sections that closed (docs/architecture.md)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

import polyprof  # noqa: E402
from polyprof.capture import client, serve  # noqa: E402
from polyprof.collect.opened import OPEN_AT_STOP  # noqa: E402
from polyprof.trace import metadata_keys as mkeys  # noqa: E402
from capture_helpers import Program, free_port  # noqa: E402


def _cut(trace: polyprof.Trace) -> np.ndarray:
    col = trace.stats.get(OPEN_AT_STOP)
    return np.zeros(0, np.int64) if col is None else col.rows


def test_sections_open_at_a_capture_end_are_cut_at_the_window_end(section_impl) -> None:
    """Both section types (compiled and Python), nested and reopened: a thread's
    ``outer`` (opened during the capture) and its 300 ms ``work`` sections."""
    s = serve(0, plugins=["host"], max_duration_ms=20_000)
    stop, started = threading.Event(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            if not started.is_set():
                time.sleep(0.001)
                continue
            with section_impl("outer", epoch=1):
                for _ in range(3):
                    with section_impl("work"):
                        time.sleep(0.3)
                    if stop.is_set():
                        return

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    timer = threading.Timer(0.2, started.set)  # the loop's sections begin once the capture records
    timer.start()
    try:
        got = client.capture([s.address], 500)[0]
    finally:
        stop.set()
        th.join(10)
        s.stop(grace_s=2)
    assert got.ok, got.error
    t = got.trace()
    lo, hi = t.metadata[mkeys.CAPTURE]["window_ns"]
    names = t.names().astype(str)
    cut = _cut(t)
    assert sorted(names[cut]) == ["outer", "work"], list(names)  # before: neither
    assert (t.end_ns[cut] == hi).all() and (t.start_ns[cut] < hi).all()
    assert t.stats["epoch"].values.tolist() == [1]  # the section's own stats are kept with it


def test_a_plain_session_stop_keeps_only_closed_sections() -> None:
    with polyprof.profile(["host"]) as s:
        x = polyprof.section("never_closed").begin()
    x.end()
    assert "never_closed" not in set(s.trace.names().astype(str))


OCL = r"""
import os, sys, time
import numpy as np
import pyopencl as cl
import polyprof
ready, stop = sys.argv[1], sys.argv[2]
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
k = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *x) { x[get_global_id(0)] += 1.0f; }").build(), "k")
x = np.zeros(4096, np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
open(ready, "w").close()
t_end = time.monotonic() + 60
while time.monotonic() < t_end and not os.path.exists(stop):
    with polyprof.section("step_work"):
        for _ in range(5):
            k(q, x.shape, None, buf)
            q.finish()
            time.sleep(0.12)
    polyprof.step()
print("done", flush=True)
"""


@pytest.mark.opencl
def test_an_opencl_capture_keeps_the_section_around_its_last_launches(tmp_path: Path) -> None:
    """Steps of ~600 ms in one section: a capture's end (the host plugin stops last, after
    OpenCL's stop and collect) falls inside one; its launches and kernels are kept, and so
    is the section (cut at the window's end), so every launch lies in a section."""
    pytest.importorskip("pyopencl")
    script = tmp_path / "prog.py"
    script.write_text(OCL)
    port = free_port()
    ready, stop = tmp_path / "ready", tmp_path / f"stop-{port}"
    prog = Program(tmp_path, [sys.executable, "-m", "polyprof", "run", "--serve", f"127.0.0.1:{port}", str(script),
                              str(ready), str(stop)], port)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert prog.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        got = client.capture([prog.address], 900)[0]
    finally:
        rc, out, err = prog.stop()
    assert rc == 0 and out.endswith("done\n"), err[-3000:]
    assert got.ok, got.error
    t = got.trace()
    hi = t.metadata[mkeys.CAPTURE]["window_ns"][1]
    names = t.names().astype(str)
    sec = np.flatnonzero(names == "step_work")
    launches = np.flatnonzero(names == "clEnqueueNDRangeKernel")
    # those of the step the capture began in are in no section: it was opened before any
    # session was there to record it (collect/opened.py)
    launches = launches[t.start_ns[launches] >= t.start_ns[sec].min()]
    assert len(launches) > 3
    inside = (t.start_ns[launches, None] >= t.start_ns[sec][None, :]) & (t.end_ns[launches, None] <= t.end_ns[sec][None, :])
    assert inside.any(axis=1).all(), "launches outside every step_work section"  # before: the last step's
    last = sec[np.argmax(t.start_ns[sec])]
    assert last in set(_cut(t).tolist()) and t.end_ns[last] == hi
