"""An example polyprof plugin: every pause of Python's garbage collector, with the
generation collected and how many objects it freed.

It shows the whole contract in a few lines: ``availability()`` says whether it can
run here; ``_start`` hooks in (the base class refuses a second start); ``_stop``
unhooks and is cheap; ``_collect`` only converts what was gathered into a Trace
through ``TraceBuilder`` and touches nothing else.
"""

from __future__ import annotations

import gc
import os
import threading

import numpy as np

from polyprof.collect.clock import now_ns
from polyprof.collect.plugin import Availability, Plugin, SessionContext
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.core import Trace

PLANE = "/host:gc"


class GcPausePlugin(Plugin):
    name = "gc-pauses"
    device_kinds = ("CPU",)
    default = False  # opt-in: `polyprof run --plugins host,gc-pauses`

    @classmethod
    def availability(cls) -> Availability:
        if not hasattr(gc, "callbacks"):
            return Availability(False, "this Python has no gc.callbacks")
        return Availability(True)

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """What `polyprof plugin check` runs while this plugin records: make garbage."""
        import time

        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            cycle: list = []
            cycle.append(cycle)
            del cycle
            gc.collect(0)

    def _start(self, ctx: SessionContext) -> None:
        self._open: dict[int, tuple[int, int]] = {}  # thread -> (start, generation)
        self._rows: list[tuple[int, int, int, int, int]] = []  # tid, start, end, generation, collected
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        # Runs inside the collector, on whatever thread triggered it: keep it tiny.
        tid = threading.get_native_id()
        if phase == "start":
            self._open[tid] = (now_ns(), info.get("generation", -1))
        else:
            begin = self._open.pop(tid, None)
            if begin is not None:
                self._rows.append((tid, begin[0], now_ns(), begin[1], info.get("collected", 0)))

    def _stop(self) -> None:
        try:
            gc.callbacks.remove(self._on_gc)
        except ValueError:
            pass

    def _collect(self) -> Trace:
        b = TraceBuilder()
        plane = b.plane(PLANE, "host", pid=os.getpid())
        if self._rows:
            rows = np.asarray(self._rows, np.int64)
            for tid in np.unique(rows[:, 0]):
                sel = rows[rows[:, 0] == tid]
                track = b.track(plane, f"gc [{tid}]", "thread", tid=int(tid))
                names = np.asarray([f"gc gen{g}" for g in sel[:, 3]], object)
                b.events(track, names, sel[:, 1], sel[:, 2] - sel[:, 1], "gc",
                         stats={"generation": sel[:, 3], "collected": sel[:, 4]})
        return b.build()
