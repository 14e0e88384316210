"""Host waits that say by their own stats and names what device work they wait for, where
no device-side synchronisation record does (OpenCL): the dependency graph
(``analyze/depgraph.py``) links the end of that work to the end of the wait, with zero
weight, as it links a CUDA sync call to the activity its ``cuda_sync`` record names.

Per host call, the device activity it waits for (all of it launched by calls of the same
host plane; an activity ending more than ``AGREE_NS`` after the wait's end is never one):

* **an event wait** (``waits_for`` stat, the OpenCL plugin's on ``clWaitForEvents`` and
  ``Event.wait``: the correlation id of the latest command of the events it waited for):
  the activity launched by the call of that correlation id. With several events the
  plugin records only the latest enqueued: on one in-order queue the others ran before it
  (the stream's order holds them), on several queues they are not linked.
* **a blocking call** (``blocking`` stat 1: a blocking read, write or map) that launched
  device activity: its own command, which on an in-order queue ran after every command
  enqueued before it (the stream's order again). So is a waiting call that launched its
  own device work (``WAITING_CALLS``: a synchronous ``cudaMemcpy``, ``hipMemcpy``).
* **a queue wait** (``QUEUE_WAIT_CALLS``: ``clFinish``; and an event wait or blocking call
  of the two kinds above whose command is not found, with a ``queue`` stat): on each
  device track where that queue's launches ran, the last activity launched before the
  wait started. The stat holds the queue's name (``Queue 0``), which is per device: where
  two devices have a queue of that name, the wait is linked to the last activity of both
  (a dependency the program may not have had, on work that ended before the wait did).
* **anything else named a wait** (``EVENT_WAIT_CALLS`` or ``QUEUE_WAIT_CALLS`` without
  those stats: a trace read from another tool's file): the last activity of the plane's
  launches that ended during the wait.

A wait that is linked weighs nothing on the path (its time is the device work's); one
linked to nothing in the window (its work launched in an earlier step) keeps its time.

Device work that waits for other device work (:func:`device_wait_links`): an OpenCL
command enqueued with an event wait list (``wait_for=``) records the correlation ids of
the commands of those events (``wait_list`` stat, "3,7"); the graph makes it start after
each of them ends, as a CUDA stream waiting on an event (``Stream Wait Event``).

PjRt's reads of a device buffer (``np.asarray`` of a ``jax.Array`` on a GPU, XLA's
``XLA_TRANSFER_DISPATCHES`` and ``XLA_TRANSFER_RESUMES``) wait in no event of their own:
the reading call (``CommonPjRtBuffer::ToLiteral``) hands the transfer to a worker thread
by a TraceMe context (``_p``/``_pt``, consumed as ``_c``/``_ct`` by ``D2H Dispatch``),
which runs once the buffer is ready and launches the device-to-host copy; the reading
thread idles until it resumes with ``D2H Copy From Staging Buffer``. :func:`read_links`
gives the graph (:func:`read_edges`) an edge from the end of what each waited for into
its start:

* **the dispatch** waits for the read's call and for the device work of the copy's
  device launched before the read began: of that work, the activity that ended last (the
  program that computed the buffer; where it ended after the dispatch began, the buffer
  was another's, and no activity is linked);
* **the resumption** waits for the copy (the first activity its dispatch's thread
  launched from the dispatch's start on) of the reads made on its thread that ended
  last by its start.

Where the thread had nothing to do from before that end until the start (it waited:
no start or end of another of its events between, Python's own included), the thread's
edge into the start weighs nothing, and the link weighs the time from the last such end
(the thread waking, belonging to no event); else the link weighs nothing and the
thread's edge keeps its time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..derive import cache
from ..derive.correlate import Correlation
from ..trace import keys
from ..trace.core import Trace
from ..trace.factorize import factorize
from ..trace.sorting import find, first_at_or_after, last_at_or_before, lexsort, member, unique, unique_rows
from ..trace.vocabulary import (EVENT_WAIT_CALLS, QUEUE_WAIT_CALLS, WAITING_CALLS, XLA_TRANSFER_DISPATCHES,
                                XLA_TRANSFER_RESUMES)
from .common import names_in
from .xla_links import contexts

#: a link is kept where the activity ends at most this long after the wait's end
#: (``depgraph.AGREE_NS``: Kineto's decimal microseconds round a few ns apart)
AGREE_NS = 1_000


class ReadLinks(NamedTuple):
    """PjRt's reads (:func:`read_links`): from the end of ``src`` (a device activity, the
    reading call, the copy out of the staging buffer) into the start of ``dst`` (a host
    call: the transfer's dispatch, the copy out of the staging buffer), ``idle`` where
    ``dst``'s thread waited for it, by the start of ``dst`` (``dst_t``); and the reading
    threads' waits: ``thread`` (``cache.threads``) waited from ``since`` for the end of
    ``done`` (a copy out of the staging buffer), by its start (``done_t``)."""

    src: np.ndarray
    dst: np.ndarray
    idle: np.ndarray
    dst_t: np.ndarray
    done: np.ndarray
    thread: np.ndarray
    since: np.ndarray
    done_t: np.ndarray

    def within(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The links whose ``dst`` starts in ``[t0, t1)``."""
        lo, hi = np.searchsorted(self.dst_t, [t0, t1], "left").tolist()
        return self.src[lo:hi], self.dst[lo:hi], self.idle[lo:hi]

    def waits_within(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The waits (``done``, ``thread``, ``since``) whose ``done`` starts in ``[t0, t1)``."""
        lo, hi = np.searchsorted(self.done_t, [t0, t1], "left").tolist()
        return self.done[lo:hi], self.thread[lo:hi], self.since[lo:hi]


_NONE = np.zeros(0, np.int64)
#: ``xla_links.blocking_dispatches``' windows: (thread, start, end, node of the awaited end)
Windows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
NO_READS = ReadLinks(_NONE, _NONE, np.zeros(0, bool), _NONE, _NONE, _NONE, _NONE, _NONE)


class WaitLinks(NamedTuple):
    """(wait row, device activity row) pairs, by the wait's start (``wait_t``); ``reads``:
    PjRt's reads (:func:`read_links`)."""

    wait: np.ndarray
    dev: np.ndarray
    wait_t: np.ndarray
    reads: ReadLinks = NO_READS

    def within(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """The pairs whose wait starts in ``[t0, t1)``."""
        lo, hi = np.searchsorted(self.wait_t, [t0, t1], "left").tolist()
        return self.wait[lo:hi], self.dev[lo:hi]


def _int_or_none(v: object) -> int:
    try:
        x = int(v)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return -1
    return x if -2**63 <= x < 2**63 else -1


def _ints(values: np.ndarray) -> np.ndarray:
    """Stat values as int64: -1 where one is beyond int64, all -1 where one is text."""
    try:
        return np.asarray(values, np.int64)
    except OverflowError:  # a number beyond int64 in some rows (the column then holds texts): those rows have none
        return np.fromiter((_int_or_none(v) for v in values), np.int64, len(values))
    except (TypeError, ValueError):  # text in a number's place: nothing usable
        return np.full(len(values), -1, np.int64)


def int_stat(trace: Trace, key: str) -> np.ndarray:
    """One stat of every event as int64, -1 where absent (``depgraph``'s columns: the
    correlation ids, the sync records' stats)."""
    out = np.full(trace.n_events, -1, np.int64)
    col = trace.stat(key)
    if col is not None and len(col):
        out[col.rows] = _ints(col.values)
    return out


def _sparse(trace: Trace, key: str, on_host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(host rows, int values >= 0) of one stat."""
    col = trace.stat(key)
    if col is None or not len(col):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, vals = np.asarray(col.rows, np.int64), _ints(col.values)
    keep = on_host[rows] & (vals >= 0)
    return rows[keep], vals[keep]


def wait_links(trace: Trace, on_host: np.ndarray, start: np.ndarray, end: np.ndarray, track: np.ndarray,
               names: np.ndarray, cid: np.ndarray, corr: Correlation) -> WaitLinks:
    """Every (wait, activity) pair of the trace (the module's rules), with PjRt's reads."""
    none = np.zeros(0, np.int64)
    reads = read_links(trace, on_host, start, end, track, corr)
    named = names_in(trace, EVENT_WAIT_CALLS + QUEUE_WAIT_CALLS)
    w_rows, w_for = _sparse(trace, keys.WAITS_FOR, on_host)
    b_rows = _sparse(trace, keys.BLOCKING, on_host)[0]
    ok = corr.launch >= 0
    dev, launch = corr.device_rows[ok], corr.launch[ok]
    # a waiting call that launched its own work (a synchronous ``cudaMemcpy``) waits for it
    copies = unique(launch[names_in(trace, WAITING_CALLS)[names[launch]] & on_host[launch]])
    if not (named.any() or len(w_rows) or len(b_rows) or len(copies)) or not len(dev):
        return WaitLinks(none, none, none, reads)
    b_rows = unique(np.concatenate([b_rows, copies]))
    plane = np.asarray(trace.track_plane, np.int64)[track]
    waits, devs = [none], [none]
    # event waits: the activity launched by the call of that correlation id, on the wait's plane
    key = np.where(cid[launch] >= 0, plane[launch] * (1 << 40) + (cid[launch] & ((1 << 40) - 1)), -1)
    at = find(key, plane[w_rows] * (1 << 40) + (w_for & ((1 << 40) - 1))) if len(w_rows) else none
    waits.append(w_rows[at >= 0])
    devs.append(dev[at[at >= 0]])
    # blocking calls: their own command
    own = member(launch, b_rows)
    waits.append(launch[own])
    devs.append(dev[own])
    rest = unique(np.concatenate([w_rows, b_rows[~member(b_rows, copies)], np.flatnonzero(on_host & named[names])]))
    rest = rest[~member(rest, np.concatenate(waits))]  # the waits no rule above linked
    q_w, q_d, queued = _queue_waits(trace, rest, dev, launch, start)
    waits.append(q_w)
    devs.append(q_d)
    loose = rest[~queued & named[names[rest]]]
    if len(loose):  # the plane's last activity that ended during the wait
        last = last_at_or_before(plane[launch], end[dev], dev, plane[loose], end[loose] + AGREE_NS)
        has = last >= 0
        has[has] = end[last[has]] >= start[loose[has]]
        waits.append(loose[has])
        devs.append(last[has])
    w, d = np.concatenate(waits), np.concatenate(devs)
    keep = end[d] <= end[w] + AGREE_NS  # the timestamps agree
    w, d = w[keep], d[keep]
    o = np.argsort(start[w], kind="stable")
    return WaitLinks(w[o], d[o], start[w[o]], reads)


def device_wait_links(trace: Trace, corr: Correlation, cid: np.ndarray, start: np.ndarray, end: np.ndarray,
                      track: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(device activity rows, the activity row each waited for): per ``wait_list`` stat of
    a device activity, each correlation id it names, the activity launched by the call of
    that id on its launch's host plane; a pair the timestamps contradict (the waited-for
    activity ending over ``AGREE_NS`` after the other started) is left out. By the
    waiting row."""
    none = np.zeros(0, np.int64)
    col = trace.stat(keys.WAIT_LIST)
    if col is None or not len(col) or not len(corr.device_rows):
        return none, none
    rows = np.asarray(col.rows, np.int64)
    texts = np.asarray(col.values, object).astype(str)
    ok = np.char.str_len(texts) > 0
    rows, texts = rows[ok], texts[ok]
    if not len(rows):
        return none, none
    try:  # one split of all the lists, not one per row
        ids = np.array(",".join(texts.tolist()).split(","), np.int64)
    except ValueError:  # a list that is not numbers (another tool's stat): nothing usable
        return none, none
    waiting = np.repeat(rows, np.char.count(texts, ",") + 1)
    ok = corr.launch >= 0
    dev, launch = corr.device_rows[ok], corr.launch[ok]
    plane = np.asarray(trace.track_plane, np.int64)[track]
    key = np.where(cid[launch] >= 0, plane[launch] * (1 << 40) + (cid[launch] & ((1 << 40) - 1)), -1)
    row_launch = np.full(len(start), -1, np.int64)
    row_launch[dev] = launch
    w_launch = row_launch[waiting]
    at = find(key, np.where(w_launch >= 0, plane[np.maximum(w_launch, 0)] * (1 << 40) + (ids & ((1 << 40) - 1)),
                            -2))
    has = at >= 0
    waiting, waited = waiting[has], dev[at[has]]
    keep = (waited != waiting) & (end[waited] <= start[waiting] + AGREE_NS)
    waiting, waited = waiting[keep], waited[keep]
    o = np.argsort(waiting, kind="stable")
    return waiting[o], waited[o]


def _queue_waits(trace: Trace, rows: np.ndarray, dev: np.ndarray, launch: np.ndarray,
                 start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the host calls ``rows``, those with a ``queue`` stat: (waits, activities) pairs,
    the last activity launched before each on every device track where its queue's
    launches ran; and per row whether it named a queue (one pass per distinct queue name:
    a program's few)."""
    col = trace.stat(keys.QUEUE)
    none = np.zeros(0, np.int64)
    if col is None or not len(rows):
        return none, none, np.zeros(len(rows), bool)
    has, labels = col.lookup(rows)
    l_has, l_labels = col.lookup(launch)
    if not has.any() or not l_has.any():
        return none, none, has
    codes = np.asarray(factorize(np.concatenate([labels.astype(object), l_labels.astype(object)]))[0], np.int64)
    w_code, l_code = codes[:len(labels)], codes[len(labels):]
    w_rows, l_dev, l_start = rows[has], dev[l_has], start[launch[l_has]]
    d_track = np.asarray(trace.events["track"], np.int64)[l_dev]
    waits, devs = [none], [none]
    for c in unique(w_code[member(w_code, l_code)]).tolist():
        mine, on = w_rows[w_code == c], l_code == c
        tracks = unique(d_track[on])  # (each the queue's, on some device)
        q = np.repeat(mine, len(tracks))
        last = last_at_or_before(d_track[on], l_start[on], l_dev[on], np.tile(tracks, len(mine)), start[q])
        waits.append(q[last >= 0])
        devs.append(last[last >= 0])
    return np.concatenate(waits), np.concatenate(devs), has


def _last_ended(d_plane: np.ndarray, launch_t: np.ndarray, d_end: np.ndarray, dev: np.ndarray,
                q_plane: np.ndarray, q_t: np.ndarray) -> np.ndarray:
    """Per query, of the activities ``dev`` of its device plane launched before ``q_t``,
    the one that ended last (-1: none). One sort per device of the queries (a few)."""
    out = np.full(len(q_t), -1, np.int64)
    for p in unique(q_plane).tolist():
        m = np.flatnonzero(d_plane == p)
        m = m[np.argsort(launch_t[m], kind="stable")]
        e = d_end[m]
        best = np.maximum.accumulate(np.where(e >= np.maximum.accumulate(e), np.arange(len(m)), 0))
        q = np.flatnonzero(q_plane == p)
        i = np.searchsorted(launch_t[m], q_t[q], "left") - 1
        out[q] = np.where(i >= 0, dev[m[best[np.maximum(i, 0)]]] if len(m) else -1, -1)
    return out


def _last_node_before(thread: np.ndarray, start: np.ndarray, end: np.ndarray, on_host: np.ndarray,
                      q_thread: np.ndarray, q_t: np.ndarray) -> np.ndarray:
    """Per query, the last start or end of an event of its thread (Python's calls too)
    before ``q_t``; -1 where none."""
    h = np.flatnonzero(on_host & member(thread, unique(q_thread)))
    key = np.concatenate([thread[h], thread[h]])
    t = np.concatenate([start[h], end[h]])
    return last_at_or_before(key, t, t, q_thread, q_t - 1)


def read_links(trace: Trace, on_host: np.ndarray, start: np.ndarray, end: np.ndarray, track: np.ndarray,
               corr: Correlation) -> ReadLinks:
    """PjRt's reads of device buffers (the module's second part)."""
    disp = trace.rows_named(*XLA_TRANSFER_DISPATCHES)
    disp = disp[on_host[disp]]
    p_col = trace.stat("_p")
    if not len(disp) or p_col is None or not len(corr.device_rows):
        return NO_READS
    cons, c_ctx = contexts(trace, disp, "_c", "_ct")
    prod = np.asarray(p_col.rows, np.int64)
    prod, p_ctx = contexts(trace, prod[on_host[prod]], "_p", "_pt")
    if not len(cons) or not len(prod):
        return NO_READS
    plane = trace.track_plane.astype(np.int64)[track]
    _, _, code = unique_rows(plane[np.concatenate([prod, cons])], *np.concatenate([p_ctx, c_ctx]).T)
    at = find(code[:len(prod)], code[len(prod):])  # each dispatch's read (contexts are per process)
    cons, prod = cons[at >= 0], prod[at[at >= 0]]
    keep = end[prod] <= start[cons] + AGREE_NS
    cons, prod = cons[keep], prod[keep]
    thread = cache.threads(trace)[track]
    ok = corr.launch >= 0
    dev, launch = corr.device_rows[ok], corr.launch[ok]
    # each dispatch's copy: the first activity its thread launched from its start on, before its next dispatch
    at = first_at_or_after(thread[launch], start[launch], np.arange(len(dev)), thread[cons], start[cons])
    nxt = first_at_or_after(thread[disp], start[disp], start[disp], thread[cons], start[cons] + 1)
    ok = (at >= 0) & ((nxt < 0) | (start[launch[np.maximum(at, 0)]] < nxt))
    src, dst = [prod], [cons]  # (the dispatch waits for its read's call, copy or not)
    cons, prod, copy = cons[ok], prod[ok], dev[at[ok]]
    waited = _last_ended(plane[track[dev]], start[launch], end[dev], dev, plane[track[copy]], start[prod])
    has = waited >= 0
    has[has] = end[waited[has]] <= start[cons[has]] + AGREE_NS  # (else the buffer was another's)
    src.append(waited[has])
    dst.append(cons[has])
    done = trace.rows_named(*XLA_TRANSFER_RESUMES)
    done = done[on_host[done]]
    k = _NONE
    if not len(copy):
        done = done[:0]
    elif len(done):  # each copy out of the staging buffer: the reads' copy that ended last by its start
        o = np.argsort(end[copy], kind="stable")
        at = np.searchsorted(end[copy][o], start[done] + AGREE_NS, "right") - 1
        done, k = done[at >= 0], o[at[at >= 0]]
        src.append(copy[k])
        dst.append(done)
    s, d = np.concatenate(src), np.concatenate(dst)
    idle = _last_node_before(thread, start, end, on_host, thread[d], start[d]) < end[s]
    o = np.argsort(start[d], kind="stable")
    # the reading thread waits from its last event before the copy out of the staging buffer ends
    w_thread = thread[prod[k]]
    since = _last_node_before(thread, start, end, on_host, w_thread, end[done])
    w = since < end[copy[k]]  # (idle since before the device's copy ended; else it did not wait)
    done, w_thread, since = done[w], w_thread[w], since[w]
    w_o = np.argsort(start[done], kind="stable")
    return ReadLinks(s[o], d[o], idle[o], start[d[o]], done[w_o], w_thread[w_o], since[w_o], start[done[w_o]])


def read_edges(trace: Trace, reads: ReadLinks, host: np.ndarray, gidx: np.ndarray, node_time: np.ndarray,
               t0: int, t1: int, windows: Windows | None) -> tuple[Windows | None, np.ndarray, np.ndarray, np.ndarray]:
    """A window's part of PjRt's reads (those starting in ``[t0, t1)``; ``host``: the
    window's host calls, graph events ``0..len(host)-1``; ``gidx``: event row -> graph
    event; ``node_time``: the graph's): ``windows`` (``xla_links.blocking_dispatches``'
    (thread, start, end, node of the awaited end), or None) with the reading threads'
    waits, whose edges then weigh nothing, their end leading to the thread's next node
    (``xla_links.blocked_edges``); and the links' edges (source nodes, destination
    nodes, weights): each from an end into a start, weighing, where the thread waited,
    the time from the last of the start's sources."""
    src, dst, idle = reads.within(t0, t1)
    g_s, g_d = gidx[src], gidx[dst]
    keep = (g_s >= 0) & (g_d >= 0) & (g_d < len(host))
    a, b, idle = 2 * g_s[keep] + 1, 2 * g_d[keep], idle[keep]
    keep = node_time[a] <= node_time[b] + AGREE_NS  # (a call cut at the window's end)
    a, b, idle = a[keep], b[keep], idle[keep]
    weight = _NONE
    if len(a):
        o = lexsort((node_time[a], b))
        a, b, idle = a[o], b[o], idle[o]
        last = np.r_[b[1:] != b[:-1], True]  # each start's last source
        ready = np.zeros(len(node_time), np.int64)
        ready[b[last]] = node_time[a[last]]
        waits = np.zeros(len(node_time), bool)
        waits[b[idle]] = True
        weight = np.where(waits[b], np.maximum(node_time[b] - ready[b], 0), 0)
    done, th, since = reads.waits_within(t0, t1)
    g = gidx[done]
    keep = (g >= 0) & (g < len(host))
    g, th, since = g[keep], th[keep], since[keep]
    if len(g):
        mine = (th, since, node_time[2 * g + 1], 2 * g + 1)
        if windows is not None:
            mine = (np.concatenate([windows[0], th]), np.concatenate([windows[1], since]),
                    np.concatenate([windows[2], mine[2]]), np.concatenate([windows[3], mine[3]]))
        windows = mine
    return windows, a, b, weight
