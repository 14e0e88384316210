"""Two-sided Mann-Whitney U test, vectorised over many items at once.

Each item (a kernel, an op, a section) has one sample per step of run A and one per
step of run B (its total time in that step). :func:`mann_whitney` gives every item's
two-sided p-value for "A's and B's per-step totals come from the same distribution".
Ties (a kernel that does not run in some steps, identical totals) get mid-ranks.

* **Exact** when the number of ways to split the samples, C(n_a + n_b, n_a), is at most
  :data:`EXACT_LIMIT`: a permutation test of the mid-ranks over every split (exact with
  ties too); two-sided p = twice the smaller tail, capped at 1 (as scipy's exact tests).
  Deterministic: no random numbers.
* **Normal approximation** with tie and continuity correction otherwise (then n_a +
  n_b > 18, where it is accurate to a few units in the third decimal).

With few steps the test cannot reach a small p-value at all: the smallest two-sided
exact p-value is 2 / C(n_a + n_b, n_a), so 3 vs 3 steps (0.1) can never be significant
at 0.05; 4 vs 4 (0.029) can. :func:`min_p_value` says what a run pair can reach.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

#: largest number of splits enumerated for an exact p-value
EXACT_LIMIT = 20_000
#: cells (items x splits) computed at once in the exact test: bounds its memory (~16 MB)
_CHUNK_CELLS = 2_000_000


def min_p_value(n_a: int, n_b: int) -> float:
    """Smallest two-sided p-value reachable with these sample sizes (1 when either is 0)."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def mid_ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``x`` (items x n): ranks 1..n with ties averaged, and sum(t^3 - t) over
    the row's tie groups (for the variance correction)."""
    k, n = x.shape
    if not k or not n:
        return np.zeros((k, n)), np.zeros(k)
    row = np.repeat(np.arange(k), n)
    flat = x.ravel()
    order = np.lexsort((flat, row))
    sv, sr = flat[order], row[order]
    new = np.concatenate([[True], (sv[1:] != sv[:-1]) | (sr[1:] != sr[:-1])])
    starts = np.flatnonzero(new)
    size = np.diff(np.append(starts, len(flat)))
    pos = np.arange(len(flat)) - sr * n + 1  # 1-based position within the row
    mean_rank = np.add.reduceat(pos.astype(np.float64), starts) / size
    ranks = np.empty(len(flat))
    ranks[order] = np.repeat(mean_rank, size)
    ties = np.zeros(k)
    np.add.at(ties, sr[starts], size.astype(np.float64) ** 3 - size)
    return ranks.reshape(k, n), ties


def mann_whitney(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, str]:
    """Two-sided p-value per row of ``a`` (items x n_a) against ``b`` (items x n_b), and
    the method used ("exact" or "normal"). NaN for every row when either side is empty."""
    a, b = np.atleast_2d(np.asarray(a, np.float64)), np.atleast_2d(np.asarray(b, np.float64))
    k, n_a, n_b = a.shape[0], a.shape[1], b.shape[1]
    if not n_a or not n_b:
        return np.full(k, np.nan), "none"
    ranks, ties = mid_ranks(np.concatenate([a, b], axis=1))
    n = n_a + n_b
    observed = ranks[:, :n_a].sum(axis=1)
    if math.comb(n, n_a) <= EXACT_LIMIT:
        return _exact(ranks, observed, n_a), "exact"
    u = observed - n_a * (n_a + 1) / 2.0
    var = n_a * n_b / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    sd = np.sqrt(np.maximum(var, 0.0))
    z = np.maximum(np.abs(u - n_a * n_b / 2.0) - 0.5, 0.0) / np.where(sd > 0, sd, 1.0)
    p = np.array([math.erfc(v / math.sqrt(2.0)) for v in z.tolist()])
    return np.where(sd > 0, np.minimum(p, 1.0), 1.0), "normal"


@lru_cache(maxsize=32)
def _splits(n: int, n_a: int) -> np.ndarray:
    """Every way to pick n_a of n positions, as rows of a 0/1 matrix."""
    splits = np.zeros((math.comb(n, n_a), n))
    for i, c in enumerate(itertools.combinations(range(n), n_a)):
        splits[i, list(c)] = 1.0
    return splits


