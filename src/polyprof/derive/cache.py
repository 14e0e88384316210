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
