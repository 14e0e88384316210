"""The test of a diff: per row, is B's time different from A's beyond the noise?

Input per side: a matrix of samples (rows x samples: a row's total time in one step of
one trace), and per sample the run and the rank it came from. Each rank is a stratum,
tested on its own (A's rank 3 against B's rank 3), and the ranks' results are combined:

* **Within a rank, one run a side**: the samples are the steps. ``test="t"`` (default):
  Student's two-sample t test on ``log(x + LOG_OFFSET_NS)`` (time varies by factors,
  and a row absent from a step has 0 there), the variance pooled over both sides: the
  null hypothesis is "A and B are the same distribution", which has one variance, and
  pooling gives ``n_a + n_b - 2`` degrees of freedom where Welch's correction would
  leave about ``n - 1`` of the noisier side (a few steps make that a large loss: a
  change in the spread alone is not called a change, the effect floor sees to that);
  ``test="rank"``: the two-sided Mann-Whitney U test.
* **Within a rank, several runs on a side** (replicates): the unit is the run, so
  run-to-run variance is what a change is measured against: each run's mean over its
  steps (of the log values for ``t``), then Student's t with the variance pooled over
  the runs of both sides (``n_runs - 2`` degrees of freedom; one side may have a single
  run), or Mann-Whitney over the run means for ``rank``. With ``t`` the same test runs
  over each run's median (of the log values: its typical step) too, and the row's p is
  the larger of the two (an intersection-union test: a change must show in the runs'
  means and in their typical steps), where the row is in at least half of every run's
  steps (else its typical step is its absence: a checkpoint every fourth step is tested
  by its means). A few slow steps in a run (its warm-up) move its
  mean, not its median: two runs a side can have them alike by chance, as when both A
  runs of a real torch A/A pair had three warm-up steps 8x the rest in one op and both
  B runs none, which the means alone called 62% faster at p 0.0015. This is the nested (runs within
  sides) test of a rank-free ANOVA: the side effect is tested against the runs.
* **Across ranks**: the ranks' two-sided p-values with the direction of their change are
  combined by Stouffer's Z (a change on every rank adds up), and the row's p-value is
  the smaller of that and the most-changed rank's, Bonferroni-corrected for the looks
  taken: ``min(1, 2 * min(p_combined, R * p_r*))`` with R ranks tested (R = 1: that
  rank's p; a rank whose test was skipped, too few samples, is no look and not counted).
  The most-changed rank r* is the rank whose mean per step moved most in the direction
  of the mean over the ranks (the direction of the row's total): a row whose time grew
  is never called on a rank where it fell (a straggler's own wait in a collective falls
  while the others' grows), and the combination counts only where its sum points the
  way the mean moved (else the row's p is R * p_r*, or 1). Any choice among the R ranks
  keeps the test valid: R * p_r* is at least R * min_r p_r, the Bonferroni bound. So a
  change on one rank shows, and ranks are never pooled into one sample.

The effect of a row is the change of its mean per sample (per step), in ns and relative
to A: over a rank's runs, the mean of each run's mean; across ranks, the mean of the
ranks' means (``mean_a``, ``mean_b``: with as many steps on every rank, the row's total
over steps and ranks), and when r* decided the row, that rank's too (``rank_mean_a``,
``rank_mean_b``); beside it the change of its typical sample (each run's median, then
the same means: ``median_a``, ``median_b``), which the floors must pass too
(:func:`decide`). No p-value is 0 (:func:`_t_test`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .ranktest import CORRECTIONS, mann_whitney, min_p_value, student_groups, stouffer, t_two_sided
from ..trace.sorting import unique
from .units import number_ranges

#: added to every sample before the log of the t test (a row absent from a step is 0 there)
LOG_OFFSET_NS = 1000.0
TESTS = ("t", "rank")


@dataclass
class Samples:
    """One side: ``x`` (rows x samples), and each sample's run and rank."""

    x: np.ndarray
    run: np.ndarray
    rank: np.ndarray


