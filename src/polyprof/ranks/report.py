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

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..analyze.finding import main_number
from ..analyze.findings import SEVERITY_ORDER, Finding, by_severity
from ..analyze.frames import column, frame
from ..analyze.registry import per_event_tables
from ..analyze.units import fmt_ns, number_ranges
from ..analyze.table import Table
from .align import align_ranks, alignment_table
from ..analyze.collectives import collective_stats
from ..formats.journal_layout import SUFFIX as JOURNAL_SUFFIX
from .result import OVERVIEW_COLUMNS, RankResult
from .stack import with_rank
from .stragglers import chance_p, stragglers
from .transfers import job_transfers
from ..trace.sorting import median

#: one rank's steps in its analysed window: (number, start_ns, end_ns), on its own clock
StepBounds = tuple[np.ndarray, np.ndarray, np.ndarray]

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
                                   {r: results[r].session_clock for r in ranks},
                                   {r: int(results[r].overview_row[1]) for r in ranks},
                                   {r: int(results[r].overview.get("analysed_span_ns") or 0) for r in ranks},
                                   {r: step_bounds(results[r].tables.get("step_stats")) for r in ranks},
                                   {r for r in ranks if _from_journal(results[r], info.get(r))})
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
        overview["per_event_tables_left_with_ranks"] = list(per_event_tables())
    return JobReport(ranks, tables, findings, overview, results)


def job_tables(coll: dict[int, Any], anchors: dict[int, dict[str, Any]],
               session: dict[int, bool], steps: dict[int, int] | None = None,
               windows: dict[int, int] | None = None,
               bounds: dict[int, StepBounds | None] | None = None,
               journals: set[int] | None = None) -> tuple[dict[str, Any], list[Finding]]:
    """What needs every rank at once, from each rank's small collective table: the clock
    alignment (from all collectives, else transfers), stragglers and collective
    statistics (from the collectives ``in_window``: never point-to-point transfers, whose
    two ends are no group's arrival), the transfers (``steps``: each rank's steps in the
    window, for the per-step figures), and the straggler findings (``windows``: each
    rank's analysed span, what the waiting a rank caused is a share of; ``bounds``: each
    rank's steps, :func:`step_bounds`, to say which steps a straggler's collectives were in;
    ``journals``: the ranks read from a crash journal, whose collectives the kill lost)."""
    clocks = align_ranks(coll, anchors, session)
    inside = {r: t[column(t, "in_window").astype(bool) & ~column(t, "p2p").astype(bool)] for r, t in coll.items()}
    per_rank, per_coll = stragglers(inside, clocks)
    tables = {"rank_alignment": alignment_table(clocks), "stragglers": per_rank,
              "straggler_collectives": per_coll, "collective_stats": collective_stats(inside),
              "transfers": job_transfers(coll, steps or {})}

    def steps_of(r: int) -> tuple[dict[tuple[str, int], int], list[int]]:
        b = (bounds or {}).get(r)
        return _steps_of(inside.get(r), clocks.get(r), b), [] if b is None else b[0].tolist()

    return tables, _straggler_findings(per_rank, per_coll, tables["rank_alignment"], windows or {}, steps_of,
                                       journals)


def _windows(results: dict[int, RankResult]) -> str:
    """The analysed window of the ranks: one line when they agree, else per rank."""
    labels = {r: str(res.overview.get("window", "")) for r, res in results.items()}
    if len(set(labels.values())) <= 1:
        return next(iter(labels.values()), "")
    return "; ".join(f"rank {r}: {w}" for r, w in sorted(labels.items()))


def _plane_kind(plane: str) -> str:
    """A plane's name without its device's index (``/device:GPU:3`` -> ``/device:GPU:``):
    the same finding on each rank's own GPU is one finding."""
    return re.sub(r"\d+$", "", plane)


