"""The critical path as a track: ``with_critical_path(trace)`` is the trace plus a derived
track "critical path" on its host plane, one slice per stretch of each step's path, so
every writer (Perfetto, Chrome JSON, Kineto, XSpace, .polyprof) shows it beside the
threads and streams.

A slice is a path edge with weight, from its source's time for its weight (a section's
stretch weighs only its time no other thread nor device covered, ``depgraph``: the
slice is as long as its ``on_path_ns`` in the ``critical_path`` table): named after the
event it belongs to (an op, a call, a kernel; an XLA op of a known module ``module/op``, as the tables name it:
``common.qualified_names``), or "launch delay" / "kernel gap" / "wait" for the edges
that belong to none; its stats are ``step``, ``edge`` (the edge type, ``depgraph.EDGE_TYPES``) and ``on``
(the track of the event it belongs to, "" for none).

Slices on one track never overlap (:func:`path_lanes`): a step's device work can run on
past the next step's start, and so can its path, where a job's ranks are out of step
(``ranks/critical_path_track.py``). Perfetto's JSON importer drops a slice that overlaps
another without nesting in it, and its protobuf writer here would move it to an
"(overlap k)" track: so each step's slices go on the first of the tracks "critical
path", "critical path (2)", ... that is free when the step's path starts.
"""

from __future__ import annotations

import numpy as np

from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from ..trace.model import Plane, Track
from ..trace.sorting import lexsort, unique
from .common import qualified_names
from .critical_path import path_owner, step_windows
from .depgraph import EDGE_TYPES, build
from .depgraph_context import context
from .longest_path import longest_path
from .window import WindowArg, view

#: the track's name
TRACK = "critical path"
UNOWNED = {"kernel_launch_delay": "launch delay", "kernel_kernel_delay": "kernel gap",
            "sync_dependency": "wait", "dependency": "dependency", "operator": "operator",
            "stream_order": "stream order"}  # (zero weight: never a slice)


def is_path_track(track: Track) -> bool:
    """Whether ``track`` is one of the path's lanes ("critical path", "critical path (2)",
    ...: :func:`add_path_tracks`), whose slices are copies of events counted once."""
    return track.kind == "derived" and (track.name == TRACK or track.name.startswith(TRACK + " ("))


def with_critical_path(trace: Trace, window: WindowArg = None) -> Trace:
    """``trace`` plus the "critical path" track (the input is not changed; a trace that
    has the track already is returned as it is): the path of each step ``window``
    selects (``analyze/window.py``, as the summary's ``critical_path`` table; None: every
    step, or the whole trace without steps). The window's view is made for the call and
    let go (``view(keep=False)``), not kept on ``trace``."""
    if any(is_path_track(t) for t in trace.tracks):
        return trace
    host = _busiest_host(trace)
    if host is None:
        return trace
    v = view(trace, window, keep=False)  # the same arrays (its rows are the trace's), let go on return
    numbers, starts, ends = step_windows(v)
    track_names = np.array([t.name for t in trace.tracks], dtype=object)
    parts: list[tuple[np.ndarray, ...]] = []
    ctx = context(v)  # the whole trace's part of every step's graph, made once
    for number, t0, t1 in zip(numbers.tolist(), starts.tolist(), ends.tolist()):
        g = build(v, t0, t1, ctx)
        if not len(g.src):
            continue
        p = longest_path(g)
        e = p.edges[g.weight[p.edges] > 0]
        if not len(e):
            continue
        owner = path_owner(g, e)
        rows = np.where(owner >= 0, g.rows[np.maximum(owner, 0)], -1)
        on = np.where(rows >= 0, track_names[trace.events["track"][np.maximum(rows, 0)]], "")
        s = g.time[g.src[e]]
        parts.append((s, g.weight[e], rows, np.full(len(e), number, np.int64), g.etype[e],
                      on.astype(object)))
    if not parts:
        return trace
    start, dur, rows, step, code, on = (np.concatenate([x[i] for x in parts]) for i in range(6))
    etype = np.array(EDGE_TYPES, dtype=object)[code]
    label = np.array([UNOWNED[x] for x in EDGE_TYPES], dtype=object)[code]
    owned = np.flatnonzero(rows >= 0)
    codes, labels, _ = qualified_names(trace, rows[owned])  # an XLA op: module/op, as event_stats names it
    label[owned] = labels[codes]
    b = TraceBuilder(metadata={})
    pid = b.plane(host.name, host.kind, host.vendor, host.index, host.pid, {}, source=host.source)
    add_path_tracks(b, pid, label, start, dur, {"step": step, "edge": etype, "on": on})
    lines = b.build()
    lines.metadata[mkeys.DERIVED] = trace.metadata.get(mkeys.DERIVED, False)
    return trace.extend(lines)


