"""Sparse, typed stat columns: a value for some events under one key.

A stat column holds the rows (event indices, ascending) that carry the key and one
value per row. Value arrays are int64, uint64, float64, or object (str / bytes), so
every XSpace stat kind and every Kineto arg fits without a Python object per event
for numeric stats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TraceSchemaError

_NUMERIC = {"i": np.int64, "u": np.uint64, "f": np.float64}


@dataclass
class StatColumn:
    rows: np.ndarray  # int64, ascending, unique
    values: np.ndarray  # int64 | uint64 | float64 | object

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.values):
            raise TraceSchemaError(
                f"stat column has {len(self.rows)} rows but {len(self.values)} values")

    @property
    def kind(self) -> str:
        """'i', 'u', 'f' or 'O' (str/bytes)."""
        return self.values.dtype.kind if self.values.dtype.kind in "iuf" else "O"

    def __len__(self) -> int:
        return len(self.rows)

    def dense(self, n: int, fill: Any = None) -> np.ndarray:
        """Values spread over ``n`` events; rows without the key get ``fill``."""
        if self.kind in "iuf" and fill is not None and not isinstance(fill, str):
            out = np.full(n, fill, dtype=np.result_type(self.values.dtype, np.asarray(fill).dtype))
        else:
            out = np.full(n, fill, dtype=object)
        out[self.rows] = self.values
        return out

    def lookup(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask, values) for ``rows``: which carry the key, and their values."""
        if not len(self.rows):
            return np.zeros(len(rows), bool), self.values[:0]
        pos = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
        mask = self.rows[pos] == rows
        return mask, self.values[pos[mask]]

def as_values(values: Any) -> np.ndarray:
    """Normalise a sequence of stat values to one of the supported dtypes."""
    arr = np.asarray(values)
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False)
    if arr.dtype.kind == "f":
        return arr.astype(np.float64, copy=False)
    out = np.empty(len(arr), dtype=object)
    out[:] = [v if isinstance(v, (str, bytes)) else _to_text(v) for v in values]
    return out


def _to_text(v: Any) -> str:
    if isinstance(v, (list, tuple, dict)):
        import orjson

        return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return str(v)


def merge_columns(parts: list[tuple[np.ndarray, np.ndarray]]) -> StatColumn:
    """One column from (rows, values) parts; numeric kinds widen, anything else -> str."""
    parts = [(np.asarray(r, dtype=np.int64), as_values(v)) for r, v in parts if len(r)]
    if not parts:
        return StatColumn(np.zeros(0, np.int64), np.zeros(0, np.int64))
    kinds = {v.dtype.kind if v.dtype.kind in "iuf" else "O" for _, v in parts}
    if "O" in kinds and len(kinds) > 1:
        parts = [(r, as_values([str(x) for x in v]) if v.dtype.kind != "O" else v) for r, v in parts]
    elif kinds == {"i", "u"}:
        parts = [(r, v.astype(np.int64)) for r, v in parts]
    elif "f" in kinds:
        parts = [(r, v.astype(np.float64)) for r, v in parts]
    rows = np.concatenate([r for r, _ in parts])
    values = np.concatenate([v for _, v in parts])
    if len(rows) > 1 and np.any(np.diff(rows) <= 0):
        order = np.argsort(rows, kind="stable")
        rows, values = rows[order], values[order]
        keep = np.ones(len(rows), bool)
        keep[:-1] = rows[1:] != rows[:-1]  # last value for a row wins
        rows, values = rows[keep], values[keep]
    return StatColumn(rows, values)
