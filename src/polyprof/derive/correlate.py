"""Host <-> device correlation: which host call launched each device activity, and
which framework op made that call.

Three ways to link a device activity to its launch, tried in order: a shared
correlation id, a flow event from the launch, and (for queues that give neither)
matching in order on the queue. Framework ops link to launches by external id, or
else by enclosing the launch in time on its thread. Whatever stays unmatched is
counted in :attr:`Correlation.counts`; nothing is dropped silently. A launch-like call
made while its thread built a CUDA graph (stream capture, XLA's command buffers) has no
activity of its own: it is counted apart (``launch_calls_recorded_into_graphs``). Activity whose
correlation id is 0 (CUPTI's id of work no API call made: unified-memory migrations)
has no launch to find: it is counted apart (``device_activities_without_launch_call``),
not as unmatched.
"""

from __future__ import annotations

import logging

import numpy as np

from ..trace import keys
from ..trace.categories import DEVICE_ACTIVITY, Kind
from ..trace.core import Trace
from ..trace.sorting import lexsort, member, unique, unique_inverse
from ..trace.vocabulary import LAUNCH_MARKERS, NOT_LAUNCH_CATEGORIES
from .graph_recording import recorded
from .memo import threads
from .intervals import innermost

log = logging.getLogger("polyprof")

UNMATCHED, BY_ID, BY_FLOW, IN_ORDER = 0, 1, 2, 3
METHOD_NAMES = {UNMATCHED: "unmatched", BY_ID: "correlation_id", BY_FLOW: "flow", IN_ORDER: "in_order"}



class Correlation:
    """Links for every device activity row (arrays aligned with ``device_rows``). A plain
    class, not a dataclass: made once per trace, its generated methods compiled at every
    start (docs/benchmarks.md, issue 35), and equality of arrays means nothing here."""

    def __init__(self, device_rows: np.ndarray, launch: np.ndarray, method: np.ndarray, op: np.ndarray,
                 launch_rows: np.ndarray, counts: dict[str, int] | None = None):
        self.device_rows = device_rows  # event rows of device activity, ascending
        self.launch = launch  # launching host call row per device row, -1 if unmatched
        self.method = method  # int8: UNMATCHED, BY_ID, BY_FLOW, IN_ORDER
        self.op = op  # framework op row (Kind.CPU_OP) per device row, -1 if none
        self.launch_rows = launch_rows  # every host API call that looks like a launch
        self.counts: dict[str, int] = {} if counts is None else counts

    def matched(self) -> np.ndarray:
        return self.launch >= 0


def device_activity_rows(trace: Trace) -> np.ndarray:
    """Rows of device activity (kernels, copies, fills, collectives) on device planes."""
    rows = trace.rows_of_kind(*DEVICE_ACTIVITY)
    if not len(rows):
        return rows
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)
    tr = trace.events["track"][rows]
    keep = ~host[trace.track_plane[tr]] & ~derived[tr]
    return rows[keep]


