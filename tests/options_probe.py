"""Plugins for tests/test_options.py, importable by a ``polyprof run`` child as
``options_probe:SlowStop`` (the tests put this folder on its PYTHONPATH).

Each records one event whose name says whether it was given ``memory=True`` (what a
session's ``memory`` option promises every plugin), and is slow in one phase so a
session's time limits show: its error names the limit it was held to."""

from __future__ import annotations

import threading

from polyprof.collect.plugin import Plugin, SessionContext
from polyprof.trace import TraceBuilder

#: how long the slow phase takes: longer than any limit the tests set
SLOW_S = 3.0


class _Probe(Plugin):
    name = "probe"
    slow = ""

    def _start(self, ctx: SessionContext) -> None:
        self.t0 = ctx.now_ns()

    def _stop(self) -> None:
        self.t1 = SessionContext.now_ns()
        if self.slow == "stop":
            threading.Event().wait(SLOW_S)

    def _collect(self):  # type: ignore[no-untyped-def]
        if self.slow == "collect":
            threading.Event().wait(SLOW_S)
        b = TraceBuilder()
        t = b.track(b.plane(f"/device:Probe:{self.name}", "device"), "queue 0", "queue")
        b.event(t, f"{self.name} memory={bool(self.options.get('memory'))}", self.t0, self.t1 - self.t0, "kernel")
        return b.build()


class Quick(_Probe):
    name = "probe-quick"


class SlowStop(_Probe):
    name = "probe-slow-stop"
    slow = "stop"


class SlowCollect(_Probe):
    name = "probe-slow-collect"
    slow = "collect"
