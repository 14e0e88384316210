"""The analyses of a schedule's recorded stretches that did not keep to them
(``analyze/window.py`` ``Selection.stretches``, ``analyze/common.py``
``analysed_stretches``): ``--span device`` counted the unrecorded steps between two
cycles as idle; the copy-bound finding counted copies between them; the memory events
of a view, the diff's no-steps span and a time window's MFU took ``[lo, hi)`` whole.
Real recordings: OpenCL on PoCL under ``polyprof run --schedule`` and a torch drop-in's
schedule under ``polyprof run``; torch on the CPU in process."""

from __future__ import annotations

import time

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import idle_time_breakdown, temporal_breakdown
from polyprof.analyze.common import analysed_span, analysed_stretches, stretches_ns
from polyprof.analyze.diff_sums import summarize
from polyprof.analyze.efficiency import mfu, model_rows
from polyprof.analyze.findings import findings
from polyprof.analyze.frames import column
from polyprof.analyze.memory import memory, memory_timeline
from polyprof.analyze.window import AUTO, Window, selection, view
from polyprof.derive import cache

from opencl_programs import head, record  # pytest puts tests/ on sys.path

#: an OpenCL loop: 4 kernels and a read per step, then a sleep: 0.25 s in steps 6-8
#: (which the schedule below does not record), 0.02 s in the others
_LOOP = head(1 << 14) + """
for step in range(14):
    for j in range(4):
        prg.axpy(q, a.shape, None, da, db, np.int32(100))
    cl.enqueue_copy(q, a, da)
    time.sleep(0.25 if step in (6, 7, 8) else 0.02)
    polyprof.step()
"""

#: a torch drop-in's schedule (steps 3-5 and 9-11 recorded) around OpenCL copies: the
#: session records OpenCL in every step, the unrecorded ones too; each step makes a
#: buffer (a memory event under --memory), copies through it and frees it
_DROP_IN = """
import time
import numpy as np
import pyopencl as cl
import torch
import polyprof.torch as pt
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
a = np.ones(1 << 22, np.float32)
with pt.profile(schedule=torch.profiler.schedule(wait=2, warmup=1, active=3, repeat=2)) as prof:
    for step in range(14):
        d = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, a.nbytes)
        for j in range(4):
            cl.enqueue_copy(q, d, a)
            cl.enqueue_copy(q, a, d)
        q.finish()
        d.release()
        if step in (6, 7, 8):
            time.sleep(0.25)
        prof.step()
"""

DEVICE = Window(skip_first=0, span="device")


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> polyprof.Trace:
    tmp = tmp_path_factory.mktemp("sched")
    return record(tmp, "sched", _LOOP, ["--schedule", "wait=2,warmup=1,active=3,repeat=2"], [], summary=False)[0]


@pytest.mark.opencl
def test_device_span_keeps_a_schedules_stretches(scheduled: polyprof.Trace) -> None:
    """``--span device`` of ``--schedule wait=2,warmup=1,active=3,repeat=2`` (steps 3-5,
    9-11; the unrecorded 6-8 sleep 0.75 s): before, one stretch from the first to the last
    device activity, 924 ms, "idle 97%" where the default window says 84%, and "sits idle
    486% of step time between steps" (the gap between the cycles as a gap after step 5).
    Now each cycle is a stretch from its first to its last device activity."""
    t = scheduled
    assert cache.steps(t).number.tolist() == [3, 4, 5, 9, 10, 11]
    ws, we = analysed_stretches(t, AUTO)
    ds, de = analysed_stretches(t, DEVICE)
    assert len(ds) == 2 and de[0] <= ds[1]
    # each inside its cycle's stretch (the device's part of it), the gap left out
    assert (ds >= ws).all() and (de <= we).all()
    assert ds[1] - de[0] >= ws[1] - we[0] > 600_000_000
    t0, t1 = analysed_span(t, DEVICE)
    assert (t0, t1) == (ds[0], de[-1]) and stretches_ns(view(t, DEVICE)) < t1 - t0 - 600_000_000
    auto, dev = temporal_breakdown(t, AUTO), temporal_breakdown(t, DEVICE)
    assert column(dev, "span_ns").tolist() == [int((de - ds).sum())] * len(dev)
    assert column(dev, "busy_ns").tolist() == column(auto, "busy_ns").tolist()  # the same activity
    # less idle than the default window's (no host time before each cycle's first kernel)
    assert (column(dev, "idle_pct") <= column(auto, "idle_pct")).all(), (dev, auto)
    assert column(idle_time_breakdown(t, window=DEVICE), "idle_ns").tolist() == column(dev, "idle_ns").tolist()
    # the gap between steps, whichever span: the same finding
    share = {}
    for w in (AUTO, DEVICE):
        got = [f for f in findings(t, window=w) if f.id == "idle_between_steps"]
        assert all(r["after_step"] != 5 for f in got for r in f.events), got
        share[w] = [f.evidence["share_pct"] for f in got]
        for f in findings(t, window=w):
            if f.id == "host_bound":
                assert f.evidence["span_ns"] == stretches_ns(view(t, w))
    assert share[DEVICE] == share[AUTO]


