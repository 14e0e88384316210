"""The multi-rank report: every per-rank analysis with a ``rank`` column, the ranks side
by side, clock alignment, collective statistics, stragglers and findings.

Each rank is analysed where it is loaded (``TraceSet.map``) and hands back its tables,
findings and collectives; alignment and stragglers are computed here from those small
tables. ``RanksReport`` has the same ``tables`` / ``findings`` / ``overview`` as a
single-trace ``Report``, so ``--json`` and the HTML report read both alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from ..analyze.common import rows_frame
from ..analyze.findings import SEVERITY_ORDER, Finding, by_severity
from ..analyze.window import AUTO, label, selection, view
from ..errors import PolyprofError
from ..trace.core import Trace
from .align import align_ranks, alignment_table
from .collectives import collective_stats, collective_table
from .stragglers import stragglers
from .traceset import anchor_of, with_rank

OVERVIEW_COLUMNS = ["rank", "file", "rank_from", "events", "steps", "step_mean_ns", "step_median_ns",
                    "step_max_ns", "compute_pct", "non_compute_pct", "idle_pct", "communication_ns", "collectives"]


@dataclass
class RankResult:
    """What one rank's worker hands back (small: tables, not events)."""

    rank: int
    label: str
    tables: dict[str, pd.DataFrame]
    findings: list[Finding]
    overview: dict[str, Any]
    collectives: pd.DataFrame
    anchor: dict[str, Any] | None
    monotonic: bool
    overview_row: tuple  # this rank's numbers in the job's rank_overview (OVERVIEW_COLUMNS[4:])


def rank_summary(trace: Trace, tables: tuple[str, ...] | None = None, window: Any = AUTO) -> RankResult:
    """Every analysis of one rank over the steps ``window`` selects (runs in the worker
    that loaded it) but those :func:`summaries_only` leaves out; with ``tables`` (names in
    ``analyze.registry.ANALYSES``) only those, and no findings. The collectives are all
    of the rank's (alignment uses every one), marked ``in_window`` for the ones the
    window holds (stragglers and statistics)."""
    from ..analyze.registry import ANALYSES, Tables
    from ..report.tables import Report, build

    if tables is None:
        rep = build(trace, window)
        rep.tables = summaries_only(rep.tables)
    else:
        known = [a.name for a in ANALYSES]
        unknown = sorted(set(tables) - set(known))
        if unknown:
            raise PolyprofError(f"unknown analyses {unknown}; known: {known}")
        v = view(trace, window)
        t = Tables(v)
        rep = Report(v, {n: t[n] for n in tables}, [], {"events": trace.n_events, "window": label(v, window)})
    s = trace.sources[0]
    coll = rank_collectives(trace, rep.trace)
    return RankResult(int(s.rank if s.rank is not None else 0), s.label, rep.tables, rep.findings, rep.overview,
                      coll, *anchor_of(trace), _overview_row(rep.tables, coll))


