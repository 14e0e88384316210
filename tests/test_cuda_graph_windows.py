"""The CUDA graph table counts the replays of the analysed steps, as the other tables
count calls (``analyze/cuda_graphs.py``), and names a JAX command buffer by XLA's own
``cuda_graph_id``.

Data: a trace generated here, and tests/data/h200/jax_train_step_h200.xplane.pb (ours,
tests/data/h200/README.md: 6 launches of command buffer 2, 8 kernels each).
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import polyprof
from polyprof.analyze.cuda_graphs import cuda_graphs, graph_labels
from polyprof.analyze.frames import column
from polyprof.cli import main

JAX = Path(__file__).parent / "data" / "h200" / "jax_train_step_h200.xplane.pb"


def _records(args: list[str]) -> dict[str, list[dict]]:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    with redirect_stdout(out):
        assert main(["summary", "--json", *args]) == 0
    out.flush()
    doc = json.loads(raw.getvalue())
    found: dict[str, list[dict]] = {}

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if isinstance(v, dict) and "records" in v:
                    found.setdefault(k, v["records"])
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return found


def _graph_steps(path: Path, steps: int = 30) -> Path:
    """``steps`` steps of 100 µs, each one graph launch of 5 kernels of 3 µs."""
    ev = [{"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
          {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    for s in range(steps):
        t = 1000.0 + 100.0 * s
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 100, "tid": 100,
                   "ts": t, "dur": 100.0, "args": {}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100,
                   "ts": t + 10, "dur": 5.0, "args": {"correlation": s + 1}})
        for j in range(5):
            ev.append({"ph": "X", "cat": "kernel", "name": f"k{j}", "pid": 0, "tid": 7, "ts": t + 20 + 4 * j,
                       "dur": 3.0, "args": {"correlation": s + 1, "stream": 7, "device": 0}})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def test_replays_of_the_analysed_steps_only(tmp_path):
    """``--steps 10:20``: 10 replays, as the kernel table counts 10 calls of each kernel;
    the default window (every step but the first): 29 of the 30."""
    path = str(_graph_steps(tmp_path / "g.json"))
    got = _records(["--steps", "10:20", path])
    assert {r["name"]: r["count"] for r in got["kernel_breakdown"]} == {f"k{j}": 10 for j in range(5)}
    assert [(r["graph"], r["replays"], r["device_ns"], r["kernels_per_replay"]) for r in got["cuda_graphs"]] \
        == [("graph 0", 10, 15000, 5)]
    assert [r["replays"] for r in _records([path])["cuda_graphs"]] == [29]
    assert column(cuda_graphs(polyprof.load(path)), "replays").tolist() == [30]  # a trace analysed whole


def test_jax_command_buffer_named_by_its_cuda_graph_id():
    """The XSpace's launches and kernels carry cuda_graph_id 2: the graph is "graph 2";
    the summary analyses 5 of the 6 steps, so 5 of the 6 replays."""
    t = cuda_graphs(polyprof.load(JAX))
    assert column(t, "graph").tolist() == ["graph 2"] and column(t, "replays").tolist() == [6]
    got = _records([str(JAX)])
    assert [(r["graph"], r["replays"], r["kernels_per_replay"]) for r in got["cuda_graphs"]] == [("graph 2", 5, 8)]
    assert got["step_stats"] and len(got["step_stats"]) == 5


def test_labels_number_kernel_sequences_past_the_ids():
    """Graphs named by their kernels are numbered in order of first launch, skipping a
    number an id already names."""
    keys: list[object] = [("a",), "graph 0", ("b",), ("a",), "graph 7"]
    assert graph_labels(keys) == ["graph 1", "graph 0", "graph 2", "graph 1", "graph 7"]
