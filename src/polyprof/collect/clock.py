"""The session's reference clock: CLOCK_MONOTONIC in integer ns, plus a wall anchor."""

from __future__ import annotations

import time

from ..trace.metadata_keys import REFERENCE_CLOCK  # noqa: F401 - the clock's name, declared with the keys

#: Reference clock of every trace polyprof records (CLOCK_MONOTONIC on Linux).
now_ns = time.perf_counter_ns


def wall_anchor() -> dict[str, int]:
    """A (monotonic, wall) pair taken as close together as we can, to merge traces
    from other processes and hosts; the bracket bounds its error."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):
        a = now_ns()
        w = time.time_ns()
        b = now_ns()
        if best is None or b - a < best[2] - best[0]:
            best = (a, w, b)
    assert best is not None
    a, w, b = best
    return {"mono_ns": (a + b) // 2, "wall_ns": w, "uncertainty_ns": (b - a) // 2 + 1}
