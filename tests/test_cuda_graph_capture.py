"""CUDA graphs captured inside the trace itself (``cuda_graphs.self_captured``), on small
Kineto traces built here: each graph's replays map to its own capture and count its FLOPs.
Written from a review's repros (the real H200 recordings: tests/test_h200_compile.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polyprof
from polyprof.analyze.cuda_graphs import cuda_graphs
from polyprof.analyze.efficiency import mfu
from polyprof.analyze.kernel_roofline import kernel_efficiency
from polyprof.analyze.frames import column

K, N = 1024, 4096


class _Kineto:
    """A small Kineto trace: stream captures of one aten::mm each and graph replays."""

    def __init__(self) -> None:
        self.ev: list[dict] = []
        self.t, self.g, self.corr = 1000.0, 1000.0, 1

    def _x(self, cat: str, name: str, ts: float, dur: float, tid: int = 1, pid: int = 1, **args: object) -> None:
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                        "args": args})

    def _c(self) -> int:
        self.corr += 1
        return self.corr

    def capture(self, m: int, host_node: bool = False) -> None:
        t = self.t
        self._x("cuda_runtime", "cudaStreamBeginCapture", t, 2, correlation=self._c())
        self._x("cpu_op", "aten::mm", t + 5, 25, **{"Input Dims": [[m, K], [K, N]],
                                                    "Input type": ["c10::BFloat16", "c10::BFloat16"]})
        self._x("cuda_runtime", "cudaLaunchKernel", t + 8, 2, correlation=self._c())  # no kernel: captured
        if host_node:  # a host function node: nothing of it runs on the device at a replay
            self._x("cuda_runtime", "cudaLaunchHostFunc", t + 35, 2, correlation=self._c())
        self._x("cuda_runtime", "cudaStreamEndCapture", t + 45, 2, correlation=self._c())
        self.t = t + 65

    def replay(self, kernel: str, grid: list[int] | None = None) -> None:
        c = self._c()
        self._x("cuda_runtime", "cudaGraphLaunch", self.t, 5, correlation=c)
        g = max(self.g, self.t + 6)
        shape = {"grid": grid, "block": [128, 1, 1]} if grid else {}
        self._x("kernel", kernel, g, 10, tid=7, pid=0, correlation=c, device=0, stream=7, **shape)
        self.g, self.t = g + 11, self.t + 20

    def write(self, path: Path) -> Path:
        with gzip.open(path, "wt") as f:
            json.dump({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
                       "traceEvents": self.ev}, f)
        return path


def test_two_graphs_captured_with_as_many_launches_count_their_own_flops(tmp_path: Path) -> None:
    """torch.compile(reduce-overhead) with a new shape records a new graph of the same
    kernels: each graph's replays count its own capture's FLOPs (before, both took the
    first capture's, M=16: MFU 0.3% where it is 11.6%)."""
    t = _Kineto()
    t.capture(16)
    t.capture(1024)
    for _ in range(2):
        t.replay("gemm_small")
    for _ in range(3):
        t.replay("gemm_big")
    trace = polyprof.load(t.write(tmp_path / "t.json.gz"))
    want = 2 * (2 * 16 * K * N) + 3 * (2 * 1024 * K * N)
    assert column(mfu(trace), "flops")[0] == want
    ke = kernel_efficiency(trace)
    big = list(column(ke, "name")).index("gemm_big")
    assert column(ke, "flops")[big] == 3 * 2 * 1024 * K * N


def test_a_graph_not_captured_in_the_trace_borrows_no_flops(tmp_path: Path) -> None:
    """A graph captured before the profile (its replays' kernels differ) must not take
    the FLOPs of another graph captured in the trace with as many launches (before: 2.5x)."""
    t = _Kineto()
    t.capture(16)
    for _ in range(2):
        t.replay("gemm_small")
    for _ in range(3):
        t.replay("other_kernel")
    trace = polyprof.load(t.write(tmp_path / "t.json.gz"))
    assert column(mfu(trace), "flops")[0] == 2 * (2 * 16 * K * N)
    g = cuda_graphs(trace)
    other = list(column(g, "first_kernel")).index("other_kernel")
    assert column(g, "captured_ops")[other] == 0


def test_captures_on_two_threads_at_once_map_their_replays(tmp_path: Path) -> None:
    """Two captures that overlap in time on two threads each map their replays (ordered
    by time across threads, their launches split into runs of one: nothing mapped)."""
    ev: list[dict] = []

    def x(cat: str, name: str, ts: float, dur: float, tid: int, **a: object) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0 if cat == "kernel" else 1, "tid": tid,
                   "ts": ts, "dur": dur, "args": a})

    for tid, off, m in ((1, 0, 64), (2, 1, 128)):
        x("cuda_runtime", "cudaStreamBeginCapture", 10 + off, 0.5, tid, correlation=100 + tid)
        for j, at in enumerate((11, 15)):
            x("cpu_op", "aten::mm", at + off, 3, tid, **{"Input Dims": [[m, 64], [64, 64]]})
            x("cuda_runtime", "cudaLaunchKernel", at + 1 + off, 0.2, tid, correlation=110 + 10 * j + tid)
        x("cuda_runtime", "cudaStreamEndCapture", 20 + off, 0.5, tid, correlation=130 + tid)
    for i in range(3):
        x("cuda_runtime", "cudaGraphLaunch", 40 + 10 * i, 1, 1, correlation=200 + i)
        for j, k in enumerate(("ka", "kb")):
            x("kernel", k, 42 + 2 * j + 10 * i, 1, 7, correlation=200 + i, device=0, stream=7)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    trace = polyprof.load(p)
    assert list(column(cuda_graphs(trace), "captured_ops")) == [2]
    assert column(mfu(trace), "flops")[0] == 3 * 2 * (2 * 64 * 64 * 64)


def test_a_host_function_node_does_not_stop_the_mapping(tmp_path: Path) -> None:
    """``cudaLaunchHostFunc`` in a capture is a host node: the replays run one kernel, and
    the capture's one kernel launch maps to it."""
    t = _Kineto()
    t.capture(64, host_node=True)
    for _ in range(2):
        t.replay("gemm")
    trace = polyprof.load(t.write(tmp_path / "t.json.gz"))
    assert list(column(cuda_graphs(trace), "captured_ops")) == [1]
    assert column(mfu(trace), "flops")[0] == 2 * (2 * 64 * K * N)


def test_graphs_of_the_same_kernels_on_other_grids_are_other_graphs(tmp_path: Path) -> None:
    """A graph recorded again for a new input shape runs the same kernel names (Inductor's
    triton_mm_0) on another grid: two graphs, each with its own capture's FLOPs (as one
    graph, both took the first capture's: 0.67 GFLOP where 26.0)."""
    t = _Kineto()
    t.capture(16)
    t.capture(1024)
    for _ in range(2):
        t.replay("triton_mm_0", [1, 32, 1])
    for _ in range(3):
        t.replay("triton_mm_0", [8, 32, 1])
    trace = polyprof.load(t.write(tmp_path / "t.json.gz"))
    assert sorted(column(cuda_graphs(trace), "replays").tolist()) == [2, 3]
    assert column(mfu(trace), "flops")[0] == 2 * (2 * 16 * K * N) + 3 * (2 * 1024 * K * N)
