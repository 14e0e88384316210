"""Integer codes for the values of a column (names, pids, tids) and distinct codes."""

from __future__ import annotations

from typing import Any, Callable

import msgspec
import numpy as np



def _codes(values: list, table: dict, make: Callable[[Any], int]) -> list[int]:
    """Ids for values through ``table`` (filled by ``make`` for new values)."""
    try:
        return [table[v] for v in values]
    except KeyError:  # new values: added in order of first appearance, then looked up in C
        try:
            for v in dict.fromkeys(values):
                if v not in table:
                    table[v] = make(v)
            return [table[v] for v in values]
        except TypeError:  # an unhashable value (nothing was added): the general path
            pass
    except TypeError:
        pass
    out = []
    for v in values:
        try:
            code = table.get(v)
        except TypeError:  # a list or an object where a name or an id belongs: keyed by its JSON text
            v = msgspec.json.encode(v).decode()
            code = table.get(v)
        if code is None:
            code = table[v] = make(v)
        out.append(code)
    return out



def _distinct(codes: np.ndarray, inverse: bool = False) -> Any:
    """Sorted distinct values of small non-negative integer codes (and each one's index).

    A counting pass instead of np.unique, which sorts, and whose first call imports
    numpy.ma just to check for masked arrays."""
    codes = np.asarray(codes, np.int64)
    if len(codes) and codes.max() > 4 * len(codes) + 4096:  # sparse: counting would waste memory
        return np.unique(codes, return_inverse=inverse)  # type: ignore[call-overload]
    present = np.bincount(codes) > 0 if len(codes) else np.zeros(0, bool)
    uniq = np.flatnonzero(present)
    if not inverse:
        return uniq
    index = np.cumsum(present) - 1
    return uniq, index[codes]


def same_id(v: Any) -> Any:
    """The other spelling of a pid/tid that Chrome's viewer takes for the same thread: the
    int of a decimal string ("25738" -> 25738) and the string of an int; None if none.
    (Kineto of torch 1.8-1.9 wrote X events' tids as strings and flows' as ints.)"""
    if type(v) is int:
        return str(v)
    if type(v) is str and v and len(v) < 20 and (v.isdigit() or (v[0] == "-" and v[1:].isdigit())) \
            and v.isascii() and str(int(v)) == v:
        return int(v)
    return None


def _id_code(table: dict, values: list, v: Any) -> int:
    """The code of a pid/tid value new to ``table``: its other spelling's (``same_id``),
    else the next one; ``values[code]`` is the value (the int where both are seen)."""
    other = same_id(v)
    if other is not None:
        code = table.get(other)
        if code is not None:
            if type(v) is int:
                values[code] = v
            return code
    values.append(v)
    return len(values) - 1


def _is_id(v: Any) -> bool:
    """An integer pid/tid that fits the trace's int64 ids (bool is not one)."""
    return type(v) is int and -2**63 <= v < 2**63


def _hashable(v: Any) -> bool:
    return isinstance(v, (int, str, float, type(None)))


