"""A job whose ranks take unequal time a step and do not wait for each other: ranks that
share no collective (a Dask cluster's workers, processes of one program that only share
files) have no straggler to name (``straggler_findings.py`` reads the waits at
collectives), yet one rank's steps taking several times the others' is the job's
imbalance all the same (a worker 6.6x slower, its steps reading a slow file)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analyze.findings import Finding
from ..analyze.frames import column
from ..analyze.units import fmt_ns

#: the slowest rank's median step over the others' median, from which the steps are uneven
RATIO = 1.5
#: and by at least this much a step (shorter differences are noise of the host)
LEAST_NS = 1_000_000


def uneven_steps(overview: Any, found: list[Finding]) -> list[Finding]:
    """The ``uneven_steps`` finding from the job's ``rank_overview`` table (per rank its
    steps, median step time and collectives): where no rank recorded a collective (else
    the straggler finding tells who waits for whom) and none was found already, the rank
    whose median step is :data:`RATIO` times the other ranks' median or more, and
    :data:`LEAST_NS` longer."""
    if len(overview) < 2 or any(f.id == "straggler" for f in found):
        return []
    if int(np.nansum(np.asarray(column(overview, "collectives"), np.float64))):
        return []
    ranks = np.asarray(column(overview, "rank"), np.int64)
    med = np.asarray(column(overview, "step_median_ns"), np.float64)
    ok = ~np.isnan(med) & (np.asarray(column(overview, "steps"), np.int64) > 0)
    if ok.sum() < 2:
        return []
    at = int(np.flatnonzero(ok)[np.argmax(med[ok])])
    others = float(np.median(med[ok & (np.arange(len(med)) != at)]))
    if not (others > 0 and med[at] >= RATIO * others and med[at] - others >= LEAST_NS):
        return []
    r, ratio = int(ranks[at]), float(med[at] / others)
    title = (f"rank {r}'s steps take {ratio:.1f}x the other ranks' (median {fmt_ns(med[at])} against "
             f"{fmt_ns(others)}); no collective ties the ranks, so no rank waits for it")
    evidence = {"rank": r, "ratio": round(ratio, 2), "step_median_ns": int(med[at]), "others_median_ns": int(others),
                "ranks": int(ok.sum())}
    return [Finding("uneven_steps", title, "medium", "", evidence, [],
                    f"Look at what rank {r} does in its steps that the others do not (its sections and ops beside "
                    "theirs: polyprof summary of its file; uneven data, a slower input, another host): the job ends "
                    "when its slowest rank does.")]
