"""The analyses' DataFrames, built from NumPy columns in one step.

A summary builds a dozen small tables; with pandas' general constructor, a sort and a
few derived columns each, their pandas overhead (0.1-0.4 ms a call) was most of a small
trace's summary. Here a table is computed as NumPy columns (sorted with
:func:`order_desc` / :func:`order_asc`, which order exactly as pandas'
``sort_values(kind="stable")``) and handed to pandas once (:func:`frame`), with text
columns kept as NumPy object columns (pandas 3 would make them Arrow strings, whose
conversion and ``take`` cost about a quarter of all the analyses).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal, Sequence

import numpy as np
import pandas as pd
from pandas.core.sorting import nargsort


def _column(v: Any) -> np.ndarray | None:
    """``v`` as a 1-d array for the direct path, or None where pandas must infer."""
    if isinstance(v, np.ndarray):
        return v if v.ndim == 1 else None
    if not isinstance(v, (list, tuple)) or not len(v):
        return None
    kinds = set(map(type, v))
    if kinds == {str}:
        out = np.empty(len(v), object)
        out[:] = v
        return out
    if kinds <= _INTS:  # beyond int64, pandas' uint64 or object
        return np.array(v, np.int64) if -2 ** 63 <= min(v) and max(v) < 2 ** 63 else None
    if kinds <= _NUMBERS:
        return np.array(v, np.float64)
    if kinds == {bool}:
        return np.array(v, bool)
    return None  # None, NumPy scalars, objects: pandas infers


_INTS = {int, np.int64}
_NUMBERS = {int, np.int64, float, np.float64}


def frame(columns: dict[str, Any], index: Sequence[Any] | None = None,
          order: np.ndarray | None = None) -> pd.DataFrame:
    """A DataFrame of ``columns`` (each a NumPy array or a list; text stays ``object``),
    rows taken in ``order`` when given (the index too), labels an object Index.

    NumPy arrays and lists of text go to pandas as they are, in one block-manager build;
    a frame with any other column (a Series, a list of numbers or of mixed values) goes
    through pandas' constructor, which infers those as it always has.
    """
    idx: pd.Index | None = index if index is None or isinstance(index, pd.Index) else pd.Index(index, dtype=object)
    labels = _labels(tuple(columns)).view()  # its own object (a name set on it stays its own)
    arrays = [_column(v) for v in columns.values()]
    n = len(arrays[0]) if arrays and arrays[0] is not None else -1
    if arrays and all(a is not None and len(a) == n for a in arrays) and (idx is None or len(idx) == n):
        if order is not None:
            arrays = [a[order] for a in arrays]  # type: ignore[index]
            idx = idx[order] if idx is not None else None
        return pd.DataFrame._from_arrays(arrays, columns=labels, index=idx if idx is not None else pd.RangeIndex(n),
                                         verify_integrity=False)
    df = _general(columns, idx)
    if order is not None:
        df = df.iloc[order] if idx is not None else df.iloc[order].reset_index(drop=True)
    return df


@lru_cache(maxsize=256)
def _labels(names: tuple[str, ...]) -> pd.Index:
    """The column labels of a table: one object Index per set of names, built once (8-12
    us each through pandas' constructor, 20 us the first time, and every table of a
    summary needs one); tables get views of it. The names are strings, so the Index is
    made straight from their object array, as the constructor would make it."""
    a = np.empty(len(names), object)
    a[:] = names
    simple = getattr(pd.Index, "_simple_new", None)
    return simple(a) if simple is not None and all(type(n) is str for n in names) else pd.Index(a, dtype=object)


def _general(columns: dict[str, Any], index: pd.Index | None) -> pd.DataFrame:
    """pandas' constructor, text columns kept ``object``."""
    def keep(v: Any) -> Any:
        if isinstance(v, np.ndarray) and v.dtype != object or isinstance(v, pd.Series):
            return v
        if not isinstance(v, np.ndarray) and len(v) and not isinstance(v[0], str):
            return v
        return pd.Series(v, dtype=object, index=index)

    # labels too (an inferred str Index is Arrow: 10-20 ms on first use): set after building
    df = pd.DataFrame({i: keep(v) for i, v in enumerate(columns.values())}, index=index)
    df.columns = pd.Index(list(columns), dtype=object)
    return df


