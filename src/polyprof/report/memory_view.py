"""Series for the HTML report's memory and counter charts: bytes held over time per
device and allocator (process RSS when a trace has no memory events), each counter's
samples, and the steps and sections drawn behind them as bands. Long series are cut
to ``MAX_POINTS`` points per chart keeping each bin's highest value, so a peak is
never lost.

The charts draw what the tables beside them count: the memory events and counter
samples of the analysed window (``counter_stats``, ``memory_peak``), so a chart's
scale, its peak and the table's max are one figure. The timeline draws every sample."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analyze.frames import column
from ..analyze.memory import memory
from ..analyze.window import selection
from ..analyze.window_counting import inside
from ..derive import cache
from ..derive.projection import section_rows
from ..trace import keys
from .tables import Report

MAX_POINTS = 1500
MAX_SECTION_BANDS = 400
MAX_COUNTERS = 8


def _thin(ts: np.ndarray, values: np.ndarray) -> tuple[list[int], list[float]]:
    """At most MAX_POINTS (time, value) pairs: per time bin, the highest value."""
    if len(ts) <= MAX_POINTS:
        return ts.tolist(), values.tolist()
    edges = np.linspace(ts[0], ts[-1] + 1, MAX_POINTS + 1)
    b = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, MAX_POINTS - 1)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    top = np.maximum.reduceat(values, starts)
    return ts[starts].tolist(), top.tolist()


def _counted(report: Report, ts: np.ndarray) -> np.ndarray:
    """Which counter samples at ``ts`` the Counters table counts (``counter_stats``:
    those inside the analysed window's steps; every one when the trace is analysed whole)."""
    sel = selection(report.trace)
    return np.ones(len(ts), bool) if sel is None else inside(sel, ts)


def _series(report: Report) -> list[dict[str, Any]]:
    trace = report.trace
    m = memory(trace)
    out = []
    peaks = report.tables.get("memory_peak")
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        if hi > lo:
            ts = np.r_[m.ts[lo], m.ts[lo:hi]]
            vals = np.r_[m.start[s], m.level[lo:hi]].astype(np.float64)
        else:  # no event in the analysed window: what it held before, all along it
            a0 = int(report.overview.get("analysed_span_start_ns", trace.span_ns[0]))
            ts = np.array([a0, a0 + int(report.overview.get("analysed_span_ns", 0))], np.int64)
            vals = np.full(2, float(m.start[s]))
        t, v = _thin(ts, vals)
        at = np.zeros(0, np.intp)
        if peaks is not None and len(peaks):
            at = np.flatnonzero((column(peaks, "device") == m.device[s]) & (column(peaks, "allocator") == m.allocator[s]))
        out.append({"label": m.device[s] + (f" · {m.allocator[s]}" if m.allocator[s] else ""), "ts": t, "values": v,
                    "peak_ns": int(column(peaks, "peak_ns")[at[0]]) if len(at) else int(ts[np.argmax(vals)]),
                    "peak_bytes": float(vals.max()), "kind": "allocated"})
    if out:
        return out
    c = trace.counters
    sid = trace.string_id(keys.COUNTER_RSS)
    sel = (c["name"] == sid) if sid >= 0 else np.zeros(len(c["name"]), bool)
    sel &= _counted(report, c["ts_ns"])  # the samples of process.rss_bytes the Counters table counts
    if sel.any():
        order = np.argsort(c["ts_ns"][sel], kind="stable")
        ts, vals = c["ts_ns"][sel][order], c["value"][sel][order]
        t, v = _thin(ts, vals)
        out.append({"label": "process RSS", "ts": t, "values": v, "peak_ns": int(ts[np.argmax(vals)]),
                    "peak_bytes": float(vals.max()), "kind": "rss"})
    return out


def _counters(report: Report) -> list[dict[str, Any]]:
    trace = report.trace
    c = trace.counters
    out: list[dict[str, Any]] = []
    cs = report.tables.get("counter_stats")
    if cs is None:
        return out
    plane_id = {p.name: p.id for p in trace.planes}
    counted = _counted(report, c["ts_ns"])
    for plane, name in zip(column(cs, "plane")[:MAX_COUNTERS].tolist(), column(cs, "name")[:MAX_COUNTERS].tolist()):
        sel = (c["plane"] == plane_id.get(plane, -1)) & (c["name"] == trace.string_id(name)) & counted
        order = np.argsort(c["ts_ns"][sel], kind="stable")
        t, v = _thin(c["ts_ns"][sel][order], c["value"][sel][order])
        out.append({"label": f"{name} · {plane}", "name": name, "ts": t, "values": v})
    return out


def _sections(report: Report) -> list[list[Any]]:
    """[start, end, name] of the instances of the sections with the most host time."""
    trace = report.trace
    sec = report.tables.get("section_stats")
    rows = section_rows(trace)
    if sec is None or not len(sec) or not len(rows):
        return []
    names = set(column(sec, "name")[:6].tolist())
    ev = trace.events
    picked = rows[np.isin(trace.names(rows), list(names))][:MAX_SECTION_BANDS]
    return [[int(s), int(s + d), str(n)] for s, d, n in
            zip(ev["start_ns"][picked].tolist(), ev["dur_ns"][picked].tolist(), trace.names(picked).tolist())]


def memory_view(report: Report) -> dict[str, Any]:
    """Everything the memory and counter charts draw, times in ns on the trace clock.

    ``t0``, ``t1``: the range the charts may show. The series hold the samples the tables
    beside them count (``_counted``; memory events of the window), so the range is the
    analysed span when a window is analysed (the warm-up step's samples, or those taken
    while torch was imported, are on the timeline, not here), else every recorded time
    (the table then counts every sample); widened to any sample past it, so no sample is
    drawn off its time. ``origin``: what the times read from, the timeline's start."""
    trace = report.trace
    steps = cache.steps(trace)
    series, counters = _series(report), _counters(report)
    if selection(trace) is None:
        t0, t1 = trace.extent_ns
    else:
        t0 = int(report.overview.get("analysed_span_start_ns", trace.span_ns[0]))
        t1 = t0 + int(report.overview.get("analysed_span_ns", trace.span_ns[1] - trace.span_ns[0]))
    for sr in series + counters:
        if sr["ts"]:
            t0, t1 = min(t0, sr["ts"][0]), max(t1, sr["ts"][-1])
    return {"t0": int(t0), "t1": int(t1), "origin": int(trace.extent_ns[0]), "series": series, "counters": counters,
            "steps": [[int(a), int(b), int(n)] for a, b, n in zip(steps.start, steps.end, steps.number)][:500],
            "sections": _sections(report)}
