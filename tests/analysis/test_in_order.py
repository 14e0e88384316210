"""In-order correlation pairs each activity with the call that enqueued it.

Made from the real V100 trace, whose correlation ids give the truth: every launch call
is given the queue of its own activity (as the OpenCL plugin names a command queue on
each enqueue call), the synchronising calls of those threads name a queue too (as
``clFinish`` / ``clWaitForEvents`` do), then the ids and flows are removed and the
trace is correlated again. Each pair is checked against the truth, not just counted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import polyprof
from polyprof.derive.correlate import BY_ID, IN_ORDER, correlate
from polyprof.trace import keys
from polyprof.trace.stats import StatColumn, StatTable
from polyprof.trace.categories import Kind


@pytest.fixture(scope="module")
def v100(kineto_files):
    return polyprof.load(next(p for p in kineto_files if p.name.startswith("v100")))


def without_ids(trace: polyprof.Trace, queue_rows: np.ndarray, queues: np.ndarray) -> polyprof.Trace:
    stats = StatTable({k: c for k, c in trace.stats.items() if k not in (keys.CORRELATION_ID, keys.EXTERNAL_ID)})
    order = np.argsort(queue_rows)
    stats[keys.QUEUE] = StatColumn(queue_rows[order].astype(np.int64), queues[order].astype(object))
    flows = {k: v[:0] for k, v in trace.flows.items()}
    return dataclasses.replace(trace, stats=stats, flows=flows)


def test_in_order_pairs_are_the_true_pairs(v100):
    truth = correlate(v100)
    assert (truth.method == BY_ID).all()
    ev = v100.events
    tnames = np.array([t.name for t in v100.tracks], object)
    launch_queue = tnames[ev["track"][truth.device_rows]]  # the stream each launch enqueued on
    # synchronising calls on the launching threads name the busiest queue, like clFinish
    names = v100.names()
    rt = v100.rows_of_kind(Kind.RUNTIME)
    sync = rt[np.array(["synchronize" in n.lower() or "eventquery" in n.lower() for n in names[rt]], bool)]
    assert len(sync) > 0
    busiest = max(set(launch_queue.tolist()), key=launch_queue.tolist().count)
    rows = np.concatenate([truth.launch, sync])
    queues = np.concatenate([launch_queue, np.full(len(sync), busiest, object)])
    keep = np.unique(rows, return_index=True)[1]
    t = without_ids(v100, rows[keep], queues[keep])
    got = correlate(t)
    assert np.array_equal(got.device_rows, truth.device_rows)
    assert (got.method == IN_ORDER).sum() > 0.99 * len(got.device_rows)
    matched = got.launch >= 0
    wrong = matched & (got.launch != truth.launch)
    assert not wrong.any(), (f"{int(wrong.sum())} of {int(matched.sum())} pairs wrong, e.g. "
                             f"{names[got.launch[wrong][:3]].tolist()}")
    # no activity is paired with a synchronising call
    assert not np.isin(got.launch, sync).any()
