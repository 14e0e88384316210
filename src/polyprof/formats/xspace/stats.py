"""XStat values into stat columns, and the small values polyprof's own stats hold.

One rule for both levels (event stats come as columns from ``decode``, metadata stats
as Python values): integers stay int64, or uint64 when a value needs it; integers and
doubles together become float64; anything with text or bytes becomes an object column
(numbers in it as text, as ``trace.stats.as_values`` does); int64 and huge uint64
values under one key keep their exact values as text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import TraceFormatError



def typed(vals: list[Any]) -> np.ndarray:
    """A stat column from Python values (protobuf's: int, float, str, bytes)."""
    kinds = {type(v) for v in vals}
    if kinds <= {int}:
        hi, lo = max(vals), min(vals)
        if hi < 2**63:
            return np.asarray(vals, dtype=np.int64)
        if lo >= 0:
            return np.asarray(vals, dtype=np.uint64)
        arr = np.empty(len(vals), object)  # int64 and huge uint64 under one key
        arr[:] = [str(v) for v in vals]
        return arr
    if kinds <= {int, float}:
        return np.asarray(vals, dtype=np.float64)
    arr = np.empty(len(vals), object)
    arr[:] = vals
    return arr


def column(kind: np.ndarray, ints: np.ndarray, dbls: np.ndarray, objs: np.ndarray) -> np.ndarray:
    """A stat column from decoded values (kind codes as in ``decode.EventColumns``, 7 for
    XEvent.num_occurrences; refs already resolved to their names in ``objs``), by the
    same rule as :func:`typed`."""
    kind = np.where(kind == 7, 3, kind)  # num_occurrences from XEvent.data: an int64
    seen = np.bincount(kind, minlength=8).astype(bool)
    if not seen[[0, 1, 4, 5, 6, 7]].any():  # uint64 and int64 only
        is_u = kind == 2
        huge = is_u & (ints < 0)  # uint64 values >= 2**63
        if not huge.any():
            return ints.astype(np.int64, copy=True)
        if not (ints[~is_u] < 0).any():
            return ints.view(np.uint64).copy()
        return np.asarray([str(v) for v in python_values(kind, ints, dbls, objs)], object)
    if not seen[[0, 4, 5, 6, 7]].any():  # numbers only
        out = ints.astype(np.float64)
        u = kind == 2
        out[u] = ints[u].view(np.uint64).astype(np.float64)
        d = kind == 1
        out[d] = dbls[d]
        return out
    out = np.empty(len(kind), object)
    out[:] = python_values(kind, ints, dbls, objs)
    return out


def python_values(kind: np.ndarray, ints: np.ndarray, dbls: np.ndarray, objs: np.ndarray) -> list[int | float | str | bytes | None]:
    """Decoded values as Python objects (what protobuf's messages would give)."""
    out = objs.copy()
    i = (kind == 2) | (kind == 3)
    if i.any():
        vals = np.where(kind[i] == 2, 0, ints[i]).astype(object)
        u = kind[i] == 2
        vals[u] = ints[i][u].view(np.uint64).astype(object)
        out[i] = vals
    d = kind == 1
    if d.any():
        out[d] = dbls[d].astype(object)
    return out.tolist()


def int_stat(v: object, source: str, what: str) -> int:
    """An integer polyprof wrote (as int or decimal text); TraceFormatError if it is not one."""
    if type(v) is int and -2**63 <= v < 2**63:
        return v
    if type(v) is str and len(v) < 21 and v.strip().lstrip("-").isdigit() and -2**63 <= int(v) < 2**63:
        return int(v)
    if not v:
        return 0
    raise TraceFormatError(source, f"damaged {what}: {str(v)[:60]!r} is not an integer")


def flow_out(val: object) -> tuple[int, int, str] | None:
    """(key, flow id, category) of a polyprof flow-out stat ``key:id:category``; None if damaged."""
    parts = str(val).split(":", 2)
    if len(parts) != 3 or not all(p.lstrip("-").isdigit() and len(p) < 19 for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1]), parts[2]


def flow_in(val: object) -> int | None:
    """The key of a polyprof flow-in stat (int or decimal text); None if damaged."""
    if type(val) is int or (type(val) is str and val.lstrip("-").isdigit()):
        return int(val)
    return None


def layout(raw: Any) -> dict[str, Any]:
    """A JSON object polyprof wrote into a plane stat; {} if absent or damaged."""
    if not raw:
        return {}
    import orjson

    try:
        out = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}