def _exact(ranks: np.ndarray, observed: np.ndarray, n_a: int) -> np.ndarray:
    """Two-sided permutation p-value of each row's rank sum: twice the smaller tail
    (the share of all splits into n_a and the rest whose rank sum is at least, or at
    most, the observed one), capped at 1 — scipy's convention for exact tests."""
    k, n = ranks.shape
    splits = _splits(n, n_a)
    tol = 1e-9 * n * n  # mid-ranks are multiples of 0.5; sums are exact up to rounding
    out = np.empty(k)
    step = max(1, _CHUNK_CELLS // len(splits))
    for lo in range(0, k, step):
        sums = ranks[lo:lo + step] @ splits.T  # rank sum of the first group, every split
        obs = observed[lo:lo + step, None]
        upper = (sums >= obs - tol).mean(axis=1)
        lower = (sums <= obs + tol).mean(axis=1)
        out[lo:lo + step] = np.minimum(1.0, 2.0 * np.minimum(upper, lower))
    return out


# ----------------------------------------------------------------------- t tests
def _log_beta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lg = np.frompyfunc(math.lgamma, 1, 1)
    return (lg(a) + lg(b) - lg(a + b)).astype(np.float64)


def _beta_cf(a: np.ndarray, b: np.ndarray, x: np.ndarray, iterations: int = 300) -> np.ndarray:
    """The continued fraction of the incomplete beta function (modified Lentz), elementwise."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    for m in range(1, iterations + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + aa / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            delta = d * c
            h = h * delta
        if np.all(np.abs(delta - 1.0) < 1e-15):
            break
    return h


def beta_inc(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The regularized incomplete beta function I_x(a, b), elementwise (0 <= x <= 1)."""
    a, b, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                  np.clip(np.asarray(x, np.float64), 0.0, 1.0))
    out = np.where(x <= 0, 0.0, 1.0)
    inner = (x > 0) & (x < 1)
    if not inner.any():
        return out
    a, b, x = a[inner], b[inner], x[inner]
    front = np.exp(a * np.log(x) + b * np.log1p(-x) - _log_beta(a, b))
    flip = x > (a + 1.0) / (a + b + 2.0)  # the fraction converges fast below this point
    direct = front * _beta_cf(np.where(flip, b, a), np.where(flip, a, b), np.where(flip, 1.0 - x, x))
    out[inner] = np.where(flip, 1.0 - direct / b, direct / a)
    return out


def t_two_sided(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided p-value of Student's t with ``df`` degrees of freedom (df may be
    fractional): P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2). An infinite t
    gives 0; a NaN t or df < 1e-9 gives NaN."""
    t, df = np.broadcast_arrays(np.asarray(t, np.float64), np.asarray(df, np.float64))
    out = np.full(t.shape, np.nan)
    ok = ~np.isnan(t) & (df > 1e-9)
    inf = ok & np.isinf(t)
    out[inf] = 0.0
    fin = ok & ~inf
    if fin.any():
        x = df[fin] / (df[fin] + t[fin] ** 2)
        out[fin] = np.minimum(1.0, beta_inc(df[fin] / 2.0, np.full(x.shape, 0.5), x))
    return out


def student_groups(a: np.ndarray, b: np.ndarray, serial: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Student's two-sample t test with the variance pooled over both sides, per row of
    ``a`` (items x n_a) and ``b`` (items x n_b): (t of mean(b) - mean(a), n_a + n_b - 2
    degrees of freedom, two-sided p). One side may have a single value (one run): the
    other side's values give the variance. Needs n_a + n_b >= 3 (else NaN). Both sides
    constant: p 1 when their values are equal, 0 when not (t infinite).

    ``serial``: the samples of each side are a series in time order (the steps of one
    run), whose neighbours are alike (warm-up, the machine's load drifting): a mean of n
    such samples varies :func:`_serial_factor` times as much as of n independent ones.
    Each side's variance of its mean and its degrees of freedom are taken for its
    effective n, n / that factor."""
    a, b = np.atleast_2d(np.asarray(a, np.float64)), np.atleast_2d(np.asarray(b, np.float64))
    k, n_a, n_b = a.shape[0], a.shape[1], b.shape[1]
    df = n_a + n_b - 2
    if n_a < 1 or n_b < 1 or df < 1:
        nan = np.full(k, np.nan)
        return nan, nan, nan.copy()
    diff = b.mean(axis=1) - a.mean(axis=1)
    da, db = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    ss = (da ** 2).sum(axis=1) + (db ** 2).sum(axis=1)
    f_a, f_b = (_serial_factor(da), _serial_factor(db)) if serial else (np.ones(k), np.ones(k))
    dfs = np.maximum(n_a / f_a + n_b / f_b - 2.0, 1.0)
    se2 = ss / df * (f_a / n_a + f_b / n_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se2 > 0, diff / np.sqrt(se2), np.where(diff == 0, 0.0, np.copysign(np.inf, diff)))
    return t, dfs, t_two_sided(t, dfs)


