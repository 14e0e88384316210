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
run's last end (zero weight); a dispatch that ends before its run does stays work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import last_at_or_before, lexsort, unique, unique_rows
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


def xla_dispatches(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per string id: a name of PjRt's dispatch of a program (``DISPATCH_CALLS``, as
    prefixes), none where the trace has no XLA host op (``ops``): one test per name,
    not per event."""
    out = np.zeros(len(trace.strings), bool)
    if bool(ops.any()):
        out[:] = np.fromiter((s.startswith(DISPATCH_CALLS) for s in trace.strings), bool, len(trace.strings))
    return out


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
    parts: list[tuple[np.ndarray, np.ndarray]] = []  # (thread, run)
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
        parts.append((np.full(int(ok.sum()), th, np.int64), np.flatnonzero(ok)))
    th_of, r = (np.concatenate(p) for p in zip(*parts))
    return th_of, r_start[r], r_end[r], 2 * m[last[r]] + 1


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
                  windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) nodes: per window of :func:`blocking_dispatches`, from the
    run's last end into the first node of the waiting thread's walk (``walked``, each
    thread's nodes in time order; ``walk_thread``: per host call its thread) at or after
    it."""
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
    return (np.concatenate(src), np.concatenate(dst)) if src else (_NONE, _NONE)
