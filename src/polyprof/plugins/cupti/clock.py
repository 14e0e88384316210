"""CUPTI's clock onto the session clock: paired samples, fitted by the clock service.

A pair is (host before, ``cuptiGetTimestamp()``, host after), the tightest of three
tries; eight at start, eight at stop, and one every ``interval_s`` in between from a
daemon thread (so a long run's drift is pinned in the middle too). The fit
(``trace/clock.py``: convex hull of the brackets) maps every CUPTI timestamp onto the
session clock and says how far off it can be (``bound_ns``, recorded in
``metadata["clock_sync"][plane]["cupti"]``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ...collect.clock import now_ns
from ...trace.clock import DEFAULT_MAX_DRIFT_PPM, ClockFit, ClockSync

METHOD = "cuptiGetTimestamp paired with CLOCK_MONOTONIC, convex hull"


def pair(read: Callable[[], int], tries: int = 3) -> tuple[int, int, int]:
    """The tightest of ``tries`` (host before, other clock, host after) reads."""
    best: tuple[int, int, int] | None = None
    for _ in range(tries):
        a = now_ns()
        o = int(read())
        b = now_ns()
        if best is None or b - a < best[2] - best[0]:
            best = (a, o, b)
    assert best is not None
    return best


class ClockSampler:
    """Paired samples of one clock: ``start()``, ``stop()``, periodic in between."""

    def __init__(self, read: Callable[[], int], interval_s: float = 0.5, burst: int = 8) -> None:
        self.read = read
        self.interval_s = float(interval_s)
        self.burst = int(burst)
        self.samples: list[tuple[int, int, int]] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _burst(self) -> None:
        try:
            self.samples.extend(pair(self.read) for _ in range(self.burst))
        except Exception as e:  # reported in the fit's metadata
            self.errors.append(f"{type(e).__name__}: {e}")

    def start(self) -> None:
        self._burst()
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="polyprof-cupti-clock", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                self.samples.append(pair(self.read))
            except Exception as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                return

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(1.0)
        self._burst()

    def fit(self, max_drift_ppm: float = DEFAULT_MAX_DRIFT_PPM) -> tuple[ClockFit, dict[str, Any]]:
        """The fit CUPTI -> session clock and its metadata (bound, samples, model)."""
        sync = ClockSync(max_drift_ppm=max_drift_ppm, method=METHOD)
        if self.samples:
            s = np.asarray(self.samples, np.int64)
            sync.add_many(s[:, 0], s[:, 1], s[:, 2])
        if len(sync):
            fit = sync.fit()
        else:
            fit = ClockFit(0, 0.0, float("inf"), 0, consistent=False, message="no clock samples", method=METHOD)
        meta = fit.to_dict()
        meta.update(samples=len(self.samples), interval_s=self.interval_s, device_clock="cuptiGetTimestamp",
                    host_clock="CLOCK_MONOTONIC")
        if self.errors:
            meta["errors"] = self.errors[:5]
        return fit, meta
