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
longest kept (of those as long as the shortest kept, as many as fit, spread over the
span); the rest are counted in a note. Arguments are sent for at most ``MAX_ARG_CELLS``
(event, key) pairs, the longest events' first, and the note and an event's details say
where they were left out. The names sent are those of the events drawn, at most
``MAX_NAME_BYTES`` of them, the longest events' first; an event whose name is past
that points at ``LEFT_OUT_NAME``.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any, Iterable, NamedTuple

import numpy as np

from ..analyze.critical_path_track import is_path_track, with_critical_path
from ..analyze.memory import memory
from ..analyze.units import fmt_ns
from ..analyze.window import WindowArg
from ..derive import cache
from ..derive.intervals import nesting_depth
from ..trace import keys
from ..trace.core import Trace
from ..trace.model import Track
from ..trace.sorting import unique_inverse
from .memory_view import _thin

MAX_EVENTS = 1_500_000
MAX_ARG_CELLS = 100_000
MAX_ARG_TEXT = 160
MAX_COUNTER_SERIES = 64
#: the names sent, in bytes of JSON (UTF-8, with quotes and commas): past this, the names
#: of the shortest events are not sent (809,000 names of 1.5M events were 26.5 MB)
MAX_NAME_BYTES = 4_000_000
#: the name an event whose own name is past MAX_NAME_BYTES is given on the page
LEFT_OUT_NAME = "(name not sent: the page's names budget is spent; the tables name it)"
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