@dataclass
class SparseSamples:
    """One side's rows x samples as its cells with data: ``row``, ``col`` and ``val``,
    sorted by (row, col), each (row, col) once; every other cell is 0 (a row absent from
    a step). Its memory is the cells', not rows x samples (100k kernel names of 500 steps
    a side took 3.6 GB as a dense matrix); :func:`compare` makes a bounded block of rows
    dense at a time (``BLOCK_CELLS``), so that the statistics are those of the dense
    matrix (every row's test is its own; its p-value to about an ulp: the t test's
    incomplete beta iterates until every row of its batch has converged)."""

    row: np.ndarray
    col: np.ndarray
    val: np.ndarray
    n_rows: int
    run: np.ndarray
    rank: np.ndarray

    def dense(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows ``lo``..``hi`` as a dense (float) matrix, absent cells 0."""
        hi = self.n_rows if hi is None else hi
        i, j = np.searchsorted(self.row, [lo, hi])
        x = np.zeros((hi - lo, len(self.run)))
        x[self.row[i:j] - lo, self.col[i:j]] = self.val[i:j]
        return x

    def row_max(self) -> np.ndarray:
        """Per row: its largest sample, 0 included (a row absent from some sample, or
        from every one, has 0 there)."""
        out = np.zeros(self.n_rows)
        if len(self.row):
            starts = np.flatnonzero(np.concatenate([[True], self.row[1:] != self.row[:-1]]))
            top = np.maximum.reduceat(self.val.astype(np.float64), starts)
            present = np.diff(np.append(starts, len(self.row)))
            rows = self.row[starts]
            out[rows] = np.where(present < len(self.run), np.maximum(top, 0.0), top)
        return out

    def row_min(self) -> np.ndarray:
        """Per row: its smallest sample, 0 included as in :meth:`row_max`."""
        neg = SparseSamples(self.row, self.col, -self.val, self.n_rows, self.run, self.rank)
        return -neg.row_max()


#: cells of the dense block of rows :func:`compare` tests at a time (8 bytes each, a few copies)
BLOCK_CELLS = 1 << 18


def _rows(s: Samples | SparseSamples) -> int:
    return s.n_rows if isinstance(s, SparseSamples) else s.x.shape[0]


def _block(s: Samples | SparseSamples, lo: int, hi: int) -> np.ndarray:
    return s.dense(lo, hi) if isinstance(s, SparseSamples) else s.x[lo:hi]


def _by_rank(s: Samples | SparseSamples, strata: list[int]) -> list[Samples | SparseSamples]:
    """Each stratum's samples (its rank's columns), in the order of ``strata``; a sparse
    side's cells sorted by rank once (a mask per rank would read every cell per rank)."""
    if not isinstance(s, SparseSamples):
        return [Samples(s.x[:, s.rank == r], s.run[s.rank == r], s.rank[s.rank == r]) for r in strata]
    cell_rank = s.rank[s.col] if len(s.col) else np.zeros(0, np.int64)
    order = np.argsort(cell_rank, kind="stable")  # (row, col) order kept within a rank
    ranks = cell_rank[order]
    out: list[Samples | SparseSamples] = []
    for r in strata:
        on = s.rank == r
        new_col = np.cumsum(on) - 1  # a column's place among its rank's
        i, j = np.searchsorted(ranks, [r, r + 1])
        cells = order[i:j]
        out.append(SparseSamples(s.row[cells], new_col[s.col[cells]], s.val[cells], s.n_rows, s.run[on], s.rank[on]))
    return out


