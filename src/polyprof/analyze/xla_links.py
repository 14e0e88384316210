"""XLA's CPU runtime in the dependency graph (``analyze/depgraph.py``): its ops are host
events, and the thread that runs a compiled program waits for them.

JAX on the CPU backend runs a jitted program's HLO ops (``dot.1``, ``ynn_fusion.2``,
``all-reduce.2``) as host events (kind KERNEL on a host thread, with ``hlo_op``): some
on the thread that runs the program (PjRt's client thread), the rest on XLA's intra-op
worker threads (``tf_XLAEigen``). The program's thread then records
``ThunkExecutor::Execute (wait for completion)`` (``XLA_WAIT_CALLS``) until the worker
threads' ops are done: a wait, not work. In the graph that call is a waiting call (the
edge into its end weighs nothing), and its waited-on work is the XLA ops of the other
threads during it: each op starting in the wait depends on the wait's start, and the
wait's end on each op ending in it (zero weight). So the path runs through the ops
instead of the wait (a JAX CPU training loop: the wait was 58-66% of each step's path).

Between the ops themselves, the data dependencies the file's HLO gives
(``formats/xspace/xla_deps.py``): each op run depends on the last run, in the same
program run (``run_id``) and ending by its start, of each op whose output it reads (a
zero-weight edge from that op's end to its start), so the path follows the computation
from one worker thread to another instead of the longest thread alone.

Between program runs, the device's order (:func:`run_order_edges`): PjRt's CPU client
makes each program it runs asynchronously on a device wait for the one enqueued before
it there (its "last enqueue event"), and a program that reads another's output waits for
it, so the runs of one device follow each other whichever pool thread each ran on. Each
run depends on the run of its device that ended last by its start (a zero-weight edge
from that run's last end into the first call of the run on each thread it ran on); runs
that overlapped in time ran independently and are not linked.

The dispatching thread's wait (:func:`blocking_dispatches`, :func:`blocked_edges`): PjRt's
dispatch of a program (``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice``,
``DISPATCH_CALLS``) usually returns before the run it enqueued ends, but it may outlast
it (its thread descheduled while the run's threads hold the cores, or a multi-device
``Execute (jit_step)`` waiting for its launches): then the call, from the run's start to
its end, waits for the run, as a CUDA sync call for its kernels. Its thread's time during
the run (the call's own time and its children's: ``Wait for LaunchOnDevice completion``)
weighs nothing, and the thread's first node at or after the run's end depends on the
run's last end (weighing, into a call's end, the call's time between outside its
waits, and into the start of a call nested in another, that time, the enclosing
call's: the thread resumed inside the dispatch); a dispatch that ends before its run
does stays work. A dispatch on several
devices launches its runs one by one (a pool thread's
``[0] CommonPjRtLoadedExecutable::Execute``, then ``[1] ...``): it waits only once the
last of them has started; and such a launch, itself a dispatch of its device's run
(:func:`xla_dispatches`), may wait for that run where another pool thread runs it.

The dispatching thread into the run (:func:`launch_edges`): a dispatch that names its
run (on several devices: ``Execute (jit_step)`` has the ``run_id``) launched it, so the
run's first work on its thread (the pool thread's calls preparing it, then its ops)
depends on the dispatching thread's last node by then, weighing the time between where
nothing else held the run back (HTA's launch delay; the dispatch's time). Before, nothing
led from the thread into a run: a step's path started at the run's first op, or stopped
at the dispatch, and what the thread did before (a ``load`` section) was off the path
or the run was. JAX's dispatch on one device (``ExecuteHelperOnSingleDevice``) names no
run: the run it launched is the one its thread pool task started (:func:`launched_runs`:
TSL's ``ThreadpoolListener::Record`` in the dispatch, read by the ``StartRegion`` that
opens the run on a pool thread), and it is linked alike.

The run back into a thread waiting for its output (:func:`await_edges`): JAX's
``block_until_ready`` records PjRt's ``CommonPjRtBuffer::Await`` as the wait begins and
again, consuming the first's TraceMe context, as it returns, nothing between
(:func:`buffer_waits`). The run that ended last by the return, after the wait began, on
another thread, leads into the return, weighing the time between (the thread waking:
nobody's) where the thread has no node in it. Before, a dispatch that returned before its
run ended led back from it nowhere: the path ended at the run's last op, and the thread's
wake-up after it (up to 11.5 ms on a loaded 2-core machine) was off it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..derive.intervals import covered, union
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import (find, first_and_inverse, first_at_or_after, last_at_or_before, lexsort, unique,
                             unique_inverse, unique_rows)
from ..trace.vocabulary import XLA_WAIT_CALLS
from .common import names_in

if TYPE_CHECKING:
    from ..formats.xspace.xla_deps import OpDependencies

_NONE = np.zeros(0, np.int64)
#: the stat XLA's CPU runtime gives its ops and its wait: the device (of the process's
#: CPU devices) whose program they are
DEVICE_STAT = "device_ordinal"


def xla_host_ops(trace: Trace, on_host: np.ndarray, timed: np.ndarray) -> np.ndarray:
    """Per event row: an op XLA's CPU runtime ran on a host thread (kind KERNEL on a host
    track, with a duration)."""
    return on_host & timed & (trace.kinds == Kind.KERNEL) if trace.n_events else np.zeros(0, bool)


def xla_waits(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per string id: the name of XLA's wait for its worker threads (``XLA_WAIT_CALLS``),
    none where the trace has no XLA host op (``ops``) to carry the wait's time."""
    if not bool(ops.any()):
        return np.zeros(len(trace.strings), bool)
    return names_in(trace, XLA_WAIT_CALLS)


