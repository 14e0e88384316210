"""Host waits linked to the device work they wait for by their stats and names
(``analyze/wait_links.py``), on small built traces: the rules where a wait names no event
or queue (a trace from another tool's file), a queue name two devices share, an event
wait among several finished activities, and timestamps that contradict a link. The real
OpenCL runs are tests/test_critical_path_opencl.py."""

from __future__ import annotations

import numpy as np

import polyprof
from polyprof.analyze import depgraph
from polyprof.analyze.critical_path import critical_path
from polyprof.trace.builder import TraceBuilder

LAUNCH = "clEnqueueNDRangeKernel"


def _trace(waits: list[tuple[str, int, int, dict[str, object]]],
           kernels: list[tuple[int, str, int, int, int]]) -> polyprof.Trace:
    """A host thread that launches ``kernels`` ((device, name, launch time, start, end):
    each launch 2 ns long, queue "Queue 0" of its device), then waits ``waits`` ((name,
    start, end, stats))."""
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host")
    thread = b.track(host, "MainThread", "thread", tid=1)
    for cid, (dev, name, at, s, e) in enumerate(kernels, start=1):
        plane = b.plane(f"/device:OpenCL:{dev}", "device", index=dev, pid=1_000_000 + dev)
        queue = b.track(plane, "Queue 0", "queue", tid=0)
        b.event(thread, LAUNCH, at, 2, "opencl_api", correlation_id=cid, queue="Queue 0")
        b.event(queue, name, s, e - s, "kernel", correlation_id=cid, queue="Queue 0", device=dev)
    for name, s, e, stats in waits:
        b.event(thread, name, s, e - s, "opencl_api", **stats)
    return b.build()


def _links(trace: polyprof.Trace) -> list[tuple[str, str]]:
    """(activity, wait) of each edge from an activity's end to a host call's end."""
    ev = trace.events
    s = np.asarray(ev["start_ns"], np.int64)
    g = depgraph.build(trace, int(s.min()), int((s + np.asarray(ev["dur_ns"], np.int64)).max()))
    names = trace.names(g.rows)
    m = (g.etype == depgraph.SYNC) & g.device[g.src >> 1] & ~g.device[g.dst >> 1]
    return sorted(zip(names[g.src[m] >> 1].tolist(), names[g.dst[m] >> 1].tolist()))


def _on_path(trace: polyprof.Trace) -> dict[str, int]:
    t = critical_path(trace)
    out: dict[str, int] = {}
    for n, v in zip(np.asarray(t["name"]).tolist(), np.asarray(t["on_path_ns"], np.int64).tolist()):
        out[n] = out.get(n, 0) + v
    return out


def test_a_wait_without_stats_waits_for_the_work_that_ended_during_it():
    """A ``clWaitForEvents`` that names no event nor queue (another tool's file): the
    last activity of its plane's launches that ended while it waited."""
    t = _trace([("clWaitForEvents", 10, 1010, {})], [(0, "early", 0, 3, 8), (0, "k", 4, 9, 1005)])
    assert _links(t) == [("k", "clWaitForEvents")]
    on = _on_path(t)
    assert on["k"] == 996 and on["clWaitForEvents"] == 0


def test_an_event_wait_waits_for_the_event_it_names():
    """``waits_for`` names the second kernel: linked to it, not to the later-ending first,
    which ran on another device."""
    t = _trace([("clWaitForEvents", 10, 2010, {"waits_for": 2, "queue": "Queue 0"})],
               [(1, "other", 0, 3, 2000), (0, "named", 4, 9, 1005)])
    assert _links(t) == [("named", "clWaitForEvents")]


def test_a_finish_waits_for_every_queue_of_its_name():
    """The ``queue`` stat is a name per device ("Queue 0"): a finish is linked to the last
    activity launched before it on each queue of that name (the module says so)."""
    t = _trace([("clFinish", 10, 3010, {"queue": "Queue 0"})],
               [(0, "a0", 0, 3, 500), (0, "b0", 3, 501, 1500), (1, "a1", 6, 8, 3000)])
    assert _links(t) == [("a1", "clFinish"), ("b0", "clFinish")]
    on = _on_path(t)
    assert on["a1"] == 2992 and on["clFinish"] == 0


def test_a_blocking_call_waits_for_its_own_command():
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host")
    thread = b.track(host, "MainThread", "thread", tid=1)
    queue = b.track(b.plane("/device:OpenCL:0", "device", pid=1_000_000), "Queue 0", "queue")
    b.event(thread, LAUNCH, 0, 2, "opencl_api", correlation_id=1, queue="Queue 0")
    b.event(queue, "k", 3, 800, "kernel", correlation_id=1)
    b.event(thread, "clEnqueueReadBuffer", 5, 900, "opencl_api", correlation_id=2, queue="Queue 0", blocking=1)
    b.event(queue, "ReadBuffer (DtoH)", 803, 100, "gpu_memcpy", correlation_id=2)
    t = b.build()
    assert _links(t) == [("ReadBuffer (DtoH)", "clEnqueueReadBuffer")]
    on = _on_path(t)
    assert on["k"] == 800 and on["ReadBuffer (DtoH)"] == 100 and on["clEnqueueReadBuffer"] == 0


def test_a_link_the_timestamps_contradict_is_left_out_and_the_wait_keeps_its_time():
    """The named activity ends 5 µs after the wait returned: no link, and the wait's span
    weighs its own time (nothing else explains it); linked, it weighs nothing."""
    for k_end, linked in ((6010, False), (1005, True)):
        t = _trace([("clWaitForEvents", 10, 1010, {"waits_for": 1})], [(0, "k", 0, 3, k_end)])
        assert _links(t) == ([("k", "clWaitForEvents")] if linked else [])
        g = depgraph.build(t, 0, 6010)
        w = int(np.flatnonzero(t.names(g.rows) == "clWaitForEvents")[0])
        into_end = g.weight[g.dst == 2 * w + 1]
        assert into_end.tolist() == ([0, 0] if linked else [1000])
