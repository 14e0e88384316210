"""A store's rank read window by window against the rank read whole, on six small layouts
of CUDA graph captures and replays (a review's adversarial set, S1-S6): ``mfu``,
``cuda_graphs``, ``kernel_efficiency`` and ``op_efficiency`` equal, value for value
(docs/store.md). Two were wrong before:

- S5, graph J captured in the warm-up step (step 0, which the default window leaves
  out) and replayed in every step: ``op_efficiency`` had no row read whole (no costed
  op in the analysed steps: the table was left empty before its replays were added)
  and 12 calls of ``aten::mm`` read in windows (the first window's lost), not 13;
- S3, J captured in step 3 and first replayed in step 10, the first window (steps
  0-5) without device activity: its captured ``aten::mm`` (which launched nothing)
  counted as model FLOPs there, read whole not: step 3 2.15 GFLOP, the rank 25.77
  GFLOP and MFU 14.79% against 0, 23.62 GFLOP and 13.56%.

A window without the rank's device activity, or one device's, is also told the planes
the rank has device activity on (``Plan.devices``): before, a host-only op there counted
as model FLOPs, and its steps' ``step_stats`` rows were a CPU trace's (plane ""; also on
the H200 train step in 8 windows), or had no row of the idle device.

The traces are generated here: steps of 200 µs on an H200, each capture a
``cudaStreamBeginCapture``, per captured launch a framework op around a
``cudaLaunchKernel`` that ran nothing, and ``cudaStreamEndCapture``; each replay a
``cudaGraphLaunch`` and its kernels. Windows of at most 12 events (``fits.window_events``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import cuda_graphs, efficiency, graph_costs
from polyprof.analyze import window as W
from polyprof.derive import cache
from polyprof.ranks import fits, stepwise
from polyprof.store.window import plan, read_window
from summary_json import summary_json

DATA = Path(__file__).parent / "data" / "h200"

TABLES = ("mfu", "cuda_graphs", "kernel_efficiency", "op_efficiency")
MM = {"Input Dims": [[256, 1024], [1024, 4096]], "Input type": ["float", "float"]}
ADDMM = {"Input Dims": [[4096], [256, 1024], [1024, 4096]], "Input type": ["float", "float", "float"]}
GEMM = 2 * 256 * 1024 * 4096  # FLOPs of either


def _build(path: Path, captures: dict, replays: dict, ids: bool = False, eager: dict | None = None,
           pre: tuple[str, ...] = (), steps: int = 14) -> Path:
    """``captures``: {step: [(graph, [(op, its args, kernel the launch names or None), ...])]};
    ``replays``: {graph: (first step, [kernels], µs each)}, one replay a step from the
    first; ``pre``: graphs replayed every step, never captured (one kernel kPre);
    ``eager``: {step: (op, args, kernel)} launched at the step's end; ``ids``: the
    launches and kernels carry ``graph id``."""
    ev: list[dict] = [{"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "CPU"}},
                      {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    corr = [0]

    def x(cat: str, name: str, ts: float, dur: float, **args: object) -> None:
        gpu = cat == "kernel"
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 1, "tid": 7 if gpu else 1, "ts": ts,
                   "dur": dur, "args": {**args, **({"stream": 7, "device": 0} if gpu else {})}})

    def replay(g: str, kernels: list[str], ts: float, dur: float) -> None:
        corr[0] += 1
        extra = {"graph id": g} if ids else {}
        x("cuda_runtime", "cudaGraphLaunch", ts, 5, correlation=corr[0], **extra)
        for j, k in enumerate(kernels):
            x("kernel", k, ts + 8 + j * (dur + 1), dur, correlation=corr[0], **extra)

    for s in range(steps):
        t = 1000.0 + 200 * s
        x("user_annotation", f"ProfilerStep#{s}", t, 200)
        off = 1
        for _, launches in captures.get(s, []):
            corr[0] += 1
            x("cuda_runtime", "cudaStreamBeginCapture", t + off, 1, correlation=corr[0])
            off += 2
            for op, args, kname in launches:
                x("cpu_op", op, t + off, 4, **args)
                corr[0] += 1
                x("cuda_runtime", "cudaLaunchKernel", t + off + 1, 1, correlation=corr[0],
                  **({"kernel": kname} if kname else {}))
                off += 5
            corr[0] += 1
            x("cuda_runtime", "cudaStreamEndCapture", t + off, 1, correlation=corr[0])
            off += 2
        at = 60
        for g, (first, kernels, dur) in replays.items():
            if s >= first:
                replay(g, kernels, t + at, dur)
                at += 8 + len(kernels) * (dur + 1) + 2
        for g in pre:
            replay(g, ["kPre"], t + at, 3)
            at += 14
        if eager and s in eager:
            op, args, k = eager[s]
            x("cpu_op", op, t + 190, 5, **args)
            corr[0] += 1
            x("cuda_runtime", "cudaLaunchKernel", t + 191, 1, correlation=corr[0])
            x("kernel", k, t + 195, 2, correlation=corr[0])
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
                                "traceEvents": ev}))
    return path


LAYOUTS = {
    "S1 captures in two windows": dict(
        captures={3: [("J", [("aten::mm", MM, None)])],
                  8: [("M", [("aten::addmm", ADDMM, None), ("aten::mm", MM, None)])]},
        replays={"J": (3, ["kB"], 20), "M": (8, ["kC", "kD"], 15)}, pre=("K",)),
    "S2 graph ids": dict(
        captures={3: [("1", [("aten::mm", MM, None)])], 8: [("2", [("aten::addmm", ADDMM, None)])]},
        replays={"1": (3, ["kB"], 20), "2": (8, ["kC"], 15)}, ids=True),
    "S3 late first replay": dict(
        captures={3: [("J", [("aten::mm", MM, None)])], 6: [("M", [("aten::addmm", ADDMM, None)])]},
        replays={"J": (10, ["kB"], 20), "M": (7, ["kC"], 15)}),
    "S4 same kernel eager": dict(
        captures={3: [("J", [("aten::mm", MM, None), ("aten::addmm", ADDMM, None)])]},
        replays={"J": (3, ["gemm", "gemm"], 20)},
        eager={1: ("aten::addmm", ADDMM, "gemm"), 11: ("aten::mm", MM, "gemm")}),
    "S5 capture in the warm-up step": dict(
        captures={0: [("J", [("aten::mm", MM, None)])]}, replays={"J": (0, ["kB"], 20)}),
    "S6 two captures of one size in a window": dict(
        captures={4: [("J", [("aten::mm", MM, "kB")]), ("M", [("aten::addmm", ADDMM, "kC")])]},
        replays={"M": (5, ["kC"], 15), "J": (9, ["kB"], 20)}),
}




def _both(path: Path, tmp: Path, mp: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """The summary of ``path``'s store read whole, then window by window (12 events at most)."""
    store = polyprof.load_ranks([path]).convert(tmp / "s")
    whole = summary_json(store)
    mp.setenv("POLYPROF_MEMORY_BOUND", str(fits.BASE_BYTES >> 20))  # every rank above the bound
    mp.setattr(fits, "window_events", lambda bound: 12)
    seen: list = []
    real = stepwise.summarise
    mp.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    windowed = summary_json(store)
    assert len(seen) == 1 and len(seen[0].events) >= 4  # read in windows
    return whole, windowed


