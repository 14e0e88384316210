"""The analyses' tables, built from NumPy columns in one step.

A summary builds a dozen small tables; with pandas' general constructor, a sort and a
few derived columns each, their pandas overhead was most of a small
trace's summary. Here a table is computed as NumPy columns (sorted with
:func:`order_desc` / :func:`order_asc`, which order exactly as pandas'
``sort_values(kind="stable")``) and handed over once (:func:`frame`): to pandas, with
text columns kept as NumPy object columns (pandas 3 would make them Arrow strings, whose
conversion and ``take`` cost about a quarter of all the analyses), or, while the
terminal summary computes them (:func:`columnar`), as a :class:`~analyze.table.Table`
without importing pandas at all. Consumers read columns with :func:`column` and
:func:`labels`, which take either.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

import numpy as np

from ..trace.factorize import factorize  # noqa: F401  (pd.factorize without pandas: where the analyses find it)
from .table import Table

if TYPE_CHECKING:
    import pandas as pd

#: set while :func:`columnar` is active: :func:`frame` makes a Table, not a DataFrame
_COLUMNAR: ContextVar[bool] = ContextVar("polyprof_columnar", default=False)


@contextmanager
def columnar(on: bool = True) -> Iterator[None]:
    """Within it (in this thread or task), the analyses return :class:`Table` s (``on``
    False: nothing changes)."""
    if not on:
        yield
        return
    token = _COLUMNAR.set(True)
    try:
        yield
    finally:
        _COLUMNAR.reset(token)


def _column(v: Any) -> np.ndarray | None:
    """``v`` as a 1-d array of the dtype pandas would infer for it, or None where that
    is not simple to tell."""
    if isinstance(v, np.ndarray):
        return v if v.ndim == 1 else None
    if not isinstance(v, (list, tuple)):
        return None
    if not len(v):
        return np.zeros(0, object)  # pandas' dtype for an empty list
    kinds = set(map(type, v))
    if kinds == {str}:
        out = np.empty(len(v), object)
        out[:] = v
        return out
    if kinds <= _INTS:  # beyond int64, pandas' uint64 or object
        return np.array(v, np.int64) if -2 ** 63 <= min(v) and max(v) < 2 ** 63 else None
    if kinds <= _NUMBERS:
        return np.array(v, np.float64)
    if kinds <= _NUMBERS | {type(None)} and kinds & _NUMBERS:  # numbers with gaps: float, NaN in the gaps
        return np.array([np.nan if x is None else x for x in v], np.float64)
    if kinds == {bool}:
        return np.array(v, bool)
    return None  # None alone, text with gaps, NumPy scalars, objects: pandas infers


_INTS = {int, np.int64}
_NUMBERS = {int, np.int64, float, np.float64}


def frame(columns: dict[str, Any], index: Sequence[Any] | None = None,
          order: np.ndarray | None = None) -> Any:
    """The table of ``columns`` (each a NumPy array or a list; text stays ``object``),
    rows taken in ``order`` when given (the index too): a pandas DataFrame, labels an
    object Index; under :func:`columnar`, a :class:`Table` (no index).

    NumPy arrays and lists of text go to pandas as they are, in one block-manager build;
    a frame with any other column (a Series, a list of mixed values) goes through
    pandas' constructor, which infers those as it always has (under :func:`columnar`
    too: the table is then taken from that DataFrame).
    """
    arrays = [_column(v) for v in columns.values()]
    n = len(arrays[0]) if arrays and arrays[0] is not None else -1
    direct = bool(arrays) and all(a is not None and len(a) == n for a in arrays)
    if _COLUMNAR.get() and index is None:
        if not columns:
            return Table({})
        if direct:
            return Table({k: a if order is None else a[order] for k, a in zip(columns, arrays) if a is not None})
        return Table.from_pandas(_pandas_frame(columns, None, order, arrays, False))
    return _pandas_frame(columns, index, order, arrays, direct)


def _pandas_frame(columns: dict[str, Any], index: Sequence[Any] | None, order: np.ndarray | None,
                  arrays: list[np.ndarray | None], direct: bool) -> "pd.DataFrame":
    import pandas as pd

    idx: pd.Index | None = index if index is None or isinstance(index, pd.Index) else pd.Index(index, dtype=object)
    n = len(arrays[0]) if direct else -1  # type: ignore[arg-type]
    if direct and (idx is None or len(idx) == n):
        labels = _labels(tuple(columns)).view()  # its own object (a name set on it stays its own)
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
def _labels(names: tuple[str, ...]) -> "pd.Index":
    """The column labels of a table: one object Index per set of names, built once (through
    pandas' constructor each costs a set-up, and every table of a summary needs one); tables get views of it. The names are strings, so the Index is
    made straight from their object array, as the constructor would make it."""
    import pandas as pd

    a = np.empty(len(names), object)
    a[:] = names
    simple = getattr(pd.Index, "_simple_new", None)
    return simple(a) if simple is not None and all(type(n) is str for n in names) else pd.Index(a, dtype=object)


def _general(columns: dict[str, Any], index: "pd.Index | None") -> "pd.DataFrame":
    """pandas' constructor, text columns kept ``object``."""
    import pandas as pd

    def keep(v: Any) -> Any:
        if isinstance(v, np.ndarray) and v.dtype != object or isinstance(v, pd.Series):
            return v
        if not isinstance(v, np.ndarray) and len(v) and not isinstance(v[0], str):
            return v
        return pd.Series(v, dtype=object, index=index)

    # labels too (an inferred str Index is Arrow, slow on first use): set after building
    df = pd.DataFrame({i: keep(v) for i, v in enumerate(columns.values())}, index=index)
    df.columns = pd.Index(list(columns), dtype=object)
    return df


def column(df: Any, c: str) -> np.ndarray:
    """Column ``c`` of a :class:`Table` or a DataFrame as a NumPy array: ``df[c].to_numpy()``,
    without building the Series (a summary reads a hundred columns) where the
    column is one NumPy array of its own."""
    if isinstance(df, Table):
        return df[c]
    names = df.columns.tolist()  # found in the list: get_loc builds a hash table per new Index
    a = None
    if names.count(c) == 1:
        try:
            a = df._get_column_array(names.index(c))
        except (AttributeError, TypeError):  # pandas without it: the public way
            a = None
    return a if isinstance(a, np.ndarray) else df[c].to_numpy()


def labels(df: Any) -> list[str]:
    """The column names of a :class:`Table` or a DataFrame."""
    return df.columns if isinstance(df, Table) else df.columns.tolist()


def rows_frame(rows: list[tuple], columns: list[str]) -> Any:
    """:func:`frame` from row tuples."""
    return frame({c: [r[i] for r in rows] for i, c in enumerate(columns)})


def empty_frame(columns: Sequence[str], text: Sequence[str] = (), dtype: Any = np.int64) -> Any:
    """A table with no rows: ``columns`` of ``dtype``, those in ``text`` object columns;
    labels as :func:`frame` makes them (an empty table built by ``pd.DataFrame`` from
    a dict got Arrow labels, slow on first use in a fresh process)."""
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
    """pandas' ``nargsort(values, kind, ascending)`` (NaN last): its steps in NumPy for
    numbers (pandas' function pays its checks on every call) and for text (an object
    array of str, which nothing in it is missing from); pandas' own for anything else."""
    if values.ndim != 1:
        return _nargsort(values, kind, ascending)
    if values.dtype.kind in "iu" or values.dtype == object and all(type(v) is str for v in values.tolist()):
        missing = None
    elif values.dtype.kind == "f":
        missing = np.isnan(values)
    else:
        return _nargsort(values, kind, ascending)
    idx = np.arange(len(values))
    if missing is not None and missing.any():  # as nargsort: the rest sorted, then the NaN in their order
        keep = np.flatnonzero(~missing)
        return np.concatenate([keep[_order(values[keep], kind, ascending)], np.flatnonzero(missing)])
    if ascending:
        return idx[values.argsort(kind=kind)]
    # as nargsort: reversed, sorted, reversed back (ties keep nargsort's order)
    return idx[::-1][values[::-1].argsort(kind=kind)][::-1]


def _nargsort(values: np.ndarray, kind: Literal["stable", "quicksort"], ascending: bool) -> np.ndarray:
    from pandas.core.sorting import nargsort

    return nargsort(values, kind=kind, ascending=ascending)


def ratio_pct(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """100 * num / den, NaN where den is not positive (``den.where(den > 0)``)."""
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    return 100.0 * num / np.where(den > 0, den, np.nan)
