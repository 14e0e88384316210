"""An analysis table without pandas: named NumPy columns of one length, in order.

Every analysis computes its table as NumPy columns and hands them to
:func:`analyze.frames.frame` once. That makes a pandas DataFrame, what the library's
users get, unless the tables are being computed for the terminal summary
(:func:`analyze.frames.columnar`): then it makes a :class:`Table`, and the summary
never imports pandas (most of what ``polyprof run`` of a small script would
otherwise add; docs/benchmarks.md). The
consumers of the tables on that path (the findings, ``report/terminal.py``) read
columns through :func:`analyze.frames.column`, which takes either kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Table:
    """Columns (1-d NumPy arrays of one length), in order; text columns are ``object``
    arrays, as in the DataFrames the analyses make. Read-only by convention."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, np.ndarray]):
        self.data = data

    def __len__(self) -> int:
        for v in self.data.values():
            return len(v)
        return 0

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def take(self, rows: np.ndarray) -> "Table":
        """The rows at the positions ``rows`` (or a boolean mask), in that order."""
        return Table({k: v[rows] for k, v in self.data.items()})

    def to_pandas(self) -> "pd.DataFrame":
        """The DataFrame the analysis makes outside :func:`~analyze.frames.columnar`."""
        from .frames import frame

        return frame(self.data)

    @classmethod
    def from_pandas(cls, df: "pd.DataFrame") -> "Table":
        from .frames import column

        return cls({c: column(df, c) for c in df.columns.tolist()})

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.data)})"