def _devices(planes: list[str]) -> str:
    """The planes as one name, the indices as ranges (``/device:GPU:0-7``)."""
    kind = _plane_kind(planes[0])
    numbers = sorted({int(p[len(kind):]) for p in planes if p[len(kind):].isdigit()})
    return f"{kind}{number_ranges(numbers)}" if numbers else ", ".join(dict.fromkeys(planes))


def _rank_findings(results: dict[int, RankResult]) -> list[Finding]:
    """Each rank's findings, the same finding on several ranks told once (the same rule
    on the same kind of plane: each rank's own GPU too): the worst rank's numbers (by
    severity, then the finding's main number, :func:`analyze.finding.main_number`), with the ranks it
    holds for and their planes."""
    groups: dict[tuple[str, str], list[tuple[int, Finding]]] = {}
    for r in sorted(results):
        for f in results[r].findings:
            groups.setdefault((f.id, _plane_kind(f.plane)), []).append((r, f))
    out = []
    for members in groups.values():
        r, f = min(members, key=lambda m: (SEVERITY_ORDER.get(m[1].severity, 3), -main_number(m[1]), m[0]))
        ranks = [m[0] for m in members]
        planes = [m[1].plane for m in members]
        several = len(set(planes)) > 1
        on = f"{_devices(planes)}; " if several else ""
        who = f"rank {r}" if len(ranks) == 1 else f"ranks {number_ranges(ranks)} ({on}rank {r}'s numbers)"
        evidence = {"rank": r, "ranks": ranks, **({"planes": planes} if several else {}), **f.evidence}
        out.append(Finding(f.id, f"{who}: {f.title}", f.severity, f.plane, evidence, f.events, f.suggestion))
    return out


def _overview_table(results: dict[int, RankResult], info: dict[int, RankInfo]) -> Any:
    ranks = sorted(results)
    rows = [(r, info[r].label, info[r].how, *results[r].overview_row) for r in ranks]
    return frame({c: [row[i] for row in rows] for i, c in enumerate(OVERVIEW_COLUMNS)})


#: a rank whose lateness cost the job at least this share of its rank time (every rank's
#: analysed time together: the waiting it caused over all ranks' windows) is a straggler
#: even if it came last at few collectives (a long delay in some steps only)...
WAIT_SHARE_PCT = 20.0
#: ... when that is at least this many times the waiting any other rank caused. (Two
#: processes of a gloo DDP job on two cores, no delay: the one that happened to come last
#: more often cost 12% of the job's time, 7x the other way; rank 1 sleeping 50 ms in 3 of
#: 7 steps: 24%, 4x; PARAM's DLRM job, rank 7 late at its first all-to-all: 28%, 6x.)
WAIT_RATIO = 2.0
#: the count rule: the rank came last at more than halfway between 1/ranks and all of the
#: collectives whose arrivals differ beyond the clocks' bounds, and so many lasts are
#: beyond chance: the binomial tail (``stragglers.chance_p``) times the number of ranks
#: (any rank could have been the one last most often) is at most this (a two-process
#: gloo DDP job with no delay: last at 10 of 14, 0.18; with the warm-up step: rank 0 last
#: at 3 of 4 (0.62), 5 of 6 (0.22): counts of a few steps that the 75% share alone named)...
COUNT_P = 0.05
#: ... and the waiting it caused is at least this share of the other ranks' analysed
#: time: a rank last by a hair at every collective costs the others nothing worth a
#: finding. (A rank 400 µs late at each all-reduce of 222 ms steps: 0.9%, named.)
COUNT_WAIT_PCT = 0.5
#: the steps named in a straggler finding: the fewest, most waiting first, that hold this
#: share of the waiting it caused
STEPS_SHARE = 0.8


