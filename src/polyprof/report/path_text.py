"""The terminal summary's line under its critical path table: the path's length against
the span it was found in (analyze/critical_path.py's ``path_ns`` and ``span_ns``)."""

from __future__ import annotations

import numpy as np

from ..analyze.frames import column
from ..analyze.table import Table
from ..analyze.units import fmt_ns
from ..trace.sorting import first_and_inverse, median


def path_line(cp: Table, timed: bool = False) -> str:
    """The steps' path length against their span (the medians over the steps, each step's
    own pair where there is one). The span is the path graph's, from the start to the end
    of the work it holds: for a trace without steps not the header's trace span, which
    counts every event and counter sample, so the line says so, as the ``critical-path``
    command does. ``timed``: the trace was analysed as a time window holding no whole
    step (``Selection.timed``), whose path is the window's: "the analysed span's"."""
    step = np.asarray(column(cp, "step"), np.int64)
    first, _ = first_and_inverse(step)
    path = np.asarray(column(cp, "path_ns"), np.int64)[first]
    span = np.asarray(column(cp, "span_ns"), np.int64)[first]
    if len(first) == 1:
        whole = "the analysed span's" if timed else "the trace's"
        what = whole if int(step[first[0]]) < 0 else f"step {int(step[first[0]])}'s"
        return f"critical path {fmt_ns(int(path[0]))} of {what} {fmt_ns(int(span[0]))} (start to end of its work)"
    return (f"critical path {fmt_ns(median(path))} of the step's {fmt_ns(median(span))} "
            f"(start to end of its work; medians over {len(first)} steps)")
