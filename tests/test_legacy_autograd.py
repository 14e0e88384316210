"""torch's legacy autograd profiler (torch 1.x ``export_chrome_trace`` without Kineto): its
ops, written with no category in a process named ``CPU functions``, are framework ops, and
the CUDA work they ran, in one named ``CUDA functions``, is an NVIDIA device's (a real
VoteNet trace in tests/data/peers/legacy_autograd/, and a file as torch 1.x wrote them)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown
from polyprof.analyze.ops import op_stats
from polyprof.formats.kineto.chunks import read_chunks

VOTENET = Path(__file__).parent / "data" / "peers" / "legacy_autograd" / "votenet_profiler_trace.json.gz"


def _per_name(events: list[dict]) -> tuple[Counter, Counter]:
    count: Counter = Counter()
    total: Counter = Counter()
    for e in events:
        count[e["name"]] += 1
        total[e["name"]] += int(Decimal(str(e["dur"])) * 1000)
    return count, total


def test_votenet_ops_are_framework_ops_with_the_files_counts_and_totals():
    with gzip.open(VOTENET, "rt") as f:
        raw = json.load(f)
    assert {(e["pid"], e.get("cat")) for e in raw} == {("CPU functions", None)}
    count, total = _per_name(raw)
    t = polyprof.load(VOTENET)
    assert [(p.name, p.kind) for p in t.planes] == [("/host:CPU", "host")]
    assert set(t.categories().tolist()) == {"cpu_op"}
    ops = op_stats(t)  # no steps: the whole trace
    got = dict(zip(ops["name"].tolist(), zip(ops["count"].tolist(), ops["total_ns"].tolist())))
    assert len(got) == len(count) == 53
    for name, n in count.items():  # within 1 ns a call: the file's µs with three decimals
        assert got[name][0] == n and abs(got[name][1] - total[name]) <= n, name
    assert got["aten::cudnn_convolution"][0] == 25 and got["Shared MLP"][0] == 5


def test_votenet_in_chunks_has_the_same_categories():
    seen: list[np.ndarray] = []
    rest = read_chunks(VOTENET, lambda c: seen.append(c.events["category"]), chunk_events=300)
    cats = np.concatenate(seen)
    assert len(cats) == 1442 and {rest.trace.strings[i] for i in np.unique(cats).tolist()} == {"cpu_op"}


def _legacy_gpu(tmp_path: Path, cuda_pid: str = "CUDA functions") -> Path:
    """Two ops and the CUDA work of one, as torch 1.x's legacy export wrote them: X events
    without a category, a ``cpu_to_cuda`` flow from the op to its work (tid: the device)."""
    ev = [
        {"name": "aten::mm", "ph": "X", "ts": 100.0, "dur": 50.0, "tid": 1, "pid": "CPU functions", "args": {}},
        {"name": "aten::mm", "ph": "s", "ts": 100.0, "tid": 1, "pid": "CPU functions", "id": 0,
         "cat": "cpu_to_cuda", "args": {}},
        {"name": "volta_sgemm_128x64_nn", "ph": "f", "ts": 160.0, "tid": 0, "pid": cuda_pid, "id": 0,
         "cat": "cpu_to_cuda", "args": {}},
        {"name": "volta_sgemm_128x64_nn", "ph": "X", "ts": 160.0, "dur": 30.0, "tid": 0, "pid": cuda_pid,
         "args": {}},
        {"name": "aten::relu", "ph": "X", "ts": 155.0, "dur": 10.0, "tid": 1, "pid": "CPU functions", "args": {}},
    ]
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps(ev))
    return p


def test_legacy_cuda_functions_are_a_device_and_its_kernels(tmp_path):
    for i, spelling in enumerate(("CUDA functions", "CUDA Functions")):
        (tmp_path / str(i)).mkdir()
        t = polyprof.load(_legacy_gpu(tmp_path / str(i), spelling))
        planes = {p.name: (p.kind, p.vendor) for p in t.planes}
        assert planes == {"/host:CPU": ("host", ""), "/device:GPU:0": ("device", "NVIDIA")}
        cat = dict(zip(t.names().tolist(), t.categories().tolist()))
        assert cat == {"aten::mm": "cpu_op", "aten::relu": "cpu_op", "volta_sgemm_128x64_nn": "kernel"}
        assert [t.strings[t.events["name"][r]] for r in (t.flows["src"][0], t.flows["dst"][0])] == [
            "aten::mm", "volta_sgemm_128x64_nn"]
        tb = temporal_breakdown(t)
        row = [r for r in tb.to_dicts() if r["stream"] == "(all streams)"][0]
        assert (row["plane"], row["compute_ns"], row["span_ns"]) == ("/device:GPU:0", 30_000, 90_000)


def test_a_pid_named_otherwise_is_left_as_it_was(tmp_path):
    ev = [{"name": "work", "ph": "X", "ts": 1, "dur": 2, "pid": "CPU functions here", "tid": 1},
          {"name": "k", "ph": "X", "ts": 1, "dur": 2, "pid": "GPU functions", "tid": 0}]
    p = tmp_path / "other.json"
    p.write_text(json.dumps(ev))
    t = polyprof.load(p)
    assert [p.kind for p in t.planes] == ["host"] and set(t.categories().tolist()) == {""}
