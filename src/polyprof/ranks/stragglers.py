"""Which rank holds the others back: arrivals at each collective on one clock.

For each collective seen on two or more ranks (matched by ``key`` and ``seq``, with each
rank's shift from alignment), a rank's *arrival* is when its collective began, on the
reference clock. The last to arrive is the one the others waited for: rank r waited
``last - arrival_r``, and was ``arrival_r - first`` late. Summed per rank, ``late_ns``
says how late a rank tends to be, ``caused_wait_ns`` how much waiting it caused when it
came last (per rank that waited, the union over time of those waits, summed over those
ranks), and ``waited_ns`` how long it waited for others: the union over time of its
waits (``last - arrival_r`` from its arrival), so collectives in flight at once (DDP's
buckets) count their common time once and no rank waits longer than its window. Differences smaller than
the two ranks' alignment bounds cannot be told apart from clock error: ``last_count``
counts only the collectives where the last rank came later than the bound allows.
:func:`chance_p` says how likely a count of lasts is when no rank is late.
"""

from __future__ import annotations

import numpy as np

from ..analyze.common import frame
from ..analyze.table import Table
from ..derive.intervals import union_len
from ..trace.sorting import unique
from ..trace.factorize import factorize
from .align import RankClock

RANK_COLUMNS = ["rank", "late_ns", "last_count", "caused_wait_ns", "waited_ns", "collectives", "bound_ns"]
EVENT_COLUMNS = ["key", "seq", "op", "ranks", "first_rank", "last_rank", "spread_ns", "wait_ns", "bound_ns"]


def arrivals(tables: dict[int, Table], clocks: dict[int, RankClock]) -> Table:
    """One row per (collective, rank) of the aligned ranks: key, seq (the reference
    rank's numbering), op, rank, arrival_ns and end_ns on the reference clock, bound_ns."""
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
            "bound_ns": np.full(len(t), float(c.fit.bound_ns))}))
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
    late, wait = arr - first[group], last[group] - arr
    rows = np.arange(len(a))
    # the first row (in arrival-table order) that arrived first / last in each collective
    first_row, last_row = np.full(n, len(a)), np.full(n, len(a))
    np.minimum.at(first_row, group[arr == first[group]], rows[arr == first[group]])
    np.minimum.at(last_row, group[arr == last[group]], rows[arr == last[group]])
    wait_ns = np.bincount(group, weights=wait, minlength=n).astype(wait.dtype)
    by = np.argsort(last_row, kind="stable")  # collectives in the order their last arrival comes
    ev = frame({"key": np.asarray(a["key"], object)[last_row[by]], "seq": np.asarray(a["seq"], np.int64)[last_row[by]],
                "op": np.asarray(a["op"], object)[last_row[by]], "ranks": np.bincount(group, minlength=n)[by],
                "first_rank": rank[first_row[by]], "last_rank": rank[last_row[by]],
                "spread_ns": (last - first)[by].astype(np.int64), "wait_ns": wait_ns[by], "bound_ns": bound[by]})
    significant = ev["spread_ns"] > 2 * ev["bound_ns"]
    lr = ev["last_rank"]
    rows_of: list[tuple] = []
    last_of = rank[last_row]  # per collective (by group), the rank that came last
    for r in ranks:
        mine = rank == r
        sig_last = lr == r
        # the waits it caused: per rank that waited for it, the union over time of those waits
        caused = (last_of[group] == r) & (rank != r)
        caused_ns = sum(union_len(arr[caused & (rank == o)], last[group[caused & (rank == o)]])
                        for o in unique(rank[caused]).tolist())
        rows_of.append((int(r), int(late[mine].sum()), int((sig_last & significant).sum()), int(caused_ns),
                         union_len(arr[mine], last[group[mine]]), int(mine.sum()), float(bound[group[mine]].max()) if mine.any()
                         else float("nan")))
    rank_df = frame({c: [row[i] for row in rows_of] for i, c in enumerate(RANK_COLUMNS)})
    return rank_df, ev.sort_by("wait_ns", descending=True).select(EVENT_COLUMNS)


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


def chance_p(count: int, total: int, ranks: int) -> float:
    """The chance that a given rank comes last at ``count`` or more of ``total``
    collectives when every one of ``ranks`` ranks is as likely to come last at each: the
    one-sided binomial tail P[X >= count], X ~ B(total, 1/ranks) (exact, from the
    log-probabilities summed over ``total`` terms at most)."""
    if count <= 0 or ranks < 2:
        return 1.0
    if count > total:
        return 0.0
    i = np.arange(1, total + 1, dtype=np.float64)
    log_choose = np.r_[0.0, np.cumsum(np.log(total - i + 1) - np.log(i))]  # log C(total, k), k = 0..total
    k = np.arange(count, total + 1)
    p = 1.0 / ranks
    return float(min(1.0, np.exp(log_choose[k] + k * np.log(p) + (total - k) * np.log1p(-p)).sum()))
