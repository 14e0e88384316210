"""Training / inference steps, from whichever marker the trace has.

Sources, first one found wins: PyTorch's ``ProfilerStep#N`` spans; polyprof's own
steps (category ``step`` with a ``step`` stat, from ``polyprof.step()``); JAX / TF step
annotations (host spans with a ``step_num`` or ``step`` stat). Each step is a host time
interval; device activity belongs to the step in which its launch started (or, with
no launch, in which it started itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import member, unique_inverse
from ..trace.vocabulary import PROFILER_STEP as _PROFILER_STEP


@dataclass
class Steps:
    number: np.ndarray  # int64 step number
    start: np.ndarray  # host start, ns
    end: np.ndarray  # host end, ns
    rows: np.ndarray  # the event that marks each step
    source: str  # "ProfilerStep", "polyprof", "annotation" or "" (no steps)

    def __len__(self) -> int:
        return len(self.number)

    def of(self, times: np.ndarray) -> np.ndarray:
        """Index of the step whose [start, end) holds each time, -1 if none."""
        times = np.asarray(times, np.int64)
        if not len(self):
            return np.full(len(times), -1, np.int64)
        i = np.searchsorted(self.start, times, side="right") - 1
        ok = (i >= 0) & (times < self.end[np.maximum(i, 0)])
        return np.where(ok, i, -1)


def _primary(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Keep rows on real (not derived) tracks."""
    if not len(rows):
        return rows
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)
    return rows[~derived[trace.events["track"][rows]]]


def _make(trace: Trace, rows: np.ndarray, numbers: np.ndarray, source: str) -> Steps:
    ev = trace.events
    st = ev["start_ns"][rows]
    order = np.argsort(st, kind="stable")
    rows, numbers = rows[order], np.asarray(numbers, np.int64)[order]
    # one event per step number (a step marked on several threads keeps its widest span)
    start = ev["start_ns"][rows]
    end = start + ev["dur_ns"][rows]
    uniq, inv = unique_inverse(numbers)
    if len(uniq) < len(numbers):
        s = np.full(len(uniq), np.iinfo(np.int64).max)
        e = np.full(len(uniq), np.iinfo(np.int64).min)
        np.minimum.at(s, inv, start)
        np.maximum.at(e, inv, end)
        first = np.full(len(uniq), -1, np.int64)
        first[inv[::-1]] = rows[::-1]
        order = np.argsort(s, kind="stable")
        return Steps(uniq[order], s[order], e[order], first[order], source)
    return Steps(numbers, start, end, rows, source)


def find_steps(trace: Trace) -> Steps:
    """The steps of ``trace`` (see the module doc for the sources)."""
    ev = trace.events
    empty = np.zeros(0, np.int64)
    if not trace.n_events:
        return Steps(empty, empty, empty, empty, "")
    # 1. ProfilerStep#N
    sids = [i for i, s in enumerate(trace.strings) if _PROFILER_STEP.match(s)]
    if sids:
        rows = _primary(trace, np.flatnonzero(member(ev["name"], np.asarray(sids, np.int64)) & (ev["dur_ns"] > 0)))
        host = np.array([p.kind == "host" for p in trace.planes], bool)
        rows = rows[host[trace.track_plane[ev["track"][rows]]]]
        if len(rows):
            nums = np.array([int(_PROFILER_STEP.match(trace.strings[n]).group(1)) for n in ev["name"][rows]])
            return _make(trace, rows, nums, "ProfilerStep")
    # 2. polyprof.step() and other "step" category events carrying a step number
    rows = _primary(trace, trace.rows_of_kind(Kind.STEP))
    col = trace.stats.get(keys.STEP)
    if len(rows) and col is not None:
        m, v = col.lookup(rows)
        rows = rows[m & (ev["dur_ns"][rows] > 0)]
        if len(rows):
            return _make(trace, rows, col.lookup(rows)[1].astype(np.int64), "polyprof")
    # 3. JAX / TF step annotations on the host
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    for key in ("step_num", keys.STEP):
        col = trace.stats.get(key)
        if col is None or col.kind not in "iuf":
            continue
        rows = _primary(trace, col.rows)
        rows = rows[host[trace.track_plane[ev["track"][rows]]] & (ev["dur_ns"][rows] > 0)]
        if len(rows):
            return _make(trace, rows, col.lookup(rows)[1].astype(np.int64), "annotation")
    return Steps(empty, empty, empty, empty, "")


def step_rows(trace: Trace) -> np.ndarray:
    """Rows of events that mark steps (so section analyses can leave them out)."""
    return find_steps(trace).rows
