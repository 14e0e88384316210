"""The dependency graph of one rank inside a window, as HTA builds it for its critical path.

Every op, runtime call and OS runtime call (``depgraph_context.os_calls``: one inside no
other host call) on a host thread, and every device activity launched inside the
window, becomes two nodes (its start and its end; node ``2*i`` and ``2*i+1`` of graph event
``i``). Edges, all NumPy columns:

* **host threads**: the ops' nesting in the order a depth-first walk meets their starts and
  ends, each step an edge weighted by the time between them (zero into the end of a call
  during which the host waits: ``WAITING_CALLS``); consecutive top-level ops are joined by
  a zero-weight dependency. polyprof's sections (``polyprof.section``) and NVTX ranges are
  host calls too, their own time their thread's; where the trace shows that their thread
  waited in it (a buffer wait's return, an XLA program it dispatched ending its run, a
  thread it started and joined: ``depgraph_sections.section_waits``) it weighs what of it
  the awaited work did not cover (``thread_links.idle_time``), and that work leads from
  and back to their thread (``thread_links.section_wait_edges``).
* **XLA's CPU runtime** (``xla_links``): its ops are host calls (kind KERNEL on a host
  thread), and ``ThunkExecutor::Execute (wait for completion)`` is a waiting call whose
  waited-on work is the XLA ops of the other threads during it (zero-weight edges); the
  ops' data dependencies (the HLO), and each device's program runs in their order; a
  dispatch that names its run, or whose pool task started it, leads into it (its
  launch), and a dispatch that outlasts the run it dispatched waits for it (its thread's
  edges during the run weigh nothing, and the run's last end leads back to the thread),
  as does a thread's buffer wait (``block_until_ready``) the run ends.
* **backward pass** (HTA 0.6 merges the two threads into one; HTA 0.5 has no such edge):
  PyTorch runs a device's backward pass on an autograd engine thread while the thread
  that called ``backward()`` blocks, recording nothing. The engine thread's top-level
  calls between two consecutive nodes of the caller's walk are one backward call: a
  zero-weight dependency from the caller's node before into its first call, and from
  its last call's end to the caller's node after (``backward_callers``: engine threads
  by their ``autograd::engine::evaluate_function`` ops or Kineto's ``fwdbwd`` flows,
  the caller by those flows, else by ops named ``forward`` as HTA finds it).
* **device**: each activity's span; launch -> activity (the launch delay) when the stream was
  empty at the launch and the activity started after its launch (an OpenCL command: its
  queue had run every command before it, ``Context.idle_at_launch``), else activity ->
  activity on the stream (the gap); a zero-weight launch edge otherwise, so that an activity
  never starts before its launch (HTA's ``CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE``).
  An OpenCL command enqueued with an event wait list starts after the commands it waited
  for (``wait_links.device_wait_links``), weighing the time from the last to its start
  where nothing else held it.
* **stream order** (not in HTA's graph): where HTA's graph has no edge from the activity
  before on the stream (HTA 0.6 leaves out a gap of ``KERNEL_GAP_LIMIT_NS`` or more as an
  unrecognised dependency, and a launch delay or a wait replaces it), a zero-weight edge
  from that activity's end: a stream runs in order, so the later activity depends on the
  earlier however long the gap, and a graph without that dependency gives a shorter path
  than the step's dependencies allow (``build(stream_order=False)``: HTA's graph alone).
* **collectives**: a communication kernel (NCCL, RCCL) waits for the last device activity
  its host thread launched before it onto another stream of its device (launch order on
  the host thread): PyTorch's ProcessGroupNCCL records an event on the thread's current
  stream and makes the collective's stream wait on it (``syncStream``) before every
  collective. The trace shows it by a stream-wait call (``STREAM_WAIT_CALLS``) on that
  thread between the two launches; on a thread that records no stream-wait call at all
  the rule is taken as it is. An edge the timestamps contradict (the activity ending
  more than ``AGREE_NS`` after the collective started) is left out. Kineto traces without ``cuda_sync`` records
  (the calls' args name no stream or event) have no other trace of this dependency; the
  other record/wait pairs of such traces are not paired (pairing each wait with the last
  record before it on its thread is contradicted by the timestamps of the A100 NCCL
  trace in a quarter of its waits).
* **synchronisation** (Kineto's ``cuda_sync`` records): a stream waiting on an event depends
  on the last activity launched on the event's stream before the event was recorded; a host
  waiting on an event, a stream or the whole device depends on that activity, that stream's
  last activity or every stream's last one. Host waits that name their work by stats
  (OpenCL's ``clFinish``, ``clWaitForEvents``, blocking reads) depend on it alike
  (``wait_links``), and weigh nothing where so linked. PjRt's reads of a GPU buffer
  (``np.asarray`` of a ``jax.Array``), which wait in no event, are linked by
  ``wait_links.read_edges``: the transfer's dispatch to the program's last activity, the
  staging copy to the device's copy, and the reading thread waits for the staging copy
  as a dispatch outlasting its run does (its windows, ``blocked_edges``).

Each edge with a span's time belongs to one event (``owner``): the op whose time it is (a
gap between two children belongs to their parent, a gap on a stream to the activity before).
"""

