"""Row orders of one column, ascending or descending, missing values last.

The analyses sort their tables with these (and :meth:`Table.sort_by` does), so a
table's row order is the one pandas' ``sort_values`` gave when the analyses returned
DataFrames: ties in the order a stable sort keeps them, or in the order pandas'
default quicksort leaves them (``stable=False``), and missing values (NaN, NaT, None)
after the rest, in their own order. tests/test_sorting.py and
tests/analysis/test_frames.py check every dtype against pandas.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def order_desc(values: np.ndarray, stable: bool = True) -> np.ndarray:
    """Row order of ``values`` largest first (``stable``: ties keep their order; else
    the order of a quicksort, as pandas' default ``sort_values``). Missing values last."""
    return _order(np.asarray(values), "stable" if stable else "quicksort", False)


def order_asc(values: np.ndarray, stable: bool = True) -> np.ndarray:
    """Row order of ``values`` smallest first (see :func:`order_desc`)."""
    return _order(np.asarray(values), "stable" if stable else "quicksort", True)


def missing(values: np.ndarray) -> np.ndarray | None:
    """Where ``values`` is missing (NaN, NaT, None; NaN inside an object column), or None
    where nothing of its dtype can be."""
    kind = values.dtype.kind
    if kind == "f" or kind == "c":
        return np.isnan(values)
    if kind in "mM":
        return np.isnat(values)
    if kind == "O":
        vals = values.tolist()
        if all(type(v) is str for v in vals):
            return None
        return np.fromiter((v is None or v != v for v in vals), bool, len(vals))
    return None


def _order(values: np.ndarray, kind: Literal["stable", "quicksort"], ascending: bool) -> np.ndarray:
    """Sort the values that are there (reversed first when descending, so that ties come
    out as pandas' ``nargsort`` leaves them), then the missing ones in their order."""
    if values.ndim != 1:
        raise ValueError(f"a row order needs a 1-d column, not {values.ndim}-d")
    gone = missing(values)
    if gone is not None and gone.any():
        keep = np.flatnonzero(~gone)
        return np.concatenate([keep[_order(values[keep], kind, ascending)], np.flatnonzero(gone)])
    if values.dtype.kind in "mM":
        values = values.view(np.int64)
    idx = np.arange(len(values))
    if ascending:
        return idx[values.argsort(kind=kind)]
    return idx[::-1][values[::-1].argsort(kind=kind)][::-1]
