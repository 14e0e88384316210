"""The critical path of each step of one rank: which ops and device activities make the
step as long as it is, and how much slack the others have.

Per step (the whole trace when it has none; a time window holding no whole step:
that window, ``Selection.timed``) the dependency graph of ``analyze/depgraph.py``
is built over the step's host span and its longest path found (``analyze/longest_path.py``);
both follow HTA's critical path analysis, whose results they reproduce
(tests/test_critical_path.py), with each stream's order added (``depgraph``: HTA leaves
out a gap of 1.5 ms or more). ``polyprof critical-path`` of one trace takes the same graph
(``ranks/critical_path.py``), so both give one path length per step.
"""

from __future__ import annotations

import logging

import numpy as np

from .. import envvars
from ..derive import cache
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import first_and_inverse, lexsort, unique, unique_inverse
from .depgraph import KERNEL_KERNEL, DepGraph, build, window_rows
from .depgraph_context import Context, context
from . import nesting
from .common import qualified_names
from .frames import column, empty_frame, frame
from .table import Table
from .longest_path import LongestPath, forest_times, longest_path
from .window import WindowArg, selection, view

COLUMNS = ["rank", "step", "name", "module", "kind", "track", "start_ns", "dur_ns", "on_path_ns", "slack_ns",
           "path_ns", "span_ns"]
_TEXT = ("name", "module", "kind", "track")


log = logging.getLogger("polyprof")

def step_windows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step numbers, host starts, host ends): the steps, or the whole trace as step -1;
    in a time window holding no whole step (``Selection.timed``), the window as step -1
    (its first stretch's start to its last one's end), its events taken as a step's."""
    steps = cache.steps(trace)
    if len(steps):
        return (np.asarray(steps.number, np.int64), np.asarray(steps.start, np.int64),
                np.asarray(steps.end, np.int64))
    if not trace.n_events:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    sel = selection(trace)
    if sel is not None and sel.timed:
        return np.array([-1], np.int64), np.array([sel.lo], np.int64), np.array([sel.hi], np.int64)
    s = np.asarray(trace.events["start_ns"], np.int64)
    e = s + np.asarray(trace.events["dur_ns"], np.int64)
    return np.array([-1], np.int64), np.array([s.min()], np.int64), np.array([e.max()], np.int64)


def graph_end(g: DepGraph) -> int:
    """The last time of a node with an edge: the end of the step's work (its calls and the
    device activity they launched)."""
    if not len(g.src):
        return int(g.time.max()) if len(g.time) else 0
    return max(int(g.time[g.src].max()), int(g.time[g.dst].max()))


def path_owner(g: DepGraph, edges: np.ndarray) -> np.ndarray:
    """The graph event whose time each of ``edges`` is on the path (-1: none): its owner,
    but for the gap on a stream after an activity (HTA's graph gives that edge to the
    activity before, but the activity was done: the stream waited for the next one), which
    belongs to none, as launch delays and waits."""
    return np.where(g.etype[edges] == KERNEL_KERNEL, -1, g.owner[edges])


#: what a path's edge owned by no event is, by edge type (``depgraph.EDGE_TYPES``), as the
#: CLI says it
WAIT_WORDS = ("waits in ops", "waits between ops", "launch delays", "stream gaps", "sync waits",
              "stream-order waits")


def path_waits(g: DepGraph, p: LongestPath) -> list[tuple[int, int, int]]:
    """The path's time owned by no event (:func:`path_owner`: launch delays, a stream's
    gaps, waits for a sync or another rank), per edge type: (type, ns, the longest such
    edge), most time first; with the events' times on the path it adds up to its
    length."""
    if not len(p.edges):
        return []
    at = p.edges[path_owner(g, p.edges) < 0]
    at = at[g.weight[at] > 0]
    out = []
    for kind in unique(g.etype[at]).tolist():
        mine = at[g.etype[at] == kind]
        out.append((int(kind), int(g.weight[mine].sum()), int(mine[np.argmax(g.weight[mine])])))
    return sorted(out, key=lambda x: -x[1])


