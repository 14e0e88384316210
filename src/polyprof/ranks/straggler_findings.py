"""The job's straggler finding, from the ``stragglers`` tables (``ranks/stragglers.py``):
the rank, or the ranks late together, that held the others back, by how often it came
last beyond chance or by the waiting it caused; the steps that waiting was in; and, where
the traces say the job had ranks not given (``ranks/missing.py``), that the waits may
be for one of those.

Ranks late together (each arriving within the clocks' bound of the last at the same
collectives: ``late_ranks``) are one finding naming them all ("ranks 2, 3 are late
together"; every rank on one host: a slow node), their cost weighed against the ranks
outside them; before, one of them was named, or none (each caused half the waiting, so
neither caused twice the other's).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..analyze.findings import Finding
from ..analyze.table import Table
from ..analyze.units import fmt_ns, number_ranges
from ..trace.sorting import median, unique_inverse
from .missing import not_given
from .stragglers import chance_p

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
#: steps that waited within this share of the least of those :data:`STEPS_SHARE` took are
#: named with them (equal delays: all of them)
STEPS_TIE = 0.25



def straggler_finding(per_rank: Table, per_coll: Table, windows: dict[int, int] | None = None,
                      steps_of: Callable[[int], tuple[dict[tuple[str, int], int], list[int]]] | None = None,
                      hosts: dict[int, str] | None = None, missing: list[int] | None = None) -> list[Finding]:
    """The straggler: the rank (or ranks late together, :func:`late_group`) that came last
    at a clearly larger share of the collectives than chance and cost the others some of
    their time (:data:`COUNT_P`, :data:`COUNT_WAIT_PCT`), or whose lateness cost the
    others a large share of their time (:data:`WAIT_SHARE_PCT`, :data:`WAIT_RATIO`, against
    the ranks outside its group) however few collectives it came last at. ``windows``:
    each rank's analysed span; ``steps_of(rank)``: the step of each of its collectives
    (``report._steps_of``) and its steps in the window; ``hosts``: each rank's host, to
    name a slow node; ``missing``: ranks the traces name that were not given."""
    n = len(per_rank)
    if n < 2 or not len(per_coll):
        return []
    significant = np.asarray(per_coll["spread_ns"] > 2 * per_coll["bound_ns"], bool)
    total = int(significant.sum())
    if not total:
        return []
    # the rank that came last most often, then caused the most waiting (the first such row)
    at = int(np.lexsort((-np.asarray(per_rank["caused_wait_ns"], np.float64),
                         -np.asarray(per_rank["last_count"], np.float64)))[0])
    last = int(per_rank["last_count"][at])
    # ranks late together are each last where they are: by chance, any of n/k such groups
    k = len(late_group(per_coll, int(per_rank["rank"][at]), significant))
    expected = k / n
    chance = min(1.0, n / k * chance_p(last, total, n / k))
    caused_pct = _others_share(per_rank, at, windows or {})
    by_count = (last >= 2 and last / total >= expected + 0.5 * (1 - expected) and chance <= COUNT_P
                and (caused_pct is None or caused_pct >= COUNT_WAIT_PCT))
    cost = _wait_cost(per_rank, per_coll, significant, windows or {})
    if not by_count:
        if cost is None or not cost["costly"]:
            return []
        at = cost["at"]
    top = {c: per_rank[c][at] for c in per_rank.columns}
    r = int(top["rank"])
    if cost is not None and cost["rank"] != r:
        cost = None  # the share is another rank's
    mine = per_coll.take(charged_to(per_coll, r) & significant)
    group = late_group(per_coll, r, significant)
    steps, window = steps_of(r) if steps_of is not None else ({}, [])
    # how likely its count of lasts is by chance (for any rank), and its waiting's share
    k = len(group)
    odds: dict[str, float] = {"chance_p": float(f"{min(1.0, n / k * chance_p(int(top['last_count']), total, n / k)):.3g}")}
    if (pct := _others_share(per_rank, at, windows or {}, group)) is not None:
        odds["wait_share_pct"] = round(pct, 1)
    f = _straggler(r, top, mine, total, len(per_coll), by_count, cost, steps, window, odds)
    return [_as_group(f, group, hosts or {}, missing or [])]


def charged_to(per_coll: Table, r: int) -> np.ndarray:
    """Per collective, whether its waiting is charged to rank ``r``: one of the ranks late
    together at it (``late_ranks``), else the rank it is held by (``stragglers._held_by``:
    the last rank, or the one it had waited for just before); the last rank in a table
    without either column."""
    if "late_ranks" in per_coll:
        me = str(int(r))
        return np.fromiter((me in str(s).split(",") for s in per_coll["late_ranks"].tolist()), bool, len(per_coll))
    return np.asarray(per_coll["held_by" if "held_by" in per_coll else "last_rank"], np.int64) == r


def late_group(per_coll: Table, r: int, significant: np.ndarray) -> list[int]:
    """Rank ``r`` and the ranks late together with it (within the clocks' bound of one
    another) at half or more of the collectives it is charged with beyond the bounds."""
    mine = charged_to(per_coll, r) & significant
    if "late_ranks" not in per_coll or not mine.any():
        return [int(r)]
    names = np.asarray(per_coll["late_ranks"].tolist(), object)[mine]
    every = np.array([int(x) for s in names.tolist() for x in str(s).split(",")], np.int64)  # per collective
    ranks, code = unique_inverse(every)
    count = np.bincount(code, minlength=len(ranks))
    return sorted({int(r), *ranks[count >= 0.5 * int(mine.sum())].tolist()})


def _others_share(per_rank: Table, at: int, windows: dict[int, int], group: list[int] | None = None) -> float | None:
    """The waiting the rank of row ``at`` caused, as a share (%) of the other ranks'
    (those outside ``group``) analysed time (None: their windows are not known)."""
    r = int(per_rank["rank"][at])
    inside = set(group or [r])
    others = sum(int(windows.get(int(o), 0)) for o in np.asarray(per_rank["rank"], np.int64).tolist()
                 if o not in inside)
    return 100.0 * float(per_rank["caused_wait_ns"][at]) / others if others else None


def _wait_cost(per_rank: Table, per_coll: Table, significant: np.ndarray,
               windows: dict[int, int]) -> dict[str, Any] | None:
    """The rank that caused the most waiting: that waiting's share of the job's rank time
    and of the other ranks' time (outside the ranks late together with it), the next
    rank's waiting caused (the most of a rank outside them), and whether that makes it a
    straggler by itself (:data:`WAIT_SHARE_PCT`, :data:`WAIT_RATIO`, and most of its
    waiting in collectives it came last at beyond the clocks' bounds)."""
    caused = np.asarray(per_rank["caused_wait_ns"], np.float64)
    ranks = np.asarray(per_rank["rank"], np.int64)
    at = int(np.argmax(caused))
    r = int(ranks[at])
    group = late_group(per_coll, r, significant)
    others = sum(int(windows.get(int(o), 0)) for o in ranks if o not in group)
    job = sum(int(windows.get(int(o), 0)) for o in ranks)
    if not others or caused[at] <= 0:
        return None
    nxt = int(np.argmax(np.where(np.isin(ranks, group), -np.inf, caused)))
    last = charged_to(per_coll, r)
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
    held = _main_steps(step, np.asarray(mine["wait_ns"], np.float64), 2 * float(top["bound_ns"]))
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


def _main_steps(step: np.ndarray, wait: np.ndarray, tie_ns: float = 0.0) -> list[int]:
    """The fewest steps, most waiting first, that hold :data:`STEPS_SHARE` of ``wait``
    (per collective, by the step it began in; -1: not known), in order, and with them
    every step that waited as much as the least of those, within :data:`STEPS_TIE` of it
    or ``tie_ns`` (the clocks' bound: a difference that cannot be told from clock error).
    Before, of six steps with equal delays the one that came out a hair lower was left
    out ("steps 3-7" of 2-7)."""
    known = step >= 0
    if not known.any() or wait.sum() <= 0:
        return []
    numbers, where = unique_inverse(step[known])
    per = np.bincount(where, weights=wait[known])
    order = np.argsort(-per, kind="stable")
    take = int(np.searchsorted(np.cumsum(per[order]), STEPS_SHARE * wait.sum() - 1e-6)) + 1
    least = float(per[order[min(take, len(order)) - 1]])
    tied = per >= least - max(STEPS_TIE * least, float(np.nan_to_num(tie_ns)))
    return sorted({int(x) for x in numbers[order[:take]]} | {int(x) for x in numbers[tied & (per > 0)]})


def group_names(group: list[int]) -> str:
    """``ranks 2, 3``; ``ranks 8-15``; ranks at a stride, ``ranks 7, 15, ..., 255 (every
    8th: 32 ranks)``; else as ranges."""
    if len(group) <= 4:
        return f"ranks {', '.join(map(str, group))}"
    step = np.diff(np.asarray(group, np.int64))
    if step[0] > 1 and (step == step[0]).all():
        return f"ranks {group[0]}, {group[1]}, ..., {group[-1]} (every {int(step[0])}th: {len(group)} ranks)"
    return f"ranks {number_ranges(group)}"


def _as_group(f: Finding, group: list[int], hosts: dict[int, str], missing: list[int]) -> Finding:
    """The straggler finding ``f`` of one rank said of the ranks late together with it
    (``group``; every rank of one host: a slow node), and, where the traces name ranks
    not given (``missing``), that the waiting may be for one of those."""
    title, suggestion, ev = f.title, f.suggestion, dict(f.evidence)
    r = int(ev["rank"])
    if len(group) > 1:
        names = group_names(group)
        host = {hosts.get(g, "") for g in group}
        node = host.pop() if len(host) == 1 else ""
        if node and sorted(g for g, h in hosts.items() if h == node) == group and len(set(hosts.values())) > 1:
            names += f" (every rank on host {node}: a slow node)"
        title = title.replace(f"rank {r} is the straggler:", f"{names} are late together (each within the clocks' "
                              f"bound of the last), rank {r}'s numbers:", 1).replace(" for it", " for them")
        suggestion = (suggestion or "").replace(f"rank {r} does before its", f"{names.split(' (')[0]} do before "
                                                "their").replace("until it arrives", "until they arrive")
        ev["ranks"] = group
    if missing:
        gone, _ = not_given(len(group), missing, 0)  # (missing: named, whatever the count given)
        title += f"; the traces name {gone}, not given: the waits may be for {'it' if len(missing) == 1 else 'them'}"
        ev["missing_ranks"] = missing
    return Finding(f.id, title, f.severity, f.plane, ev, f.events, suggestion)