def _longest(dur: np.ndarray, order: np.ndarray, n: int, spread: bool = True) -> tuple[np.ndarray, int, int, int]:
    """(which of ``dur`` are the ``n`` longest, the duration of the shortest kept, how
    many of that duration there are, how many of those are kept): every one longer than
    it, and of those exactly as long as many as fit, spread evenly in ``order`` (a start
    time: over the span), or the first in ``order`` (not ``spread``), the first of equal
    ``order`` first (ties, before, were all left out: 1.55M events of 1 µs left out of a
    page of 50,010)."""
    cut = int(np.partition(dur, len(dur) - n)[len(dur) - n])
    keep = dur > cut
    need = n - int(keep.sum())
    tied = np.flatnonzero(dur == cut)
    tied = tied[np.lexsort((tied, order[tied]))]
    keep[tied[np.arange(need, dtype=np.int64) * len(tied) // max(need, 1)] if spread else tied[:need]] = True
    return keep, cut, len(tied), need


def _args(found: list[tuple[str, np.ndarray, np.ndarray]], dur: np.ndarray, floor: int = -1) -> dict[str, Any]:
    """Arguments as {keys, cols: [[positions], [values]], limit}: at most MAX_ARG_CELLS
    cells, the longest events' first (``floor``: ``found`` lacks some cells of events
    this long or shorter, let go while reading; -1: none); ``limit``: the duration at or
    below which an event's cells may be left out (None: none left out)."""
    total = sum(len(p) for _, p, _ in found)
    limit, keep = (floor if floor >= 0 else None), None
    if total > MAX_ARG_CELLS:  # the longest events' cells, of those as long as the last the first events'
        pos = np.concatenate([p for _, p, _ in found])  # (as _Timeline._let_go keeps them: the same page)
        keep, cut, _, _ = _longest(dur[pos], pos, MAX_ARG_CELLS, spread=False)
        limit = max(cut, floor)
    keys_out: list[str] = []
    cols: list[list[list[Any]]] = []
    cells = at = 0
    for key, p, values in found:
        if keep is not None:
            sel = keep[at:at + len(p)]
            at += len(p)
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
    return {"keys": keys_out, "cols": cols, "cells": cells, "total": total, "limit": limit}


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
            plane, label = int(c["plane"][rows[0]]), trace.strings[int(c["name"][rows[0]])]
            series: dict[str, Any] = {"group": group_of.get(plane, ""), "label": label, "ts": ts, "values": v}
            if label.endswith("_bytes"):  # process.rss_bytes: its row's scale in MiB, as the memory card's
                series["bytes"] = True
            out.append(series)
    m = memory(trace)
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        if hi <= lo:
            continue
        ts, v = _thin(m.ts[lo:hi] + part.offset_ns - t0, m.level[lo:hi].astype(np.float64))
        label = "memory " + m.device[s] + (f" · {m.allocator[s]}" if m.allocator[s] else "")
        out.append({"group": (part.label + " · " if part.label else "") + "memory", "label": label,
                    "ts": ts, "values": v, "bytes": True})
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
            row = {"group": group_of.get(t.plane, prefix), "label": label[t.id], "kind": t.kind,
                   "device": trace.planes[t.plane].kind == "device",
                   "lanes": (lane_cuts + lo + base).tolist() + [int(hi + base)]}
            if is_path_track(t):  # the path's stretches (each of its lanes): copies of events counted once
                row["copy"] = True
            self.tracks.append(row)
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
        """The cells of events shorter than the floor let go, and of those as long as it
        all but the first MAX_ARG_CELLS by position (the ones :func:`_args` would keep
        where fewer are longer: a later part's positions come after)."""
        if not self.found:
            return
        d = np.concatenate([x[3] for x in self.found])
        pos = np.concatenate([x[1] for x in self.found])
        keep = d > self.floor
        tied = np.flatnonzero(d == self.floor)
        keep[tied[np.lexsort((tied, pos[tied]))][:MAX_ARG_CELLS]] = True
        cuts = np.cumsum([0] + [len(x[1]) for x in self.found])
        self.found = [(k, p[keep[a:b]], v[keep[a:b]], dd[keep[a:b]])
                      for (k, p, v, dd), a, b in zip(self.found, cuts[:-1], cuts[1:])]
        self.found = [x for x in self.found if len(x[1])]
        self.found = [x for x in self.found if len(x[1])]
        self.held = sum(len(x[1]) for x in self.found)

    def result(self, marks: list[dict[str, Any]] | None, highlight: list[str] | None) -> dict[str, Any]:
        t0, t1 = self.span if self.span is not None else (0, 1)
        base = self.base
        # each column joined and its parts let go in turn (a job's columns are the most it holds)
        start, dur, name, partner, op = (np.concatenate(self.cols.pop(k)) if base else np.zeros(0, np.int64)
                                         for k in ("start", "dur", "name", "partner", "op"))
        start -= t0
        self._let_go()
        found = [(k, p, v) for k, p, v, _ in self.found]
        tracks, notes = self.tracks, []
        if base > MAX_EVENTS:
            keep, cut, tied, kept = _longest(dur, start, MAX_EVENTS)
            notes.append(f"{base - MAX_EVENTS} of {base} events, each {cut} ns long or shorter, are left out of the "
                         f"timeline (it draws at most {MAX_EVENTS}, the longest" +
                         (f"; of the {tied} events {cut} ns long, {kept} spread over the span" if kept else "") +
                         "); the tables count them all.")
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
        name, names, unsent = _sent_names(name, dur, list(self.names))
        if unsent:
            notes.append(f"The names of {unsent} events are not sent (the page holds at most {MAX_NAME_BYTES} bytes "
                         "of names, those of the longest events); their details say so, and the tables name them.")
        args = {**_args(found, dur, self.floor), "total": self.arg_total}
        if args["cells"] < args["total"] and args["limit"] is not None:
            notes.append(f"Arguments: {args['cells']} of {args['total']} (event, key) cells are sent, those of the "
                         f"longest events; events {fmt_ns(args['limit'])} long or shorter may show none (their details "
                         "say so).")
        elif args["cells"] < args["total"]:  # (no cell of a drawn event left out: those of events not drawn)
            notes.append(f"Arguments: {args['cells']} of {args['total']} (event, key) cells are sent, those of the "
                         "events drawn.")
        copies = sum(row["lanes"][-1] - row["lanes"][0] for row in tracks if row.get("copy"))
        q = max(int(np.gcd(np.gcd.reduce(start), np.gcd.reduce(dur))) if len(start) else 1, 1)
        blob, layout = _pack({"start": np.diff(start // q, prepend=0), "dur": dur // q, "name": name,
                              "partner": partner, "op": op})
        moved = [{**m, "start_ns": int(m["start_ns"]) - t0, "end_ns": int(m["end_ns"]) - t0} for m in marks or []]
        steps = [[a - t0, b - t0, k, label] for a, b, k, label in self.steps]
        counters = [{**c, "ts": [x - t0 for x in c["ts"]]} for c in self.counters]
        hot = sorted(set(highlight or ()) & set(names))
        e0, e1 = self.events_span if self.events_span is not None else (t0, t0)
        # span_ns: at least 1 ns (the page divides by it); extent_ns: the true one (0 for one instant)
        return {"t0": t0, "span_ns": int(max(t1 - t0, 1)), "extent_ns": int(t1 - t0),
                "events_span_ns": int(e1 - e0), "parts": self.parts, "quantum": q, "events": int(len(start)),
                "copies": int(copies), "hot": hot, "names": names, "tracks": tracks, "blob": blob, "layout": layout,
                "args": args, "counters": counters, "steps": steps, "marks": moved, "note": " ".join(notes),
                "open": np.unique(np.concatenate(self.open)).tolist() if self.open else []}


def _sent_names(name: np.ndarray, dur: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str], int]:
    """(each event's index into the names sent, those names, how many events' names are
    not sent): the names of the events drawn (not of those left out), whole, up to
    MAX_NAME_BYTES of JSON, those of the longest events first; past that, an event
    points at LEFT_OUT_NAME, the last name sent."""
    if not len(name):
        return name, [], 0
    used, inv = unique_inverse(name)
    text = [names[k] for k in used.tolist()]
    size = np.fromiter((len(x.encode("utf-8", "surrogatepass")) + 3 for x in text), np.int64, len(text))
    if int(size.sum()) <= MAX_NAME_BYTES:
        return inv, text, 0
    longest = np.zeros(len(used), np.int64)
    np.maximum.at(longest, inv, dur)
    order = np.lexsort((used, -longest))  # the longest events' names first, then in the order first seen
    sent = np.sort(order[np.cumsum(size[order]) <= MAX_NAME_BYTES - len(LEFT_OUT_NAME) - 3])
    index = np.full(len(used), len(sent), np.int64)  # not sent: LEFT_OUT_NAME
    index[sent] = np.arange(len(sent))
    out = index[inv]
    return out, [text[k] for k in sent.tolist()] + [LEFT_OUT_NAME], int((out == len(sent)).sum())


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
