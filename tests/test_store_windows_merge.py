"""A store's rank summarised window by window (ranks/stepwise.py, ranks/table_merge.py)
gives the tables of the rank read whole where the windows differ: CUDA graph replays
(graph A in the first half, B in the second), ``aten::mm`` calls whose kernels take 10 µs
then 40 µs in steps of 100 µs then 300 µs (op/kernel efficiency, MFU). Each table is
also checked against numbers recomputed from the generated events. And a rank whose
step events lie on a plane the trace labels a GPU is read whole, never an IndexError.

The traces are generated here (no data file); the bound is forced low
(POLYPROF_MEMORY_BOUND), as in tests/test_store_windows.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import polyprof
from polyprof.cli import main
from polyprof.ranks import fits, stepwise
from summary_json import summary_json

#: the bound that sends these ranks (about 25,000 events) window by window
LOW = str((fits.BASE_BYTES >> 20) + 1)
N = 3000  # steps
MM_FLOPS = 2 * 512 ** 3  # one 512x512 @ 512x512 matmul
H200 = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
        "numSms": 132}


def _meta(host_label: str) -> list[dict]:
    return [{"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": host_label}},
            {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]


def _trace(path: Path, steps_on_gpu: bool = False, late_mm: bool = True) -> Path:
    """N steps; each runs an ``aten::mm`` (its kernel 10 µs, then 40 µs in the second
    half, or none there without ``late_mm``; steps of 100 µs, then 300 µs) and launches a
    CUDA graph: A (5 kernels of 3 µs) in the first half, B (2 kernels of 1 µs) in the
    second."""
    ev: list[dict] = []
    t, corr = 1000.0, 1
    for s in range(N):
        late = s >= N // 2
        dur = 300.0 if late else 100.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 100, "tid": 100,
                   "ts": t, "dur": dur, "args": {}})
        if late and not late_mm:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 100, "tid": 100, "ts": t + 1,
                       "dur": 20.0, "args": {}})
            t += dur
            continue
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": t + 1, "dur": 20.0,
                   "args": {"External id": corr, "Input Dims": [[512, 512], [512, 512]],
                            "Input type": ["float", "float"], "Input Strides": [[512, 1], [512, 1]]}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": t + 5,
                   "dur": 5.0, "args": {"correlation": corr, "External id": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "sgemm_kernel", "pid": 0, "tid": 7, "ts": t + 20,
                   "dur": 40.0 if late else 10.0, "args": {"correlation": corr, "stream": 7, "device": 0}})
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100, "ts": t + 30,
                   "dur": 5.0, "args": {"correlation": corr}})
        for j in range(2 if late else 5):
            ev.append({"ph": "X", "cat": "kernel", "name": f"{'B' if late else 'A'}{j}", "pid": 0, "tid": 7,
                       "ts": t + 65 + 4 * j, "dur": 1.0 if late else 3.0,
                       "args": {"correlation": corr, "stream": 7, "device": 0}})
        corr += 1
        t += dur
    meta = _meta("GPU 1" if steps_on_gpu else "CPU")
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [H200], "traceEvents": ev + meta}))
    return path


def _summary(store: Path, capsys) -> dict:
    assert main(["summary", str(store), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _table(doc: dict, name: str) -> list[dict]:
    def find(x: object) -> list[dict] | None:
        if isinstance(x, dict):
            if name in x and isinstance(x[name], dict) and "records" in x[name]:
                return list(x[name]["records"])
            for v in x.values():
                if (got := find(v)) is not None:
                    return got
        if isinstance(x, list):
            for v in x:
                if (got := find(v)) is not None:
                    return got
        return None

    got = find(doc)
    assert got is not None, name
    return got


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """The summary's JSON of the store read whole and window by window."""
    d = tmp_path_factory.mktemp("merge")
    store = polyprof.load_ranks([_trace(d / "rank0.json")]).convert(d / "s", chunk_rows=20000)
    mp = pytest.MonkeyPatch()
    try:
        whole = summary_json(store)
        mp.setenv("POLYPROF_MEMORY_BOUND", LOW)
        seen: list = []
        real = stepwise.summarise
        mp.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
        windowed = summary_json(store)
    finally:
        mp.undo()
    assert seen and len(seen[0].events) >= 2, "the windowed path ran, in two windows or more"
    return whole, windowed


def _close(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float) and isinstance(y[k], float):
                assert x[k] == pytest.approx(y[k], rel=1e-9, nan_ok=True), k
            else:
                assert x[k] == y[k], k


