"""Analyses over a store, rank by rank: each rank is read and analysed on its own (in
this process, a pool or Dask), only its tables come back, and they are stacked into one
table per analysis with a ``rank`` column. Memory is bounded by one rank per worker;
:func:`write_json` (``polyprof summary STORE --json``) and :func:`rank_rows` (the
terminal view) also keep the gathered results bounded: each rank's records go to a
spool file as they arrive, so only the output grows with the number of ranks."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import numpy as np
import pandas as pd

from ..analyze.window import AUTO
from ..ranks.traceset import with_rank
from ..report.tables import _plain, _records_json
from .executor import executor, map_ordered, run_all
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


def rank_report(root: str, rank: int, window: Any = AUTO) -> dict[str, Any]:
    """Read one rank and compute every summary table over ``window`` (a task for the
    executor), with the rank's collectives and clock anchor for the job's alignment and
    stragglers. Event rows in the tables (``*_row`` columns) are the rows of the trace
    the rank came from."""
    from ..ranks.report import rank_collectives, summaries_only
    from ..ranks.traceset import anchor_of
    from ..report.tables import build
    from .rankfiles import read_rank_rows

    st = Store(root)
    trace, input_rows = read_rank_rows(st.path(rank))
    report = build(trace, window)
    report.tables = summaries_only(report.tables)
    for df in report.tables.values():
        for c in [c for c in df.columns if str(c).endswith("_row")]:
            df[c] = input_rows[df[c].to_numpy(np.int64)]
    anchor, monotonic = anchor_of(trace)
    return {"rank": rank, "overview": report.overview, "findings": [f.to_dict() for f in report.findings],
            "tables": report.tables, "collectives": rank_collectives(trace, report.trace), "anchor": anchor,
            "monotonic": monotonic}


class JobTables:
    """Gathers each rank's (small) collective table and anchor as the ranks arrive; then
    the job's alignment, stragglers and collective statistics (``ranks.report.job_tables``)."""

    def __init__(self) -> None:
        self.coll: dict[int, pd.DataFrame] = {}
        self.anchors: dict[int, dict[str, Any]] = {}
        self.monotonic: dict[int, bool] = {}

    def add(self, part: dict[str, Any]) -> None:
        r = part["rank"]
        self.coll[r] = part["collectives"]
        self.monotonic[r] = part["monotonic"]
        if part["anchor"]:
            self.anchors[r] = part["anchor"]

    def result(self) -> tuple[dict[str, pd.DataFrame], list[dict[str, Any]]]:
        from ..ranks.report import job_tables

        tables, findings = job_tables(self.coll, self.anchors, self.monotonic)
        return tables, [{"rank": None, **f.to_dict()} for f in findings]  # the job's, not one rank's


def summary(store: Store | str | Path, *, dask: Any = None, jobs: int = 1, window: Any = AUTO) -> StoreReport:
    """Every summary table of every rank over ``window`` (as ``report.tables.build``),
    and the job's alignment, stragglers and collective statistics; ``dask`` as in
    :func:`..store.executor.executor`."""
    st = store if isinstance(store, Store) else Store(store)
    tasks = [(str(st.root), r, window) for r in st.ranks]
    with executor(dask, jobs) as ex:
        parts = run_all(rank_report, tasks, ex, "summary")
    job = JobTables()
    for p in parts:
        job.add(p)
    tables, findings = job.result()
    tables.update({name: with_rank({p["rank"]: p["tables"][name] for p in parts})
                   for name in (parts[0]["tables"] if parts else {})})
    findings += [{"rank": p["rank"], **f} for p in parts for f in p["findings"]]
    return StoreReport(str(st.root), st.ranks, {p["rank"]: p["overview"] for p in parts}, findings, tables)


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


def rank_reports(store: Store | str | Path, *, dask: Any = None, jobs: int = 1,
                 window: Any = AUTO) -> Iterator[dict[str, Any]]:
    """Each rank's :func:`rank_report`, in rank order, as the executor finishes them."""
    st = store if isinstance(store, Store) else Store(store)
    tasks = [(str(st.root), r, window) for r in st.ranks]
    with executor(dask, jobs) as ex:
        yield from map_ordered(rank_report, tasks, ex, "summary", window=max(2, 2 * jobs))