def _int_stat(trace: Trace, key: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask, int64 values) of a numeric stat for ``rows``; strings are parsed when possible."""
    col = trace.stats.get(key)
    if col is None or not len(rows):
        return np.zeros(len(rows), bool), np.zeros(0, np.int64)
    mask, vals = col.lookup(rows)
    if col.kind in "iuf":
        return mask, vals.astype(np.int64)
    out = np.zeros(len(vals), np.int64)
    ok = np.zeros(len(vals), bool)
    for i, v in enumerate(vals):
        try:
            out[i] = int(v)
            ok[i] = True
        except (TypeError, ValueError, OverflowError):  # not an id, or beyond int64
            pass
    full = mask.copy()
    full[np.flatnonzero(mask)[~ok]] = False
    return full, out[ok]


def _by_id(src_rows: np.ndarray, src_ids: np.ndarray, dst_ids: np.ndarray) -> np.ndarray:
    """For each dst id, the src row with that id (first by row when repeated), or -1."""
    if not len(src_rows) or not len(dst_ids):
        return np.full(len(dst_ids), -1, np.int64)
    order = lexsort((src_rows, src_ids))
    ids, rows = src_ids[order], src_rows[order]
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    ids, rows = ids[first], rows[first]
    pos = np.minimum(np.searchsorted(ids, dst_ids), len(ids) - 1)
    return np.where(ids[pos] == dst_ids, rows[pos], -1)


def _scoped(trace: Trace, src_rows: np.ndarray, src_ids: np.ndarray, dst_rows: np.ndarray,
            dst_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ids that only match within one source: in a trace of several ranks or processes,
    rank 1's correlation id 7 is not rank 0's. One source: the ids as they are."""
    if len(trace.sources) < 2:
        return src_ids, dst_ids
    es = trace.event_sources()
    pairs = np.stack([np.concatenate([es[src_rows], es[dst_rows]]).astype(np.int64),
                      np.concatenate([src_ids, dst_ids])], axis=1)
    _, codes = np.unique(pairs, axis=0, return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    return codes[:len(src_ids)], codes[len(src_ids):]


def correlate(trace: Trace) -> Correlation:
    """Link device activity to launches, and launches to framework ops (see module doc)."""
    ev = trace.events
    dev = device_activity_rows(trace)
    n = len(dev)
    launch = np.full(n, -1, np.int64)
    method = np.zeros(n, np.int8)
    runtime = trace.rows_of_kind(Kind.RUNTIME)
    rt_host = runtime[np.array([p.kind == "host" for p in trace.planes], bool)[
        trace.track_plane[ev["track"][runtime]]]] if len(runtime) else runtime

    # 1. correlation id
    rmask, rids = _int_stat(trace, keys.CORRELATION_ID, rt_host)
    dmask, dids = _int_stat(trace, keys.CORRELATION_ID, dev)
    # CUPTI's correlation id 0: work no API call made (unified-memory migrations): no launch to miss
    no_call = np.zeros(n, bool)
    no_call[np.flatnonzero(dmask)[dids == 0]] = True
    if dmask.any():
        rids, dids = _scoped(trace, rt_host[rmask], rids, dev[dmask], dids)
        hit = _by_id(rt_host[rmask], rids, dids)
        at = np.flatnonzero(dmask)
        launch[at] = hit
        method[at[hit >= 0]] = BY_ID

    # 2. flows from a host call to a device activity
    fl = trace.flows
    if len(fl["src"]) and (launch < 0).any():
        src, dst = fl["src"], fl["dst"]
        is_host_src = member(src, rt_host)
        pos = np.minimum(np.searchsorted(dev, dst), max(n - 1, 0))
        to_dev = (dev[pos] == dst) & is_host_src if n else np.zeros(len(dst), bool)
        pos, src = pos[to_dev], src[to_dev]
        free = launch[pos] < 0
        launch[pos[free]] = src[free]
        method[pos[free]] = BY_FLOW

    # 3. in order on queues that gave no id: device rows keyed by queue, launches by queue stat
    if (launch < 0).any():
        _in_order(trace, dev, launch, method, rt_host)

    # framework op of each launch: external id, else the innermost cpu_op around the call
    ops = trace.rows_of_kind(Kind.CPU_OP)
    op = np.full(n, -1, np.int64)
    has = launch >= 0
    if len(ops):
        omask, oids = _int_stat(trace, keys.EXTERNAL_ID, ops)
        lrows = launch[has]
        lmask, lids = _int_stat(trace, keys.EXTERNAL_ID, lrows)
        lop = np.full(len(lrows), -1, np.int64)
        if lmask.any() and omask.any():
            o_ids, l_ids = _scoped(trace, ops[omask], oids, lrows[lmask], lids)
            lop[lmask] = _by_id(ops[omask], o_ids, l_ids)
        need = lop < 0
        if need.any():
            ends = ev["start_ns"][ops] + ev["dur_ns"][ops]
            th = threads(trace)
            hit = innermost(th[ev["track"][ops]], ev["start_ns"][ops], ends,
                            th[ev["track"][lrows[need]]], ev["start_ns"][lrows[need]])
            lop[need] = np.where(hit >= 0, ops[np.maximum(hit, 0)], -1)
        op[has] = lop
        # device rows without a launch but with an external id still name their op
        rest = np.flatnonzero(~has)
        if len(rest) and omask.any():
            dm, dv = _int_stat(trace, keys.EXTERNAL_ID, dev[rest])
            if dm.any():
                o_ids, d_ids = _scoped(trace, ops[omask], oids, dev[rest[dm]], dv)
                op[rest[dm]] = _by_id(ops[omask], o_ids, d_ids)

    launch_rows = rt_host[_launch_like(trace, rt_host)] if len(rt_host) else rt_host
    used = unique(launch[launch >= 0])
    counts = {
        "device_activities": int(n),
        "matched_by_correlation_id": int((method == BY_ID).sum()),
        "matched_by_flow": int((method == BY_FLOW).sum()),
        "matched_in_order": int((method == IN_ORDER).sum()),
        "unmatched_device_activities": int(((launch < 0) & ~no_call).sum()),
        "device_activities_without_launch_call": int(((launch < 0) & no_call).sum()),
        "launch_calls": int(len(launch_rows)),
        **_without_activity(trace, launch_rows, used),
        "device_activities_with_framework_op": int((op >= 0).sum()),
    }
    if counts["unmatched_device_activities"]:
        log.info("correlation: %d of %d device activities have no launch", counts["unmatched_device_activities"], n)
    return Correlation(dev, launch, method, op, launch_rows, counts)


def _without_activity(trace: Trace, launch_rows: np.ndarray, used: np.ndarray) -> dict[str, int]:
    """The launch calls that no device activity names (``used``: distinct and sorted),
    less those that recorded work into a CUDA graph (counted apart: their work runs
    under the graph launch's id; ``derive/graph_recording.py``)."""
    u = unique(launch_rows)
    idle = u[~member(u, used)]
    into_graph = int(np.count_nonzero(recorded(trace, idle)))
    return {"launch_calls_without_device_activity": int(len(idle)) - into_graph,
            "launch_calls_recorded_into_graphs": into_graph}


def _queue_labels(trace: Trace, rows: np.ndarray, use_track: bool) -> np.ndarray:
    """A queue label per row: the ``queue`` stat, else (device side) the track name."""
    labels = np.full(len(rows), None, object)
    col = trace.stats.get(keys.QUEUE)
    if col is not None and len(rows):
        m, v = col.lookup(rows)
        labels[m] = [str(x) for x in v]
    if use_track:
        miss = np.flatnonzero(labels == None)  # noqa: E711 - elementwise
        tnames = np.array([t.name for t in trace.tracks], object)
        labels[miss] = tnames[trace.events["track"][rows[miss]]]
    if len(trace.sources) > 1 and len(rows):  # queue "0" of rank 1 is not rank 0's
        src = trace.event_sources()[rows]
        named = labels != None  # noqa: E711 - elementwise
        labels[named] = [f"{s}:{q}" for s, q in zip(src[named], labels[named])]
    return labels


#: calls whose names look like launches (LAUNCH_MARKERS) but that put no work on the
#: device: OpenCL markers, barriers and waits are points in a queue, not device activity
#: (their queue events are category ``opencl_marker``), so one without device activity
#: is not a lost launch. (clFinish, clWaitForEvents, clGetEventProfilingInfo and the
#: other sync and query calls match no LAUNCH_MARKERS.)
NOT_LAUNCHES = ("clenqueuemarker", "clenqueuebarrier", "clenqueuewaitforevents")


def is_launch_name(name: str) -> bool:
    """Whether a host API call of this name enqueues device work."""
    low = name.lower()
    return any(m in low for m in LAUNCH_MARKERS) and not low.startswith(NOT_LAUNCHES)


def _launch_like(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which calls enqueue device work (``is_launch_name``), judged once per name; never
    one of the ``NOT_LAUNCH_CATEGORIES`` (XLA's own TraceMe events)."""
    if not len(rows):
        return np.zeros(0, bool)
    ids, inv = unique_inverse(trace.events["name"][rows])
    looks = np.fromiter((is_launch_name(trace.strings[i]) for i in ids), bool, len(ids))[inv]
    cats = [i for c in NOT_LAUNCH_CATEGORIES if (i := trace.string_id(c)) >= 0]
    if cats:
        looks &= ~member(trace.events["category"][rows], np.asarray(cats, trace.events["category"].dtype))
    return looks


def _in_order(trace: Trace, dev: np.ndarray, launch: np.ndarray, method: np.ndarray,
              rt_host: np.ndarray) -> None:
    """Match the k-th unmatched activity of a queue to the k-th unmatched launch naming
    that queue, never pairing an activity with a launch that started after it. Only
    enqueue-type calls count: ``clFinish`` / ``clWaitForEvents`` name a queue too."""
    col = trace.stats.get(keys.QUEUE)
    if col is None or not len(rt_host):
        return
    taken = member(rt_host, launch[launch >= 0])
    cand = rt_host[~taken & _launch_like(trace, rt_host)]  # never a wait or sync call on the queue
    lq = _queue_labels(trace, cand, use_track=False)
    cand, lq = cand[lq != None], lq[lq != None]  # noqa: E711
    if not len(cand):
        return
    free = np.flatnonzero(launch < 0)
    dq = _queue_labels(trace, dev[free], use_track=True)
    st = trace.events["start_ns"]
    for q in unique(lq.astype(str)):
        ls = cand[lq == q]
        ls = ls[np.argsort(st[ls], kind="stable")]
        ds = free[dq == q]
        ds = ds[np.argsort(st[dev[ds]], kind="stable")]
        k = min(len(ls), len(ds))
        if not k:
            continue
        # extra launches are the last ones (their activity ended after capture stopped)
        ls, ds = ls[:k], ds[:k]
        ok = st[ls] <= st[dev[ds]]
        launch[ds[ok]] = ls[ok]
        method[ds[ok]] = IN_ORDER