def step_bounds(step_stats: Any) -> StepBounds | None:
    """Each step's number, start and end on the host, from a rank's ``step_stats`` (its
    first row per step, as ``rank_overview`` takes them); None without one."""
    if step_stats is None or not len(step_stats):
        return None
    _, first = np.unique(column(step_stats, "step"), return_index=True)
    start = np.asarray(column(step_stats, "host_start_ns"), np.int64)[first]
    first = first[np.argsort(start, kind="stable")]  # in time order, for a search by time
    return (np.asarray(column(step_stats, "step"), np.int64)[first],
            np.asarray(column(step_stats, "host_start_ns"), np.int64)[first],
            np.asarray(column(step_stats, "host_end_ns"), np.int64)[first])


def _steps_of(coll: Any, clock: Any, bounds: StepBounds | None) -> dict[tuple[str, int], int]:
    """The step each of a rank's collectives began in, by (key, the reference rank's seq)
    as the straggler tables name them (their rank's own clock and steps)."""
    if coll is None or clock is None or not clock.aligned or bounds is None or not len(coll) or not len(bounds[0]):
        return {}
    number, lo, hi = bounds
    seq = clock.reference_seq(coll)
    start = np.asarray(column(coll, "start_ns"), np.int64)
    at = np.searchsorted(lo, start, side="right") - 1
    ok = (seq >= 0) & (at >= 0) & (start < hi[np.maximum(at, 0)])
    keys = np.asarray(column(coll, "key"), object)
    return {(str(k), int(q)): int(number[a]) for k, q, a in zip(keys[ok], seq[ok], at[ok])}


#: what the cross-rank timing of ranks not aligned from events rests on, by the fallback's
#: method (after the ranks' names)
_RESTS_ON = {"": "rests on their recorded clocks",
             "wall anchors": "rests on their wall-clock anchors (when each session started, on its host's clock)",
             "own clock": "has nothing to rest on: each rank's times count from its own start, with no "
                          "wall-clock anchor to line the ranks up by"}
_NOTHING_TO_MATCH = ("recorded no collective polyprof recognises (communication kernels, gloo or MPI ranges, XLA "
                     "collective ops), so there is nothing to match")


def _from_journal(result: RankResult, info: RankInfo | None) -> bool:
    """Whether a rank was read from a crash journal (``OUTPUT.partial``: its session never
    stopped), by its file's name or the warning its reading left."""
    said = result.overview.get("warnings") or []
    return (info is not None and info.label.endswith(JOURNAL_SUFFIX)) or any(
        str(w).startswith("recovered from the crash journal") for w in said)


