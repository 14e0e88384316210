"""polyprof's table: what every analysis returns (named NumPy columns of one length, in order).

Every analysis computes its table as NumPy columns and hands them to
:func:`analyze.frames.frame` once, which makes a :class:`Table`: in the terminal
summary, ``--json``, the HTML report, the ranks' workers and the library alike, and
without importing pandas (its cost in a fresh process: docs/benchmarks.md). pandas,
Arrow and polars are at the edge: :meth:`Table.to_pandas`, :meth:`Table.to_arrow`,
:meth:`Table.to_polars`. Text columns are NumPy ``object`` arrays of ``str``; numbers
are int64 / float64 (NaN where a value is missing); times are integer nanoseconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from .ordering import order_asc, order_desc

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: rows :func:`repr` shows from the top and from the bottom of a long table
_REPR_HEAD, _REPR_TAIL = 10, 5
#: characters of a text value :func:`repr` shows
_REPR_TEXT = 40

_INTS = {int, np.int64}
_NUMBERS = {int, np.int64, float, np.float64}


def as_column(v: Any) -> np.ndarray:
    """``v`` (a NumPy array, a list or tuple, a pandas Series) as a 1-d column, typed as
    pandas' constructor types a list: text stays ``object``, ints int64 (uint64 beyond,
    object beyond that), numbers with gaps (None) float64 with NaN, bools bool; text or
    bools with gaps, nested lists and other objects ``object``."""
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise ValueError(f"a table column must be 1-d, not {v.ndim}-d")
        return v
    if hasattr(v, "isna") and hasattr(v, "to_numpy"):  # a pandas Series: None where text is missing
        return as_column(np.asarray(_from_series(v)))
    if hasattr(v, "to_numpy") and not isinstance(v, (list, tuple)):  # an Arrow array
        return as_column(np.asarray(v.to_numpy()))
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"a table column is an array or a list, not {type(v).__name__}")
    if not len(v):
        return np.zeros(0, object)
    kinds = set(map(type, v))
    if kinds == {str}:
        return _objects(v)
    if kinds <= _INTS:
        lo, hi = min(v), max(v)
        if -2 ** 63 <= lo and hi < 2 ** 63:
            return np.array(v, np.int64)
        return np.array(v, np.uint64) if lo >= 0 and hi < 2 ** 64 else _objects(v)
    if kinds <= _NUMBERS:
        return np.array(v, np.float64)
    if kinds <= _NUMBERS | {type(None)} and kinds & _NUMBERS:  # numbers with gaps: float, NaN in the gaps
        return np.array([np.nan if x is None else x for x in v], np.float64)
    if kinds == {bool} or kinds == {np.bool_}:
        return np.array(v, bool)
    if all(issubclass(k, np.number) for k in kinds):  # NumPy scalars of other widths
        return np.array(v)
    return _objects(v)


def _objects(v: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(v), object)
    out[:] = list(v) if not isinstance(v, list) else v
    if any(isinstance(x, (list, tuple)) for x in v):  # nested sequences: element by element
        for i, x in enumerate(v):
            out[i] = x
    return out


class Table:
    """Columns (1-d NumPy arrays of one length), in order. Read-only by convention:
    the methods return new tables sharing the columns they keep.

    ``t["col"]`` is a column (a NumPy array), ``t[["a", "b"]]`` a table of those
    columns, ``t[t["count"] > 2]`` the rows where a mask holds, ``len(t)`` the rows, ``t.columns`` the names. ``t.rows()`` / ``t.to_dicts()``
    give Python values; ``t.to_pandas()``, ``t.to_arrow()``, ``t.to_polars()`` convert.
    """

    __slots__ = ("data",)

    def __init__(self, data: Mapping[str, Any] | None = None):
        cols = {str(k): as_column(v) for k, v in (data or {}).items()}
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"table columns differ in length: "
                             f"{', '.join(f'{k}={len(v)}' for k, v in cols.items())}")
        self.data = cols

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        for v in self.data.values():
            return len(v)
        return 0

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), len(self.data)

    def __getitem__(self, key: str | Sequence[str] | np.ndarray) -> Any:
        """``t["col"]``: a column; ``t[["a", "b"]]``: those columns; ``t[mask]`` or
        ``t[positions]`` (a NumPy array): those rows (:meth:`take`)."""
        if isinstance(key, str):
            try:
                return self.data[key]
            except KeyError:
                raise KeyError(f"no column {key!r}; columns: {', '.join(self.data)}") from None
        if isinstance(key, np.ndarray):
            return self.take(key)
        return self.select(key)

    def __contains__(self, name: object) -> bool:
        return name in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)

    def rows(self) -> list[tuple]:
        """The rows as tuples of Python values (NaN stays a float NaN)."""
        return list(zip(*(v.tolist() for v in self.data.values()))) if self.data else []

    def to_dicts(self) -> list[dict[str, Any]]:
        """The rows as ``{column: Python value}`` dicts."""
        names = self.columns
        return [dict(zip(names, r)) for r in self.rows()]

    def equals(self, other: "Table") -> bool:
        """Same columns in the same order, of the same dtypes and values (NaN equal to NaN)."""
        if not isinstance(other, Table) or self.columns != other.columns or len(self) != len(other):
            return False
        for name, a in self.data.items():
            b = other.data[name]
            if a.dtype != b.dtype:
                return False
            if a.dtype.kind in "fc" or a.dtype.kind in "mM":
                if not np.array_equal(a, b, equal_nan=True):
                    return False
            elif a.dtype == object:
                if any(not (x == y or (x != x and y != y)) for x, y in zip(a.tolist(), b.tolist())):
                    return False
            elif not np.array_equal(a, b):
                return False
        return True

    # ------------------------------------------------------------------ new tables
    def take(self, rows: np.ndarray | Sequence[int]) -> "Table":
        """The rows at the positions ``rows`` (or where a boolean mask is true), in that order."""
        rows = np.asarray(rows)
        if rows.dtype.kind not in "biu":  # an empty list: no rows
            rows = rows.astype(np.intp)
        return _table({k: v[rows] for k, v in self.data.items()})

    def head(self, n: int = 5) -> "Table":
        return _table({k: v[:n] for k, v in self.data.items()})

    def select(self, columns: str | Sequence[str], *more: str) -> "Table":
        """A table of ``columns``, in that order: names given one by one
        (``select("name", "total_ns")``) or as one list."""
        names = [columns, *more] if isinstance(columns, str) else [*columns, *more]
        return _table({c: self[c] for c in names})

    def with_columns(self, **columns: Any) -> "Table":
        """This table with ``columns`` added at the end (or replaced where they are)."""
        return Table({**self.data, **columns})

    def sort_by(self, column: str, descending: bool = False, stable: bool = True) -> "Table":
        """The rows ordered by one column (missing values last; ``stable``: ties keep
        their order)."""
        order = (order_desc if descending else order_asc)(self[column], stable)
        return self.take(order)

    @staticmethod
    def concat(tables: Sequence["Table"]) -> "Table":
        """The rows of ``tables`` one after another. Columns are matched by name, in
        order of first appearance; a column's dtype is what NumPy makes of its non-empty
        parts, and a column some tables lack keeps it, with the missing value of its
        kind there (:func:`missing`): NaN in a float column, None in a text column, -1
        in an integer column, False in a bool one, NaT in a time one (an unsigned
        column becomes float64 with NaN)."""
        tables = list(tables)
        if not tables:
            return Table()
        names = list(dict.fromkeys(c for t in tables for c in t.columns))
        out = {}
        for c in names:
            parts = [t.data.get(c) for t in tables]
            have = [p for p in parts if p is not None and len(p)] or [p for p in parts if p is not None]
            like = np.result_type(*[p.dtype for p in have])
            if any(p is None and len(t) for p, t in zip(parts, tables)):
                like = _with_gaps(like)
            filled = [p if p is not None else missing(like, len(t)) for p, t in zip(parts, tables)]
            keep = [p for p in filled if len(p)] or filled[:1]
            out[c] = np.concatenate(keep).astype(like, copy=False)
        return _table(out)

    # ------------------------------------------------------------------ the edge
    def to_pandas(self) -> "pd.DataFrame":
        """A pandas DataFrame of the same columns (text stays ``object``, not Arrow
        strings), a RangeIndex."""
        import pandas as pd

        cols = {k: pd.Series(v, dtype=object, copy=False) if v.dtype == object else v for k, v in self.data.items()}
        df = pd.DataFrame(cols if cols else None, index=pd.RangeIndex(len(self)))
        df.columns = pd.Index(self.columns, dtype=object)
        return df

    @classmethod
    def from_pandas(cls, df: "pd.DataFrame") -> "Table":
        """The columns of a DataFrame (its index dropped). A missing value of a text (or
        nullable bool) column, ``pd.NA`` or NaN, is None; of a nullable number column NaN."""
        return cls({str(c): _from_series(df[c]) for c in df.columns})

    def to_arrow(self) -> "pa.Table":
        """A pyarrow Table of the same columns (text as strings, NaN kept as NaN)."""
        from ..trace.arrow_arrays import table  # pyarrow: imported only by those who ask

        return table(dict(self.data))

    def to_polars(self) -> Any:
        """A polars DataFrame (needs polars installed), through :meth:`to_arrow`."""
        try:
            import polars
        except ImportError as e:
            raise ImportError("Table.to_polars needs polars: pip install polars") from e
        return polars.from_arrow(self.to_arrow())

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        n, names = len(self), self.columns
        head = f"Table: {n} row{'s' if n != 1 else ''} x {len(names)} column{'s' if len(names) != 1 else ''}"
        if not names:
            return head
        shown = np.arange(n) if n <= _REPR_HEAD + _REPR_TAIL else \
            np.concatenate([np.arange(_REPR_HEAD), np.arange(n - _REPR_TAIL, n)])
        cells = [[_cell(x) for x in self.data[c][shown].tolist()] for c in names]
        right = [self.data[c].dtype != object for c in names]
        widths = [max([len(c), *map(len, col)]) for c, col in zip(names, cells)]

        def line(values: Sequence[str]) -> str:
            return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

        out = [head, line(names)]
        for i in range(len(shown)):
            if i == _REPR_HEAD and n > _REPR_HEAD + _REPR_TAIL:
                out.append(f"... {n - _REPR_HEAD - _REPR_TAIL} more rows ...")
            out.append(line([col[i] for col in cells]))
        return "\n".join(out)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    s = str(v)
    # cut in the middle, as the CLI's tables do: kernels alike in their first 40 characters
    # (``void at::native::vectorized_elementwise_kernel<...>``) stay apart by their ends
    half = (_REPR_TEXT - 1) // 2
    return s if len(s) <= _REPR_TEXT else s[:half] + "…" + s[len(s) - (_REPR_TEXT - 1 - half):]


def _with_gaps(dtype: np.dtype) -> np.dtype:
    """The dtype of a column of ``dtype`` with missing values in it: the same where its
    kind has a missing value (:func:`missing`), float64 for unsigned ints (no value of
    theirs says "none"), ``object`` for NumPy's fixed-width text."""
    if dtype.kind == "u":
        return np.result_type(dtype, np.float64)
    if dtype.kind in "US":
        return np.dtype(object)
    return dtype


