"""The memory events of a Trace as columns, and the allocated bytes over time they imply.

An allocation or free is any event with an ``alloc_bytes`` stat (``trace/keys.py``),
but torch.profiler's ``[OutOfMemory]`` (a failed allocation).
Events are grouped into *series*, one per (device the memory is on, allocator). The
bytes a series holds after each event are the allocator's own ``total_allocated`` when
every event of the series carries it (torch), else the running sum of ``alloc_bytes``
from the least start that keeps it from going below zero (0, unless the profile saw
frees of memory allocated before it; memory allocated earlier is otherwise not
known). Used by the memory analyses and by the writers, which export each series as a
counter track.
"""

from __future__ import annotations

import numpy as np

from . import keys
from .core import COUNTER_COLUMNS, Trace
from .factorize import factorize
from .sorting import lexsort


class Memory:
    """Memory events sorted by series, then time (then trace order). A plain class, not
    a dataclass: its generated methods were compiled at every start (docs/benchmarks.md,
    issue 35)."""

    def __init__(self, rows: np.ndarray, ts: np.ndarray, series: np.ndarray, delta: np.ndarray, addr: np.ndarray,
                 has_addr: np.ndarray, level: np.ndarray, reserved: np.ndarray, device: list[str],
                 plane: np.ndarray, allocator: list[str], start: np.ndarray, from_totals: np.ndarray):
        self.rows = rows  # event row
        self.ts = ts  # event time (ns)
        self.series = series  # series id of each event
        self.delta = delta  # signed bytes: > 0 allocation, < 0 free
        self.addr = addr  # address or handle; meaningful where has_addr
        self.has_addr = has_addr
        self.level = level  # bytes the series holds just after the event
        self.reserved = reserved  # the allocator's reserved bytes after the event (NaN if unknown)
        #: per series: device label (plane name), plane id (-1 if the trace has no such plane),
        #: allocator, bytes held before the first event, whether levels are the allocator's totals
        self.device = device
        self.plane = plane
        self.allocator = allocator
        self.start = start
        self.from_totals = from_totals

    @property
    def n_series(self) -> int:
        return len(self.device)

    def bounds(self, s: int) -> tuple[int, int]:
        """[lo, hi) of series ``s`` in the event columns."""
        lo, hi = np.searchsorted(self.series, [s, s + 1])
        return int(lo), int(hi)

    def combined(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Every series added up: (times, bytes held just after each, bytes before the
        first), in time order. Used for "allocated at a time" across devices."""
        order = np.argsort(self.ts, kind="stable")
        prev = np.empty(len(self.level), np.float64)
        first = np.ones(len(self.level), bool)
        first[1:] = self.series[1:] != self.series[:-1]
        prev[1:] = self.level[:-1]
        prev[first] = self.start[self.series[first]]
        step = (self.level - prev)[order]
        base = float(self.start.sum())
        return self.ts[order], base + np.cumsum(step), base


def _int_stat(trace: Trace, key: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    col = trace.stats.get(key)
    if col is None or col.kind not in "iuf":
        return np.zeros(len(rows), bool), np.zeros(len(rows), np.int64)
    has, vals = col.lookup(rows)
    out = np.zeros(len(rows), np.int64)
    out[has] = vals.astype(np.int64)
    return has, out


def _text_stat(trace: Trace, key: str, rows: np.ndarray, fill: np.ndarray) -> np.ndarray:
    col = trace.stats.get(key)
    out = fill.copy()
    if col is not None and col.kind == "O":
        has, vals = col.lookup(rows)
        listed = vals.tolist()
        try:  # each distinct value decoded once (a device or allocator name repeats on every event)
            text = {v: _text(v) for v in dict.fromkeys(listed)}
        except TypeError:  # a value that is not hashable (a list from the JSON)
            out[has] = [_text(v) for v in listed]
        else:
            out[has] = np.fromiter(map(text.__getitem__, listed), object, len(listed))
    return out


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


#: torch.profiler's event for an allocation that failed (``Bytes``: what was asked for,
#: beside the totals of a memory event): no allocation, though it carries ``alloc_bytes``
OUT_OF_MEMORY = "[OutOfMemory]"


def memory_events(trace: Trace) -> Memory:
    """The memory events of ``trace`` (empty columns when it has none)."""
    col = trace.stats.get(keys.ALLOC_BYTES)
    if col is None or col.kind not in "iuf" or not len(col):
        rows = np.zeros(0, np.int64)
    else:
        rows = col.rows[np.isfinite(col.values.astype(np.float64))]
        oom = trace.string_id(OUT_OF_MEMORY)
        if oom >= 0 and len(rows):  # a failed allocation: its Bytes were never allocated
            rows = rows[trace.events["name"][rows] != oom]
    if not len(rows):  # no memory events: no other memory stat to look up (a lookup can scan the args)
        z = np.zeros(0, np.int64)
        return Memory(rows=z, ts=z, series=z, delta=z, addr=z, has_addr=np.zeros(0, bool), level=z,
                      reserved=np.zeros(0), device=[], plane=z, allocator=[], start=z, from_totals=np.zeros(0, bool))
    _, delta = _int_stat(trace, keys.ALLOC_BYTES, rows)
    plane_names = np.array([p.name for p in trace.planes] or [""], dtype=object)
    own = plane_names[trace.track_plane[trace.events["track"][rows]]] if len(rows) else plane_names[:0]
    device = _text_stat(trace, keys.MEMORY_DEVICE, rows, own)
    allocator = _text_stat(trace, keys.ALLOCATOR, rows, np.full(len(rows), "", dtype=object))
    dcode, duniq = factorize(device)  # by value, not per event
    acode, auniq = factorize(allocator)
    combo, first = np.unique(dcode.astype(np.int64) * max(len(auniq), 1) + acode, return_index=True)
    keys_ = sorted((str(duniq[dcode[i]]), str(auniq[acode[i]])) for i in first.tolist())
    index = {k: i for i, k in enumerate(keys_)}
    remap = np.array([index[(str(duniq[c // max(len(auniq), 1)]), str(auniq[c % max(len(auniq), 1)]))]
                      for c in combo.tolist()], np.int64)
    series = remap[np.searchsorted(combo, dcode.astype(np.int64) * max(len(auniq), 1) + acode)] \
        if len(rows) else np.zeros(0, np.int64)
    ts = trace.events["start_ns"][rows]
    order = lexsort((rows, ts, series)) if len(rows) else np.zeros(0, np.int64)
    rows, ts, series, delta = rows[order], ts[order], series[order], delta[order]
    has_addr, addr = _int_stat(trace, keys.ADDR, rows)
    has_tot, tot = _int_stat(trace, keys.TOTAL_ALLOCATED, rows)
    has_res, res = _int_stat(trace, keys.TOTAL_RESERVED, rows)
    level = np.zeros(len(rows), np.int64)
    start = np.zeros(len(keys_), np.int64)
    from_totals = np.zeros(len(keys_), bool)
    for s in range(len(keys_)):
        lo, hi = np.searchsorted(series, [s, s + 1])
        if has_tot[lo:hi].all():
            level[lo:hi] = tot[lo:hi]
            start[s] = tot[lo] - delta[lo]
            from_totals[s] = True
        elif hi > lo:  # frees of blocks allocated before the profile: at least that much was held then
            run = np.cumsum(delta[lo:hi])
            start[s] = max(0, -int(run.min()))
            level[lo:hi] = start[s] + run
    by_name = {p.name: p.id for p in trace.planes}
    return Memory(rows=rows, ts=ts, series=series, delta=delta, addr=addr, has_addr=has_addr, level=level,
                  reserved=np.where(has_res, res, np.nan), device=[k[0] for k in keys_],
                  plane=np.array([by_name.get(k[0], -1) for k in keys_], np.int64),
                  allocator=[k[1] for k in keys_], start=start, from_totals=from_totals)


def counter_name(allocator: str, reserved: bool = False) -> str:
    """Name of a series' counter track: ``memory.allocated_bytes`` (``:allocator``)."""
    base = keys.COUNTER_RESERVED if reserved else keys.COUNTER_ALLOCATED
    return f"{base}:{allocator}" if allocator else base


def export_counters(trace: Trace, skip_names: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """``trace.counters`` plus one counter per memory series (allocated bytes, and
    reserved bytes where known) on the memory's plane (else the first event's), for
    the writers. A counter the trace already has (read back from an export) is kept
    as it is, not added twice; nor is a series whose every event is named one of
    ``skip_names`` (XProf's own allocation events, which carry the memory view to the
    XSpace's readers themselves)."""
    m = memory_events(trace)
    if not len(m.rows):
        return trace.counters
    skip_ids = [i for i in (trace.string_id(n) for n in skip_names) if i >= 0]
    own = np.isin(trace.events["name"][m.rows], skip_ids) if skip_ids else np.zeros(len(m.rows), bool)
    c = trace.counters
    have = {(int(p), trace.strings[int(n)]) for p, n in set(zip(c["plane"].tolist(), c["name"].tolist()))}
    plane_of_row = trace.track_plane[trace.events["track"][m.rows]]
    parts = [c]
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        if own[lo:hi].all():
            continue
        plane = int(m.plane[s]) if m.plane[s] >= 0 else int(plane_of_row[lo])
        ts = np.concatenate([[m.ts[lo]], m.ts[lo:hi]])
        for reserved, values in ((False, np.concatenate([[m.start[s]], m.level[lo:hi]]).astype(np.float64)),
                                 (True, np.concatenate([[np.nan], m.reserved[lo:hi]]))):
            name = counter_name(m.allocator[s], reserved)
            keep = ~np.isnan(values)
            if (plane, name) in have or not keep[1:].any() or (reserved and not np.nanmax(values) > 0):
                continue
            parts.append(_counter_part(trace, plane, name, ts[keep], values[keep]))
    return {k: np.concatenate([p[k] for p in parts]).astype(t, copy=False) for k, t in COUNTER_COLUMNS.items()}


def _counter_part(trace: Trace, plane: int, name: str, ts: np.ndarray, values: np.ndarray
                  ) -> dict[str, np.ndarray]:
    sid = trace.intern(name)  # (the writers read names through the string table)
    return {"plane": np.full(len(ts), plane, np.int32), "name": np.full(len(ts), sid, np.int32),
            "ts_ns": ts.astype(np.int64), "value": values}

