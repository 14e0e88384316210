"""The launch queue of each device stream, for the dependency graph's launch-delay edges
(``analyze/depgraph.py``, HTA's queue length: launches less started activities)."""

from __future__ import annotations

import numpy as np

from ..derive.correlate import Correlation
from ..trace.core import Trace
from ..trace.sorting import lexsort
from ..trace.vocabulary import QUEUED_LAUNCHES
from .common import names_in


def queue_levels(trace: Trace, corr: Correlation, names: np.ndarray, start: np.ndarray,
                 track: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The queue of each stream over the whole trace (+1 at a launch, -1 when its work
    starts): the queued activities, their launches, and the queue's length at each
    activity's launch and at its start (-9 for the rows not queued)."""
    q_launch = names_in(trace, QUEUED_LAUNCHES)
    m = corr.launch >= 0
    m[m] = q_launch[names[corr.launch[m]]]
    qk, ql = corr.device_rows[m], corr.launch[m]
    n_q = len(qk)
    q_track = np.concatenate([track[qk], track[qk]])
    q_t = np.concatenate([start[ql], start[qk]])
    q_v = np.concatenate([np.ones(n_q, np.int64), -np.ones(n_q, np.int64)])
    o = lexsort((q_t, q_track)) if n_q else np.zeros(0, np.int64)
    cs = np.cumsum(q_v[o])
    first = np.r_[True, q_track[o][1:] != q_track[o][:-1]] if n_q else np.zeros(0, bool)
    grp_start = np.maximum.accumulate(np.where(first, np.arange(len(o)), 0)) if n_q else o
    before = np.where(grp_start > 0, cs[grp_start - 1], 0) if n_q else cs
    level = np.empty(len(o), np.int64)
    level[o] = cs - before
    q_at_launch = np.full(trace.n_events, -9, np.int64)
    q_at_start = np.full(trace.n_events, -9, np.int64)
    q_at_launch[qk] = level[:n_q]
    q_at_start[qk] = level[n_q:]
    return qk, ql, q_at_launch, q_at_start