def test_cuda_graphs_merge_by_graph_and_per_replay_means(docs):
    """Graph A (steps 1 to N/2-1: step 0 is not analysed) and B (N/2 replays): each its
    replays and device time per replay, whole and windowed alike."""
    whole, windowed = docs
    got = {r["graph"]: r for r in _table(windowed, "cuda_graphs")}
    assert {g: (r["replays"], r["device_ns"], r["kernels_per_replay"], r["first_kernel"]) for g, r in got.items()} \
        == {"graph 0": (N // 2 - 1, 15000, 5, "A0"), "graph 1": (N // 2, 2000, 2, "B0")}
    _close(_table(windowed, "cuda_graphs"), _table(whole, "cuda_graphs"))


def test_efficiency_tables_are_the_whole_ranks(docs):
    """``aten::mm``'s FLOPs, device time, FLOP/s and roofline share over every analysed
    call, not the first window's; the kernel table likewise (the analysed calls too)."""
    whole, windowed = docs
    mm = next(r for r in _table(windowed, "op_efficiency") if r["name"] == "aten::mm")
    calls = N - 1
    device_ns = (N // 2 - 1) * 10_000 + (N // 2) * 40_000
    assert mm["count"] == calls and mm["flops"] == calls * MM_FLOPS
    assert mm["device_ns"] == device_ns
    assert mm["flops_per_s"] == pytest.approx(calls * MM_FLOPS / device_ns * 1e9, rel=1e-12)
    assert mm["roofline_pct"] == pytest.approx(100 * mm["flops_per_s"] / mm["peak_flops_per_s"], rel=1e-12)
    _close(_table(windowed, "op_efficiency"), _table(whole, "op_efficiency"))
    k = next(r for r in _table(windowed, "kernel_efficiency") if r["name"] == "sgemm_kernel")
    k_ns = device_ns
    assert k["count"] == calls and k["device_ns"] == k_ns
    assert k["flops_per_s"] == pytest.approx(calls * MM_FLOPS / k_ns * 1e9, rel=1e-12)
    assert k["roofline_pct"] == pytest.approx(100 * k["flops_per_s"] / mm["peak_flops_per_s"], rel=1e-12)
    _close(_table(windowed, "kernel_efficiency"), _table(whole, "kernel_efficiency"))


def test_mfu_has_one_whole_rank_row_of_every_step(docs):
    """One step -1 row: the analysed steps' FLOPs over their summed times."""
    whole, windowed = docs
    m = _table(windowed, "mfu")
    overall = [r for r in m if r["step"] == -1]
    assert len(overall) == 1 and m[0]["step"] == -1 and len(m) == N
    time = (N // 2 - 1) * 100_000 + (N // 2) * 300_000
    assert overall[0]["flops"] == (N - 1) * MM_FLOPS and overall[0]["time_ns"] == time
    assert overall[0]["mfu_pct"] == pytest.approx(
        100 * (N - 1) * MM_FLOPS / time * 1e9 / overall[0]["peak_flops_per_s"], rel=1e-12)
    _close(m, _table(whole, "mfu"))


def test_steps_on_a_gpu_labelled_plane_read_whole(tmp_path, capsys, monkeypatch, caplog):
    """Step events on a plane the trace labels a GPU are no steps of the rank. The plan
    counted them (the windows then held none: an IndexError); it now counts the steps the
    analyses do, finds none to cut by, and the rank is read whole (said), its summary the
    whole read's."""
    store = polyprof.load_ranks([_trace(tmp_path / "rank0.json", steps_on_gpu=True)]).convert(
        tmp_path / "s", chunk_rows=20000)
    whole = _summary(store, capsys)
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        got = _summary(store, capsys)
    assert "read whole" in caplog.text and "cannot be cut into windows of whole steps" in caplog.text
    assert got == whole


def test_mfu_of_a_window_without_model_flops(tmp_path, capsys, monkeypatch):
    """No matmul in the second half, so the last window has no model FLOPs: its steps
    are still rows (with none), under the rank's one whole row, as read whole."""
    store = polyprof.load_ranks([_trace(tmp_path / "rank0.json", late_mm=False)]).convert(
        tmp_path / "s", chunk_rows=8000)
    whole = _table(_summary(store, capsys), "mfu")
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    seen: list = []
    real = stepwise.summarise
    monkeypatch.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    got = _table(_summary(store, capsys), "mfu")
    assert seen and len(seen[0].events) >= 2
    assert len(got) == N and [r["step"] for r in got if r["step"] == -1] == [-1]
    assert got[0]["flops"] == (N // 2 - 1) * MM_FLOPS
    assert got[-1]["flops"] == 0 and got[-1]["time_ns"] == 300_000
    _close(got, whole)