def _records(doc: dict, table: str) -> list[dict]:
    return doc["tables"][table]["records"]


def _equal(a: object, b: object) -> bool:
    """Equal to the last digit (NaN, written as null, equal to itself)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_windowed_tables_are_the_whole_reads_to_the_last_digit(tmp_path, monkeypatch, layout):
    whole, windowed = _both(_build(tmp_path / "t.json", **LAYOUTS[layout]), tmp_path, monkeypatch)
    for table in TABLES:
        a, b = _records(whole, table), _records(windowed, table)
        assert len(a) == len(b), (table, a, b)
        for x, y in zip(a, b):
            assert x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x), (table, x, y)


def test_a_graph_captured_in_the_warm_up_step_counts_its_replays(tmp_path, monkeypatch):
    """S5: 13 analysed replays of J (steps 1-13), so 13 device calls of aten::mm, read
    whole (before: no row) and in windows (before: 12)."""
    path = _build(tmp_path / "t.json", **LAYOUTS["S5 capture in the warm-up step"])
    trace = W.view(polyprof.load(path), W.AUTO)
    assert len(graph_costs.replayed_calls(trace)[0]) == 13
    whole, windowed = _both(path, tmp_path, monkeypatch)
    for doc in (whole, windowed):
        got = [(r["name"], r["where"], r["count"], r["flops"]) for r in _records(doc, "op_efficiency")]
        assert got == [("aten::mm", "device", 13, 13 * GEMM)]


def test_a_window_without_device_activity_leaves_out_its_captured_ops(tmp_path, monkeypatch):
    """S3: the first window (steps 0-5) holds J's capture and no device activity; its
    aten::mm launched nothing, and counts only at J's replays (4) as read whole: step 3
    0 FLOPs, the rank 11 GEMMs (before, read in windows: 12, step 3 one)."""
    path = _build(tmp_path / "t.json", **LAYOUTS["S3 late first replay"])
    whole, windowed = _both(path, tmp_path, monkeypatch)
    for doc in (whole, windowed):
        m = {r["step"]: r for r in _records(doc, "mfu")}
        assert m[-1]["flops"] == 11 * GEMM and m[3]["flops"] == 0.0
        assert m[-1]["mfu_pct"] == pytest.approx(13.5605, abs=1e-4)
    assert _records(whole, "mfu") == _records(windowed, "mfu")


def test_a_capture_without_device_activity_is_no_model_flops(tmp_path):
    """model_rows of a trace with a stream capture and no device activity (as S3's first
    window): the captured aten::mm launched nothing, so it is no model FLOPs; an
    aten::addmm outside the capture still counts, as a CPU trace's ops do."""
    path = _build(tmp_path / "t.json", {1: [("J", [("aten::mm", MM, None)])]}, {}, steps=3)
    doc = json.loads(path.read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1,
                               "ts": 1000.0 + 200 + 100, "dur": 4, "args": ADDMM})
    path.write_text(json.dumps(doc))
    trace = polyprof.load(path)
    rows, flops, _ = efficiency.model_rows(trace)
    assert trace.names(rows).tolist() == ["aten::addmm"] and flops.tolist() == [GEMM]


