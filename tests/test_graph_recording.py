"""Launch-like host calls made while their thread built a CUDA or HIP graph are counted
apart from the launch calls without device activity (``derive/graph_recording.py``):
their work runs under the graph launch's correlation id, and they are no lost launches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polyprof
from polyprof.derive import cache

DATA = Path(__file__).parent / "data"


def _counts(path: Path) -> dict[str, int]:
    return cache.correlation(polyprof.load(path)).counts


def test_xla_command_buffer_nodes_are_recorded_not_lost() -> None:
    """JAX on an H200: each step updates a command buffer node by node; its 18 Memset
    nodes a step (3,600) were 3,600 of 4,000 launch calls "without device activity"."""
    c = _counts(DATA / "h200" / "jax_transformer_h200.xplane.pb.gz")
    assert (c["launch_calls"], c["launch_calls_without_device_activity"], c["launch_calls_recorded_into_graphs"]) == (
        4000, 0, 3600)
    assert c["unmatched_device_activities"] == 0


def test_hip_stream_capture_launches_are_recorded_not_lost() -> None:
    """vLLM capturing its decode graph on an MI300 (TraceLens's trace): the 421 launches
    between hipStreamBeginCapture and hipStreamEndCapture ran no kernel of their own."""
    c = _counts(DATA / "peers" / "tracelens" / "vllm_decode_full_graph_capture_bs32.json.gz")
    assert (c["launch_calls"], c["launch_calls_without_device_activity"], c["launch_calls_recorded_into_graphs"]) == (
        431, 0, 421)


def _event(name: str, ts: float, tid: int, corr: int) -> dict[str, object]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 1.0,
            "args": {"correlation": corr}}


def test_only_the_capturing_thread_inside_its_capture_is_recorded(tmp_path: Path) -> None:
    """A launch after cudaStreamEndCapture, or on another thread during the capture, with
    no device activity is still counted as a launch without device activity."""
    events = [
        _event("cudaStreamBeginCapture", 10, 1, 1),
        _event("cudaLaunchKernel", 20, 1, 2),  # recorded
        _event("cudaLaunchKernel", 25, 2, 3),  # other thread: not recorded
        _event("cudaStreamEndCapture", 30, 1, 4),
        _event("cudaLaunchKernel", 40, 1, 5),  # after the capture: not recorded
        _event("cudaGraphLaunch", 50, 1, 6),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 55, "dur": 2.0,
         "args": {"correlation": 6, "device": 0, "stream": 7}},
    ]
    path = tmp_path / "capture.json"
    path.write_text(json.dumps({"traceEvents": events}))
    c = _counts(path)
    assert (c["launch_calls"], c["launch_calls_without_device_activity"], c["launch_calls_recorded_into_graphs"]) == (
        4, 2, 1)


def test_the_summary_says_so() -> None:
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary",
                        str(DATA / "peers" / "tracelens" / "vllm_decode_full_graph_capture_bs32.json.gz")],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert r.returncode == 0, r.stderr
    assert ("launch calls without device activity 0 of 431; 421 recorded into CUDA/HIP graphs (their work runs "
            "under the graphs' launches)") in " ".join(r.stdout.split())
