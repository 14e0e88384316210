"""The HTML report: one self-contained file (inline CSS, JS and data; works offline).

Python computes everything (tables, findings, and the timeline's events as columns:
``timeline.py``); ``template.html`` holds the page, the interactive timeline that draws
them on a canvas, and the charts as inline SVG from the embedded JSON.
"""

from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import orjson

from ..analyze.frames import column, labels
from ..analyze.window import selection
from ..outfile import write_file
from ..trace.core import Trace
from ..analyze.efficiency import uncounted_of
from ..analyze.finding import Finding
from .efficiency_text import uncosted, uncounted_words
from .extension_tables import html_tables
from .idle_text import shown as idle_shown
from .memory_view import memory_view
from .roofline_view import roofline_view
from .tables import Report, build
from .timeline import Part, timeline_data
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    import pandas as pd

    from ..analyze.table import Table
    from ..ranks.report import JobReport

#: rows a table shows where it has more (each table's first, in its own order)
TOP = 20
#: rows the page holds of such a table: all of them up to this many, so that a click on
#: a header sorts the whole table and shows its first TOP in that order (docs/report.md)
MAX_TABLE_ROWS = 2000


def _missing(v: object) -> bool:
    """What ``pd.notna`` calls missing, among the values a table's ``tolist`` gives:
    None, NaN, and pandas' NA and NaT (in a DataFrame a caller passes)."""
    return v is None or type(v).__name__ in ("NAType", "NaTType") or (isinstance(v, float) and v != v)


def _records(df: Table | pd.DataFrame, cols: list[str], n: int | None = None,
             shown: int | None = None) -> dict[str, Any]:
    """The first ``n`` rows (None: all) of the ``cols`` a table (a DataFrame or a Table)
    has, as lists of Python values, missing ones None; the page shows ``shown`` of them
    (None: all), the first in the order of the header last clicked."""
    names = labels(df)
    keep = [c for c in cols if c in names]
    stop = len(df) if n is None else min(n, len(df))
    values = [[None if _missing(v) else v for v in column(df, c)[:stop].tolist()] for c in keep]
    out = {"columns": keep, "rows": [list(r) for r in zip(*values)], "total": len(df)}
    if shown is not None and shown < stop:
        out["shown"] = shown
    return out


def _top(df: Table | pd.DataFrame, cols: list[str], shown: int = TOP) -> dict[str, Any]:
    """A table shown by its first ``shown`` rows, of which the page holds up to
    ``MAX_TABLE_ROWS`` (a header click sorts those, not only the rows shown)."""
    return _records(df, cols, MAX_TABLE_ROWS, shown)


