"""The session's reference clock: CLOCK_MONOTONIC in integer ns, plus a wall anchor and
the clock's domain (which machine's monotonic clock it is)."""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=1)
def clock_domain() -> str:
    """Which CLOCK_MONOTONIC the session's times are on: the running kernel's boot id
    (``boot <id>``), with the time namespace's monotonic offset where one is set
    (``timens <s>.<ns>``); "" where /proc does not say. Two recordings of one domain read
    one clock, whatever their host names (``ranks/align.py`` places one by the other's
    clock where their collectives do not). Read once: a process keeps its boot and its
    time namespace (a session asks at its start and its stop)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read(64).strip()
    except (OSError, ValueError):
        return ""
    if not boot:
        return ""
    try:
        with open("/proc/self/timens_offsets", encoding="ascii") as f:
            lines = f.read(256).split("\n")
    except (OSError, ValueError):  # no time namespaces in this kernel: none offsets the clock
        lines = []
    for fields in (line.split() for line in lines):
        if len(fields) == 3 and fields[0] in ("monotonic", "1") and fields[1:] != ["0", "0"]:
            return f"boot {boot} timens {fields[1]}.{fields[2]:0>9}"
    return f"boot {boot}"