def event_times(g: DepGraph, p: LongestPath) -> tuple[np.ndarray, np.ndarray]:
    """Per graph event: its time on the path (the path's edges of its own span it owns,
    as HTA attributes them, gaps between its children included) and its slack: how much longer it could take before the path got longer (0 on
    the path), from the longest path through any of its spans (through its nodes where it
    owns none)."""
    n = len(g.rows)
    on = np.zeros(n, np.int64)
    owned = path_owner(g, p.edges)
    keep = owned >= 0
    np.add.at(on, owned[keep], g.weight[p.edges][keep])
    best = np.full(n, np.iinfo(np.int64).min, np.int64)
    has = g.owner >= 0
    np.maximum.at(best, g.owner[has], p.through[has])
    through = p.fwd + p.bwd
    by_node = np.maximum(through[0::2], through[1::2])  # per event, the larger of its two nodes'
    best = np.where(best == np.iinfo(np.int64).min, by_node, best)
    return on, np.maximum(p.length - best, 0)


#: the ``kind`` column's texts by code: the event kinds, then a device's synchronisation
#: record and an OS runtime call (``depgraph_context.os_calls``)
_KIND_TEXT = np.array([x.name.lower() for x in Kind] + ["sync", "os_runtime"], dtype=object)
_SYNC, _OS = len(Kind), len(Kind) + 1


def kind_text(trace: Trace, rows: np.ndarray, device: np.ndarray) -> np.ndarray:
    """Per graph event (``rows``, ``device``: on a device), its ``kind`` column's text."""
    k = np.asarray(trace.kinds[rows], np.int64)
    other = k == Kind.OTHER
    return _KIND_TEXT[np.where(device & other, _SYNC, np.where(other & context(trace).os_call[rows], _OS, k))]


def rank_of(trace: Trace) -> int:
    """The trace's rank in its job (its first source's), 0 when unknown."""
    for s in trace.sources:
        if s.rank is not None:
            return int(s.rank)
    return 0


#: above this many events in the analysed window the summary and report leave the
#: critical path out (one warning): its graph is built step by step, and a trace of a
#: million events cost the report ten times its other tables. ``max_events=None`` or
#: ``POLYPROF_CRITICAL_PATH_MAX_EVENTS=0`` lifts the limit.
MAX_EVENTS = 300_000


def _limit(max_events: int | None | str) -> int | None:
    if max_events != "default":
        return None if max_events is None else int(max_events)
    return envvars.whole("POLYPROF_CRITICAL_PATH_MAX_EVENTS", MAX_EVENTS, "events", zero=True) or None


