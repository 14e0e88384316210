"""The analysed window of windowed and scheduled recordings (``analyze/window.py``):
a time window without a whole step is analysed as that window, not as the whole run;
a schedule's cycles are analysed as separate stretches, the unrecorded steps between
them left out; a torch drop-in's events before its first recorded step and between its
cycles are not counted. Real recordings: OpenCL on PoCL under ``polyprof run``, torch
on the CPU in process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import idle_time_breakdown, temporal_breakdown
from polyprof.analyze.common import analysed_span, analysed_stretches
from polyprof.analyze.findings import findings
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.analyze.window import AUTO, Window, label, view
from polyprof.derive import cache
from polyprof.report.tables import build
from polyprof.report.terminal import _recorded_in_span

from opencl_programs import head, record  # pytest puts tests/ on sys.path

# an OpenCL loop: 4 kernels and a read per step, then a sleep of SLOW seconds in steps
# SLOW_STEPS (unrecorded by the schedule below) and FAST seconds in the others; an
# 'epoch' section around the whole loop
_LOOP = head(1 << 14) + """
n, fast, slow = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
slow_steps = {int(s) for s in sys.argv[4].split(",") if s}
with polyprof.section("epoch"):
    for step in range(n):
        with polyprof.section("step_work"):
            for j in range(4):
                prg.axpy(q, a.shape, None, da, db, np.int32(100))
            cl.enqueue_copy(q, a, da)
            time.sleep(slow if step in slow_steps else fast)
        polyprof.step()
"""


def _run(tmp_path: Path, name: str, args: list[str], prog: list[str]) -> polyprof.Trace:
    return record(tmp_path, name, _LOOP, args, prog, summary=False)[0]


@pytest.mark.opencl
def test_a_time_window_without_a_whole_step_is_analysed_as_the_window(tmp_path: Path) -> None:
    """``polyprof run --delay 2 --duration 0.05`` of a loop of ~100 ms steps inside an
    'epoch' section: no whole step in the window, so its marks are left out; the summary
    analysed the whole 3.85 s trace (the epoch section, kept whole, stretching it), the
    device 98% idle for a window it was busy in. The window is the analysed span."""
    t = _run(tmp_path, "win", ["--delay", "1.0", "--duration", "0.05"], ["16", "0.1", "0.1", ""])
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    assert not len(cache.steps(t)) and t.metadata["schedule"]["recorded_steps"] == []
    t0, t1 = t.span_ns
    assert t1 - t0 > 1_000_000_000  # the epoch section: the whole loop
    assert analysed_span(t, AUTO) == (lo, hi)
    assert label(t, AUTO).startswith("the time window the schedule recorded, 50 ms: it holds no whole step")
    tb = temporal_breakdown(t, AUTO)
    assert column(tb, "span_ns").tolist() == [hi - lo] * len(tb)
    # the device worked in the window (4 kernels of ~a ms a step, one step in 50 ms or two)
    assert (column(tb, "busy_ns") > 0).all()
    # sections counted: those that overlap the window, for their part inside it: the
    # epoch begun before it (and ended after) for the window's length, not its seconds
    ss = section_stats(t, AUTO)
    epoch = column(ss, "name") == "epoch"
    assert column(ss, "count")[epoch].tolist() == [1] and column(ss, "total_ns")[epoch].tolist() == [hi - lo]


@pytest.mark.opencl
def test_a_schedules_cycles_leave_the_unrecorded_steps_between_them_out(tmp_path: Path) -> None:
    """``--schedule wait=2,warmup=1,active=3,repeat=2``: steps 3-5 and 9-11 recorded; the
    unrecorded steps 6-8 between the cycles (here 0.25 s each) were analysed as idle
    device time (idle 52%, "sits idle 60% of step time between steps, after_step=5").
    They are not analysed: the span is the two cycles' stretches."""
    t = _run(tmp_path, "sched", ["--schedule", "wait=2,warmup=1,active=3,repeat=2"],
             ["14", "0.02", "0.25", "6,7,8"])
    steps = cache.steps(t)
    assert steps.number.tolist() == [3, 4, 5, 9, 10, 11]
    v = view(t, AUTO)
    ws, we = analysed_stretches(v)
    assert len(ws) == 2 and we[0] <= ws[1]
    assert ws[1] - we[0] > 600_000_000  # the three slow steps
    assert ws[0] == steps.start[0] and ws[1] == steps.start[3]
    assert "between its 2 recorded stretches is not analysed" in label(t, AUTO)
    assert label(t, Window(4, 11)).startswith("steps 4-5, 9-10 of 3-5, 9-11 (steps 4:11; the ")
    span = int((we - ws).sum())
    tb = temporal_breakdown(t, AUTO)
    assert column(tb, "span_ns").tolist() == [span] * len(tb)
    t0, t1 = analysed_span(t, AUTO)
    assert span < t1 - t0 - 600_000_000
    assert (column(tb, "idle_ns") < ws[1] - we[0]).all(), tb  # the gap counted was more idle than this
    ib = idle_time_breakdown(t, window=AUTO)
    assert column(ib, "idle_ns").tolist() == column(tb, "idle_ns").tolist()
    between = [f for f in findings(t, window=AUTO) if f.id == "idle_between_steps"]
    assert all(r["after_step"] != 5 for f in between for r in f.events), between
    # the sections counted: those of the six recorded steps
    ss = section_stats(t, AUTO)
    assert column(ss, "count")[column(ss, "name") == "step_work"].tolist() == [6]
    # the summary's first line says how much of the analysed span was recorded
    ov = build(t).overview
    assert ov["recorded_in_span_ns"] == span < ov["analysed_span_ns"]
    assert _recorded_in_span(ov).endswith(" of it recorded)")


def test_a_torch_drop_in_counts_only_its_recorded_steps() -> None:
    """A torch drop-in with ``schedule(wait=2, warmup=1, active=3, repeat=2)``: every step
    of its trace (3-5, 9-11) was recorded, so the window fell to "every step" with an
    open start: the sections of steps 0-2 and 6-8 (recorded by polyprof, not torch)
    counted, 12 where 6 ran in the recorded steps."""
    torch = pytest.importorskip("torch")
    import polyprof.torch as ptorch

    torch.set_num_threads(1)
    model = torch.nn.Linear(32, 32)
    x = torch.randn(8, 32)
    sched = torch.profiler.schedule(wait=2, warmup=1, active=3, repeat=2)
    with ptorch.profile(schedule=sched) as prof:
        for _ in range(14):
            with polyprof.section("mystep"):
                model(x).sum().backward()
                torch.randn(64, 64).uniform_()
            prof.step()
    t = prof.trace
    steps = cache.steps(t)
    assert steps.number.tolist() == [3, 4, 5, 9, 10, 11]
    assert (t.names() == "mystep").sum() > 6  # polyprof's sections of the unrecorded steps too
    ss = section_stats(t, AUTO)
    assert column(ss, "count")[column(ss, "name") == "mystep"].tolist() == [6]
    # and so with every step asked for (--skip-first 0): no open start in a schedule's trace
    ss = section_stats(t, Window(skip_first=0))
    assert column(ss, "count")[column(ss, "name") == "mystep"].tolist() == [6]
    ws, we = analysed_stretches(t, AUTO)
    assert len(ws) == 2 and ws[0] == steps.start[0]
    assert label(t, AUTO).startswith("all 6 steps (3-5, 9-11) (the steps the schedule recorded")
    assert np.all(we[:-1] <= ws[1:])