def _ranks(ranks: list[int]) -> str:
    """``rank 2``, ``ranks 1-3, 5``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {number_ranges(sorted(ranks))}"


def _not_aligned_finding(bad: Table, journals: set[int] | None = None) -> Finding:
    """The ranks the fallback placed (``bad``: their rows of the alignment table): for
    each of its methods, which ranks and what their cross-rank timing rests on, and for
    each reason, what would align them; ranks in ascending order. A rank without
    collectives read from a crash journal (``journals``) lost them with the kill (the
    journal keeps host data only), never recorded none."""
    rows = sorted(zip(np.asarray(bad["rank"], np.int64).tolist(), map(str, bad["message"].tolist()),
                      map(str, bad["method"].tolist())))
    by: dict[str, list[int]] = {}
    for r, _, x in rows:
        by.setdefault(x if x in _RESTS_ON else "", []).append(r)
    text = [f"Cross-rank timing for {_ranks(rs)} {_RESTS_ON[x]}" for x, rs in by.items()]
    silent = [r for r, m, _ in rows if m.startswith(f"rank {r} recorded no collective")]
    ref = dict.fromkeys(m.split(",")[0].split(":")[0] for r, m, _ in rows if m.startswith("the reference rank"))
    rest = [r for r, m, _ in rows if r not in silent and not m.startswith("the reference rank")]
    lost = [r for r in silent if r in (journals or set())]
    if lost:
        text.append(f"{_ranks(lost)} {'was' if len(lost) == 1 else 'were'} read from a crash journal (killed "
                    "before {} session stopped), which keeps host data only: {} collectives were lost with the "
                    "kill, so there is nothing to match".format(*(["its"] * 2 if len(lost) == 1 else ["their"] * 2)))
    silent = [r for r in silent if r not in lost]
    if silent:
        text.append(f"{_ranks(silent)} {_NOTHING_TO_MATCH}")
    text += [f"{w.removesuffix(' recorded no collective')} {_NOTHING_TO_MATCH}" for w in ref]
    if rest:
        text.append(f"record the same steps on every rank (same profiler schedule) so the collectives of "
                    f"{_ranks(rest)} can be matched")
    return Finding("ranks_not_aligned", f"{len(rows)} rank(s) could not be aligned from collectives or transfers",
                   "low", "", {"ranks": [r for r, _, _ in rows], "message": _not_aligned_message(rows),
                               "methods": {x or "recorded clock": rs for x, rs in by.items()}},
                   suggestion="; ".join(text) + ".")


def _not_aligned_message(rows: list[tuple[int, str, str]]) -> str:
    """The not-aligned ranks' messages (``rows``: rank, message, method) in one text: why
    they were not aligned and how they were placed, each with the ranks it holds for
    ("ranks 1-2 recorded no collective: placed by their wall-clock anchors (bound
    unknown)"; before, the first rank's message stood for all: "rank 1 recorded no
    collective: ..." for ranks 1 and 2)."""
    why: dict[tuple[str, bool], list[int]] = {}
    how: dict[str, list[int]] = {}
    for r, m, _ in rows:
        w, sep, h = m.rpartition(": ")  # (a reason's note may hold a colon, the placement holds none)
        w, h = (w, h) if sep else (m, "")
        own = w.startswith(f"rank {r} ")  # "rank 1 recorded no collective": said once for every such rank
        why.setdefault((w.removeprefix(f"rank {r} ") if own else w, own), []).append(r)
        if h:
            how.setdefault(h, []).append(r)
    said = [f"{_ranks(rs)}{' ' if own else ': '}{w}" for (w, own), rs in why.items()]
    if len(said) == 1 and len(how) == 1 and next(iter(how.values())) == next(iter(why.values())):
        return f"{said[0]}: {next(iter(how))}"  # one reason, one placement, for the same ranks
    return "; ".join(said + [f"{_ranks(rs)}: {h}" for h, rs in how.items()])


def _straggler_findings(per_rank: Table, per_coll: Table, align: Table, windows: dict[int, int] | None = None,
                        steps_of: Callable[[int], tuple[dict[tuple[str, int], int], list[int]]] | None = None,
                        journals: set[int] | None = None) -> list[Finding]:
    """Ranks not aligned, and the straggler: the rank that came last at a clearly larger
    share of the collectives than chance and cost the others some of their time
    (:data:`COUNT_P`, :data:`COUNT_WAIT_PCT`), or whose lateness cost the others a large
    share of their time (:data:`WAIT_SHARE_PCT`, :data:`WAIT_RATIO`) however few
    collectives it came last at. ``windows``: each rank's analysed span; ``steps_of(rank)``:
    the step of each of its collectives (:func:`_steps_of`) and its steps in the window."""
    out = []
    bad = align.take(~align["aligned"].astype(bool)) if len(align) else align
    if len(bad):
        out.append(_not_aligned_finding(bad, journals or set()))
    n = len(per_rank)
    if n < 2 or not len(per_coll):
        return out
    significant = np.asarray(per_coll["spread_ns"] > 2 * per_coll["bound_ns"], bool)
    total = int(significant.sum())
    if not total:
        return out
    # the rank that came last most often, then caused the most waiting (the first such row)
    at = int(np.lexsort((-np.asarray(per_rank["caused_wait_ns"], np.float64),
                         -np.asarray(per_rank["last_count"], np.float64)))[0])
    last = int(per_rank["last_count"][at])
    expected = 1 / n
    chance = min(1.0, n * chance_p(last, total, n))
    caused_pct = _others_share(per_rank, at, windows or {})
    by_count = (last >= 2 and last / total >= expected + 0.5 * (1 - expected) and chance <= COUNT_P
                and (caused_pct is None or caused_pct >= COUNT_WAIT_PCT))
    cost = _wait_cost(per_rank, per_coll, significant, windows or {})
    if not by_count:
        if cost is None or not cost["costly"]:
            return out
        at = cost["at"]
    top = {c: per_rank[c][at] for c in per_rank.columns}
    r = int(top["rank"])
    if cost is not None and cost["rank"] != r:
        cost = None  # the share is another rank's
    mine = per_coll.take((_charged(per_coll) == r) & significant)
    steps, window = steps_of(r) if steps_of is not None else ({}, [])
    # how likely its count of lasts is by chance (for any rank), and its waiting's share
    odds: dict[str, float] = {"chance_p": float(f"{min(1.0, n * chance_p(int(top['last_count']), total, n)):.3g}")}
    if (pct := _others_share(per_rank, at, windows or {})) is not None:
        odds["wait_share_pct"] = round(pct, 1)
    out.append(_straggler(r, top, mine, total, len(per_coll), by_count, cost, steps, window, odds))
    return out


