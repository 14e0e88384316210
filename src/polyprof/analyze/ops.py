"""Framework ops and the launches they made."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..derive.correlate import METHOD_NAMES, Correlation
from ..derive.intervals import child_time
from ..derive.projection import LaunchIndex
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import unique_inverse
from ..trace.vocabulary import GRAPH_LAUNCH_MARKERS
from .common import CLASS_NAMES, device_view, qualified_names
from .frames import column, empty_frame, factorize, frame, labels, order_asc, order_desc
from .grouping import group_reduce, group_stats
from . import nesting
from .nesting import parents
from .window import WindowArg, round_like_hta, view
from .window_counting import counted_ns, host_mask

if TYPE_CHECKING:
    from .table import Table


def op_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per framework op name (events of kind CPU_OP, e.g. ``aten::linear``).

    Columns: ``name``, ``count``, ``total_ns`` (host time including nested ops),
    ``self_ns`` (host time minus the direct children: ops and runtime calls such as
    ``cudaLaunchKernel``), ``mean_ns``, ``max_ns``, ``device_ns`` (duration of all device
    activity launched inside the op, nested ops included; a device activity with no
    launch call that names its op by external id counts for that op and the ops around
    it), ``self_device_ns`` (device
    activity whose launch links to this op itself, by external id or as the innermost
    op), ``launches`` (device activities launched inside the op). Sorted by
    ``total_ns``. With a ``window``, the ops that start in its steps.

    An op whose only child op has its own name (``aten::div`` calling ``aten::div``) is
    one call: the child is merged into it, its children and device activity become the
    parent's, as torch's ``key_averages`` and TensorBoard's torch plugin count
    (``EventList._remove_dup_nodes``), so inclusive times are not counted twice.
    """
    trace = view(trace, window)
    cols = ["name", "count", "total_ns", "self_ns", "mean_ns", "max_ns", "device_ns", "self_device_ns", "launches"]
    ev = trace.events
    ops = trace.rows_of_kind(Kind.CPU_OP)
    ops = ops[host_mask(trace, ev["start_ns"][ops])]
    if not len(ops):
        return empty_frame(cols, ("name",))
    threads = cache.threads(trace)
    st, du, tr = ev["start_ns"][ops], ev["dur_ns"][ops], threads[ev["track"][ops]]
    rt = trace.rows_of_kind(Kind.RUNTIME)
    corr = cache.correlation(trace)
    one = _one_nesting(trace, ops, rt, not bool((corr.launch >= 0).any()))
    into = merged_into(tr, st, st + du, ev["name"][ops]) if one is None else one[0]
    direct = np.zeros(len(ops), np.int64)
    has = corr.op >= 0
    if has.any():
        pos = np.minimum(np.searchsorted(ops, corr.op), len(ops) - 1)
        has &= ops[pos] == corr.op  # the op is one of those counted (a window may leave it out)
        np.add.at(direct, into[pos[has]], ev["dur_ns"][corr.device_rows[has]])
        del pos
    keep = into == np.arange(len(ops))
    del has, into  # (what is live at the launch index below is the summary's peak)
    unlaunched = _unlaunched(trace, corr, ops, tr, st, du)[keep]
    ops, st, du, tr, direct = ops[keep], st[keep], du[keep], tr[keep], direct[keep]
    if one is not None:
        self_ns = du - one[1][keep]
    else:
        c_tr = np.concatenate([tr, threads[ev["track"][rt]]])
        c_st = np.concatenate([st, ev["start_ns"][rt]])
        self_ns = du - child_time(c_tr, c_st, c_st + np.concatenate([du, ev["dur_ns"][rt]]))[:len(ops)]
        del c_tr, c_st
    del one, keep
    proj = LaunchIndex(trace, corr).project(tr, st, st + du)
    g = group_stats(ev["name"][ops], du)
    o, st_ = g["order"], g["starts"]
    out = frame({
        "name": np.asarray(trace.strings, dtype=object)[g["key"]], "count": g["count"], "total_ns": g["total"],
        "self_ns": group_reduce(o, st_, np.maximum(self_ns, 0), np.add), "mean_ns": g["mean"], "max_ns": g["max"],
        "device_ns": group_reduce(o, st_, proj.busy_ns + unlaunched, np.add),
        "self_device_ns": group_reduce(o, st_, direct, np.add),
        "launches": group_reduce(o, st_, proj.count, np.add)}, order=order_desc(g["total"]))
    return out


