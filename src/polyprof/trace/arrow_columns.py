"""Arrow columns as their buffers, built from NumPy arrays and Python lists without pyarrow.

An Arrow array of the types polyprof writes is a few buffers (the Arrow columnar
format): a validity bitmap (absent when nothing is null), then the values
(fixed-width types: the values themselves; booleans: a bitmap; strings and binary:
offsets, then the bytes). :class:`Column` holds those buffers; :func:`column` makes
one from values. Both writers take these: ``trace/arrow_write.py`` (Arrow IPC in
Python, no pyarrow) and ``trace/arrow_arrays.py`` (``pa.Array.from_buffers``, for
the pyarrow writer), so the two write the same arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

#: the types written, by name (pyarrow's names), with the NumPy dtype of their values
NUMERIC = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
           "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
           "float16": np.float16, "float32": np.float32, "float64": np.float64}
TEXT = ("string", "binary", "large_string", "large_binary")
TYPES = (*NUMERIC, "bool", *TEXT)
#: offsets of string and binary arrays are int32 unless the bytes reach this
LARGE = 2**31 - 1


class ColumnTypeError(TypeError):
    """Values that the buffer builders do not handle (the caller falls back to pyarrow)."""


class Column(NamedTuple):
    """One Arrow array: ``type`` (a name of :data:`TYPES`), its length and null count,
    and its buffers in Arrow's order (validity or None, then the values; for text the
    offsets, then the bytes). (A named tuple: the crash journal's writer makes columns
    at every run's start, and a frozen dataclass is slower to define.)"""

    type: str
    length: int
    null_count: int
    buffers: tuple[Any, ...]  # each None, bytes or a C-contiguous NumPy array

    @property
    def nbytes(self) -> int:
        return sum(0 if b is None else (b.nbytes if isinstance(b, np.ndarray) else len(b)) for b in self.buffers)


def type_of(dtype: np.dtype) -> str:
    """The Arrow type name of a NumPy dtype (ints, unsigned ints, floats, bool)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "bool"
    name = {"i": "int", "u": "uint", "f": "float"}.get(dtype.kind)
    if name is None or dtype.itemsize not in (1, 2, 4, 8) or (dtype.kind == "f" and dtype.itemsize == 1):
        raise ColumnTypeError(f"no Arrow column for NumPy dtype {dtype}")
    return f"{name}{dtype.itemsize * 8}"


def validity(valid: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(validity bitmap or None, null count) of a bool mask (True = valid)."""
    nulls = int(len(valid) - np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return np.packbits(valid, bitorder="little"), nulls


def numeric(values: Any, type: str | None = None) -> Column:
    """A fixed-width column (ints, floats, bools) from anything NumPy turns into one;
    None in a list is a null (stored as 0)."""
    if type is not None and type not in NUMERIC and type != "bool":
        raise ColumnTypeError(f"{type} is not a fixed-width type")
    dtype = None if type is None else (np.bool_ if type == "bool" else NUMERIC[type])
    bitmap, nulls = None, 0
    if not isinstance(values, np.ndarray) and any(v is None for v in values):
        valid = np.fromiter((v is not None for v in values), bool, len(values))
        bitmap, nulls = validity(valid)
        values = [0 if v is None else v for v in values]
    try:
        arr = np.asarray(values, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise ColumnTypeError(str(e)) from None
    if arr.ndim != 1 or arr.dtype.kind not in "iufb":
        raise ColumnTypeError(f"values of dtype {arr.dtype} and {arr.ndim} dimension(s)")
    t = type or type_of(arr.dtype)
    data = np.packbits(arr, bitorder="little") if t == "bool" else np.ascontiguousarray(arr, arr.dtype.newbyteorder("<"))
    return Column(t, len(arr), nulls, (bitmap, data))


def text(values: Sequence[Any], binary: bool = False, large: bool = False) -> Column:
    """A string (or binary) column from str (bytes) values and None; large offsets
    (``large_string``) when asked for or when the bytes reach 2 GiB."""
    n = len(values)
    valid = np.fromiter((v is not None for v in values), bool, n)
    try:
        if binary:
            parts = [b"" if v is None else bytes(v) for v in values]
        else:
            parts = [b"" if v is None else v.encode("utf-8", "surrogatepass") for v in values]
    except (AttributeError, TypeError) as e:
        raise ColumnTypeError(str(e)) from None
    lengths = np.fromiter(map(len, parts), np.int64, n)
    large = large or int(lengths.sum()) >= LARGE
    offsets = np.zeros(n + 1, "<i8" if large else "<i4")  # Arrow buffers are little-endian
    np.cumsum(lengths, out=offsets[1:])
    bitmap, nulls = validity(valid)
    t = ("large_" if large else "") + ("binary" if binary else "string")
    return Column(t, n, nulls, (bitmap, offsets, b"".join(parts)))


def gathered_text(codes: np.ndarray, encoded: np.ndarray) -> Column:
    """A string column whose value ``i`` is ``encoded[codes[i]]`` (UTF-8 bytes, an
    object array of the distinct values): names interned once, gathered in C loops."""
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))[codes]
    large = int(lengths.sum()) >= LARGE
    offsets = np.zeros(len(codes) + 1, "<i8" if large else "<i4")
    np.cumsum(lengths, out=offsets[1:])
    return Column("large_string" if large else "string", len(codes), 0, (None, offsets, b"".join(encoded[codes])))


def sparse_text(n: int, rows: np.ndarray, values: Sequence[str]) -> Column:
    """A string column of ``n`` nulls but at ``rows`` (ascending), which hold ``values``."""
    parts = [v.encode("utf-8", "surrogatepass") for v in values]
    lengths = np.zeros(n, np.int64)
    lengths[rows] = np.fromiter(map(len, parts), np.int64, len(parts))
    large = int(lengths.sum()) >= LARGE
    offsets = np.zeros(n + 1, "<i8" if large else "<i4")
    np.cumsum(lengths, out=offsets[1:])
    valid = np.zeros(n, bool)
    valid[rows] = True
    bitmap, nulls = validity(valid)
    return Column("large_string" if large else "string", n, nulls, (bitmap, offsets, b"".join(parts)))


def nulls(n: int, type: str) -> Column:
    """``n`` nulls of ``type``."""
    bitmap = np.zeros((n + 7) // 8, np.uint8)
    if type in TEXT:
        return Column(type, n, n, (bitmap, np.zeros(n + 1, "<i8" if type.startswith("large") else "<i4"), b""))
    if type == "bool":
        return Column(type, n, n, (bitmap, np.zeros((n + 7) // 8, np.uint8)))
    return Column(type, n, n, (bitmap, np.zeros(n, np.dtype(NUMERIC[type]).newbyteorder("<"))))


def column(values: Any, type: str | None = None) -> Column:
    """A column of ``type`` (None: from a NumPy array's dtype) from ``values``;
    :class:`ColumnTypeError` for what these builders do not handle."""
    if isinstance(values, Column):
        return values
    if type in TEXT:
        return text(values, binary="binary" in type, large=type.startswith("large"))
    if type is not None and type not in TYPES:
        raise ColumnTypeError(f"no buffer builder for Arrow type {type}")
    if type is None and not isinstance(values, np.ndarray):
        raise ColumnTypeError("the type of a list of values must be given")
    return numeric(values, type)
