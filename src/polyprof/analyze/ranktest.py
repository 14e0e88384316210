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