def _charged(per_coll: Table) -> np.ndarray:
    """Per collective, the rank its waiting is charged to (``stragglers._held_by``: the
    last rank, or the one it had waited for just before); the last rank in a table
    without the column."""
    return np.asarray(per_coll["held_by" if "held_by" in per_coll else "last_rank"], np.int64)


def _others_share(per_rank: Table, at: int, windows: dict[int, int]) -> float | None:
    """The waiting the rank of row ``at`` caused, as a share (%) of the other ranks'
    analysed time (None: their windows are not known)."""
    r = int(per_rank["rank"][at])
    others = sum(int(windows.get(int(o), 0)) for o in np.asarray(per_rank["rank"], np.int64).tolist() if o != r)
    return 100.0 * float(per_rank["caused_wait_ns"][at]) / others if others else None


def _wait_cost(per_rank: Table, per_coll: Table, significant: np.ndarray,
               windows: dict[int, int]) -> dict[str, Any] | None:
    """The rank that caused the most waiting: that waiting's share of the job's rank time
    and of the other ranks' time, the next rank's waiting caused, and whether that makes
    it a straggler by itself (:data:`WAIT_SHARE_PCT`, :data:`WAIT_RATIO`, and most of its
    waiting in collectives it came last at beyond the clocks' bounds)."""
    caused = np.asarray(per_rank["caused_wait_ns"], np.float64)
    ranks = np.asarray(per_rank["rank"], np.int64)
    at = int(np.argmax(caused))
    r = int(ranks[at])
    others = sum(int(windows.get(int(o), 0)) for o in ranks if o != r)
    job = others + int(windows.get(r, 0))
    if not others or caused[at] <= 0:
        return None
    nxt = int(np.argmax(np.where(ranks == r, -np.inf, caused)))
    last = _charged(per_coll) == r
    wait = np.asarray(per_coll["wait_ns"], np.float64)
    beyond = wait[last & significant].sum() >= 0.5 * wait[last].sum()
    job_share = 100.0 * caused[at] / job
    costly = bool(job_share >= WAIT_SHARE_PCT and caused[at] >= WAIT_RATIO * caused[nxt] and beyond
                  and per_rank["last_count"][at] >= 1)
    return {"at": at, "rank": r, "share_pct": 100.0 * caused[at] / others, "job_share_pct": job_share,
            "window_ns": others, "next_rank": int(ranks[nxt]), "next_ns": int(caused[nxt]), "costly": costly}


