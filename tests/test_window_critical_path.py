"""A time window without a whole step (``polyprof run --delay D --duration T``) is
analysed as that window (``analyze/window.py``, ``Selection.timed``): its critical path
too, not the whole trace's, and its sync stall counts the call that waited through it.
Real recordings: OpenCL on PoCL under ``polyprof run``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polyprof.analyze.common import analysed_span
from polyprof.analyze.critical_path import critical_path, step_windows
from polyprof.analyze.frames import column
from polyprof.analyze.sync import sync_by_thread
from polyprof.analyze.window import AUTO, view
from polyprof.derive import cache

from opencl_programs import EPOCH, FINISH, record  # pytest puts tests/ on sys.path


@pytest.mark.opencl
def test_a_time_windows_critical_path_is_the_windows(tmp_path: Path) -> None:
    """``--delay 1 --duration 0.05`` of 80 ms steps in an 'epoch' section: the summary
    analysed 50 ms but said "critical path 2.46 s of the trace's 2.46 s", the epoch
    section (begun before the window) 95% of it. The path is the window's: its events,
    the calls cut at its edges (the epoch section its part inside), as a step's."""
    t, text = record(tmp_path, "epoch", EPOCH, ["--delay", "1.0", "--duration", "0.05"], ["16", "0.08"])
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    assert not len(cache.steps(t)) and analysed_span(t, AUTO) == (lo, hi)
    assert t.span_ns[1] - t.span_ns[0] > 1_000_000_000  # the epoch section: the whole loop
    numbers, starts, ends = step_windows(view(t, AUTO))
    assert numbers.tolist() == [-1] and (starts.tolist(), ends.tolist()) == ([lo], [hi])
    cp = critical_path(t, AUTO)
    assert len(cp) and set(column(cp, "step").tolist()) == {-1}
    ends = column(cp, "start_ns") + column(cp, "dur_ns")
    assert (ends > lo).all()  # what began before the window lasted into it (cut at its start)
    host = ~np.isin(column(cp, "kind"), ["kernel", "memcpy", "memset", "collective", "sync"])
    assert (column(cp, "start_ns")[host] < hi).all()
    epoch = column(cp, "name") == "epoch"  # begun before the window: its part inside, no more
    assert epoch.sum() == 1 and column(cp, "on_path_ns")[epoch][0] <= hi - lo
    path, span = int(column(cp, "path_ns")[0]), int(column(cp, "span_ns")[0])
    assert 0 < path <= span < (hi - lo) + 50_000_000  # the window, with the device work it launched
    assert "of the analysed span's" in text and "of the trace's" not in text
    # the trace without its window: the whole trace, as before
    whole = critical_path(t)
    assert "epoch" in column(whole, "name").tolist()
    assert int(column(whole, "path_ns")[0]) > 1_000_000_000


@pytest.mark.opencl
def test_a_sync_call_waiting_through_the_window_counts(tmp_path: Path) -> None:
    """A window inside one clFinish of seconds: the thread spent all of it waiting, and
    the finding said "calls=0" (the call began before the window). It counts."""
    t, text = record(tmp_path, "finish", FINISH, ["--delay", "0.8", "--duration", "0.3"], ["60"])
    lo, hi = t.metadata["schedule"]["windows_ns"][0]
    fin = np.flatnonzero(t.names() == "clFinish")
    st = t.events["start_ns"][fin]
    en = st + t.events["dur_ns"][fin]
    assert ((st < lo) & (en >= hi)).any(), "the window is not inside the clFinish: the program ran too fast"
    s = sync_by_thread(t, AUTO)
    assert column(s, "sync_ns")[0] == hi - lo
    assert column(s, "calls")[0] == 1
    assert "calls=1," in text and "calls=0" not in text
