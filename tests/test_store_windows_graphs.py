"""A store's rank read window by window carries the CUDA graphs captured in one window to
the windows that replay them (ranks/stepwise.py, ranks/window_values.py,
analyze/cuda_graphs.Captures): graph attribution, MFU, its uncounted share and the
efficiency tables are those of the rank read whole. Before, a later window's replays were
taken for replays of graphs captured before the trace: the train step's MFU 1.21% against
8.48% whole, 76.9% of its kernel time "uncounted", no captured ops.

Data: tests/data/h200/torch_compile_train_h200.json.gz (two graphs, forward and
backward, captured in the first recorded step, replayed once a step),
torch_compile_h200.json.gz (one graph) and torch_copies_h200.json.gz (a graph captured and
replayed in its last step), ours (tests/data/h200/README.md), and a trace generated here
(a graph captured before the trace, replayed before and after another's capture). They are
small, so the windows are made small (``fits.window_events``) and the bound low, as in
tests/test_store_windows_merge.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import cuda_graphs, graph_costs
from polyprof.ranks import fits, stepwise
from polyprof.ranks import window_values as values
from polyprof.store.window import plan, read_window
from summary_json import summary_json

DATA = Path(__file__).parent / "data" / "h200"
TRUTH = json.loads((DATA / "compile_truth.json").read_text())
TABLES = ("mfu", "cuda_graphs", "kernel_efficiency", "op_efficiency")




def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)
    return a == b


class _Run:
    """The store of one fixture read whole, then window by window in windows of at most
    ``most`` events; the captures each window handed on."""

    def __init__(self, name: str, most: int, tmp: Path, mp: pytest.MonkeyPatch) -> None:
        self.store = polyprof.load_ranks([DATA / name]).convert(tmp / "s")
        self.plan = plan(self.store / "rank=0", most)
        self.whole = summary_json(self.store)
        mp.setenv("POLYPROF_MEMORY_BOUND", str(fits.BASE_BYTES >> 20))  # every rank above the bound
        mp.setattr(fits, "window_events", lambda bound: most)
        self.seen: list = []
        self.handed: list[cuda_graphs.Captures] = []
        real, real_captures = stepwise.summarise, values.captures
        mp.setattr(stepwise, "summarise", lambda *a, **k: self.seen.append(a[1]) or real(*a, **k))
        mp.setattr(values, "captures", lambda *a: self.handed.append(real_captures(*a)) or self.handed[-1])
        self.windowed = summary_json(self.store)

    def records(self, doc: dict, table: str) -> list[dict]:
        return doc["tables"][table]["records"]


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        yield _Run("torch_compile_train_h200.json.gz", 100, tmp_path_factory.mktemp("train"), mp)
    finally:
        mp.undo()


def test_the_capture_is_in_the_first_window_and_replays_in_later_ones(train):
    """The plan the test relies on: 8 windows; both captures in the first, graph launches
    in six later ones (and the summary took the windowed path with that plan)."""
    folder = train.store / "rank=0"
    assert len(train.plan.events) == 8 and len(train.seen) == 1 and len(train.seen[0].events) == 8
    got = []
    for lo, hi in train.plan.windows():
        t = read_window(folder, lo, hi).trace
        got.append((len(t.rows_named("cudaStreamBeginCapture")), len(t.rows_named("cudaGraphLaunch"))))
    assert got[0] == (2, 4) and got[1:] == [(0, 2)] * 6 + [(0, 0)]


def test_mfu_counts_the_replays_of_later_windows(train):
    """7 analysed replays of each graph (step 0 is the default window's warm-up) count the
    GEMMs' FLOPs in every window: the rank's FLOPs, MFU and a 0% uncounted share are the
    whole read's, step by step (before: 10.7 GFLOP, 1.21%, 76.9%)."""
    whole, windowed = (train.records(d, "mfu") for d in (train.whole, train.windowed))
    assert windowed[0]["step"] == -1 and windowed[0]["uncounted_replay_pct"] == 0.0
    gemm = (TRUTH["torch_compile_train_h200.json.gz"]["gemm_flops_per_step"])
    steps = [r for r in windowed if r["step"] != -1]
    assert len(steps) == 8 and all(r["flops"] >= gemm for r in steps[:7]) and steps[7]["flops"] == 0
    assert windowed[0]["flops"] == pytest.approx(7 * gemm, rel=2e-4)  # the loss's eager ops: 9 MFLOP more
    assert windowed[0]["mfu_pct"] == pytest.approx(8.476, abs=1e-3)
    assert [[_same(x[k], y[k]) for k in x] for x, y in zip(whole, windowed)] == [[True] * len(x) for x in whole]


@pytest.mark.parametrize("table", TABLES)
def test_windowed_tables_are_the_whole_reads(train, table):
    """mfu, cuda_graphs, kernel_efficiency and op_efficiency: row for row the whole read's."""
    a, b = train.records(train.whole, table), train.records(train.windowed, table)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x), (table, x, y)


