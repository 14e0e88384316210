"""CUDA/HIP graphs: which graph each graph launch replayed, what each replay did on the
device, and which captured op each replayed kernel came from.

A replay is one graph launch call (``GRAPH_LAUNCH_MARKERS``) with the device activity it
launched (every activity of a replay shares the call's correlation id). Its graph is named
by the launch's graph / exec id stats or its activities' (``GRAPH_ID_STATS``,
``GRAPH_EXEC_STATS``: Kineto's args, nsys' and CUPTI's graphId) where the trace has them,
else by the sequence of kernels it ran: replays that ran the same kernels in the same order
are one graph.

Replayed kernels map to ops through a capture-time trace (:func:`replayed_ops`): a graph's
nodes are the launches made while capturing it, which launched nothing then; the k-th
activity of a replay is the k-th launch of the capture (where a launch names its kernel,
the names must agree), and its op is the framework op around that launch.
"""

from __future__ import annotations

from typing import NamedTuple


import numpy as np

from ..derive import cache
from ..derive.intervals import innermost
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import lexsort, unique
from ..trace.vocabulary import (GRAPH_EXEC_STATS, GRAPH_ID_STATS, GRAPH_LAUNCH_MARKERS, LAUNCH_KERNEL_STAT,
                                LAUNCH_MARKERS)
from .frames import empty_frame, frame
from .table import Table

COLUMNS = ["graph", "replays", "device_ns", "kernels_per_replay", "captured_ops", "attributed_pct",
           "first_kernel"]
_TEXT = ("graph", "first_kernel")


class Replays(NamedTuple):  # not a dataclass: cheaper to create at import (docs/benchmarks.md, issue 35)
    """Every graph launch (``launch``: host rows, in time order) with its graph label, and
    its device activity (``rows``, ``replay``: index into ``launch``; by replay, then start)."""

    launch: np.ndarray
    graph: np.ndarray  # object: label per replay
    rows: np.ndarray
    replay: np.ndarray


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


def replays(trace: Trace) -> Replays:
    corr = cache.correlation(trace)
    names = trace.strings
    is_graph = np.fromiter((any(m in s.lower() for m in GRAPH_LAUNCH_MARKERS) for s in names), bool, len(names))
    ev = trace.events
    launch_of = corr.launch
    graph_launch = launch_of >= 0
    graph_launch[graph_launch] = is_graph[ev["name"][launch_of[graph_launch]]]
    launched = corr.device_rows[graph_launch]
    by = launch_of[graph_launch]
    host = np.flatnonzero(is_graph[ev["name"]] & (trace.kinds == Kind.RUNTIME)) if trace.n_events else np.zeros(0, np.int64)
    host = host[np.argsort(ev["start_ns"][host], kind="stable")]
    if not len(host):
        z = np.zeros(0, np.int64)
        return Replays(z, np.zeros(0, object), z, z)
    pos = np.full(trace.n_events, -1, np.int64)
    pos[host] = np.arange(len(host))
    rep = pos[by]
    o = lexsort((ev["start_ns"][launched], rep))
    rows, rep = launched[o], rep[o]
    # the graph: an id stat of the launch, else of its first activity, else its kernel sequence
    label = _first_stat(trace, GRAPH_ID_STATS + GRAPH_EXEC_STATS, host)
    first = np.searchsorted(rep, np.arange(len(host)))
    has = first < len(rep)
    has[has] = rep[first[has]] == np.arange(len(host))[has]
    if (label == "").any() and has.any():
        act = _first_stat(trace, GRAPH_ID_STATS, rows[first[has]])
        fill = (label[has] == "") & (act != "")
        idx = np.flatnonzero(has)[fill]
        label[idx] = act[fill]
    missing = np.flatnonzero(label == "")
    if len(missing):
        seqs: dict[bytes, int] = {}
        kname = ev["name"][rows]
        bounds = np.searchsorted(rep, np.arange(len(host) + 1))
        for i in missing.tolist():  # one signature per replay (replays are few: one per launch call)
            sig = np.ascontiguousarray(kname[bounds[i]:bounds[i + 1]]).tobytes()
            label[i] = f"graph {seqs.setdefault(sig, len(seqs))}"
    else:
        label = np.array([f"graph {x}" for x in label.tolist()], dtype=object)
    return Replays(host, label, rows, rep)


