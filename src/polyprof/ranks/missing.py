"""Ranks of the job that were not given: what the traces say of their job (each rank's
``distributedInfo``: its ``world_size``, else the ranks of the process groups it lists,
``ranks/result.py: stated_job``) against the ranks found.

A job read without one rank's file is still a job of the others: aligned, its
stragglers and collectives. But its waiting is then for a rank no table shows: a
4-rank job without the file of its late rank 2 read as 3 ranks spending 94-97% of their
time in communication, each waiting 7-10 ms for the others, with no word of rank 2
(before). Now a warning and a finding name the ranks not given, and that the waits may
be for them; the straggler finding says so too (``ranks/straggler_findings.py``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..analyze.findings import Finding
from ..analyze.units import fmt_ns, number_ranges

log = logging.getLogger(__name__)


def missing_ranks(stated: dict[int, dict[str, Any] | None]) -> tuple[list[int], int]:
    """(the ranks the traces name that are not among those found, the job's size where
    the ranks found are fewer but are not numbered as its global ranks, else 0).
    ``stated``: per rank found, what its trace says of the job (None: nothing). A job of
    one rank (a rank read alone) names none."""
    found = set(stated)
    world = max((int(s.get("world_size") or 0) for s in stated.values() if s), default=0)
    named = set(range(world)) | {int(r) for s in stated.values() if s for r in s.get("group_ranks") or []}
    if len(found) < 2 or not named:
        return [], 0
    if found <= named:
        return sorted(named - found), 0
    return [], len(named) if len(found) < len(named) else 0


def not_given(found: int, missing: list[int], world: int) -> tuple[str, int]:
    """(the ranks not given, in words: "rank 2", "ranks 2-3", else how many, "1 rank(s)";
    the job's size) for the ``found`` ranks given and :func:`missing_ranks`' answer: what
    the finding, the straggler finding and ``critical-path``'s warning say alike."""
    gone = f"rank{'s' if len(missing) > 1 else ''} {number_ranges(missing)}" if missing else \
        f"{world - found} rank(s)"
    return gone, world or found + len(missing)


def missing_finding(found: list[int], missing: list[int], world: int, stragglers: Any) -> Finding:
    """The finding (and a warning) that ranks the traces name were not given: which
    (``missing``; or only how many, ``world``, where the ranks found are not numbered as
    the job's), what the job's tables then cover, and that the waiting the ranks given
    did in collectives (``stragglers``' ``waited_ns``) may be for them."""
    waited = np.asarray(stragglers["waited_ns"], np.float64) if len(stragglers) else np.zeros(0)
    gone, size = not_given(len(found), missing, world)
    said = (f"the traces name a job of {size} ranks; {gone} {'was' if len(missing) == 1 else 'were'} not given "
            f"(found: ranks {number_ranges(found)})")
    log.warning("%s: the job's tables cover the ranks given only", said)
    up_to = f" (up to {fmt_ns(float(waited.max()))} per rank)" if len(waited) and waited.max() > 0 else ""
    return Finding("ranks_missing", said[0].upper() + said[1:], "medium", "",
                   {"ranks": found, "missing_ranks": missing, "world_size": size},
                   suggestion=(f"Give every rank's trace: the job's tables cover the ranks given only, and the "
                               f"time they waited in collectives{up_to} and spent in communication may be waiting "
                               f"for {gone}, whose arrival no table here shows (the "
                               "stragglers table names only ranks given)."))