#: PjRt's dispatch of a compiled program (name prefixes): the call on the thread that called
#: the jitted function, which enqueues its run(s) on the client's pool threads
DISPATCH_CALLS = ("CommonPjRtLoadedExecutable::Execute", "PjRtCpuLoadedExecutable::Execute",
                  "TfrtCpuExecutable::Execute", "PjRtStreamExecutorLoadedExecutable::Execute")


def _dispatch_device(name: str) -> int:
    """-1 where ``name`` starts with one of ``DISPATCH_CALLS``; the device's index where
    it starts with one after it (``[1] CommonPjRtLoadedExecutable::Execute (jit_step)``: a
    pool thread's launch of device 1's run of a dispatch on several); -2 otherwise."""
    if name.startswith(DISPATCH_CALLS):
        return -1
    head, sep, rest = name.partition("] ")
    ok = bool(sep) and head[:1] == "[" and head[1:].isdigit() and rest.startswith(DISPATCH_CALLS)
    return int(head[1:]) if ok else -2


def xla_dispatches(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per string id: a name of PjRt's dispatch of a program (``DISPATCH_CALLS``, as
    prefixes, or a device's launch of its run, :func:`_dispatch_device`), and the device
    a launch names (its index, taken for its :data:`DEVICE_STAT`; -1: none); none where
    the trace has no XLA host op (``ops``): one test per name, not per event."""
    dev = np.full(len(trace.strings), -2, np.int64)
    if bool(ops.any()):
        dev[:] = np.fromiter((_dispatch_device(s) for s in trace.strings), np.int64, len(trace.strings))
    return dev > -2, np.maximum(dev, -1)


def wait_edges(thread: np.ndarray, node_time: np.ndarray, is_op: np.ndarray, is_wait: np.ndarray,
               device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) nodes of a window's graph: per waiting call (``is_wait``,
    per host call of the window; ``thread``: each call's thread), its start into the
    start of each XLA op (``is_op``) of another thread starting during it, and the end of
    each such op ending during it into its end. Every edge runs forward in time. Where
    the wait and an op both name their device (``device``, :data:`DEVICE_STAT`; -1: none),
    only the ops of its device: a process with several CPU devices runs one program per
    device at once, each with its own wait. The edges are in the waits' order, each
    wait's into its ops first (as one loop over the waits would give them); a thread's
    waits do not overlap, so each op is matched by a search per waiting thread."""
    waits, ops = np.flatnonzero(is_wait), np.flatnonzero(is_op)
    if not len(waits) or not len(ops):
        return _NONE, _NONE
    o_s, o_e = node_time[2 * ops], node_time[2 * ops + 1]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (wait, 0 into / 1 out of it, op)
    for th in unique(thread[waits]).tolist():
        w = waits[thread[waits] == th]
        w = w[np.argsort(node_time[2 * w], kind="stable")]
        w_s, w_e = node_time[2 * w], node_time[2 * w + 1]
        other = thread[ops] != th
        for side, t, inside in ((0, o_s, lambda t, e: t < e), (1, o_e, lambda t, e: t <= e)):
            at = np.searchsorted(w_s, t, side="right") - 1  # the wait started last at or before t
            ok = other & (at >= 0)
            at = np.where(ok, at, 0)
            ok &= inside(t, w_e[at])
            ww = w[at]
            ok &= (device[ops] == device[ww]) | (device[ops] < 0) | (device[ww] < 0)
            parts.append((ww[ok], np.full(int(ok.sum()), side, np.int64), ops[ok]))
    wait_of, side_of, op_of = (np.concatenate(c) for c in zip(*parts))
    o = lexsort((op_of, side_of, wait_of))
    wait_of, side_of, op_of = wait_of[o], side_of[o], op_of[o]
    into = side_of == 0
    return (np.where(into, 2 * wait_of, 2 * op_of + 1), np.where(into, 2 * op_of, 2 * wait_of + 1))


#: the stat XLA's CPU runtime gives each op of one execution of a program
RUN_STAT = "run_id"
#: an op may start this long before the op it reads from is recorded to end (the
#: runtime's clock reads: the producer's end is taken after it signals its consumers)
DATA_SLACK_NS = 1_000


def data_edges(deps: "OpDependencies", rows: np.ndarray, is_op: np.ndarray, node_time: np.ndarray,
               run: np.ndarray, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) nodes of a window's graph: per XLA op run among the host
    calls ``rows`` (``is_op``; graph event ``i`` is ``rows[i]``, its nodes ``2i`` and
    ``2i + 1``), an edge from the end of the last run of each op it reads from
    (``deps``), in the same program run (``run``, -1: none) on the same device
    (``device``, :data:`DEVICE_STAT`: a run id is shared by the devices' programs),
    ending by its start (:data:`DATA_SLACK_NS`) and starting before it, into its
    start."""
    ops = np.flatnonzero(is_op)
    if not len(ops) or not len(deps.rows):
        return _NONE, _NONE
    at = np.minimum(np.searchsorted(deps.rows, rows[ops]), len(deps.rows) - 1)  # (ascending)
    known = deps.rows[at] == rows[ops]
    ops, op = ops[known], deps.op[at[known]]
    ops, op = ops[op >= 0], op[op >= 0]
    if not len(ops):
        return _NONE, _NONE
    n_prod = deps.ptr[op + 1] - deps.ptr[op]
    consumer = np.repeat(ops, n_prod)
    first = np.repeat(deps.ptr[op] - np.cumsum(n_prod) + n_prod, n_prod)
    wanted = deps.producers[first + np.arange(len(consumer))] if len(consumer) else _NONE
    if not len(consumer):
        return _NONE, _NONE
    # (run, op) of the ops run and of the ones wanted, as one code
    _, _, code = unique_rows(np.concatenate([run[ops], run[consumer]]), np.concatenate([device[ops], device[consumer]]),
                             np.concatenate([op, wanted]))
    code = np.asarray(code, np.int64).reshape(-1)
    key, ends, want, start = code[:len(ops)], node_time[2 * ops + 1], code[len(ops):], node_time[2 * consumer]
    src = last_at_or_before(key, ends, ops, want, start)
    late = np.flatnonzero(src < 0)  # none ended by its start: one ending within the slack
    if len(late):
        src[late] = last_at_or_before(key, ends, ops, want[late], start[late] + DATA_SLACK_NS)
    ok = (src >= 0) & (src != consumer)
    ok[ok] = node_time[2 * src[ok]] < node_time[2 * consumer[ok]]  # (never against time: no cycle)
    return 2 * src[ok] + 1, 2 * consumer[ok]


def run_order_edges(thread: np.ndarray, node_time: np.ndarray, is_member: np.ndarray, run: np.ndarray,
                    device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) nodes of a window's graph: the program runs of each device in
    the order they ran. Per host call of the window (graph event ``i``, nodes ``2i`` and
    ``2i + 1``; ``thread``: its thread), ``is_member``: it belongs to a program run (an
    XLA op, or the run's wait for completion), ``run``: its :data:`RUN_STAT` (-1: none,
    not linked), ``device``: its :data:`DEVICE_STAT` (-1: none; such runs are one
    device's). A run starts at its first call's start and ends at its last call's end;
    each run depends on the run of its device that ended last at or before its start:
    an edge from the end of that run's last call into the first call of this run on each
    of its threads. A run that started before another ended is not linked to it (they
    overlapped: independent), and no edge runs against time."""
    m = np.flatnonzero(is_member & (run != -1))  # (a run id may be negative)
    if len(m) < 2:
        return _NONE, _NONE
    _, first, code = unique_rows(device[m], run[m])
    n_runs = len(first)
    if n_runs < 2:
        return _NONE, _NONE
    s, e, runs = node_time[2 * m], node_time[2 * m + 1], np.arange(n_runs)
    by_end = lexsort((e, code))  # per run, its calls by end: the last one ends the run
    last_at = by_end[np.searchsorted(code[by_end], runs, "right") - 1]
    by_start = lexsort((s, thread[m], code))  # per run and thread, its calls by start
    head = np.ones(len(m), bool)
    head[1:] = (code[by_start][1:] != code[by_start][:-1]) | (thread[m][by_start][1:] != thread[m][by_start][:-1])
    entry = by_start[head]  # each run's first call on each of its threads
    run_start = np.full(n_runs, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(run_start, code[entry], s[entry])
    dev = device[m][first]
    pred = last_at_or_before(dev, e[last_at], runs, dev, run_start)  # (its own run ends after it starts)
    p = pred[code[entry]]
    ok = p >= 0
    src, dst = 2 * m[last_at[p[ok]]] + 1, 2 * m[entry[ok]]
    ok = node_time[src] <= node_time[dst]
    return src[ok], dst[ok]


def blocking_dispatches(thread: np.ndarray, node_time: np.ndarray, is_dispatch: np.ndarray, is_op: np.ndarray,
                        run: np.ndarray, device: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(thread, run start, run end, the node of the run's last end) per program run a
    dispatch outlasted: per host call of the window (graph event ``i``, nodes ``2i`` and
    ``2i + 1``; ``thread``: its thread), ``is_dispatch``: PjRt's dispatch of a program
    (:func:`xla_dispatches`), ``is_op``: an XLA op, ``run``, ``device``: as
    :func:`run_order_edges`. A run (its ops: the wait for completion of the thread that
    ran it may return after its dispatch did, the thread descheduled) is outlasted by the outermost dispatch on a thread
    where the run has no call that started at or before the run's first start and ended at
    or after its last end, naming the run's :data:`RUN_STAT` and :data:`DEVICE_STAT` or
    none. One search per dispatching thread (a handful)."""
    d = np.flatnonzero(is_dispatch)
    m = np.flatnonzero(is_op & (run != -1))  # (a run id may be negative)
    if not len(d) or not len(m):
        return _NONE, _NONE, _NONE, _NONE
    _, first, code = unique_rows(device[m], run[m])
    s, e = node_time[2 * m], node_time[2 * m + 1]
    n_runs = len(first)
    r_start = np.full(n_runs, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(r_start, code, s)
    by_end = lexsort((e, code))  # per run, its calls by end: the last one ends the run
    last = by_end[np.searchsorted(code[by_end], np.arange(n_runs), "right") - 1]
    r_end, r_run, r_dev = e[last], run[m][first], device[m][first]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (thread, run, the dispatch names its run)
    for th in unique(thread[d]).tolist():
        c = d[thread[d] == th]
        c = c[np.argsort(node_time[2 * c], kind="stable")]
        c_s, c_e = node_time[2 * c], node_time[2 * c + 1]
        outer = np.maximum.accumulate(np.where(c_e >= np.maximum.accumulate(c_e), np.arange(len(c)), 0))
        at = np.searchsorted(c_s, r_start, "right") - 1  # the dispatches started by the run's start
        ok = at >= 0
        call = c[outer[np.maximum(at, 0)]]  # among them, the one ending last (the outermost)
        ok &= node_time[2 * call + 1] >= r_end
        ok &= ((run[call] == r_run) | (run[call] == -1)) & ((device[call] == r_dev) | (device[call] < 0))
        on_th = np.zeros(n_runs, bool)
        on_th[code[thread[m] == th]] = True  # runs with a call on this thread: not its dispatch's wait
        ok &= ~on_th
        parts.append((np.full(int(ok.sum()), th, np.int64), np.flatnonzero(ok), run[call[ok]] != -1))
    th_of, r, named = (np.concatenate(p) for p in zip(*parts))
    # a dispatch naming the run id (on several devices) launches its runs one by one: it
    # waits once the last of them has started, not while it still launches
    _, id_of = unique_inverse(r_run)
    launched = np.full(len(r_run), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(launched, id_of.reshape(-1), r_start)
    w_start = np.where(named, np.maximum(r_start[r], launched[id_of.reshape(-1)[r]]), r_start[r])
    keep = w_start <= r_end[r]  # (a run that ended while its dispatch still launched: not waited for)
    return th_of[keep], w_start[keep], r_end[r[keep]], 2 * m[last[r[keep]]] + 1


def _thread_windows(windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
                    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread of the ``windows`` (:func:`blocking_dispatches`), their union (sorted,
    disjoint starts and ends)."""
    w_th, w_s, w_e, _ = windows
    return {th: union(w_s[w_th == th], w_e[w_th == th]) for th in unique(w_th).tolist()}


def waited(thread: np.ndarray, a_time: np.ndarray, b_time: np.ndarray,
           windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Per span ``a_time`` to ``b_time`` on ``thread``: how much of it lies in the
    ``windows`` of its thread (:func:`blocking_dispatches`: the thread waits there)."""
    out = np.zeros(len(thread), np.int64)
    for th, (s, e) in _thread_windows(windows).items():
        q = np.flatnonzero(thread == th)
        out[q] = covered(s, e, a_time[q], b_time[q])
    return out


def blocked(thread: np.ndarray, a_time: np.ndarray, b_time: np.ndarray,
            windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Per edge of a host thread's walk (from ``a_time`` to ``b_time`` on ``thread``):
    it overlaps one of the ``windows`` of its thread (:func:`blocking_dispatches`: the
    thread waits there), so it weighs nothing."""
    w_th, w_s, w_e, _ = windows
    out = np.zeros(len(thread), bool)
    for th in unique(w_th).tolist():
        o = np.argsort(w_s[w_th == th], kind="stable")
        s, e = w_s[w_th == th][o], np.maximum.accumulate(w_e[w_th == th][o])
        q = np.flatnonzero(thread == th)
        at = np.searchsorted(s, b_time[q], "left") - 1  # the windows starting before the edge ends
        ok = at >= 0
        out[q[ok]] = e[at[ok]] > a_time[q[ok]]
    return out


def blocked_edges(walk_thread: np.ndarray, walked: np.ndarray, node_time: np.ndarray,
                  windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                  depth: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(source, destination, weight, owner) nodes: per window of
    :func:`blocking_dispatches`, from the run's last end into the first node of the
    waiting thread's walk (``walked``, each thread's nodes in time order; ``walk_thread``:
    per host call its thread) at or after it. The edge weighs the time between the two
    outside the thread's windows where that node ends a call (the call's work after its
    wait: the dispatch returning, or its thread descheduled before it could; its own), or
    starts a call nested in another (``depth``: per host call; the time is the enclosing
    call's, as a gap between two children is their parent's: the thread woke inside the
    dispatch); into a top-level call's start, nothing."""
    w_th, _, w_e, w_node = windows
    src, dst = [], []
    node_th = walk_thread[walked >> 1]
    for th in unique(w_th).tolist():
        nodes = walked[node_th == th]
        q = np.flatnonzero(w_th == th)
        at = np.searchsorted(node_time[nodes], w_e[q], "left")
        ok = at < len(nodes)
        src.append(w_node[q[ok]])
        dst.append(nodes[at[ok]])
    if not src:
        return _NONE, _NONE, _NONE, _NONE
    a, b = np.concatenate(src), np.concatenate(dst)
    t_a, t_b = node_time[a], node_time[b]
    th_b = walk_thread[b >> 1]
    weight = np.maximum((t_b - t_a) - waited(th_b, t_a, t_b, windows), 0)
    is_end = (b & 1).astype(bool)
    owner = np.where(is_end, b >> 1, -1)
    if depth is not None:  # into a nested call's start: its parent's time
        owner[~is_end] = _enclosing(walk_thread, walked, depth, b[~is_end])
    weight = np.where(owner >= 0, weight, 0)
    return a, b, weight, np.where(weight > 0, owner, -1)


def _enclosing(walk_thread: np.ndarray, walked: np.ndarray, depth: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per start node of ``starts``, the call it is nested in (-1: a top-level call): the
    last call of one depth less to start before it on its thread, in the walk (calls
    nest: one of that depth starting later than the parent starts after it ends)."""
    ev = walked >> 1
    is_start = ~(walked & 1).astype(bool)
    place = np.arange(len(walked))
    s = np.flatnonzero(is_start)
    d_max = int(depth.max(initial=0)) + 2
    pos = np.empty(int(walked.max(initial=-1)) + 1, np.int64)
    pos[walked] = place  # (per node, its place in the walk)
    q_ev = starts >> 1
    found = last_at_or_before(walk_thread[ev[s]] * d_max + depth[ev[s]], place[s], ev[s],
                              walk_thread[q_ev] * d_max + depth[q_ev] - 1, pos[starts])
    return np.where(depth[q_ev] > 0, found, -1)


def launch_edges(walk_thread: np.ndarray, walked: np.ndarray, node_time: np.ndarray, is_dispatch: np.ndarray,
                 is_member: np.ndarray, run: np.ndarray,
                 device: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(source, destination, weight, owner) per program run a dispatch names: the dispatching
    thread into the run. Per host call of the window (graph event ``i``, nodes ``2i`` and
    ``2i + 1``; ``walk_thread``: its thread; ``walked``: each thread's nodes in the walk's
    order), ``is_dispatch``: PjRt's dispatch of a program (:func:`xla_dispatches`),
    ``is_member``, ``run``, ``device``: as :func:`run_order_edges`. A dispatch naming a
    :data:`RUN_STAT` (on several devices: ``Execute (jit_step)``) launched each run of
    that id (and of its device, where it names one) starting at or after it on another
    thread. The destination: on the thread of the run's first call, the first call
    starting at or after the dispatch's start and after the thread's last call of
    another run before the run (the pool thread's calls that prepare the run, e.g.
    ``[0] CommonPjRtLoadedExecutable::Execute``, are its start; its first call at
    worst). The source: the dispatching thread's last node at or before it, within the
    dispatch (its end, where the run's thread began after it returned). The edge weighs
    the time between its ends (the launch's delay, HTA's ``kernel_launch_delay``) where
    nothing else held the run back: its thread has no node in that time and the device's
    run before it (:func:`run_order_edges`) had ended by the source; else nothing (the
    thread's own order, or the device's, leads into the run)."""
    d = np.flatnonzero(is_dispatch & (run != -1))  # (a run id may be negative)
    m = np.flatnonzero(is_member & (run != -1))
    if not len(d) or not len(m):
        return _NONE, _NONE, _NONE, _NONE
    _, first, code = unique_rows(device[m], run[m])
    runs = np.arange(len(first))
    s, e = node_time[2 * m], node_time[2 * m + 1]
    by_start = lexsort((s, code))
    entry = m[by_start[np.searchsorted(code[by_start], runs, "left")]]  # each run's first call
    r_start, r_run, r_dev = node_time[2 * entry], run[m][first], device[m][first]
    by_end = lexsort((e, code))
    last_e = e[by_end[np.searchsorted(code[by_end], runs, "right") - 1]]
    pred = last_at_or_before(r_dev, last_e, runs, r_dev, r_start)  # the device's run before (run_order_edges)
    dev_free = np.where(pred >= 0, last_e[np.maximum(pred, 0)], np.iinfo(np.int64).min)
    disp = last_at_or_before(run[d], node_time[2 * d], d, r_run, r_start)  # the dispatch started last by it
    ok = disp >= 0
    disp = np.maximum(disp, 0)
    ok &= (walk_thread[disp] != walk_thread[entry]) & ((device[disp] == r_dev) | (device[disp] < 0))
    r, disp, entry = runs[ok], disp[ok], entry[ok]
    if not len(r):
        return _NONE, _NONE, _NONE, _NONE
    dst, before = np.zeros(len(r), np.int64), np.zeros(len(r), np.int64)  # (before: its thread's node before it)
    node_th = walk_thread[walked >> 1]
    step_of = np.empty(len(node_time), np.int64)  # per node, its place in the walk
    step_of[walked] = np.arange(len(walked))
    for th in unique(walk_thread[entry]).tolist():  # the run's thread: its first call since the dispatch began
        q, mine = np.flatnonzero(walk_thread[entry] == th), node_th == th
        nodes = walked[mine]
        is_end = (nodes & 1).astype(bool)
        ends = np.flatnonzero(is_end & is_member[nodes >> 1] & (run[nodes >> 1] != -1))  # (places among nodes)
        starts = np.flatnonzero(~is_end)
        at = np.searchsorted(ends, np.searchsorted(np.flatnonzero(mine), step_of[2 * entry[q]])) - 1  # another run's
        lo = np.maximum(np.searchsorted(node_time[nodes], node_time[2 * disp[q]], "left"),
                        np.where(at >= 0, ends[np.maximum(at, 0)] + 1, 0))
        p = starts[np.searchsorted(starts, lo)]
        dst[q] = nodes[p]
        before[q] = np.where(p > 0, node_time[nodes[np.maximum(p - 1, 0)]], np.iinfo(np.int64).min)
    src = np.where(node_time[dst] >= node_time[2 * disp + 1], 2 * disp + 1, -1)
    for th in unique(walk_thread[disp[src < 0]]).tolist():  # within the dispatch: its thread's last node by then
        q = np.flatnonzero((src < 0) & (walk_thread[disp] == th))
        nodes = walked[node_th == th]
        src[q] = nodes[np.searchsorted(node_time[nodes], node_time[dst[q]], "right") - 1]  # (its start at worst)
    t_src = node_time[src]
    weight = np.where((before <= t_src) & (dev_free[r] <= t_src), node_time[dst] - t_src, 0)
    return src, dst, weight, np.where(src == 2 * disp + 1, -1, disp)


#: TSL's thread pool listener (``ThreadpoolListener``): the instant a task is scheduled
#: on a pool (``Record``, a TraceMe producer: ``_p``, ``_pt``), the instant a pool thread
#: starts it (``StartRegion``, its consumer: ``_c``, ``_ct`` the same; context type 15,
#: TSL's ``kThreadpoolEvent``, in JAX 0.10.2), and its end there (``StopRegion``)
POOL_RECORD, POOL_START, POOL_STOP = ("ThreadpoolListener::Record", "ThreadpoolListener::StartRegion",
                                      "ThreadpoolListener::StopRegion")


def contexts(trace: Trace, rows: np.ndarray, id_key: str, type_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(those of ``rows`` carrying a TraceMe context, its (id, type) per row): ``_p``/``_pt``
    a producer's, ``_c``/``_ct`` a consumer's (here and in ``wait_links``). No rows: no
    column is built (a trace's summary reads only the stats it needs)."""
    if not len(rows):
        return rows[:0], np.zeros((0, 2), np.int64)
    found = trace.stats.lookup_rows((id_key, type_key), rows)
    if len(found) < 2 or any(v.dtype.kind not in "iu" for _, v in found.values()):
        return rows[:0], np.zeros((0, 2), np.int64)
    (has_id, ids), (has_type, types) = found[id_key], found[type_key]
    both = has_id & has_type
    return rows[both], np.stack([ids[both[has_id]].astype(np.int64), types[both[has_type]].astype(np.int64)], 1)


def launched_runs(trace: Trace, on_host: np.ndarray, start: np.ndarray, end: np.ndarray, is_dispatch: np.ndarray,
                  is_member: np.ndarray, run: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch rows, ascending; the :data:`RUN_STAT` of the run each launched): the run of
    a dispatch that names none (JAX's on one device, ``ExecuteHelperOnSingleDevice``), from
    the TraceMe context that ties it to the run. The dispatch hands the run to the
    client's pool: a ``ThreadpoolListener::Record`` (:data:`POOL_RECORD`) on its thread
    during it; the pool thread that runs it records the ``StartRegion`` consuming that
    context, then the run's calls (``is_member``: an XLA op or the run's wait, with its
    ``run``, -1: none) until its ``StopRegion``. The run is the one of the first member
    call on that thread at or after the ``StartRegion``, before the next ``StopRegion``
    there (a task that ran no program, e.g. a buffer's callback, or a run deferred to its
    inputs, whose region holds no call of it: no run). The dispatch is the outermost one
    (``is_dispatch``: per string id, :func:`xla_dispatches`) on the ``Record``'s thread
    during it, naming no run itself; of several ``Record`` in one dispatch, the first
    that leads to a run. Contexts match within a plane (one process's ids)."""
    rec, sr = trace.rows_named(POOL_RECORD), trace.rows_named(POOL_START)
    rec, sr = rec[on_host[rec]], sr[on_host[sr]]
    rec, p_ctx = contexts(trace, rec, "_p", "_pt")
    sr, c_ctx = contexts(trace, sr, "_c", "_ct")
    if not len(rec) or not len(sr):
        return _NONE, _NONE
    track = np.asarray(trace.events["track"], np.int64)
    plane = trace.track_plane.astype(np.int64)[track[np.concatenate([rec, sr])]]
    _, _, code = unique_rows(plane, *np.concatenate([p_ctx, c_ctx]).T)
    at = find(code[len(rec):], code[:len(rec)])  # each Record's StartRegion
    thread = cache.threads(trace)[track]
    rec, cons = rec[at >= 0], sr[at[at >= 0]]
    keep = thread[rec] != thread[cons]
    rec, cons = rec[keep], cons[keep]
    m = np.flatnonzero(is_member & (run != -1))  # (a run id may be negative)
    stop = trace.rows_named(POOL_STOP)
    first = first_at_or_after(thread[m], start[m], m, thread[cons], start[cons])
    nxt = first_at_or_after(thread[stop], start[stop], stop, thread[cons], start[cons])
    keep = (first >= 0) & ((nxt < 0) | (start[first] <= start[np.maximum(nxt, 0)]))
    rec, first = rec[keep], first[keep]
    d = np.flatnonzero(is_dispatch[np.asarray(trace.events["name"], np.int64)] & on_host & (end > start) & (run == -1))
    if not len(rec) or not len(d):
        return _NONE, _NONE
    disp = np.full(len(rec), -1, np.int64)
    for th in unique(thread[rec]).tolist():  # the outermost dispatch during each Record (a handful of threads)
        q, c = np.flatnonzero(thread[rec] == th), d[thread[d] == th]
        if not len(c):
            continue
        c = c[np.argsort(start[c], kind="stable")]
        c_e = end[c]
        outer = np.maximum.accumulate(np.where(c_e >= np.maximum.accumulate(c_e), np.arange(len(c)), 0))
        i = np.searchsorted(start[c], start[rec[q]], "right") - 1  # the dispatches started by it
        call = c[outer[np.maximum(i, 0)]]
        disp[q] = np.where((i >= 0) & (end[call] >= start[rec[q]]), call, -1)
    ok = disp >= 0
    rec, disp, first = rec[ok], disp[ok], first[ok]
    o = np.lexsort((start[rec], disp))  # per dispatch, its Records by time: the first leads
    one, _ = first_and_inverse(disp[o])
    return disp[o][one], run[first[o][one]]


#: PjRt's wait for a buffer to be ready (``block_until_ready``): a TraceMe as the wait
#: begins (a producer: ``_p``, ``_pt``) and one as it returns (its consumer: ``_c``,
#: ``_ct`` the same), both on the waiting thread, nothing between
AWAIT_CALL = "CommonPjRtBuffer::Await"


def buffer_waits(trace: Trace, on_host: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the :data:`AWAIT_CALL` that returns from a wait, ascending; the start of
    the one that began it): the pairs of one thread and one TraceMe context."""
    rows = trace.rows_named(AWAIT_CALL)
    rows = rows[on_host[rows]]
    p, p_ctx = contexts(trace, rows, "_p", "_pt")
    c, c_ctx = contexts(trace, rows, "_c", "_ct")
    if not len(p) or not len(c):
        return _NONE, _NONE
    thread = cache.threads(trace)[np.asarray(trace.events["track"], np.int64)[np.concatenate([p, c])]]
    _, _, code = unique_rows(thread, *np.concatenate([p_ctx, c_ctx]).T)
    at = find(code[:len(p)], code[len(p):])  # each return's beginning
    c, since = c[at >= 0], start[p[at[at >= 0]]]
    keep = since <= start[c]
    return c[keep], since[keep]


def await_edges(walk_thread: np.ndarray, walked: np.ndarray, node_time: np.ndarray, waiter: np.ndarray,
                since: np.ndarray, is_member: np.ndarray, run: np.ndarray, device: np.ndarray,
                plane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, destination, weight) nodes: per return from a buffer wait (``waiter``:
    graph events, :func:`buffer_waits`; ``since``: when each wait began), from the end
    of the program run that ended last by the return, at or after the wait began, in
    the same process (``plane``, per host call) on another thread, into the return's
    start. ``is_member``, ``run``, ``device``: as :func:`run_order_edges`;
    ``walk_thread``, ``walked``: as :func:`launch_edges`. The edge weighs the time
    between (the thread waking after the run: in no event) where the waiting thread has
    no node in it; else nothing."""
    m = np.flatnonzero(is_member & (run != -1))  # (a run id may be negative)
    if not len(waiter) or not len(m):
        return _NONE, _NONE, _NONE
    _, first, code = unique_rows(plane[m], device[m], run[m])
    e = node_time[2 * m + 1]
    by_end = lexsort((e, code))
    last = m[by_end[np.searchsorted(code[by_end], np.arange(len(first)), "right") - 1]]  # each run's last call
    back = node_time[2 * waiter]
    run_last = last_at_or_before(plane[last], node_time[2 * last + 1], last, plane[waiter], back)  # (ended last)
    ok = run_last >= 0
    run_last = np.maximum(run_last, 0)
    ok &= (node_time[2 * run_last + 1] >= since) & (walk_thread[run_last] != walk_thread[waiter])
    waiter, run_last = waiter[ok], run_last[ok]
    if not len(waiter):
        return _NONE, _NONE, _NONE
    step_of = np.empty(len(node_time), np.int64)  # per node, its place in the walk
    step_of[walked] = np.arange(len(walked))
    prev = walked[np.maximum(step_of[2 * waiter] - 1, 0)]  # the waiting thread's node before the return
    quiet = (step_of[2 * waiter] == 0) | (walk_thread[prev >> 1] != walk_thread[waiter])
    quiet |= node_time[prev] <= node_time[2 * run_last + 1]
    src, dst = 2 * run_last + 1, 2 * waiter
    return src, dst, np.where(quiet, node_time[dst] - node_time[src], 0)