def test_the_graph_tables_convert_no_string_table(tmp_path):
    """cuda_graphs' mapping (matched, captures_after, the graph stats) takes the replays'
    and ops' names from the trace's names (``Trace.names``, one string array per trace),
    not from the whole string table converted at each call (once per window each)."""
    trace = polyprof.load(_build(tmp_path / "t.json", **LAYOUTS["S1 captures in two windows"]))
    trace.names(np.zeros(0, np.int64))  # the trace's string array, made once

    class Counted(list):
        conversions = 0

        def __array__(self, dtype=None, copy=None):
            Counted.conversions += 1
            out = np.empty(len(self), object)
            out[:] = list(self)
            return out

    trace.strings = Counted(trace.strings)
    m = cuda_graphs.matched(trace)
    after = cuda_graphs.captures_after(trace)
    stats = cuda_graphs.graph_stats(trace)
    assert Counted.conversions == 0
    assert m.mapped is not None and set(m.mapped.op_name[m.mapped.op >= 0].tolist()) == {"aten::mm", "aten::addmm"}
    assert after.op_name.tolist() == ["aten::mm", "aten::addmm", "aten::mm"]
    assert sorted(stats.first_kernel) == ["kB", "kC", "kPre"]


def test_a_host_op_in_a_window_without_device_activity(tmp_path, monkeypatch):
    """S3 and a host-only aten::mm in step 2 (a data loader's, launching nothing, outside
    any capture): read whole, the rank ran on a device, and the op is no model FLOPs. Its
    window (no device activity) is told the rank's device planes (``Plan.devices``), so
    there too (before: counted as a CPU trace's, 2.15 GFLOP more, and its steps'
    ``step_stats`` rows of plane "")."""
    path = _build(tmp_path / "t.json", **LAYOUTS["S3 late first replay"])
    doc = json.loads(path.read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                               "ts": 1000.0 + 200 * 2 + 150, "dur": 4, "args": MM})
    path.write_text(json.dumps(doc))
    whole, windowed = _both(path, tmp_path, monkeypatch)
    assert _records(whole, "mfu")[0]["flops"] == 11 * GEMM
    assert _records(windowed, "mfu") == _records(whole, "mfu")
    assert _records(windowed, "step_stats") == _records(whole, "step_stats")
    assert {r["plane"] for r in _records(windowed, "step_stats")} == {"/device:GPU:0"}


