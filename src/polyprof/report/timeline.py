"""The data the HTML report's interactive timeline draws, built columnar from Traces.

Every track of every plane (host threads, device streams, derived lines, each step's
critical path as a track for traces up to ``MAX_CRITICAL_PATH_EVENTS``), the counters
and memory series, of one trace or of a job's ranks on the aligned clock. Events go as
binary columns (start, duration, name, correlated event), sorted by (track, lane,
start), deflated and base64-encoded in one string that the page inflates with the
browser's own ``DecompressionStream``; the page builds its level-of-detail pyramid from
them. Times are sent in a ``quantum`` (the greatest common divisor of the times, 1000
for a microsecond trace), which keeps the columns small.

Size budget (docs/report.md): at most ``MAX_EVENTS`` events are drawn one by one, the
longest kept; the rest are counted per track and named in a note. Arguments are sent
for at most ``MAX_ARG_CELLS`` (event, key) pairs, the longest events' first.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any, NamedTuple

import numpy as np

from ..analyze.critical_path_track import with_critical_path
from ..analyze.memory import memory
from ..derive import cache
from ..derive.intervals import nesting_depth
from ..trace.core import Trace
from .memory_view import _thin

MAX_EVENTS = 1_500_000
MAX_ARG_CELLS = 100_000
MAX_ARG_TEXT = 160
MAX_COUNTER_SERIES = 64
#: traces up to this many events get the critical path track (its graphs cost about as
#: much as the rest of the report per event, and it adds several slices per event)
MAX_CRITICAL_PATH_EVENTS = 200_000


class Part(NamedTuple):
    """One trace drawn in the timeline: ``label`` prefixes its groups ("rank 3"), and
    ``offset_ns`` is added to its times (its clock's alignment onto the job's)."""

    label: str
    trace: Trace
    offset_ns: int = 0
    #: draw the trace's own critical path (False: a job's ranks, whose joined path one
    #: part carries already, report/timeline_job.py)
    critical_path: bool = True


def _track_order(trace: Trace) -> list[int]:
    """Track ids in display order: host planes first, then devices; per plane threads and
    streams by their sort index, derived lines and steps last."""
    first: dict[str, int] = {}  # planes of one name (a derived line's, added on a copy of its host plane) side by side
    for p in trace.planes:
        first.setdefault(p.name, p.id)
    planes = sorted(trace.planes, key=lambda p: (p.kind != "host", p.index, first[p.name], p.id))
    later = {"derived": 1, "steps": 2}
    out: list[int] = []
    for p in planes:
        tracks = [t for t in trace.tracks if t.plane == p.id]
        tracks.sort(key=lambda t: (later.get(t.kind, 0), t.sort_index, t.tid, t.id))
        out.extend(t.id for t in tracks)
    return out


def _lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per event: its nesting depth on its track (instants count as 1 ns long)."""
    end = np.maximum(end, start + 1)
    order, _, depth = nesting_depth(track, start, end)
    lane = np.zeros(len(track), np.int64)
    lane[order] = depth
    return lane


