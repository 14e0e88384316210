"""The job report: what a job's ranks add up to, made from their :class:`RankResult` s
alone (ranks/result.py), whatever kind of source each rank came from.

Per rank it keeps the result (tables, findings, overview); for the job it computes the
ranks side by side (``rank_overview``), the clock alignment, collective statistics and
stragglers (``job_tables``: from each rank's small collective table), and the findings:
the job's, then each rank's, the same finding on several ranks told once.
``JobReport.tables`` has both the job's tables and every per-rank table stacked with a
``rank`` column first (``ranks/stack.py``); the renderers in report/ (``job_terminal``,
``job_json``, ``html``) read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analyze.findings import SEVERITY_ORDER, Finding, by_severity
from ..analyze.frames import column, frame
from ..analyze.registry import PER_EVENT
from ..analyze.units import fmt_ns
from ..analyze.table import Table
from .align import align_ranks, alignment_table
from ..analyze.collectives import collective_stats
from .result import OVERVIEW_COLUMNS, RankResult
from .stack import with_rank
from .stragglers import stragglers
from .transfers import job_transfers
from ..trace.sorting import median


@dataclass
class RankInfo:
    """Which rank a result is, and of what: its number, its source's label (the file)
    and how the number was found."""

    rank: int
    label: str
    how: str


@dataclass
class JobReport:
    """Every rank's result and what they add up to (see the module doc)."""

    ranks: list[int]
    tables: dict[str, Any]
    findings: list[Finding]
    overview: dict[str, Any] = field(default_factory=dict)
    results: dict[int, RankResult] = field(default_factory=dict)
    trace: None = None  # a job holds no trace: the ranks stay where they came from


def job_report(results: dict[int, RankResult], info: dict[int, RankInfo], per_event_left: bool = True) -> JobReport:
    """The report of the ranks' ``results`` (by rank; ``info`` says which is which)."""
    ranks = sorted(results)
    job, job_findings = job_tables({r: results[r].collectives for r in ranks},
                                   {r: a for r in ranks if (a := results[r].anchor)},
                                   {r: results[r].monotonic for r in ranks},
                                   {r: int(results[r].overview_row[1]) for r in ranks})
    tables: dict[str, Any] = {"rank_overview": _overview_table(results, info), **job}
    # the job's own collective_stats and transfers (over every rank, both ends of a
    # transfer joined) stand for the ranks' tables of those names
    names = [n for n in dict.fromkeys(n for r in ranks for n in results[r].tables) if n not in job]
    for name in names:
        tables[name] = with_rank({r: results[r].tables[name] for r in ranks if name in results[r].tables})
    findings = by_severity(job_findings + _rank_findings(results))
    al = tables["rank_alignment"]
    aligned = column(al, "aligned").astype(bool) if len(al) else None
    overview = {
        "ranks": len(ranks), "rank_ids": ranks, "reference_rank": ranks[0] if ranks else None,
        "events": int(sum(results[r].overview.get("events", 0) for r in ranks)),
        "aligned_ranks": int(aligned.sum()) if aligned is not None else 0,
        "aligned_by": sorted({str(m) for m, a in zip(column(al, "method"), aligned) if a and m != "reference"})
        if aligned is not None else [],
        "max_bound_ns": float(column(al, "bound_ns")[aligned].max())
        if aligned is not None and aligned.any() else None,
        "window": _windows(results),
        "per_rank": {r: results[r].overview for r in ranks},
    }
    if per_event_left:
        overview["per_event_tables_left_with_ranks"] = list(PER_EVENT)
    return JobReport(ranks, tables, findings, overview, results)


def job_tables(coll: dict[int, Any], anchors: dict[int, dict[str, Any]],
               monotonic: dict[int, bool], steps: dict[int, int] | None = None) -> tuple[dict[str, Any], list[Finding]]:
    """What needs every rank at once, from each rank's small collective table: the clock
    alignment (from all collectives, else transfers), stragglers and collective
    statistics (from the collectives ``in_window``: never point-to-point transfers, whose
    two ends are no group's arrival), the transfers (``steps``: each rank's steps in the
    window, for the per-step figures), and the straggler findings."""
    clocks = align_ranks(coll, anchors, monotonic)
    inside = {r: t[column(t, "in_window").astype(bool) & ~column(t, "p2p").astype(bool)] for r, t in coll.items()}
    per_rank, per_coll = stragglers(inside, clocks)
    tables = {"rank_alignment": alignment_table(clocks), "stragglers": per_rank,
              "straggler_collectives": per_coll, "collective_stats": collective_stats(inside),
              "transfers": job_transfers(coll, steps or {})}
    return tables, _straggler_findings(per_rank, per_coll, tables["rank_alignment"])


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


def _overview_table(results: dict[int, RankResult], info: dict[int, RankInfo]) -> Any:
    ranks = sorted(results)
    rows = [(r, info[r].label, info[r].how, *results[r].overview_row) for r in ranks]
    return frame({c: [row[i] for row in rows] for i, c in enumerate(OVERVIEW_COLUMNS)})


def _straggler_findings(per_rank: Table, per_coll: Table, align: Table) -> list[Finding]:
    out = []
    bad = align.take(~align["aligned"].astype(bool)) if len(align) else align
    if len(bad):
        out.append(Finding("ranks_not_aligned", f"{len(bad)} rank(s) could not be aligned from collectives "
                                                 "or transfers",
                           "low", "", {"ranks": bad["rank"].tolist(), "message": str(bad["message"][0])},
                           suggestion="Cross-rank timing for these ranks rests on their recorded clocks; record "
                                      "the same steps on every rank (same profiler schedule) so their collectives "
                                      "can be matched."))
    n = len(per_rank)
    if n < 2 or not len(per_coll):
        return out
    significant = per_coll["spread_ns"] > 2 * per_coll["bound_ns"]
    total = int(significant.sum())
    if not total:
        return out
    # the rank that came last most often, then caused the most waiting (the first such row)
    at = int(np.lexsort((-np.asarray(per_rank["caused_wait_ns"], np.float64),
                         -np.asarray(per_rank["last_count"], np.float64)))[0])
    top = {c: per_rank[c][at] for c in per_rank.columns}
    share = top["last_count"] / total
    expected = 1 / n
    if top["last_count"] < 2 or share < expected + 0.5 * (1 - expected):
        return out
    r = int(top["rank"])
    mine = per_coll.take((per_coll["last_rank"] == r) & significant)
    wait = int(top["caused_wait_ns"])  # per rank that waited, over time: concurrent buckets once
    out.append(Finding(
        "straggler", f"rank {r} is the straggler: last to arrive at {int(top['last_count'])} of {total} collectives "
                     f"whose arrivals differ beyond the clocks' bounds (of {len(per_coll)}); "
                     f"the others waited {fmt_ns(wait)} for it",
        "high" if share >= 0.9 else "medium", "",
        {"rank": r, "last_count": int(top["last_count"]), "collectives": total, "share_pct": round(100 * share, 1),
         "caused_wait_ns": wait, "late_ns": int(top["late_ns"]),
         "median_spread_ns": median(mine["spread_ns"]), "alignment_bound_ns": float(top["bound_ns"])},
        [{"name": f"{k} #{s}", "last_rank": r, "spread_ns": int(sp)}
         for k, s, sp in mine.select(["key", "seq", "spread_ns"]).head(5).rows()],
        f"Look at what rank {r} does before its collectives (data loading, host work, a slower device, "
        "uneven work per rank): the other ranks idle in every collective until it arrives."))
    return out