from __future__ import annotations

from typing import NamedTuple


import numpy as np

from ..derive import cache
from ..derive.correlate import Correlation
from ..trace.core import Trace
from ..trace.sorting import first_at_or_after, last_at_or_before, lexsort, member, row_of_key, unique
from ..trace.vocabulary import (CONTEXT_SYNC, EVENT_RECORD_CALLS, EVENT_SYNC, STREAM_SYNC, STREAM_WAIT_CALLS,
                                STREAM_WAIT_EVENT)
from .depgraph_context import Context, context
from .nesting import parents_and_after
from .depgraph_sections import Sections, section_waits, sections_of
from .thread_links import Walk, backward_edges, host_comm_edges
from .window import selection
from .wait_links import read_edges
from .xla_links import (DEVICE_STAT, RUN_STAT, await_edges, blocked, blocked_edges, blocking_dispatches,
                        data_edges, launch_edges, run_order_edges, wait_edges)

#: edge types (HTA's CPEdgeType, in its order), then polyprof's stream order
OPERATOR, DEPENDENCY, LAUNCH, KERNEL_KERNEL, SYNC, STREAM_ORDER = 0, 1, 2, 3, 4, 5
EDGE_TYPES = ("operator", "dependency", "kernel_launch_delay", "kernel_kernel_delay", "sync_dependency",
              "stream_order")
#: a gap this long between two activities on a stream is taken for a dependency the trace
#: does not show, not for the stream's own delay (HTA's threshold)
KERNEL_GAP_LIMIT_NS = 1_500_000
#: an inferred edge is kept where its source ends at most this long after its destination
#: starts (Kineto writes microseconds as decimals: two times can round a few ns apart)
AGREE_NS = 1_000


class DepGraph(NamedTuple):  # not a dataclass: cheaper to create at import (docs/benchmarks.md, issue 35)
    """Graph events (``rows``: their event rows; ``device``: on a device) and edges between
    their nodes (node ``2*i`` starts event ``i``, ``2*i+1`` ends it)."""

    rows: np.ndarray
    device: np.ndarray
    time: np.ndarray  # per node, ns
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    etype: np.ndarray  # int8, EDGE_TYPES
    owner: np.ndarray  # graph event whose time the edge is, -1 for none

    @property
    def n_nodes(self) -> int:
        return 2 * len(self.rows)


class _Edges:
    """Edge columns gathered in insertion order (ties of the longest path go to the
    first-inserted edge, as networkx breaks them)."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, etype: int | np.ndarray,
            owner: np.ndarray, order: np.ndarray) -> None:
        n = len(src)
        if n:
            kind = np.full(n, etype, np.int8) if isinstance(etype, int) else np.asarray(etype, np.int8)
            self.parts.append((np.asarray(src, np.int64), np.asarray(dst, np.int64),
                               np.asarray(weight, np.int64), kind,
                               np.asarray(owner, np.int64), np.asarray(order, np.float64)))

    def columns(self) -> tuple[np.ndarray, ...]:
        if not self.parts:
            z = np.zeros(0, np.int64)
            return z, z, z, np.zeros(0, np.int8), z
        # a first part in order and before every later one (a graph's thread edges) stays
        # where it is: only the rest is sorted (the same stable order)
        head = self.parts[0][5]
        keep = int(len(self.parts) > 1 and bool((head[1:] >= head[:-1]).all())
                   and head[-1] <= min(float(p[5].min()) for p in self.parts[1:]))
        rest = self.parts[keep:]
        cols = [np.concatenate([p[i] for p in rest]) for i in range(6)]
        seq = cols[5]
        if len(seq) and not bool((seq[1:] >= seq[:-1]).all()):  # not inserted in order
            o = np.argsort(seq, kind="stable")
            cols = [c[o] for c in cols[:5]]
        if keep:
            cols = [np.concatenate([self.parts[0][i], cols[i]]) for i in range(5)]
        return cols[0], cols[1], cols[2], cols[3], cols[4]


def _in(rows: np.ndarray, t: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """The ``rows`` (sorted by ``t``) whose time is in ``[t0, t1)``, in row order."""
    return np.sort(rows[np.searchsorted(t, t0, "left"):np.searchsorted(t, t1, "left")])


class Window(NamedTuple):
    """The rows of one window's graph: host ops and runtime calls, device activity (with
    its launches) and synchronisation records (with their host calls); ``timed``: a time
    window's, with what began before it (:func:`window_rows`)."""

    host: np.ndarray
    dev: np.ndarray
    dev_launch: np.ndarray
    sy: np.ndarray
    sy_call: np.ndarray
    timed: bool = False