def test_graphs_keep_their_captured_ops(train):
    """Each graph's captured ops (3 and 8) and 100% of its replayed activities attributed,
    over the windows that replayed it (0 and 0.0% before, in every merge)."""
    got = [(r["graph"], r["replays"], r["captured_ops"], r["attributed_pct"])
           for r in train.records(train.windowed, "cuda_graphs")]
    assert got == [("graph 0", 7, 3, 100.0), ("graph 1", 7, 8, 100.0)]


def test_efficiency_tables_count_every_replay(train):
    """op_efficiency: a device call of each captured aten::addmm (2 per forward replay)
    and aten::mm (3 per backward replay) per analysed replay, with its FLOPs; the GEMM
    kernels' FLOPs in kernel_efficiency sum to the same."""
    per = 2 * 256 * 1024 * 4096
    oe = {(r["name"], r["where"]): r for r in train.records(train.windowed, "op_efficiency")}
    assert (oe["aten::addmm", "device"]["count"], oe["aten::addmm", "device"]["flops"]) == (14, 14 * per)
    assert (oe["aten::mm", "device"]["count"], oe["aten::mm", "device"]["flops"]) == (21, 21 * per)
    ke = train.records(train.windowed, "kernel_efficiency")
    gemms = sum(r["flops"] for r in ke if r["op"] in ("aten::addmm", "aten::mm"))
    assert gemms == pytest.approx(35 * per, rel=1e-12)


def test_low_mfu_finding_is_the_whole_reads(train):
    """The low-MFU finding reads the merged mfu table: there again (it was silent, the
    MFU taken for a floor), with the whole read's figures."""
    def low(doc: dict) -> dict:
        return next(f["evidence"] for f in doc["findings"] if f["id"] == "low_mfu")

    assert low(train.windowed) == low(train.whole)


def test_what_is_carried_is_bounded_by_the_captures(train):
    """What each window hands on: the 12 captured launches (4 + 8) and the two graphs
    claimed, the same after every window: it grows with the captures, not the windows."""
    sizes = [(c.size.tolist(), len(c.at), len(c.found)) for c in train.handed[:8]]
    assert sizes == [([4, 8], 12, 2)] * 8
    c = train.handed[0]
    outer = np.unique(c.outer[c.outer >= 0])  # the outermost op with FLOPs around each launch: 2 addmm, 3 mm
    assert (c.op >= 0).all() and len(outer) == 5 and c.outer_flops[outer].sum() == 5 * 2 * 256 * 1024 * 4096


