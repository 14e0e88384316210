"""Which rank holds the others back: arrivals at each collective on one clock.

For each collective seen on two or more ranks (matched by ``key`` and ``seq``, with each
rank's shift from alignment), a rank's *arrival* is when its collective began, on the
reference clock. The last to arrive is the one the others waited for: rank r waited
``last - arrival_r``, and was ``arrival_r - first`` late, unless it left the collective
before the last rank arrived (beyond the clocks' bounds: a broadcast's root that sent
and was done, a reduce's sender), when it waited for nobody. Summed per rank, ``late_ns``
says how late a rank tends to be, ``caused_wait_ns`` how much waiting it caused when it
came last (per rank that waited, the union over time of those waits, summed over those
ranks), and ``waited_ns`` how long it waited for others: the union over time of its
waits (``last - arrival_r`` from its arrival), so collectives in flight at once (DDP's
buckets) count their common time once and no rank waits longer than its window. Differences smaller than
the two ranks' alignment bounds cannot be told apart from clock error: ``last_count``
counts only the collectives where the last rank came later than the bound allows.
Ranks that arrived within the clocks' bound of the last one, at a collective whose
spread is beyond it, cannot be told apart: they share it (``late_ranks``), each counted
last at it and charged the waits of the ranks that came before (two ranks sleeping the
same 30 ms before an all-reduce: before, the one a hair later took the whole charge).
:func:`chance_p` says how likely a count of lasts is when no rank is late.
"""

from __future__ import annotations

import numpy as np

from ..analyze.common import frame
from ..analyze.table import Table
from ..derive.intervals import union_len
from ..trace.sorting import unique, unique_inverse
from ..trace.factorize import factorize
from .align import RankClock

RANK_COLUMNS = ["rank", "late_ns", "last_count", "caused_wait_ns", "waited_ns", "collectives", "bound_ns"]
EVENT_COLUMNS = ["key", "seq", "op", "ranks", "first_rank", "last_rank", "held_by", "late_ranks", "spread_ns",
                 "wait_ns", "bound_ns"]


def arrivals(tables: dict[int, Table], clocks: dict[int, RankClock]) -> Table:
    """One row per (collective, rank) of the aligned ranks: key, seq (the reference
    rank's numbering), op, rank, arrival_ns and end_ns on the reference clock, bound_ns
    (the rank's tolerance for ties: its clock's bound, or more, ``RankClock.tolerance_ns``)."""
    parts = []
    for r, t in tables.items():
        c = clocks.get(r)
        if c is None or not c.aligned or not len(t):
            continue
        seq = c.reference_seq(t)
        matched = seq >= 0  # not: a collective matched to none of the reference rank's
        t, seq = t.take(matched), seq[matched]
        parts.append(frame({
            "key": t["key"], "seq": seq, "op": t["op"], "rank": np.full(len(t), r, np.int64),
            "arrival_ns": c.fit.to_host(t["start_ns"]), "end_ns": c.fit.to_host(t["end_ns"]),
            "bound_ns": np.full(len(t), float(c.tolerance_ns))}))
    if not parts:
        return frame({c: np.zeros(0, object) for c in ["key", "seq", "op", "rank", "arrival_ns", "end_ns",
                                                       "bound_ns"]})
    return Table.concat(parts)


