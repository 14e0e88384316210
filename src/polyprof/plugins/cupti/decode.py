"""Activity records -> NumPy columns, one kind at a time, without a Python object per record.

Every field is one fancy index: records start on 8-byte boundaries and CUPTI's fields
are naturally aligned, so the blob viewed as the field's type, indexed at
``(record offset + field offset) / size``, is the column (a byte gather where a field
is not aligned, which CUPTI's structs never do). Strings (kernel names, NVTX names)
are decoded once per distinct text; kernel names are demangled once per distinct name
(``demangle``: ``polyprof.lowlevel.demangle``'s, which the file readers use too).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ...lowlevel.demangle import demangle
from . import layout
from .buffers import Records, gather

__all__ = ["rows_of", "column", "columns", "text_codes", "texts", "demangle"]


def rows_of(rec: Records, kinds: Iterable[int]) -> np.ndarray:
    """Indices (into ``rec``) of the records of ``kinds``, in buffer order."""
    return np.flatnonzero(np.isin(rec.kinds, list(kinds)))


def column(rec: Records, rows: np.ndarray, field: layout.Field) -> np.ndarray:
    """One field of the records ``rows``."""
    dt = np.dtype(field.dtype)
    pos = rec.offsets[rows] + field.offset
    size = dt.itemsize
    if not len(pos):
        return np.zeros(0, dt)
    if not (pos % size).any() and len(rec.blob) % size == 0:
        return rec.blob.view(dt)[pos // size]
    return gather(rec.blob, pos, dt)


def columns(rec: Records, rows: np.ndarray, fields: dict[str, layout.Field],
            names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The fields ``names`` (all by default) of the records ``rows``."""
    return {n: column(rec, rows, fields[n]) for n in (names if names is not None else fields)}


def text_codes(rec: Records, rows: np.ndarray, slot: int = 0) -> tuple[np.ndarray, list[str | None]]:
    """The texts in string slot ``slot`` of the records ``rows`` as codes into a list of
    distinct texts (None: the record's pointer was NULL), each decoded once."""
    at = rec.strings[rows, slot] if len(rows) else np.zeros(0, np.int64)
    if not len(at):
        return np.zeros(0, np.int64), []
    uniq, inv = np.unique(at, return_inverse=True)
    arena = rec.arena
    vals: list[str | None] = []
    for u in uniq.tolist():
        if u < 0:
            vals.append(None)
            continue
        end = arena.find(b"\0", u)
        vals.append(arena[u:end if end >= 0 else len(arena)].decode("utf-8", "replace"))
    return inv.reshape(-1), vals


def texts(rec: Records, rows: np.ndarray, slot: int = 0) -> np.ndarray:
    """The text in string slot ``slot`` of each record (object array; None where the
    record's pointer was NULL), decoded once per distinct string."""
    codes, vals = text_codes(rec, rows, slot)
    table = np.empty(len(vals), object)
    table[:] = vals
    return table[codes] if len(codes) else np.empty(0, object)
