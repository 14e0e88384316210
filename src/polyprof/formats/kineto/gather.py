"""One field of many decoded events as a column: ``_gather.c``, or the same in Python.

:func:`codes` is ``np.array([table[e.<field>] for e in events], dtype)``, or None when a
value is not in ``table`` (the collector then numbers the new values its own way);
:func:`values` is ``[e.<field> for e in events]``. The compiled loop reads the structs'
slots directly (faster than the comprehension and ``np.array``); the Python one
is used without the extension and is what tests/test_kineto_gather.py holds it to.
"""

from __future__ import annotations

from operator import attrgetter
from types import MemberDescriptorType
from typing import Any

import numpy as np

from .events import _Event
from ...lowlevel.compiled import optional

_gather = optional(__package__, "_gather")  # built by setup.py; the Python path below otherwise (lowlevel/compiled.py)

_FIELDS = {name: _Event.__dict__.get(name) for name in _Event.__struct_fields__}
if not all(isinstance(d, MemberDescriptorType) for d in _FIELDS.values()):  # a msgspec that lays structs out otherwise
    _gather = None
#: "c" (``_gather.c``) or "python": which one is in use
IMPLEMENTATION = "c" if _gather is not None else "python"


def codes(events: list[_Event], field: str, table: dict, dtype: Any, compiled: bool = True) -> np.ndarray | None:
    """``table[event.<field>]`` for every event as ``dtype`` (int8/int32/int64); None if a
    value is not in ``table`` (or is unhashable), or a code does not fit ``dtype``."""
    dt = np.dtype(dtype)
    if compiled and _gather is not None and type(events) is list:
        out = _gather.codes(events, _FIELDS[field], table, dt.itemsize)
        return None if out is None else np.frombuffer(out, dt)
    try:
        return np.array([table[v] for v in map(attrgetter(field), events)], dt)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def values(events: list[_Event], field: str, compiled: bool = True) -> list:
    """``event.<field>`` for every event."""
    if compiled and _gather is not None and type(events) is list:
        return _gather.values(events, _FIELDS[field])
    return list(map(attrgetter(field), events))
