"""The HTML report: one self-contained file (inline CSS, JS and data; works offline).

Python computes everything (tables, findings, a binned timeline per device stream and
host thread); ``template.html`` holds the page and a small script that draws the
timeline on a canvas and the charts as inline SVG from the embedded JSON.
"""

from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..analyze.common import COMPUTE, device_view
from ..analyze.frames import column, labels
from ..derive import cache
from ..derive.intervals import covered, union
from ..trace.categories import Kind
from ..outfile import write_file
from ..trace.core import Trace
from .memory_view import memory_view
from .roofline_view import roofline_view
from .tables import Report, build
from ..trace import metadata_keys as mkeys

BINS = 600  # timeline resolution
MAX_HOST_ROWS = 8
TOP = 20


def _bins(s: np.ndarray, e: np.ndarray, edges: np.ndarray) -> list[float]:
    """Busy fraction of each bin, rounded for a compact page."""
    us, ue = union(s, e)
    cov = covered(us, ue, edges[:-1], edges[1:])
    return np.round(cov / np.maximum(np.diff(edges), 1), 3).tolist()


def timeline(report: Report) -> dict[str, Any]:
    """Per device stream (compute / other busy fractions) and busiest host threads, binned."""
    trace = report.trace
    t0 = int(report.overview["analysed_span_start_ns"])
    t1 = t0 + int(report.overview["analysed_span_ns"])
    if t1 <= t0:
        t0, t1 = trace.span_ns
    edges = np.linspace(t0, max(t1, t0 + 1), BINS + 1).astype(np.int64)
    v = device_view(trace)
    rows = []
    for plane in np.unique(v.plane):
        on = v.plane == plane
        for track in np.unique(v.track[on]):
            sel = on & (v.track == track)
            comp = sel & (v.cls == COMPUTE)
            rows.append({"group": trace.planes[int(plane)].name, "label": trace.tracks[int(track)].name,
                         "compute": _bins(v.start[comp], v.end[comp], edges),
                         "other": _bins(v.start[sel & ~comp], v.end[sel & ~comp], edges)})
    ev = trace.events
    host = [p.id for p in trace.planes if p.kind == "host"]
    if trace.n_events and host:
        tr = ev["track"]
        on_host = np.isin(trace.track_plane[tr], host) & (ev["dur_ns"] > 0) & (trace.kinds != Kind.OTHER)
        thread = np.array([t.kind not in ("derived", "steps") for t in trace.tracks], bool)
        on_host &= thread[tr]
        idx = np.flatnonzero(on_host)
        busy = []
        for track in np.unique(tr[idx]):
            r = idx[tr[idx] == track]
            s, e = union(ev["start_ns"][r], ev["start_ns"][r] + ev["dur_ns"][r])
            busy.append((int(covered(s, e, np.array([t0]), np.array([t1]))[0]), int(track), r))
        for _, track, r in sorted(busy, reverse=True)[:MAX_HOST_ROWS]:
            t = trace.tracks[track]
            rows.append({"group": trace.planes[t.plane].name, "label": t.name,
                         "compute": _bins(ev["start_ns"][r], ev["start_ns"][r] + ev["dur_ns"][r], edges),
                         "other": [0.0] * BINS})
    steps = cache.steps(trace)
    step_marks = [[int(a - t0), int(b - t0), int(n)] for a, b, n in zip(steps.start, steps.end, steps.number)]
    return {"t0": t0, "duration_ns": int(t1 - t0), "bins": BINS, "rows": rows, "steps": step_marks[:500]}


def _missing(v: Any) -> bool:
    """What ``pd.notna`` calls missing, among the values a table's ``tolist`` gives:
    None, NaN, and pandas' NA and NaT (in the ranks' DataFrames)."""
    return v is None or type(v).__name__ in ("NAType", "NaTType") or (isinstance(v, float) and v != v)


def _records(df: Any, cols: list[str], n: int | None = TOP) -> dict[str, Any]:
    """The first ``n`` rows of the ``cols`` a table (a DataFrame or a Table) has, as
    lists of Python values, missing ones None."""
    names = labels(df)
    keep = [c for c in cols if c in names]
    stop = len(df) if n is None else min(n, len(df))
    values = [[None if _missing(v) else v for v in column(df, c)[:stop].tolist()] for c in keep]
    return {"columns": keep, "rows": [list(r) for r in zip(*values)], "total": len(df)}