@dataclass
class Compared:
    """Per row: the row's p-value and effect, and how they were found."""

    p: np.ndarray  # the row's two-sided p-value (NaN: not testable)
    mean_a: np.ndarray  # mean per sample, ns: the mean over the ranks of each rank's mean
    mean_b: np.ndarray
    p_ranks: np.ndarray  # rows x strata: each rank's p-value
    strata: list[int]  # the ranks tested (present on both sides)
    rank_decided: np.ndarray  # the rank whose own test gave the row's p, -1 when the combination did
    method: str  # in words
    untestable: str | None  # why no rank could be tested, or None
    rank_mean_a: np.ndarray | None = None  # mean per sample on the deciding rank (NaN: none decided)
    rank_mean_b: np.ndarray | None = None
    means_a: np.ndarray | None = None  # rows x strata: each rank's mean per sample
    means_b: np.ndarray | None = None
    #: per stratum tested: the units its test weighs on each side (runs where a side has
    #: several, else samples: steps or traces) and whether they are runs
    sizes: list[tuple[int, int, bool]] | None = None
    #: the smallest p-value any row's test can give with these sizes (:func:`smallest_p`)
    min_p: float = 0.0
    #: per row, its typical sample (a run's median, the mean over its runs, then over the
    #: ranks), and on the deciding rank (NaN: none decided): the effect floors' other look
    median_a: np.ndarray | None = None
    median_b: np.ndarray | None = None
    rank_median_a: np.ndarray | None = None
    rank_median_b: np.ndarray | None = None


