"""Which rank holds the others back: arrivals at each collective on one clock.

For each collective seen on two or more ranks (matched by ``key`` and ``seq``, with each
rank's shift from alignment), a rank's *arrival* is when its collective began, on the
reference clock. The last to arrive is the one the others waited for: rank r waited
``last - arrival_r``, and was ``arrival_r - first`` late. Summed per rank, ``late_ns``
says how late a rank tends to be, ``caused_wait_ns`` how much waiting it caused when it
came last, and ``waited_ns`` how long it waited for others. Differences smaller than
the two ranks' alignment bounds cannot be told apart from clock error: ``last_count``
counts only the collectives where the last rank came later than the bound allows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyze.common import frame
from .align import RankClock

RANK_COLUMNS = ["rank", "late_ns", "last_count", "caused_wait_ns", "waited_ns", "collectives", "bound_ns"]
EVENT_COLUMNS = ["key", "seq", "op", "ranks", "first_rank", "last_rank", "spread_ns", "wait_ns", "bound_ns"]


def arrivals(tables: dict[int, pd.DataFrame], clocks: dict[int, RankClock]) -> pd.DataFrame:
    """One row per (collective, rank) of the aligned ranks: key, seq (the reference
    rank's numbering), op, rank, arrival_ns and end_ns on the reference clock, bound_ns."""
    parts = []
    for r, t in tables.items():
        c = clocks.get(r)
        if c is None or not c.aligned or not len(t):
            continue
        seq = c.reference_seq(t)
        matched = seq >= 0  # not: a collective matched to none of the reference rank's
        t, seq = t[matched], seq[matched]
        parts.append(pd.DataFrame({
            "key": t["key"].to_numpy(), "seq": seq, "op": t["op"].to_numpy(),
            "rank": r, "arrival_ns": c.fit.to_host(t["start_ns"].to_numpy()),
            "end_ns": c.fit.to_host(t["end_ns"].to_numpy()), "bound_ns": float(c.fit.bound_ns)}))
    if not parts:
        return pd.DataFrame(columns=["key", "seq", "op", "rank", "arrival_ns", "end_ns", "bound_ns"])
    return pd.concat(parts, ignore_index=True)


def stragglers(tables: dict[int, pd.DataFrame], clocks: dict[int, RankClock]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per rank, per collective) tables; see the module doc. Per rank: ``rank``,
    ``late_ns``, ``last_count``, ``caused_wait_ns``, ``waited_ns``, ``collectives``,
    ``bound_ns``; per collective: ``key``, ``seq``, ``op``, ``ranks``, ``first_rank``,
    ``last_rank``, ``spread_ns`` (last - first arrival), ``wait_ns`` (summed over the
    ranks that waited), ``bound_ns`` (the largest alignment bound involved)."""
    a = arrivals(tables, clocks)
    ranks = sorted(tables)
    if len(a):
        a = a[a.groupby(["key", "seq"])["rank"].transform("size") >= 2].reset_index(drop=True)
    if not len(a):
        per_rank = frame({c: np.zeros(len(ranks), np.float64) if c != "rank" else np.asarray(ranks, np.int64)
                          for c in RANK_COLUMNS})
        return per_rank, pd.DataFrame({c: [] for c in EVENT_COLUMNS})
    g = a.groupby(["key", "seq"], sort=False)
    first = g["arrival_ns"].transform("min").to_numpy()
    last = g["arrival_ns"].transform("max").to_numpy()
    arr = a["arrival_ns"].to_numpy()
    bound = g["bound_ns"].transform("max").to_numpy()
    a = a.assign(late=arr - first, wait=last - arr)
    is_last = arr == last
    # the last rank of each collective (the first of them on ties), and whether it is
    # later than the clocks' error allows
    last_idx = a.assign(last=is_last)[is_last].groupby(["key", "seq"], sort=False).head(1).index.to_numpy()
    ev = a.loc[last_idx, ["key", "seq", "op", "rank"]].rename(columns={"rank": "last_rank"})
    first_idx = a[arr == first].groupby(["key", "seq"], sort=False).head(1).index.to_numpy()
    ev = ev.merge(a.loc[first_idx, ["key", "seq", "rank"]].rename(columns={"rank": "first_rank"}), on=["key", "seq"])
    agg = g.agg(ranks=("rank", "size"), spread_ns=("arrival_ns", lambda x: int(x.max() - x.min())),
                bound_ns=("bound_ns", "max")).reset_index()
    agg["wait_ns"] = a.groupby(["key", "seq"], sort=False)["wait"].sum().reindex(
        pd.MultiIndex.from_frame(agg[["key", "seq"]])).to_numpy()
    ev = ev.merge(agg, on=["key", "seq"])
    significant = ev["spread_ns"].to_numpy() > 2 * ev["bound_ns"].to_numpy()
    per_rank = []
    for r in ranks:
        mine = a["rank"].to_numpy() == r
        sig_last = ev["last_rank"].to_numpy() == r
        per_rank.append((r, int(a["late"].to_numpy()[mine].sum()), int((sig_last & significant).sum()),
                         int(ev["wait_ns"].to_numpy()[sig_last].sum()), int(a["wait"].to_numpy()[mine].sum()),
                         int(mine.sum()), float(bound[mine].max()) if mine.any() else float("nan")))
    rank_df = frame({c: [row[i] for row in per_rank] for i, c in enumerate(RANK_COLUMNS)})
    ev = ev.sort_values("wait_ns", ascending=False, kind="stable").reset_index(drop=True)
    return rank_df, ev[EVENT_COLUMNS]
