"""Put every rank on the reference rank's clock, from the collectives themselves.

Hosts' clocks disagree by milliseconds, far more than the gaps that matter between
ranks. But every rank takes part in the same collectives, and a collective that binds
every rank of its group (all-reduce, all-gather, reduce-scatter, all-to-all, barrier)
cannot end on one rank before it began on another (nobody finishes an all-reduce before
the last rank arrives). So for the k-th collective of a communicator, seen on the
reference rank as ``[s0, e0]`` and on rank r as ``[sr, er]``, rank r's clock maps ``er``
to at or after ``s0`` and ``sr`` to at or before ``e0``: two one-sided constraints of the
clock service (``trace.clock.fit_bounds``). A rooted collective gives one of them, and
only between its root and another rank (``_sides``): a broadcast's root may be done
before a receiver begins, but no receiver ends before the root began; a reduce's root
ends after every sender began. Its root unknown (``analyze/collective_roots.py``), it
gives none. Their convex hull bounds offset and drift; within it the estimate is the
offset at which the collectives that bind every rank *end together* (the median of
``e0 - er``, which is how NCCL behaves), and the bound is a guarantee as long as the
matched collectives are really the same ones.

Matching: rows with the same ``key`` (process group and op) and ``seq`` (the recorded
sequence number where both ranks have one, which needs no guessing; else their order on
the rank). Ordered by position, if the two ranks' recordings did not start at the same
collective, ``seq`` is shifted by up to ``MAX_SHIFT`` and the shift whose constraints
agree, with the most matches and then the smallest bound, wins; where no shift (nor the
pairing around a gap) fits, each key is paired on its own, by size where sizes tell a
key's collectives apart, and the keys whose pairs disagree are left out. A rank with no
collective to match is aligned from its point-to-point transfers, matched by peer and
order (``ranks/transfers.py``), onto the reference rank or, through a chain of
transfers, onto a rank already aligned (a pipeline's stages; the bounds add). Ranks with
neither fall back to their recorded clocks (wall clock for Kineto; the wall anchors for
traces on a session's own clock: polyprof's monotonic clock, Nsight's time since the
session start...; as recorded, and said so, where a rank has no anchor) and are
reported as not aligned from events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..analyze.collective_roots import ROOT_RECEIVES, ROOT_SENDS, UNBOUND
from ..analyze.common import rows_frame
from ..analyze.table import Table
from ..analyze.units import fmt_ns, fmt_size
from ..trace import clock
from ..trace.clock import ClockFit
from .transfers import align_transfers
from ..trace.sorting import median, unique

MAX_SHIFT = 3
#: hosts' clocks differ in rate by a few ppm (NTP keeps them within tens); the hull may
#: use this much drift, and the bound covers it
MAX_DRIFT_PPM = 100.0
COLUMNS = ["rank", "offset_ns", "bound_ns", "method", "collectives", "drift_ppm", "aligned", "message"]
#: the method of a rank whose collectives matched the reference rank's, placed by the
#: clock of the host both name (tighter than the collectives' bound, and within it)
ONE_HOST = "one host's clock"
#: the methods of a rank whose collectives are matched to the reference rank's
MATCHED = ("reference", "collectives", ONE_HOST)
#: the straggler analysis's tolerance for ties (ranks arriving within it cannot be told
#: apart: ranks/stragglers.py) at a rank placed by its host's clock, and the collectives'
#: bound above which the host's clock places a rank. One clock's times agree to the µs
#: (the alignment's bound), but a µs tolerance makes µs wander of a collective's start read
#: as lateness (a relayed broadcast charged to the relaying rank); collective fits of 2-5
#: ms on real gloo jobs set it. A rank late at every collective bounds its collectives'
#: fit from one side only, by its lateness (43.7 ms for a rank 50 ms late), and no arrival
#: told it from clock error
ONE_HOST_BOUND_NS = 10_000_000.0


@dataclass
class RankClock:
    rank: int
    fit: ClockFit
    aligned: bool
    matched: int = 0
    shift: int = 0  # this rank's seq + shift = the reference rank's seq
    message: str = ""
    #: when matched around gaps: the reference rank's seq of each of this rank's
    #: collectives, by its (key, seq), the unmatched left out; else None (seq + shift)
    seq_map: dict[tuple[str, int], int] | None = None
    #: the straggler analysis's tolerance for ties at this rank where it is not the
    #: clock's bound (NaN): :data:`ONE_HOST_BOUND_NS` for a rank placed by its host's clock
    tie_ns: float = math.nan

    @property
    def tolerance_ns(self) -> float:
        """Arrivals at a collective closer than this cannot be told apart."""
        return self.fit.bound_ns if math.isnan(self.tie_ns) else max(self.tie_ns, self.fit.bound_ns)

    def reference_seq(self, table: Table) -> np.ndarray:
        """The reference rank's seq for each row of (a subset of) this rank's collective
        table, -1 for a row matched to none."""
        seq = np.asarray(table["seq"], np.int64)
        if self.seq_map is None:
            return seq + self.shift
        m = self.seq_map
        return np.fromiter((m.get(ks, -1) for ks in zip(table["key"].tolist(), seq.tolist())), np.int64, len(seq))


def _codes(ref: Table, other: Table) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per collective, (key, seq) packed, comparable across the two ranks."""
    keys = {k: i for i, k in enumerate(dict.fromkeys([*ref["key"].tolist(), *other["key"].tolist()]))}

    def pack(t: Table) -> np.ndarray:
        kc = np.fromiter((keys[k] for k in t["key"].tolist()), np.int64, len(t))
        return (kc << 32) + np.asarray(t["seq"], np.int64) + (1 << 31)

    return pack(ref), pack(other)