def cuda_graphs(trace: Trace, capture: Trace | None = None) -> Table:
    """One row per graph: ``graph`` (its id from the trace, else ``graph <n>`` by the
    kernels its replays ran), ``replays`` (graph launches), ``device_ns`` (device time of
    one replay: the mean over its replays of the summed durations of what it ran),
    ``kernels_per_replay`` (activities per replay, the most frequent count),
    ``captured_ops`` (distinct ops its kernels came from, with a capture-time trace, 0
    without), ``attributed_pct`` (replayed activities mapped to a captured op),
    ``first_kernel``. Largest total device time first."""
    r = replays(trace)
    if not len(r.launch):
        return empty_frame(COLUMNS, _TEXT)
    ev = trace.events
    dur = np.asarray(ev["dur_ns"][r.rows], np.int64)
    n = len(r.launch)
    per_replay = np.bincount(r.replay, weights=dur, minlength=n).astype(np.int64)
    count = np.bincount(r.replay, minlength=n)
    graphs, g_of = np.unique(r.graph.astype(str), return_inverse=True)
    mapped = replayed_ops(trace, capture, r) if capture is not None else None
    out: dict[str, list] = {c: [] for c in COLUMNS}
    names = np.asarray(trace.strings, dtype=object)
    for gi, label in enumerate(graphs.tolist()):
        mine = np.flatnonzero(g_of == gi)
        acts = np.isin(r.replay, mine)
        counts = count[mine]
        vals, freq = np.unique(counts, return_counts=True)
        out["graph"].append(label)
        out["replays"].append(len(mine))
        out["device_ns"].append(int(round(per_replay[mine].mean())))
        out["kernels_per_replay"].append(int(vals[np.argmax(freq)]))
        if mapped is not None:
            ops = mapped.op[acts]
            out["captured_ops"].append(len(unique(ops[ops >= 0])))
            out["attributed_pct"].append(round(100.0 * float((ops >= 0).mean()), 1) if acts.any() else 0.0)
        else:
            out["captured_ops"].append(0)
            out["attributed_pct"].append(0.0)
        first = r.rows[acts][:1]
        out["first_kernel"].append(str(names[ev["name"][first[0]]]) if len(first) else "")
    total = np.array(out["device_ns"]) * np.array(out["replays"])
    order = np.argsort(-total, kind="stable")
    return frame({
        "graph": np.array(out["graph"], dtype=object)[order],
        "replays": np.array(out["replays"], np.int64)[order],
        "device_ns": np.array(out["device_ns"], np.int64)[order],
        "kernels_per_replay": np.array(out["kernels_per_replay"], np.int64)[order],
        "captured_ops": np.array(out["captured_ops"], np.int64)[order],
        "attributed_pct": np.array(out["attributed_pct"], np.float64)[order],
        "first_kernel": np.array(out["first_kernel"], dtype=object)[order],
    })


class ReplayedOps(NamedTuple):  # not a dataclass: cheaper to create at import (docs/benchmarks.md, issue 35)
    """Per replayed activity (aligned with ``Replays.rows``): the capture trace's launch
    row it was mapped to and that launch's op row (-1: none), and the op's name."""

    launch: np.ndarray
    op: np.ndarray
    op_name: np.ndarray


def capture_launches(capture: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The capture trace's launch calls that launched nothing (the captured graph nodes),
    in time order, and the framework op around each (-1: none)."""
    corr = cache.correlation(capture)
    ev = capture.events
    names = capture.strings
    launchy = np.fromiter((any(m in s.lower() for m in LAUNCH_MARKERS) and not any(m in s.lower() for m in GRAPH_LAUNCH_MARKERS)
                           for s in names), bool, len(names))
    rows = np.flatnonzero(launchy[ev["name"]] & (capture.kinds == Kind.RUNTIME)) if capture.n_events else np.zeros(0, np.int64)
    ran = np.zeros(capture.n_events, bool)
    ran[corr.launch[corr.launch >= 0]] = True
    rows = rows[~ran[rows]]
    rows = rows[np.argsort(ev["start_ns"][rows], kind="stable")]
    ops = np.flatnonzero(capture.kinds == Kind.CPU_OP)
    thread = cache.threads(capture)
    s = np.asarray(ev["start_ns"], np.int64)
    e = s + np.asarray(ev["dur_ns"], np.int64)
    inner = innermost(thread[ev["track"][ops]], s[ops], e[ops], thread[ev["track"][rows]], s[rows])
    return rows, np.where(inner >= 0, ops[np.maximum(inner, 0)], -1)


def replayed_ops(trace: Trace, capture: Trace, r: Replays | None = None) -> ReplayedOps:
    """Map each replayed activity to a captured launch and its op: for each replay, the run
    of consecutive capture launches as long as the replay whose named kernels agree most
    with the replay's kernels (launches that do not name their kernel agree with any)."""
    r = replays(trace) if r is None else r
    c_rows, c_ops = capture_launches(capture)
    out_l = np.full(len(r.rows), -1, np.int64)
    out_o = np.full(len(r.rows), -1, np.int64)
    if not len(c_rows) or not len(r.rows):
        return ReplayedOps(out_l, out_o, np.full(len(r.rows), "", dtype=object))
    c_kernel = _first_stat(capture, (LAUNCH_KERNEL_STAT,), c_rows)
    r_names = np.asarray(trace.strings, dtype=object)[trace.events["name"][r.rows]]
    bounds = np.searchsorted(r.replay, np.arange(len(r.launch) + 1))
    for i in range(len(r.launch)):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        k = hi - lo
        if k == 0 or k > len(c_rows):
            continue
        want = r_names[lo:hi]
        best, best_s = -1, -1
        for s0 in range(len(c_rows) - k + 1):  # offsets: captures in the file, usually one per size
            got = c_kernel[s0:s0 + k]
            named = got != ""
            agree = int((got[named] == want[named]).sum()) - int((got[named] != want[named]).sum())
            if agree > best:
                best, best_s = agree, s0
        got = c_kernel[best_s:best_s + k]
        ok = (got == "") | (got == want)
        out_l[lo:hi] = np.where(ok, c_rows[best_s:best_s + k], -1)
        out_o[lo:hi] = np.where(ok, c_ops[best_s:best_s + k], -1)
    op_name = np.where(out_o >= 0, np.asarray(capture.strings, dtype=object)[capture.events["name"][np.maximum(out_o, 0)]], "")
    return ReplayedOps(out_l, out_o, op_name)