def page_data(report: Report) -> dict[str, Any]:
    T = report.tables
    tb = T["temporal_breakdown"]
    # as the terminal shows it: no part below zero, HTA's per-device row "(sum of streams)"
    idle, idle_notes = idle_shown(T["idle_time_breakdown"], tb, getattr(selection(report.trace), "hta", False))
    return {
        "title": _title(report.trace),
        "overview": report.overview,
        "findings": [f.to_dict() for f in report.findings],
        "temporal": _records(tb, ["plane", "stream", "span_ns", "compute_ns", "non_compute_ns", "idle_ns",
                                  "compute_pct", "non_compute_pct", "idle_pct", "activities"], None),
        "idle": _records(idle, ["plane", "stream", "idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "gaps"],
                         None),
        "idle_notes": idle_notes,
        "overlap": _records(T["comm_comp_overlap"], ["plane", "communication_ns", "compute_ns", "overlap_ns",
                                                     "overlap_pct"], None),
        "states": _records(T["kernel_state_breakdown"], ["plane", "state", "time_ns", "segments", "span_pct",
                                                          "busy_pct"], None),
        "queues": _records(T["queue_length_summary"], ["plane", "stream", "changes", "mean", "max", "p50", "p75",
                                                       "time_mean"], None),
        "copies": _records(T["copies"], ["device", "kind", "count", "total_bytes", "total_ns", "bandwidth_gbps",
                                         "min_gbps", "median_gbps", "max_gbps", "small", "pageable", "unsized"], None),
        "kernels": _top(T["kernel_breakdown"], ["name", "kind", "count", "total_ns", "mean_ns", "min_ns",
                                                "max_ns", "share_pct"]),
        "ops": _top(T["op_stats"], ["name", "count", "total_ns", "self_ns", "mean_ns", "device_ns", "launches"]),
        "sections": _top(T["section_stats"], ["name", "count", "total_ns", "mean_ns", "median_ns", "p99_ns",
                                              "min_ns", "max_ns", "device_ns", "projected_ns", "device_util_pct",
                                              "alloc_bytes", "mem_delta_bytes", "mem_max_bytes"]),
        "steps": _records(T["step_stats"], ["step", "plane", "host_ns", "busy_ns", "compute_ns", "non_compute_ns",
                                            "idle_ns", "launch_count", "launch_mean_ns", "launch_max_ns"], 400),
        "events": _top(T["event_stats"], ["category", "name", "count", "total_ns", "mean_ns", "max_ns"]),
        "memory": memory_view(report),
        "memory_peak": _records(T["memory_peak"], ["device", "allocator", "start_bytes", "peak_bytes", "end_bytes",
                                                   "live_at_peak", "live_at_peak_bytes", "allocations", "frees"], None),
        "memory_live": _top(T["memory_at_peak"], ["device", "bytes", "op", "section", "stack"]),
        "counters": _records(T["counter_stats"], ["plane", "name", "samples", "first", "last", "min", "max", "mean"],
                             None),
        "roofline": roofline_view(report),
        "cupti": _records(T["cupti_counters"], ["range", "top_op", "bottom_op", "flops", "name"], 200),
        # the whole window's model FLOPs utilisation (step -1), shown in the overview, with
        # what the terminal's MFU line says of graph replays whose FLOPs are not counted
        "mfu": _overall(T.get("mfu")),
        "mfu_uncounted": _uncounted(T.get("mfu"), uncosted(report.trace)),
        # other packages' tables (polyprof.analyses), each from its own columns
        "extensions": html_tables(T, _top),
    }


def _overall(mfu: Table | pd.DataFrame | None) -> dict[str, Any] | None:
    """The ``mfu`` table's row of the whole window (step -1), None without one."""
    if mfu is None or "step" not in labels(mfu):
        return None
    return _records(mfu[np.asarray(column(mfu, "step")) == -1], ["flops", "time_ns", "flops_per_s", "precision",
                                                                  "devices", "peak_flops_per_s", "mfu_pct",
                                                                  "device", "uncounted_replay_pct"], 1)


def _uncounted(mfu: Table | pd.DataFrame | None, matrix_pct: float) -> str | None:
    """The MFU line's words on the whole window's ``uncounted_replay_pct`` (from 1% of its
    kernel time with FLOPs counted, 50% without) and on the ``matrix_pct`` of compute
    time in matrix kernels whose FLOPs are unknown (``efficiency_text.uncounted_words``)."""
    if mfu is None or not len(mfu):
        return None
    return uncounted_words(float(column(mfu, "flops")[0]), uncounted_of(mfu), matrix_pct)


def _title(trace: Trace) -> str:
    src = trace.metadata.get(mkeys.TITLE) or trace.metadata.get(mkeys.FILE_SOURCE) or ""
    if isinstance(src, dict):
        src = src.get("path") or src.get("file") or ""
    return Path(str(src)).name if src else "polyprof report"


def straggler_ranks(findings: list[Finding]) -> list[int]:
    """The ranks a job's findings name as stragglers (``ranks/report.py``: its straggler
    finding, the one decision of which rank held the others back; every rank of a group
    late together, its ``ranks``), in order."""
    out: set[int] = set()
    for f in findings:
        if f.id == "straggler" and "rank" in f.evidence:
            out.update(int(r) for r in f.evidence.get("ranks") or [f.evidence["rank"]])
    return sorted(out)


def ranks_view(ranks: JobReport) -> dict[str, Any]:
    """The ranks side by side (a ``polyprof.ranks.JobReport``): step time per rank,
    alignment with its bounds, stragglers, collectives, transfers."""
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
        # the ranks the job's straggler finding names: the page marks these, and no others
        "straggler_ranks": straggler_ranks(ranks.findings),
        "straggler_collectives": _top(T["straggler_collectives"], ["key", "seq", "op", "ranks", "first_rank",
                                                                   "last_rank", "spread_ns", "wait_ns",
                                                                   "bound_ns"]),
        "collectives": _top(T["collective_stats"], ["op", "bytes", "count", "ranks", "total_ns", "mean_ns",
                                                    "max_ns", "algbw_gbps", "busbw_gbps"]),
        "transfers": _top(T["transfers"], ["src", "dst", "bytes", "count", "bytes_per_step", "send_ns", "recv_ns",
                                           "time_per_step_ns", "blocking_ns"]),
        # other packages' tables of every rank, stacked with a rank column
        "extensions": html_tables(T, lambda t, cols: _top(t, cols, 4 * TOP)),
    }