def missing(dtype: np.dtype, n: int) -> np.ndarray:
    """``n`` missing values of a column of ``dtype``, as :meth:`Table.concat` fills a
    column a table lacks: None (text, other objects), -1 (signed ints: counts, ids and
    times, as ``launch_ns`` says "none"), False (flags), NaT (datetimes, timedeltas),
    NaN (floats; also what an unsigned column becomes: :func:`_with_gaps`)."""
    if dtype.kind == "O":
        return np.full(n, None, object)
    if dtype.kind == "i":
        return np.full(n, -1, dtype)
    if dtype.kind == "b":
        return np.zeros(n, bool)
    if dtype.kind in "mM":
        return np.full(n, np.datetime64("NaT") if dtype.kind == "M" else np.timedelta64("NaT"), dtype)
    return np.full(n, np.nan, dtype if dtype.kind in "fc" else np.float64)


def _from_series(s: Any) -> np.ndarray:
    """A pandas Series as a column: a text or nullable-bool column (pandas' ``str``,
    ``string``, ``boolean`` dtypes, or ``pd.NA`` in an ``object`` one) with None where
    it is missing, never pandas' ``pd.NA`` (a nullable number column comes as float64
    with NaN from ``to_numpy``)."""
    v = s.to_numpy()
    if v.dtype != object:
        return v
    gaps = np.asarray(s.isna().to_numpy(), bool)
    if not gaps.any():
        return v
    import pandas as pd  # already imported: the caller holds a Series

    v = v.copy()
    if isinstance(s.dtype, np.dtype):  # plain object: only pandas' NA (a NaN there may be a number's)
        at = np.flatnonzero(gaps)
        v[at[[x is pd.NA for x in v[at].tolist()]]] = None  # (a look at the missing values only)
    else:
        v[gaps] = None
    return v


def _table(cols: dict[str, np.ndarray]) -> Table:
    """A Table of columns known to be 1-d arrays of one length (no checks)."""
    t = Table.__new__(Table)
    t.data = cols
    return t