def _second_gpu(path: Path, steps: range) -> Path:
    """``path`` with a kernel kE on GPU 1 in each of ``steps`` (no launch in the trace)."""
    doc = json.loads(path.read_text())
    doc["traceEvents"].append({"ph": "M", "name": "process_labels", "pid": 2, "tid": 0, "args": {"labels": "GPU 1"}})
    doc["deviceProperties"].append({"id": 1, "name": "NVIDIA H200"})
    for s in steps:
        doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "kE", "pid": 2, "tid": 7,
                                   "ts": 1000.0 + 200 * s + 120, "dur": 10, "args": {"stream": 7, "device": 1}})
    path.write_text(json.dumps(doc))
    return path


def test_a_device_idle_in_a_window_has_its_step_rows(tmp_path, monkeypatch):
    """S1 and a second GPU with kernels in steps 10-13 only: read whole, each step has a
    ``step_stats`` row per device (GPU 1's idle where it ran nothing); a window without
    GPU 1's activity has them too (before: only GPU 0's), and ``mfu`` counts 2 devices."""
    path = _second_gpu(_build(tmp_path / "t.json", **LAYOUTS["S1 captures in two windows"]), range(10, 14))
    whole, windowed = _both(path, tmp_path, monkeypatch)
    rows = _records(whole, "step_stats")
    assert [(r["step"], r["plane"]) for r in rows[:2]] == [(1, "/device:GPU:0"), (1, "/device:GPU:1")]
    assert len(rows) == 2 * 13 and rows[1]["busy_ns"] == 0
    assert _records(windowed, "step_stats") == rows
    assert _records(whole, "mfu")[0]["devices"] == _records(windowed, "mfu")[0]["devices"] == 2


def test_the_train_steps_last_window_has_its_device_rows(tmp_path, monkeypatch):
    """The H200 train step (tests/data/h200/torch_compile_train_h200.json.gz) in 8 windows
    of 100 events: its last window holds no device activity, and its step's ``step_stats``
    row is GPU 0's, as read whole (before: plane "", a CPU trace's)."""
    store = polyprof.load_ranks([DATA / "torch_compile_train_h200.json.gz"]).convert(tmp_path / "s")
    whole = summary_json(store)
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", str(fits.BASE_BYTES >> 20))
    monkeypatch.setattr(fits, "window_events", lambda bound: 100)
    p = plan(store / "rank=0", 100)
    last = read_window(store / "rank=0", *list(p.windows())[-1]).trace
    assert len(p.events) == 8 and not len(cache.correlation(last).device_rows)
    windowed = summary_json(store)
    assert [r["plane"] for r in _records(windowed, "step_stats")] == ["/device:GPU:0"] * 8
    assert _records(windowed, "step_stats") == _records(whole, "step_stats")


@pytest.mark.parametrize("name", ["h200/torch_compile_train_h200.json.gz", "h200/jax_train_step_h200.xplane.pb",
                                  "traces/kineto/mtia_inference_rank0.json.gz",
                                  "traces/kineto/mi250_rocm_minitoy.json.gz",
                                  "traces/kineto/cpu_only_rank34.json.gz"])
def test_the_plan_finds_the_ranks_device_planes(tmp_path, name):
    """``Plan.devices``, found in the plan's first pass a row group at a time: the planes
    of the device activity the rank read whole correlates (``Correlation.device_rows``;
    MTIA's by category and name), none for a CPU trace."""
    store = polyprof.load_ranks([DATA.parent / name]).convert(tmp_path / "s", chunk_rows=500)
    folder = next(store.glob("rank=*"))
    trace = read_window(folder, -(1 << 62), 1 << 62).trace
    rows = cache.correlation(trace).device_rows
    want = sorted(set(trace.track_plane[trace.events["track"][rows]].tolist()))
    assert plan(folder, 1000).devices.tolist() == want
    assert bool(want) == (name != "traces/kineto/cpu_only_rank34.json.gz")