#: characters escaped in the JSON inside <script>: "<" keeps "</script>" and "<!--" from
#: ending or hiding the element, ">" and "&" are escaped too, U+2028/9 for old parsers
_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                   0x2028: "\\u2028", 0x2029: "\\u2029"}


def script_json(doc: object) -> str:
    """JSON that is safe as the text of a ``<script type="application/json">`` element."""
    text = orjson.dumps(doc, default=lambda o: o.item() if hasattr(o, "item") else str(o),
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    return text.translate(_SCRIPT_ESCAPES)


def render(report: Report, ranks: JobReport | None = None, parts: Iterable[Part] | None = None,
           marks: list[dict[str, Any]] | None = None, highlight: list[str] | None = None,
           step: Callable[[], None] | None = None) -> str:
    """The page; with ``ranks`` (a JobReport) the ranks side by side come first and
    the findings are the job's, while the tables are ``report``'s rank. The timeline
    draws ``parts`` (a job's ranks on the aligned clock, with ``marks`` shaded and the
    events named in ``highlight`` in one colour), by default ``report``'s trace alone;
    ``step`` is called once the timeline is built (a progress bar's advance).

    The template's placeholders are filled in one pass, so text from the trace (a title
    holding ``__DATA__``) is never substituted again."""
    template = resources.files("polyprof.report").joinpath("template.html").read_text(encoding="utf-8")
    page = page_data(report)
    if ranks is not None:
        page["ranks"] = ranks_view(ranks)
        # the rank the tables below are of (report --rank N), not the job's reference rank
        page["ranks"]["overview"]["detail_rank"] = next(
            (s.rank for s in report.trace.sources if s.rank is not None), ranks.overview.get("reference_rank"))
        page["findings"] = [f.to_dict() for f in ranks.findings]
    tl = timeline_data(parts or [Part("", report.trace)], marks, highlight)
    if step is not None:
        step()
    blob = tl.pop("blob")  # base64: nothing in it to escape
    values = {"__TITLE__": html.escape(_title(report.trace), quote=True), "__DATA__": script_json(page),
              "__TIMELINE__": script_json(tl), "__TIMELINE_BLOB__": blob}
    return re.sub("__TITLE__|__DATA__|__TIMELINE_BLOB__|__TIMELINE__", lambda m: values[m.group(0)], template)


def write(trace: Trace, path: str | Path, report: Report | None = None, ranks: JobReport | None = None,
          force: bool = False, parts: Iterable[Part] | None = None, marks: list[dict[str, Any]] | None = None,
          highlight: list[str] | None = None, step: Callable[[], None] | None = None) -> Path:
    """Write the report for ``trace`` to ``path`` (with ``ranks``: the job's ranks side by
    side, ``trace`` being the rank whose timeline is shown); beside it and renamed over
    it, a symlink at ``path`` refused unless ``force`` (``polyprof.outfile``)."""
    path = Path(path)
    page = render(report or build(trace), ranks, parts, marks, highlight, step)
    write_file(path, lambda tmp: tmp.write_text(page, encoding="utf-8"), force)
    return path
