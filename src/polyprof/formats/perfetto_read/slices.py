"""Begin/end events into slices, and flow ids into links, as columns.

A track in Perfetto is a stack: ``TYPE_SLICE_END`` closes the innermost slice still
open on its track, in time order: the trace processor sorts every event by (time,
position in the file) before it parses, so the events of a track written from several
packet sequences (Chrome's async tracks: begins on one, ends on another, each
sequence's chunks apart in the file) pair as they happened, and where times tie file
order decides (a zero-length slice's begin and end; an inner and an outer end at one
time; an end written before a begin at its time closes nothing). Per track, in that
order, the depth after each begin or end is a running sum; an end that would take it
below zero closes nothing (counted); a begin that leaves depth k + 1 is closed by the
next end on that track that leaves depth k. So the pairs are found by one stable sort
on (track, time), then one on (track, depth, order), with no loop per event. A begin
no end closes is returned as open.

Flows: every event that carries a flow id continues that flow from the event before it
with the same id; ``terminating_flow_ids`` ends the flow there (the id may start a new
flow later). Ids live in spaces (v2 ids trace-wide, old ids per sequence, legacy bind
ids), kept apart.
"""

from __future__ import annotations

import numpy as np

from . import walked
from .kinds import BEGIN, END


def match(kind: np.ndarray, track: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows of the begins, row of the end closing each or -1, ends that closed nothing),
    paired per track in the order of ``ts`` (file order where times tie): compiled
    (``_walk_match.c``: the tracks already in time order in one walk in file order, a
    stack per track, nothing per row; the rows of any other track sorted by time apart),
    or :func:`match_columns` where it is not built or the track codes are not small
    non-negative integers."""
    if walked._walk is not None:  # (looked up at each call: the tests read both ways)
        got = walked._walk.match(np.ascontiguousarray(kind, np.int8), np.ascontiguousarray(track, np.int64),
                                 np.ascontiguousarray(ts, np.int64))
        if got is not None:
            begins, ends, orphans = got
            return np.frombuffer(begins, np.int64), np.frombuffer(ends, np.int64), orphans
    return match_columns(kind, track, ts)


def match_columns(kind: np.ndarray, track: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`match` in NumPy: one stable sort by (track, time), the depth as a running
    sum, the pairs by a sort on (track, depth, order) (the module doc)."""
    sel = np.flatnonzero((kind == BEGIN) | (kind == END))
    if not len(sel):
        z = np.zeros(0, np.int64)
        return z, z, 0
    o = sel[np.lexsort((ts[sel], track[sel]))]  # stable: file order where (track, time) ties
    tr = track[o]
    step = np.where(kind[o] == BEGIN, 1, -1).astype(np.int64)
    seg = np.zeros(len(o), np.int64)
    seg[1:] = np.cumsum(tr[1:] != tr[:-1])
    first = np.ones(len(o), bool)
    first[1:] = seg[1:] != seg[:-1]
    c = np.cumsum(step)
    starts = np.flatnonzero(first)
    c -= np.repeat(c[starts] - step[starts], np.diff(np.r_[starts, len(o)]))  # per-track running sum
    del starts
    big = 2 * len(o) + 2
    seg *= big
    low = c - seg
    np.minimum.accumulate(low, out=low)
    np.minimum(low, -seg, out=low)
    low += seg  # running min of (0, c...) per track
    del seg
    prev_low = np.zeros(len(o), np.int64)
    prev_low[1:] = low[:-1]
    prev_low[first] = 0
    orphan = (step < 0) & (c < prev_low)
    del prev_low, first
    c -= low  # the stack depth after each event
    del low
    level = np.where(step > 0, c, c + 1)  # begins: the level they open; ends: the level they close
    del c
    keep = ~orphan
    o, tr, level, isb = o[keep], tr[keep], level[keep], (step > 0)[keep]
    order = np.lexsort((np.arange(len(o)), level, tr))
    o, tr, level, isb = o[order], tr[order], level[order], isb[order]
    nxt_same = np.zeros(len(o), bool)
    nxt_same[:-1] = (tr[1:] == tr[:-1]) & (level[1:] == level[:-1]) & ~isb[1:]
    begins = np.flatnonzero(isb)
    closed = nxt_same[begins]
    ends = np.full(len(begins), -1, np.int64)
    ends[closed] = o[begins[closed] + 1]
    b_rows = o[begins]
    order = np.argsort(b_rows)
    return b_rows[order], ends[order], int(orphan.sum())


def link(flows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source rows, destination rows, ids) of the flows in ``flows`` (rows of space, id,
    event row, terminating), in the order of their destinations."""
    if not len(flows):
        z = np.zeros(0, np.int64)
        return z, z, z
    space, fid, row, term = flows.T
    o = np.lexsort((row, fid, space))
    space, fid, row, term = space[o], fid[o], row[o], term[o]
    group = (space[1:] == space[:-1]) & (fid[1:] == fid[:-1]) & (row[1:] != row[:-1])
    i = np.flatnonzero(group & (term[:-1] == 0))
    # a flow whose end is written before its start (both at one time: polyprof's writer
    # orders them by duration; Perfetto would drop it): an end that nothing led to,
    # followed by a start that leads nowhere, is linked from that start
    lone_end = (term == 1) & ~np.r_[False, group & (term[:-1] == 0)]
    lone_start = (term == 0) & ~np.r_[group, False]
    j = np.flatnonzero(group & lone_end[:-1] & lone_start[1:])
    src = np.concatenate([row[i], row[j + 1]])
    dst = np.concatenate([row[i + 1], row[j]])
    ids = np.concatenate([fid[i], fid[j]])
    order = np.lexsort((src, dst))
    return src[order], dst[order], ids[order]