def write_json(store: Store | str | Path, out: BinaryIO, *, dask: Any = None, jobs: int = 1,
               window: Any = AUTO) -> None:
    """The document of :func:`to_json`, written to ``out`` with one rank's tables in memory
    at a time (records are spooled to a temporary file per table, then copied out; the
    job's tables, from every rank's small collective table, come first)."""
    import orjson

    st = store if isinstance(store, Store) else Store(store)
    dump = lambda o: orjson.dumps(o, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY  # noqa: E731
                                  | orjson.OPT_NON_STR_KEYS)
    overview: dict[int, Any] = {}
    findings: list[dict[str, Any]] = []
    columns: dict[str, list[str]] = {}
    rows: dict[str, int] = {}
    job = JobTables()
    with tempfile.TemporaryDirectory(prefix="polyprof-summary-") as tmp:
        spools: dict[str, BinaryIO] = {}
        try:
            for part in rank_reports(st, dask=dask, jobs=jobs, window=window):
                r = part["rank"]
                job.add(part)
                overview[r] = part["overview"]
                findings += [{"rank": r, **f} for f in part["findings"]]
                for name, df in part["tables"].items():
                    columns.setdefault(name, ["rank", *df.columns])
                    f = spools.get(name) or spools.setdefault(name, open(Path(tmp) / f"{len(spools)}.json", "w+b"))
                    d = df.astype(object).where(pd.notna(df), None)
                    for rec in d.to_dict(orient="records"):
                        f.write((b"," if rows.get(name) else b"") + dump({"rank": r, **rec}))
                        rows[name] = rows.get(name, 0) + 1
            job_tables, job_findings = job.result()
            out.write(b'{"store":' + dump(str(st.root)) + b',"ranks":' + dump(st.ranks) + b',"overview":'
                      + dump(overview) + b',"findings":' + dump(job_findings + findings) + b',"tables":{')
            for name, df in job_tables.items():
                out.write(dump(name) + b':{"columns":' + dump(list(df.columns)) + b',"rows":' + dump(len(df))
                          + b',"records":' + dump(_records_json(df)) + b"},")
            for i, (name, cols) in enumerate(columns.items()):
                out.write((b"," if i else b"") + dump(name) + b':{"columns":' + dump(cols) + b',"rows":'
                          + dump(rows.get(name, 0)) + b',"records":[')
                spool = spools.get(name)
                if spool is not None:
                    spool.seek(0)
                    while chunk := spool.read(1 << 20):
                        out.write(chunk)
                out.write(b"]}")
            out.write(b"}}\n")
        finally:
            for f in spools.values():
                f.close()


def rank_rows(store: Store | str | Path, *, dask: Any = None, jobs: int = 1,
              window: Any = AUTO) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame], list[dict[str, Any]]]:
    """(one row per rank: events, spans, steps, device busy share, findings; kernels
    summed over ranks: ranks, count, total, min and max of a rank's total; the job's
    tables and findings: alignment, stragglers, collectives)."""
    rows = []
    kernels: dict[str, list] = {}
    job = JobTables()
    for part in rank_reports(store, dask=dask, jobs=jobs, window=window):
        job.add(part)
        r, ov, t = part["rank"], part["overview"], part["tables"]
        tb = t.get("temporal_breakdown", pd.DataFrame())
        busy = float(tb["compute_pct"].mean()) if len(tb) and "compute_pct" in tb else float("nan")
        rows.append({"rank": r, "events": ov["events"], "trace_span_ns": ov["trace_span_ns"],
                     "analysed_span_ns": ov["analysed_span_ns"], "steps": ov["steps"],
                     "compute_pct": busy, "findings": len(part["findings"])})
        kb = t.get("kernel_breakdown")
        if kb is not None and len(kb):
            per = kb.groupby("name")[["count", "total_ns"]].sum()
            for name, c, tot in zip(per.index.tolist(), per["count"].tolist(), per["total_ns"].tolist()):
                k = kernels.setdefault(name, [0, 0, 0, float("inf"), 0])
                k[0] += 1
                k[1] += c
                k[2] += tot
                k[3] = min(k[3], tot)
                k[4] = max(k[4], tot)
    kdf = pd.DataFrame([(n, *v) for n, v in kernels.items()],
                       columns=["name", "ranks", "count", "total_ns", "min_rank_ns", "max_rank_ns"])
    return (pd.DataFrame(rows), kdf.sort_values("total_ns", ascending=False, ignore_index=True), *job.result())
