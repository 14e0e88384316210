"""Every analysis table and the findings of one trace, computed once for all reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection

import numpy as np

from .. import analyze
from ..analyze.common import analysed_span, recorded_in_span, stretches_ns
from ..analyze.findings import Finding
from ..analyze.registry import Tables, compute_all
from ..analyze.clocks import unsynchronised
from ..analyze.table import Table
from ..analyze.window import AUTO, WindowArg, label, view
from ..derive import cache
from ..trace.core import Trace
from ..trace.model import FACTORY, Props, Record
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    import orjson
    import pandas as pd


@dataclass(init=False, repr=False, eq=False)  # its __init__ below; __repr__, __eq__ trace.model.Record's
class Report(Record):
    """What a summary or report shows: the analysed trace (the window's view), every
    table, the findings and the overview."""

    trace: Trace
    #: every analysis table, in report order
    tables: dict[str, Table]
    findings: list[Finding]
    overview: dict[str, Any] = field(default_factory=dict)

    def __init__(self, trace: Trace, tables: dict[str, Table], findings: list[Finding],
                 overview: Props = FACTORY) -> None:
        self.trace, self.tables, self.findings = trace, tables, findings
        self.overview = {} if overview is FACTORY else overview


def build(trace: Trace, window: WindowArg = AUTO, leave_out: Collection[str] = ()) -> Report:
    """Every table and finding of the steps ``window`` selects (``analyze/window.py``;
    by default every step but the first, which holds the warm-up, when there are three
    or more). ``Report.trace`` is the window's view of ``trace`` (other packages' tables
    and rules read the window as a trace of its own: ``analyze/package_trace.py``).
    ``leave_out``: tables left out, for a report that shows none of them (the terminal's
    ``terminal.NOT_SHOWN``): not computed, but by a finding that reads one (for itself)."""
    trace = view(trace, window)
    if leave_out:
        t = Tables(trace)
        tables = {name: t[name] for name in t if name not in leave_out}  # in report order, as compute_all
        found = analyze.findings(trace, t.computed())
    else:
        tables = compute_all(trace)  # analyze/registry.py: every table, in report order
        found = analyze.findings(trace, tables)
    corr = cache.correlation(trace)
    steps = cache.steps(trace)
    t0, t1 = analysed_span(trace)
    s0, s1 = trace.extent_ns
    overview = {
        "events": trace.n_events, "planes": [p.name for p in trace.planes], "tracks": len(trace.tracks),
        "trace_span_ns": s1 - s0, "analysed_span_start_ns": t0, "analysed_span_ns": t1 - t0,
        "steps": len(steps), "step_source": steps.describe(), "window": label(trace, window),
        "correlation": dict(corr.counts),
        "unsynchronised": unsynchronised(trace),
        "plugin_errors": list(trace.metadata.get(mkeys.PLUGIN_ERRORS, [])),
        "warnings": mkeys.warning_texts(trace.metadata),
        **recorded_in_span(stretches_ns(trace), t1 - t0),  # where a schedule's cycles left unrecorded steps in it
    }
    if corr.counts.get("device_activities") and not corr.counts.get("launch_calls"):
        overview["no_launch_calls"] = no_launch_calls(trace)
    cupti = trace.metadata.get(mkeys.CUPTI)
    left = cupti.get("calls_not_kept") if isinstance(cupti, dict) else None
    if left:  # the cupti plugin counted calls it did not keep as events: the header says so
        overview["calls_not_kept"] = {str(k): int(v.get("calls", 0)) for k, v in left.items() if isinstance(v, dict)}
    return Report(trace, tables, found, overview)


def no_launch_calls(trace: Trace) -> str:
    """Why a trace with device activity has no host launch call to match it with: a GPU's
    kernels and copies are launched by runtime calls, which were not recorded (API
    tracing off, as in an nvprof run for metrics, or not exported); devices that run
    whole compiled programs (TPUs) have none."""
    vendors = {p.vendor for p in trace.planes if p.kind == "device" and p.name.startswith("/device:GPU:")}
    if not vendors:
        return ("no host launch calls in this trace, so none to match (devices that run whole compiled programs, "
                "such as TPUs, have none)")
    api = {"NVIDIA": "CUDA", "AMD": "HIP"}.get(next(iter(vendors)), "GPU") if len(vendors) == 1 else "GPU"
    return (f"no host launch calls in this trace, so none to match: its {api} runtime and driver API calls were "
            "not recorded (API tracing off, or its records not exported)")


def _plain(o: object) -> object:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return str(o)


def _records_json(t: Table | pd.DataFrame) -> orjson.Fragment | list[object]:
    """The rows of a table as JSON records (docs/analysis.md, "Numbers in --json"),
    written column-wise (``report/json_records.py``) and embedded as is."""
    import orjson

    from . import json_records  # --json only: the terminal summary writes no records

    if not isinstance(t, Table):  # a pandas DataFrame a caller put in a report
        t = Table.from_pandas(t)
    return orjson.Fragment(json_records.records(t)) if len(t) else []


def to_json(report: Report, max_rows: int | None = None) -> bytes:
    """Every table (records) and finding as JSON; NaN becomes null."""
    import orjson

    tables = {}
    for name, df in report.tables.items():
        d = df if max_rows is None else df.head(max_rows)
        tables[name] = {"columns": [str(c) for c in df.columns], "rows": len(df), "records": _records_json(d)}
    doc = {"overview": report.overview, "findings": [f.to_dict() for f in report.findings], "tables": tables}
    return orjson.dumps(doc, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2
                        | orjson.OPT_NON_STR_KEYS)