def _serial_factor(d: np.ndarray) -> np.ndarray:
    """Per row of ``d`` (deviations from the row's mean, in time order): (1 + r) / (1 - r),
    r the lag-1 autocorrelation (AR(1)) with its small-sample bias taken back (the
    estimate runs (1 + 4r) / n low), in [0, 0.9], where the estimate passes 1.645 /
    sqrt(n) (one-sided 95% of independent samples'); else 1, as below 3 samples. On
    AR(1) series of 20 steps a side (r 0.5, 0.8) an A/A test at 5% rejects 10% of pairs
    (27% and 55% without this); on independent steps 5%, with the power it had (a test
    of every estimate, ungated, rejected 3% but lost a tenth of the power)."""
    n = d.shape[1]
    if n < 3:
        return np.ones(d.shape[0])
    ss = (d ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(ss > 0, (d[:, 1:] * d[:, :-1]).sum(axis=1) / ss, 0.0)
    keep = r > 1.645 / math.sqrt(n)
    r = np.clip(r + (1.0 + 4.0 * r) / n, 0.0, 0.9)
    return np.where(keep, (1.0 + r) / (1.0 - r), 1.0)


# ----------------------------------------------------------------------- combining
def stouffer(p: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """Two-sided p-value of several independent two-sided tests of one item combined
    with direction (Stouffer's Z): each p and the sign of its change become a signed
    normal score, their sum over sqrt(k) is tested. Rows of ``p`` are items, columns
    the tests (ranks); NaN columns are left out of a row."""
    from statistics import NormalDist

    p = np.atleast_2d(np.asarray(p, np.float64))
    sign = np.atleast_2d(np.asarray(sign, np.float64))
    ok = ~np.isnan(p)
    inv = NormalDist().inv_cdf
    half = np.clip(np.where(ok, p, 1.0) / 2.0, 1e-300, 0.5)
    z = np.array([inv(1.0 - h) if h > 1e-12 else -inv(h) for h in half.ravel().tolist()]).reshape(p.shape)
    z = np.where(ok, z * np.sign(sign), 0.0)
    k = ok.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        big = np.abs(z.sum(axis=1)) / np.sqrt(k)
    out = np.array([math.erfc(v / math.sqrt(2.0)) if v == v else math.nan for v in big.tolist()])
    return np.where(k > 0, out, np.nan)


# ----------------------------------------------------------------------- many rows
def _family(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The p-values as float64, an all-NaN result of their shape, and the indices of the
    family (the non-NaN entries) from the smallest p up (ties in index order)."""
    p = np.asarray(p, np.float64)
    idx = np.flatnonzero(~np.isnan(p))
    return p, np.full(p.shape, np.nan), idx[np.argsort(p[idx], kind="stable")]


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control under any
    dependence): the i-th smallest of m is multiplied by m - i, made monotone, capped
    at 1. NaN entries are not part of the family and stay NaN."""
    p, out, order = _family(p)
    m = len(order)
    adj = np.maximum.accumulate(np.minimum(1.0, p[order] * (m - np.arange(m))))
    out[order] = adj
    return out


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false-discovery-rate control for
    independent or positively dependent tests); NaN entries stay NaN."""
    p, out, order = _family(p)
    m = len(order)
    adj = p[order] * m / np.arange(1, m + 1)
    out[order] = np.minimum(1.0, np.minimum.accumulate(adj[::-1])[::-1])
    return out


#: the corrections for testing many rows at once, by name
CORRECTIONS = {"holm": holm, "bh": benjamini_hochberg}