def critical_path(trace: Trace, window: WindowArg = None, max_events: int | None | str = "default") -> Table:
    """Every op, runtime call and device activity of each step's dependency graph.

    Columns: ``rank``; ``step`` (-1: a trace without steps, taken whole, or its time
    window where one was analysed: ``step_windows``); ``name``
    (an XLA op or kernel of a known module: ``module/op``, as ``kernel_breakdown`` and
    ``event_stats`` name it, ``common.qualified_names``); ``module`` ("" for none);
    ``kind`` (``cpu_op``, ``runtime``, ``os_runtime``: an OS runtime call,
    ``depgraph_context.os_calls``; ``kernel``, ``memcpy``, ``memset``,
    ``collective``, ``sync``: a device's synchronisation record); ``track`` (thread or
    stream); ``start_ns``, ``dur_ns``; ``on_path_ns`` (its time on the step's critical
    path: its own span's edges on the path, gaps between its children included; launch
    delays and waits belong to no event); ``slack_ns`` (how much longer it could take before
    the step's path got longer: 0 on the path); ``path_ns`` (the step's critical path
    length); ``span_ns`` (the step's wall time with its device work: from its start to the
    last end of its calls, each cut at the step's end (``depgraph.build``), and of the
    device activity they launched, which can run past the step's own end; the path is
    never longer, and without device work neither is longer than the step; a trace
    without steps from its first event; a time window's cut at its end, device work
    too, ``depgraph.build``).
    Ordered by step, then start. ``window``: the steps analysed
    (``analyze/window.py``). Empty, with a warning, above ``max_events`` events
    (:data:`MAX_EVENTS`; None: no limit).
    """
    trace = view(trace, window)
    numbers, starts, ends = step_windows(trace)
    limit = _limit(max_events)
    if limit is not None and trace.n_events > limit:
        # the events from the first step's start to the last's end (a view shares the whole
        # trace's rows: a JAX profile's 320,000 import and compile events before its steps)
        st = trace.events["start_ns"]
        inside = int(np.count_nonzero((st >= starts.min()) & (st < ends.max()))) if len(starts) else 0
        if inside > limit:
            log.warning("critical path left out: %d events in the analysed window, more than %d "
                        "(POLYPROF_CRITICAL_PATH_MAX_EVENTS, or critical_path(trace, max_events=None))",
                        inside, limit)
            return empty_frame(COLUMNS, _TEXT)
    # per step with a graph: its number, its rows, which are on a device, their times
    # on the path and slack, the path's length; the table's columns are gathered once
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]] = []
    ev = trace.events
    ctx = context(trace)  # the whole trace's part, once for every step (and the track's)
    for number, t0, t1 in zip(numbers.tolist(), starts.tolist(), ends.tolist()):
        w = window_rows(ctx, t0, t1)
        if not len(w.host) + len(w.dev) + len(w.sy):
            continue
        host_only = (not len(w.dev) and not len(w.sy) and not ctx.backward_callers  # (one chain per thread)
                     and (ctx.comm_caller is None or not bool((ctx.comm_caller[w.host] >= 0).any()))
                     and not bool(ctx.xla_wait[ctx.names[w.host]].any())  # (XLA's waits and ops link
                     and not bool((ctx.xla_op[w.host] | ctx.section[w.host]).any()))  # threads; a section: its idle)
        times = _host_only(trace, ctx, w.host, t0, t1) if host_only else None
        if times is not None:
            rows, device = w.host, np.zeros(len(w.host), bool)
            on, slack, length = times
            last = min(int(ctx.end[rows].max()), t1)  # (cut at the step's end, as the graph's)
        else:
            g = build(trace, t0, t1, ctx, w)
            p = longest_path(g)
            on, slack = event_times(g, p)
            rows, device, length, last = g.rows, g.device, p.length, graph_end(g)
        parts.append((number, rows, device, on, slack, length, max(last - t0, 0)))
    if not parts:
        return empty_frame(COLUMNS, _TEXT)
    sizes = [len(x[1]) for x in parts]
    all_rows = np.concatenate([x[1] for x in parts])
    all_device = np.concatenate([x[2] for x in parts])
    all_on = np.concatenate([x[3] for x in parts])
    all_slack = np.concatenate([x[4] for x in parts])
    step = np.repeat(np.array([x[0] for x in parts], np.int64), sizes)
    path = np.repeat(np.array([x[5] for x in parts], np.int64), sizes)
    span = np.repeat(np.array([x[6] for x in parts], np.int64), sizes)
    start = np.asarray(ev["start_ns"], np.int64)
    order = lexsort((start[all_rows], step))  # np.lexsort's order, as one int64 sort
    rows, device = all_rows[order], all_device[order]
    track_names = np.array([t.name for t in trace.tracks], dtype=object)
    codes, labels, modules = qualified_names(trace, rows)  # an XLA op: module/op, as kernel_breakdown names it
    return frame({
        "rank": np.full(len(rows), rank_of(trace), np.int64),
        "step": step[order],
        "name": labels[codes],
        "module": modules[codes],
        "kind": kind_text(trace, rows, device),
        "track": track_names[ev["track"][rows]],
        "start_ns": start[rows],
        "dur_ns": np.asarray(ev["dur_ns"][rows], np.int64),
        "on_path_ns": all_on[order],
        "slack_ns": all_slack[order],
        "path_ns": path[order],
        "span_ns": span[order],
    })