def test_one_graph_in_three_windows(tmp_path, monkeypatch):
    """torch.compile's forward graph (5 launches) captured in the first of 3 windows: 7
    replays of 4.29 GFLOP (compile_truth.json) in the rank's MFU, its 4 captured ops."""
    truth = TRUTH["torch_compile_h200.json.gz"]
    run = _Run("torch_compile_h200.json.gz", 100, tmp_path, monkeypatch)
    assert len(run.seen[0].events) == 3
    m = run.records(run.windowed, "mfu")
    assert m[0]["flops"] == 7 * truth["flops_per_replay"] and m[0]["uncounted_replay_pct"] == 0.0
    g = run.records(run.windowed, "cuda_graphs")
    assert [(r["replays"], r["kernels_per_replay"], r["captured_ops"], r["attributed_pct"]) for r in g] == \
        [(7, truth["kernels_per_replay"], len(set(truth["captured"])), 100.0)]
    for table in TABLES:
        a, b = run.records(run.whole, table), run.records(run.windowed, table)
        assert len(a) == len(b) and all(_same(x[k], y[k]) for x, y in zip(a, b) for k in x), table


def test_a_capture_and_its_replays_in_one_window(tmp_path, monkeypatch):
    """torch_copies' graph is captured and replayed 3 times in the last of 5 windows: its
    2 captured ops and 100% attributed, as read whole (0 and 0.0% before: the merged table
    was made without the windows' captured ops)."""
    run = _Run("torch_copies_h200.json.gz", 100, tmp_path, monkeypatch)
    assert len(run.seen[0].events) == 5
    got = [(r["replays"], r["kernels_per_replay"], r["captured_ops"], r["attributed_pct"])
           for r in run.records(run.windowed, "cuda_graphs")]
    assert got == [(3, 3, 2, 100.0)] and run.records(run.whole, "cuda_graphs") == run.records(run.windowed,
                                                                                             "cuda_graphs")


def test_a_window_maps_an_earlier_windows_capture(tmp_path):
    """In one later window: its replays map to the carried capture (no row of its own),
    name the captured ops, and count the captured FLOPs; without the carry, none."""
    store = polyprof.load_ranks([DATA / "torch_compile_h200.json.gz"]).convert(tmp_path / "s")
    folder = store / "rank=0"
    (lo0, hi0), (lo1, hi1) = list(plan(folder, 100).windows())[:2]
    first = read_window(folder, lo0, hi0).trace
    assert len(first.rows_named("cudaStreamBeginCapture")) == 1
    caps = values.captures(first, cuda_graphs.no_captures())
    alone = read_window(folder, lo1, hi1).trace
    assert graph_costs.carried_replays(alone) is None and cuda_graphs.self_captured(alone) is None
    assert graph_costs.uncounted_ns(alone, np.zeros(0, np.int64))[0] > 0
    later = read_window(folder, lo1, hi1).trace
    cuda_graphs.carry_in(later, caps)  # (before anything is worked out of it)
    m = cuda_graphs.self_captured(later)
    assert m is not None and (m.launch == -1).all() and (m.carried >= 0).all()
    assert m.op_name.tolist() == TRUTH["torch_compile_h200.json.gz"]["captured"] * 3
    r = cuda_graphs.replays(later)
    launches, flops, _ = graph_costs.replayed_flops(later, np.zeros(0, np.int64), np.zeros(0), np.zeros(0, object))
    assert sorted(launches.tolist()) == sorted(np.repeat(r.launch, 2).tolist())  # aten::mm and aten::addmm a replay
    assert flops.sum() == 3 * TRUTH["torch_compile_h200.json.gz"]["flops_per_replay"]
    assert graph_costs.uncounted_ns(later, np.zeros(0, np.int64))[0] == 0.0


def test_device_planes_once_per_window(train, monkeypatch):
    """The device planes with events are found once per window (they give both whether
    the rank ran on a device and mfu's device count): one GPU plane."""
    calls: list[frozenset[int]] = []
    real = values.device_planes
    monkeypatch.setattr(values, "device_planes", lambda t: calls.append(real(t)) or calls[-1])
    doc = summary_json(train.store)
    assert len(calls) == 8 and all(len(c) == 1 for c in calls[:7])
    assert doc["tables"]["mfu"]["records"][0]["devices"] == train.records(train.whole, "mfu")[0]["devices"] == 1


