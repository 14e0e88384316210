"""Per-trace memo of derivations, so the analyses of one report correlate once.

A Trace is treated as immutable once built; the memo lives in the instance's
``__dict__`` and goes away with it.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from ..trace.core import Trace

T = TypeVar("T")


def memo(trace: Trace, name: str, fn: Callable[[Trace], T]) -> T:
    store: dict[str, Any] = trace.__dict__.setdefault("_polyprof_memo", {})
    if name not in store:
        store[name] = fn(trace)
    return store[name]


def correlation(trace: Trace):  # -> Correlation
    from .correlate import correlate

    return memo(trace, "correlation", correlate)


def steps(trace: Trace):  # -> Steps
    from .steps import find_steps

    return memo(trace, "steps", find_steps)


def threads(trace: Trace):  # -> np.ndarray
    """Per track id, an id of the OS thread it records: thread tracks of one plane with the
    same tid (e.g. the host plugin's sections and another plugin's API calls on one thread)
    share the smallest of their track ids; every other track keeps its own id."""
    import numpy as np

    def build(t: Trace) -> "np.ndarray":
        out = np.arange(len(t.tracks), dtype=np.int64)
        first: dict[tuple[int, int], int] = {}
        for tr in t.tracks:
            if tr.kind == "thread" and tr.tid:
                out[tr.id] = first.setdefault((tr.plane, tr.tid), tr.id)
        return out

    return memo(trace, "threads", build)
