"""Clock snapshots: every packet's timestamp onto one clock.

A packet's ``timestamp`` is on the clock ``timestamp_clock_id`` names (else its
sequence's default, else BOOTTIME, Perfetto's trace clock). A ``ClockSnapshot`` is one
reading of several clocks at the same instant. As in Perfetto's trace processor, a time
on clock A becomes a time on the target clock through the latest snapshot that read
both at or before it (the first one for earlier times): ``target = snap_target + (t -
snap_A)``, hopping through other clocks when no snapshot read A and the target
together. The target is CLOCK_MONOTONIC when a snapshot read it (polyprof's reference
clock, DESIGN.md §3), else the snapshots' ``primary_trace_clock``, else BOOTTIME. A
trace without snapshots keeps its timestamps as they are (polyprof's own exports).

Sequence-scoped clocks (ids 64-127) are keyed by (sequence, id); those marked
``is_incremental`` give deltas from the last timestamp on that clock (resolved while
reading, in :meth:`Clocks.resolve`), and ``unit_multiplier_ns`` scales their units.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ...trace.sorting import unique

REALTIME, MONOTONIC, BOOTTIME = 1, 3, 6
_SCOPED = range(64, 128)


def key(clock_id: int, seq: int) -> int:
    """The clock a packet names: a global id, or (sequence, id) for a scoped one."""
    return (seq << 8) | clock_id if clock_id in _SCOPED else clock_id


class Clocks:
    """The snapshots seen so far and the sequence-scoped clocks' running values."""

    def __init__(self) -> None:
        self.snapshots: list[dict[int, int]] = []
        self.primary = 0
        #: scoped clock key -> [last value in ns, unit multiplier, incremental]
        self.scoped: dict[int, list[Any]] = {}

    def snapshot(self, snap: Any, seq: int) -> None:
        readings: dict[int, int] = {}
        for c in snap.clocks:
            k = key(c.clock_id, seq)
            mult = c.unit_multiplier_ns or 1
            value = c.timestamp * mult
            if c.clock_id in _SCOPED:
                self.scoped[k] = [value, mult, bool(c.is_incremental)]
            readings[k] = value
        if readings:
            self.snapshots.append(readings)
        if snap.HasField("primary_trace_clock") and not self.primary:
            self.primary = snap.primary_trace_clock

    def resolve(self, clock: int, ts: int, seq: int) -> tuple[int, int]:
        """(clock key, ns on that clock) of a packet's raw timestamp."""
        if clock not in _SCOPED:
            return clock, ts
        k = key(clock, seq)
        state = self.scoped.get(k)
        if state is None:  # a scoped clock no snapshot defined: taken as ns as it is
            return k, ts
        if state[2]:
            state[0] += ts * state[1]
            return k, state[0]
        return k, ts * state[1]

    def target(self) -> int:
        if any(MONOTONIC in s for s in self.snapshots):
            return MONOTONIC
        return self.primary or BOOTTIME

    def wall_anchor(self) -> dict[str, int] | None:
        """(target clock, wall clock) read together by the first snapshot with both."""
        t = self.target()
        for s in self.snapshots:
            if REALTIME in s and t in s and t != REALTIME:
                return {"mono_ns": int(s[t]), "wall_ns": int(s[REALTIME]), "uncertainty_ns": 0}
        return None

    def convert(self, clock: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Times on the target clock, and the clocks no snapshot links to it (left as
        they are). ``clock`` 0 is the trace's default clock, BOOTTIME."""
        out = ts.astype(np.int64, copy=True)
        if not self.snapshots or not len(ts):
            return out, []
        target = self.target()
        clock = np.where(clock == 0, BOOTTIME, clock)
        unlinked = []
        for c in unique(clock).tolist():
            if c == target:
                continue
            path = self._path(c, target)
            sel = clock == c
            if path is None:
                unlinked.append(int(c))
                continue
            v = out[sel]
            for a, b in zip(path, path[1:]):
                v = _hop(self.snapshots, a, b, v)
            out[sel] = v
        return out, unlinked

    def _path(self, a: int, b: int) -> list[int] | None:
        """The shortest chain of clocks from ``a`` to ``b``, each pair read together."""
        edges: dict[int, set[int]] = {}
        for s in self.snapshots:
            for x in s:
                edges.setdefault(x, set()).update(y for y in s if y != x)
        prev: dict[int, int] = {a: a}
        todo = deque([a])
        while todo:
            x = todo.popleft()
            if x == b:
                path = [b]
                while path[-1] != a:
                    path.append(prev[path[-1]])
                return path[::-1]
            for y in sorted(edges.get(x, ())):
                if y not in prev:
                    prev[y] = x
                    todo.append(y)
        return None


def _hop(snapshots: list[dict[int, int]], a: int, b: int, v: np.ndarray) -> np.ndarray:
    pairs = sorted((s[a], s[b]) for s in snapshots if a in s and b in s)
    sa = np.array([p[0] for p in pairs], np.int64)
    sb = np.array([p[1] for p in pairs], np.int64)
    i = np.clip(np.searchsorted(sa, v, side="right") - 1, 0, len(sa) - 1)
    return sb[i] + (v - sa[i])
