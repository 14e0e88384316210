"""Merge traces: plugin outputs into one session trace, ranks side by side, or derived
lines into a trace.

Sources are matched by identity (rank, host, pid, label; see ``Source.key``): the
plugins of one session give unnamed sources, which become one, while two ranks or two
files stay two sources. Planes are matched by (source, name) and tracks by (plane,
kind, tid, name), so nothing of one source lands on another's plane. Every id is
remapped with array indexing, so merging costs one pass over the columns
(``Assembler.add_trace``, assemble.py, which ``Trace.extend`` uses too).

Metadata: each input's metadata goes to its source (``Source.metadata``; an input of
several sources keeps theirs), and the merged ``Trace.metadata`` keeps the first value
of each key, lists concatenated and dicts merged, as a summary for single-source use.
"""

from __future__ import annotations

from typing import Any, Sequence

from .assemble import merge_metadata
from .builder import TraceBuilder
from .core import Trace

__all__ = ["merge", "merge_metadata"]


def merge(traces: Sequence[Trace], metadata: dict[str, Any] | None = None) -> Trace:
    """One trace of ``traces`` side by side, then ``metadata`` merged into its metadata."""
    b = TraceBuilder()
    for t in traces:
        b.add_trace(t)
    if metadata:
        merge_metadata(b.metadata, metadata)
    return b.build()