@pytest.mark.opencl
def test_the_diff_span_of_a_schedule_leaves_the_gap_out(scheduled: polyprof.Trace) -> None:
    """``diff``'s time of a trace (its one sample where a side has no steps) was the
    window's ``[lo, hi)``: the two cycles and the 0.75 s between them (944 ms of 176 ms
    recorded). Now the stretches' time, the steps' own here."""
    t = scheduled
    steps = cache.steps(t)
    sel = selection(view(t, AUTO))
    assert sel is not None and sel.stretches is not None
    assert summarize(t, AUTO).span_ns == int((steps.end - steps.start).sum()) == int(
        (sel.stretches[:, 1] - sel.stretches[:, 0]).sum())


@pytest.fixture(scope="module")
def dropped(tmp_path_factory: pytest.TempPathFactory) -> polyprof.Trace:
    pytest.importorskip("torch")
    t = record(tmp_path_factory.mktemp("drop"), "drop", _DROP_IN, ["--memory"], [], summary=False)[0]
    assert cache.steps(t).number.tolist() == [3, 4, 5, 9, 10, 11]
    ws, we = analysed_stretches(t, AUTO)
    assert len(ws) == 2
    start = t.events["start_ns"][cache.correlation(t).device_rows]
    assert ((start > we[0]) & (start < ws[1])).any()  # copies between the cycles are in the trace
    return t


@pytest.mark.opencl
def test_the_copy_bound_finding_keeps_to_the_stretches(dropped: polyprof.Trace) -> None:
    """A torch drop-in's schedule under ``polyprof run``: the session recorded OpenCL
    copies in the unrecorded steps 6-8 too. Under ``--span device`` the span was one
    stretch through them (921 ms, the temporal breakdown's busy time 106 ms with their
    copies), and the copy-bound finding said "7.7% of the span". Now its copy time is
    clipped to the analysed stretches and set against their total, in either span."""
    t = dropped
    for w in (AUTO, DEVICE):
        (f,) = [f for f in findings(t, window=w) if f.id == "copy_bound"]
        ds, de = analysed_stretches(t, w)
        assert len(ds) == 2 and f.evidence["span_ns"] == int((de - ds).sum())
        # the device does nothing but copy: the copies' busy time is the device's, in the stretches
        busy = temporal_breakdown(t, w)
        assert f.evidence["copy_busy_ns"] == int(column(busy, "busy_ns")[column(busy, "track_id") == -1][0])
        assert f.evidence["copy_pct_of_span"] == pytest.approx(
            100 * f.evidence["copy_busy_ns"] / f.evidence["span_ns"], abs=0.01)


@pytest.mark.opencl
def test_memory_between_a_drop_ins_cycles_is_not_counted(dropped: polyprof.Trace) -> None:
    """The view's memory events were those in ``[lo, hi)``: steps 6-8's buffers too (18
    events where the 6 recorded steps made and freed 12), while the out-of-memory finding
    kept to the stretches. Now both use ``window_counting.inside``."""
    t = dropped
    v = view(t, AUTO)
    ws, we = analysed_stretches(v)
    assert len(memory(t).rows) > 12 and len(memory(v).rows) == 12
    ts = column(memory_timeline(t, AUTO), "ts_ns")
    assert len(ts) == 12 and not ((ts > we[0]) & (ts < ws[1])).any()


MS = 1_000_000


def test_the_mfu_of_a_time_window_is_its_flops_over_its_time() -> None:
    """A time window that holds no whole step (torch resumed at a step boundary 100 ms into
    it; the next came after it closed): the MFU is the FLOPs of the ops that start in the
    window over the window's recorded time (``stretches_ns``), as the tables that count
    host events count them."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    m = torch.nn.Linear(128, 128)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(32, 128)
    m(x).sum().backward()
    opt.step()
    with polyprof.profile(["host", "torch"], delay=0.3, duration=0.3, options={"torch": {"with_flops": True}}) as s:
        opened = s._driver.open_ns
        for k in (-200, 100, 500):
            while time.perf_counter_ns() < opened + k * MS:
                m(x).sum().backward()
            opt.step()
    t = s.trace
    v = view(t, AUTO)
    sel = selection(v)
    assert sel is not None and sel.timed and not len(cache.steps(v))
    rows, flops, _ = model_rows(v)
    start = t.events["start_ns"][rows]
    inside = (start >= sel.lo) & (start < sel.hi)
    assert inside.any()
    got = mfu(v)
    assert column(got, "step").tolist() == [-1]
    assert column(got, "flops")[0] == pytest.approx(float(np.nansum(flops[inside])))
    assert column(got, "time_ns")[0] == stretches_ns(v) == sel.hi - sel.lo
