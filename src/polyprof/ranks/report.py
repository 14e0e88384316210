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
from typing import Any

import numpy as np

from ..analyze.finding import main_number
from ..analyze.findings import SEVERITY_ORDER, Finding, by_severity
from ..analyze.frames import column, frame
from ..analyze.registry import per_event_tables
from ..analyze.units import number_ranges
from ..analyze.table import Table
from .align import RankClock, align_ranks, alignment_table
from .uneven_steps import uneven_steps
from ..analyze.collectives import collective_stats
from ..formats.journal_layout import SUFFIX as JOURNAL_SUFFIX
from .result import OVERVIEW_COLUMNS, RankResult
from .stack import with_rank
from .missing import missing_finding, missing_ranks
from .straggler_findings import COUNT_P, COUNT_WAIT_PCT, straggler_finding  # noqa: F401 (the rules' constants, read here)
from .stragglers import stragglers
from .transfers import job_transfers

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
    missing, world = missing_ranks({r: results[r].stated_job for r in ranks})
    job, job_findings = job_tables({r: results[r].collectives for r in ranks},
                                   {r: a for r in ranks if (a := results[r].anchor)},
                                   {r: results[r].session_clock for r in ranks},
                                   {r: int(results[r].overview_row[1]) for r in ranks},
                                   {r: _recorded(results[r].overview) for r in ranks},
                                   {r: step_bounds(results[r].tables.get("step_stats")) for r in ranks},
                                   {r for r in ranks if _from_journal(results[r], info.get(r))}, missing)
    if missing or world:
        job_findings.append(missing_finding(ranks, missing, world, job["stragglers"]))
    tables: dict[str, Any] = {"rank_overview": _overview_table(results, info), **job}
    job_findings += uneven_steps(tables["rank_overview"], job_findings)
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
        **({"missing_ranks": missing} if missing else {}),
        "per_rank": {r: results[r].overview for r in ranks},
    }
    if per_event_left:
        overview["per_event_tables_left_with_ranks"] = list(per_event_tables())
    return JobReport(ranks, tables, findings, overview, results)


def job_tables(coll: dict[int, Any], anchors: dict[int, dict[str, Any]],
               session: dict[int, bool], steps: dict[int, int] | None = None,
               windows: dict[int, int] | None = None,
               bounds: dict[int, StepBounds | None] | None = None,
               journals: set[int] | None = None,
               missing: list[int] | None = None) -> tuple[dict[str, Any], list[Finding]]:
    """What needs every rank at once, from each rank's small collective table: the clock
    alignment (from all collectives, else transfers), stragglers and collective
    statistics (from the collectives ``in_window``: never point-to-point transfers, whose
    two ends are no group's arrival), the transfers (``steps``: each rank's steps in the
    window, for the per-step figures), and the straggler findings (``windows``: each
    rank's analysed span, what the waiting a rank caused is a share of; ``bounds``: each
    rank's steps, :func:`step_bounds`, to say which steps a straggler's collectives were in;
    ``journals``: the ranks read from a crash journal, whose collectives the kill lost;
    ``missing``: ranks the traces name that were not given, ``ranks/missing.py``)."""
    clocks = align_ranks(coll, anchors, session)
    inside = {r: t[column(t, "in_window").astype(bool) & ~column(t, "p2p").astype(bool)] for r, t in coll.items()}
    per_rank, per_coll = stragglers(inside, clocks)
    tables = {"rank_alignment": alignment_table(clocks), "stragglers": per_rank,
              "straggler_collectives": per_coll, "collective_stats": collective_stats(inside),
              "transfers": job_transfers(coll, steps or {})}

    def steps_of(r: int) -> tuple[dict[tuple[str, int], int], list[int]]:
        b = (bounds or {}).get(r)
        return _steps_of(inside.get(r), clocks.get(r), b), [] if b is None else b[0].tolist()

    align = tables["rank_alignment"]
    bad = align.take(~align["aligned"].astype(bool)) if len(align) else align
    out = [_not_aligned_finding(bad, journals or set(), _apart(coll, clocks, bad))] if len(bad) else []
    hosts = {r: str(a["host"]) for r, a in anchors.items() if a.get("host")}
    return tables, out + straggler_finding(per_rank, per_coll, windows or {}, steps_of, hosts, missing)


def _recorded(overview: dict[str, Any]) -> int:
    """A rank's analysed time: its analysed span's recorded stretches (profiler cycles),
    else the span."""
    return int(overview.get("recorded_in_span_ns") or overview.get("analysed_span_ns") or 0)


def _windows(results: dict[int, RankResult]) -> str:
    """The analysed window of the ranks: one line when they agree, else once per window,
    with the ranks it holds for ("ranks 0-38: steps 1-5 of 0-5 (...); rank 39: ..."). A
    note's own numbers (the warm-up step's time against the median's, in brackets) differ
    from rank to rank and are left out where they would part ranks of the same window;
    before, every rank's window was said with its note (60 of a 40-rank summary's lines)."""
    labels = {r: str(res.overview.get("window", "")) for r, res in results.items()}
    if len(set(labels.values())) <= 1:
        return next(iter(labels.values()), "")
    short = {r: _without_numbers(w) for r, w in labels.items()}
    by: dict[str, list[int]] = {}
    for r in sorted(labels):  # (per rank: a job's few hundred at most, not per event)
        by.setdefault(short[r] if labels[r] != short[r] else labels[r], []).append(r)
    return "; ".join(f"{_ranks(rs)}: {w}" for w, rs in by.items())


def _without_numbers(label: str) -> str:
    """A window's label without the numbers its note gives in brackets
    ("(26.9 ms against 36.6 ms)", "(1.2 s, 40x the median step and ...)"): the window
    itself ("steps 1-7 of 0-7") and the note's words kept."""
    a = label.find(" (")
    if a < 0:
        return label
    # (a pattern string: re compiles and caches it on first use)
    note = re.sub(r" \([^()]*\d[^()]*\)", "", label[a + 2:])
    return label[:a + 2] + note


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


def _apart(coll: dict[int, Any], clocks: dict[int, RankClock], bad: Table) -> set[int]:
    """The ranks of ``bad`` (not aligned) whose collectives, as their clocks place them,
    all lie outside the time the reference rank's span: recordings that do not overlap
    (files of two runs given as one job), which no schedule would match."""
    ref = next((r for r, c in clocks.items() if c.fit.method == "reference"), None)

    def span(r: int) -> tuple[int, int] | None:
        t = coll.get(r)
        if t is None or not len(t) or r not in clocks:
            return None
        at = clocks[r].fit.to_host(np.concatenate([column(t, "start_ns"), column(t, "end_ns")]))
        return int(at.min()), int(at.max())

    mine = span(ref) if ref is not None else None
    if mine is None:
        return set()
    out = set()
    for r in np.asarray(bad["rank"], np.int64).tolist():
        theirs = span(r)
        if theirs is not None and (theirs[1] < mine[0] or theirs[0] > mine[1]):
            out.add(r)
    return out


def _not_aligned_finding(bad: Table, journals: set[int] | None = None, apart: set[int] | None = None) -> Finding:
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
    elsewhen = [r for r in rest if r in (apart or set())]
    if elsewhen:
        text.append(f"the collectives of {_ranks(elsewhen)} were recorded at other times than the reference "
                    "rank's (their recordings do not overlap: files of different runs given as one job)")
    rest = [r for r in rest if r not in elsewhen]
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