def _unlaunched(trace: Trace, corr: Correlation, ops: np.ndarray, track: np.ndarray, start: np.ndarray,
                dur: np.ndarray) -> np.ndarray:
    """Per op, the device activity with no launch call that names it or an op inside it as
    its op (by external id: torch's legacy export, whose ops' CUDA work has no launch), so
    that ``device_ns`` counts it as it counts launched work."""
    out = np.zeros(len(ops), np.int64)
    linked = np.flatnonzero((corr.launch < 0) & (corr.op >= 0))
    if not len(linked):
        return out
    pos = np.minimum(np.searchsorted(ops, corr.op[linked]), len(ops) - 1)
    ok = ops[pos] == corr.op[linked]
    np.add.at(out, pos[ok], trace.events["dur_ns"][corr.device_rows[linked[ok]]])
    order, depth, parent = parents(track, start, start + dur)
    for d in range(int(depth.max(initial=0)), 0, -1):  # each op's into its parent's, the deepest first
        at = np.flatnonzero(depth == d)
        np.add.at(out, order[parent[at]], out[order[at]])
    return out


def merged_into(track: np.ndarray, start: np.ndarray, end: np.ndarray, name: np.ndarray) -> np.ndarray:
    """For each op, the op it counts as: itself, or (an op that is the only child op of
    one with the same name, as torch's ``EventList._remove_dup_nodes``) the outermost op
    of that chain. Parents come from the nesting depth, one searchsorted per level."""
    n = len(start)
    out = np.arange(n, dtype=np.int64)
    order, depth, parent = parents(track, start, end)
    if not len(order) or not depth.max():
        return out
    up = _merge_chains(order, parent, parent >= 0, name)
    out[order] = order[up]
    return out


def _merge_chains(order: np.ndarray, parent: np.ndarray, op: np.ndarray, name: np.ndarray) -> np.ndarray:
    """Per position, the position it counts as: the top of its chain of only child ops
    of one name (``op``: the positions that are ops, whose ``parent`` is an op too)."""
    has = (parent >= 0) & op
    only = np.bincount(parent[has], minlength=len(order)) == 1
    same = np.zeros(len(order), bool)
    same[has] = (name[order[has]] == name[order[parent[has]]]) & only[parent[has]]
    up = np.where(same, parent, np.arange(len(order)))
    while True:  # to the top of each chain (pointer jumping)
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        up = nxt
    return up


