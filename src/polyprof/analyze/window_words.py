"""The window label's words for a trace without steps (``window.py``'s ``_label``): the
profiler's own rows its analysed span leaves out, and where its device activity is when
that is a small part of its span."""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..trace.core import Trace
from .units import fmt_ns


#: a trace without steps whose device activity covers less than this share of its span
#: says so in its label: it is analysed whole by default, mostly idle (a JAX program's
#: compilation before its first kernel), and ``--span device`` analyses the device's part
DEVICE_SHARE = 0.5


def whole_trace_words(trace: Trace) -> str:
    """The label's words for a trace without steps: the profiler's own rows left out of
    its span (:func:`overhead_words`) and where its device activity is
    (:func:`device_extent_words`)."""
    return "; ".join(w for w in (overhead_words(trace), device_extent_words(trace)) if w)


def overhead_words(trace: Trace) -> str:
    """Where the profiler's own rows (category ``overhead``: an RPD or rocpd tracer's
    flush and table writes) lie outside the rest of a trace: the analysed span leaves
    them out (``common._span``), so the label says so and how long the rest is, which
    the header's "trace span" would otherwise contradict."""
    oid = trace.string_id("overhead")
    if oid < 0:
        return ""
    ev = trace.events
    rest = np.flatnonzero(ev["category"] != oid)
    t0, t1 = trace.span_ns
    if not len(rest) or len(rest) == trace.n_events:
        return ""
    s = int(ev["start_ns"][rest].min())
    e = int((ev["start_ns"][rest] + ev["dur_ns"][rest].astype(np.int64)).max())
    if e - s >= t1 - t0:
        return ""
    return (f"the profiler's own overhead rows left out: the rest spans {fmt_ns(e - s)} of the trace's "
            f"{fmt_ns(t1 - t0)}")


def device_extent_words(trace: Trace) -> str:
    """The label's words for a trace without steps whose device activity (first start to
    last end of the correlation's device rows: what ``--span device`` spans) is under
    :data:`DEVICE_SHARE` of the trace's span: where it is, and that ``--span device``
    analyses that part."""
    ev = trace.events
    rows = cache.correlation(trace).device_rows
    t0, t1 = trace.span_ns
    if not len(rows) or t1 <= t0:
        return ""
    s = int(ev["start_ns"][rows].min())
    e = int((ev["start_ns"][rows] + ev["dur_ns"][rows].astype(np.int64)).max())
    if e - s >= DEVICE_SHARE * (t1 - t0):
        return ""
    return (f"device activity only from {fmt_ns(s - t0)} to {fmt_ns(e - t0)} into it ({fmt_ns(e - s)}, "
            f"{(e - s) / (t1 - t0):.1%} of the span): --span device analyses that")
