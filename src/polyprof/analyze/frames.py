"""The analyses' tables, built from NumPy columns in one step.

A summary builds a dozen small tables; each is computed as NumPy columns (sorted with
:func:`order_desc` / :func:`order_asc`, the order pandas' ``sort_values`` gave) and
handed over once, to :func:`frame`, which makes a :class:`~analyze.table.Table`:
the one type every analysis returns, whoever calls it. Code that reads tables uses the
Table API (``t[col]``, ``len(t)``, ``t.columns``, ``t.take``) or :func:`column` and
:func:`labels`, which also take a pandas DataFrame (a table a user made).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..trace.factorize import factorize  # noqa: F401  (pd.factorize without pandas: where the analyses find it)
from .ordering import order_asc, order_desc  # noqa: F401  (where the analyses find them)
from .table import Table, _table, as_column


def frame(columns: dict[str, Any], order: np.ndarray | None = None) -> Table:
    """The table of ``columns`` (each a NumPy array or a list, typed by
    :func:`~analyze.table.as_column`: text stays ``object``), rows taken in ``order``
    when given."""
    cols = {k: as_column(v) for k, v in columns.items()}
    if len({len(v) for v in cols.values()}) > 1:
        raise ValueError(f"table columns differ in length: {', '.join(f'{k}={len(v)}' for k, v in cols.items())}")
    if order is not None:
        cols = {k: v[order] for k, v in cols.items()}
    return _table(cols)


def column(df: Any, c: str) -> np.ndarray:
    """Column ``c`` of a :class:`Table` (or of a pandas DataFrame) as a NumPy array."""
    if isinstance(df, Table):
        return df[c]
    return df[c].to_numpy()


def labels(df: Any) -> list[str]:
    """The column names of a :class:`Table` (or of a pandas DataFrame)."""
    return df.columns if isinstance(df, Table) else [str(c) for c in df.columns]


def rows_frame(rows: list[tuple], columns: list[str]) -> Table:
    """:func:`frame` from row tuples."""
    return frame({c: [r[i] for r in rows] for i, c in enumerate(columns)})


def empty_frame(columns: Sequence[str], text: Sequence[str] = (), dtype: Any = np.int64) -> Table:
    """A table with no rows: ``columns`` of ``dtype``, those in ``text`` object columns."""
    return _table({c: np.zeros(0, object if c in text else dtype) for c in columns})


def ratio_pct(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """100 * num / den, NaN where den is not positive (``den.where(den > 0)``)."""
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    return 100.0 * num / np.where(den > 0, den, np.nan)