def _one_nesting(trace: Trace, ops: np.ndarray, rt: np.ndarray,
                 keep: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """(``merged_into`` of the ``ops``, and per op the time of its direct children once
    the merged ops are left out: ops and runtime calls, as ``child_time`` of the kept ops
    and the runtime calls ``rt`` gives it) from one nesting of the ops and runtime calls
    together (in row order, ``nesting.of_rows``: the critical path's too, of a window of
    host calls alone; ``keep``: whether it is kept for it, where no call launched device
    work, as on a TPU's host). None where they
    do not nest (a span outlasting its parent) or a runtime call holds an op (as where a
    call comes before an op of the same span): there the ops' own nesting differs, and
    each is computed apart."""
    n = len(ops)
    ev = trace.events
    rows = np.concatenate([ops, rt])
    at = np.argsort(rows, kind="stable")  # op or call of each row, in row order
    rows = rows[at]
    some = ev["dur_ns"][rows] > 0  # what nests: spans of some length
    at, rows = at[some], rows[some]
    del some
    sorted_order, _, parent = nesting.of_rows(trace, rows, keep)
    order = at[sorted_order]  # as positions among the ops, then the calls
    del rows, at, sorted_order  # (the spans' times after the nesting: its sort is op_stats' peak)
    c_du = np.concatenate([ev["dur_ns"][ops], ev["dur_ns"][rt]]).astype(np.int64)
    c_en = np.concatenate([ev["start_ns"][ops], ev["start_ns"][rt]]).astype(np.int64) + c_du
    has = np.flatnonzero(parent >= 0)
    op = order < n
    if not bool((c_en[order[has]] <= c_en[order[parent[has]]]).all()) or not bool(op[parent[has]][op[has]].all()):
        return None
    name = ev["name"][ops]
    up = _merge_chains(order, parent, op, np.concatenate([name, np.zeros(len(rt), name.dtype)]))
    into = np.arange(n, dtype=np.int64)
    into[order[op]] = order[up[op]]
    # each span not merged away counts for the top of its parent's chain
    kept = has[up[has] == has]
    children = np.zeros(len(order), np.int64)
    np.add.at(children, up[parent[kept]], c_du[order[kept]])
    out = np.zeros(n, np.int64)
    out[order[op]] = children[op]
    return into, out


def launch_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per device activity matched to the host call that launched it.

    Columns: ``launch_row``, ``device_row`` (event rows), ``launch_name`` (e.g.
    ``cudaLaunchKernel``), ``name`` (the device activity; ``module/kernel`` for a kernel
    of a known XLA module, as ``kernel_breakdown`` names it), ``module``, ``kind``, ``plane``,
    ``stream``, ``step`` (-1 outside steps), ``method`` (correlation_id / flow /
    in_order), ``launch_start_ns``, ``cpu_duration_ns`` (the launch call),
    ``device_start_ns``, ``device_duration_ns``, ``launch_delay_ns`` (device start minus
    launch call start: how long after the host asked the work began), ``queue_delay_ns``
    (device start minus launch call end), ``graph_launch`` (the call launches a CUDA/HIP
    graph: every kernel of the graph shares its correlation id and is attributed to it
    and its op). Sorted by launch start. With a ``window``, the activities launched in
    its steps; a time window's, those running in it, ``device_duration_ns`` their part
    inside (``window_counting.counted_ns``, as ``kernel_breakdown`` sums them), the other columns
    their own. Under a window that rounds as HTA (``round_us``, ``--window hta``) every
    time is rounded to whole µs as HTA reads the file (``window.round_like_hta``); HTA's
    ``launch_delay`` is then ``queue_delay_ns`` clipped at 0 (from the call's end, where
    ``launch_delay_ns`` runs from its start).
    """
    trace = view(trace, window)
    corr = cache.correlation(trace)
    steps = cache.steps(trace)
    ev = trace.events
    v = device_view(trace)  # its rows are corr.device_rows, its counted ones those the window counts
    has = np.flatnonzero((corr.launch >= 0) & v.counted)
    # in launch-start order before any column is made: the table's columns are then made
    # once, not made and copied in that order (twice its 17 columns at once, the peak of
    # a summary of launches)
    has = has[order_asc(ev["start_ns"][corr.launch[has]])]
    l, d = corr.launch[has], corr.device_rows[has]
    step_idx = steps.of(ev["start_ns"][l])
    # the call's and the activity's times as the device view has them: rounded to whole
    # µs as HTA reads the file where the window asks (round_us), else the file's
    ls, le = round_like_hta(trace, ev["start_ns"][l], ev["start_ns"][l] + ev["dur_ns"][l])
    ld = le - ls
    ds, de = v.start[has], v.end[has]
    dd = counted_ns(trace, ds, de, de - ds)
    tnames = np.array([t.name for t in trace.tracks], object)
    pnames = np.array([p.name for p in trace.planes], object)
    codes, labels, modules = qualified_names(trace, d)  # an XLA kernel: module/kernel, as kernel_breakdown's
    return frame({
        "launch_row": l, "device_row": d, "launch_name": trace.names(l), "name": labels[codes],
        "module": modules[codes],
        "kind": CLASS_NAMES[v.cls[has]],
        "plane": pnames[trace.track_plane[ev["track"][d]]] if len(d) else np.zeros(0, object),
        "stream": tnames[ev["track"][d]],
        "step": np.where(step_idx >= 0, steps.number[np.maximum(step_idx, 0)] if len(steps) else -1, -1),
        "method": np.array([METHOD_NAMES[m] for m in range(4)], object)[corr.method[has]],
        "launch_start_ns": ls, "cpu_duration_ns": ld, "device_start_ns": ds, "device_duration_ns": dd,
        "launch_delay_ns": ds - ls, "queue_delay_ns": ds - (ls + ld),
        "graph_launch": is_graph_launch(trace, l),
    })


def launch_summary(trace: Trace, launches: Table | None = None, window: WindowArg = None) -> Table:
    """One row per (device, launch call name), from :func:`launch_stats` (pass it to reuse it).

    Columns: ``plane``, ``launch_name``, ``count`` (device activities launched),
    ``launches`` (distinct launch calls: a graph launch of 40 kernels is one),
    ``graph_launches`` (of those, graph launches), ``cpu_mean_ns`` (mean duration of the
    call, over launch calls), ``device_mean_ns`` (mean duration of what it launched),
    ``delay_median_ns`` and ``delay_p99_ns`` (launch delay, over activities). Sorted by
    count, most first.
    """
    ls = launch_stats(trace, window=window) if launches is None else launches
    cols = ["plane", "launch_name", "count", "launches", "graph_launches", "cpu_mean_ns", "device_mean_ns",
            "delay_median_ns", "delay_p99_ns"]
    if not len(ls):
        return empty_frame(cols, cols[:2], np.float64)
    pc, planes = factorize(column(ls, "plane"))
    nc, names = factorize(column(ls, "launch_name"))
    g = group_stats(pc.astype(np.int64) * len(names) + nc, column(ls, "launch_delay_ns"))
    o, st, n = g["order"], g["starts"], g["count"]
    p, k = np.divmod(g["key"], len(names))
    # a launch call counts once on each device however many activities it launched there
    # (a graph launch: dozens; a cooperative multi-device launch: one on each device)
    row = column(ls, "launch_row").astype(np.int64)
    first = first_of_each(pc.astype(np.int64) * (int(row.max()) + 1) + row).astype(np.int64)
    calls = group_reduce(o, st, first, np.add)
    # (a label looked up in the list: "in ls" builds the labels' hash table)
    graph = first * column(ls, "graph_launch").astype(np.int64) if "graph_launch" in labels(ls) else first * 0
    out = frame({
        "plane": np.asarray(planes, object)[p], "launch_name": np.asarray(names, object)[k], "count": n,
        "launches": calls, "graph_launches": group_reduce(o, st, graph, np.add),
        "cpu_mean_ns": group_reduce(o, st, column(ls, "cpu_duration_ns") * first, np.add) / calls,
        "device_mean_ns": group_reduce(o, st, column(ls, "device_duration_ns"), np.add) / n,
        "delay_median_ns": g["median"], "delay_p99_ns": g["p99"]}, order=order_desc(n))
    return out


def first_of_each(values: np.ndarray) -> np.ndarray:
    """True at the first occurrence of each value (``~Series.duplicated()``)."""
    out = np.zeros(len(values), bool)
    if len(values):
        o = np.argsort(values, kind="stable")
        v = values[o]
        out[o[np.r_[True, v[1:] != v[:-1]]]] = True
    return out


def is_graph_launch(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which launch calls launch a whole graph (``cudaGraphLaunch``, ``hipGraphLaunch``...)."""
    if not len(rows):
        return np.zeros(0, bool)
    ids, inv = unique_inverse(trace.events["name"][rows])
    graph = np.fromiter((any(m in trace.strings[i].lower() for m in GRAPH_LAUNCH_MARKERS) for i in ids), bool,
                        len(ids))
    return graph[inv]