def stragglers(tables: dict[int, Table], clocks: dict[int, RankClock]) -> tuple[Table, Table]:
    """(per rank, per collective) tables; see the module doc. Per rank: ``rank``,
    ``late_ns``, ``last_count``, ``caused_wait_ns``, ``waited_ns``, ``collectives``,
    ``bound_ns``; per collective: ``key``, ``seq``, ``op``, ``ranks``, ``first_rank``,
    ``last_rank``, ``spread_ns`` (last - first arrival), ``wait_ns`` (summed over the
    ranks that waited), ``bound_ns`` (the largest alignment bound involved)."""
    a = arrivals(tables, clocks)
    ranks = np.asarray(sorted(tables), np.int64)
    group, n = _collectives(np.asarray(a["key"], object), np.asarray(a["seq"], np.int64))
    size = np.bincount(group, minlength=n)
    keep = size[group] >= 2  # seen on two ranks or more
    if not keep.any():
        per_rank = frame({c: np.zeros(len(ranks), np.float64) if c != "rank" else ranks for c in RANK_COLUMNS})
        return per_rank, frame({c: np.zeros(0, object) for c in EVENT_COLUMNS})
    a = a.take(keep)
    group = (np.cumsum(size >= 2) - 1)[group[keep]]  # the kept collectives numbered 0..n-1
    n = int((size >= 2).sum())
    arr, rank, bnd = a["arrival_ns"], np.asarray(a["rank"], np.int64), np.asarray(a["bound_ns"], np.float64)
    first = np.full(n, np.iinfo(np.int64).max, arr.dtype)
    last = np.full(n, np.iinfo(np.int64).min, arr.dtype)
    np.minimum.at(first, group, arr)
    np.maximum.at(last, group, arr)
    bound = np.full(n, -np.inf)
    np.maximum.at(bound, group, bnd)
    late, wait = arr - first[group], _waits(arr, np.asarray(a["end_ns"], arr.dtype), last[group], bound[group])
    rows = np.arange(len(a))
    # the first row (in arrival-table order) that arrived first / last in each collective
    first_row, last_row = np.full(n, len(a)), np.full(n, len(a))
    np.minimum.at(first_row, group[arr == first[group]], rows[arr == first[group]])
    np.minimum.at(last_row, group[arr == last[group]], rows[arr == last[group]])
    wait_ns = np.bincount(group, weights=wait, minlength=n).astype(wait.dtype)
    held = _held_by(group, rank, arr, np.asarray(a["end_ns"], arr.dtype), wait, last_row, last, bound)
    significant = (last - first) > 2 * bound
    charged, shared = _late_rows(group, rank, arr, wait, last, bound, held, significant, rank[last_row])
    by = np.argsort(last_row, kind="stable")  # collectives in the order their last arrival comes
    ev = frame({"key": np.asarray(a["key"], object)[last_row[by]], "seq": np.asarray(a["seq"], np.int64)[last_row[by]],
                "op": np.asarray(a["op"], object)[last_row[by]], "ranks": np.bincount(group, minlength=n)[by],
                "first_rank": rank[first_row[by]], "last_rank": rank[last_row[by]], "held_by": held[by],
                "late_ranks": _late_names(group, rank, charged, shared, held)[by],
                "spread_ns": (last - first)[by].astype(np.int64), "wait_ns": wait_ns[by], "bound_ns": bound[by]})
    rows_of: list[tuple] = []
    for r in ranks:
        mine = rank == r
        # the collectives charged to it: it shared them (late with others), or it holds them alone
        its = np.zeros(n, bool)
        its[group[charged & mine]] = True
        its |= ~shared & (held == r)
        # the waits it caused: per rank that waited for it, the union over time of those waits
        caused = its[group] & ~charged
        caused_ns = sum(union_len(arr[caused & (rank == o)], (arr + wait)[caused & (rank == o)])
                        for o in unique(rank[caused]).tolist())
        rows_of.append((int(r), int(late[mine].sum()), int((its & significant).sum()), int(caused_ns),
                        union_len(arr[mine], (arr + wait)[mine]), int(mine.sum()),
                        float(bound[group[mine]].max()) if mine.any() else float("nan")))
    rank_df = frame({c: [row[i] for row in rows_of] for i, c in enumerate(RANK_COLUMNS)})
    return rank_df, ev.sort_by("wait_ns", descending=True).select(EVENT_COLUMNS)


