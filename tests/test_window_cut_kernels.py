"""A time window (``polyprof run --delay D --duration T``) that cuts device activity at
its edges: "Top device activity" (``kernel_breakdown``) and "Launches"
(``launch_summary``) count each activity with any part inside the window, for that part,
as "Device time" (``temporal_breakdown``) covers it, so the three agree side by side.
Before, the two tables counted the kernels that *started* in the window, whole: a
0.35 s window of ~50 ms kernels read 8 activities and 350 ms of compute in "Device
time" against 7 kernels and 332 ms in "Top device activity". Real recording: OpenCL on
PoCL under ``polyprof run``."""

from __future__ import annotations

import numpy as np
import pytest

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.ops import launch_stats
from polyprof.analyze.window import AUTO
from polyprof.analyze.window_counting import restrict
from polyprof.derive import cache
from polyprof.report.tables import build

from opencl_programs import HEAD, record  # pytest puts tests/ on sys.path

#: argv: seconds. Long kernels back to back for that long from here: the next one queued
#: before waiting for the one running, so the queue never runs dry and a window that
#: closes within those seconds of the session's start cuts kernels at its edges, however
#: fast or loaded the machine is
_BUSY = HEAD + """
until = time.perf_counter() + float(sys.argv[1])
running = knl(q, a.shape, None, da, db, np.int32(600))
while time.perf_counter() < until:
    queued = knl(q, a.shape, None, da, db, np.int32(600))
    running.wait()
    running = queued
q.finish()
polyprof.step()
"""
_DELAY, _DURATION = 1.5, 0.35


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> tuple[polyprof.Trace, int, int]:
    """The recording of a 0.35 s window of back-to-back kernels: (trace, its start, its end)."""
    t, _ = record(tmp_path_factory.mktemp("cut"), "busy", _BUSY, ["--delay", str(_DELAY), "--duration", str(_DURATION)],
                  [str(_DELAY + _DURATION + 0.6)], summary=False)
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    rows = cache.correlation(t).device_rows
    st = t.events["start_ns"][rows].astype(np.int64)
    en = st + t.events["dur_ns"][rows]
    cut = ((st < lo) & (en > lo)) | ((st < hi) & (en > hi))
    assert cut.any(), "no kernel runs through the window's edges: the program's set-up took over the delay"
    assert not len(cache.steps(t))
    return t, lo, hi


@pytest.mark.opencl
def test_kernel_and_launch_tables_count_what_the_device_time_covers(busy: tuple[polyprof.Trace, int, int]) -> None:
    """One in-order queue: its compute time in "Device time" is the kernels' summed time
    inside the window, which "Top device activity" and "Launches" now count too, with
    the same number of activities."""
    t, lo, hi = busy
    tables = build(t, AUTO).tables
    tb, kb, ls = tables["temporal_breakdown"], tables["kernel_breakdown"], tables["launch_summary"]
    device = column(tb, "track_id") == -1
    assert column(tb, "span_ns")[device].tolist() == [hi - lo]
    compute = int(column(tb, "compute_ns")[device][0])
    activities = int(column(tb, "activities")[device][0])
    assert column(kb, "kind").tolist() == ["compute"]
    assert int(column(kb, "total_ns").sum()) == compute
    assert int(column(kb, "count").sum()) == activities == int(column(ls, "count").sum())
    launched = column(ls, "device_mean_ns") * column(ls, "count")
    assert abs(float(launched.sum()) - compute) <= len(launched)  # (means: a ns of rounding each)
    assert int(column(kb, "max_ns").max()) <= hi - lo


@pytest.mark.opencl
def test_a_kernel_cut_by_the_window_counts_its_part_inside(busy: tuple[polyprof.Trace, int, int]) -> None:
    """A kernel begun before the window is a launch of the window's (its own start and
    launch delay kept), its device time the part inside; exported, the window keeps it."""
    t, lo, hi = busy
    rows = launch_stats(t, AUTO)
    start = column(rows, "device_start_ns")
    dur = column(rows, "device_duration_ns")
    own = t.events["dur_ns"][column(rows, "device_row")]
    assert (np.minimum(start + own, hi) - np.maximum(start, lo) == dur).all()
    before = start < lo
    if before.any():  # (the window's start fell in a kernel: almost always)
        assert (dur[before] < own[before]).all()
        assert (column(rows, "launch_delay_ns")[before] == start[before] - column(rows, "launch_start_ns")[before]).all()
    kept = restrict(t, AUTO)
    assert cache.correlation(kept).device_rows.size == len(rows)
