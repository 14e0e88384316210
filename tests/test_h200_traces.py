"""Traces recorded on a real NVIDIA H200 (tests/data/h200/README.md): what polyprof reads
from them is checked against the raw files, read independently here (the protobuf and
the JSON themselves), not against polyprof's own earlier output."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.cuda_graphs import cuda_graphs
from polyprof.derive import cache
from polyprof.formats import xplane_pb2
from polyprof.trace.categories import Kind
from polyprof.trace.metadata_keys import clock_fits

DATA = Path(__file__).parent / "data" / "h200"


def device_kernels(trace: polyprof.Trace) -> np.ndarray:
    rows = trace.rows_of_kind(Kind.KERNEL)
    dev = np.array([p.kind == "device" for p in trace.planes], bool)
    return rows[dev[trace.track_plane[trace.events["track"][rows]]]]


def test_jax_command_buffer_xspace_reads_every_kernel_and_replay() -> None:
    path = DATA / "jax_train_step_h200.xplane.pb"
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    stat = {k: m.name for k, m in gpu.stat_metadata.items()}
    names: Counter[str] = Counter()
    ps = 0
    graphs: Counter[tuple[int, int]] = Counter()
    for line in gpu.lines:
        for e in line.events:
            names[gpu.event_metadata[e.metadata_id].name] += 1
            ps += e.duration_ps
            st = {stat[s.metadata_id]: s for s in e.stats}
            graphs[(st["cuda_graph_id"].int64_value or st["cuda_graph_id"].uint64_value,
                    st["correlation_id"].int64_value or st["correlation_id"].uint64_value)] += 1
    assert sum(names.values()) == 48 and len(graphs) == 6  # 6 launches of one command buffer

    trace = polyprof.load(path)
    rows = device_kernels(trace)
    assert len(rows) == 48
    assert int(trace.events["dur_ns"][rows].sum()) == ps // 1000
    assert Counter(trace.strings[i] for i in trace.events["name"][rows]) == names
    # every kernel is matched to its launch by correlation id: device work is not "none"
    corr = cache.correlation(trace)
    assert np.isin(rows, corr.device_rows).all()
    g = cuda_graphs(trace)
    assert list(column(g, "replays")) == [6]
    assert list(column(g, "kernels_per_replay")) == [8]
    assert abs(int(column(g, "device_ns")[0]) * 6 - ps // 1000) < 6  # device time per replay


def test_torch_cuda_graph_replays_from_kineto() -> None:
    path = DATA / "torch_cuda_graph_h200.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    replayed = [e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in launches]
    assert len(launches) == 5 and len(replayed) == 25
    trace = polyprof.load(path)
    g = cuda_graphs(trace)
    assert list(column(g, "replays")) == [5]
    assert list(column(g, "kernels_per_replay")) == [5]
    # device time per replay; Kineto writes µs with 3 decimals
    want = sum(round(e["dur"] * 1000) for e in replayed) / 5
    assert abs(int(column(g, "device_ns")[0]) - want) <= len(replayed)


def test_cupy_recorded_by_the_cupti_plugin() -> None:
    trace = polyprof.load(DATA / "cupy_cupti_h200.polyprof")
    md = trace.metadata["cupti"]
    assert md["implementation"] == "c" and md["buffers"]["dropped"] == 0 and md["problems"] == []
    rows = device_kernels(trace)
    assert len(rows) == md["kernels"] == 35
    names = Counter(trace.strings[i] for i in trace.events["name"][rows])
    assert names["cupy_tanh__float32_float32"] == 10 and names["cupy_multiply__float32_float_float32"] == 10
    # each kernel linked to the runtime call that launched it
    assert np.isin(rows, cache.correlation(trace).device_rows).all()
    fits = [f for _plane, plugin, f in clock_fits(trace.metadata) if plugin == "cupti"]
    assert len(fits) == 1 and fits[0]["consistent"] and 0 < fits[0]["bound_ns"] < 1_000
