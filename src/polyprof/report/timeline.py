"""The data the HTML report's interactive timeline draws, built columnar from Traces.

Every track of every plane (host threads, device streams, derived lines, the critical
path of each step the summary analyses as a track for traces up to
``MAX_CRITICAL_PATH_EVENTS``: ``Part.window``), the counters
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
from typing import Any, Iterable, NamedTuple

import numpy as np

from ..analyze.critical_path_track import with_critical_path
from ..analyze.memory import memory
from ..analyze.window import WindowArg
from ..derive import cache
from ..derive.intervals import nesting_depth
from ..trace import keys
from ..trace.core import Trace
from ..trace.model import Track
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
    #: the steps the path is drawn for: the summary's window (``analyze/window.py``, as
    #: ``polyprof critical-path``); None: every step of ``trace`` (a window's view: its own)
    window: WindowArg = None


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


def _crossing(a_end: np.ndarray, a_dur: np.ndarray, b_start: np.ndarray, b_dur: np.ndarray) -> np.ndarray:
    """Whether span b, starting at or after span a, overlaps it by more than half the
    shorter of the two: a crossing that one lane cannot draw (less is two timestamps that
    disagree a little, e.g. a stream's kernels a few hundred ns apart)."""
    return 2 * (a_end - b_start) > np.minimum(a_dur, b_dur)


def _plane_labels(trace: Trace) -> dict[int, str]:
    """Each plane's heading: its name, and its process's name where the trace has several
    host processes (Chrome's "/host:CPU:16011" is the "Renderer"); a plane's copy (the
    critical path's, without properties) is headed as the plane of its name."""
    process: dict[str, str] = {}
    for p in trace.planes:
        what = p.properties.get("process_name")
        if p.kind == "host" and isinstance(what, str) and what and what not in p.name:
            process.setdefault(p.name, what)
    several = len(set(process.values())) > 1
    return {p.id: f"{p.name} ({process[p.name]})" if several and p.name in process else p.name for p in trace.planes}


def _track_labels(tracks: list[Track], group_of: dict[int, str]) -> dict[int, str]:
    """Each drawn track's label: its name, and where two tracks of one heading share it
    (JAX's two host lines both ``python3``), its thread id, ``python3 (tid 1257)``; a
    number in order where the ids are the same too."""
    seen: dict[tuple[str, str], list[Track]] = {}
    for t in tracks:
        seen.setdefault((group_of.get(t.plane, ""), t.name), []).append(t)
    out = {t.id: t.name for t in tracks}
    for same in seen.values():
        if len(same) < 2:
            continue
        apart = len({t.tid for t in same}) == len(same)
        for k, t in enumerate(same):
            out[t.id] = f"{t.name} (tid {t.tid})" if apart else f"{t.name} ({k + 1})"
    return out


def _lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per event: its nesting depth on its track (instants count as 1 ns long).

    Spans that do not nest (a step marker that starts inside one call and ends inside
    another, a slice that never ended and runs to the trace's end) would share a lane
    with the spans they cross, one drawn over the other: on such a track each span goes
    on the lowest lane above the spans still open when it starts (a stack), so no lane
    holds two crossing spans."""
    track = np.asarray(track, np.int64)
    end = np.maximum(end, start + 1)
    order, _, depth = nesting_depth(track, start, end)
    lane = np.zeros(len(track), np.int64)
    lane[order] = depth
    o = np.lexsort((start, lane, track))
    t, ln, s, e = track[o], lane[o], start[o], end[o]
    bad = (t[1:] == t[:-1]) & (ln[1:] == ln[:-1]) & _crossing(e[:-1], (e - s)[:-1], s[1:], (e - s)[1:])
    for tr in np.unique(t[1:][bad]).tolist():
        rows = np.flatnonzero(track == tr)
        rows = rows[np.lexsort((start[rows] - end[rows], start[rows]))]  # by start, the longest first
        open_: list[tuple[int, int]] = []  # (end, duration) of the spans open, innermost last
        for i, a, z in zip(rows.tolist(), start[rows].tolist(), end[rows].tolist()):
            while open_ and (open_[-1][0] <= a or 2 * (open_[-1][0] - a) <= min(open_[-1][1], z - a)):
                open_.pop()
            lane[i] = len(open_)
            open_.append((z, z - a))
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
    """(base64 of the deflated columns, each one's name, dtype and byte offset); each
    column deflated in turn, not all of them joined first."""
    z, parts, layout, offset = zlib.compressobj(1), [], [], 0
    for name, a in columns.items():
        dtype, arr = _column(a)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        pad = (-offset) % 8
        if pad:
            parts.append(z.compress(b"\0" * pad))
            offset += pad
        layout.append({"name": name, "dtype": dtype, "offset": offset, "length": len(arr)})
        parts.append(z.compress(raw))
        offset += len(raw)
        del raw, arr
    parts.append(z.flush())
    return base64.b64encode(b"".join(parts)).decode("ascii"), layout


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


def _args(found: list[tuple[str, np.ndarray, np.ndarray]], dur: np.ndarray, more: bool = False) -> dict[str, Any]:
    """Arguments as {keys, cols: [[positions], [values]]}: at most MAX_ARG_CELLS cells,
    the longest events' first (``more``: ``found`` lacks the cells of the shortest events,
    of which there were more than MAX_ARG_CELLS in all)."""
    total = sum(len(p) for _, p, _ in found)
    limit = None
    if total > MAX_ARG_CELLS or (more and total == MAX_ARG_CELLS):  # a duration above which the cells fit
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


#: the argument cells held while the parts are read: past this many, those of the
#: shortest events are let go (they would not be among the MAX_ARG_CELLS sent)
_ARG_CELLS_HELD = 2 * MAX_ARG_CELLS


class _Timeline:
    """The timeline's columns, tracks, names, steps, counters and argument cells, built
    one part at a time (each part's trace can be let go once added), times on the
    parts' aligned clock until :meth:`result` moves them to the first event's."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "dur", "name", "partner", "op")}
        self.found: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []  # key, positions, values, durations
        self.held = self.arg_total = self.base = 0
        self.floor = -1  # cells of events this long or shorter are let go (-1: none yet)
        self.tracks: list[dict[str, Any]] = []
        self.names: dict[str, int] = {}
        self.steps: list[list[Any]] = []
        self.counters: list[dict[str, Any]] = []
        self.span: tuple[int, int] | None = None  # of every row drawn: events and counters
        self.events_span: tuple[int, int] | None = None
        self.parts = 0
        self.open: list[np.ndarray] = []  # positions of events cut short (never ended in the trace)

    def add(self, part: Part) -> None:
        trace = part.trace
        self.parts += 1
        if trace.n_events:
            a, b = trace.span_ns[0] + part.offset_ns, trace.span_ns[1] + part.offset_ns
            self.events_span = (a, b) if self.events_span is None else (min(self.events_span[0], a),
                                                                         max(self.events_span[1], b))
            self._widen(a, b)
        if part.critical_path and 0 < trace.n_events <= MAX_CRITICAL_PATH_EVENTS:
            trace = with_critical_path(trace, part.window)  # (its view let go on return: one rank at a time)
        ev, base = trace.events, self.base
        prefix = part.label + " · " if part.label else ""
        group_of = {k: prefix + v for k, v in _plane_labels(trace).items()}
        order = _track_order(trace)
        rank_of = np.full(len(trace.tracks) + 1, len(order), np.int64)
        rank_of[order] = np.arange(len(order))
        n = trace.n_events
        start = ev["start_ns"].astype(np.int64) + part.offset_ns
        dur = np.maximum(ev["dur_ns"].astype(np.int64), 0)
        lane = _lanes(ev["track"], start, start + dur)
        rows = np.lexsort((start, lane, rank_of[ev["track"]]))
        partner, op = _partners(trace)
        pos_of = np.full(n + 1, -1, np.int64)
        pos_of[rows] = np.arange(n) + base
        pos_of[-1] = -1  # partner -1 stays -1
        # the strings this part uses, numbered in the page's one list
        used, inv = np.unique(ev["name"], return_inverse=True)
        ids = np.array([self.names.setdefault(trace.strings[int(s)], len(self.names)) for s in used], np.int64)
        rank_sorted = rank_of[ev["track"][rows]]
        lanes_sorted = lane[rows]
        bounds = np.searchsorted(rank_sorted, np.arange(len(order) + 1))
        drawn = [k for k in range(len(order)) if bounds[k + 1] > bounds[k]]
        label = _track_labels([trace.tracks[order[k]] for k in drawn], group_of)
        for k in drawn:
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            t = trace.tracks[order[k]]
            ln = lanes_sorted[lo:hi]
            lane_cuts = np.flatnonzero(np.r_[True, ln[1:] != ln[:-1]])
            self.tracks.append({"group": group_of.get(t.plane, prefix), "label": label[t.id], "kind": t.kind,
                                "device": trace.planes[t.plane].kind == "device",
                                "lanes": (lane_cuts + lo + base).tolist() + [int(hi + base)]})
        for col, v in (("start", start[rows]), ("dur", dur[rows]), ("name", ids[inv[rows]]),
                       ("partner", pos_of[partner[rows]]), ("op", pos_of[op[rows]])):
            self.cols[col].append(v)
        self._cells(_stat_cells(trace, pos_of), dur[rows])
        cut = trace.stats.get(keys.INCOMPLETE)
        if cut is not None and len(cut.rows):
            self.open.append(pos_of[cut.rows[np.asarray(cut.values) != 0]])
        st = cache.steps(trace)
        # a job's step bands: the first rank's (the others' fall at about the same aligned times)
        self.steps += [] if self.steps else [[int(a + part.offset_ns), int(b + part.offset_ns), int(k), part.label]
                                             for a, b, k in zip(st.start[:500], st.end[:500], st.number[:500])]
        counters = _counters(part, 0, group_of)
        for c in counters:  # a counter sampled before the first event or after the last (torch's import)
            if c["ts"]:
                self._widen(min(c["ts"]), max(c["ts"]))
        self.counters += counters
        self.base += n

    def _widen(self, a: int, b: int) -> None:
        """The timeline's extent widened to [a, b]: it covers every row drawn, events and
        counters (0 and the pan reach every sample, and a counter's scale is of samples
        that can be seen)."""
        self.span = (a, b) if self.span is None else (min(self.span[0], a), max(self.span[1], b))

    def _cells(self, found: list[tuple[str, np.ndarray, np.ndarray]], dur: np.ndarray) -> None:
        """A part's argument cells (``dur``: its events' durations by position), those of
        the shortest events let go past :data:`_ARG_CELLS_HELD`: those no longer than the
        MAX_ARG_CELLS-th longest so far (the floor), which :func:`_args` would leave out
        (the MAX_ARG_CELLS-th longest of all the cells is no shorter)."""
        for key, p, v in found:
            self.found.append((key, p, v, dur[p - self.base]))
            self.held += len(p)
            self.arg_total += len(p)
        if self.held <= _ARG_CELLS_HELD:
            return
        d = np.concatenate([x[3] for x in self.found])
        self.floor = max(self.floor, int(np.partition(d, len(d) - MAX_ARG_CELLS)[len(d) - MAX_ARG_CELLS]))
        self._let_go()

    def _let_go(self) -> None:
        """The cells of events no longer than the floor let go."""
        self.found = [(k, p[d > self.floor], v[d > self.floor], d[d > self.floor]) for k, p, v, d in self.found]
        self.found = [x for x in self.found if len(x[1])]
        self.held = sum(len(x[1]) for x in self.found)

    def result(self, marks: list[dict[str, Any]] | None, highlight: list[str] | None) -> dict[str, Any]:
        t0, t1 = self.span if self.span is not None else (0, 1)
        base, names = self.base, self.names
        # each column joined and its parts let go in turn (a job's columns are the most it holds)
        start, dur, name, partner, op = (np.concatenate(self.cols.pop(k)) if base else np.zeros(0, np.int64)
                                         for k in ("start", "dur", "name", "partner", "op"))
        start -= t0
        self._let_go()
        found = [(k, p, v) for k, p, v, _ in self.found]
        tracks, note = self.tracks, ""
        if base > MAX_EVENTS:
            cut = int(np.sort(dur)[::-1][MAX_EVENTS - 1])
            keep = dur > cut
            note = (f"{int(base - keep.sum())} of {base} events shorter than {cut} ns are left out of the timeline "
                    f"(it draws at most {MAX_EVENTS}); the tables count them all.")
            new = np.where(keep, np.cumsum(keep) - 1, -1)
            new = np.r_[new, -1]  # position -1 stays -1
            start, dur, name = start[keep], dur[keep], name[keep]
            self.open = [new[p][new[p] >= 0] for p in self.open]
            partner, op = new[partner[keep]], new[op[keep]]
            found = [(k, new[p][new[p] >= 0], v[new[p] >= 0]) for k, p, v in found]
            bounds = np.r_[0, np.cumsum(keep)]
            for row in tracks:
                row["lanes"] = sorted(set(bounds[np.asarray(row["lanes"])].tolist()))
            tracks = [row for row in tracks if len(row["lanes"]) > 1]
        q = max(int(np.gcd(np.gcd.reduce(start), np.gcd.reduce(dur))) if len(start) else 1, 1)
        blob, layout = _pack({"start": np.diff(start // q, prepend=0), "dur": dur // q, "name": name,
                              "partner": partner, "op": op})
        moved = [{**m, "start_ns": int(m["start_ns"]) - t0, "end_ns": int(m["end_ns"]) - t0} for m in marks or []]
        steps = [[a - t0, b - t0, k, label] for a, b, k, label in self.steps]
        counters = [{**c, "ts": [x - t0 for x in c["ts"]]} for c in self.counters]
        hot = sorted(n for n in set(highlight or ()) if n in names)
        e0, e1 = self.events_span if self.events_span is not None else (t0, t0)
        return {"t0": t0, "span_ns": int(max(t1 - t0, 1)), "events_span_ns": int(e1 - e0), "parts": self.parts,
                "quantum": q, "events": int(len(start)), "hot": hot,
                "names": list(names), "tracks": tracks, "blob": blob, "layout": layout,
                "args": {**_args(found, dur, self.floor >= 0), "total": self.arg_total},
                "counters": counters, "steps": steps, "marks": moved, "note": note,
                "open": np.unique(np.concatenate(self.open)).tolist() if self.open else []}


def timeline_data(parts: Iterable[Part], marks: list[dict[str, Any]] | None = None,
                  highlight: list[str] | None = None) -> dict[str, Any]:
    """What the page's timeline draws for ``parts`` (one trace, or a job's ranks with
    their clock offsets); ``marks`` are highlighted spans ({"start_ns", "end_ns",
    "label", "kind"} on the aligned clock, e.g. collectives that waited on a straggler),
    and events named in ``highlight`` (a job's collectives) are drawn in one colour.
    ``parts`` is read once, in order: a job's ranks can be read one at a time
    (report/timeline_job.py), each trace let go once drawn. ``args.total``: the argument
    cells of every event, drawn or not."""
    tl = _Timeline()
    for part in parts:
        tl.add(part)
    return tl.result(marks, highlight)
