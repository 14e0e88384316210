"""CUDA/HIP graph replays: the per-graph table against an independent recompute from the
raw JSON, and replayed kernels mapped to the ops captured into the graph.

Data: TraceLens' vLLM decode traces (tests/data/peers/tracelens, MIT): one HIP graph
replay (graph_execution) and the capture-time trace of the graphs (its Python stack
events left out to keep it small; otherwise unchanged). No GPU needed: these are traces.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.cuda_graphs import cuda_graphs, replayed_ops, replays
from polyprof.analyze.frames import column
from polyprof.analyze.registry import ANALYSES

PEERS = Path(__file__).parent / "data" / "peers" / "tracelens"
REPLAY = PEERS / "vllm_decode_full_graph_execution.json.gz"
CAPTURE = PEERS / "vllm_decode_full_graph_capture_bs32.json.gz"
V100 = Path(__file__).parent / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"


def _events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _recompute(path: Path) -> tuple[int, list[int], list[int]]:
    """From the JSON alone: graph launches, and per launch the device activities sharing
    its correlation id and their summed duration (ns)."""
    ev = _events(path)
    launches = [e for e in ev if e.get("ph") == "X" and "graphlaunch" in e.get("name", "").lower()
                and e.get("cat") == "cuda_runtime"]
    dev = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    counts, times = [], []
    for g in launches:
        mine = [e for e in dev if e["args"].get("correlation") == g["args"]["correlation"]]
        counts.append(len(mine))
        times.append(sum(round(e["dur"] * 1000) for e in mine))
    return len(launches), counts, times


@pytest.fixture(scope="module")
def replay():
    return polyprof.load(REPLAY)


@pytest.fixture(scope="module")
def capture():
    return polyprof.load(CAPTURE)


def test_registered():
    assert any(a.name == "cuda_graphs" for a in ANALYSES)


def test_replays_and_device_time_equal_a_recompute(replay):
    n, counts, times = _recompute(REPLAY)
    assert n == 1 and counts == [421]
    t = cuda_graphs(replay)
    assert len(t) == 1
    assert column(t, "replays").tolist() == [n]
    assert column(t, "kernels_per_replay").tolist() == counts
    assert abs(int(column(t, "device_ns")[0]) - times[0]) <= counts[0]  # µs with 3 decimals -> ns
    assert column(t, "first_kernel")[0] == "triton_poi_fused_0"
    assert column(t, "captured_ops").tolist() == [0]  # no capture trace given


def test_v100_has_no_graph_launch():
    """The V100 trace launches no graph (no *GraphLaunch call in its JSON): an empty table."""
    assert _recompute(V100)[0] == 0
    t = cuda_graphs(polyprof.load(V100))
    assert len(t) == 0 and {"graph", "replays", "device_ns", "kernels_per_replay", "captured_ops"} <= set(t.columns)


def test_kernels_mapped_to_captured_ops(replay, capture):
    t = cuda_graphs(replay, capture=capture)
    assert float(column(t, "attributed_pct")[0]) >= 95.0
    assert int(column(t, "captured_ops")[0]) > 100
    r = replays(replay)
    m = replayed_ops(replay, capture, r)
    assert (m.op >= 0).mean() >= 0.95
    # independently: the capture's launch calls that launched nothing, in time order, with
    # the kernel each names; the mapped launch names the replayed kernel wherever it names one
    ev = _events(CAPTURE)
    ran = {e["args"].get("correlation") for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    calls = sorted((e for e in ev if e.get("cat") == "cuda_runtime" and "launch" in e["name"].lower()
                    and e["args"].get("correlation") not in ran), key=lambda e: e["ts"])
    assert len(calls) == 421  # this capture trace holds one capture: as many nodes as the replay ran
    named = [c["args"].get("kernel") for c in calls]
    replayed = replay.names()[r.rows]
    agree = sum(1 for k, n in zip(named, replayed) if k is not None and k == n)
    assert agree == sum(1 for k in named if k is not None) > 200
    starts = np.sort(capture.events["start_ns"][m.launch[m.launch >= 0]])  # on the wall clock
    raw = np.sort(np.array([round(c["ts"] * 1000) for c in calls], np.int64))
    assert np.array_equal(starts - starts[0], raw - raw[0])
    # the ops: what vLLM's decoder runs, a layer's worth each
    top = Counter(m.op_name.tolist()).most_common(3)
    assert {"aten::addmm", "vllm::moe_forward"} <= {n for n, _ in top}


def test_graph_named_by_nsys_graph_id(tmp_path):
    """An Nsight Systems export (tests/test_nsys.py's, with a cudaGraphLaunch whose two
    kernels carry graphId 3 and graph node ids 5, 6): the graph is named by its id."""
    from test_nsys import build_newer_export

    trace = polyprof.load(build_newer_export(tmp_path / "newer.sqlite"))
    t = cuda_graphs(trace)
    assert column(t, "graph").tolist() == ["graph 3"]
    assert column(t, "replays").tolist() == [1] and column(t, "kernels_per_replay").tolist() == [2]
    assert column(t, "device_ns").tolist() == [(19000 - 9000) + (26000 - 20000)]
