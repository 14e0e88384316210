"""Derivations: correlation, steps, section projection and the derived device lines.

``derive(trace)`` returns a new trace with the derived lines added as tracks of kind
"derived" on each device plane, and the correlation counts in
``metadata["correlation"]``; the input trace is not changed.
"""

from __future__ import annotations

from ..trace.core import Trace
from . import cache
from .correlate import Correlation, correlate
from .lines import derive_lines
from .projection import LaunchIndex, Projection, project_rows, section_rows
from .steps import Steps, find_steps
from ..trace import metadata_keys as mkeys


def derive(trace: Trace) -> Trace:
    """``trace`` plus its derived lines (idempotent: a derived trace is returned as is)."""
    if trace.metadata.get(mkeys.DERIVED):
        return trace
    lines = derive_lines(trace)
    corr = cache.correlation(trace)
    lines.metadata[mkeys.CORRELATION] = dict(corr.counts)
    lines.metadata[mkeys.DERIVED] = True
    return trace.extend(lines)


__all__ = ["derive", "correlate", "Correlation", "find_steps", "Steps", "LaunchIndex", "Projection",
           "project_rows", "section_rows", "derive_lines"]