def window_rows(ctx: Context, t0: int, t1: int) -> Window:
    """The ops starting in ``[t0, t1)`` on host threads, the device activity launched
    from calls starting there, and the synchronisation records of those calls (HTA's
    window takes ``t1`` too: :func:`build` cuts the calls at ``t1``, where those would
    last nothing; they are the next step's, where the steps touch). In a time window
    holding no whole step (the trace a view of one: ``Selection.timed``), which no step
    before it owns, also the calls begun before it that last into it, the device
    activity that runs in it launched before it and the synchronisation records of
    the calls taken (a window inside one ``clFinish``): :func:`build` cuts them at ``t0``;
    and only the device activity with a part inside it (started before ``t1``), which
    :func:`build` cuts at ``t1``, as the window's other tables count it
    (``window_counting.counted_ns``)."""
    host = _in(ctx.host, ctx.host_t, t0, t1)
    pos = _in(ctx.dev_pos, ctx.dev_t, t0, t1)
    # synchronisation records on devices, tied to their host call by correlation id
    call_t = ctx.start[ctx.sy_call]
    in_call = (call_t >= t0) & (call_t < t1)
    sel = selection(ctx.trace)
    timed = sel is not None and sel.timed
    if timed:
        before = ctx.host[:np.searchsorted(ctx.host_t, t0, "left")]
        host = np.sort(np.concatenate([before[ctx.end[before] > t0], host]))
        early = ctx.dev_pos[:np.searchsorted(ctx.dev_t, t0, "left")]
        d = ctx.corr.device_rows[early]
        pos = np.sort(np.concatenate([early[(ctx.end[d] > t0) & (ctx.start[d] < t1)], pos]))
        pos = pos[ctx.start[ctx.corr.device_rows[pos]] < t1]  # (what starts after it: none of it inside)
        in_call = (call_t < t1) & (ctx.end[ctx.sy_call] > t0)
    ok = ctx.sy_always | (in_call & ctx.sy_timed)
    return Window(host, ctx.corr.device_rows[pos], ctx.corr.launch[pos], ctx.sy[ok], ctx.sy_call[ok], timed)


