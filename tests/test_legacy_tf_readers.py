"""torch's legacy autograd profiler trace recorded with ``use_cuda=True`` and TensorFlow
1.x's timeline, as their writers lay them out.

torch 1.x's ``EventList.export_chrome_trace`` (torch/autograd/profiler.py up to 1.8) writes
per op an X event on ``"pid": "CPU functions"`` (tid: the op's thread) and, per CUDA
interval of the op (the time between the CUDA events recorded on its stream at its start
and end, named after the op), an ``s`` flow event at the op's start, an ``f`` at the
interval's start and an X event, both on ``"pid": "CUDA functions"`` with the *device
index* as tid. An op's interval holds those of the ops it calls. No public file of it
with CUDA work was found (VoteNet's, tests/data/peers/legacy_autograd/, has none), so
the file here is made in that layout.

TensorFlow 1.x's timeline: every op an X event of category ``Op``, named by its type, its
node in ``args.name``; the executor's processes (``/job:.../device:CPU:0 Compute``) run
them on the host (the layout of five public timelines: aistein/dlprof's two CPU ones,
mnist-xla's, pendulum's and Riptide's GPU ones, none kept here for their licences)."""

from __future__ import annotations

import json
from pathlib import Path

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown
from polyprof.analyze.ops import op_stats
from polyprof.derive import cache
from polyprof.formats.kineto.chunks import Unsupported, read_chunks

import pytest

#: (thread, op, cpu start, cpu end, device, cuda start, cuda end): a forward on GPU 0
#: (conv2d > convolution > cudnn_convolution, then relu), a matmul on GPU 1, and the
#: autograd thread's backward of it on GPU 1 (MmBackward > mm)
OPS = [
    (1, "aten::conv2d", 100.0, 160.0, 0, 200.0, 300.0),
    (1, "aten::convolution", 102.5, 158.0, 0, 203.0, 298.0),
    (1, "aten::cudnn_convolution", 105.25, 150.0, 0, 206.0, 295.0),
    (1, "aten::relu", 170.0, 180.0, 0, 300.5, 320.5),
    (1, "aten::mm", 210.0, 240.0, 1, 400.0, 450.0),
    (2, "MmBackward", 300.0, 350.0, 1, 455.0, 520.0),
    (2, "aten::mm", 305.0, 345.0, 1, 460.0, 515.0),
    (1, "aten::size", 250.0, 251.0, None, 0, 0),  # ran no CUDA work (its interval was 0: none written)
]


def _legacy_trace(tmp_path: Path) -> Path:
    ev: list[dict] = []
    for n, (tid, name, t0, t1, dev, c0, c1) in enumerate(sorted(OPS, key=lambda o: (o[2], -o[3]))):
        ev.append({"name": name, "ph": "X", "ts": t0, "dur": t1 - t0, "tid": tid, "pid": "CPU functions", "args": {}})
        if dev is None:
            continue
        ev.append({"name": name, "ph": "s", "ts": t0, "tid": tid, "pid": "CPU functions", "id": n,
                   "cat": "cpu_to_cuda", "args": {}})
        ev.append({"name": name, "ph": "f", "ts": c0, "tid": dev, "pid": "CUDA functions", "id": n,
                   "cat": "cpu_to_cuda", "args": {}})
        ev.append({"name": name, "ph": "X", "ts": c0, "dur": c1 - c0, "tid": dev, "pid": "CUDA functions", "args": {}})
    p = tmp_path / "legacy_use_cuda.json"
    p.write_text(json.dumps(ev))
    return p


def test_each_cuda_functions_thread_is_the_device_its_id_names(tmp_path):
    t = polyprof.load(_legacy_trace(tmp_path))
    assert sorted((p.name, p.kind, p.vendor, p.index) for p in t.planes) == [
        ("/device:GPU:0", "device", "NVIDIA", 0), ("/device:GPU:1", "device", "NVIDIA", 1), ("/host:CPU", "host", "", 0)]
    on = {}
    for r in range(t.n_events):
        plane = t.planes[t.track_plane[t.events["track"][r]]].name
        if plane != "/host:CPU":
            on.setdefault(plane, []).append(t.strings[t.events["name"][r]])
    assert sorted(on["/device:GPU:0"]) == ["aten::conv2d", "aten::convolution", "aten::cudnn_convolution",
                                            "aten::relu"]
    assert sorted(on["/device:GPU:1"]) == ["MmBackward", "aten::mm", "aten::mm"]
    assert len(t.flows["src"]) == 7  # every op -> its interval, across the devices


