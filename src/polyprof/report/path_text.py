"""The terminal summary's line under its critical path table: the path's length against
the span it was found in (analyze/critical_path.py's ``path_ns`` and ``span_ns``)."""

from __future__ import annotations

import numpy as np

from ..analyze.frames import column
from ..analyze.table import Table
from ..analyze.units import fmt_ns
from ..trace.sorting import first_and_inverse, median


#: which span the line's length is: a step's (or a time window's) from its start, a
#: whole trace's from its first event, each to the last end of its host calls (OS runtime
#: calls too) and of the device activity they launched (``critical_path.COLUMNS``' span_ns)
STEP_SPAN = "start to end of its work"
WHOLE_SPAN = "its first event to the end of its work"


def path_line(cp: Table, timed: bool = False) -> str:
    """The steps' path length against their span (the medians over the steps, each step's
    own pair where there is one). The span is the path graph's, from the start to the end
    of the work it holds: for a trace without steps from its first event (the header's
    trace span starts there, or at an earlier counter sample) to the last end of its host
    calls and device activity (the header's span ends at its last event or sample), so
    the line says so (:data:`WHOLE_SPAN`), as the ``critical-path`` command does.
    ``timed``: the trace was analysed as a time window holding no whole step
    (``Selection.timed``), whose path is the window's: "the analysed span's"."""
    step = np.asarray(column(cp, "step"), np.int64)
    first, _ = first_and_inverse(step)
    path = np.asarray(column(cp, "path_ns"), np.int64)[first]
    span = np.asarray(column(cp, "span_ns"), np.int64)[first]
    if len(first) == 1:
        whole = "the analysed span's" if timed else "the trace's"
        what = whole if int(step[first[0]]) < 0 else f"step {int(step[first[0]])}'s"
        said = WHOLE_SPAN if what == "the trace's" else STEP_SPAN
        return f"critical path {fmt_ns(int(path[0]))} of {what} {fmt_ns(int(span[0]))} ({said})"
    return (f"critical path {fmt_ns(median(path))} of the step's {fmt_ns(median(span))} "
            f"(start to end of its work; medians over {len(first)} steps)")
