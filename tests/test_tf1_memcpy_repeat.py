"""TensorFlow 1.x timelines: TensorFlow's device tracer saves every copy twice, on its
stream's process and on the GPU's ``memcpy`` process (``collector->Save(memcpy_device,
ns)`` then ``Save(stream_device + stream_id, copy)``), as it repeats every kernel on
``stream:all``. Real files (peterz5/TensorFlowPractice, plok6325/my_tensorflow,
joeyearsley/mnist-xla, roastduck/pendulum, jwfromm/Riptide; none under a licence that
lets them be kept here) have the layout written below: the copies on ``memcpy`` are a
repeat, counted once. A ``memcpy`` line whose copies are on no stream stays the copies'
only line."""

from __future__ import annotations

import json
from pathlib import Path

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown

PROCESSES = {0: "/device:GPU:0/stream:all Compute", 1: "/device:GPU:0/stream:13 Compute",
             2: "/device:GPU:0/stream:14 Compute", 3: "/device:GPU:0/memcpy Compute",
             4: "/gpu:1/stream:12 Compute", 5: "/gpu:1/memcpy Compute"}


def _op(pid: int, name: str, ts: int, dur: int) -> dict:
    return {"ph": "X", "cat": "Op", "name": name, "pid": pid, "tid": 0, "ts": ts, "dur": dur,
            "args": {"name": f"model/{name}", "op": name}}


def _timeline(tmp_path: Path) -> Path:
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}} for p, n in PROCESSES.items()]
    ev += [_op(0, "MatMul", 100, 50), _op(1, "MatMul", 100, 50)]
    # GPU 0: two copies (one named after its op, as TF names device-to-device copies), each on
    # its stream and again on memcpy
    for pid in (2, 3):
        ev += [_op(pid, "MEMCPYHtoD", 10, 5), _op(pid, "Pack", 200, 7)]
    # GPU 1: a copy on memcpy alone (no stream holds it): kept
    ev += [_op(4, "Relu", 0, 20), _op(5, "MEMCPYDtoH", 30, 4)]
    p = tmp_path / "timeline.ctf.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_tf1_memcpy_line_repeating_the_streams_copies_is_derived(tmp_path):
    t = polyprof.load(_timeline(tmp_path))
    tracks = [t.tracks[k] for k in t.events["track"].tolist()]
    got = sorted((t.planes[tr.plane].name, tr.name, n, c)
                 for tr, n, c in zip(tracks, t.names().tolist(), t.categories().tolist()))
    assert got == sorted([
        ("/device:GPU:0", "stream:all", "MatMul", "derived"), ("/device:GPU:0", "stream 13", "MatMul", "kernel"),
        ("/device:GPU:0", "stream 14", "MEMCPYHtoD", "gpu_memcpy"), ("/device:GPU:0", "stream 14", "Pack", "kernel"),
        ("/device:GPU:0", "memcpy", "MEMCPYHtoD", "derived"), ("/device:GPU:0", "memcpy", "Pack", "derived"),
        ("/device:GPU:1", "stream 12", "Relu", "kernel"), ("/device:GPU:1", "memcpy", "MEMCPYDtoH", "gpu_memcpy")])
    tb = {(r["plane"], r["stream"]): r for r in temporal_breakdown(t).to_dicts()}
    # GPU 0's activity: the copy (5 us), the kernel (50 us), Pack (7 us), each once
    assert tb[("/device:GPU:0", "(all streams)")]["busy_ns"] == 62_000
    assert ("/device:GPU:0", "memcpy") not in tb
    assert tb[("/device:GPU:1", "(all streams)")]["non_compute_ns"] == 4_000