def test_the_intervals_holding_others_are_op_spans_and_the_rest_the_devices_work(tmp_path):
    t = polyprof.load(_legacy_trace(tmp_path))
    dev = {(t.planes[t.track_plane[t.events["track"][r]]].name, t.strings[t.events["name"][r]],
            int(t.events["start_ns"][r])): t.strings[t.events["category"][r]]
           for r in range(t.n_events) if t.planes[t.track_plane[t.events["track"][r]]].kind == "device"}
    assert dev == {
        ("/device:GPU:0", "aten::conv2d", 200_000): "gpu_user_annotation",
        ("/device:GPU:0", "aten::convolution", 203_000): "gpu_user_annotation",
        ("/device:GPU:0", "aten::cudnn_convolution", 206_000): "kernel",
        ("/device:GPU:0", "aten::relu", 300_500): "kernel",
        ("/device:GPU:1", "aten::mm", 400_000): "kernel",
        ("/device:GPU:1", "MmBackward", 455_000): "gpu_user_annotation",
        ("/device:GPU:1", "aten::mm", 460_000): "kernel"}
    tb = {r["plane"]: r for r in temporal_breakdown(t).to_dicts() if r["stream"] == "(all streams)"}
    # each device's work once: 89 + 20 µs on GPU 0 (not 100 + 95 + 89 + 20), 50 + 55 on GPU 1
    assert tb["/device:GPU:0"]["compute_ns"] == 109_000
    assert tb["/device:GPU:1"]["compute_ns"] == 105_000


def test_an_ops_cuda_time_is_its_own_device_time(tmp_path):
    t = polyprof.load(_legacy_trace(tmp_path))
    corr = cache.correlation(t)
    assert corr.counts["device_activities"] == 4 and corr.counts["device_activities_with_framework_op"] == 4
    got = {r["name"]: (r["count"], r["self_device_ns"], r["device_ns"]) for r in op_stats(t).to_dicts()}
    # own: the innermost op's interval, as torch's self CUDA time of a leaf; the ops around
    # it hold no device work of their own (torch: their interval less their children's, the
    # gaps); caused (device_ns): their own and that of the ops inside them
    assert got == {"aten::conv2d": (1, 0, 89_000), "aten::convolution": (1, 0, 89_000),
                   "aten::cudnn_convolution": (1, 89_000, 89_000), "aten::relu": (1, 20_000, 20_000),
                   "aten::mm": (2, 105_000, 105_000), "MmBackward": (1, 0, 55_000), "aten::size": (1, 0, 0)}


def test_the_summary_shows_the_ops_device_time(tmp_path, capsys):
    from polyprof.cli import main  # the command, as a user runs it

    assert main(["summary", str(_legacy_trace(tmp_path))]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line.split("│")[5].strip() for line in out.splitlines()
            if line.startswith("│") and line.count("│") == 7}  # the framework ops' (name ... device caused)
    assert (rows["aten::relu"], rows["aten::mm"], rows["MmBackward"]) == ("20 µs", "105 µs", "55 µs"), out


def test_a_legacy_trace_with_cuda_work_is_read_whole_not_in_chunks(tmp_path):
    with pytest.raises(Unsupported):
        read_chunks(_legacy_trace(tmp_path), lambda c: None, chunk_events=3)


