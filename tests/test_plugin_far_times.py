"""A plugin part with a few times far outside the session: those events (and counter
samples) are dropped, the rest kept and the drop said in one warning; a part with half
or more of them far outside (a wrong clock) is still refused whole.

Before: one bad event refused the whole part. A live capture lost 2,838 good torch ops
to one op whose end torch.profiler never wrote (started from the capture server's
thread while the program's thread was inside the op): ``1 of 2839 events lie more than
1 h outside the session: from +6.77694 s to +7.42735e+09 s``."""

from __future__ import annotations

import time

import numpy as np
import pytest

import polyprof
from polyprof.collect.plugin import FAR_NS, Plugin
from polyprof.collect.session import Session
from polyprof.trace import metadata_keys as mkeys
from polyprof.trace.builder import TraceBuilder

N = 200
BOGUS_DUR = 7_427_350_000 * 10**9  # the capture's bogus end: +7.42735e+09 s after the start


class _Stray(Plugin):
    """N kernels on the session clock between its start and stop, each with a stat ``i``
    (its index) and a flow from each to the next; ``spoil(starts, durs)`` spoils some,
    ``spoil_ts(ts)`` some of its N counter samples."""

    name = "stray"

    def __init__(self, spoil=None, spoil_ts=None) -> None:
        super().__init__()
        self.spoil, self.spoil_ts = spoil, spoil_ts

    def _start(self, ctx) -> None:
        self.t0 = time.perf_counter_ns()

    def _stop(self) -> None:
        self.t1 = time.perf_counter_ns()

    def _collect(self):
        b = TraceBuilder()
        plane = b.plane("/device:VX:0", "device")
        track = b.track(plane, "queue", "stream")
        starts = np.linspace(self.t0, self.t1 - 10, N).astype(np.int64)
        durs = np.full(N, 10, np.int64)
        if self.spoil is not None:
            self.spoil(starts, durs)
        b.events(track, np.array(["k"] * N, object), starts, durs, "kernel", stats={"i": np.arange(N)})
        b.flows(np.arange(N - 1), np.arange(1, N))
        ts = np.linspace(self.t0, self.t1, N).astype(np.int64)
        if self.spoil_ts is not None:
            self.spoil_ts(ts)
        b.counter(plane, "depth", ts, np.arange(N, dtype=float))
        return b.build()


def _end_never_written(starts, durs) -> None:
    durs[57] = BOGUS_DUR


def _depth(trace) -> np.ndarray:
    """The times of the plugin's counter samples (the host has its own counters)."""
    c = trace.counters
    return c["ts_ns"][c["name"] == trace.string_id("depth")]


def _run(plugin: _Stray):
    with Session([plugin]) as s:
        with polyprof.section("kept"):
            time.sleep(0.01)
    return s.trace


def _kernels(trace):
    rows = trace.rows_named("k")
    return rows, trace.stat_dense("i")[rows].astype(np.int64)


def test_one_event_whose_end_was_never_written_is_dropped_and_the_rest_kept():
    trace = _run(_Stray(_end_never_written))
    assert trace.metadata["plugin_errors"] == []  # before: the part refused, one error
    assert trace.metadata["plugins"]["stray"] == "ok"
    rows, idx = _kernels(trace)
    assert len(rows) == N - 1 and 57 not in idx.tolist()  # before: 0 kernels
    assert sorted(idx.tolist()) == [i for i in range(N) if i != 57]  # each kept event keeps its own stats
    session = trace.metadata["session"]
    assert int(trace.end_ns[rows].max()) <= session["stop_ns"]  # dropped, not clipped to the session's end
    assert "kept" in set(trace.names())
    assert len(_depth(trace)) == N  # its counter samples were all near: all kept
    assert len(trace.flows["src"]) == N - 3  # the two flows of the dropped event go with it
    said = [w for w in mkeys.warning_texts(trace.metadata) if "stray" in w]
    assert len(said) == 1, said
    assert f"1 of {N} events lie more than 1 h outside the session" in said[0]
    assert "+7.42735e+09 s after its start" in said[0] and f"dropped, the other {N - 1} kept" in said[0]


def test_a_start_on_the_wall_clock_is_dropped_too():
    def wall(starts, durs):
        starts[3] = time.time_ns()

    trace = _run(_Stray(wall))
    rows, idx = _kernels(trace)
    assert len(rows) == N - 1 and 3 not in idx.tolist()
    assert trace.metadata["plugin_errors"] == []


def test_a_far_counter_sample_is_dropped_and_the_events_kept():
    def far(ts):
        ts[10] = ts[10] + 2 * FAR_NS

    trace = _run(_Stray(spoil_ts=far))
    assert len(trace.rows_named("k")) == N and trace.metadata["plugin_errors"] == []
    ts = _depth(trace)
    assert len(ts) == N - 1 and int(ts.max()) <= trace.metadata["session"]["stop_ns"]
    said = mkeys.warning_texts(trace.metadata)
    assert any(f"1 of {N} counter samples lie more than 1 h outside" in w for w in said), said


@pytest.mark.parametrize("bad", [N // 2, N])
def test_half_or_more_far_outside_is_a_wrong_clock_and_the_part_is_refused(bad):
    def shift(starts, durs):
        starts[:bad] += 2 * FAR_NS

    trace = _run(_Stray(shift))
    errors = trace.metadata["plugin_errors"]
    assert [e["plugin"] for e in errors] == ["stray"]
    assert f"{bad} of {N} events lie more than 1 h outside the session" in errors[0]["error"]
    assert "session clock" in errors[0]["error"]
    assert trace.metadata["plugins"]["stray"] == "failed"
    assert len(trace.rows_named("k")) == 0 and "kept" in set(trace.names())


def test_just_under_half_is_dropped():
    def shift(starts, durs):
        starts[:N // 2 - 1] += 2 * FAR_NS

    trace = _run(_Stray(shift))
    assert trace.metadata["plugin_errors"] == []
    assert len(trace.rows_named("k")) == N // 2 + 1


def test_keep_near_leaves_a_clean_part_as_it_is():
    from polyprof.collect.plugin import keep_near  # new with the drop (the other tests run on the code before it)

    b = TraceBuilder()
    track = b.track(b.plane("/device:VX:0", "device"), "queue", "stream")
    b.events(track, np.array(["k"] * 3, object), np.array([100, 200, 300]), np.array([10, 10, 10]), "kernel")
    t = b.build()
    got = keep_near(t, 0, 1000)
    assert got.trace is t and got.message is None