def summaries_only(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """What a job gathers of a rank's tables (trace files and stores alike): all but
    those with a row per event (``analyze.registry.PER_EVENT``: the launch table, 90% of
    a summary's rows), which stay with the rank."""
    from ..analyze.registry import PER_EVENT

    return {name: df for name, df in tables.items() if name not in PER_EVENT}


def rank_collectives(trace: Trace, windowed: Trace) -> pd.DataFrame:
    """:func:`collective_table` of the whole rank with ``in_window``: the collective
    began inside the selected steps (every one when the whole trace is analysed)."""
    coll = collective_table(trace)
    sel = selection(windowed)
    start = coll["start_ns"].to_numpy()
    if sel is None:
        return coll.assign(in_window=np.ones(len(coll), bool))
    return coll.assign(in_window=(start >= sel.lo) & (start < sel.hi))


@dataclass
class RanksReport:
    ranks: list[int]
    tables: dict[str, pd.DataFrame]
    findings: list[Finding]
    overview: dict[str, Any] = field(default_factory=dict)
    results: dict[int, RankResult] = field(default_factory=dict)
    trace: Trace | None = None  # not held: the ranks stay in their files


def build_ranks(ts: Any, executor: Any = None, tables: tuple[str, ...] | None = None,
                window: Any = AUTO) -> RanksReport:
    fn = partial(rank_summary, tables=None if tables is None else tuple(tables), window=window)
    results: dict[int, RankResult] = ts.map(fn, executor, progress="analysing ranks")
    for r, res in results.items():  # the set's numbering wins over what a file says
        res.rank = r
    rep = combine(results, {e.rank: e.how for e in ts.entries})
    if tables is None:
        from ..analyze.registry import PER_EVENT

        rep.overview["per_event_tables_left_with_ranks"] = list(PER_EVENT)
    return rep


def job_tables(coll: dict[int, pd.DataFrame], anchors: dict[int, dict[str, Any]],
               monotonic: dict[int, bool]) -> tuple[dict[str, pd.DataFrame], list[Finding]]:
    """What needs every rank at once, from each rank's small collective table: the clock
    alignment (from all collectives), stragglers and collective statistics (from those
    ``in_window``), and the straggler findings. Used for trace files and stores alike."""
    clocks = align_ranks(coll, anchors, monotonic)
    inside = {r: t[t["in_window"].to_numpy(bool)] if "in_window" in t else t for r, t in coll.items()}
    per_rank, per_coll = stragglers(inside, clocks)
    tables = {"rank_alignment": alignment_table(clocks), "stragglers": per_rank,
              "straggler_collectives": per_coll, "collective_stats": collective_stats(inside)}
    return tables, _straggler_findings(per_rank, per_coll, tables["rank_alignment"])


def combine(results: dict[int, RankResult], how: dict[int, str] | None = None) -> RanksReport:
    how = how or {}
    ranks = sorted(results)
    job, job_findings = job_tables({r: results[r].collectives for r in ranks},
                                   {r: results[r].anchor for r in ranks if results[r].anchor},
                                   {r: results[r].monotonic for r in ranks})
    tables: dict[str, pd.DataFrame] = {"rank_overview": _overview_table(results, how), **job}
    names = list(dict.fromkeys(n for r in ranks for n in results[r].tables))
    for name in names:
        tables[name] = with_rank({r: results[r].tables[name] for r in ranks if name in results[r].tables})
    findings = by_severity(job_findings + _rank_findings(results))
    al = tables["rank_alignment"]
    overview = {
        "ranks": len(ranks), "rank_ids": ranks, "reference_rank": ranks[0] if ranks else None,
        "events": int(sum(results[r].overview.get("events", 0) for r in ranks)),
        "aligned_ranks": int(al["aligned"].sum()) if len(al) else 0,
        "max_bound_ns": float(al.loc[al["aligned"], "bound_ns"].max()) if al["aligned"].any() else None,
        "window": _windows(results),
        "per_rank": {r: results[r].overview for r in ranks},
    }
    return RanksReport(ranks, tables, findings, overview, results)


def _windows(results: dict[int, RankResult]) -> str:
    """The analysed window of the ranks: one line when they agree, else per rank."""
    labels = {r: str(res.overview.get("window", "")) for r, res in results.items()}
    if len(set(labels.values())) <= 1:
        return next(iter(labels.values()), "")
    return "; ".join(f"rank {r}: {w}" for r, w in sorted(labels.items()))


def _rank_ranges(ranks: list[int]) -> str:
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(f"{ranks[i]}" if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(out)


def _rank_findings(results: dict[int, RankResult]) -> list[Finding]:
    """Each rank's findings, the same finding on several ranks told once: the worst
    rank's numbers, with the ranks it holds for."""
    groups: dict[tuple[str, str], list[tuple[int, Finding]]] = {}
    for r in sorted(results):
        for f in results[r].findings:
            groups.setdefault((f.id, f.plane), []).append((r, f))
    out = []
    for members in groups.values():
        r, f = min(members, key=lambda m: SEVERITY_ORDER.get(m[1].severity, 3))
        ranks = [m[0] for m in members]
        who = f"rank {r}" if len(ranks) == 1 else f"ranks {_rank_ranges(ranks)} (rank {r}'s numbers)"
        out.append(Finding(f.id, f"{who}: {f.title}", f.severity, f.plane, {"rank": r, "ranks": ranks, **f.evidence},
                           f.events, f.suggestion))
    return out


def _overview_table(results: dict[int, RankResult], how: dict[int, str]) -> pd.DataFrame:
    return rows_frame([(r, results[r].label, how.get(r, ""), int(results[r].overview.get("events", 0)),
                        *results[r].overview_row) for r in sorted(results)], OVERVIEW_COLUMNS)


def _overview_row(tables: dict[str, pd.DataFrame], collectives: pd.DataFrame) -> tuple:
    """One rank's steps, breakdown and communication for the job's ``rank_overview``
    (computed where the rank is analysed)."""
    st = tables.get("step_stats")
    steps = st.drop_duplicates("step")["host_ns"].to_numpy(np.float64) if st is not None and len(st) else np.zeros(0)
    tb = tables.get("temporal_breakdown")
    allrows = tb[tb["track_id"] == -1] if tb is not None and len(tb) else None
    if allrows is not None and len(allrows):
        span = allrows["span_ns"].sum()
        pct = [float(allrows[c].sum() / span * 100) if span else float("nan")
               for c in ("compute_ns", "non_compute_ns", "idle_ns")]
    else:
        pct = [float("nan")] * 3
    ov = tables.get("comm_comp_overlap")
    comm = int(ov["communication_ns"].sum()) if ov is not None and len(ov) else 0
    n_coll = int(collectives["in_window"].sum()) if "in_window" in collectives else len(collectives)
    return (len(steps), float(steps.mean()) if len(steps) else float("nan"),
            float(np.median(steps)) if len(steps) else float("nan"),
            float(steps.max()) if len(steps) else float("nan"), *pct, comm, n_coll)


def _straggler_findings(per_rank: pd.DataFrame, per_coll: pd.DataFrame, align: pd.DataFrame) -> list[Finding]:
    out = []
    bad = align[~align["aligned"].astype(bool)] if len(align) else align
    if len(bad):
        out.append(Finding("ranks_not_aligned", f"{len(bad)} rank(s) could not be aligned from collectives",
                           "low", "", {"ranks": bad["rank"].tolist(), "message": str(bad["message"].iloc[0])},
                           suggestion="Cross-rank timing for these ranks rests on their recorded clocks; record "
                                      "the same steps on every rank (same profiler schedule) so their collectives "
                                      "can be matched."))
    n = len(per_rank)
    if n < 2 or not len(per_coll):
        return out
    significant = per_coll["spread_ns"].to_numpy() > 2 * per_coll["bound_ns"].to_numpy()
    total = int(significant.sum())
    if not total:
        return out
    top = per_rank.sort_values(["last_count", "caused_wait_ns"], ascending=False).iloc[0]
    share = top["last_count"] / total
    expected = 1 / n
    if top["last_count"] < 2 or share < expected + 0.5 * (1 - expected):
        return out
    r = int(top["rank"])
    mine = per_coll[(per_coll["last_rank"] == r) & significant]
    wait = int(mine["wait_ns"].sum())
    out.append(Finding(
        "straggler", f"rank {r} is the straggler: last to arrive at {int(top['last_count'])} of {total} collectives; "
                     f"the others waited {wait / 1e6:.3f} ms for it",
        "high" if share >= 0.9 else "medium", "",
        {"rank": r, "last_count": int(top["last_count"]), "collectives": total, "share_pct": round(100 * share, 1),
         "caused_wait_ns": wait, "late_ns": int(top["late_ns"]),
         "median_spread_ns": float(mine["spread_ns"].median()), "alignment_bound_ns": float(top["bound_ns"])},
        [{"name": f"{k} #{s}", "last_rank": r, "spread_ns": int(sp)}
         for k, s, sp in mine[["key", "seq", "spread_ns"]].head(5).itertuples(index=False)],
        f"Look at what rank {r} does before its collectives (data loading, host work, a slower device, "
        "uneven work per rank): the other ranks idle in every collective until it arrives."))
    return out
