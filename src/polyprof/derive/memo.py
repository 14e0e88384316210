"""The per-trace memo (a derivation computed once per Trace, kept in the instance's
``__dict__`` and gone with it), and the one derivation every other one reads: which
tracks record the same OS thread."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import numpy as np

from ..trace.core import Trace

T = TypeVar("T")


def memo(trace: Trace, name: str, fn: Callable[[Trace], T]) -> T:
    # each name holds what its own fn returned: the values' types differ by name
    store: dict[str, Any] = trace.__dict__.setdefault("_polyprof_memo", {})
    if name not in store:
        store[name] = fn(trace)
    return store[name]


def threads(trace: Trace) -> np.ndarray:
    """Per track id, an id of the OS thread it records: thread tracks of one plane with the
    same tid (e.g. the host plugin's sections and another plugin's API calls on one thread)
    share the smallest of their track ids; every other track keeps its own id."""

    def build(t: Trace) -> np.ndarray:
        out = np.arange(len(t.tracks), dtype=np.int64)
        first: dict[tuple[int, int], int] = {}
        for tr in t.tracks:
            if tr.kind == "thread" and tr.tid:
                out[tr.id] = first.setdefault((tr.plane, tr.tid), tr.id)
        return out

    return memo(trace, "threads", build)
