"""The diff's lines for collectives whose ranks moved apart: a rank that waited longer
for the last one to arrive, told apart from the collective's own change (slower on every
rank), in the rows whose time on a rank is the collective's own run (:func:`measures_wait`).
analyze/diff.py adds them to the verdict (analyze/diff_verdict.py).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .collective_roots import ROOTED
from .collectives import normalise_op
from .diff_nesting import collective_run
from .diff_verdict import label
from .frames import column


def measures_wait(table: str, name: str, kind: str) -> bool:
    """Whether a row's time on a rank is the collective's own run there, from the rank's
    arrival until the last rank's, so that the rank spending least in it arrived last and
    each other rank's time over that rank's is its wait (``ranks/stragglers.py``: rank r
    waited ``last - arrival_r``): a communication kernel on a device (NCCL's spins until
    its peers come; XLA's CPU collectives, run on host threads, are kernels too), a CPU
    backend's work range (``gloo:*``, ``mpi:*``, on its worker thread). Not the op that
    posts it (``c10d::allreduce_`` under DDP, ``nccl:all_reduce``, ``record_param_comms``:
    they enqueue the work and return, their time is the posting thread's), nor a wait op
    (``wait_tensor`` blocks the host on gloo, not on NCCL, where it orders a stream; from
    when the program asks, not from the rank's arrival), nor an XLA async half (the start
    launches, the done waits as a wait op does): the diff cannot tell what their time
    says of the ranks' arrivals (``analyze/collectives.py`` times no host launch either,
    and joins an XLA async pair into one collective, which rows by name cannot). Nor a
    rooted collective (broadcast, scatter, reduce, gather: ``collective_roots.ROOTED``):
    it binds its ranks one way only (a broadcast's root sends and is done, and may leave
    before a receiver arrives; a reduce's senders may leave before the root arrives), so
    the rank spending least in it need not have arrived last."""
    return collective_run(table, name, kind) and _op(name) not in ROOTED


def _op(name: str) -> str:
    """A row's collective, as ``collectives.normalise_op`` names it: of the op after its
    module (``jit_f/all-reduce.1``), and of the role ``nccl Broadcast kernel`` that the
    diff names NCCL's kernels by (``analyze/roles.py``)."""
    op = name.rsplit("/", 1)[-1]
    words = op.split(" ")
    if len(words) == 3 and words[0].lower() in ("nccl", "rccl") and words[2] == "kernel":
        op = words[1]
    return normalise_op(op)


def ranks_apart(per_rank: dict[str, tuple[list[str], np.ndarray | None, np.ndarray | None]], strata: list[int],
                tables: dict[str, Any], st: dict[str, Any], floors: tuple[float, float],
                fmt_ns: Callable[[float], str], top: int = 3, unit: str = "step") -> list[str]:
    """Collectives whose ranks moved apart: in the run where B is slower (A where it is
    faster), the rank that spends least in the collective arrived last, and another
    rank's wait for it (its time in it over that rank's) grew that way by the floors
    (``_apart``); only rows whose time is the collective's own run (``measures_wait``).
    Said only where a test stands behind it: the row is called changed that way on the
    rank that waited, or the step time is and that rank's change is at least the
    relative floor of a step. ``per_rank``: per table, its names and (rows x ranks) each
    rank's mean per step in A and in B."""
    rel_floor = floors[0]
    called = st.get("change") if st.get("mean_ns_a") == st.get("mean_ns_a") else ""
    step_a = float(st.get("mean_ns_a") or 0.0)
    found: list[tuple[float, str]] = []
    for t, (names, ma, mb) in per_rank.items():
        if ma is None or mb is None:
            continue
        df = tables[t]
        kinds = column(df, "kind").tolist() if t == "kernels" else [""] * len(df)
        rows = dict(zip(column(df, "name").tolist(), zip(kinds, column(df, "change").tolist(),
                                                          column(df, "rank_decided").tolist())))
        for i, name in enumerate(names):
            kind, change, decided = rows[name]
            if not measures_wait(t, name, kind):
                continue
            for way in ("slower", "faster"):
                got = _apart(names[i], t, way, ma[i], mb[i], strata, floors, fmt_ns, unit)
                if got is None:
                    continue
                u, moved, waited, text = got
                if change == way and decided == strata[u] or called == way and moved >= rel_floor * step_a:
                    found.append((waited, text))
    return [text for _, text in sorted(found, key=lambda x: -x[0])[:top]]


def _apart(name: str, table: str, way: str, ma: np.ndarray, mb: np.ndarray, strata: list[int],
           floors: tuple[float, float], fmt_ns: Callable[[float], str],
           unit: str = "step") -> tuple[int, float, float, str] | None:
    """One collective whose ranks moved apart, B being ``way``: the rank that waited most
    (its index), its own change and the change of its wait, and the line; None where no
    rank's did. In the run with the wait (B where B is slower, else A) the rank that
    spends least in it is the last to arrive, and another rank's time over that rank's is
    its wait for it. A rank waited apart where its own time moved ``way`` by the floors
    and its wait by the floors and by half its own change at least: the rest of its
    change is the collective's own (a larger message, a slower link, on every rank)."""
    if len(strata) < 2 or np.isnan(ma).any() or np.isnan(mb).any():
        return None
    here, there = (mb, ma) if way == "slower" else (ma, mb)  # the run with the wait, the other
    up = here - there
    s = int(np.argmin(here))  # the last to arrive there
    gap = (here - here[s]) - (there - there[s])  # each rank's wait for s: how much longer than in the other run
    big = (np.abs(mb - ma) >= floors[1]) & (np.abs(mb - ma) >= floors[0] * ma)
    # its wait there is itself beyond the floors (of its time in it): a rank ahead of the
    # one that spends least by a difference within noise waited for nobody here (both may
    # wait for a rank not compared: one only in B)
    there_wait = here - here[s]
    waiting = (big & (up > 0) & (gap >= floors[1]) & (gap >= floors[0] * ma) & (gap >= 0.5 * up)
               & (there_wait >= floors[1]) & (there_wait >= floors[0] * here))
    if not waiting.any():
        return None
    u = int(np.argmax(np.where(waiting, gap, -np.inf)))
    n = int(waiting.sum())
    slower = way == "slower"
    grew = "grew" if slower else "fell"
    fell = "did not move" if not big[s] else f"{grew} less" if up[s] > 0 else "fell" if slower else "grew"

    def move(i: int) -> str:
        return f"{fmt_ns(ma[i])} -> {fmt_ns(mb[i])}"

    who = (f"rank {strata[u]}'s time in it {grew} ({move(u)} per {unit})" if n == 1 else
           f"{n} ranks' time in it {grew} (most rank {strata[u]}'s: {move(u)} per {unit})")
    run, other = ("B", "A") if slower else ("A", "B")
    wait = (f"rank {strata[u]}" if n == 1 else "they") + (" waited" if not slower else " waits" if n == 1 else " wait")
    size = (f"rank {strata[u]}'s time in it {fmt_ns(here[u] - here[s])} per {unit} over rank {strata[s]}'s in {run}, "
            f"{fmt_ns(there[u] - there[s])} in {other}")
    return u, float(up[u]), float(gap[u]), (
        f"Ranks apart in {label(table)} {name[:60]}, a collective: {who} while rank {strata[s]}'s {fell} "
        f"({move(s)}); the last rank to arrive waits least: {wait} for rank {strata[s]} in {run} ({size}).")