def mean_of_runs(x: np.ndarray, run: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows x runs matrix of each run's mean sample, the runs)."""
    runs, inv = np.unique(run, return_inverse=True)
    sums = np.zeros((x.shape[0], len(runs)))
    np.add.at(sums.T, inv, x.T)
    return sums / np.bincount(inv, minlength=len(runs)), runs


def _median_of_runs(x: np.ndarray, run: np.ndarray) -> np.ndarray:
    """rows x runs matrix of each run's median sample (its typical step)."""
    runs = unique(run)
    return np.stack([np.median(x[:, run == r], axis=1) for r in runs.tolist()], axis=1)


class _Rank(NamedTuple):
    """One rank's rows: p, each side's mean per sample (the mean of its runs' means) and
    typical sample (the mean of its runs' medians), and why it cannot be tested (or None)."""

    p: np.ndarray
    mean_a: np.ndarray
    mean_b: np.ndarray
    median_a: np.ndarray
    median_b: np.ndarray
    why: str | None


def _stratum(xa: np.ndarray, ra: np.ndarray, xb: np.ndarray, rb: np.ndarray, test: str) -> _Rank:
    """One rank: (p, means, typical samples) per row and why it cannot be tested (or None)."""
    ma_runs, runs_a = mean_of_runs(xa, ra)
    mb_runs, runs_b = mean_of_runs(xb, rb)
    mean_a, mean_b = ma_runs.mean(axis=1), mb_runs.mean(axis=1)
    med_a, med_b = _median_of_runs(xa, ra), _median_of_runs(xb, rb)
    typical = (med_a.mean(axis=1), med_b.mean(axis=1))
    k = xa.shape[0]
    if len(runs_a) == 1 and len(runs_b) == 1:
        n_a, n_b = xa.shape[1], xb.shape[1]
        if test == "t":
            if n_a < 2 or n_b < 2:
                return _Rank(np.full(k, np.nan), mean_a, mean_b, *typical,
                             f"{n_a} vs {n_b} samples (the t test needs 2 a side)")
            p = _t_test(np.log(xa + LOG_OFFSET_NS), np.log(xb + LOG_OFFSET_NS), serial=True)
        else:
            p = mann_whitney(xa, xb)[0]
            if min_p_value(n_a, n_b) >= 0.5:
                return _Rank(np.full(k, np.nan), mean_a, mean_b, *typical, f"{n_a} vs {n_b} samples")
        return _Rank(p, mean_a, mean_b, *typical, None)
    if len(runs_a) + len(runs_b) < 3:
        return _Rank(np.full(k, np.nan), mean_a, mean_b, *typical, "too few runs")
    if test == "t":
        log_a, log_b = np.log(xa + LOG_OFFSET_NS), np.log(xb + LOG_OFFSET_NS)
        la, lb = mean_of_runs(log_a, ra)[0], mean_of_runs(log_b, rb)[0]
        t_mean, p_mean = np.sign(lb.mean(axis=1) - la.mean(axis=1)), _t_test(la, lb)
        lma, lmb = np.log(med_a + LOG_OFFSET_NS), np.log(med_b + LOG_OFFSET_NS)
        t_med, p_med = np.sign(lmb.mean(axis=1) - lma.mean(axis=1)), _t_test(lma, lmb)
        # a row in under half of some run's steps (a checkpoint every few steps) has no typical step: its means
        steady = (med_a > 0).all(axis=1) & (med_b > 0).all(axis=1)
        p = np.where(~steady, p_mean, np.where(t_mean * t_med < 0, 1.0, np.fmax(p_mean, p_med)))
    else:
        p = mann_whitney(ma_runs, mb_runs)[0]
    return _Rank(p, mean_a, mean_b, *typical, None)


#: the clock's resolution, ns: Kineto's JSON writes whole µs, the coarsest of the formats
#: polyprof reads. Where both sides' log values are constant, the t test has no spread
#: to weigh their difference against (t infinite, p 0): the rounding of each value to
#: it is the least spread they have (:func:`_t_test`)
RESOLUTION_NS = 1000.0
#: the smallest p-value a diff gives: a smaller one (the t test's tail past what a double
#: holds) is written as this bound, never as 0
P_FLOOR = float(np.finfo(np.float64).tiny)


def _t_test(la: np.ndarray, lb: np.ndarray, serial: bool = False) -> np.ndarray:
    """Two-sided p of Student's t (``ranktest.student_groups``) on log values ``la``,
    ``lb`` (``log(x + LOG_OFFSET_NS)``, of steps or of runs), never 0: where both sides
    are constant and differ (two steps a side of whole-µs times, 87 µs in both of A's
    and absent from B's, gave p 0), the variance is that of rounding each value present
    to :data:`RESOLUTION_NS`, res² / 12 on the time, (res / (x + 1 µs))² / 12 on its log
    (absent is exactly 0); and a p under :data:`P_FLOOR` is that bound."""
    t, df, p = student_groups(la, lb, serial=serial)
    stuck = np.isinf(t)
    if stuck.any():
        def rounding(lv: np.ndarray) -> np.ndarray:
            present = lv > np.log(LOG_OFFSET_NS) + 1e-12
            return np.where(present, RESOLUTION_NS ** 2 / 12.0 / np.exp(2.0 * lv), 0.0).sum(axis=1)

        a, b = la[stuck], lb[stuck]
        n_a, n_b = a.shape[1], b.shape[1]
        dof = np.maximum(n_a + n_b - 2.0, 1.0)
        se2 = (rounding(a) + rounding(b)) / dof * (1.0 / n_a + 1.0 / n_b)
        delta = b.mean(axis=1) - a.mean(axis=1)
        p = p.copy()
        p[stuck] = t_two_sided(np.abs(delta) / np.sqrt(se2), np.full(len(a), dof))
    return np.where(p < P_FLOOR, P_FLOOR, p)


def compare(a: Samples | SparseSamples, b: Samples | SparseSamples, test: str = "t") -> Compared:
    """Test every row of ``a`` against ``b`` (see the module doc); a block of rows at a
    time (every row's test is its own)."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, not {test!r}")
    k = _rows(a)
    strata = sorted(set(a.rank.tolist()) & set(b.rank.tolist()))
    if not strata:
        nan = np.full(k, np.nan)
        return Compared(nan, nan.copy(), nan.copy(), np.zeros((k, 0)), [], np.full(k, -1), "",
                        "no rank is in both runs" if len(a.rank) and len(b.rank) else "no samples")
    P, MA, MB, DA, DB = (np.zeros((k, len(strata))) for _ in range(5))
    why: list[str | None] = [None] * len(strata)
    for j, (sa, sb) in enumerate(zip(_by_rank(a, strata), _by_rank(b, strata))):
        step = max(1, BLOCK_CELLS // max(len(sa.run), len(sb.run), 1))
        for lo in range(0, max(k, 1), step):  # one pass with no rows too: the reason
            hi = min(k, lo + step)
            got = _stratum(_block(sa, lo, hi), sa.run, _block(sb, lo, hi), sb.run, test)
            P[lo:hi, j], MA[lo:hi, j], MB[lo:hi, j], DA[lo:hi, j], DB[lo:hi, j], why[j] = got
    mean_a, mean_b = MA.mean(axis=1), MB.mean(axis=1)
    decided = np.full(k, -1, np.int64)
    rank_a, rank_b = np.full(k, np.nan), np.full(k, np.nan)
    rank_med_a, rank_med_b = np.full(k, np.nan), np.full(k, np.nan)
    testable = [i for i, w in enumerate(why) if w is None]
    untestable = None if testable else _why_by_ranks(strata, why)
    looks = len(testable)  # the ranks tested: one whose test was skipped (too few samples) is no look
    if looks <= 1:
        p = P[:, testable[0] if testable else 0]
    else:
        comb = stouffer(P, MB - MA)
        # evidence of a change the other way than the mean's is none for this one
        comb = np.where(_stouffer_way(P, MB - MA) * np.where(np.nansum(MB - MA, axis=1) < 0, -1, 1) < 0, 1.0, comb)
        best = most_changed(MB - MA, P)
        rows_k = np.arange(k)
        p_best = np.where(best >= 0, P[rows_k, np.maximum(best, 0)], np.nan)
        by_rank = ~np.isnan(p_best) & (p_best * looks < np.where(np.isnan(comb), np.inf, comb))
        p = np.minimum(1.0, 2.0 * np.where(by_rank, p_best * looks, comb))
        rows = np.flatnonzero(by_rank)
        decided[rows] = np.array(strata)[best[rows]]
        rank_a[rows], rank_b[rows] = MA[rows, best[rows]], MB[rows, best[rows]]
        rank_med_a[rows], rank_med_b[rows] = DA[rows, best[rows]], DB[rows, best[rows]]
    runs_a = {int(r): len(unique(a.run[a.rank == r])) for r in strata}
    runs_b = {int(r): len(unique(b.run[b.rank == r])) for r in strata}
    replicated = any(runs_a[r] > 1 or runs_b[r] > 1 for r in strata)
    sizes = [(runs_a[r], runs_b[r], True) if runs_a[r] > 1 or runs_b[r] > 1 else
             (int((a.rank == r).sum()), int((b.rank == r).sum()), False)
             for j, r in enumerate(strata) if why[j] is None]
    if test == "t":
        method = ("Student's t over the runs' mean and median log times (run-to-run variance)" if replicated else
                  "Student's t over log per-step totals")
    else:
        method = "Mann-Whitney U over " + ("the runs' mean time" if replicated else "per-step totals")
    if len(strata) > 1:
        method += f", each of {len(strata)} ranks, combined (Stouffer) and the most-changed rank (Bonferroni)"
    return Compared(p, mean_a, mean_b, P, [int(r) for r in strata], decided, method, untestable, rank_a, rank_b,
                    MA, MB, sizes, smallest_p(sizes, looks, test), DA.mean(axis=1), DB.mean(axis=1), rank_med_a,
                    rank_med_b)


def smallest_p(sizes: list[tuple[int, int, bool]], n_strata: int, test: str) -> float:
    """The smallest p-value a row's test can give (:func:`compare`), whatever the data:
    the rank test's is bounded by its sizes (a 5-vs-5 Mann-Whitney's exact two-sided p is
    at least 2/252 = 0.0079, ``ranktest.min_p_value``); over several ranks, the smaller of
    the combination with every rank at its smallest p the same way and the most-changed
    rank's, as :func:`compare` takes them. ``sizes``: those of the ranks tested;
    ``n_strata``: how many (a rank whose test was skipped is in neither, as in
    :func:`compare`'s correction). The t test's has no such bound (0). A
    correction over many rows can put every row out of reach of ``alpha``: the verdict
    says so (``diff_notes.reach``) rather than call rows unchanged."""
    if test != "rank":
        return 0.0
    if not sizes:
        return 1.0
    mins = np.array([min_p_value(n_a, n_b) for n_a, n_b, _ in sizes])
    if n_strata == 1:
        return float(mins[0])
    comb = float(stouffer(mins[None, :], np.ones((1, len(mins))))[0])
    return float(min(1.0, 2.0 * min(comb, n_strata * float(mins.min()))))


def without_stalls(s: Samples, factor: float) -> tuple[Samples, int]:
    """``s`` (the step times of one side) without its stalls: on each rank, the steps of
    ``factor`` times its median step or more, where they are under half its steps (as the
    warm-up is left out); and how many were left out. A few stalls (a step that waited
    10 ms for the machine, each in another op) move the mean of the log times and inflate
    their spread: a t test over them called an A/A pair +155% slower whose median step
    moved +0.4% (p 0.038; 0.14 without them), and missed a +30% change of every step
    beside one stall (tests/test_diff_verdict.py). The verdict names them apart."""
    x = s.x[0]
    keep = np.ones(len(x), bool)
    for r in unique(s.rank).tolist():
        on = s.rank == r
        med = float(np.median(x[on]))
        stall = on & (x >= factor * med) if med > 0 else np.zeros(len(x), bool)
        if 2 * int(stall.sum()) < int(on.sum()):
            keep &= ~stall
    return Samples(s.x[:, keep], s.run[keep], s.rank[keep]), int((~keep).sum())


def _why_by_ranks(ranks: list[int], why: list[str | None]) -> str:
    """Why no rank could be tested, one reason once with the ranks it holds for, as
    ranges ("ranks 0-127: 1 vs 1 samples ..."): a job of hundreds of ranks of one step
    gave hundreds of the same clause."""
    by: dict[str, list[int]] = {}
    for r, w in zip(ranks, why):
        by.setdefault(w or "", []).append(int(r))
    return "; ".join(f"{'rank' if len(rs) == 1 else 'ranks'} {number_ranges(sorted(rs))}: {w}"
                     for w, rs in by.items())


def most_changed(delta: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per row of ``delta`` (rows x ranks: each rank's change of its mean): the column of
    the rank that moved most in the direction of the mean over the ranks (of a zero mean:
    up), among those with a p-value in ``p``; -1 where none moved that way."""
    if not delta.shape[1]:
        return np.full(len(delta), -1, np.int64)
    way = np.where(np.nansum(delta, axis=1) < 0, -1.0, 1.0)
    along = np.where(np.isnan(p) | np.isnan(delta), 0.0, delta * way[:, None])
    best = np.argmax(along, axis=1)
    return np.where(along[np.arange(len(delta)), best] > 0, best, -1).astype(np.int64)


def _stouffer_way(p: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Per row: the sign of the Stouffer sum of ``ranktest.stouffer`` (each rank's
    normal score of its two-sided p, signed by its change), -1, 0 or 1."""
    from statistics import NormalDist

    inv = NormalDist().inv_cdf
    ok = ~np.isnan(p)
    half = np.clip(np.where(ok, p, 1.0) / 2.0, 1e-300, 0.5)
    z = np.array([inv(1.0 - h) if h > 1e-12 else -inv(h) for h in half.ravel().tolist()]).reshape(p.shape)
    return np.sign(np.where(ok, z * np.sign(np.nan_to_num(delta)), 0.0).sum(axis=1))


def change_of(mean_a: np.ndarray, mean_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B - A, relative to A) of per-step means: relative NaN when A has none and B some
    (new in B), 0 when neither has any (ops of 0 ns, or outside the steps)."""
    delta = mean_b - mean_a
    with np.errstate(divide="ignore", invalid="ignore"):
        return delta, np.where(mean_a > 0, delta / mean_a, np.where(mean_b > 0, np.nan, 0.0))


def adjust(p: dict[str, np.ndarray], correction: str) -> dict[str, np.ndarray]:
    """Adjusted p-values of every table's rows, corrected as one family."""
    flat = np.concatenate([p[t] for t in p]) if p else np.zeros(0)
    adj = CORRECTIONS[correction](flat)
    out, at = {}, 0
    for t in p:
        out[t] = adj[at:at + len(p[t])]
        at += len(p[t])
    return out


def _past_floors(delta: np.ndarray, rel: np.ndarray, floors: tuple[float, float]) -> np.ndarray:
    """Per row: whether a change (ns per sample, and relative: NaN where A had none, new
    in B) passes both floors."""
    rel_floor, abs_floor = floors
    big_rel = np.isnan(rel) | (np.abs(np.nan_to_num(rel)) >= rel_floor)
    return big_rel & (np.abs(np.nan_to_num(delta)) >= abs_floor) & (np.nan_to_num(delta) != 0)


def typical_change(med_a: np.ndarray, med_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B - A, relative to A) of the rows' typical samples (``Compared.median_a``):
    NaN where neither side has one (a row in under half of every side's steps, a
    checkpoint every fourth step, whose typical step is its absence: its mean decides);
    relative NaN where A's is 0 (new in B), as :func:`change_of`."""
    delta, rel = change_of(med_a, med_b)
    none = ~((med_a > 0) | (med_b > 0))
    return np.where(none, np.nan, delta), np.where(none, np.nan, rel)


#: a tested row's ``reason`` where the test could not have called any row (``diff_notes.reach``)
NO_REACH = "the test cannot reach alpha with these samples"


def decide(p: np.ndarray, p_adj: np.ndarray, tested: np.ndarray, delta: np.ndarray, rel: np.ndarray,
           alpha: float, floors: tuple[float, float], testable: bool,
           typical: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """(significant, change, reason) of each row: the test, then the two floors, on the
    change of the mean (``delta``, ``rel``) and, where ``typical`` gives one (not NaN),
    on the change of the typical sample the same way (:func:`typical_change`): the step
    time's floors are on its median step, which a stalled step does not move; a row's
    on both, since one stalled step moves its mean (an op of 3-8 µs a step, once 704 µs,
    read 29.1 µs -> 2.23 µs per step, -92%, on a shift of 2.4 µs in every step)."""
    n = len(p)
    big = _past_floors(delta, rel, floors)
    if typical is not None:
        t_delta, t_rel = typical
        known = ~np.isnan(t_delta)
        along = np.sign(np.nan_to_num(t_delta)) == np.sign(np.nan_to_num(delta))
        big &= ~known | (_past_floors(np.nan_to_num(t_delta), t_rel, floors) & along)
    below_p = tested & (np.nan_to_num(p_adj, nan=1.0) < alpha)
    sig = below_p & big
    change = np.where(sig & (delta > 0), "slower", np.where(sig & (delta < 0), "faster", "")).astype(object)
    reason = np.full(n, "", dtype=object)
    reason[~tested] = "not tested: below the absolute floor in every sample"
    reason[tested & ~below_p] = "within the noise"
    reason[below_p & ~big] = "below the effect floor"
    reason[np.isnan(p)] = "not testable"
    significant = np.empty(n, object)
    significant[:] = [bool(s) for s in sig] if testable else [None] * n
    if not testable:
        change[:] = ""
    return significant, change, reason
