"""The ranks' tables of one analysis stacked into one, with a ``rank`` column first.

Read through the Table API (``analyze.frames.column`` / ``labels``) and made with
``analyze.frames.frame``, so it takes Tables or DataFrames and gives what the analyses
give where it is called."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analyze.frames import column, frame, labels


def with_rank(results: dict[int, Any]) -> Any:
    """The tables of ``results`` (by rank, in the order to stack) as one table: a ``rank``
    column first (a ``rank`` column of their own is replaced: the job's numbering
    wins), then their columns, in the first table's order (a column some table lacks is
    filled with None)."""
    tables = list(results.values())
    names = list(dict.fromkeys(c for t in tables for c in labels(t) if c != "rank"))
    counts = [len(t) for t in tables]
    cols: dict[str, Any] = {"rank": np.repeat(np.fromiter(results, np.int64, len(results)), counts)}
    for c in names:
        parts = [column(t, c) if c in labels(t) else np.full(len(t), None, object) for t in tables]
        cols[c] = _concat(parts)
    return frame(cols)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    """One column from the ranks' parts: NumPy's common type for numbers, ``object`` as
    soon as one part holds objects (text), as pandas' concat does."""
    if not parts:
        return np.zeros(0, object)
    nonempty = [p for p in parts if len(p)] or parts[:1]
    if any(p.dtype == object for p in nonempty) and not all(p.dtype == object for p in nonempty):
        return np.concatenate([p.astype(object) for p in nonempty])
    return np.concatenate(nonempty)
