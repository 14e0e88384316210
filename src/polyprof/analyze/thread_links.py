"""Links between host threads the trace does not record, for the dependency graph
(``analyze/depgraph.py``): the thread that calls ``backward()`` and the autograd engine
thread that runs the backward pass while it blocks, and a CPU backend's collective (gloo)
and the c10d op that queued it. The finders work once per trace (``depgraph_context.Context``);
the edge functions return (source, destination) nodes of one window's graph, which
``depgraph.build`` adds with zero weight. For a section whose thread waited in its own
time (``depgraph_sections.section_waits``): :func:`joined`, the threads it started and
joined; :func:`idle_time`, how much of that time the work it waited for did not cover
(what it weighs in the graph); :func:`section_wait_edges`, that work leading back to it."""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..derive.intervals import covered, union
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import lexsort, member, unique

#: a graph walk of the host calls: (per call its thread and nesting depth, the nodes in
#: the walk's order: each thread's in time order), as ``depgraph`` walks them
Walk = tuple[np.ndarray, np.ndarray, np.ndarray]
_NONE = np.zeros(0, np.int64)


def comm_key(name: str) -> str:
    """A collective's operation from a c10d op's or a CPU backend's range name
    (``c10d::allreduce_``, ``gloo:all_reduce``: ``allreduce``)."""
    return name.rsplit(":", 1)[-1].replace("_", "").lower()


