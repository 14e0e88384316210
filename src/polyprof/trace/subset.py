"""A trace with only some of its events: the recorded steps of a schedule, the analysed
window of an export.

Planes, tracks, strings, sources and metadata stay as they are (a plane or track may
end up without events); stats keep the values of the kept rows; a flow is kept when
both its ends are; counters are kept inside the time ranges given (all when none) and,
for a recording window, each series' last sample before each range (its level there).
One pass of array indexing, no per-event Python objects.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from .core import Trace
from .stats import RowMap, StatTable


def take(trace: Trace, keep: np.ndarray, counter_ranges: Sequence[tuple[int, int]] | None = None,
         level_at_start: bool = False) -> Trace:
    """The trace with the events where ``keep`` is True (a bool array, one per event).

    ``counter_ranges``: the counter samples kept (all when None); ``level_at_start``: with
    them, also each counter series' last sample before each range's start, so the level
    at the range's start is known (a recording window: a section that begins before the
    first sample inside it still has a level, and a mean, from its start)."""
    keep = np.asarray(keep, bool)
    if len(keep) != trace.n_events:
        raise ValueError(f"keep has {len(keep)} entries for {trace.n_events} events")
    new_row = np.cumsum(keep) - 1  # the new row of each kept event
    events = {k: v[keep] for k, v in trace.events.items()}
    cols, parts = trace.stats.carried(RowMap.of(trace.n_events, np.flatnonzero(keep)))
    stats = StatTable(cols)
    stats.adopt(parts)  # deferred stats stay deferred
    fl = trace.flows
    fk = keep[fl["src"]] & keep[fl["dst"]] if len(fl["src"]) else np.zeros(0, bool)
    flows = {"src": new_row[fl["src"][fk]].astype(np.int64), "dst": new_row[fl["dst"][fk]].astype(np.int64),
             "id": fl["id"][fk], "category": fl["category"][fk]}
    c = trace.counters
    if counter_ranges is not None and len(c["ts_ns"]):
        ck = np.zeros(len(c["ts_ns"]), bool)
        for t0, t1 in counter_ranges:
            ck |= (c["ts_ns"] >= t0) & (c["ts_ns"] <= t1)
            if level_at_start:
                ck[_last_before(c, t0)] = True
        counters = {k: v[ck] for k, v in c.items()}
    else:
        counters = dict(c)
    return Trace(strings=list(trace.strings), planes=list(trace.planes), tracks=list(trace.tracks),
                 events=events, stats=stats, flows=flows, counters=counters,
                 metadata=copy.deepcopy(trace.metadata), sources=list(trace.sources)).validate()


def _last_before(c: dict[str, np.ndarray], t0: int) -> np.ndarray:
    """The rows of each counter series' (plane, name) last sample before ``t0``."""
    rows = np.flatnonzero(c["ts_ns"] < t0)
    if not len(rows):
        return rows
    rows = rows[np.lexsort((c["ts_ns"][rows], c["name"][rows], c["plane"][rows]))]
    p, n = c["plane"][rows], c["name"][rows]
    last = np.ones(len(rows), bool)
    last[:-1] = (p[1:] != p[:-1]) | (n[1:] != n[:-1])
    return rows[last]


def overlapping(trace: Trace, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Which events overlap one of the ``[t0, t1)`` ranges (an instant: lies in one)."""
    ev = trace.events
    s, e = ev["start_ns"], ev["start_ns"] + ev["dur_ns"]
    out = np.zeros(trace.n_events, bool)
    for t0, t1 in ranges:
        out |= np.where(e > s, (s < t1) & (e > t0), (s >= t0) & (s < t1))
    return out


def in_windows(trace: Trace, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Which events a recording window keeps: those that overlap one of ``ranges``
    (:func:`overlapping`), and both ends of each launch of device work one end of which
    is kept: a kernel launched in the window that ran after it, and the launch, ended
    just before it, of a kernel that ran in it. Other flows (forward to backward...)
    pull in nothing."""
    keep = overlapping(trace, ranges)
    src, dst = trace.flows["src"], trace.flows["dst"]
    if len(src):
        device = np.fromiter((p.kind == "device" for p in trace.planes), bool, len(trace.planes))
        planes = trace.event_planes()
        launch = device[planes[dst]] & ~device[planes[src]]
        ends = keep[src] | keep[dst]
        keep[src[launch & ends]] = True
        keep[dst[launch & ends]] = True
    return keep