def path_lanes(step: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per slice its lane (0, 1, ...) so that no two slices of a lane overlap: a step's
    slices (a chain: one after the other) share one lane, the lowest free from the
    step's first slice to its last, and a slice that overlaps an earlier one of its own
    step (a path edge longer than the time between its nodes; not seen) goes on a lane of
    its own the same way. A loop over the steps, not the slices."""
    n = len(step)
    lane = np.zeros(n, np.int64)
    if not n:
        return lane
    o = lexsort((start, step))
    cut = np.flatnonzero(step[o][1:] != step[o][:-1]) + 1
    units: list[tuple[int, int, np.ndarray]] = []  # (first start, last end, rows)
    for rows in np.split(o, cut):
        s, e = start[rows], end[rows]
        stray = np.zeros(len(rows), bool)
        stray[1:] = s[1:] < np.maximum.accumulate(e)[:-1]
        main = rows[~stray]
        units.append((int(start[main].min()), int(end[main].max()), main))
        units.extend((int(start[r]), int(end[r]), rows[i:i + 1]) for i, r in zip(np.flatnonzero(stray).tolist(),
                                                                              rows[stray].tolist()))
    free: list[int] = []  # per lane, the end of its last slice
    for first, last, rows in sorted(units, key=lambda u: (u[0], u[1])):
        k = next((i for i, f in enumerate(free) if f <= first), len(free))
        if k == len(free):
            free.append(last)
        else:
            free[k] = last
        lane[rows] = k
    return lane


def add_path_tracks(b: TraceBuilder, plane: int, label: np.ndarray, start: np.ndarray, dur: np.ndarray,
                    stats: dict[str, np.ndarray]) -> None:
    """The path's slices on ``plane``: the steps' lanes (:func:`path_lanes`) as the tracks
    "critical path", "critical path (2)", ..., with ``stats`` (one value per slice)."""
    lane = path_lanes(stats["step"], start, start + dur)
    for k in unique(lane).tolist():
        m = lane == k
        tr = b.track(plane, TRACK if k == 0 else f"{TRACK} ({k + 1})", "derived", tid=k, sort_index=-2000 + k)
        b.events(tr, label[m], start[m], dur[m], keys.CAT_DERIVED, stats={key: v[m] for key, v in stats.items()})


def _busiest_host(trace: Trace) -> Plane | None:
    """The host plane that holds the most events: the track goes under the program's
    threads, not an XSpace's ``/host:metadata`` (a host plane with no events, first)."""
    hosts = [p for p in trace.planes if p.kind == "host"]
    if len(hosts) < 2:
        return hosts[0] if hosts else None
    plane_of_track = np.array([t.plane for t in trace.tracks], np.int64)
    per_plane = np.bincount(plane_of_track[np.asarray(trace.events["track"], np.int64)],
                            minlength=max(p.id for p in trace.planes) + 1) if trace.n_events else None
    return max(hosts, key=lambda p: int(per_plane[p.id]) if per_plane is not None else 0)
