"""The conformance kit against Python plugins that each break one clause of the contract:
the kit must fail exactly that clause, with a reason, and never hang."""

from __future__ import annotations

import threading
import time

import pytest

from polyprof.collect.conformance import Limits, check
from polyprof.collect.plugin import Plugin
from polyprof.trace.builder import TraceBuilder


class Good(Plugin):
    name = "good"

    def _start(self, ctx):
        self.t0 = ctx.now_ns()

    def _stop(self):
        self.t1 = time.perf_counter_ns()

    def _collect(self):
        b = TraceBuilder()
        track = b.track(b.plane("/host:kit-test", "host"), "t", "thread", tid=1)
        b.event(track, "recorded", self.t0, self.t1 - self.t0, "kit_test")
        return b.build()


class StopBeforeStart(Good):
    """Accepts stop() before start(); a second stop() is refused as it should be."""

    def stop(self):
        if self._state == "new":
            self._state = "new"
            return
        super().stop()


class CollectBeforeStart(Good):
    def collect(self):
        if self._state == "new":
            return TraceBuilder().build()
        return super().collect()


class CollectTwiceDiffers(Good):
    def collect(self):
        if self._state == "collected":
            return TraceBuilder().build()
        return super().collect()


class SecondStopAccepted(Good):
    def stop(self):
        if self._state == "stopped":
            return
        super().stop()


class WallClock(Good):
    def _collect(self):
        b = TraceBuilder()
        track = b.track(b.plane("/host:kit-test", "host"), "t", "thread", tid=1)
        b.event(track, "recorded", time.time_ns(), 1000, "kit_test")
        return b.build()


class StuckStop(Good):
    def _stop(self):
        threading.Event().wait(30)  # "never" returns


class StuckStart(Good):
    def _start(self, ctx):
        threading.Event().wait(30)


FAST = Limits(activity_s=0.03, start_s=0.4, stop_s=0.4, collect_s=5)


def _target(cls: type) -> str:
    globals()[cls.__name__] = cls
    return f"{__name__}:{cls.__name__}"


def test_good_plugin_passes():
    report = check(_target(Good), limits=FAST)
    assert report.ok, [(r.id, r.status, r.reason) for r in report.results]


@pytest.mark.parametrize("cls, expected, words", [
    (StopBeforeStart, {"lifecycle"}, "stop() before start() succeeded"),
    (CollectBeforeStart, {"collect_without_start"}, "collect() before start() succeeded"),
    (CollectTwiceDiffers, {"collect_twice"}, "different data"),
    (SecondStopAccepted, {"stop_race"}, "second stop() succeeded"),
    (WallClock, {"valid_trace"}, "not on the session clock"),
])
def test_each_broken_clause_fails_alone(cls, expected, words):
    report = check(_target(cls), limits=FAST)
    assert set(report.failed) == expected, [(r.id, r.status, r.reason) for r in report.results]
    assert words in report.result(next(iter(expected))).reason


@pytest.mark.parametrize("cls, call", [(StuckStop, "stop"), (StuckStart, "start")])
def test_a_python_plugin_that_hangs_is_reported_not_waited_for(cls, call):
    t0 = time.perf_counter()
    report = check(_target(cls), limits=FAST)
    took = time.perf_counter() - t0
    assert took < 12, took  # each clause gives up after the 0.4 s limit
    tl = report.result("time_limits")
    assert tl.status == "fail" and f"{call}() did not return within 0.4 s" in tl.reason, tl.reason
    assert not report.ok
