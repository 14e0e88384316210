"""The trace another package's analysis and finding rule are given (``polyprof.analyses``,
``polyprof.findings``; docs/plugins.md, "Readers, analyses and findings from another
package"): what the analysed window counts, as a trace of its own.

A summary analyses a window of steps (``analyze/window.py``: by default every step but
the warm-up); the built-in analyses read its *view*, which holds every event of the
trace and counts only the window's (``analyze/window_counting.py``). A package's
function knows nothing of views: it is given the window written as a trace
(``window_counting.restrict``, as ``polyprof export --steps`` and ``polyprof sql
--steps`` write it), so that its events, its ``span_ns`` and its steps are the window's
and its table counts what the built-in tables beside it count. In a time window (a
recording that holds no whole step) every event is cut to its part inside the window,
as the built-in tables count the device activity running through its edges.
"""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..trace.core import Trace
from .window import Selection, selection
from .window_counting import restrict


def package_trace(trace: Trace) -> Trace:
    """What another package's analysis or rule reads of ``trace`` (a report's trace: a
    window's view, or a trace analysed whole): the window's events as a trace of their
    own, made once per view; ``trace`` itself where it is analysed whole."""
    if selection(trace) is None:
        return trace
    return cache.memo(trace, "package_trace", _restricted)


def _restricted(view: Trace) -> Trace:
    sel = selection(view)
    out = restrict(view, None)  # (a view's window is its own: the view of a view is itself)
    if sel is not None and sel.timed and out.n_events:
        start, dur = cut(sel, out.events["start_ns"], out.events["dur_ns"])
        out.events = {**out.events, "start_ns": start, "dur_ns": dur}
    return out


def cut(sel: Selection, start: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, dur) of each ``[start, start + dur)`` cut to the time window ``sel``: to
    the stretch it starts in, or, begun before one (device activity running into it),
    the first it runs into."""
    runs = np.array([[sel.lo, sel.hi]], np.int64) if sel.stretches is None else sel.stretches
    i = np.minimum(np.searchsorted(runs[:, 1], start, side="right"), len(runs) - 1)
    lo, hi = runs[i, 0], runs[i, 1]
    s = np.maximum(start, lo)
    e = np.maximum(np.minimum(start + dur, hi), s)
    return s.astype(start.dtype), (e - s).astype(dur.dtype)