def _partners(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per event row: the row it correlates to (a kernel's launch, a launch's first
    kernel; -1 if none), and a device activity's framework op row (-1 if none)."""
    n = trace.n_events
    partner = np.full(n, -1, np.int64)
    op = np.full(n, -1, np.int64)
    corr = cache.correlation(trace)
    if len(corr.device_rows):
        dev, launch = corr.device_rows, corr.launch
        ok = launch >= 0
        partner[dev[ok]] = launch[ok]
        # a launch's partner: its first kernel (reversed so the first one written wins)
        partner[launch[ok][::-1]] = dev[ok][::-1]
        op[dev] = corr.op
    return partner, op


def _column(a: np.ndarray) -> tuple[str, np.ndarray]:
    """The smallest of the page's dtypes that holds ``a`` exactly."""
    if not len(a):
        return "i4", a.astype(np.int32)
    lo, hi = int(a.min()), int(a.max())
    if lo >= 0 and hi < 1 << 16:
        return "u2", a.astype(np.uint16)
    if -(1 << 31) <= lo and hi < 1 << 31:
        return "i4", a.astype(np.int32)
    return "f8", a.astype(np.float64)  # exact below 2**53 quanta


def _pack(columns: dict[str, np.ndarray]) -> tuple[str, list[dict[str, Any]]]:
    """(base64 of the deflated columns, each one's name, dtype and byte offset)."""
    parts, layout, offset = [], [], 0
    for name, a in columns.items():
        dtype, arr = _column(a)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        pad = (-offset) % 8
        if pad:
            parts.append(b"\0" * pad)
            offset += pad
        layout.append({"name": name, "dtype": dtype, "offset": offset, "length": len(arr)})
        parts.append(raw)
        offset += len(raw)
    return base64.b64encode(zlib.compress(b"".join(parts), 1)).decode("ascii"), layout


def _stat_cells(trace: Trace, pos_of: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(key, page positions, values) of each argument the trace's events carry, keys in
    sorted order (a table's order of keys follows what was decoded first: a trace read
    from a store and the same trace read from its file give one page)."""
    found = []
    for key in sorted(trace.stats.keys()):
        col = trace.stats[key]
        if not len(col.rows):
            continue
        p = pos_of[col.rows]
        keep = np.flatnonzero(p >= 0)
        if len(keep):
            found.append((key, p[keep], np.asarray(col.values)[keep]))
    return found


#: the largest integer a double (JavaScript's number) holds exactly
_EXACT = 2 ** 53


def _args(found: list[tuple[str, np.ndarray, np.ndarray]], dur: np.ndarray) -> dict[str, Any]:
    """Arguments as {keys, cols: [[positions], [values]]}: at most MAX_ARG_CELLS cells,
    the longest events' first."""
    total = sum(len(p) for _, p, _ in found)
    limit = None
    if total > MAX_ARG_CELLS:  # a duration above which the cells fit
        limit = np.sort(np.concatenate([dur[p] for _, p, _ in found]))[::-1][MAX_ARG_CELLS - 1]
    keys_out: list[str] = []
    cols: list[list[list[Any]]] = []
    cells = 0
    for key, p, values in found:
        if limit is not None:
            sel = dur[p] > limit
            p, values = p[sel], values[sel]
        if not len(p):
            continue
        if values.dtype.kind in "OUS":
            vals = [v if not isinstance(v, str) or len(v) <= MAX_ARG_TEXT else v[:MAX_ARG_TEXT] + "…"
                    for v in values.tolist()]
        elif values.dtype.kind == "f":
            vals = [None if v != v else v for v in values.tolist()]
        else:  # integers past 2**53 (ids, hashes) as text: the page's JSON.parse reads doubles
            vals = values.tolist()
            if len(values) and values.dtype.kind in "iu" and int(np.abs(values.astype(np.float64)).max()) > _EXACT:
                vals = [v if -_EXACT <= v <= _EXACT else str(v) for v in vals]
        keys_out.append(key)
        cols.append([p.tolist(), vals])
        cells += len(p)
    return {"keys": keys_out, "cols": cols, "cells": cells, "total": total}


def _counters(part: Part, t0: int, group_of: dict[int, str]) -> list[dict[str, Any]]:
    """Counter series (per plane and name) and memory held per device and allocator."""
    trace = part.trace
    out: list[dict[str, Any]] = []
    c = trace.counters
    if len(c["ts_ns"]):
        key = c["plane"].astype(np.int64) * (len(trace.strings) + 1) + c["name"]
        order = np.lexsort((c["ts_ns"], key))
        k = key[order]
        cuts = np.flatnonzero(np.r_[True, k[1:] != k[:-1], True])
        for a, b in zip(cuts[:-1], cuts[1:]):
            if len(out) >= MAX_COUNTER_SERIES:
                break
            rows = order[a:b]
            ts, v = _thin(c["ts_ns"][rows] + part.offset_ns - t0, c["value"][rows].astype(np.float64))
            plane = int(c["plane"][rows[0]])
            out.append({"group": group_of.get(plane, ""), "label": trace.strings[int(c["name"][rows[0]])],
                        "ts": ts, "values": v})
    m = memory(trace)
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        if hi <= lo:
            continue
        ts, v = _thin(m.ts[lo:hi] + part.offset_ns - t0, m.level[lo:hi].astype(np.float64))
        label = "memory " + m.device[s] + (f" · {m.allocator[s]}" if m.allocator[s] else "")
        series: dict[str, Any] = {"group": (part.label + " · " if part.label else "") + "memory", "label": label,
                                  "ts": ts, "values": v, "bytes": True}
        out.append(series)
    return out


def timeline_data(parts: list[Part], marks: list[dict[str, Any]] | None = None,
                  highlight: list[str] | None = None) -> dict[str, Any]:
    """What the page's timeline draws for ``parts`` (one trace, or a job's ranks with
    their clock offsets); ``marks`` are highlighted spans ({"start_ns", "end_ns",
    "label", "kind"} on the aligned clock, e.g. collectives that waited on a straggler),
    and events named in ``highlight`` (a job's collectives) are drawn in one colour."""
    spans = [(p.trace.span_ns[0] + p.offset_ns, p.trace.span_ns[1] + p.offset_ns) for p in parts if p.trace.n_events]
    t0 = min((s for s, _ in spans), default=0)
    t1 = max((e for _, e in spans), default=t0 + 1)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "dur", "name", "partner", "op")}
    found: list[tuple[str, np.ndarray, np.ndarray]] = []
    tracks: list[dict[str, Any]] = []
    names: dict[str, int] = {}
    steps: list[list[Any]] = []
    counters: list[dict[str, Any]] = []
    base = 0
    for part in parts:
        trace = part.trace
        if part.critical_path and 0 < trace.n_events <= MAX_CRITICAL_PATH_EVENTS:
            trace = with_critical_path(trace)
        ev = trace.events
        prefix = part.label + " · " if part.label else ""
        group_of = {p.id: prefix + p.name for p in trace.planes}
        order = _track_order(trace)
        rank_of = np.full(len(trace.tracks) + 1, len(order), np.int64)
        rank_of[order] = np.arange(len(order))
        n = trace.n_events
        start = ev["start_ns"].astype(np.int64) + part.offset_ns - t0
        dur = np.maximum(ev["dur_ns"].astype(np.int64), 0)
        lane = _lanes(ev["track"], start, start + dur)
        rows = np.lexsort((start, lane, rank_of[ev["track"]]))
        partner, op = _partners(trace)
        pos_of = np.full(n + 1, -1, np.int64)
        pos_of[rows] = np.arange(n) + base
        pos_of[-1] = -1  # partner -1 stays -1
        # the strings this part uses, numbered in the page's one list
        used, inv = np.unique(ev["name"], return_inverse=True)
        ids = np.array([names.setdefault(trace.strings[int(s)], len(names)) for s in used], np.int64)
        rank_sorted = rank_of[ev["track"][rows]]
        lanes_sorted = lane[rows]
        bounds = np.searchsorted(rank_sorted, np.arange(len(order) + 1))
        for k, tid in enumerate(order):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            t = trace.tracks[tid]
            if hi <= lo:
                continue
            ln = lanes_sorted[lo:hi]
            lane_cuts = np.flatnonzero(np.r_[True, ln[1:] != ln[:-1]])
            tracks.append({"group": group_of.get(t.plane, prefix), "label": t.name, "kind": t.kind,
                           "device": trace.planes[t.plane].kind == "device",
                           "lanes": (lane_cuts + lo + base).tolist() + [int(hi + base)]})
        cols["start"].append(start[rows])
        cols["dur"].append(dur[rows])
        cols["name"].append(ids[inv[rows]])
        cols["partner"].append(pos_of[partner[rows]])
        cols["op"].append(pos_of[op[rows]])
        found += _stat_cells(trace, pos_of)
        st = cache.steps(trace)
        # a job's step bands: the first rank's (the others' fall at about the same aligned times)
        steps += [] if steps else [[int(a + part.offset_ns - t0), int(b + part.offset_ns - t0), int(k), part.label]
                  for a, b, k in zip(st.start[:500], st.end[:500], st.number[:500])]
        counters += _counters(part, t0, group_of)
        base += n
    start, dur, name, partner, op = (np.concatenate(cols[k]) if base else np.zeros(0, np.int64)
                                     for k in ("start", "dur", "name", "partner", "op"))
    note = ""
    if base > MAX_EVENTS:
        cut = int(np.sort(dur)[::-1][MAX_EVENTS - 1])
        keep = dur > cut
        note = (f"{int(base - keep.sum())} of {base} events shorter than {cut} ns are left out of the timeline "
                f"(it draws at most {MAX_EVENTS}); the tables count them all.")
        new = np.where(keep, np.cumsum(keep) - 1, -1)
        new = np.r_[new, -1]  # position -1 stays -1
        start, dur, name = start[keep], dur[keep], name[keep]
        partner, op = new[partner[keep]], new[op[keep]]
        found = [(k, new[p][new[p] >= 0], v[new[p] >= 0]) for k, p, v in found]
        bounds = np.r_[0, np.cumsum(keep)]
        for row in tracks:
            row["lanes"] = sorted(set(bounds[np.asarray(row["lanes"])].tolist()))
        tracks = [row for row in tracks if len(row["lanes"]) > 1]
    q = max(int(np.gcd.reduce(np.r_[start, dur])) if len(start) else 1, 1)
    blob, layout = _pack({"start": np.diff(start // q, prepend=0), "dur": dur // q, "name": name,
                          "partner": partner, "op": op})
    marks = [{**m, "start_ns": int(m["start_ns"]) - t0, "end_ns": int(m["end_ns"]) - t0} for m in marks or []]
    hot = sorted(n for n in set(highlight or ()) if n in names)
    return {"t0": t0, "span_ns": int(max(t1 - t0, 1)), "quantum": q, "events": int(len(start)), "hot": hot,
            "names": list(names), "tracks": tracks, "blob": blob, "layout": layout, "args": _args(found, dur),
            "counters": counters, "steps": steps, "marks": marks, "note": note}