def _pairs(ref_codes: np.ndarray, other_codes: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Row positions (ref, other) of the collectives that match with ``shift``."""
    _, i, j = np.intersect1d(ref_codes, other_codes + shift, assume_unique=True, return_indices=True)
    return i.astype(np.int64), j.astype(np.int64)


def _roots(t: Table, rows: np.ndarray) -> np.ndarray:
    """The root rank of rows of a collective table (-1: unknown; a table made before the
    column was, e.g. a store's or a test's, has none)."""
    return np.asarray(t["root"], np.int64)[rows] if "root" in t else np.full(len(rows), -1, np.int64)


def _sides(ref: Table, other: Table, i: np.ndarray, j: np.ndarray, ranks: tuple[int, int]
           ) -> tuple[np.ndarray, np.ndarray]:
    """Which matched pairs bound ``other``'s clock from below (its end at or after the
    reference rank's start) and which from above (its start at or before the reference
    rank's end). A collective that binds every rank of its group (all-reduce, all-gather,
    reduce-scatter, all-to-all, barrier) gives both. A rooted one gives one, and only
    between the root and another rank: a broadcast's (scatter's) receiver cannot end
    before the root began, a reduce's (gather's) root cannot end before a sender began;
    the root may finish before another rank begins. Its root unknown, or neither rank
    the root, or a collective-permute (each rank hears from a peer the trace does not
    name): none."""
    op = np.asarray(ref["op"], object)[i]
    root = _roots(ref, i)
    root = np.where(root >= 0, root, _roots(other, j))
    sends, receives = np.isin(op, list(ROOT_SENDS)), np.isin(op, list(ROOT_RECEIVES))
    group = ~(sends | receives | np.isin(op, list(UNBOUND)))
    ref_root, other_root = (root >= 0) & (root == ranks[0]), (root >= 0) & (root == ranks[1])
    below = group | (sends & ref_root) | (receives & other_root)
    above = group | (sends & other_root) | (receives & ref_root)
    return below, above


def _fit(ref: Table, other: Table, i: np.ndarray, j: np.ndarray, ranks: tuple[int, int] = (-1, -1)) -> ClockFit:
    s0, e0 = ref["start_ns"][i], ref["end_ns"][i]
    sr, er = other["start_ns"][j], other["end_ns"][j]
    below, above = _sides(ref, other, i, j, ranks)
    both = below & above  # the collectives that end together on every rank: the offset preferred
    prefer = int(median((e0 - er)[both if both.any() else slice(None)]))
    return clock.fit_bounds(er[below], s0[below], sr[above], e0[above], max_drift_ppm=MAX_DRIFT_PPM,
                            method="collectives", prefer_offset_ns=prefer, warn=False)


Match = tuple[ClockFit | None, int, int, dict[tuple[str, int], int] | None]
#: one way to pair a unit's collectives (a key's, or a key's of one size): rows (ref,
#: other), the shift of seq it used (None: paired by order within one size)
Pairing = tuple[np.ndarray, np.ndarray, int | None]


def align_pair(ref: Table, other: Table, ranks: tuple[int, int] = (-1, -1)) -> Match:
    """(fit, matches, shift, seq map) of ``other`` onto ``ref``'s clock from collectives,
    or (None, 0, 0, None) when no pairing gives consistent constraints (the seq map is
    :attr:`RankClock.seq_map`, set when the pairs were found around gaps or per key).
    ``ranks``: the two tables' ranks, which a rooted collective's root is compared with
    (-1: unknown: rooted collectives then bound nothing). One shift for every key first;
    where none fits every pair, around a gap (:func:`_around_gaps`); else each key on its
    own (:func:`_per_key`), the keys whose pairs disagree left out, not every key with them."""
    best: Match = (None, 0, 0, None)
    r, o = _group_only(ref), _group_only(other)
    rc, oc = _codes(r, o)
    recorded = _all_recorded(r) and _all_recorded(o)
    for shift in _shifts(r, o):
        i, j = _pairs(rc, oc, shift)
        if not len(i):
            continue
        f = _fit(r, o, i, j, ranks)
        if not f.consistent:
            continue
        if best[0] is None or (len(i), -f.bound_ns) > (best[1], -best[0].bound_ns):
            best = (f, len(i), shift, None)
        if len(i) == len(rc) == len(oc):  # the same collectives on both: any other shift pairs fewer
            break
    if best[0] is None and not recorded:  # a collective missing mid-trace: no one shift fits every pair
        best = _around_gaps(r, o, rc, oc, ranks)
    if best[0] is None:
        best = _per_key(r, o, ranks, recorded)
    return best


def _per_key(ref: Table, other: Table, ranks: tuple[int, int], recorded: bool) -> Match:
    """Each key paired on its own (:func:`_unit_pairings`), the keys' pairs taken
    together where their constraints agree (:func:`_combine`): where one shift for every
    key sinks every pair (gloo: a world and a subgroup broadcast one key, on the ranks in
    both twice the reference rank's), the keys that do pair still align the rank, if at
    least half of the smaller rank's collectives pair up (as around gaps)."""
    best = _combine(ref, other, _unit_pairings(ref, other, recorded), ranks)
    if best[1] < max(2, min(len(ref), len(other)) // 2):  # most keys disagree: the numbering is not the same
        return None, 0, 0, None
    return best


def _unit_pairings(ref: Table, other: Table, recorded: bool) -> list[list[Pairing]]:
    """Per unit, its pairings, the preferred first. A unit is a key both ranks have as
    many of (paired by ``seq``; with recorded sequence numbers, those, else the order on
    the rank), or, for a key whose counts differ where sizes tell its collectives apart,
    the key's collectives of one size that both ranks have as many of (paired in order:
    ``bytes``; the 16 KiB world broadcasts with the reference rank's, the 4 KiB subgroup
    broadcasts with none). A key whose counts differ otherwise is left out: which of its
    collectives are missing, or of a group the other rank is not in, is not known."""
    rk, ok = np.asarray(ref["key"], object), np.asarray(other["key"], object)
    rs, os_ = np.asarray(ref["seq"], np.int64), np.asarray(other["seq"], np.int64)
    rb, ob = np.asarray(ref["bytes"], np.int64), np.asarray(other["bytes"], np.int64)
    units: list[list[Pairing]] = []
    for key in dict.fromkeys(rk.tolist()):
        ri, oj = np.flatnonzero(rk == key), np.flatnonzero(ok == key)
        if len(ri) == len(oj) or recorded:
            units.extend([p] for p in _shifted(ri, oj, rs, os_, [0]))
            continue
        for b in unique(rb[ri]).tolist():
            i, j = ri[rb[ri] == b], oj[ob[oj] == b]
            if len(i) == len(j) and len(i):  # (the key's counts differ: so do another size's)
                units.append([(i, j, None)])
    return units


def _shifted(ri: np.ndarray, oj: np.ndarray, rs: np.ndarray, os_: np.ndarray, shifts: list[int]) -> list[Pairing]:
    """The pairings of one key's rows (``ri`` of the reference rank, ``oj`` of the other)
    with each shift that pairs any: the other's seq + shift = the reference rank's."""
    out: list[Pairing] = []
    for shift in shifts:
        _, a, b = np.intersect1d(rs[ri], os_[oj] + shift, assume_unique=True, return_indices=True)
        if len(a):
            out.append((ri[a], oj[b], shift))
    return out


def _combine(ref: Table, other: Table, units: list[list[Pairing]], ranks: tuple[int, int]) -> Match:
    """The units' pairs taken together: units bounding the clock from both sides first,
    most pairs first; each unit's first pairing whose constraints agree with those taken
    so far is taken, a unit none of whose pairings agree is left out. The shift (and no
    seq map) where every unit of every key both ranks have was taken with one shift."""
    def rank_of(u: list[Pairing]) -> tuple[int, int]:
        below, above = _sides(ref, other, u[0][0], u[0][1], ranks)
        return -int(below.any() and above.any()), -len(u[0][0])

    i = j = np.zeros(0, np.int64)
    fit: ClockFit | None = None
    taken: list[Pairing] = []
    for unit in sorted(units, key=rank_of):
        for p in unit:
            ii, jj = np.r_[i, p[0]], np.r_[j, p[1]]
            f = _fit(ref, other, ii, jj, ranks)
            below, above = _sides(ref, other, ii, jj, ranks)
            if f.consistent or not (below.any() and above.any()):  # one-sided so far: nothing to judge by
                i, j, fit = ii, jj, f
                taken.append(p)
                break
    if fit is None or not fit.consistent:
        return None, 0, 0, None
    shifts = {p[2] for p in taken}
    keys = set(np.asarray(ref["key"], object).tolist()) & set(np.asarray(other["key"], object).tolist())
    one = next(iter(shifts))
    if len(shifts) == 1 and one is not None and len(taken) == len(keys):
        return fit, len(i), one, None
    seq_map = dict(zip(zip(np.asarray(other["key"], object)[j].tolist(), np.asarray(other["seq"], np.int64)[j].tolist()),
                       np.asarray(ref["seq"], np.int64)[i].tolist()))
    return fit, len(i), 0, seq_map


def _group_only(t: Table) -> Table:
    """The collectives of a rank's table: point-to-point transfers bind two ranks, not a
    group, and are matched by peer (``ranks/transfers.py``)."""
    return t.take(~np.asarray(t["p2p"], bool)) if len(t) else t


#: collectives end together on every rank within a few µs (NCCL); a pair whose end
#: difference is this far from the densest one's is not the same collective
END_TOLERANCE_NS = 50_000


def _around_gaps(ref: Table, other: Table, rc: np.ndarray, oc: np.ndarray, ranks: tuple[int, int]) -> Match:
    """Pairs taken from every shift at once, kept where the two ends agree with the
    densest end difference (the clock offset): a collective missing from one rank's
    recording in the middle moves the shift of every later one, which no single shift
    fits. At least half of the smaller rank's collectives must pair up."""
    pairs = [_pairs(rc, oc, s) for s in range(-MAX_SHIFT, MAX_SHIFT + 1)]
    i = np.concatenate([p[0] for p in pairs])
    j = np.concatenate([p[1] for p in pairs])
    if len(i) < 2:
        return None, 0, 0, None
    diff = ref["end_ns"][i] - other["end_ns"][j]
    d = np.sort(diff)
    hi = np.searchsorted(d, d + 2 * END_TOLERANCE_NS, side="right")
    k = int(np.argmax(hi - np.arange(len(d))))
    centre = median(d[k:hi[k]])
    near = np.abs(diff - centre) <= END_TOLERANCE_NS
    i, j, err = i[near], j[near], np.abs(diff[near] - centre)
    by_err = np.argsort(err, kind="stable")  # each collective in one pair: the closest
    _, first_i = np.unique(i[by_err], return_index=True)
    keep = by_err[first_i]
    _, first_j = np.unique(j[keep], return_index=True)
    keep = keep[first_j]
    if len(keep) < max(2, min(len(ref), len(other)) // 2):
        return None, 0, 0, None
    i, j = i[keep], j[keep]
    f = _fit(ref, other, i, j, ranks)
    if not f.consistent:
        return None, 0, 0, None
    seq_map = dict(zip(zip(other["key"][j].tolist(), np.asarray(other["seq"], np.int64)[j].tolist()),
                       np.asarray(ref["seq"], np.int64)[i].tolist()))
    return f, len(i), 0, seq_map


def _n_group(t: Table) -> int:
    """Collectives that bind every rank of their group."""
    return int((~np.asarray(t["p2p"], bool)).sum()) if len(t) else 0


def _all_recorded(t: Table) -> bool:
    """Every collective numbered by the trace's own sequence numbers (no shift to guess)."""
    return "seq_from" in t and len(t) > 0 and bool((t["seq_from"] == "Seq").all())


#: the wall anchor of times that are the wall clock itself (Kineto's): time t is wall time t
WALL_IDENTITY = {"mono_ns": 0, "wall_ns": 0, "uncertainty_ns": 0}


def _fallback(rank: int, anchors: dict[int, dict[str, Any]], ref: int, session: dict[int, bool],
              tables: tuple[Table, Table], note: str = "", counts: tuple[int, int] | None = None,
              one_sided: str = "") -> RankClock:
    """The rank on its recorded clock. ``counts``: the collectives of the rank and of the
    reference rank (a rank without any has none to match: recording the same steps would
    not help). A rank on a session clock (``session``: polyprof's monotonic clock, Nsight's
    time since the session start...) is placed by the wall anchors when both ranks have
    one (a rank whose times are the wall clock, Kineto's, has the identity anchor);
    otherwise its times stay as recorded, and the message says whether that is the wall
    clock (both ranks' times are) or each rank's own clock (method ``own clock``). An
    anchor's ``host`` (``ranks/result.anchor_of``) tells whether the two ranks share one
    host, and so one wall clock; its ``clock_domain``, one monotonic clock (:func:`_one_clock`,
    ``tables``: the reference rank's collectives and this rank's)."""
    mine, theirs = counts or (1, 1)
    why = (f"rank {rank} recorded no collective" if not mine else
           f"the reference rank {ref} recorded no collective" if not theirs else
           f"no collective bound its clock from both sides: {one_sided}" if one_sided else
           "no collective matched the reference rank's") + (f", and {note}" if note else "")
    on_session = {r: bool(session.get(r)) for r in (rank, ref)}
    a, b = (_anchor(r, anchors, session) for r in (rank, ref))
    if a and b and _one_domain(a, b, *on_session.values()):
        return _one_clock(rank, a, b, why, tables)
    ha, hb = (a or {}).get("host"), (b or {}).get("host")
    same = bool(ha) and ha == hb
    if any(on_session.values()) and a and b:
        fit = clock.from_anchors(a, b, method="wall anchors")
        fit = clock.constant(fit.offset_ns, math.nan, "wall anchors")
        clocks = (f"their wall-clock anchors, read on one host, {ha}" if same else
                  "the two hosts' wall clocks" if ha and hb else "the ranks' wall-clock anchors")
        return RankClock(rank, fit, False, 0, 0, f"{why}: placed by {clocks} (bound unknown)")
    if any(on_session.values()):  # a rank with its own clock and no anchor: nothing links the two
        bare = [str(r) for r, x in sorted(((rank, a), (ref, b)), key=lambda rx: rx[0]) if not x]
        who = f"rank {bare[0]} has" if len(bare) == 1 else f"ranks {' and '.join(bare)} have"
        msg = (f"{why}: times kept as recorded, on each rank's own clock ({who} no wall-clock anchor to "
               f"place {'it' if len(bare) == 1 else 'them'} by), so how the ranks line up in time is unknown")
        return RankClock(rank, clock.constant(0, math.nan, "own clock"), False, 0, 0, msg)
    agree = f"both ranks read the wall clock of one host, {ha}" if same else \
        "hosts agree only as well as NTP keeps them"
    return RankClock(rank, clock.constant(0, math.nan, "recorded clock"), False, 0, 0,
                     f"{why}: times kept as recorded (wall clock; {agree})")


def _one_domain(a: dict[str, Any], b: dict[str, Any], *on_session: bool | None) -> bool:
    """Whether both ranks' times are one machine's monotonic clock (``clock_domain``)."""
    return all(on_session) and bool(a.get("clock_domain")) and a.get("clock_domain") == b.get("clock_domain")


def _one_clock(rank: int, a: dict[str, Any], b: dict[str, Any], why: str, tables: tuple[Table, Table]) -> RankClock:
    """A rank its collectives did not place, on one machine's clock with the reference rank
    (:func:`_one_domain`): placed by the anchors (their uncertainty its bound), its collectives
    paired by :func:`_most_pairs`, ties within :data:`ONE_HOST_BOUND_NS`. Before: not aligned."""
    shift, n = _most_pairs(_group_only(tables[0]), _group_only(tables[1]))
    host = f"host {a['host']}'s" if a.get("host") else "one machine's"
    msg = f"{why}: placed by {host} monotonic clock, which both ranks' times are ({a['clock_domain']})"
    fit = replace(clock.from_anchors(a, b, method=ONE_HOST), n=n)
    return RankClock(rank, fit, True, n, shift, msg, None, ONE_HOST_BOUND_NS)


def _anchor(rank: int, anchors: dict[int, dict[str, Any]], session: dict[int, bool]) -> dict[str, Any] | None:
    """The rank's wall anchor: its own; for a rank whose times are the wall clock (not a
    session's), the identity where it has none."""
    return anchors.get(rank) if session.get(rank) else {**WALL_IDENTITY, **anchors.get(rank, {})}


def _on_one_host(c: RankClock, ref: int, anchors: dict[int, dict[str, Any]], session: dict[int, bool]) -> RankClock:
    """``c`` (a rank aligned from its collectives) placed by the clock of the one host it
    and the reference rank name (its bound: the anchors' uncertainty; ties at its
    collectives within :data:`ONE_HOST_BOUND_NS`), where that clock's offset lies within
    the collectives' bound and that bound is wider than :data:`ONE_HOST_BOUND_NS`: the
    same machine's clock (one wall clock, one monotonic clock) needs no fit. One machine
    is also two ranks of one ``clock_domain`` whose host names differ (two containers, or
    Kubernetes pods, of one node). Otherwise ``c`` as it is."""
    a, b = _anchor(c.rank, anchors, session) or {}, _anchor(ref, anchors, session) or {}
    host = a.get("host") if a.get("host") and b.get("host") == a.get("host") else None
    if not a or not b or not host and not _one_domain(a, b, session.get(c.rank), session.get(ref)):
        return c
    fit = replace(clock.from_anchors(a, b, method=ONE_HOST), n=c.fit.n)
    tie = max(fit.bound_ns, ONE_HOST_BOUND_NS)
    if not tie < c.fit.bound_ns or abs(fit.offset_ns - c.fit.offset_ns) > c.fit.bound_ns + fit.bound_ns:
        return c
    where = f"host {host}" if host else f"one machine ({a['clock_domain']})"
    msg = f"both on {where}, whose clock the collectives agree with (their bound {fmt_ns(c.fit.bound_ns)})"
    return RankClock(c.rank, fit, True, c.matched, c.shift, "; ".join(x for x in (c.message, msg) if x), c.seq_map, tie)


def _no_peer(t: Table) -> str:
    """Why a rank's transfers cannot align it when none names a peer."""
    if not len(t):
        return ""
    p2p = np.asarray(t["p2p"], bool)
    if p2p.any() and (np.asarray(t["peer"], np.int64)[p2p] < 0).all():
        return (f"its {int(p2p.sum())} point-to-point transfer(s) name no peer to match (SendRecv kernels "
                "without Src/Dst Rank)")
    return ""


def align_ranks(tables: dict[int, Table], anchors: dict[int, dict[str, Any]] | None = None,
                session: dict[int, bool] | None = None, ref: int | None = None) -> dict[int, RankClock]:
    """A :class:`RankClock` per rank putting it on ``ref``'s clock (default: the lowest
    rank). ``tables`` are :func:`polyprof.ranks.collectives.collective_table` per rank;
    ``anchors`` the ranks' wall anchors and ``session`` whether a rank's times are its
    session's own clock (polyprof's monotonic clock, Nsight's time since the session
    start: ``ranks/result.anchor_of``) rather than the wall clock itself (Kineto), for
    the fallback. Collectives first; a rank they leave is aligned from its transfers."""
    anchors, session = anchors or {}, session or {}
    ranks = sorted(tables)
    if not ranks:
        return {}
    ref = ranks[0] if ref is None else ref
    out = {ref: RankClock(ref, clock.constant(0, 0.0, "reference"), True, _n_group(tables[ref]))}
    for r in ranks:
        if r == ref:
            continue
        fit, n, shift, seq_map = align_pair(tables[ref], tables[r], (ref, r))
        if fit is not None:
            r_, o_ = _group_only(tables[ref]), _group_only(tables[r])
            msg = f"collectives matched with a shift of {shift}" if shift else ""
            if _all_recorded(r_) and _all_recorded(o_):
                msg = "collectives matched by their sequence numbers (Seq)"
            note = _unmatched_note(r_, o_, n, (ref, r), seq_map)
            msg = "; ".join(x for x in (msg, note) if x)
            out[r] = _on_one_host(RankClock(r, fit, True, n, shift, msg, seq_map), ref, anchors, session)
    why = _by_transfers(tables, ref, out)
    for r in ranks:
        if r not in out:
            out[r] = _fallback(r, anchors, ref, session, (tables[ref], tables[r]), why.get(r) or _no_peer(tables[r]),
                               (_n_group(tables[r]), _n_group(tables[ref])), _one_sided(tables[ref], tables[r], (ref, r)))
        elif out[r].fit.method == "transfers":
            _pair_collectives(out[r], tables[ref], tables[r], (ref, r))
    return out


def _unmatched_note(ref: Table, other: Table, n: int, ranks: tuple[int, int],
                    seq_map: dict[tuple[str, int], int] | None = None) -> str:
    """What the pairing of ``n`` collectives left: those of a communicator (``key``:
    process group and op) both ranks have are missing from one of the recordings; those
    of one only one rank has are of a group the other is not in (a subgroup's: on a
    gloo job a ``new_group([1, 3])``'s broadcasts, with neither a group name nor its
    ranks in the trace), and nothing is missing; so are, where the keys were paired by
    size (``seq_map``), the unpaired ones of a key of a size only one rank has."""
    rk, ok = np.asarray(ref["key"], object), np.asarray(other["key"], object)
    rs, os_ = np.isin(rk, ok), np.isin(ok, rk)
    notes = []
    sized = _sized_apart(ref, other, seq_map) if seq_map is not None else []
    unmatched = int(rs.sum() + os_.sum()) - 2 * n - sum(c for c, _, _ in sized)
    if unmatched > 0:
        notes.append(f"{unmatched} collective(s) without a match on the other rank (missing from one of the "
                     "recordings)")
    for keys, mine, theirs in ((ok[~os_], ranks[1], ranks[0]), (rk[~rs], ranks[0], ranks[1])):
        if len(keys):
            names = ", ".join(sorted({str(k) for k in keys.tolist()}))
            notes.append(f"{len(keys)} collective(s) of rank {mine} ({names}) that rank {theirs} has none of: "
                         f"a process group rank {theirs} is not in, nothing missing")
    for count, names, other_side in sized:
        mine, theirs = (ranks[1], ranks[0]) if other_side else ranks
        notes.append(f"{count} collective(s) of rank {mine} ({names}) of a size rank {theirs} has none of in "
                     f"that key: a process group rank {theirs} is not in, nothing missing")
    return "; ".join(notes)


def _sized_apart(ref: Table, other: Table, seq_map: dict[tuple[str, int], int]) -> list[tuple[int, str, bool]]:
    """(count, "key of size", on ``other``) of each rank's unpaired collectives whose key
    both ranks have but whose (key, bytes) only that rank has."""
    out = []
    paired_ref = set(((k, s) for (k, _), s in seq_map.items()))
    for t, u, on_other in ((other, ref, True), (ref, other, False)):
        key, seq = np.asarray(t["key"], object), np.asarray(t["seq"], np.int64)
        size = np.asarray(t["bytes"], np.int64)
        theirs = set(zip(np.asarray(u["key"], object).tolist(), np.asarray(u["bytes"], np.int64).tolist()))
        their_keys = {k for k, _ in theirs}
        done = seq_map if on_other else paired_ref
        rows = [(k, b) for k, s, b in zip(key.tolist(), seq.tolist(), size.tolist())
                if (k, s) not in done and k in their_keys and (k, b) not in theirs]
        if rows:
            names = ", ".join(f"{k} of {fmt_size(b)}" for k, b in sorted(set(rows)))
            out.append((len(rows), names, on_other))
    return out


def _shifts(ref: Table, other: Table) -> list[int]:
    """The shifts of seq to try: none where both ranks' collectives carry recorded
    sequence numbers."""
    return [0] if _all_recorded(ref) and _all_recorded(other) else sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=abs)


def _one_sided(ref: Table, other: Table, ranks: tuple[int, int]) -> str:
    """Why collectives that pair up (at the first shift that pairs any) did not align
    the rank: rooted ones bound its clock from one side only, or not at all ("" where
    they do bound it from both sides: their constraints disagreed)."""
    r, o = _group_only(ref), _group_only(other)
    rc, oc = _codes(r, o)
    for shift in _shifts(r, o):
        i, j = _pairs(rc, oc, shift)
        if len(i):
            below, above = _sides(r, o, i, j, ranks)
            if below.any() and above.any():
                return ""
            return (f"its {len(i)} collective(s) that pair with the reference rank's are rooted (broadcast, "
                    "scatter, reduce, gather: the root may finish before another rank begins) and bound it from "
                    + ("one side only" if below.any() or above.any() else "neither side (their root unknown, or "
                       "neither rank the root)"))
    return ""


def _pair_collectives(c: RankClock, ref: Table, other: Table, ranks: tuple[int, int]) -> None:
    """For a rank aligned from its transfers: pair its collectives with the reference
    rank's (the shift with the most pairs whose one-sided constraints the fit keeps,
    within its bound), so stragglers compare its arrivals; ``c`` is updated."""
    r, o = _group_only(ref), _group_only(other)
    if not len(r) or not len(o):
        return
    tol = c.fit.bound_ns if math.isfinite(c.fit.bound_ns) else 0.0

    def kept(i: np.ndarray, j: np.ndarray) -> bool:
        below, above = _sides(r, o, i, j, ranks)
        ends, starts = c.fit.to_host(o["end_ns"][j][below]), c.fit.to_host(o["start_ns"][j][above])
        return bool((ends >= r["start_ns"][i][below] - tol).all() and (starts <= r["end_ns"][i][above] + tol).all())
    shift, n = _most_pairs(r, o, kept)
    if n:
        c.shift, c.seq_map = shift, None
        c.message += f"; its {n} collective(s) paired with the reference rank's (as the transfers' fit allows)"


def _most_pairs(r: Table, o: Table, kept: Callable[[np.ndarray, np.ndarray], bool] | None = None) -> tuple[int, int]:
    """(shift, pairs): the least shift of seq pairing the most of two ranks' collectives,
    of those whose pairs ``kept(i, j)`` accepts (all where None); (0, 0) where none pairs."""
    rc, oc = _codes(r, o)
    best = (0, 0)
    for shift in _shifts(r, o):
        i, j = _pairs(rc, oc, shift)
        if len(i) > best[1] and (kept is None or kept(i, j)):
            best = (shift, len(i))
    return best


def _by_transfers(tables: dict[int, Table], ref: int, out: dict[int, RankClock]) -> dict[int, str]:
    """Align (into ``out``) the ranks collectives left, from their transfers with the
    reference rank or with a rank already aligned (its fit then this one's: the bounds
    add), until no more can be; why not, for those left."""
    why: dict[int, str] = {}
    pending = [r for r in sorted(tables) if r not in out]
    progress = True
    while pending and progress:
        progress = False
        for r in list(pending):
            for x in sorted(out, key=lambda x: (x != ref, x)):
                f, n, msg = align_transfers(tables[x], x, tables[r], r)
                if f is None:
                    if msg:
                        why.setdefault(r, msg)
                    continue
                text = f"{n} transfers matched by peer and order"
                if x != ref:
                    f, text = f.then(out[x].fit), text + f" with rank {x} (aligned through it: the bounds add)"
                out[r] = RankClock(r, f, True, n, 0, text, {})
                pending.remove(r)
                progress = True
                break
    return why


def alignment_table(clocks: dict[int, RankClock]) -> Table:
    """``rank``, ``offset_ns`` (added to that rank's times to put them on the reference
    rank's clock), ``bound_ns`` (NaN: not bounded), ``method``, ``collectives`` (matched:
    collectives, or transfers where ``method`` says so),
    ``drift_ppm``, ``aligned`` (from events), ``message``."""
    rows = [(r, int(c.fit.offset_ns), float(c.fit.bound_ns), c.fit.method, c.matched, float(c.fit.drift_ppm),
             c.aligned, c.message) for r, c in sorted(clocks.items())]
    return rows_frame(rows, COLUMNS)