def test_the_memo_key_is_shared():
    """graph_costs checks for carried captures without importing cuda_graphs."""
    assert graph_costs._CARRIED == cuda_graphs.CARRIED


def _two_graphs(path: Path, steps: int = 12, at: int = 6) -> Path:
    """``steps`` steps of 100 µs; each replays graph K (kernel kA of 10 µs, captured before
    the trace); step ``at`` begins by capturing graph J (one launch in an ``aten::mm`` of
    256x1024x4096), which it and every later step then replay (kernel kB of 20 µs). The
    launches name no kernel, so J's capture agrees with K's one kernel too."""
    ev: list[dict] = [{"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "CPU"}},
                      {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    corr = 0

    def x(cat: str, name: str, ts: float, dur: float, **args: object) -> None:
        gpu = cat == "kernel"
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 1, "tid": 7 if gpu else 1, "ts": ts,
                   "dur": dur, "args": {**args, **({"stream": 7, "device": 0} if gpu else {})}})

    def replay(kernel: str, ts: float, dur: float) -> None:
        nonlocal corr
        corr += 1
        x("cuda_runtime", "cudaGraphLaunch", ts, 5, correlation=corr)
        x("kernel", kernel, ts + 8, dur, correlation=corr)

    for s in range(steps):
        t = 1000.0 + 100 * s
        x("user_annotation", f"ProfilerStep#{s}", t, 100)
        if s == at:
            corr += 3
            x("cuda_runtime", "cudaStreamBeginCapture", t + 1, 1, correlation=corr - 2)
            x("cpu_op", "aten::mm", t + 2, 4, **{"Input Dims": [[256, 1024], [1024, 4096]],
                                                 "Input type": ["float", "float"]})
            x("cuda_runtime", "cudaLaunchKernel", t + 3, 1, correlation=corr - 1)  # captured: no kernel
            x("cuda_runtime", "cudaStreamEndCapture", t + 7, 1, correlation=corr)
        replay("kA", t + 10, 10)
        if s >= at:
            replay("kB", t + 60, 20)
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
                                "traceEvents": ev}))
    return path


def test_a_graph_replayed_before_any_capture_claims_none_later(tmp_path, monkeypatch):
    """Graph K, captured before the trace, is first replayed in the first window: as read
    whole, it claims no capture, and J (captured in a later window, as many launches)
    keeps its own: K's time is uncounted (11 replays of 10 µs against J's 6 of 20 µs), J's
    6 replays count aten::mm's FLOPs. Before, the windows knew nothing of K, which claimed
    J's capture in the window of the capture (its replay comes first there): 170 of the
    230 µs uncounted, J without its captured op."""
    store = polyprof.load_ranks([_two_graphs(tmp_path / "t.json")]).convert(tmp_path / "s")
    whole = summary_json(store)
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", str(fits.BASE_BYTES >> 20))
    monkeypatch.setattr(fits, "window_events", lambda bound: 12)
    seen: list = []
    real = stepwise.summarise
    monkeypatch.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    windowed = summary_json(store)
    assert len(seen) == 1 and len(seen[0].events) >= 4
    m = windowed["tables"]["mfu"]["records"][0]
    assert m["flops"] == 6 * 2 * 256 * 1024 * 4096
    assert m["uncounted_replay_pct"] == pytest.approx(100 * 110 / 230)
    got = {r["graph"]: (r["replays"], r["captured_ops"], r["attributed_pct"])
           for r in windowed["tables"]["cuda_graphs"]["records"]}
    assert got == {"graph 0": (11, 0, 0.0), "graph 1": (6, 1, 100.0)}
    for table in TABLES:
        a, b = whole["tables"][table]["records"], windowed["tables"][table]["records"]
        assert len(a) == len(b) and all(_same(x[k], y[k]) for x, y in zip(a, b) for k in x), table