def _late_rows(group: np.ndarray, rank: np.ndarray, arr: np.ndarray, wait: np.ndarray, last: np.ndarray,
               bound: np.ndarray, held: np.ndarray, significant: np.ndarray,
               last_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per arrival, whether its rank is charged with its collective; per collective,
    whether it is shared). A collective whose spread is beyond the clocks' bound and
    whose waiting :func:`_held_by` left with its last rank is shared by every rank that
    arrived within the bound of the last (their order cannot be told from clock error),
    but one that waited in its collective before (beyond twice the bound): late here
    because it was held there (a gloo broadcast's receiver relaying through the late
    rank reaches the next all-reduce with it); any other is charged to its ``held``
    rank alone."""
    shared = significant & (held == last_rank)
    slack = 2 * np.nan_to_num(bound, nan=0.0)[group]
    order = np.lexsort((arr, rank))  # each rank's collectives in the order it reached them
    prev = np.full(len(arr), -1, np.int64)
    same = rank[order[1:]] == rank[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    held_before = (prev >= 0) & (wait[np.maximum(prev, 0)] > slack) & (rank != last_rank[group])
    within = (last[group] - arr <= np.nan_to_num(bound, nan=0.0)[group]) & ~held_before
    charged = np.where(shared[group], within, rank == held[group])
    return charged, shared


def _late_names(group: np.ndarray, rank: np.ndarray, charged: np.ndarray, shared: np.ndarray,
                held: np.ndarray) -> np.ndarray:
    """Per collective, the ranks charged with it (``"2,3"``; the ``held`` rank alone
    where it is not shared), a string (one per collective, not per arrival)."""
    out = held.astype(str).astype(object)
    rows = np.flatnonzero(charged & shared[group])
    if not len(rows):
        return out
    rows = rows[np.lexsort((rank[rows], group[rows]))]
    g = group[rows]
    cuts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    for c, part in zip(g[cuts].tolist(), np.split(rank[rows], cuts[1:])):  # per shared collective
        out[c] = ",".join(map(str, part.tolist()))
    return out


def _waits(arrival: np.ndarray, end: np.ndarray, last: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Each rank's wait in its collective for the last rank: from its arrival to the last
    arrival, or none where it left the collective before the last rank arrived (beyond
    twice the clocks' bound): a rooted collective's root that sent and was done (a
    broadcast's, a scatter's) or a sender of a reduce or gather did not wait for a late
    receiver; the rank its collective waited on was another (gloo's broadcast tree: a
    receiver waits for the late one it receives through)."""
    left = end + 2 * np.nan_to_num(bound, nan=0.0) < last
    return np.where(left, 0, last - arrival).astype(arrival.dtype)


