"""Analyses over a store, rank by rank: each rank is read and analysed on its own (in
this process, a pool or Dask), only its tables come back, and they are stacked into one
table per analysis with a ``rank`` column. Memory is bounded by one rank per worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .executor import executor, run_all
from .store import Store


@dataclass
class StoreReport:
    """The summary of every rank of a store: per-rank overviews, findings and tables."""

    root: str
    ranks: list[int]
    overview: dict[int, dict[str, Any]]
    findings: list[dict[str, Any]]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def rank_tables(self, rank: int) -> dict[str, pd.DataFrame]:
        """One rank's tables, as the single-trace summary gives them (no rank column)."""
        return {name: df[df["rank"] == rank].drop(columns="rank").reset_index(drop=True)
                for name, df in self.tables.items()}


def rank_report(root: str, rank: int) -> dict[str, Any]:
    """Read one rank and compute every summary table (a task for the executor). Event
    rows in the tables (``*_row`` columns) are the rows of the trace the rank came from."""
    from ..report.tables import build
    from .rankfiles import read_rank_rows

    st = Store(root)
    trace, input_rows = read_rank_rows(st.path(rank))
    report = build(trace)
    for df in report.tables.values():
        for c in [c for c in df.columns if str(c).endswith("_row")]:
            df[c] = input_rows[df[c].to_numpy(np.int64)]
    return {"rank": rank, "overview": report.overview, "findings": [f.to_dict() for f in report.findings],
            "tables": report.tables}


def summary(store: Store | str | Path, *, dask: Any = None, jobs: int = 1) -> StoreReport:
    """Every summary table of every rank; ``dask`` as in :func:`..store.executor.executor`."""
    st = store if isinstance(store, Store) else Store(store)
    tasks = [(str(st.root), r) for r in st.ranks]
    with executor(dask, jobs) as ex:
        parts = run_all(rank_report, tasks, ex, "summary")
    tables: dict[str, pd.DataFrame] = {}
    for name in (parts[0]["tables"] if parts else {}):
        frames = [p["tables"][name].assign(rank=p["rank"]) for p in parts]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        tables[name] = df[["rank", *[c for c in df.columns if c != "rank"]]]
    findings = [{"rank": p["rank"], **f} for p in parts for f in p["findings"]]
    return StoreReport(str(st.root), st.ranks, {p["rank"]: p["overview"] for p in parts}, findings, tables)


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return str(o)


def to_json(report: StoreReport) -> bytes:
    """Like the single-trace ``--json``: overview per rank, findings and tables with ``rank``."""
    import orjson

    tables = {}
    for name, df in report.tables.items():
        d = df.astype(object).where(pd.notna(df), None)
        tables[name] = {"columns": list(df.columns), "rows": len(df), "records": d.to_dict(orient="records")}
    doc = {"store": report.root, "ranks": report.ranks, "overview": report.overview,
           "findings": report.findings, "tables": tables}
    return orjson.dumps(doc, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2
                        | orjson.OPT_NON_STR_KEYS)


def rank_overview(report: StoreReport) -> pd.DataFrame:
    """One row per rank: events, spans, steps, device busy share, findings."""
    rows = []
    tb = report.tables.get("temporal_breakdown", pd.DataFrame())
    for r in report.ranks:
        ov = report.overview[r]
        t = tb[tb["rank"] == r] if len(tb) else tb
        busy = float(t["compute_pct"].mean()) if len(t) and "compute_pct" in t else float("nan")
        rows.append({"rank": r, "events": ov["events"], "trace_span_ns": ov["trace_span_ns"],
                     "analysed_span_ns": ov["analysed_span_ns"], "steps": ov["steps"],
                     "compute_pct": busy, "findings": sum(f["rank"] == r for f in report.findings)})
    return pd.DataFrame(rows)
