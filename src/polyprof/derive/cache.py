"""Per-trace memo of derivations, so the analyses of one report correlate once.

A Trace is treated as immutable once built; the memo lives in the instance's
``__dict__`` and goes away with it.
"""

from __future__ import annotations

from ..trace.core import Trace
from .correlate import Correlation, correlate
from .memo import memo, threads  # noqa: F401 - the memo and the thread ids, read through cache as before
from .steps import Steps, find_steps


def correlation(trace: Trace) -> Correlation:
    return memo(trace, "correlation", correlate)


def steps(trace: Trace) -> Steps:
    return memo(trace, "steps", find_steps)
