"""Every analysis table and the findings of one trace, computed once for all reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import analyze
from ..analyze.common import analysed_span
from ..analyze.findings import Finding
from ..analyze.frames import columnar as _columnar
from ..analyze.registry import compute_all
from ..analyze.clocks import unsynchronised
from ..analyze.window import AUTO, WindowArg, label, view
from ..derive import cache
from ..trace.core import Trace
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Report:
    trace: Trace
    #: DataFrames; :class:`~analyze.table.Table` s when built with ``columnar=True``
    tables: dict[str, Any]
    findings: list[Finding]
    overview: dict[str, Any] = field(default_factory=dict)


def build(trace: Trace, window: WindowArg = AUTO, columnar: bool = False) -> Report:
    """Every table and finding of the steps ``window`` selects (``analyze/window.py``;
    by default every step but the first, which holds the warm-up, when there are three
    or more). ``Report.trace`` is the window's view of ``trace``. ``columnar``: the
    tables as pandas-free :class:`~analyze.table.Table` s (what the terminal needs)."""
    trace = view(trace, window)
    tables = compute_all(trace, columnar)  # analyze/registry.py: every table, in report order
    with _columnar(columnar):  # what a rule computes for itself, too
        found = analyze.findings(trace, tables)
    corr = cache.correlation(trace)
    steps = cache.steps(trace)
    t0, t1 = analysed_span(trace)
    s0, s1 = trace.span_ns
    overview = {
        "events": trace.n_events, "planes": [p.name for p in trace.planes], "tracks": len(trace.tracks),
        "trace_span_ns": s1 - s0, "analysed_span_start_ns": t0, "analysed_span_ns": t1 - t0,
        "steps": len(steps), "step_source": steps.source, "window": label(trace, window),
        "correlation": dict(corr.counts),
        "unsynchronised": unsynchronised(trace),
        "plugin_errors": list(trace.metadata.get(mkeys.PLUGIN_ERRORS, [])),
        "warnings": [str(w) for w in trace.metadata.get(mkeys.WARNINGS, []) or []],
    }
    return Report(trace, tables, found, overview)


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return str(o)


def _records_json(df: pd.DataFrame) -> Any:
    """The rows of ``df`` as JSON records (NaN -> null), written column-wise by pandas'
    C writer (floats to 15 significant digits) and embedded as is; the object path
    (``to_dict``) took most of a many-rank ``--json``. Frames pandas cannot write
    (odd objects, duplicate labels) go the object way."""
    import orjson

    if len(df) and df.columns.is_unique:
        try:
            return orjson.Fragment(df.to_json(orient="records", double_precision=15, date_format="iso"))
        except (ValueError, TypeError, OverflowError):
            pass
    import pandas as pd

    d = df.astype(object).where(pd.notna(df), None)
    return d.to_dict(orient="records")


def to_json(report: Report, max_rows: int | None = None) -> bytes:
    """Every table (records) and finding as JSON; NaN becomes null."""
    import orjson

    tables = {}
    for name, df in report.tables.items():
        d = df if max_rows is None else df.head(max_rows)
        tables[name] = {"columns": list(df.columns), "rows": len(df), "records": _records_json(d)}
    doc = {"overview": report.overview, "findings": [f.to_dict() for f in report.findings], "tables": tables}
    return orjson.dumps(doc, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2
                        | orjson.OPT_NON_STR_KEYS)
