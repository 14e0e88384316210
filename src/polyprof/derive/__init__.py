"""Derivations: correlation, steps, section projection and the derived device lines.

``derive(trace)`` returns a new trace with the derived lines added as tracks of kind
"derived" on each device plane, and the correlation counts in
``metadata["correlation"]``; the input trace is not changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ..trace.core import Trace
from . import cache
from .correlate import Correlation, correlate
from .projection import LaunchIndex, Projection, project_rows, section_rows
from .steps import Steps, find_steps
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    from .lines import derive_lines

#: the derived lines' builder is imported when first asked for: analyses read the lines
#: of a derived trace, and a summary never derives them
__getattr__ = lazy_names(__name__, {"derive_lines": "lines"})


def derive(trace: Trace) -> Trace:
    """``trace`` plus its derived lines (idempotent: a derived trace is returned as is)."""
    if trace.metadata.get(mkeys.DERIVED):
        return trace
    from .lines import derive_lines  # (see __getattr__ above)

    lines = derive_lines(trace)
    corr = cache.correlation(trace)
    lines.metadata[mkeys.CORRELATION] = dict(corr.counts)
    lines.metadata[mkeys.DERIVED] = True
    return trace.extend(lines)


__all__ = ["derive", "correlate", "Correlation", "find_steps", "Steps", "LaunchIndex", "Projection",
           "project_rows", "section_rows", "derive_lines"]