def _host_only(trace: Trace, ctx: Context, host: np.ndarray, t0: int,
               t1: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """A window whose graph holds host calls alone (a trace without launches, such as a
    TPU's: its host ops' nesting per thread): :func:`event_times` and the path's length
    from the calls' nesting (``longest_path.forest_times``), None where that does not
    decide them. The calls are cut at the window's end ``t1``, as ``depgraph.build`` cuts
    them, and those a time window took begun before it at its start ``t0``."""
    thread = cache.threads(trace)[ctx.track[host]]
    start, end = ctx.start[host], ctx.end[host]
    cut = np.minimum(end, t1)
    from_t0 = np.maximum(start, t0)
    # (op_stats nests the same calls in a trace without steps; calls cut can nest otherwise)
    nest = nesting.of_rows(trace, host) if bool((cut == end).all() and (from_t0 == start).all()) else None
    return forest_times(thread, from_t0, cut, ctx.waits[ctx.names[host]], nest)


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.asarray(values, str), return_inverse=True)`` with the distinct
    values as an object array, without the fixed-width text array (4 bytes a character of
    the longest name, every row: the peak of a summary of long kernel names,
    docs/benchmarks.md) and without Python code per row: the rows are grouped by their
    hashes (one sort of integers), each row checked equal to its group's first (one
    comparison in C), and only the distinct strings are checked and sorted. Anything else
    (a hash shared by two strings, values that are not text) takes NumPy's way."""
    n = len(values)
    try:
        hashes = np.fromiter(map(hash, values.tolist()), np.int64, n)
    except TypeError:  # an unhashable value
        return _unique_text(values)
    first, inv = first_and_inverse(hashes)
    uniq = values[first]
    same = np.asarray(values == uniq[inv], bool) if n else np.ones(0, bool)
    if not same.all() or not all(type(v) is str and not v.endswith("\x00") for v in uniq.tolist()):
        return _unique_text(values)  # as NumPy's text reads them
    order = np.argsort(uniq, kind="stable")  # code-point order, as NumPy's text
    rank = np.empty(len(order), np.intp)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inv.ravel()]



def _unique_text(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, i = np.unique(np.asarray(values, str), return_inverse=True)
    return u.astype(object), i.ravel()


def on_path_totals(cp: Table) -> Table:
    """The events on the critical path summed by (name, kind) over the steps of a
    :func:`critical_path` table: ``name``, ``kind``, ``on_path_ns``, ``share_pct`` (of
    the steps' path lengths together), ``steps`` (steps in which it was on the path).
    Largest first."""
    on = np.asarray(column(cp, "on_path_ns"), np.int64)
    keep = np.flatnonzero(on > 0)
    if not len(keep):
        return empty_frame(["name", "kind", "on_path_ns", "share_pct", "steps"], ("name", "kind"))
    step = np.asarray(column(cp, "step"), np.int64)
    path = np.asarray(column(cp, "path_ns"), np.int64)
    total = int(path[first_and_inverse(step)[0]].sum())
    name_u, name_i = _sorted_codes(column(cp, "name")[keep])
    kind_u, kind_i = _sorted_codes(column(cp, "kind")[keep])
    uniq, inv = unique_inverse(name_i.astype(np.int64) * len(kind_u) + kind_i)
    sums = np.bincount(inv, weights=on[keep]).astype(np.int64)
    st = step[keep] - int(step[keep].min())
    width = int(st.max()) + 1  # distinct (row, step) pairs as one int64 key
    steps = np.bincount(unique(inv * width + st) // width, minlength=len(uniq))
    names, kinds = name_u[uniq // len(kind_u)], kind_u[uniq % len(kind_u)]
    order = np.argsort(-sums, kind="stable")
    return frame({"name": names[order], "kind": kinds[order],
                  "on_path_ns": sums[order], "share_pct": np.round(100.0 * sums[order] / max(total, 1), 1),
                  "steps": steps[order].astype(np.int64)})
