"""CUDA/HIP graphs: which graph each graph launch replayed, what each replay did on the
device, and which captured op each replayed kernel came from.

A replay is one graph launch call (``GRAPH_LAUNCH_MARKERS``) with the device activity it
launched (every activity of a replay shares the call's correlation id); the table counts
the launches in the analysed steps, as the other tables count calls. Its graph is named
by the launch's graph / exec id stats or its activities' (:data:`ID_STATS`,
``GRAPH_EXEC_STATS``: Kineto's args, nsys' and CUPTI's graphId, XLA's cuda_graph_id) where
the trace has them, else by the sequence of kernels it ran: replays that ran the same
kernels in the same order are one graph. Either names a graph the same way in any part of
the trace, so the tables of a rank's windows merge (:func:`merge_stats`).

Replayed kernels map to ops through a capture-time trace (:func:`replayed_ops`): a graph's
nodes are the launches made while capturing it, which launched nothing then; the k-th
activity of a replay is the k-th launch of the capture (where a launch names its kernel,
the names must agree), and its op is the framework op around that launch.

A rank read window by window (``ranks/stepwise.py``) hands each window the captures of
the windows before it, by value (:class:`Captures`, :func:`carry_in`): a graph captured in
one window and replayed in later ones maps its replays there as in the rank read whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple


import numpy as np

from ..derive import cache
from ..derive.graph_recording import CAPTURE_BEGIN, stream_captures
from ..derive.intervals import innermost
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import first_and_inverse, lexsort, unique_inverse, unique_rows
from ..trace.vocabulary import (GRAPH_EXEC_STATS, GRAPH_ID_STATS, GRAPH_LAUNCH_MARKERS, LAUNCH_KERNEL_STAT,
                                LAUNCH_MARKERS)
from ..trace.keys import BLOCK, GRID
from .common import qualified_names
from .frames import empty_frame, frame
from .table import Table
from .window_counting import host_mask

COLUMNS = ["graph", "replays", "device_ns", "kernels_per_replay", "captured_ops", "attributed_pct",
           "first_kernel"]
_TEXT = ("graph", "first_kernel")


#: stats that give a graph's id: Kineto's, nsys' and CUPTI's (``GRAPH_ID_STATS``) and
#: XLA's ``cuda_graph_id`` (a JAX XSpace's command buffer launches and their kernels)
ID_STATS = GRAPH_ID_STATS + ("cuda_graph_id",)


class Replays(NamedTuple):  # not a dataclass: cheaper to create at import (docs/benchmarks.md, issue 35)
    """Every graph launch the analysed window counts (``launch``: host rows, in time
    order) with its graph label, and its device activity (``rows``, ``replay``: index
    into ``launch``; by replay, then start). ``key``: per replay, what names its graph
    in any part of the trace (:func:`graph_key`)."""

    launch: np.ndarray
    graph: np.ndarray  # object: label per replay
    rows: np.ndarray
    replay: np.ndarray
    key: np.ndarray  # object: "graph <id>", or the tuple of the kernel names it ran


def _first_stat(trace: Trace, keys: tuple[str, ...], rows: np.ndarray) -> np.ndarray:
    """Text of the first of ``keys`` each row has ("" where none)."""
    out = np.full(len(rows), "", dtype=object)
    left = np.ones(len(rows), bool)
    for key in keys:
        if not left.any():
            break
        col = trace.stat(key)
        if col is None:
            continue
        mask, vals = col.lookup(rows)
        take = mask & left
        if take.any():
            out[take] = [str(v) for v in vals[take[mask]].tolist()]
        left &= ~take
    return out


def graph_labels(keys: list[object]) -> list[str]:
    """The label of each graph key (:func:`graph_key`): an id's is itself, the graphs
    named by their kernels are ``graph <n>``, numbered in order of first appearance in
    ``keys`` (numbers an id already takes are skipped)."""
    taken = {k for k in keys if isinstance(k, str)}
    seen: dict[object, str] = {}
    n = 0
    out = []
    for k in keys:
        if isinstance(k, str):
            out.append(k)
            continue
        if k not in seen:
            while f"graph {n}" in taken:
                n += 1
            seen[k] = f"graph {n}"
            n += 1
        out.append(seen[k])
    return out


def replays(trace: Trace) -> Replays:
    """The graph launches the analysed window counts (those starting in its steps; every
    one of a trace analysed whole) and what each ran (once per trace and window)."""
    return cache.memo(trace, "graph_replays", _replays)


def _replays(trace: Trace) -> Replays:
    corr = cache.correlation(trace)
    names = trace.strings
    is_graph = np.fromiter((any(m in s.lower() for m in GRAPH_LAUNCH_MARKERS) for s in names), bool, len(names))
    ev = trace.events
    host = np.flatnonzero(is_graph[ev["name"]] & (trace.kinds == Kind.RUNTIME)) if trace.n_events else np.zeros(0, np.int64)
    host = host[host_mask(trace, ev["start_ns"][host])]
    host = host[np.argsort(ev["start_ns"][host], kind="stable")]
    if not len(host):
        z = np.zeros(0, np.int64)
        return Replays(z, np.zeros(0, object), z, z, np.zeros(0, object))
    pos = np.full(trace.n_events, -1, np.int64)
    pos[host] = np.arange(len(host))
    launch_of = corr.launch
    rep = np.where(launch_of >= 0, pos[np.maximum(launch_of, 0)], -1)
    launched, rep = corr.device_rows[rep >= 0], rep[rep >= 0]
    o = lexsort((ev["start_ns"][launched], rep))
    rows, rep = launched[o], rep[o]
    key = graph_key(trace, host, rows, rep)
    return Replays(host, np.array(graph_labels(key.tolist()), dtype=object), rows, rep, key)


#: the memory kinds in a fill's or copy's name: ``Memset (Device)``, ``Memcpy HtoD (Pinned -> Device)``
_MEMORY_KINDS = r"^(Mem(?:set|cpy)[^(]*?) \([A-Za-z ]+(?: -> [A-Za-z ]+)?\)$"  # compiled on first use


def graph_key(trace: Trace, host: np.ndarray, rows: np.ndarray, rep: np.ndarray) -> np.ndarray:
    """Per launch (``host``), what names its graph wherever it is launched: ``graph <id>``
    from an id stat of the launch (:data:`ID_STATS`, :data:`GRAPH_EXEC_STATS`), else of
    its first activity (``rows`` by replay ``rep``), else the tuple of the names (and
    grids and blocks, where the trace has them) of the activities it ran (replays that ran
    the same ones in the same order: one graph)."""
    label = _first_stat(trace, ID_STATS + GRAPH_EXEC_STATS, host)
    first = np.searchsorted(rep, np.arange(len(host)))
    has = first < len(rep)
    has[has] = rep[first[has]] == np.arange(len(host))[has]
    if (label == "").any() and has.any():
        act = _first_stat(trace, ID_STATS, rows[first[has]])
        fill = (label[has] == "") & (act != "")
        idx = np.flatnonzero(has)[fill]
        label[idx] = act[fill]
    out = np.empty(len(host), object)
    out[:] = [f"graph {x}" if x else None for x in label.tolist()]
    missing = np.flatnonzero(label == "")
    if len(missing):  # a fill's or copy's memory kinds may differ between replays (CUPTI: "Unknown" first)
        ids, inv = unique_inverse(trace.events["name"][rows])
        names = np.asarray([re.sub(_MEMORY_KINDS, r"\1", trace.strings[i]) for i in ids.tolist()], dtype=object)[inv]
        # and their launch shapes: a graph recorded again for a new input shape runs the
        # same kernel names (Inductor's, often cuBLAS's) on other grids; it is another graph
        shape = _first_stat(trace, (GRID,), rows) + "|" + _first_stat(trace, (BLOCK,), rows)
        names = np.where(shape != "|", names + " <" + shape + ">", names)
        bounds = np.searchsorted(rep, np.arange(len(host) + 1))
        for i in missing.tolist():  # one signature per replay (replays are few: one per launch call)
            out[i] = tuple(names[bounds[i]:bounds[i + 1]].tolist())
    return out


class GraphStats(NamedTuple):
    """What the table of a trace's graphs is made of, per graph in order of first launch
    (merged across parts of a trace by :func:`merge_stats`): its key (:func:`graph_key`),
    replays, summed device time, replays by activity count, first activity's name, the
    captured ops its activities were mapped to (each named as in any part of the trace:
    :func:`op_keys`) and how many of its activities were mapped to one."""

    key: list[object]
    replays: np.ndarray
    total_ns: np.ndarray
    sizes: list[dict[int, int]]
    first_kernel: list[str]
    ops: list[set[tuple[int, int, int]]]
    attributed: np.ndarray


def graph_stats(trace: Trace) -> GraphStats:
    """The :class:`GraphStats` of the analysed window's replays, with the captured ops of
    the graphs it captured itself or an earlier window did (once per trace)."""
    def compute(t: Trace) -> GraphStats:
        m = self_captured(t)
        return _stats(t, replays(t), None if m is None else replayed_keys(t, m))[0]

    return cache.memo(trace, "graph_stats", compute)


def op_keys(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """(track, start, name id) of each op row (-1s where a row is -1): what names an op in
    any part of a trace (a store's windows share its tracks and strings)."""
    ok = rows >= 0
    r = np.maximum(rows, 0)
    ev = trace.events
    out = np.stack([ev["track"][r].astype(np.int64), ev["start_ns"][r].astype(np.int64),
                    ev["name"][r].astype(np.int64)], 1) if len(rows) else np.zeros((0, 3), np.int64)
    out[~ok] = -1
    return out


def replayed_keys(trace: Trace, m: ReplayedOps, capture: Trace | None = None) -> np.ndarray:
    """:func:`op_keys` of the captured op of each replayed activity of ``m`` (ops of
    ``capture``, or of ``trace`` and the captures carried into it)."""
    out = op_keys(trace if capture is None else capture, m.op)
    c = m.carried >= 0
    if c.any():
        out[c] = _carried(trace).op_key[m.carried[c]]
    return out


def _stats(trace: Trace, r: Replays, keys: np.ndarray | None = None) -> tuple[GraphStats, np.ndarray]:
    """(stats, graph of each replay: an index into the stats); ``keys``: per replayed
    activity, :func:`op_keys` of the captured op it was mapped to."""
    n = len(r.launch)
    dur = np.asarray(trace.events["dur_ns"][r.rows], np.int64)
    per_replay = np.bincount(r.replay, weights=dur, minlength=n).astype(np.int64)
    count = np.bincount(r.replay, minlength=n)
    index: dict[object, int] = {}
    g_of = np.array([index.setdefault(k, len(index)) for k in r.key.tolist()], np.int64)
    m = len(index)
    reps = np.bincount(g_of, minlength=m).astype(np.int64)
    total = np.zeros(m, np.int64)
    np.add.at(total, g_of, per_replay)
    sizes: list[dict[int, int]] = [{} for _ in range(m)]
    for g, c in zip(g_of.tolist(), count.tolist()):
        sizes[g][c] = sizes[g].get(c, 0) + 1
    first = [""] * m
    starts = np.searchsorted(r.replay, np.arange(n))
    ran = np.flatnonzero(count > 0)
    at = first_and_inverse(g_of[ran])[0]  # the first activity of each graph's first replay that ran any
    codes, labels, _ = qualified_names(trace, r.rows[starts[ran[at]]])  # an XLA kernel: module/kernel
    for g, name in zip(g_of[ran[at]].tolist(), labels[codes].tolist()):
        first[g] = name
    ops: list[set[tuple[int, int, int]]] = [set() for _ in range(m)]
    attributed = np.zeros(m, np.int64)
    if keys is not None and len(r.rows):
        g_act = g_of[r.replay]
        has = keys[:, 0] >= 0
        attributed = np.bincount(g_act[has], minlength=m).astype(np.int64)
        pairs = unique_rows(g_act[has], *keys[has].T)[0]  # (graph, op) once each: few
        for g, *k in pairs.tolist():
            ops[g].add(tuple(k))  # type: ignore[arg-type]
    return GraphStats(list(index), reps, total, sizes, first, ops, attributed), g_of


def merge_stats(parts: list[GraphStats]) -> GraphStats:
    """The stats of consecutive parts of a trace (windows, in time order) as one's."""
    index: dict[object, int] = {}
    reps: list[int] = []
    total: list[int] = []
    sizes: list[dict[int, int]] = []
    first: list[str] = []
    ops: list[set[tuple[int, int, int]]] = []
    attributed: list[int] = []
    for p in parts:
        for k, n, t, s, f, o, a in zip(p.key, p.replays.tolist(), p.total_ns.tolist(), p.sizes, p.first_kernel,
                                       p.ops, p.attributed.tolist()):
            g = index.setdefault(k, len(index))
            if g == len(reps):
                reps.append(0)
                total.append(0)
                sizes.append({})
                first.append("")
                ops.append(set())
                attributed.append(0)
            reps[g] += n
            total[g] += t
            for c, x in s.items():
                sizes[g][c] = sizes[g].get(c, 0) + x
            first[g] = first[g] or f
            ops[g] |= o
            attributed[g] += a
    return GraphStats(list(index), np.array(reps, np.int64), np.array(total, np.int64), sizes, first, ops,
                      np.array(attributed, np.int64))


def graph_table(s: GraphStats) -> Table:
    """The ``cuda_graphs`` table of :class:`GraphStats`."""
    if not len(s.key):
        return empty_frame(COLUMNS, _TEXT)
    lab = np.array(graph_labels(s.key), dtype=object)
    order = np.argsort(lab.astype(str), kind="stable")  # by label, then largest total device time first
    mean = np.array([int(round(t / r)) if r else 0 for t, r in zip(s.total_ns.tolist(), s.replays.tolist())],
                    np.int64)
    order = order[np.argsort(-(mean * s.replays)[order], kind="stable")]
    mode = np.array([min(d, key=lambda c: (-d[c], c)) for d in s.sizes], np.int64)
    acts = [sum(c * x for c, x in d.items()) for d in s.sizes]  # activities of each graph's replays
    attributed = np.array([round(100.0 * float(a / n), 1) if n else 0.0 for a, n in zip(s.attributed.tolist(), acts)])
    return frame({
        "graph": lab[order], "replays": s.replays[order], "device_ns": mean[order],
        "kernels_per_replay": mode[order],
        "captured_ops": np.array([len(o) for o in s.ops], np.int64)[order],
        "attributed_pct": attributed[order],
        "first_kernel": np.array(s.first_kernel, dtype=object)[order],
    })


def cuda_graphs(trace: Trace, capture: Trace | None = None) -> Table:
    """One row per graph: ``graph`` (its id from the trace, else ``graph <n>`` by the
    kernels its replays ran, numbered in order of first launch), ``replays`` (graph
    launches in the analysed steps), ``device_ns`` (device time of one replay: the mean
    over its replays of the summed durations of what it ran), ``kernels_per_replay``
    (activities per replay, the most frequent count), ``captured_ops`` (distinct ops its
    kernels came from: with a capture-time trace, or where ``trace`` holds the stream
    captures itself, as ``torch.compile(mode="reduce-overhead")`` records them in its
    first calls, or an earlier window of its rank did; 0 without), ``attributed_pct``
    (replayed activities mapped to a captured op), ``first_kernel``. Largest total device
    time first."""
    if capture is None:
        return graph_table(graph_stats(trace))
    r = replays(trace)
    return graph_table(_stats(trace, r, replayed_keys(trace, replayed_ops(trace, capture, r), capture))[0])


class ReplayedOps(NamedTuple):  # not a dataclass: cheaper to create at import (docs/benchmarks.md, issue 35)
    """Per replayed activity (aligned with ``Replays.rows``): the capture trace's launch
    row it was mapped to and that launch's op row (-1: none), the op's name, and the
    launch of an earlier window's capture it was mapped to instead (``carried``: its
    index in :func:`carried`'s launches; -1: none)."""

    launch: np.ndarray
    op: np.ndarray
    op_name: np.ndarray
    carried: np.ndarray


def capture_launches(capture: Trace, stream_captured: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The capture trace's launch calls that launched nothing (the captured graph nodes),
    in time order, the framework op around each (-1: none) and the stream capture each
    was made in (``derive/graph_recording.py``; -1: none). ``stream_captured``: only
    those made in a stream capture."""
    corr = cache.correlation(capture)
    ev = capture.events
    names = capture.strings
    launchy = np.fromiter((any(m in s.lower() for m in LAUNCH_MARKERS) and not any(m in s.lower() for m in GRAPH_LAUNCH_MARKERS)
                           and "hostfunc" not in s.lower() for s in names), bool, len(names))  # a host node runs nothing
    rows = np.flatnonzero(launchy[ev["name"]] & (capture.kinds == Kind.RUNTIME)) if capture.n_events else np.zeros(0, np.int64)
    ran = np.zeros(capture.n_events, bool)
    ran[corr.launch[corr.launch >= 0]] = True
    rows = rows[~ran[rows]]
    rows = rows[np.argsort(ev["start_ns"][rows], kind="stable")]
    region = stream_captures(capture, rows)
    if stream_captured:  # each capture's launches together, in order (captures on two threads overlap)
        rows, region = rows[region >= 0], region[region >= 0]
        o = np.lexsort((ev["start_ns"][rows], region))
        rows, region = rows[o], region[o]
    ops = np.flatnonzero(capture.kinds == Kind.CPU_OP)
    thread = cache.threads(capture)
    s = np.asarray(ev["start_ns"], np.int64)
    e = s + np.asarray(ev["dur_ns"], np.int64)
    inner = innermost(thread[ev["track"][ops]], s[ops], e[ops], thread[ev["track"][rows]], s[rows])
    return rows, np.where(inner >= 0, ops[np.maximum(inner, 0)], -1), region


#: the memo key under which a part of a trace holds the captures of the parts before it
CARRIED = "carried_captures"


class Captures(NamedTuple):
    """The stream captures of the parts of a trace read so far, by value, for the parts
    after them (a rank read window by window, ``ranks/stepwise.py``: a graph captured in
    one window, replayed in later ones). Per capture, in order of capture: ``size`` (its
    launches); per launch, the captures' end to end: ``at`` (its start), ``kernel`` (the
    kernel it names, "" where none), ``op_key`` (:func:`op_keys` of the op around it),
    ``op_name``, ``op`` (the index of the first launch made in that op: one id per op;
    -1 none) and the op's ``flops``, ``bytes``, ``precision``, ``source``
    (``flops.op_costs``), ``outer`` (the first launch of the outermost op with FLOPs
    around it, -1 none), ``outer_flops``, ``outer_precision``: the costs
    ``graph_costs.carry_out`` adds. ``found``: per graph key (:func:`graph_key`), the
    first launch of the capture its replays map to (-1: none), as :func:`replayed_ops`
    claims them. Memory: a few values per captured launch and per graph."""

    size: np.ndarray
    at: np.ndarray
    kernel: np.ndarray
    op_key: np.ndarray
    op_name: np.ndarray
    op: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    precision: np.ndarray
    source: np.ndarray
    outer: np.ndarray
    outer_flops: np.ndarray
    outer_precision: np.ndarray
    found: dict[object, int]


def no_captures() -> Captures:
    """The :class:`Captures` of a part with none before it."""
    z = np.zeros(0, np.int64)
    f, o = np.zeros(0), np.zeros(0, object)
    return Captures(z, z, o, np.zeros((0, 3), np.int64), o, z, f, f, o, np.zeros(0, np.int8), z, f, o, {})


def carry_in(trace: Trace, captures: Captures) -> None:
    """Give ``trace`` (a window, before it is analysed) the captures of the parts before it."""
    if len(captures.at) or captures.found:
        trace.__dict__.setdefault("_polyprof_memo", {})[CARRIED] = captures


def carried(trace: Trace) -> Captures | None:
    """The captures given to ``trace`` by :func:`carry_in` (None: none)."""
    got: Captures | None = trace.__dict__.get("_polyprof_memo", {}).get(CARRIED)
    return got


def _carried(trace: Trace) -> Captures:
    got = carried(trace)
    return no_captures() if got is None else got


class Matched(NamedTuple):
    """A trace's replays mapped to the stream captures of the trace and those carried into
    it (``mapped``; None: no capture or no replay), its own captures' launches (``rows``,
    in order of capture), the op around each (-1: none), the launches of each capture,
    and the graphs claimed so far (``Captures.found``)."""

    mapped: ReplayedOps | None
    rows: np.ndarray
    ops: np.ndarray
    sizes: np.ndarray
    found: dict[object, int]


def matched(trace: Trace) -> Matched:
    """:class:`Matched` of ``trace``, once per trace and window."""
    return cache.memo(trace, "graph_matched", _match)


def _match(trace: Trace) -> Matched:
    before = _carried(trace)
    found = dict(before.found)
    z = np.zeros(0, np.int64)
    rows, ops, region = capture_launches(trace, stream_captured=True) if len(trace.rows_named(*CAPTURE_BEGIN)) \
        else (z, z, z)
    sizes = _sizes(region)
    n = len(before.at)
    r = replays(trace) if n + len(rows) else None
    if r is None or not len(r.rows):
        return Matched(None, rows, ops, sizes, found)
    c_kernel = np.concatenate([before.kernel, _first_stat(trace, (LAUNCH_KERNEL_STAT,), rows)])
    c_at = np.concatenate([before.at, np.asarray(trace.events["start_ns"][rows], np.int64)])
    node = _nodes(trace, r, c_kernel, c_at, np.concatenate([before.size, sizes]), found)
    own = node >= n
    launch = np.where(own, rows[np.maximum(node - n, 0)] if len(rows) else -1, -1)
    op = np.where(own, ops[np.maximum(node - n, 0)] if len(rows) else -1, -1)
    names = trace.names(np.maximum(op, 0))  # (the trace's string array, made once: not the table per window)
    car = np.where((node >= 0) & ~own, node, -1)
    op_name = np.where(op >= 0, names, np.where(car >= 0, before.op_name[np.maximum(car, 0)] if n else "", ""))
    return Matched(ReplayedOps(launch, op, op_name.astype(object), car), rows, ops, sizes, found)


def _sizes(region: np.ndarray) -> np.ndarray:
    """The length of each run of one capture in ``region`` (its launches, capture by capture)."""
    if not len(region):
        return np.zeros(0, np.int64)
    first = np.flatnonzero(np.r_[True, region[1:] != region[:-1]])
    return np.diff(np.r_[first, len(region)]).astype(np.int64)


def captures_after(trace: Trace) -> Captures:
    """What the parts after ``trace`` (a window) need of the captures: those carried into
    it, then its own stream captures by value (their costs unknown here:
    ``graph_costs.carry_out`` adds them), with the graphs its replays claimed; a graph
    first replayed where no capture was made yet claims none, as in the trace read whole
    (its replays stay unmapped after a later capture of as many launches)."""
    before, m = _carried(trace), matched(trace)
    found = dict(m.found)
    if m.mapped is None:
        r = replays(trace)
        for key in r.key[np.bincount(r.replay, minlength=len(r.launch)) > 0].tolist():
            found.setdefault(key, -1)
    k, n = len(m.rows), len(before.at)
    first, inv = first_and_inverse(m.ops)
    names = trace.names(np.maximum(m.ops, 0))
    f, o = np.full(k, np.nan), np.full(k, "", object)
    own = Captures(m.sizes, np.asarray(trace.events["start_ns"][m.rows], np.int64),
                   _first_stat(trace, (LAUNCH_KERNEL_STAT,), m.rows), op_keys(trace, m.ops),
                   np.where(m.ops >= 0, names, "").astype(object),
                   np.where(m.ops >= 0, n + first[inv], -1).astype(np.int64) if k else np.zeros(0, np.int64),
                   f, f.copy(), o, np.zeros(k, np.int8), np.full(k, -1, np.int64), f.copy(), o.copy(), found)
    return join_captures(before, own)


def join_captures(a: Captures, b: Captures) -> Captures:
    """``a``'s captures then ``b``'s, with ``b``'s claims (made after ``a``'s)."""
    arrays = [np.concatenate([x, y]) for x, y in zip(a[:-1], b[:-1])]
    return Captures._make([*arrays, b.found])


def self_captured(trace: Trace) -> ReplayedOps | None:
    """:func:`replayed_ops` of :func:`replays` with ``trace`` as its own capture trace,
    where it holds stream captures (a graph recorded in the profiled steps: the k-th
    activity of a replay is the k-th launch of a capture of as many launches, each graph
    its own capture), or an earlier window's were carried into it (:func:`carry_in`);
    None where it holds none. Once per trace and window."""
    return matched(trace).mapped


def replayed_ops(trace: Trace, capture: Trace, r: Replays | None = None,
                 launches: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> ReplayedOps:
    """Map each replayed activity to a captured launch and its op: for each replay, the run
    of consecutive capture launches as long as the replay whose named kernels agree most
    with the replay's kernels (launches that do not name their kernel agree with any).
    ``launches``: :func:`capture_launches` of stream captures alone; a run is then one
    whole capture. Replays that ran the same kernels map alike (found once)."""
    r = replays(trace) if r is None else r
    c_rows, c_ops, region = capture_launches(capture) if launches is None else launches
    c_at = np.asarray(capture.events["start_ns"][c_rows], np.int64)
    node = _nodes(trace, r, _first_stat(capture, (LAUNCH_KERNEL_STAT,), c_rows), c_at,
                  None if launches is None else _sizes(region), {})
    out_l = np.where(node >= 0, c_rows[np.maximum(node, 0)] if len(c_rows) else -1, -1)
    out_o = np.where(node >= 0, c_ops[np.maximum(node, 0)] if len(c_rows) else -1, -1)
    op_name = np.where(out_o >= 0, capture.names(np.maximum(out_o, 0)), "")
    return ReplayedOps(out_l, out_o, op_name.astype(object), np.full(len(r.rows), -1, np.int64))


def _nodes(trace: Trace, r: Replays, c_kernel: np.ndarray, c_at: np.ndarray, sizes: np.ndarray | None,
           found: dict[object, int]) -> np.ndarray:
    """Per replayed activity, the captured launch it repeats (an index into ``c_kernel``,
    the launches' kernels, and ``c_at``, their starts; -1: none). ``sizes``: the
    launches of each stream capture, which then hold them capture by capture (None: any
    run of consecutive launches); ``found``: the capture each graph key claimed (the
    first launch of its run), updated in place."""
    out = np.full(len(r.rows), -1, np.int64)
    if not len(c_kernel) or not len(r.rows):
        return out
    r_names = trace.names(r.rows)
    bounds = np.searchsorted(r.replay, np.arange(len(r.launch) + 1))
    offsets: dict[int, list[int]] = {}  # the first launch of each capture, by its number of launches
    if sizes is not None:
        for f, k in zip(np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64).tolist(), sizes.tolist()):
            offsets.setdefault(k, []).append(f)
    claimed = set(found.values())
    r_at = np.asarray(trace.events["start_ns"][r.launch], np.int64)
    for i in range(len(r.launch)):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        k = hi - lo
        if k == 0 or (sizes is None and k > len(c_kernel)):  # (a stream capture's graph: -1 found, no capture so long)
            continue
        want = r_names[lo:hi]
        key = tuple(want.tolist()) if sizes is None else r.key[i]
        if key not in found:
            if sizes is None:
                found[key] = _best_run(c_kernel, want, range(len(c_kernel) - k + 1))
            else:  # one capture per graph: the first unclaimed one made before its first replay
                starts = [f for f in offsets.get(k, []) if f not in claimed and c_at[f + k - 1] < r_at[i]]
                found[key] = _best_run(c_kernel, want, starts)
                claimed.add(found[key])
        best_s = found[key]
        if best_s < 0:
            continue
        got = c_kernel[best_s:best_s + k]
        ok = (got == "") | (got == want)
        out[lo:hi] = np.where(ok, best_s + np.arange(k), -1)
    return out


def _best_run(c_kernel: np.ndarray, want: np.ndarray, starts: Iterable[int]) -> int:
    """The start of the run of captured launches whose named kernels agree most with
    ``want`` (the first of equals; -1: no start)."""
    best, best_s = -1, -1
    k = len(want)
    for s0 in starts:
        got = c_kernel[s0:s0 + k]
        named = got != ""
        agree = int((got[named] == want[named]).sum()) - int((got[named] != want[named]).sum())
        if agree > best:
            best, best_s = agree, s0
    return best_s