def comm_callers(trace: Trace, comm: np.ndarray, start: np.ndarray, track: np.ndarray, names: np.ndarray,
                 on_host: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Per event row, the c10d op that enqueued the CPU backend's collective ``comm`` row
    (-1 for none): ProcessGroupGloo queues each collective's work, first in first out,
    for its worker threads, which record it as a ``gloo:*`` range; per operation, each
    range in start order takes the earliest c10d op not yet taken that began at or
    before it, on another thread."""
    out = np.full(trace.n_events, -1, np.int64)
    c10d = np.fromiter((s.startswith("c10d::") for s in trace.strings), bool, len(trace.strings))
    ops = np.flatnonzero(on_host & c10d[names] & (kinds == Kind.CPU_OP))
    if not len(ops):
        return out
    threads = cache.threads(trace)
    key_of = {int(i): comm_key(trace.strings[int(i)]) for i in unique(np.concatenate([names[ops], names[comm]]))}
    ops = ops[np.argsort(start[ops], kind="stable")]
    comm = comm[np.argsort(start[comm], kind="stable")]
    queues: dict[str, list[int]] = {}
    for r in ops.tolist():
        queues.setdefault(key_of[int(names[r])], []).append(r)
    taken: dict[str, int] = {}
    for c in comm.tolist():
        k = key_of[int(names[c])]
        q = queues.get(k, [])
        i = taken.get(k, 0)
        if i < len(q) and start[q[i]] <= start[c] and threads[track[q[i]]] != threads[track[c]]:
            out[c] = q[i]
            taken[k] = i + 1
    return out


#: the ops the autograd engine records for each backward function it runs
AUTOGRAD_ENGINE_PREFIX = "autograd::engine::evaluate_function"
#: Kineto's flow category from a forward op to its backward function
FWD_BWD_FLOW = "fwdbwd"


def backward_callers(trace: Trace, on_host: np.ndarray, track: np.ndarray, names: np.ndarray) -> dict[int, int]:
    """Per autograd engine thread, the thread that runs the forward pass and calls
    ``backward()``, which blocks it while the engine thread runs the backward functions
    (PyTorch runs a device's backward pass on an engine thread of its own: the forward
    thread then records nothing until it returns). Engine threads: those with
    ``autograd::engine::evaluate_function`` ops, or the ends of Kineto's ``fwdbwd`` flows
    (a forward op to its backward function). The caller: the thread most of those flows
    into the engine thread start from, else (no flows) the one other host thread with ops or
    annotations named ``forward`` (HTA 0.6's rule). Threads are ``cache.threads`` ids;
    none where the backward runs on the calling thread (a CPU backward)."""
    if not trace.n_events:
        return {}
    threads = cache.threads(trace)
    engine_name = np.fromiter((s.startswith(AUTOGRAD_ENGINE_PREFIX) for s in trace.strings), bool, len(trace.strings))
    rows = np.flatnonzero(on_host & engine_name[names])
    engines = set(unique(threads[track[rows]]).tolist())
    votes: dict[int, dict[int, int]] = {}
    fl = trace.flows
    if len(fl["src"]):
        f_src, f_dst = np.asarray(fl["src"], np.int64), np.asarray(fl["dst"], np.int64)
        ok = (f_src >= 0) & (f_dst >= 0) & (f_src < trace.n_events) & (f_dst < trace.n_events)
        f_src, f_dst, f_cat = f_src[ok], f_dst[ok], np.asarray(fl["category"])[ok]
        ok = on_host[f_src] & on_host[f_dst]
        f_src, f_dst, f_cat = f_src[ok], f_dst[ok], f_cat[ok]
        s_th, d_th = threads[track[f_src]], threads[track[f_dst]]
        # Kineto's fwdbwd flows, or any flow into an engine thread known by its ops (a
        # format that keeps no flow category: polyprof's Perfetto export)
        fwd_bwd = (f_cat == trace.string_id(FWD_BWD_FLOW)) | member(d_th, np.array(sorted(engines), np.int64))
        cross = (s_th != d_th) & fwd_bwd
        for d, s in zip(d_th[cross].tolist(), s_th[cross].tolist()):
            votes.setdefault(d, {})
            votes[d][s] = votes[d].get(s, 0) + 1
        engines |= set(votes)
    if not engines:
        return {}
    out: dict[int, int] = {}
    forward: list[int] | None = None
    for e in sorted(engines):
        v = votes.get(e)
        if v:
            out[e] = max(sorted(v), key=lambda s: v[s])
            continue
        if forward is None:
            fwd_name = np.fromiter(("forward" in s for s in trace.strings), bool, len(trace.strings))
            kinds = trace.kinds
            r = np.flatnonzero(on_host & fwd_name[names] & member(kinds, np.array([Kind.CPU_OP, Kind.ANNOTATION],
                                                                                 np.int64)))
            forward = unique(threads[track[r]]).tolist()
        others = [f for f in forward if f != e]
        if len(others) == 1:
            out[e] = others[0]
    return out


def backward_edges(walk: Walk, node_time: np.ndarray, callers: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The calling thread's wait for the backward pass (``Context.backward_callers``): on
    each autograd engine thread, the top-level calls that lie in one gap between the
    caller's top-level calls (the caller records nothing while they run: it is blocked in
    ``backward()``) are one backward call; its first call depends on the end of the
    caller's call before the gap, and the caller's call after the gap on its last call's
    end (zero weight, as HTA 0.6's walk of the two threads merged into one). Calls of the
    engine thread during a call of the caller (the caller not blocked, or a call of its own
    spanning them, whose time is on its own thread's chain) get no edge."""
    thread, depth, walked = walk
    w_thread = thread[walked >> 1]
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for engine, caller in callers.items():
        mine = np.flatnonzero((thread == engine) & (depth == 0))
        if not len(mine):
            continue
        f_nodes = walked[w_thread == caller]  # the caller's nodes in its walk's order (time order)
        if not len(f_nodes):
            continue
        f_t = node_time[f_nodes]
        s_t, e_t = node_time[2 * mine], node_time[2 * mine + 1]
        before = np.searchsorted(f_t, s_t, "right") - 1  # the caller's last node at or before its start
        after = np.searchsorted(f_t, e_t, "left")  # its first node at or after its end
        n_f = len(f_nodes)
        keep = ((after == before + 1)  # the caller recorded nothing during the call, and had no call open
                & ((before < 0) | (f_nodes[np.clip(before, 0, n_f - 1)] % 2 == 1))
                & ((after >= n_f) | (f_nodes[np.clip(after, 0, n_f - 1)] % 2 == 0)))
        mine, before, after, s_t = mine[keep], before[keep], after[keep], s_t[keep]
        if not len(mine):
            continue
        o = np.lexsort((s_t, before))  # by the gap they lie in, then in time order
        mine, before, after = mine[o], before[o], after[o]
        first = np.r_[True, before[1:] != before[:-1]]
        last = np.r_[before[1:] != before[:-1], True]
        into = first & (before >= 0)
        src.append(f_nodes[before[into]])
        dst.append(2 * mine[into])
        out = last & (after < n_f)
        src.append(2 * mine[out] + 1)
        dst.append(f_nodes[after[out]])
    if not src:
        return _NONE, _NONE
    return np.concatenate(src), np.concatenate(dst)


def host_comm_edges(walk: Walk, host: np.ndarray, node_time: np.ndarray, caller: np.ndarray,
                    gidx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A CPU backend's collective (``Context.comm_caller``) starts once the c10d op that
    enqueued it began (zero weight: the work is queued for the backend's thread), and the
    enqueuing thread, where it records nothing at the collective's end (it waits for the
    work, as DDP's reducer does), goes on after it: the collective's end into the
    thread's next node (zero weight)."""
    thread, depth, walked = walk
    c_ev = np.flatnonzero(caller[host] >= 0)
    op_ev = gidx[caller[host[c_ev]]]
    ok = op_ev >= 0  # the enqueuing op in the window
    c_ev, op_ev = c_ev[ok], op_ev[ok]
    if not len(c_ev):
        return _NONE, _NONE
    src, dst = [2 * op_ev], [2 * c_ev]
    w_thread = thread[walked >> 1]
    for th in unique(thread[op_ev]).tolist():
        mine = c_ev[thread[op_ev] == th]
        f_nodes = walked[w_thread == th]
        f_t = node_time[f_nodes]
        e_t = node_time[2 * mine + 1]
        before = np.searchsorted(f_t, e_t, "right") - 1
        after = before + 1
        n_f = len(f_nodes)
        idle = ((before >= 0) & (after < n_f) & (f_nodes[np.clip(before, 0, n_f - 1)] % 2 == 1)
                & (f_nodes[np.clip(after, 0, n_f - 1)] % 2 == 0))
        idle[idle] &= depth[f_nodes[before[idle]] >> 1] == 0  # no call of the thread open
        src.append(2 * mine[idle] + 1)
        dst.append(f_nodes[after[idle]])
    return np.concatenate(src), np.concatenate(dst)



def idle_time(thread: np.ndarray, a: np.ndarray, b: np.ndarray, busy_thread: np.ndarray, busy_s: np.ndarray,
              busy_e: np.ndarray, key: np.ndarray | None = None, busy_key: np.ndarray | None = None) -> np.ndarray:
    """Per span ``[a, b]`` of a host ``thread`` (a section's time in no op that waits):
    how much of it no other thread nor device is busy, each busy in its events alone
    (``busy_thread``, ``busy_s``, ``busy_e``; the devices: thread -1), so that a
    background thread's few small ops take only their own time. ``key``, ``busy_key``:
    where given, a span of one key counts only the work of that key busy (a joined
    thread's, :func:`joined`). One merge of the work per key (a handful)."""
    out = (b - a).astype(np.int64)
    for th in unique(thread if key is None else key).tolist():
        if key is None:
            q = np.flatnonzero(thread == th)
            other = (busy_thread != th) & (busy_e > busy_s)
        else:
            q = np.flatnonzero(key == th)
            other = (busy_key == th) & (busy_e > busy_s)
        us, ue = union(busy_s[other], busy_e[other])
        out[q] -= covered(us, ue, a[q], b[q])
    return out


def joined(thread: np.ndarray, a: np.ndarray, b: np.ndarray, plane: np.ndarray, candidates: np.ndarray,
           first: np.ndarray, last: np.ndarray, c_plane: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(span, thread) pairs: a section's thread waiting for a thread it started and joined
    (Python's ``Thread.join`` records no event): of the spans ``[a, b]`` of host threads
    ``thread`` (a section's own time, one thread's spans disjoint; ``plane``: their
    process), the one each of the threads ``candidates`` (of process ``c_plane``) lived in
    (its first event started at or after ``a``, its last ended by ``b``: ``first``,
    ``last``), on another thread of its process; where several spans hold it, the one
    that ended first (its thread the first to go on). One search per spans' thread."""
    span: list[np.ndarray] = []
    who: list[np.ndarray] = []
    for th in unique(thread).tolist():
        q = np.flatnonzero(thread == th)
        q = q[np.argsort(a[q], kind="stable")]
        c = np.flatnonzero((candidates != th) & (c_plane == plane[q[0]]))
        i = np.searchsorted(a[q], first[c], "right") - 1  # the span each thread's life starts in
        ok = (i >= 0) & (last[c] <= b[q[np.maximum(i, 0)]]) & (last[c] >= first[c])
        span.append(q[i[ok]])
        who.append(candidates[c[ok]])
    s, w = (np.concatenate(span), np.concatenate(who)) if span else (_NONE, _NONE)
    if not len(s):
        return _NONE, _NONE
    o = lexsort((b[s], w))
    s, w = s[o], w[o]
    keep = np.r_[True, w[1:] != w[:-1]]  # per thread, the span that ended first
    return s[keep], w[keep]


def section_wait_edges(thread: np.ndarray, a: np.ndarray, b: np.ndarray, node_time: np.ndarray,
                       busy_thread: np.ndarray, busy_node: np.ndarray, key: np.ndarray | None = None,
                       busy_key: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, destination, span) nodes: a section's thread waiting for other work during its
    own time (per span, nodes ``a`` to ``b`` of a host ``thread``, one thread's spans
    disjoint: the stretches whose weight :func:`idle_time` cut), as a waiting call: from
    the span's start into the start of each other thread's or device's event
    (``busy_thread``, ``busy_node``: its start node; the devices: thread -1) that starts in
    it, from the end of each that ends in it into the span's end (the thread's walk
    going on), and from the end of each into the first start of one strictly after it in
    the span (the span split at the work's boundaries: a worker pausing between bursts):
    so a thread joining a worker, or blocking until an XLA run is ready, has the work it
    waited for on its path, the pauses between, then its own work after (``depgraph``
    weighs each edge by the :func:`idle_time` between its nodes: the worker's start-up,
    its pauses, the section's own). ``key``, ``busy_key``: where given, the spans of one
    key (disjoint) take only the work of that key (a joined thread's)."""
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    span: list[np.ndarray] = []
    s_all, e_all = node_time[busy_node], node_time[busy_node + 1]
    for th in unique(thread if key is None else key).tolist():
        q = np.flatnonzero((thread if key is None else key) == th)
        q = q[np.argsort(node_time[a[q]], kind="stable")]
        qa, qb = node_time[a[q]], node_time[b[q]]
        k = np.flatnonzero(((busy_thread != th) if busy_key is None else (busy_key == th)) & (e_all > s_all))
        s, e = s_all[k], e_all[k]
        i = np.searchsorted(qa, s, "right") - 1  # the span each starts in
        ok = (i >= 0) & (s < qb[np.maximum(i, 0)])
        src.append(a[q[i[ok]]])
        dst.append(busy_node[k[ok]])
        span.append(q[i[ok]])
        j = np.searchsorted(qb, e, "left")  # the span each ends in
        ok = (j < len(q)) & (e > qa[np.minimum(j, len(q) - 1)])
        src.append(busy_node[k[ok]] + 1)
        dst.append(b[q[j[ok]]])
        span.append(q[j[ok]])
        # a pause of the work between: each end into the first start after it in its span
        # (strictly after: forward in time, no cycle), weighing the section's idle time
        ins = np.flatnonzero((i >= 0) & (s < qb[np.maximum(i, 0)]))
        ins = ins[np.argsort(s[ins], kind="stable")]
        nxt = np.searchsorted(s[ins], e[ok], "right")
        has = nxt < len(ins)
        has[has] &= i[ins[nxt[has]]] == j[ok][has]
        src.append(busy_node[k[ok][has]] + 1)
        dst.append(busy_node[k[ins[nxt[has]]]])
        span.append(q[j[ok][has]])
    return (np.concatenate(src), np.concatenate(dst), np.concatenate(span)) if src else (_NONE, _NONE, _NONE)
