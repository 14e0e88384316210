"""Traces written by other profilers on small real programs (tests/data/peers/<producer>/,
each folder's program and the command that made the file in tests/data/peers/README.md):
VizTracer, py-spy, ONNX Runtime, TensorFlow's profiler on the CPU, Perfetto's
TraceProtoBuilder and Chromium. polyprof's numbers are checked against the producer's own
data, read here straight from the file."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import polyprof

PEERS = Path(__file__).parent / "data" / "peers"


def _json(path: Path) -> object:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _by_name(trace: polyprof.Trace, where: object = None) -> dict[str, tuple[int, int]]:
    df = trace.to_pandas()
    if where is not None:
        df = df[where(df)]
    g = df.groupby("name")["dur_ns"].agg(["count", "sum"])
    return {n: (int(r["count"]), int(r["sum"])) for n, r in g.iterrows()}


def _counter(trace: polyprof.Trace, name: str) -> np.ndarray:
    """The values of one counter, in time order."""
    c = trace.counters
    m = c["name"] == trace.strings.index(name)
    return np.asarray(c["value"])[m][np.argsort(np.asarray(c["ts_ns"])[m], kind="stable")]


def _x_totals(events: list[dict]) -> dict[str, tuple[int, int]]:
    """Count and summed duration (ns, from the file's µs) of each name's X events."""
    agg: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in events:
        if e.get("ph") == "X":
            a = agg[e["name"]]
            a[0] += 1
            a[1] += round(e["dur"] * 1000)
    return {k: (c, t) for k, (c, t) in agg.items()}


def test_viztracer_threads_async_gc_as_the_file_has_them():
    path = PEERS / "viztracer" / "viztracer_threads_async.json.gz"
    doc = _json(path)
    events = doc["traceEvents"]
    t = polyprof.load(path)
    want = _x_totals(events)
    got = _by_name(t)
    assert len(got) == len(want) == 245
    for name, (n, total) in want.items():  # µs with 3 decimals: each event within 1 ns
        assert got[name][0] == n and abs(got[name][1] - total) <= n, name
    assert got["leaf (/tmp/s21/h1/viz/small.py:6)"][0] == 23
    # one track per thread and per asyncio task, named as VizTracer's thread_name events
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"}
    assert len(threads) == 11  # MainThread, worker-0..2, Task-1..7
    df = t.to_pandas()
    assert sorted(set(df["track"])) == sorted({names[k] for k in threads})
    # --log_gc: "garbage collection" counter events, one sample each per arg
    gcs = [e for e in events if e.get("ph") == "C"]
    assert _counter(t, "garbage collection.collected").tolist() == [e["args"]["collected"] for e in gcs]
    assert not [w for w in t.metadata.get("warnings", []) if "viztracer" in w]


def test_viztracer_buffer_overflow_is_said():
    path = PEERS / "viztracer" / "viztracer_overflow.json.gz"
    doc = _json(path)
    assert doc["viztracer_metadata"]["overflow"] is True  # --tracer_entries 100: the ring buffer wrapped
    t = polyprof.load(path)
    assert t.n_events == 100
    warned = [w for w in t.metadata["warnings"] if "viztracer" in w]
    assert len(warned) == 1 and "overflowed" in warned[0] and "--tracer_entries" in warned[0]


def test_py_spy_chrometrace_pairs_as_its_stacks():
    path = PEERS / "py_spy" / "py_spy_chrometrace.json"
    events = _json(path)
    assert isinstance(events, list)
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in events:  # py-spy writes each sample run as B/E pairs, nested per thread
        key = (e["pid"], e["tid"])
        if e["ph"] == "B":
            stacks[key].append(e)
        else:
            b = stacks[key].pop()
            assert b["name"] == e["name"]
            want[b["name"]][0] += 1
            want[b["name"]][1] += (e["ts"] - b["ts"]) * 1000
    t = polyprof.load(path)
    assert _by_name(t) == {k: tuple(v) for k, v in want.items()}
    assert _by_name(t)["hot"] == (4, 700_324_000)
    assert len(set(t.to_pandas()["track"])) == len(stacks) == 2
    assert not t.metadata.get("warnings")


def test_onnxruntime_profile_node_times_as_onnxruntime_wrote_them():
    path = PEERS / "onnxruntime" / "ort_mlp_profile.json"
    events = _json(path)
    t = polyprof.load(path)
    want = _x_totals(events)
    assert _by_name(t) == want
    df = t.to_pandas()
    nodes = df[df["category"] == "cpu_op"]  # the nodes' runs: framework ops (formats/kineto/onnxruntime.py)
    assert sorted(set(nodes["name"])) == sorted(f"{n}_kernel_time" for n in ("fc1", "bias1", "relu1", "fc2", "softmax"))
    assert len(nodes) == 5 * 20  # five nodes, twenty runs
    assert want["model_run"][0] == 20 == int((df["name"] == "model_run").sum())
    assert set(df["category"][df["name"] == "model_run"]) == {"step"}


def test_tensorflow_cpu_xspace_steps_and_ops():
    from polyprof.formats import xplane_pb2

    path = PEERS / "tensorflow_cpu" / "keras_mlp_cpu.xplane.pb"
    xs = xplane_pb2.XSpace()
    xs.ParseFromString(path.read_bytes())
    host = next(p for p in xs.planes if p.name == "/host:CPU")
    raw: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in host.lines:
        for e in line.events:
            a = raw[host.event_metadata[e.metadata_id].name]
            a[0] += 1
            a[1] += e.duration_ps // 1000
    t = polyprof.load(path)
    assert t.n_events == sum(c for c, _ in raw.values()) == 1020
    got = _by_name(t)
    for name in ("train", "step", "ExecutorState::Process", "TFE_Py_ExecuteCancelable"):
        assert got[name] == tuple(raw[name]), name
    # TF's op events are "<op name>:<op type>": polyprof names them by type, as XProf's op stats
    fused = [n for n in raw if n.endswith(":_MklNativeFusedMatMul")]
    assert got["_MklNativeFusedMatMul"] == (sum(raw[n][0] for n in fused), sum(raw[n][1] for n in fused))
    # the ten Trace("train", step_num=i) annotations are the steps, each as long as its annotation
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", "--all-steps", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    steps = json.loads(out.stdout)["tables"]["step_stats"]["records"]
    train = sorted((e.offset_ps, e.duration_ps) for line in host.lines for e in line.events
                   if host.event_metadata[e.metadata_id].name == "train")
    assert [s["host_ns"] for s in steps] == [d // 1000 for _, d in train]


def _pf_expect(name: str) -> dict:
    return json.loads((PEERS / "perfetto_trace_builder" / f"{name}.expect.json").read_text())


def test_perfetto_trace_builder_producer_consumer():
    t = polyprof.load(PEERS / "perfetto_trace_builder" / "producer_consumer.pftrace")
    df = t.to_pandas()
    got = {f"{r.track}/{r.name}": r for r in df.groupby(["track", "name"])["dur_ns"].agg(["count", "sum"])
           .reset_index().itertuples()}
    want = _pf_expect("producer_consumer")
    assert sorted(want) == sorted(k for k in got if not k.endswith("/done"))
    for k, (n, total) in want.items():
        assert (got[k].count, got[k].sum) == (n, total), k
    assert len(df) == sum(n for n, _ in want.values()) + 1  # and the instant "done"
    src, dst = t.flows["src"], t.flows["dst"]
    assert len(src) == 20
    assert {(df["name"].iloc[s], df["name"].iloc[d]) for s, d in zip(src, dst)} == {("enqueue", "consume")}
    assert sorted(np.asarray(t.flows["id"]).tolist()) == list(range(1000, 1020))
    assert not t.metadata.get("warnings")


def test_perfetto_trace_builder_clock_and_counters():
    t = polyprof.load(PEERS / "perfetto_trace_builder" / "clock_counters.pftrace")
    df = t.to_pandas()
    want = _pf_expect("clock_counters")
    tracks = {"11": ("alpha", "worker"), "12": ("beta", "worker"), "13": ("alpha", "io lane")}
    for k, (n, total) in want["slices"].items():
        uuid, name = k.split("/")
        plane, track = tracks[uuid]
        rows = df[(df["name"] == name) & (df["track"] == track) & (df["plane"] == plane)]
        assert (len(rows), int(rows["dur_ns"].sum())) == (n, total), k  # µs on a sequence-scoped clock
    assert _counter(t, "ops done").tolist() == np.cumsum(want["counters"]["ops done"]).tolist()  # incremental
    assert _counter(t, "load").tolist() == want["counters"]["load"]  # doubles


def test_chromium_startup_slices_never_ended_are_said():
    path = PEERS / "chromium" / "chromium_startup_toplevel.json.gz"
    events = _json(path)["traceEvents"]
    begins = [e for e in events if e["ph"] == "B"]
    assert len(begins) == 17 and not [e for e in events if e["ph"] == "E"]  # tasks running when tracing stopped
    t = polyprof.load(path)
    df = t.to_pandas()
    closed = df[df["incomplete"].isna()] if "incomplete" in df else df
    got = _by_name(t, lambda d: d["incomplete"].isna())
    for name, (n, total) in _x_totals(events).items():
        zero = int(((closed["name"] == name) & (closed["dur_ns"] == 0)).sum())  # instants ("I") of that name
        assert got[name][0] - zero == n and got[name][1] == total, name
    assert int((df["incomplete"] == 1).sum()) == 17
    warned = [w for w in t.metadata["warnings"] if "never ended" in w]
    assert len(warned) == 1 and warned[0].startswith("kineto: 17 slices never ended")


def test_async_slice_never_ended_is_said(tmp_path):
    path = tmp_path / "async.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "b", "cat": "c", "id": 1, "name": "load", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "e", "cat": "c", "id": 1, "name": "load", "pid": 1, "tid": 1, "ts": 20},
        {"ph": "b", "cat": "c", "id": 2, "name": "open", "pid": 1, "tid": 1, "ts": 30},
        {"ph": "X", "name": "work", "pid": 1, "tid": 1, "ts": 5, "dur": 45}]}))
    t = polyprof.load(path)
    assert _by_name(t)["open"] == (1, 20_000)  # ends with the trace, at 50 µs
    assert [w for w in t.metadata["warnings"] if "never ended" in w] == [
        "kineto: 1 slices never ended (B or b events without their E or e): they end at the trace's last "
        "timestamp (stat 'incomplete')"]


def test_viztracer_sources_are_not_copied_into_the_metadata():
    """VizTracer keeps the source text of every traced file in ``file_info``: no analysis
    reads it, and it made a small trace's metadata (and a store's rank.json) megabytes."""
    trace = polyprof.load(PEERS / "viztracer" / "viztracer_threads_async.json.gz")
    assert "file_info" not in trace.metadata


def test_a_speedscope_profile_is_refused_by_its_name(tmp_path):
    """py-spy's ``--format speedscope``: one line naming the file, saying what it is and
    what to write instead."""
    f = tmp_path / "prof.json"
    f.write_text(json.dumps({"$schema": "https://www.speedscope.app/file-format-schema.json",
                             "profiles": [], "shared": {"frames": []}}))
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(f)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    line, = out.stderr.strip().splitlines()
    assert str(f) in line and "speedscope profile" in line and "--format chrometrace" in line


def _rocprof_v1(tmp_path: Path, gpus: tuple[int, ...]) -> Path:
    """A trace laid out as rocprof (v1)'s ``results.json`` (ROCm/rocm-blogs' roc-profiling
    HIP_trace, which has no licence: rebuilt here): HIP calls in "CPU HIP API", every
    copy in one process "COPY", kernels in "GPU<n>"; ts, dur, pid and tid as strings; a
    DataFlow flow from each call to its copy or kernel."""
    ev: list[dict] = [{}, {"args": {"name": "CPU HIP API"}, "ph": "M", "pid": 2, "name": "process_name"},
                      {"args": {"name": "COPY"}, "ph": "M", "pid": 1, "name": "process_name"}]
    ev += [{"args": {"name": f"GPU{g}"}, "ph": "M", "pid": 6 + g, "name": "process_name"} for g in range(3)]
    t, fid = 1000, 0
    for g in gpus:
        for name, pid, dur in (("CopyHostToDevice", "1", 8), ("elementwise_kernel", str(6 + g), 5),
                               ("CopyDeviceToHost", "1", 160)):
            api = "hipLaunchKernel" if name.startswith("elem") else "hipMemcpyWithStream"
            ev.append({"ph": "X", "name": api, "pid": "2", "tid": "517", "ts": str(t), "dur": "3",
                       "args": {"pid": "517"}})
            ev.append({"ts": t, "ph": "s", "cat": "DataFlow", "id": fid, "pid": 2, "tid": 517, "name": "dep"})
            ev.append({"ph": "X", "name": name, "pid": pid, "tid": "1", "ts": str(t + 10), "dur": str(dur),
                       "args": {"dev-id": str(g), "stream-id": "1"}})
            ev.append({"ts": t + 10, "ph": "t", "cat": "DataFlow", "id": fid, "pid": int(pid), "tid": 1,
                       "name": "dep"})
            t, fid = t + 500, fid + 1
    f = tmp_path / f"results_{len(gpus)}.json"
    f.write_text(json.dumps({"traceEvents": ev}))
    return f


def test_rocprof_v1_copies_are_the_devices(tmp_path: Path) -> None:
    """rocprof (v1) writes its copies in a process "COPY", apart from the kernels'
    "GPU2": polyprof read the copies as a host process (``/host:CPU:1``), so the device
    tables left them out and 6 of the 7 HIP calls "launched nothing". With one device
    that has events, the copies are that device's (on its stream), each call matched by
    its flow; with copies of two devices in the one process, it stays a host plane."""
    t = polyprof.load(_rocprof_v1(tmp_path, (2,)))
    dev = {t.strings[t.events["name"][r]]: (t.planes[t.tracks[int(t.events["track"][r])].plane].name,
                                            t.strings[t.events["category"][r]])
           for r in range(t.n_events) if not t.strings[t.events["name"][r]].startswith("hip")}
    assert dev == {"CopyHostToDevice": ("/device:GPU:2", "gpu_memcpy"),
                   "CopyDeviceToHost": ("/device:GPU:2", "gpu_memcpy"),
                   "elementwise_kernel": ("/device:GPU:2", "kernel")}
    assert len({t.tracks[int(t.events["track"][r])].name for r in range(t.n_events)
                if t.planes[t.tracks[int(t.events["track"][r])].plane].kind == "device"}) == 1
    s = json.loads(subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(tmp_path /
                                   "results_1.json")], capture_output=True, text=True, check=True).stdout)
    c = s["overview"]["correlation"]
    assert (c["device_activities"], c["matched_by_flow"], c["launch_calls_without_device_activity"]) == (3, 3, 0)
    t2 = polyprof.load(_rocprof_v1(tmp_path, (0, 1)))  # two devices' copies in one process: not guessed
    assert {p.name for p in t2.planes} == {"/host:CPU", "/host:CPU:1", "/device:GPU:0", "/device:GPU:1"}
