"""A recording window keeps each counter's level at its start (audit: "Memory by section"
had min and max but mean "-" in every windowed trace and capture: the counters were cut
exactly at the window's start, so the sections that began before the first sample inside
it had no level from their start). The window keeps, per counter series, the last sample
before its start (trace/subset.take ``level_at_start``), in ``--delay``/``--duration``
windows, schedules (collect/schedule.finish) and captures (capture/server.window)."""

from __future__ import annotations

import time

import numpy as np

import polyprof
from polyprof.analyze.sections import section_stats
from polyprof.trace import metadata_keys as mkeys

#: RSS sampled every 100 ms, sections of ~10 ms: the first sections in a window begin
#: before its first sample
HOST = {"host": {"sample_interval_s": 0.1}}


def _loop(seconds: float, step: bool = False) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with polyprof.section("work"):
            sum(range(20_000))
            time.sleep(0.008)
        if step:
            polyprof.step()


def _level_known_from(trace: polyprof.Trace, lo: int) -> None:
    st = section_stats(trace)
    mean = np.asarray(st["mem_mean_bytes"])[list(st["name"]).index("work")]
    assert np.isfinite(mean) and mean > 0, mean  # before: NaN ("-")
    rss = trace.counters["name"] == trace.strings.index("process.rss_bytes")
    ts = trace.counters["ts_ns"][rss]
    assert len(ts) and ts.min() < lo, "no RSS sample before the window's start"
    assert (ts < lo).sum() == 1, "only the last sample before the window is kept"


def test_a_time_window_keeps_the_level_at_its_start():
    with polyprof.profile(["host"], options=HOST, delay=0.35, duration=0.5) as s:
        _loop(1.1, step=True)
    t = s.trace
    lo, hi = t.metadata[mkeys.SCHEDULE]["windows_ns"][0]
    assert t.metadata[mkeys.SCHEDULE]["recorded_steps"]
    _level_known_from(t, lo)


def test_a_schedule_keeps_the_level_at_its_start():
    with polyprof.profile(["host"], options=HOST, schedule=polyprof.schedule(wait=33, active=30)) as s:
        _loop(1.0, step=True)
    t = s.trace
    (lo, _), = t.metadata[mkeys.SCHEDULE]["windows_ns"]
    _level_known_from(t, lo)


def test_a_capture_window_keeps_the_level_at_its_start():
    from polyprof.capture.server import window  # the capture's cut, on a real session's trace

    with polyprof.profile(["host"], options=HOST) as s:
        _loop(0.9)
    t = s.trace
    start = t.metadata[mkeys.SESSION]["start_ns"]
    lo, hi = start + 350_000_000, start + 750_000_000
    _level_known_from(window(t, lo, hi, 0), lo)
