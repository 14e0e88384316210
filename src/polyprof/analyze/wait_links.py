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
  enqueued before it (the stream's order again).
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
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..derive.correlate import Correlation
from ..trace import keys
from ..trace.core import Trace
from ..trace.factorize import factorize
from ..trace.sorting import find, last_at_or_before, member, unique
from ..trace.vocabulary import EVENT_WAIT_CALLS, QUEUE_WAIT_CALLS
from .common import names_in

#: a link is kept where the activity ends at most this long after the wait's end
#: (``depgraph.AGREE_NS``: Kineto's decimal microseconds round a few ns apart)
AGREE_NS = 1_000


class WaitLinks(NamedTuple):
    """(wait row, device activity row) pairs, by the wait's start (``wait_t``)."""

    wait: np.ndarray
    dev: np.ndarray
    wait_t: np.ndarray

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
    """Every (wait, activity) pair of the trace (the module's rules)."""
    none = np.zeros(0, np.int64)
    named = names_in(trace, EVENT_WAIT_CALLS + QUEUE_WAIT_CALLS)
    w_rows, w_for = _sparse(trace, keys.WAITS_FOR, on_host)
    b_rows = _sparse(trace, keys.BLOCKING, on_host)[0]
    if not (named.any() or len(w_rows) or len(b_rows)) or not len(corr.device_rows):
        return WaitLinks(none, none, none)
    ok = corr.launch >= 0
    dev, launch = corr.device_rows[ok], corr.launch[ok]
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
    rest = unique(np.concatenate([w_rows, b_rows, np.flatnonzero(on_host & named[names])]))
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
    return WaitLinks(w[o], d[o], start[w[o]])


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
