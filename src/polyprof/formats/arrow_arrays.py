"""Arrow arrays from NumPy columns and string lists without importing pandas.

``pyarrow.array`` imports pandas on its first call (to ask whether the input is a
pandas object): 0.3-0.6 s and ~50 MB that `polyprof run` would pay on every run just
to write its journal and its trace. These build the same arrays from their buffers
(``pa.Array.from_buffers``), which does not; anything else falls back to
``pyarrow.array``. Tested against ``pyarrow.array`` (tests/test_arrow_arrays.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa


def _validity(mask: np.ndarray) -> tuple[Any, int]:
    """(validity bitmap or None, null count) of ``mask`` (True = valid)."""
    nulls = int(len(mask) - np.count_nonzero(mask))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(mask, bitorder="little")), nulls


def numeric(values: Any, type: pa.DataType | None = None) -> pa.Array:
    """A fixed-width array (ints, floats, bools) from anything NumPy turns into one."""
    arr = np.asarray(values) if type is None else np.asarray(values, dtype=type.to_pandas_dtype())
    if arr.ndim != 1 or arr.dtype.kind not in "iufb":
        return pa.array(values, type)
    t = type if type is not None else pa.from_numpy_dtype(arr.dtype)
    if arr.dtype.kind == "b":
        data = pa.py_buffer(np.packbits(arr, bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(arr))
    return pa.Array.from_buffers(t, len(arr), [None, data])


def text(values: Sequence[Any], binary: bool = False) -> pa.Array:
    """A string (or binary) array from str (bytes) values and None."""
    n = len(values)
    valid = np.fromiter((v is not None for v in values), bool, n)
    if binary:
        parts = [b"" if v is None else bytes(v) for v in values]
    else:
        parts = [b"" if v is None else v.encode("utf-8", "surrogatepass") for v in values]
    lengths = np.fromiter(map(len, parts), np.int64, n)
    total = int(lengths.sum())
    large = total >= 2**31 - 1
    offsets = np.zeros(n + 1, np.int64 if large else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    t = (pa.large_binary() if large else pa.binary()) if binary else (pa.large_string() if large else pa.string())
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(parts))],
                                 null_count=nulls)


def array(values: Any, type: pa.DataType | None = None) -> pa.Array:
    """``pyarrow.array(values, type)`` for the columns polyprof writes, without pandas."""
    if type is not None and (pa.types.is_string(type) or pa.types.is_binary(type)):
        try:
            return text(values, binary=pa.types.is_binary(type))
        except (AttributeError, TypeError):
            return pa.array(values, type)
    if type is None and isinstance(values, np.ndarray) and values.dtype.kind in "iufb":
        return numeric(values)
    if type is not None and (pa.types.is_integer(type) or pa.types.is_floating(type)):
        if isinstance(values, np.ndarray) or not any(v is None for v in values):
            return numeric(values, type)
        mask = np.fromiter((v is not None for v in values), bool, len(values))
        filled = np.asarray([0 if v is None else v for v in values], dtype=type.to_pandas_dtype())
        bitmap, nulls = _validity(mask)
        return pa.Array.from_buffers(type, len(filled), [bitmap, pa.py_buffer(filled)], null_count=nulls)
    return pa.array(values, type)


def table(columns: dict[str, Any]) -> pa.Table:
    """``pyarrow.table(columns)`` of NumPy columns and arrays, without pandas."""
    arrays = [c if isinstance(c, pa.Array) else array(c) for c in columns.values()]
    return pa.Table.from_arrays(arrays, names=list(columns))