def column(df: pd.DataFrame, c: str) -> np.ndarray:
    """``df[c].to_numpy()``, without building the Series (6 µs a column, and a summary
    reads a hundred) where the column is one NumPy array of its own."""
    names = df.columns.tolist()  # found in the list: get_loc builds a hash table per new Index
    a = None
    if names.count(c) == 1:
        try:
            a = df._get_column_array(names.index(c))
        except (AttributeError, TypeError):  # pandas without it: the public way
            a = None
    return a if isinstance(a, np.ndarray) else df[c].to_numpy()


#: below this many values, :func:`factorize` uses a dict (pandas' hash table is faster on more)
_SMALL = 4096


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values)``: codes in order of first appearance and the distinct
    values. A short object array of str goes through a dict (pandas' first factorize
    in a process costs 170 us of set-up, more than a small summary's tables need);
    anything else, pandas' own (missing values get code -1 there)."""
    if values.dtype == object and len(values) <= _SMALL:
        vals = values.tolist()
        if all(type(v) is str for v in vals):
            seen: dict[str, int] = {}
            codes = np.fromiter((seen.setdefault(v, len(seen)) for v in vals), np.intp, len(vals))
            uniq = np.empty(len(seen), object)
            uniq[:] = list(seen)
            return codes, uniq
    codes, uniq = pd.factorize(values)
    return codes, np.asarray(uniq)


def rows_frame(rows: list[tuple], columns: list[str]) -> pd.DataFrame:
    """:func:`frame` from row tuples."""
    return frame({c: [r[i] for r in rows] for i, c in enumerate(columns)})


def empty_frame(columns: Sequence[str], text: Sequence[str] = (), dtype: Any = np.int64) -> pd.DataFrame:
    """A table with no rows: ``columns`` of ``dtype``, those in ``text`` object columns;
    labels as :func:`frame` makes them (an empty table built by ``pd.DataFrame`` from
    a dict got Arrow labels: 2-3 ms on first use in a fresh process)."""
    return frame({c: np.zeros(0, object if c in text else dtype) for c in columns})


def order_desc(values: np.ndarray, stable: bool = True) -> np.ndarray:
    """Row order of ``sort_values(ascending=False)`` on ``values`` (``kind="stable"``
    unless ``stable`` is False: pandas' default quicksort, whose order of ties this
    keeps too). NaN last. pandas' own routine on the array, without a frame."""
    return _order(np.asarray(values), "stable" if stable else "quicksort", False)


def order_asc(values: np.ndarray, stable: bool = True) -> np.ndarray:
    """Row order of ``sort_values()`` on ``values`` (see :func:`order_desc`)."""
    return _order(np.asarray(values), "stable" if stable else "quicksort", True)


def _order(values: np.ndarray, kind: Literal["stable", "quicksort"], ascending: bool) -> np.ndarray:
    """``nargsort(values, kind, ascending)`` (NaN last): its steps in NumPy for integer
    and float arrays (pandas' function costs 10-20 us of checks a call), pandas' own
    for anything else."""
    if values.ndim != 1 or values.dtype.kind not in "iuf":
        return nargsort(values, kind=kind, ascending=ascending)
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            return nargsort(values, kind=kind, ascending=ascending)
    idx = np.arange(len(values))
    if ascending:
        return idx[values.argsort(kind=kind)]
    # as nargsort: reversed, sorted, reversed back (ties keep nargsort's order)
    return idx[::-1][values[::-1].argsort(kind=kind)][::-1]


def ratio_pct(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """100 * num / den, NaN where den is not positive (``den.where(den > 0)``)."""
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    return 100.0 * num / np.where(den > 0, den, np.nan)
