"""A time window's critical path (``polyprof run --delay D --duration T``, a window
holding no whole step: ``Selection.timed``) is cut at the window, as the window's
tables count device time (``window_counting.counted_ns``): the device work launched in
it that runs past its end, and the wait for that work, count their part inside only.
Before, the path followed the last kernel to its end beyond the window, and the span
("of the analysed span's ...") was longer than the window. Real recordings: OpenCL on
PoCL under ``polyprof run``."""

from __future__ import annotations

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path import critical_path
from polyprof.analyze.frames import column
from polyprof.analyze.window import AUTO
from polyprof.derive import cache

from opencl_programs import HEAD, record  # pytest puts tests/ on sys.path

#: argv: seconds. One long kernel (~0.1 s on PoCL) at a time, each waited for by
#: clFinish, until that many seconds from here: the device busy back to back, so the
#: window's end falls inside a kernel launched in the window, and inside its clFinish
_LOOP = HEAD + """
until = time.perf_counter() + float(sys.argv[1])
knl(q, a.shape, None, da, db, np.int32(600)); q.finish()  # (the first run builds the kernel)
while time.perf_counter() < until:
    knl(q, a.shape, None, da, db, np.int32(600))
    q.finish()
polyprof.step()
"""
#: the window opens this long after the session's start (the set-up over by then)
_DELAY, _DURATION = 1.5, 0.3


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> tuple[polyprof.Trace, str, int, int, int]:
    """The recording: (trace, summary text, the window's start and end, the row of the
    kernel launched in the window that runs past its end)."""
    for _ in range(3):  # (a loaded machine: the window's end may fall between two kernels, or in
        # a kernel launched before the window: record again)
        tmp = tmp_path_factory.mktemp("loop")
        t, text = record(tmp, "loop", _LOOP, ["--delay", str(_DELAY), "--duration", str(_DURATION)],
                         [str(_DELAY + _DURATION + 0.5)])
        lo, hi = t.metadata["schedule"]["windows_ns"][0]
        assert not len(cache.steps(t))
        corr = cache.correlation(t)
        dev, launch = corr.device_rows, corr.launch
        st = t.events["start_ns"].astype(np.int64)
        en = st + t.events["dur_ns"].astype(np.int64)
        crossing = dev[(launch >= 0) & (st[np.maximum(launch, 0)] >= lo) & (st[dev] < hi) & (en[dev] > hi)]
        if len(crossing) == 1:
            return t, text, lo, hi, int(crossing[0])
    raise AssertionError("in 3 recordings no kernel launched in the window ran past its end")


@pytest.mark.opencl
def test_the_path_of_a_time_window_ends_at_its_end(loop: tuple[polyprof.Trace, str, int, int, int]) -> None:
    """The kernel running at the window's end (launched in it) holds its part inside on
    the path, no more; the path and its span are no longer than the window (before: the
    span ran to that kernel's end, past the window, and the kernel held all its time)."""
    t, text, lo, hi, kernel = loop
    cp = critical_path(t, AUTO)
    assert len(cp) and set(column(cp, "step").tolist()) == {-1}
    path, span = int(column(cp, "path_ns")[0]), int(column(cp, "span_ns")[0])
    assert 0.9 * (hi - lo) <= path <= span <= hi - lo  # the device busy back to back through it
    start = column(cp, "start_ns").astype(np.int64)
    end = start + column(cp, "dur_ns").astype(np.int64)
    inside = np.minimum(end, hi) - np.maximum(start, lo)
    assert (column(cp, "on_path_ns") <= inside).all()  # every event: its part inside at most
    k_start = int(t.events["start_ns"][kernel])
    at = np.flatnonzero((start == k_start) & (column(cp, "kind") == "kernel"))
    assert len(at) == 1 and int(end[at[0]]) > hi  # the table keeps the event's own times
    assert int(column(cp, "on_path_ns")[at[0]]) == hi - k_start  # its part inside, on the path
    # the summary's line says the window's span, not one running past it
    assert "of the analysed span's" in text


@pytest.mark.opencl
def test_the_export_track_of_a_time_window_ends_at_its_end(
        loop: tuple[polyprof.Trace, str, int, int, int]) -> None:
    """The export's "critical path" track (``critical_path_track``) is the same graph's:
    no slice of it past the window's end."""
    from polyprof.analyze.critical_path_track import with_critical_path  # (the export's track)

    t, _, lo, hi, _ = loop
    out = with_critical_path(t, AUTO)
    ev = out.events
    tracks = np.flatnonzero([tr.name.startswith("critical path") for tr in out.tracks])
    rows = np.flatnonzero(np.isin(ev["track"], tracks))
    assert len(rows)
    st = ev["start_ns"][rows].astype(np.int64)
    assert (st >= lo).all() and (st + ev["dur_ns"][rows].astype(np.int64) <= hi).all()