def page_data(report: Report) -> dict[str, Any]:
    T = report.tables
    tb = T["temporal_breakdown"]
    return {
        "title": _title(report.trace),
        "overview": report.overview,
        "findings": [f.to_dict() for f in report.findings],
        "timeline": timeline(report),
        "temporal": _records(tb, ["plane", "stream", "span_ns", "compute_ns", "non_compute_ns", "idle_ns",
                                  "compute_pct", "non_compute_pct", "idle_pct", "activities"], None),
        "idle": _records(T["idle_time_breakdown"], ["plane", "stream", "idle_ns", "host_wait_ns", "kernel_wait_ns",
                                                    "other_ns", "gaps"], None),
        "overlap": _records(T["comm_comp_overlap"], ["plane", "communication_ns", "compute_ns", "overlap_ns",
                                                     "overlap_pct"], None),
        "states": _records(T["kernel_state_breakdown"], ["plane", "state", "time_ns", "segments", "span_pct",
                                                          "busy_pct"], None),
        "queues": _records(T["queue_length_summary"], ["plane", "stream", "changes", "mean", "max", "p50", "p75",
                                                       "time_mean"], None),
        "kernels": _records(T["kernel_breakdown"], ["name", "kind", "count", "total_ns", "mean_ns", "min_ns",
                                                    "max_ns", "share_pct"]),
        "ops": _records(T["op_stats"], ["name", "count", "total_ns", "self_ns", "mean_ns", "device_ns", "launches"]),
        "sections": _records(T["section_stats"], ["name", "count", "total_ns", "mean_ns", "median_ns", "p99_ns",
                                                  "min_ns", "max_ns", "device_ns", "projected_ns", "device_util_pct",
                                                  "alloc_bytes", "mem_delta_bytes", "mem_max_bytes"]),
        "steps": _records(T["step_stats"], ["step", "plane", "host_ns", "busy_ns", "compute_ns", "non_compute_ns",
                                            "idle_ns", "launch_count", "launch_mean_ns", "launch_max_ns"], 400),
        "events": _records(T["event_stats"], ["category", "name", "count", "total_ns", "mean_ns", "max_ns"]),
        "memory": memory_view(report),
        "memory_peak": _records(T["memory_peak"], ["device", "allocator", "start_bytes", "peak_bytes", "end_bytes",
                                                   "live_at_peak", "live_at_peak_bytes", "allocations", "frees"], None),
        "memory_live": _records(T["memory_at_peak"], ["device", "bytes", "op", "section", "stack"], TOP),
        "counters": _records(T["counter_stats"], ["plane", "name", "samples", "first", "last", "min", "max", "mean"],
                             None),
        "roofline": roofline_view(report),
    }


def _title(trace: Trace) -> str:
    src = trace.metadata.get(mkeys.TITLE) or trace.metadata.get(mkeys.FILE_SOURCE) or ""
    if isinstance(src, dict):
        src = src.get("path") or src.get("file") or ""
    return Path(str(src)).name if src else "polyprof report"


def ranks_view(ranks: Any) -> dict[str, Any]:
    """The ranks side by side (a ``polyprof.ranks.JobReport``): step time per rank,
    alignment with its bounds, stragglers, collectives."""
    T = ranks.tables
    return {
        "overview": {k: ranks.overview.get(k) for k in ("ranks", "reference_rank", "aligned_ranks", "max_bound_ns",
                                                        "window")},
        "ranks": _records(T["rank_overview"], ["rank", "file", "steps", "step_mean_ns", "step_median_ns",
                                               "step_max_ns", "compute_pct", "non_compute_pct", "idle_pct",
                                               "communication_ns", "collectives", "events"], None),
        "alignment": _records(T["rank_alignment"], ["rank", "offset_ns", "bound_ns", "method", "collectives",
                                                    "aligned", "message"], None),
        "stragglers": _records(T["stragglers"].sort_by("caused_wait_ns", descending=True),
                               ["rank", "late_ns", "last_count", "caused_wait_ns", "waited_ns", "collectives"], None),
        "straggler_collectives": _records(T["straggler_collectives"], ["key", "seq", "op", "ranks", "first_rank",
                                                                       "last_rank", "spread_ns", "wait_ns",
                                                                       "bound_ns"]),
        "collectives": _records(T["collective_stats"], ["op", "bytes", "count", "ranks", "total_ns", "mean_ns",
                                                        "max_ns", "algbw_gbps", "busbw_gbps"]),
    }


#: characters escaped in the JSON inside <script>: "<" keeps "</script>" and "<!--" from
#: ending or hiding the element, ">" and "&" are escaped too, U+2028/9 for old parsers
_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                   0x2028: "\\u2028", 0x2029: "\\u2029"}


def script_json(doc: Any) -> str:
    """JSON that is safe as the text of a ``<script type="application/json">`` element."""
    text = orjson.dumps(doc, default=lambda o: o.item() if hasattr(o, "item") else str(o),
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    return text.translate(_SCRIPT_ESCAPES)


def render(report: Report, ranks: Any = None) -> str:
    """The page; with ``ranks`` (a JobReport) the ranks side by side come first and
    the findings are the job's, while the timeline and tables are ``report``'s rank.

    The template's placeholders are filled in one pass, so text from the trace (a title
    holding ``__DATA__``) is never substituted again."""
    template = resources.files("polyprof.report").joinpath("template.html").read_text(encoding="utf-8")
    page = page_data(report)
    if ranks is not None:
        page["ranks"] = ranks_view(ranks)
        page["findings"] = [f.to_dict() for f in ranks.findings]
    values = {"__TITLE__": html.escape(_title(report.trace), quote=True), "__DATA__": script_json(page)}
    return re.sub("__TITLE__|__DATA__", lambda m: values[m.group(0)], template)


def write(trace: Trace, path: str | Path, report: Report | None = None, ranks: Any = None,
          force: bool = False) -> Path:
    """Write the report for ``trace`` to ``path`` (with ``ranks``: the job's ranks side by
    side, ``trace`` being the rank whose timeline is shown); beside it and renamed over
    it, a symlink at ``path`` refused unless ``force`` (``polyprof.outfile``)."""
    path = Path(path)
    page = render(report or build(trace), ranks)
    write_file(path, lambda tmp: tmp.write_text(page, encoding="utf-8"), force)
    return path
