"""Exports of a live session whose process counters begin before its first event.

The host plugin samples the process (RSS, threads, CPU) from the session's start; the
first event (a section) comes later. Before, the Chrome export counted times from the
first *event* (``otherData.origin_ns``), so every counter sample before it had a
negative ``ts`` (a torch program's: 668 samples down to -8.56 s), which viewers draw
before the trace or drop. Now the origin is the first record, event or counter; the
Kineto export already counted from its first counter sample and stays so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof


@pytest.fixture(scope="module")
def session() -> polyprof.Trace:
    """A real session: 50 ms of process samples, then one section, then 20 ms more."""
    with polyprof.profile(options={"host": {"sample_interval_s": 0.005}}) as prof:
        time.sleep(0.05)
        with polyprof.section("work"):
            sum(range(100_000))
        time.sleep(0.02)
    trace = prof.trace
    assert trace.n_events and len(trace.counters["ts_ns"])
    assert int(trace.counters["ts_ns"].min()) < trace.span_ns[0]  # samples before the first event
    return trace


def _times(trace: polyprof.Trace) -> tuple[np.ndarray, np.ndarray]:
    """(event starts, counter times), each sorted."""
    return np.sort(trace.events["start_ns"]), np.sort(trace.counters["ts_ns"])


def test_chrome_export_has_no_negative_time_and_reads_back_with_the_same_times(session, tmp_path: Path):
    out = polyprof.export(session, tmp_path / "s.json", format="chrome")
    doc = json.loads(Path(out).read_text())
    ts = np.array([e["ts"] for e in doc["traceEvents"] if "ts" in e], np.float64)
    counter_ts = np.array([e["ts"] for e in doc["traceEvents"] if e["ph"] == "C"], np.float64)
    assert len(counter_ts) == len(session.counters["ts_ns"])
    assert ts.min() == 0.0 and counter_ts.min() == 0.0, ts.min()
    origin = doc["otherData"]["origin_ns"]
    assert origin == int(session.counters["ts_ns"].min()) == session.extent_ns[0]
    back = polyprof.load(out)
    (ev, co), (ev_b, co_b) = _times(session), _times(back)
    np.testing.assert_allclose(ev_b + origin, ev, atol=1, rtol=0)  # ts in µs with 3 decimals: to the ns
    np.testing.assert_allclose(co_b + origin, co, atol=1, rtol=0)


def test_kineto_export_counts_from_its_first_counter_sample_too(session, tmp_path: Path):
    out = polyprof.export(session, tmp_path / "s.pt.trace.json", format="kineto")
    doc = json.loads(Path(out).read_text())
    assert min(e["ts"] for e in doc["traceEvents"] if "ts" in e) >= 0
    shift = doc["polyprof"]["wall_shift_ns"]  # Kineto's times are the wall clock
    back = polyprof.load(out)
    (ev, co), (ev_b, co_b) = _times(session), _times(back)
    np.testing.assert_allclose(ev_b - shift, ev, atol=1, rtol=0)
    np.testing.assert_allclose(co_b - shift, co, atol=1, rtol=0)
