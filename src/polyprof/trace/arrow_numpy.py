"""NumPy arrays of Arrow columns (a store's Parquet, a .polyprof file's), without
importing pandas.

``to_numpy`` of a pyarrow array imports pandas on its first call, some 45 MiB of a
``summary STORE``'s peak and 0.3 s of loading a trace, for nothing either uses. :func:`values` reads a fixed-width
column's values from its buffers instead (no copy for one chunk); :func:`valid` its
validity. Columns with nulls, and other types, go through ``to_numpy`` as before.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: pyarrow's name of a fixed-width type -> its NumPy dtype
_DTYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
           "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
           "halffloat": np.float16, "float": np.float32, "double": np.float64}


def _chunks(col: pa.ChunkedArray | pa.Array) -> list[pa.Array]:
    return list(col.chunks) if isinstance(col, pa.ChunkedArray) else [col]


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buf, np.uint8), count=offset + n, bitorder="little")[offset:].astype(bool)


def _one(a: pa.Array) -> np.ndarray:
    dtype = _DTYPES.get(str(a.type))
    if a.null_count:
        return a.to_numpy(zero_copy_only=False)
    if dtype is not None:
        return np.frombuffer(a.buffers()[1], dtype, len(a), a.offset * np.dtype(dtype).itemsize)
    if pa.types.is_boolean(a.type):
        return _bits(a.buffers()[1], a.offset, len(a))
    return a.to_numpy(zero_copy_only=False)


def values(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """``col.to_numpy()`` (read-only where it shares the column's buffer)."""
    parts = [_one(a) for a in _chunks(col) if len(a)]
    if len(parts) == 1:
        return parts[0]
    if parts:
        return np.concatenate(parts)
    dtype = _DTYPES.get(str(col.type))
    return np.zeros(0, dtype if dtype is not None else bool if pa.types.is_boolean(col.type) else object)


def valid(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """``col.is_valid().to_numpy()``: True where a value is present."""
    parts = [np.ones(len(a), bool) if a.buffers()[0] is None or not a.null_count else _bits(a.buffers()[0], a.offset, len(a))
             for a in _chunks(col)]
    return np.concatenate(parts) if parts else np.zeros(0, bool)
