"""TensorFlow 1.x timelines: each GPU kernel is linked to the executor's op that ran it, by
the node name both carry in their args (``args.name``); there are no launch calls. The
layout is the one of real files (joeyearsley/mnist-xla, roastduck/pendulum, jwfromm/Riptide,
plok6325/my_tensorflow; none under a licence that lets them be kept here, so this file is
written here): the executor's ``/job:.../device:GPU:0 Compute`` process, a process per GPU
stream, ``stream:all`` repeating the kernels, copies named after their graph edge. A node
may run more than once: a kernel is the run latest to start before it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.ops import op_stats
from polyprof.derive.correlate import correlate
from polyprof.formats.kineto.chunks import Unsupported, read_chunks
from polyprof.formats.kineto.tf_timeline import match_runs

PROCESSES = {1: "/job:localhost/replica:0/task:0/device:GPU:0 Compute",
             2: "/job:localhost/replica:0/task:0/device:CPU:0 Compute",
             3: "/device:GPU:0/stream:13 Compute", 4: "/device:GPU:0/stream:14 Compute",
             5: "/device:GPU:0/stream:all Compute", 6: "/device:GPU:0/memcpy Compute"}


def _op(pid: int, op: str, node: str, ts: int, dur: int) -> dict:
    return {"ph": "X", "cat": "Op", "name": op, "pid": pid, "tid": 0, "ts": ts, "dur": dur,
            "args": {"name": node, "op": op}}


def _timeline(tmp_path: Path) -> Path:
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}} for p, n in PROCESSES.items()]
    # the executor: conv runs twice (a loop), matmul once, a CPU op with no device work
    ev += [_op(1, "Conv2D", "net/conv", 100, 10), _op(1, "MatMul", "net/fc", 120, 10),
           _op(1, "Conv2D", "net/conv", 400, 10), _op(2, "NoOp", "_SOURCE", 90, 5)]
    kernels = [(3, "Conv2D", "net/conv", 105, 50),   # the first run's
               (3, "Conv2D", "net/conv", 160, 20),   # still the first run's (the second starts at 400)
               (4, "MatMul", "net/fc", 125, 30),
               (3, "Conv2D", "net/conv", 405, 70),   # the second run's
               (4, "Relu", "net/relu", 130, 9)]      # no op of its node ran: not linked
    for pid, op, node, ts, dur in kernels:
        ev += [_op(pid, op, node, ts, dur), _op(5, op, node, ts, dur)]  # and its repeat on stream:all
    # a copy on its stream and again on memcpy, named after its edge (not a node that ran)
    ev += [_op(4, "MEMCPYHtoD", "edge_7_net/conv", 95, 4), _op(6, "MEMCPYHtoD", "edge_7_net/conv", 95, 4)]
    p = tmp_path / "timeline.ctf.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_tf1_kernels_are_their_ops_device_time(tmp_path):
    t = polyprof.load(_timeline(tmp_path))
    rows = {r["name"]: r for r in op_stats(t).to_dicts()}
    # Conv2D: 50 + 20 us (first run) + 70 us (second); MatMul: 30 us; Relu's kernel and the copy: no op
    assert {n: (r["count"], r["self_device_ns"], r["device_ns"], r["launches"]) for n, r in rows.items()} == {
        "Conv2D": (2, 140_000, 140_000, 0), "MatMul": (1, 30_000, 30_000, 0), "NoOp": (1, 0, 0, 0)}
    c = correlate(t)
    names, starts = t.names(), t.events["start_ns"]
    linked = {(names[d], int(starts[d]) // 1000): (int(starts[o]) // 1000 if o >= 0 else None)
              for d, o in zip(c.device_rows.tolist(), c.op.tolist())}
    # the stream:all and memcpy repeats are derived lines: not device activity of their own
    assert linked == {("Conv2D", 105): 100, ("Conv2D", 160): 100, ("Conv2D", 405): 400, ("MatMul", 125): 120,
                      ("Relu", 130): None, ("MEMCPYHtoD", 95): None}
    assert c.counts["device_activities_with_framework_op"] == 4


def test_match_runs_takes_the_latest_run_at_or_before(tmp_path):
    op_node, op_start = np.array([0, 1, 0, 0, -1]), np.array([10, 10, 50, 30, 0])
    dev_node, dev_start = np.array([0, 0, 0, 0, 1, 1, 2, -1]), np.array([10, 29, 31, 99, 9, 11, 40, 40])
    assert match_runs(op_node, op_start, dev_node, dev_start).tolist() == [0, 0, 3, 2, -1, 1, -1, -1]


def test_tf1_timeline_with_an_executor_is_not_read_in_chunks(tmp_path):
    with pytest.raises(Unsupported, match="TensorFlow 1.x"):
        read_chunks(_timeline(tmp_path), lambda c: None, chunk_events=3)
