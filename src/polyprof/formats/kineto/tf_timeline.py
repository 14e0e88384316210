"""TensorFlow 1.x's timeline (``tf.python.client.timeline``): its GPU work linked to the ops
that ran it.

The executor's processes (``/job:localhost/replica:0/task:0/device:GPU:0 Compute``) hold
the graph's ops, each an ``Op`` event whose args name its node (``args.name``, e.g.
``v0/conv2d/Conv2D``) and type (``args.op``); the GPU's stream processes
(``/device:GPU:0/stream:13 Compute``) hold the kernels and copies TensorFlow's device
tracer saw, each with the node of the op that ran it in the same ``args.name``. There are
no launch calls and no flows: the node name is the link. An op may run many times (a
``while`` loop, several ``session.run`` in one timeline), so a device activity is the op
run of its node that is latest to start at or before the activity starts.

:func:`link` gives both the op run and its device activities the op's row as
``external_id`` (as ``legacy.py`` does for torch's legacy export): with no launch calls,
``derive.correlate`` names a device activity's op by it, and ``op_stats`` counts the
activity as the op's device time (``self_device_ns``, ``device_ns``). Copies are named
after their graph edge (``edge_84_v0/IteratorGetNext``) or ``unknown``, not a node that
ran: they stay unlinked, as do the repeats on ``stream:all`` and ``memcpy`` (derived).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.sorting import last_at_or_before, member, union, unique, unique_inverse
from ...trace.stats import StatColumn
from .codes import _hashable
from .devices import _TF_EXECUTOR, _TF_LINE

if TYPE_CHECKING:
    from .collector import _Collector

#: the arg naming an op's node, on the executor's ops and on the device's activities
NODE_ARG = "name"


def has_gpu_lines(col: "_Collector") -> bool:
    """Whether the trace has a TensorFlow 1.x GPU stream or copy process: ``chunks.py``
    reads such a file whole (its ``memcpy`` line is told a repeat of its streams', and
    its work linked to ops, over the whole file)."""
    return any(isinstance(n := info.get("process_name"), str) and _TF_LINE.match(n)
               for pid, info in col.process.items() if _hashable(pid))


def is_timeline(col: "_Collector") -> bool:
    """Whether the trace is a TensorFlow 1.x timeline whose device work may link to ops:
    it has an executor process and a GPU stream or copy process (by their names; cheap)."""
    names = [n for pid, info in col.process.items() if _hashable(pid) and isinstance(n := info.get("process_name"), str)]
    return any(_TF_LINE.match(n) for n in names) and any(_TF_EXECUTOR.match(n) for n in names)


def link(trace: Trace) -> None:
    """Each device activity (kernel, copy, fill on a device plane) and the op run of the
    same node latest to start at or before it: both given the op's row as ``external_id``
    (module doc). Nothing where the trace has ``external_id`` already."""
    if trace.stats.may_have(keys.EXTERNAL_ID):
        return
    ev = trace.events
    op_cat = trace.string_id(keys.CAT_CPU_OP)
    acts = [trace.string_id(c) for c in (keys.CAT_KERNEL, keys.CAT_MEMCPY, keys.CAT_MEMSET)]
    acts = [a for a in acts if a >= 0]
    if op_cat < 0 or not acts:
        return
    device = np.array([p.kind == "device" for p in trace.planes], bool)
    on_device = device[trace.track_plane[ev["track"]]]
    ops = np.flatnonzero((ev["category"] == op_cat) & ~on_device)
    dev = np.flatnonzero(member(ev["category"], np.array(acts, ev["category"].dtype)) & on_device)
    if not len(ops) or not len(dev):
        return
    op_node, dev_node = _nodes(trace, ops, dev)
    hit = match_runs(op_node, ev["start_ns"][ops], dev_node, ev["start_ns"][dev])
    linked = hit >= 0
    if not linked.any():
        return
    op_rows = ops[hit[linked]]
    linked_ops = unique(op_rows)  # each op's own id is its row
    at = np.concatenate([linked_ops, dev[linked]])
    ids = np.concatenate([linked_ops, op_rows])
    order = np.argsort(at, kind="stable")
    trace.stats[keys.EXTERNAL_ID] = StatColumn(at[order].astype(np.int64), ids[order].astype(np.int64))


def _nodes(trace: Trace, ops: np.ndarray, dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The node name of each op and of each device activity as an integer code (-1: no
    name), one code per distinct name across both."""
    rows = union(ops, dev)
    got = trace.stats.lookup_rows([NODE_ARG], rows).get(NODE_ARG)
    codes = np.full(len(rows), -1, np.int64)
    if got is not None:
        mask, values = got
        text = [v if isinstance(v, str) else None for v in values.tolist()]
        named = np.array([t is not None for t in text], bool)
        if named.any():
            names = np.array([t for t in text if t is not None], dtype=object)
            _, inv = unique_inverse(names)
            where = np.flatnonzero(mask)[named]
            codes[where] = inv.ravel()
    return codes[np.searchsorted(rows, ops)], codes[np.searchsorted(rows, dev)]


def match_runs(op_node: np.ndarray, op_start: np.ndarray, dev_node: np.ndarray, dev_start: np.ndarray) -> np.ndarray:
    """For each device activity, the position (into the ops) of the op of its node that is
    latest to start at or before the activity starts; -1 where none does (no node name,
    no op of that node, or every run of it starts later)."""
    keep = np.flatnonzero(op_node >= 0)
    out = last_at_or_before(op_node[keep], op_start[keep], keep, dev_node, dev_start)
    out[dev_node < 0] = -1
    return out