def build(trace: Trace, t0: int, t1: int, ctx: Context | None = None, rows_of: Window | None = None,
          stream_order: bool = True, backward: bool = True) -> DepGraph:
    """The graph of :func:`window_rows`' rows. ``ctx``: the trace's :class:`Context`, made
    once for every window of one trace; ``rows_of``: the window, if already taken;
    ``stream_order``: with the stream-order edges HTA's graph leaves out (False: HTA's
    graph alone, edge for edge); ``backward``: with the calling thread's wait for the
    backward pass on the autograd thread (False: HTA 0.5's graph, which has no edge
    between threads; HTA 0.6 merges the two threads). The host calls end by ``t1`` but for
    those waiting on device work (synchronisation): only device work runs on past it. In a
    time window (``Window.timed``), which no step owns, every event counts for its part
    inside it: what began before it starts at ``t0``, and what lasts past it (device work,
    a wait for it) ends at ``t1``, so that the path and its events hold no time outside
    the window, as the window's tables count device time (``window_counting.counted_ns``)."""
    ctx = context(trace) if ctx is None else ctx
    start, end, track, names, cid, corr = ctx.start, ctx.end, ctx.track, ctx.names, ctx.cid, ctx.corr
    host, dev, dev_launch, sy, sy_call, timed = window_rows(ctx, t0, t1) if rows_of is None else rows_of

    rows = np.concatenate([host, dev, sy])
    n_h, n_d = len(host), len(dev)
    if timed and bool(((start[rows] < t0) | (end[rows] > t1)).any()):  # (copies, for one window of the trace)
        start, end = start.copy(), end.copy()
        start[rows] = np.clip(start[rows], t0, t1)
        end[rows] = np.clip(end[rows], t0, t1)
    device = np.zeros(len(rows), bool)
    device[n_h:] = True
    node_time = np.empty(2 * len(rows), np.int64)
    node_time[0::2] = start[rows]
    node_time[1::2] = end[rows]
    node_time[1:2 * n_h:2] = np.where(np.isin(host, sy_call), end[host], np.minimum(end[host], t1))  # (the doc)
    gidx = ctx.graph_index  # event row -> graph event (-1 for none): set for this window, cleared after
    gidx[rows] = np.arange(len(rows))
    edges = _Edges()
    try:
        w_wait, w_dev = (gidx[x] for x in ctx.wait_links.within(int(ctx.start[host].min(initial=t0)), t1))
        keep = (w_wait >= 0) & (w_wait < n_h) & (w_dev >= n_h) & (w_dev < n_h + n_d)  # (both in the graph)
        w_wait, w_dev = w_wait[keep], w_dev[keep]
        waiting = ctx.waits[names[host]]
        waiting[w_wait] = True
        node_time[2 * w_wait + 1] = end[host[w_wait]]  # (not cut at t1, as a sync record's call)
        windows = _dispatch_windows(trace, ctx, host, node_time)
        lo = int(ctx.start[host].min(initial=t0))  # PjRt's reads (wait_links): their threads' waits, their edges
        windows, r_a, r_b, r_w = read_edges(trace, ctx.wait_links.reads, host, gidx, node_time, lo, t1, windows)
        section = sections_of(trace, ctx, host) if bool(ctx.section[host].any()) else None
        walk = _thread_edges(trace, host, track, names, node_time, edges, waiting, windows, section)
        if walk is not None:  # the links between threads, zero weight, after every other edge
            base = 10.0 * (len(node_time) + 1)
            edges.add(r_a, r_b, r_w, SYNC, np.full(len(r_a), -1, np.int64),
                      base + 9 * len(node_time) + np.arange(len(r_a), dtype=np.float64))
            if backward and ctx.backward_callers:
                a, b = backward_edges(walk, node_time, ctx.backward_callers)
                edges.add(a, b, np.zeros(len(a), np.int64), DEPENDENCY, np.full(len(a), -1, np.int64),
                          base + np.arange(len(a), dtype=np.float64))
            if ctx.comm_caller is not None:
                a, b = host_comm_edges(walk, host, node_time, ctx.comm_caller, gidx)
                edges.add(a, b, np.zeros(len(a), np.int64), SYNC, np.full(len(a), -1, np.int64),
                          base + len(node_time) + np.arange(len(a), dtype=np.float64))
            if ctx.xla_wait[names[host]].any():  # (the ops' devices decoded only where XLA waits)
                a, b = wait_edges(walk[0], node_time, ctx.xla_op[host], ctx.xla_wait[names[host]],
                                  ctx.stat(DEVICE_STAT)[host])
                edges.add(a, b, np.zeros(len(a), np.int64), SYNC, np.full(len(a), -1, np.int64),
                          base + 2 * len(node_time) + np.arange(len(a), dtype=np.float64))
            if ctx.xla_op[host].any():  # the XLA ops' data dependencies (their HLO), the device's run order
                run, on_dev = ctx.stat(RUN_STAT)[host], ctx.stat(DEVICE_STAT)[host]
                a, b = data_edges(ctx.xla_deps, host, ctx.xla_op[host], node_time, run, on_dev)
                edges.add(a, b, np.zeros(len(a), np.int64), DEPENDENCY, np.full(len(a), -1, np.int64),
                          base + 3 * len(node_time) + np.arange(len(a), dtype=np.float64))
                member = ctx.xla_op[host] | ctx.xla_wait[names[host]]
                a, b = run_order_edges(walk[0], node_time, member, run, on_dev)
                edges.add(a, b, np.zeros(len(a), np.int64), STREAM_ORDER, np.full(len(a), -1, np.int64),
                          base + 4 * len(node_time) + np.arange(len(a), dtype=np.float64))
                a, b, w, o = launch_edges(walk[0], walk[2], node_time, ctx.xla_dispatch[names[host]], member,
                                          ctx.launched_run(host, run), on_dev)
                edges.add(a, b, w, LAUNCH, o,
                          base + 7 * len(node_time) + np.arange(len(a), dtype=np.float64))
                waiter, since = ctx.buffer_waits_of(host)  # a thread's return from block_until_ready
                a, b, w = await_edges(walk[0], walk[2], node_time, waiter, since, member, run, on_dev,
                                      trace.track_plane[track[host]])
                edges.add(a, b, w, SYNC, np.full(len(a), -1, np.int64),
                          base + 8 * len(node_time) + np.arange(len(a), dtype=np.float64))
            if windows is not None:  # a dispatching thread waiting for the run it dispatched
                a, b, w, o = blocked_edges(walk[0], walk[2], node_time, windows, walk[1])
                edges.add(a, b, w, SYNC, o,
                          base + 5 * len(node_time) + np.arange(len(a), dtype=np.float64))
        _device_edges(trace, dev, dev_launch, sy, sy_call, corr, start, end, track, names, cid, ctx,
                      gidx, node_time, n_h, n_d, edges, stream_order)
        edges.add(2 * w_dev + 1, 2 * w_wait + 1, np.zeros(len(w_wait), np.int64), SYNC,
                  np.full(len(w_wait), -1, np.int64), 50.0 * (len(node_time) + 1) + np.arange(len(w_wait)))
    finally:
        gidx[rows] = -1
    src, dst, weight, etype, owner = edges.columns()
    return DepGraph(rows, device, node_time, src, dst, weight, etype, owner)