def _tf_timeline(tmp_path: Path) -> Path:
    """A TF 1.x timeline of a CPU run and a GPU stream, in the real files' layout."""
    names = {1: "/job:localhost/replica:0/task:0/device:CPU:0 Compute",
             2: "/job:localhost/replica:0/task:0/gpu:0 Compute",  # before TF 1.5
             3: "/device:GPU:0/stream:13 Compute", 4: "Allocators"}
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}} for p, n in names.items()]

    def op(pid: int, kind: str, node: str, ts: int, dur: int) -> dict:
        return {"ph": "X", "cat": "Op", "name": kind, "pid": pid, "tid": 0, "ts": ts, "dur": dur,
                "args": {"name": node, "op": kind}}

    ev += [op(1, "NoOp", "_SOURCE", 1000, 9), op(1, "Const", "random_normal/shape", 1010, 4),
           op(1, "MatMul", "MatMul", 1020, 205), op(2, "MatMul", "dense/MatMul", 1300, 12),
           op(2, "Const", "dense/bias", 1320, 3), op(3, "MatMul", "dense/MatMul", 1310, 40),
           {"ph": "s", "cat": "DataFlow", "name": "MatMul", "pid": 1, "tid": 0, "ts": 1020, "id": 1},
           {"ph": "t", "cat": "DataFlow", "name": "MatMul", "pid": 2, "tid": 0, "ts": 1300, "id": 1}]
    p = tmp_path / "timeline.ctf.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_tf1_executor_ops_are_framework_ops(tmp_path):
    t = polyprof.load(_tf_timeline(tmp_path))
    got = {(r["name"], r["count"], r["total_ns"]) for r in op_stats(t).to_dicts()}
    assert got == {("NoOp", 1, 9_000), ("Const", 2, 7_000), ("MatMul", 2, 217_000)}
    cats = sorted(zip(t.names().tolist(), t.categories().tolist()))
    assert cats == [("Const", "cpu_op"), ("Const", "cpu_op"), ("MatMul", "cpu_op"), ("MatMul", "cpu_op"),
                    ("MatMul", "kernel"), ("NoOp", "cpu_op")]


def test_tf1_executor_ops_in_the_summary_and_in_chunks(tmp_path, capsys):
    path = _tf_timeline(tmp_path)
    from polyprof.cli import main  # the command, as a user runs it

    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "framework ops" in out and "MatMul" in out
    with pytest.raises(Unsupported, match="TensorFlow"):  # its kernel linked to its op: read whole
        read_chunks(path, lambda c: None, chunk_events=2)
    ev = json.loads(path.read_text())["traceEvents"]  # without the GPU stream: read in chunks
    path.write_text(json.dumps({"traceEvents": [e for e in ev if e["pid"] != 3]}))
    whole = polyprof.load(path)
    seen: list = []
    rest = read_chunks(path, lambda c: seen.append((c.events["category"], c.input_row)), chunk_events=2)
    cats = {int(r): rest.trace.strings[int(c)] for cs, rows in seen for c, r in zip(cs.tolist(), rows.tolist())}
    assert [cats[r] for r in range(whole.n_events)] == whole.categories().tolist()


def test_legacy_cuda_functions_with_counters_and_async_events_load(tmp_path):
    """A counter or an async pair on the legacy export's ``CUDA functions`` process (not
    what torch writes, but what an edited or merged file may hold) goes on device 0's
    plane; before, the file failed to load ("track 'a' has a bad id or plane")."""
    import json

    import polyprof

    ev = [{"ph": "X", "name": "aten::mm", "pid": "CPU functions", "tid": 1, "ts": 0, "dur": 10},
          {"ph": "X", "name": "aten::mm", "pid": "CUDA functions", "tid": 1, "ts": 2, "dur": 5},
          {"ph": "C", "name": "mem", "pid": "CUDA functions", "tid": 0, "ts": 3, "args": {"v": 1}},
          {"ph": "b", "cat": "x", "id": 1, "name": "a", "pid": "CUDA functions", "tid": 0, "ts": 3},
          {"ph": "e", "cat": "x", "id": 1, "name": "a", "pid": "CUDA functions", "tid": 0, "ts": 4}]
    path = tmp_path / "leg.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    t = polyprof.load(path)
    planes = {p.name for p in t.planes}
    assert {"/device:GPU:0", "/device:GPU:1"} <= planes  # the async events' and counter's; the kernel's
    assert t.n_events == 3 and len(t.counters["ts_ns"]) == 1
