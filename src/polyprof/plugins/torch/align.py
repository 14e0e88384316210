"""Kineto's clock onto the session clock, through the clock service (trace/clock.py).

Kineto writes wall-clock based times. The plugin brackets tiny clock-sync ranges (and
its copies of polyprof sections) with CLOCK_MONOTONIC reads; each bracket bounds the
Kineto <-> session offset. Without markers, the session's wall anchor is used.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...collect.plugin import SessionContext
from ...trace.core import Trace
from ...trace import metadata_keys as mkeys

if TYPE_CHECKING:  # the clock service is imported once torch recorded (not by every session)
    from ...trace.clock import ClockFit


class Capture:
    """One Kineto recording (the session, or one active cycle of a schedule). A plain
    class: every session's discovery imports this module, and a dataclass is slower
    to define in each `polyprof run`."""

    def __init__(self, index: int, samples: list[tuple[int, int]] | None = None, path: str | None = None,
                 trace: Trace | None = None, lost: str = "",
                 mem_categories: dict[tuple[int, int], str] | None = None):
        self.index = index
        self.samples: list[tuple[int, int]] = [] if samples is None else samples  # (before, after) per marker
        self.path = path  # torch's JSON export of it
        #: or its Kineto Trace read from torch's results in memory (activities.py)
        self.trace = trace
        self.lost = lost
        #: torch's category of each allocation, (time ns, address) -> name (memory.py)
        self.mem_categories = mem_categories
        #: ended where the program prepared its own torch profiler, or made after that (handover.py):
        #: its ProfilerStep#N are the program's
        self.handed = False

    def __repr__(self) -> str:
        return (f"Capture(index={self.index}, samples={len(self.samples)}, path={self.path!r}, "
                f"trace={'yes' if self.trace is not None else None}, lost={self.lost!r})")


def fit_alignment(samples: list[tuple[int, int]], kineto_ns: np.ndarray) -> ClockFit | None:
    """Kineto -> session clock from our clock-sync markers: they run one after another
    on one thread, so the n-th bracket ``(before, after)`` pairs with the n-th marker's
    Kineto stamp in time order (a paired sample of the clock service)."""
    k = np.sort(np.asarray(kineto_ns, np.int64))
    if not len(samples) or len(samples) != len(k):
        return None
    s = np.asarray(sorted(samples), np.int64)
    return fit_pairs(s[:, 0], s[:, 1], k)


def fit_pairs(a: np.ndarray, b: np.ndarray, k: np.ndarray, method: str = "paired_markers") -> ClockFit | None:
    """Kineto stamped ``k`` (wall clock) while the session clock read between ``a`` and
    ``b``: the clock service's fit for a clock of the host's rate (an offset bounded by
    the brackets' intersection; drift only if the wall clock was stepped); None when the
    brackets admit no common line (they do not pair up)."""
    if not len(k):
        return None
    from ...trace import clock

    f = clock.fit_same_rate(a, k, b, method=method)
    return f if f.consistent else None


def describe(fit: ClockFit, wall: ClockFit | None = None) -> dict[str, Any]:
    d = {"method": fit.method, "offset_ns": -int(fit.offset_ns), "ref_ns": int(fit.ref_ns),
         "drift_ppm": -fit.drift_ppm, "uncertainty_ns": int(math.ceil(fit.bound_ns)), "samples": fit.n}
    if wall is not None:  # how far the wall anchor alone would have been off (a check on both)
        d["wall_anchor_residual_ns"] = int(wall.offset_ns - fit.offset_ns)
    return d


def clock_summary(cycles: list[dict[str, Any]]) -> dict[str, Any]:
    aligned = [c for c in cycles if "method" in c]
    out: dict[str, Any] = {"source": "kineto", "cycles": cycles}
    if aligned:
        methods = sorted({c["method"] for c in aligned})
        out["method"] = methods[0] if len(methods) == 1 else "mixed"
        out["uncertainty_ns"] = max(int(c["uncertainty_ns"]) for c in aligned)
    return out


def wall_alignment(t: Trace, ctx: SessionContext | None) -> ClockFit:
    from ...trace import clock

    anchor = (ctx.wall_anchor if ctx is not None else None) or {}
    base = t.metadata.get(mkeys.BASE_TIME_NS) or 0
    off = int(anchor.get("wall_ns", 0)) - int(anchor.get("mono_ns", 0))  # wall - session
    # the reader may keep times relative to baseTimeNanoseconds
    if t.n_events and base and int(t.start_ns.min()) < base // 2:
        off -= base
    return clock.constant(-off, int(anchor.get("uncertainty_ns", 0)), "wall_anchor")