def _dispatch_windows(trace: Trace, ctx: Context, host: np.ndarray,
                      node_time: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``xla_links.blocking_dispatches`` of the window's host calls: where a thread's
    dispatch of an XLA program outlasted the run (the thread waits for it), None where
    there is none (no dispatch, or no XLA op: most traces)."""
    is_dispatch = ctx.xla_dispatch[names] if len(names := ctx.names[host]) else np.zeros(0, bool)
    if not bool(is_dispatch.any()) or not bool(ctx.xla_op[host].any()):
        return None
    thread = cache.threads(trace)[ctx.track[host]]
    named = ctx.xla_dispatch_device[names]  # (a device's launch of its run names its device)
    device = np.where(named >= 0, named, ctx.stat(DEVICE_STAT)[host])
    w = blocking_dispatches(thread, node_time, is_dispatch, ctx.xla_op[host], ctx.stat(RUN_STAT)[host],
                            device)  # (a run's ops: its wait for them may end later)
    return w if len(w[0]) else None


def _thread_edges(trace: Trace, host: np.ndarray, track: np.ndarray, names: np.ndarray, node_time: np.ndarray,
                  edges: _Edges, waiting: np.ndarray,
                  windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
                  section: Sections | None = None) -> Walk | None:
    """The host threads' edges (the calls' times: ``node_time``; ``waiting``: per call, it
    waits for the device; ``windows``: where a thread waits for an XLA program run it
    dispatched, ``xla_links.blocking_dispatches``: its edges there weigh nothing;
    ``section``: the window's sections, whose own time is their thread's, but where the
    section waits, ``depgraph_sections.section_waits``);
    returns (per host call its thread and depth, the nodes in the walk's order: each
    thread's in time order), None without host calls."""
    if not len(host):
        return None
    thread = cache.threads(trace)[track[host]]
    h_start, h_end = node_time[0:2 * len(host):2], node_time[1:2 * len(host):2]
    order, depth_sorted, par_sorted, after = parents_and_after(thread, h_start, h_end)  # (every call has a duration)
    depth = np.zeros(len(host), np.int64)
    depth[order] = depth_sorted
    parent = np.full(len(host), -1, np.int64)
    has = par_sorted >= 0
    parent[order[has]] = order[par_sorted[has]]

    # the walk: at one time ends come before starts, deeper ends first, shallower starts first
    walked = _nested_walk(order, depth_sorted, par_sorted, thread[order], h_start[order], h_end[order], after)
    if walked is None:
        n = len(host)
        node = np.concatenate([2 * np.arange(n), 2 * np.arange(n) + 1])
        ev = node >> 1
        is_end = (node & 1).astype(bool)
        sub = np.where(is_end, -depth[ev], depth[ev])
        walked = node[lexsort((sub - sub.min(initial=0), (~is_end).astype(np.int64), node_time[node], thread[ev]))]
    a, b = walked[:-1], walked[1:]
    same = thread[a >> 1] == thread[b >> 1]
    a, b = a[same], b[same]
    ea, eb = a >> 1, b >> 1
    a_end, b_end = (a & 1).astype(bool), (b & 1).astype(bool)
    top = a_end & ~b_end & (depth[ea] == 0) & (depth[eb] == 0)
    weight = np.where(b_end & waiting[eb], 0, node_time[b] - node_time[a])
    if windows is not None:
        weight[blocked(thread[ea], node_time[a], node_time[b], windows)] = 0
    owner = np.where(~a_end, ea, np.where(b_end, eb, parent[ea]))
    if section is not None:
        own = np.flatnonzero((owner >= 0) & section.is_section[np.maximum(owner, 0)] & ~top & (weight > 0))
        if len(own):
            for s_a, s_b, s_w, s_o, seq in section_waits(section, thread, parent, waiting, node_time, a[own],
                                                         b[own], weight, own, owner[own]):
                edges.add(s_a, s_b, s_w, SYNC, s_o, seq)
    seq = np.arange(len(a), dtype=np.float64)
    # one part in walk order: a dependency between top-level ops, else the op's own time
    edges.add(a, b, np.where(top, 0, weight), np.where(top, DEPENDENCY, OPERATOR).astype(np.int8),
              np.where(top, -1, owner), seq)
    return thread, depth, walked


def _nested_walk(order: np.ndarray, depth: np.ndarray, parent: np.ndarray, thread: np.ndarray,
                 s: np.ndarray, e: np.ndarray, after: np.ndarray | None = None) -> np.ndarray | None:
    """The nodes of the host calls in the walk's order (node ``2*i`` starts call ``i``,
    ``2*i+1`` ends it) without sorting them, where the calls nest (each ends by its
    parent's end; ``order``, ``depth``, ``parent``: ``nesting.parents`` of the calls;
    ``thread``, ``s``, ``e`` in that order): there the walk is each thread's depth-first
    tour. The call at position k starts at walk position 2k - depth (the calls before it
    started, and all but its open ancestors ended) and ends just before the first later
    call of its thread that starts at or after its end (position k'), where the calls
    closing end deepest first: 2k' - 1 - depth. None where the calls do not nest, or
    the times do not fit one int64 key per thread. ``after``: k' of each call, where
    ``nesting.parents_and_after`` found it (where the calls nest, the first later call of
    its thread at its depth or above); else one search of the ends among the starts."""
    n = len(order)
    has = parent >= 0
    if not bool((e[has] <= e[parent[has]]).all()):
        return None  # a call outlasting its parent: the walk by time, sorted
    if after is None:
        run = np.zeros(n, np.int64)  # which thread, 0, 1, ... in order
        np.cumsum(thread[1:] != thread[:-1], out=run[1:])
        lo = int(s.min())
        width = int(e.max()) - lo + 2
        if width * (int(run[-1]) + 2) >= 2 ** 62:
            return None
        key_s = run * width + (s - lo)
        after = np.searchsorted(key_s, run * width + (e - lo), side="left")  # the next run's first where none
    walked = np.empty(2 * n, np.int64)
    k = np.arange(n)
    walked[2 * k - depth] = 2 * order
    walked[2 * after - 1 - depth] = 2 * order + 1
    return walked


def _device_edges(trace: Trace, dev: np.ndarray, dev_launch: np.ndarray, sy: np.ndarray, sy_call: np.ndarray,
                  corr: Correlation, start: np.ndarray, end: np.ndarray, track: np.ndarray, names: np.ndarray,
                  cid: np.ndarray, ctx: Context, gidx: np.ndarray, node_time: np.ndarray,
                  n_h: int, n_d: int, edges: _Edges, stream_order: bool = True) -> None:
    if not len(dev) and not len(sy):
        return
    base = float(len(node_time))  # device edges after every thread edge
    # processing order: activities by start, sync records by end (HTA's)
    sort_t = np.concatenate([start[dev], end[sy]])
    pos = np.empty(len(sort_t), np.int64)
    pos[np.argsort(sort_t, kind="stable")] = np.arange(len(sort_t))
    k_pos, s_pos = pos[:n_d], pos[n_d:]
    g_dev = n_h + np.arange(n_d)

    qk, ql, q_at_launch, q_at_start = ctx.queues

    ev_kind = names[sy]
    sync_src = _event_sync_sources(trace, sy, ev_kind, ctx, cid, track, start, qk, ql)
    kernel_sync = np.full(n_d, -1, np.int64)  # graph event a device activity waits for
    sw = np.flatnonzero((ev_kind == trace.string_id(STREAM_WAIT_EVENT)) & (sync_src >= 0))
    if len(sw):
        # the stream waits from its next launch on the waiting call's thread onwards
        threads = cache.threads(trace)
        dest = first_at_or_after(threads[track[ql]] * (1 << 20) + track[qk], start[ql], qk,
                                 threads[track[sy_call[sw]]] * (1 << 20) + track[sy[sw]], start[sy_call[sw]])
        ok = (dest >= 0) & (gidx[np.maximum(dest, 0)] >= n_h) & (gidx[sync_src[sw]] >= 0)
        kernel_sync[gidx[dest[ok]] - n_h] = gidx[sync_src[sw][ok]]
    coll_wait = _collective_waits(trace, dev, dev_launch, start, end, track, ctx)
    fill = (kernel_sync < 0) & (coll_wait >= 0)
    kernel_sync[fill] = g_dev[coll_wait[fill]]
    w_dst, w_src = _wait_lists(ctx, gidx, n_h, n_d)  # OpenCL's event wait lists

    # each activity's span
    edges.add(2 * g_dev, 2 * g_dev + 1, dur_of(start, end, dev), OPERATOR, g_dev, base + 4 * k_pos)
    # the previous activity on its stream
    o = lexsort((start[dev], track[dev]))
    prev = np.full(n_d, -1, np.int64)
    same = track[dev][o][1:] == track[dev][o][:-1]
    prev[o[1:][same]] = g_dev[o[:-1][same]]
    ks = kernel_sync
    has_ks = ks >= 0
    edges.add(2 * ks[has_ks] + 1, 2 * g_dev[has_ks], np.zeros(int(has_ks.sum()), np.int64), SYNC,
              np.full(int(has_ks.sum()), -1), base + 4 * k_pos[has_ks] + 1)
    l_ts = start[dev_launch]
    prev_end = np.where(prev >= 0, node_time[2 * np.maximum(prev, 0) + 1], np.iinfo(np.int64).min)
    ks_end = np.where(has_ks, node_time[2 * np.maximum(ks, 0) + 1], np.iinfo(np.int64).min)
    if len(w_dst):  # each command after those it waited for
        w_end, d = node_time[2 * w_src + 1], w_dst - n_h
        np.maximum.at(ks_end, d, w_end)  # (the last end of what each waited for)
        has_ks = has_ks.copy()
        has_ks[d] = True
        # the time from the last thing that held it (launched, its queue's previous done) to
        # its start: the device's delay in starting it, no event's (as a launch delay)
        held = (w_end >= ks_end[d]) & (w_end >= prev_end[d]) & (w_end >= l_ts[d])
        edges.add(2 * w_src + 1, 2 * w_dst, np.where(held, np.maximum(node_time[2 * w_dst] - w_end, 0), 0), SYNC,
                  np.full(len(w_dst), -1), base + 4 * k_pos[d] + 1)
    g_launch = gidx[dev_launch]
    # HTA's launch delay: the stream's queue empty at the launch and at the start; an
    # OpenCL command's (its queue is not counted so): every command before it on its
    # queue ended by its launch (``Context.idle_at_launch``), and it started after it
    own_delay = ((q_at_launch[dev] == 1) & (q_at_start[dev] == 0)) | (ctx.idle_at_launch[dev] & (start[dev] >= l_ts))
    launched = own_delay & (prev_end < l_ts) & (ks_end < l_ts) & (g_launch >= 0)
    gap = (~launched & (prev >= 0) & (start[dev] - prev_end < KERNEL_GAP_LIMIT_NS)
           & (~has_ks | (ks_end < prev_end)))
    edges.add(2 * g_launch[launched], 2 * g_dev[launched], start[dev][launched] - l_ts[launched], LAUNCH,
              np.full(int(launched.sum()), -1), base + 4 * k_pos[launched] + 2)
    edges.add(2 * prev[gap] + 1, 2 * g_dev[gap], start[dev][gap] - prev_end[gap], KERNEL_KERNEL, prev[gap],
              base + 4 * k_pos[gap] + 2)
    zero = ~launched & (g_launch >= 0)
    edges.add(2 * g_launch[zero], 2 * g_dev[zero], np.zeros(int(zero.sum()), np.int64), LAUNCH,
              np.full(int(zero.sum()), -1), base + 4 * k_pos[zero] + 3)
    if stream_order:
        # the stream's order where HTA's graph has no edge from the activity before (a gap of
        # KERNEL_GAP_LIMIT_NS or more, a launch delay, a wait): zero weight, after every other
        # edge (ties keep HTA's path); none the timestamps contradict (the later starting
        # before the earlier ended)
        order_of = ~gap & (prev >= 0) & (start[dev] >= prev_end)
        edges.add(2 * prev[order_of] + 1, 2 * g_dev[order_of], np.zeros(int(order_of.sum()), np.int64),
                  STREAM_ORDER, np.full(int(order_of.sum()), -1), base + 4 * (len(sort_t) + 1) + k_pos[order_of])

    # the host waits: on an event's activity, on a stream's last activity, on every stream's
    call_node = 2 * gidx[sy_call] + 1
    host_ok = gidx[sy_call] >= 0
    es = np.flatnonzero((ev_kind == trace.string_id(EVENT_SYNC)) & (sync_src >= 0) & host_ok)
    es = es[gidx[sync_src[es]] >= 0]
    edges.add(2 * gidx[sync_src[es]] + 1, call_node[es], np.zeros(len(es), np.int64), SYNC,
              np.full(len(es), -1), base + 4 * s_pos[es])
    ctx = (ev_kind == trace.string_id(CONTEXT_SYNC)) & host_ok
    one = (ev_kind == trace.string_id(STREAM_SYNC)) & host_ok
    d_tracks = track[dev]
    for tr in unique(d_tracks) if len(sy) else ():
        mine = np.flatnonzero(d_tracks == tr)
        mine = mine[np.argsort(k_pos[mine], kind="stable")]
        q = np.flatnonzero(ctx | (one & (track[sy] == tr)))
        j = np.searchsorted(k_pos[mine], s_pos[q]) - 1
        q, j = q[j >= 0], j[j >= 0]
        last = g_dev[mine[j]]
        edges.add(2 * last + 1, call_node[q], np.zeros(len(q), np.int64), SYNC, np.full(len(q), -1),
                  base + 4 * s_pos[q] + (tr % 1024) / 2048)


def _wait_lists(ctx: Context, gidx: np.ndarray, n_h: int, n_d: int) -> tuple[np.ndarray, np.ndarray]:
    """(graph event of each device activity that waited, graph event of the activity it
    waited for), both in the graph: ``Context.device_waits`` (OpenCL's event wait lists)."""
    waiting, waited = ctx.device_waits
    if not len(waiting):
        return waiting, waited
    gw, gs = gidx[waiting], gidx[waited]
    ok = (gw >= n_h) & (gw < n_h + n_d) & (gs >= n_h) & (gs < n_h + n_d)
    return gw[ok], gs[ok]


def _event_sync_sources(trace: Trace, sy: np.ndarray, ev_kind: np.ndarray, ctx: Context, cid: np.ndarray,
                        track: np.ndarray, start: np.ndarray, qk: np.ndarray, ql: np.ndarray) -> np.ndarray:
    """Per sync record, the device activity row it waits for (-1: none): the activity an
    event record marks, the last launched onto the recorded stream before it."""
    sync_src = np.full(len(sy), -1, np.int64)  # the device activity row a sync waits for
    is_event = (member(ev_kind, np.array([trace.string_id(EVENT_SYNC), trace.string_id(STREAM_WAIT_EVENT)], np.int64))
                if len(sy) else np.zeros(0, bool))  # (np.isin's set-up on no records: most windows)
    waits = np.zeros(0, np.int64)
    if is_event.any():  # (the stats are decoded only for traces that have such records)
        wait_corr = ctx.stat("wait_on_cuda_event_record_corr_id")
        wait_stream = ctx.stat("wait_on_stream")
        waits = np.flatnonzero(is_event & (wait_corr[sy] >= 0) & (wait_stream[sy] >= 0))
    if len(waits):
        records = ctx.host_rows(EVENT_RECORD_CALLS)
        records = records[cid[records] >= 0]
        rec = row_of_key(cid[records], records, wait_corr[sy[waits]])
        # the stream a record names: the track of its stream number on the waiting event's device
        plane_of = trace.track_plane
        stream_track = {(tr.plane, tr.tid): tr.id for tr in trace.tracks if tr.kind == "stream"}
        want_track = np.array([stream_track.get((int(plane_of[track[sy[w]]]), int(s)), -1)
                               for w, s in zip(waits.tolist(), wait_stream[sy[waits]].tolist())], np.int64)
        good = rec >= 0
        src = last_at_or_before(track[qk], start[ql], qk, want_track[good], start[rec[good]])
        sync_src[waits[good]] = src
    return sync_src


def _collective_waits(trace: Trace, dev: np.ndarray, dev_launch: np.ndarray, start: np.ndarray, end: np.ndarray,
                      track: np.ndarray, ctx: Context) -> np.ndarray:
    """Per device activity (index into ``dev``), the activity (index into ``dev``) a
    collective waits for by launch order on its host thread (the module's rule), -1 for
    none."""
    out = np.full(len(dev), -1, np.int64)
    coll = np.flatnonzero(ctx.communication(dev)) if len(dev) else np.zeros(0, np.int64)
    if not len(coll):
        return out
    thread = cache.threads(trace)[track[dev_launch]]
    plane = trace.track_plane[track[dev]]
    launched_at = start[dev_launch]
    wait_rows = ctx.host_rows(STREAM_WAIT_CALLS)
    wait_thread = cache.threads(trace)[track[wait_rows]]
    for s in unique(track[dev[coll]]).tolist():
        mine = coll[track[dev[coll]] == s]
        other = np.flatnonzero((track[dev] != s) & (plane == plane[mine[0]]))
        # the last launch from the same thread strictly before the collective's
        prev = last_at_or_before(thread[other], launched_at[other], other, thread[mine], launched_at[mine] - 1)
        ok = prev >= 0
        mine, prev = mine[ok], prev[ok]
        ok = end[dev[prev]] <= start[dev[mine]] + AGREE_NS  # the timestamps agree
        for th in unique(thread[mine]).tolist():
            w = np.sort(start[wait_rows[wait_thread == th]])
            if not len(w):
                continue  # no stream-wait calls recorded on this thread: the rule as it is
            q = thread[mine] == th
            between = np.searchsorted(w, launched_at[mine[q]]) - np.searchsorted(w, launched_at[prev[q]], "right")
            ok[q] &= between > 0
        out[mine[ok]] = prev[ok]
    return out


def dur_of(start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return end[rows] - start[rows]
