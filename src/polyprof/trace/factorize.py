"""``pandas.factorize`` without needing pandas: codes in order of first appearance.

The readers, the derived lines and the analyses label text columns (devices,
allocators, plane names) with integer codes. pandas' hash table does that in C, but
importing pandas (which brings pyarrow) costs a fresh process more time and memory
than a ``polyprof run`` of a small script should pay for its summary.
So pandas' own function is used when pandas is already loaded and the array is long
(beyond :data:`SMALL` values its hash table is the faster); otherwise a dict of the
distinct values (object arrays) or one stable sort (numbers, fixed-width text).
Either way the result is ``pd.factorize(values)``'s: codes in order of first
appearance, missing values (None, NaN) coded -1 and left out of the distinct values
(tests/test_factorize.py checks the two against each other).
"""

from __future__ import annotations

import math
import sys

import numpy as np

#: below this many values the dict is faster than pandas' hash table (whose first use in
#: a process also pays a set-up)
SMALL = 4096


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes as intp, distinct values in order of first appearance) of a 1-d array."""
    values = np.asarray(values)
    pd = sys.modules.get("pandas")
    if pd is not None and hasattr(pd, "factorize") and len(values) > SMALL:
        codes, uniq = pd.factorize(values)
        return np.asarray(codes, np.intp), np.asarray(uniq, dtype=values.dtype if values.dtype == object else None)
    if values.dtype == object:
        return _objects(values)
    return _sorted(values)


def _missing(v: object) -> bool:
    """What pandas counts as missing in an object array: None and NaN (float or NumPy's)."""
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def _objects(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    vals = values.tolist()
    seen: dict[object, int] = {}
    if set(map(type, vals)) <= {str}:  # the usual case: text, no missing values (no Python loop)
        seen = dict(zip(dict.fromkeys(vals), range(len(vals))))
        codes = np.fromiter(map(seen.__getitem__, vals), np.intp, len(vals))
    else:
        codes = np.fromiter((-1 if _missing(v) else seen.setdefault(v, len(seen)) for v in vals), np.intp, len(vals))
    uniq = np.empty(len(seen), object)
    uniq[:] = list(seen)
    return codes, uniq


def _sorted(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numbers, bools and fixed-width text: one stable sort, then the groups renumbered
    by where each first appears."""
    a = values.ravel()
    missing = np.isnan(a) if a.dtype.kind in "fc" else np.zeros(len(a), bool)
    idx = np.flatnonzero(~missing)
    order = idx[np.argsort(a[idx], kind="stable")]
    s = a[order]
    new = np.empty(len(s), bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    group = np.cumsum(new) - 1  # group of each sorted value, ascending by value
    first = order[new]  # where each group first appears (stable sort: its first row)
    rank = np.empty(len(first), np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    codes = np.full(len(a), -1, np.intp)
    codes[order] = rank[group]
    return codes, a[np.sort(first)]