def _straggler(r: int, top: dict[str, Any], mine: Table, total: int, seen: int, by_count: bool,
               cost: dict[str, Any] | None, steps: dict[tuple[str, int], int], window: list[int],
               odds: dict[str, float]) -> Finding:
    """The straggler finding of rank ``r`` (its ``stragglers`` row ``top``; ``mine``: the
    collectives it came last at beyond the bounds, most waiting first; ``window``: the
    steps analysed, not named as where the waiting was when they are all of it; ``odds``:
    ``chance_p`` and ``wait_share_pct``, :func:`_straggler_findings`)."""
    wait = int(top["caused_wait_ns"])  # per rank that waited, over time: concurrent buckets once
    share = top["last_count"] / total
    step = np.array([steps.get((str(k), int(q)), -1) for k, q in zip(mine["key"].tolist(), mine["seq"].tolist())],
                    np.int64)
    held = _main_steps(step, np.asarray(mine["wait_ns"], np.float64))
    evidence = {"rank": r, "last_count": int(top["last_count"]), "collectives": total,
                "share_pct": round(100 * share, 1), "caused_wait_ns": wait, "late_ns": int(top["late_ns"]),
                "median_spread_ns": median(mine["spread_ns"]), "alignment_bound_ns": float(top["bound_ns"]), **odds}
    if cost is not None:
        evidence.update(wait_share_pct=round(cost["share_pct"], 1), job_share_pct=round(cost["job_share_pct"], 1),
                        others_window_ns=cost["window_ns"], next_rank=cost["next_rank"],
                        next_caused_wait_ns=cost["next_ns"])
    if held:
        evidence["steps"] = held
    where = f", mostly in step{'s' if len(held) > 1 else ''} {number_ranges(held)}" \
        if held and set(held) != set(window) else ""
    if by_count:
        of = f" ({odds['wait_share_pct']:.1f}% of their analysed time)" if "wait_share_pct" in odds else ""
        title = (f"rank {r} is the straggler: last to arrive at {int(top['last_count'])} of {total} collectives "
                 f"whose arrivals differ beyond the clocks' bounds (of {seen}); the others waited {fmt_ns(wait)} "
                 f"for it{of}{where}")
        severity = "high" if share >= 0.9 else "medium"
    else:
        assert cost is not None
        than = (f"{wait / cost['next_ns']:.1f}x what rank {cost['next_rank']} caused" if cost["next_ns"]
                else "no other rank held anyone up")
        title = (f"rank {r} is the straggler: the others waited {fmt_ns(wait)} for it ({cost['share_pct']:.0f}% "
                 f"of their analysed time, {cost['job_share_pct']:.0f}% of the job's; {than}){where}; last to "
                 f"arrive at {int(top['last_count'])} of {total} collectives whose arrivals differ beyond the "
                 f"clocks' bounds (of {seen})")
        severity = "high" if cost["job_share_pct"] >= 2 * WAIT_SHARE_PCT else "medium"
    events = [{"name": f"{k} #{q}", "last_rank": r, "spread_ns": int(sp), **({"step": int(s)} if s >= 0 else {})}
              for k, q, sp, s in zip(mine["key"].tolist()[:5], mine["seq"].tolist()[:5],
                                     mine["spread_ns"].tolist()[:5], step[:5].tolist())]
    return Finding("straggler", title, severity, "", evidence, events,
                   f"Look at what rank {r} does before its collectives{' in those steps' if where else ''} (data "
                   "loading, host work, a slower device, uneven work per rank): the other ranks idle in every "
                   "collective until it arrives.")


def _main_steps(step: np.ndarray, wait: np.ndarray) -> list[int]:
    """The fewest steps, most waiting first, that hold :data:`STEPS_SHARE` of ``wait``
    (per collective, by the step it began in; -1: not known), in order."""
    known = step >= 0
    if not known.any() or wait.sum() <= 0:
        return []
    numbers, where = np.unique(step[known], return_inverse=True)
    per = np.bincount(where, weights=wait[known])
    order = np.argsort(-per, kind="stable")
    take = int(np.searchsorted(np.cumsum(per[order]), STEPS_SHARE * wait.sum() - 1e-6)) + 1
    return sorted(int(x) for x in numbers[order[:take]])