def _held_by(group: np.ndarray, rank: np.ndarray, arr: np.ndarray, end: np.ndarray, wait: np.ndarray,
             last_row: np.ndarray, last: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Per collective, the rank its waiting is charged to: the rank that came last,
    unless that rank was late only because it had waited for another in its collective
    before (or had come last to it, held there by another: followed along the chain),
    one that some rank here was not held back by (it left that one before the
    late rank arrived: a rooted one's root that sent and was done; or it was not in it:
    a subgroup's), and then took no longer than the others to come here (within twice
    the clocks' bound): then the rank that collective is charged to. A gloo broadcast's
    receiver that relays through the late rank waits for it while the root is done, then
    reaches the next all-reduce with it, by a hair last or first; so does a receiver of
    a subgroup's broadcast whose root is late, while the ranks outside the subgroup wait
    at the all-reduce. (Where every rank here waited in the collective before, all-reduces
    of the same group, that wait delayed them alike.)"""
    n = len(last_row)
    order = np.lexsort((arr, rank))  # each rank's collectives in the order it reached them
    prev = np.full(len(arr), -1, np.int64)
    same = rank[order[1:]] == rank[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    has = prev >= 0
    gap = np.where(has, arr - end[np.maximum(prev, 0)], np.iinfo(np.int64).max)  # its own time since it left
    # per collective, the shortest such time of a rank that came before the last one
    others = np.full(n, np.iinfo(np.int64).max, np.int64)
    not_last = np.ones(len(arr), bool)
    not_last[last_row] = False
    np.minimum.at(others, group[not_last], gap[not_last])
    p = prev[last_row]
    slack = 2 * np.nan_to_num(bound, nan=0.0)
    first_out = np.full(n, np.iinfo(np.int64).max, np.int64)  # per collective, the first rank to leave it
    np.minimum.at(first_out, group, end.astype(np.int64))
    before = group[np.maximum(p, 0)]
    # late there too: it waited in its collective before, or came last to it (a lateness
    # that collective's own charge says whose it was: followed along the chain)
    held_there = (wait[np.maximum(p, 0)] > slack) | (last_row[before] == p)
    inherit = ((p >= 0) & (gap[last_row] >= 0) & (others < np.iinfo(np.int64).max)
               & held_there & (gap[last_row] <= others + slack)
               & ((first_out[before] + slack[before] < last[before]) | _outside(group, rank, before))
               & _earlier(last, before))
    return rank[last_row][chain_ends(np.where(inherit, before, np.arange(n)))]


def _earlier(last: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per collective c, whether the last arrival at collective ``before[c]`` came before
    c's: the waiting at c may be passed on to it only then (a cause before its effect).
    Within the clocks' bound two collectives could otherwise each pass theirs to the
    other, a cycle with no first rank; so every chain of them ends."""
    return last[before] < last


def chain_ends(up: np.ndarray) -> np.ndarray:
    """The end of each one's chain of ``up`` (``up[i]``: the next after i, i itself at an
    end; every chain ends: no cycle), by pointer jumping: each pass doubles how far every
    pointer reaches, so a chain of the longest possible length, ``len(up) - 1``, is followed
    to its end in ``bit_length(len(up))`` passes, whatever its length."""
    up = np.asarray(up, np.int64)
    for _ in range(max(len(up), 1).bit_length()):
        nxt = up[up]
        if (nxt == up).all():
            break
        up = nxt
    if len(up) and not (up[up] == up).all():
        raise ValueError("chain_ends: the pointers form a cycle")
    return up


def _outside(group: np.ndarray, rank: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per collective, whether one of its ranks took no part in collective ``before[c]``
    (the one its last rank reached before it): a subgroup's, which that rank did not wait in."""
    ranks, code = unique_inverse(rank)
    pair = group * len(ranks) + code  # (collective, rank) as one number
    known = np.sort(pair)
    want = before[group] * len(ranks) + code  # the same rank in the collective before
    at = np.minimum(np.searchsorted(known, want), len(known) - 1)
    out = np.zeros(len(before), bool)
    out[group[known[at] != want]] = True
    return out


def _collectives(key: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, int]:
    """The collective (``key``, ``seq``) of each arrival as a number, and how many there are."""
    if not len(key):
        return np.zeros(0, np.int64), 0
    kc = factorize(key)[0]
    order = np.lexsort((seq, kc))
    k, s = kc[order], seq[order]
    new = np.r_[True, (k[1:] != k[:-1]) | (s[1:] != s[:-1])]
    group = np.empty(len(key), np.int64)
    group[order] = np.cumsum(new) - 1
    return group, int(new.sum())


def chance_p(count: int, total: int, ranks: float) -> float:
    """The chance that a given rank comes last at ``count`` or more of ``total``
    collectives when every one of ``ranks`` ranks is as likely to come last at each: the
    one-sided binomial tail P[X >= count], X ~ B(total, 1/ranks) (exact, from the
    log-probabilities summed over ``total`` terms at most). ``ranks`` may be a fraction:
    the number of groups of ranks late together, each as likely."""
    if count <= 0 or ranks < 2:
        return 1.0
    if count > total:
        return 0.0
    i = np.arange(1, total + 1, dtype=np.float64)
    log_choose = np.r_[0.0, np.cumsum(np.log(total - i + 1) - np.log(i))]  # log C(total, k), k = 0..total
    k = np.arange(count, total + 1)
    p = 1.0 / ranks
    return float(min(1.0, np.exp(log_choose[k] + k * np.log(p) + (total - k) * np.log1p(-p)).sum()))
