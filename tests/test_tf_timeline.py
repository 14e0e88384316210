"""TensorFlow 1.x's timeline (``tf.python.client.timeline``'s Chrome trace, the
``timeline.ctf.json`` of TF 1.x tutorials): a process per GPU stream and one for its
copies are that GPU's lines, and ``stream:all``, which repeats every stream's kernels, is
a derived line, so no kernel is counted twice. The layout is the one of real files
(joeyearsley/mnist-xla, roastduck/pendulum, jwfromm/Riptide; none under a licence that
lets them be kept here): every op with category ``Op``, ``tid`` 0 on the device lines."""

from __future__ import annotations

import json
from pathlib import Path

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown
from polyprof.formats.kineto.chunks import read_chunks

PROCESSES = {
    0: "Allocators",
    1: "/job:localhost/replica:0/task:0/device:GPU:0 Compute",  # the executor: host threads
    2: "/job:localhost/replica:0/task:0/device:GPU:0 Tensors",
    3: "/device:GPU:0/stream:13 Compute",
    4: "/device:GPU:0/stream:14 Compute",
    5: "/device:GPU:0/stream:all Compute",
    6: "/device:GPU:0/memcpy Compute",
    7: "/gpu:1/stream:12 Compute",  # the spelling of releases before 1.5
}


def _op(pid: int, name: str, ts: int, dur: int, tid: int = 0) -> dict:
    return {"ph": "X", "cat": "Op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"name": f"model/{name}", "op": name}}


def _timeline(tmp_path: Path, executor: bool = True) -> Path:
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}} for p, n in PROCESSES.items()
                      if executor or p != 1]
    if executor:
        ev += [_op(1, "Conv2D", 1000, 40, tid=1), _op(1, "MatMul", 1050, 30, tid=2)]
    ev += [_op(3, "Conv2D", 1010, 200), _op(4, "MatMul", 1060, 100),
           _op(5, "Conv2D", 1010, 200), _op(5, "MatMul", 1060, 100),
           _op(6, "MEMCPYHtoD", 990, 15), _op(6, "MEMCPYDtoH", 1300, 5),
           _op(7, "Relu", 1100, 50)]
    p = tmp_path / "timeline.ctf.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_tf1_timeline_streams_are_gpu_lines_and_stream_all_is_not_counted_again(tmp_path):
    t = polyprof.load(_timeline(tmp_path))
    planes = sorted((p.name, p.kind) for p in t.planes)
    assert planes == [("/device:GPU:0", "device"), ("/device:GPU:1", "device"), ("/host:CPU", "host")]
    lines = sorted((t.planes[tr.plane].name, tr.name) for tr in t.tracks if t.planes[tr.plane].kind == "device")
    assert lines == [("/device:GPU:0", "memcpy"), ("/device:GPU:0", "stream 13"), ("/device:GPU:0", "stream 14"),
                     ("/device:GPU:0", "stream:all"), ("/device:GPU:1", "stream 12")]
    got = sorted(zip((t.planes[t.tracks[k].plane].name for k in t.events["track"].tolist()),
                     (t.tracks[k].name for k in t.events["track"].tolist()), t.names().tolist(),
                     t.categories().tolist()))
    assert got == sorted([
        ("/host:CPU", "thread 1", "Conv2D", "cpu_op"), ("/host:CPU", "thread 2", "MatMul", "cpu_op"),
        ("/device:GPU:0", "stream 13", "Conv2D", "kernel"), ("/device:GPU:0", "stream 14", "MatMul", "kernel"),
        ("/device:GPU:0", "stream:all", "Conv2D", "derived"), ("/device:GPU:0", "stream:all", "MatMul", "derived"),
        ("/device:GPU:0", "memcpy", "MEMCPYHtoD", "gpu_memcpy"), ("/device:GPU:0", "memcpy", "MEMCPYDtoH", "gpu_memcpy"),
        ("/device:GPU:1", "stream 12", "Relu", "kernel")])
    tb = {(r["plane"], r["stream"]): r for r in temporal_breakdown(t).to_dicts()}
    gpu0 = tb[("/device:GPU:0", "(all streams)")]
    # 200 µs (1010-1210) with the 100 µs of stream 14 (1060-1160) under it: 200 µs, where
    # counting stream:all too made the GPU busy for its kernels twice over
    assert (gpu0["compute_ns"], gpu0["non_compute_ns"]) == (200_000, 20_000)
    assert tb[("/device:GPU:1", "(all streams)")]["compute_ns"] == 50_000


def test_the_executors_device_process_and_others_stay_host(tmp_path):
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/job:w/replica:0/task:0/device:GPU:0 Compute"}},
          {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0/stream:13 Tensors"}},
          {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "my /device:GPU:0/stream:13 Compute"}},
          _op(1, "Conv2D", 0, 5), _op(2, "Conv2D", 0, 5), _op(3, "Conv2D", 0, 5)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    t = polyprof.load(p)
    assert {p.kind for p in t.planes} == {"host"}
    # the executor's ops are framework ops (tests/test_legacy_tf_readers.py); the others stay as written
    assert sorted(zip(t.events["track"].tolist(), t.categories().tolist())) == [(0, "cpu_op"), (1, "Op"), (2, "Op")]


def test_tf1_timeline_with_gpu_lines_is_read_whole_not_in_chunks(tmp_path):
    """Its ``memcpy`` line is told a repeat of its streams' (and its kernels linked to
    ops) over the whole file: a chunk holding only that line's copies took them for the
    only ones (a store of 2 x 40,000 copies counted 76,200). So a store reads it whole,
    with the same lines and categories as a load."""
    import pytest

    from polyprof.formats.kineto.chunks import Unsupported

    path = _timeline(tmp_path, executor=False)
    with pytest.raises(Unsupported, match="TensorFlow 1.x"):
        read_chunks(path, lambda c: None, chunk_events=3)
