"""pyarrow arrays from NumPy columns and string lists without importing pandas.

``pyarrow.array`` imports pandas on its first call (to ask whether the input is a
pandas object): time and memory that writing a trace would pay just for that.
These build the same arrays from their buffers (``trace/arrow_columns.py``, then
``pa.Array.from_buffers``), which does not; anything else falls back to
``pyarrow.array``. Tested against ``pyarrow.array`` (tests/test_arrow_arrays.py).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from . import arrow_columns as ac

#: pyarrow's name of a type -> the name arrow_columns uses
_NAMES = {"double": "float64", "float": "float32", "halffloat": "float16"}
_TYPES = {**{n: getattr(pa, n) for n in ac.NUMERIC}, "bool": pa.bool_, "string": pa.string, "binary": pa.binary,
          "large_string": pa.large_string, "large_binary": pa.large_binary}


def type_name(type: pa.DataType) -> str:
    """The arrow_columns name of a pyarrow type."""
    return _NAMES.get(str(type), str(type))


def pyarrow_type(name: str) -> pa.DataType:
    """The pyarrow type of an arrow_columns type name."""
    return _TYPES[name]()


def from_column(col: ac.Column) -> pa.Array:
    """The pyarrow array of a column's buffers (no copy)."""
    buffers = [None if b is None else pa.py_buffer(b) for b in col.buffers]
    return pa.Array.from_buffers(pyarrow_type(col.type), col.length, buffers, null_count=col.null_count)


def array(values: Any, type: pa.DataType | None = None) -> pa.Array:
    """``pyarrow.array(values, type)`` for the columns polyprof writes, without pandas."""
    try:
        return from_column(ac.column(values, None if type is None else type_name(type)))
    except ac.ColumnTypeError:
        return pa.array(values, type)


def table(columns: dict[str, Any]) -> pa.Table:
    """``pyarrow.table(columns)`` of NumPy columns and arrays, without pandas."""
    arrays = [c if isinstance(c, pa.Array) else array(c) for c in columns.values()]
    return pa.Table.from_arrays(arrays, names=list(columns))
