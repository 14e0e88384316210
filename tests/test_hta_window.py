"""``--window hta``: polyprof's temporal breakdown, idle time breakdown, queue length
summary and kernel-type table equal HTA 0.5's (``get_temporal_breakdown``,
``get_idle_time_breakdown``, ``get_queue_length_summary``, ``get_gpu_kernel_breakdown``)
on every Kineto trace in tests/data that HTA reads, with HTA run here (one subprocess
for every file, shared by the module's tests).

Files: the shared Kineto traces (tests/data/traces/kineto), kineto tb_plugin's resnet50
samples (tests/data/peers/tb_plugin, xz: staged decompressed, as HTA reads only .json and
.gz), the other peers' Kineto traces (HTA's critical-path tests, TraceLens' H100 and MI300
runs, vLLM decode with CUDA graph launches), the H200 traces (tests/data/h200: CUDA
graph replays, a transformer's training), and a small Kineto file written here with each of HTA's rules in it (a kernel whose
launch is not in the file, launch-less copies, an ``Event Sync`` record, a streamless
DMA request, the last step).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import ALL_DEVICES, ALL_STREAMS, temporal_breakdown
from polyprof.analyze.window import HTA
from polyprof.errors import WindowError
from polyprof.formats.detect import load

pytestmark = pytest.mark.skipif(importlib.util.find_spec("hta") is None,
                                reason="Holistic Trace Analysis is not installed (pip install HolisticTraceAnalysis)")

DATA = Path(__file__).parent / "data"
#: what HTA 0.5 cannot give a temporal breakdown of, and why (checked below: HTA fails there)
UNREAD = {"cpu_only_rank34": "no GPU kernels (HTA: IndexError)",
          "a100_cupti_counters": "no GPU kernels, only CUPTI profiler ranges (HTA: IndexError)"}
#: files whose temporal breakdown HTA 0.5 stops on with its own assertion (its other
#: breakdowns read them): 50 cuBLASLt workspace memsets beside 50 bf16 GEMMs on one
#: stream make its ``non_compute_time`` negative (``assert non_compute_time >= 0``)
HTA_ASSERTS = {"h200-torch_bf16_mm_h200": "HTA: AssertionError in idle_time_per_rank"}

_DRIVER = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
out = {}
for d in sys.argv[2:]:
    ta = TraceAnalysis(trace_dir=d)
    try:
        r = ta.get_temporal_breakdown(visualize=False).iloc[0].to_dict()
        out[d] = {k: float(v) for k, v in r.items()}
    except Exception as e:
        out[d] = {"error": type(e).__name__}
    try:  # the file's rank (sampled_rank1 is rank 1)
        df = ta.get_idle_time_breakdown(ranks=[next(iter(ta.t.traces))], visualize=False)[0]
        out[d]["idle"] = [[int(r["stream"]), r["idle_category"], float(r["idle_time"])] for r in df.to_dict("records")]
    except Exception as e:
        out[d]["idle_error"] = type(e).__name__
    q = ta.get_queue_length_summary(ranks=list(ta.t.traces))
    if q is not None:
        q.columns = [c[1] for c in q.columns]
        out[d]["queue"] = {str(s): {k: float(v) for k, v in r.items()} for (_, s), r in q.to_dict("index").items()}
    kt, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    out[d]["kernel_types"] = [[r["kernel_type"], int(r["sum"]), float(r["percentage"])] for r in kt.to_dict("records")]
json.dump(out, open(sys.argv[1], "w"))
"""


def _event(name: str, cat: str, pid: int, tid: int, ts: int, dur: int, **args: object) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def rules_trace() -> dict:
    """Three steps on the host; on the device: k1 and k2 launched in steps 1 and 2, k3 in
    step 3 (the last: HTA drops it), an orphan kernel whose launch is not in the file
    (dropped), a copy with no correlation id (kept: it starts before the last step), an
    Event Sync record (counted, not compute) and a DMA request without a stream (not
    counted). HTA's figures by hand: busy 20-50, 60-70, 120-140, 170-185 (75 µs) over
    20-185 (165 µs); compute k1 + k2 (50 µs)."""
    host = [_event(f"ProfilerStep#{i + 1}", "user_annotation", 1, 1, 100 * i, 100) for i in range(3)]
    host += [_event("cudaLaunchKernel", "cuda_runtime", 1, 1, 10 + 100 * i, 5, correlation=i + 1) for i in range(3)]
    dev = [_event(f"k{i + 1}", "kernel", 0, 7, ts, dur, stream=7, correlation=i + 1, device=0)
           for i, (ts, dur) in enumerate([(20, 30), (120, 20), (220, 10)])]
    dev += [_event("k_orphan", "kernel", 0, 7, 150, 10, stream=7, correlation=99, device=0),
            _event("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 0, 7, 60, 10, stream=7, device=0),
            _event("Event Sync", "cuda_sync", 0, 7, 170, 15, stream=7, correlation=2, device=0),
            _event("dma_request", "kernel", 0, 9, 175, 20, device=0)]
    meta = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    return {"schemaVersion": 1, "traceEvents": meta + host + dev}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each trace as HTA reads it: ``<dir>/rank0.json[.gz]``, by name."""
    tmp = tmp_path_factory.mktemp("hta_window")
    out: dict[str, Path] = {}
    for f in sorted((DATA / "traces" / "kineto").glob("*.json.gz")):
        d = tmp / f.name.removesuffix(".json.gz")
        d.mkdir()
        out[d.name] = d / "rank0.json.gz"
        out[d.name].write_bytes(f.read_bytes())
    for f in sorted((DATA / "peers" / "tb_plugin").glob("*.json.xz")):
        d = tmp / f.name.split(".")[0]
        d.mkdir()
        out[d.name] = d / "rank0.json"
        out[d.name].write_bytes(lzma.decompress(f.read_bytes()))
    # the peers' Kineto traces (HTA's critical-path tests, TraceLens' H100/MI300 runs and
    # vLLM CUDA-graph decode), but those that are byte for byte one of the above
    seen = {p.read_bytes() for p in out.values() if p.suffix == ".gz"}
    for f in sorted([*(DATA / "peers" / "hta_critical_path").rglob("*.json.gz"),
                     *(DATA / "peers" / "tracelens").glob("*.json.gz"),
                     *(DATA / "peers" / "tracelens_perf").glob("*.json.gz")]):
        if f.read_bytes() in seen:
            continue
        d = tmp / ("peer-" + "-".join(f.relative_to(DATA / "peers").parts).removesuffix(".json.gz"))
        d.mkdir()
        out[d.name] = d / "rank0.json.gz"
        out[d.name].write_bytes(f.read_bytes())
    for f in sorted((DATA / "h200").glob("*.json.gz")):  # recorded on an H200 by this project
        d = tmp / ("h200-" + f.name.removesuffix(".json.gz"))
        d.mkdir()
        out[d.name] = d / "rank0.json.gz"
        out[d.name].write_bytes(f.read_bytes())
    d = tmp / "rules"
    d.mkdir()
    out["rules"] = d / "rank0.json.gz"
    out["rules"].write_bytes(gzip.compress(json.dumps(rules_trace()).encode()))
    return out


@pytest.fixture(scope="module")
def hta(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """HTA 0.5's temporal and idle time breakdowns of every file (one subprocess: HTA
    sets pandas options)."""
    res = tmp_path_factory.mktemp("hta_out") / "hta.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(res), *(str(p.parent) for p in files.values())],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {Path(k).name: v for k, v in json.loads(res.read_text()).items()}


@pytest.fixture(scope="module")
def traces(files: dict[str, Path]) -> dict[str, polyprof.Trace]:
    """Each file loaded once for the module's tests."""
    return {name: load(path) for name, path in files.items()}


def htas_row(tb) -> int:
    """The row that is HTA's one per rank: every device (the last "(all streams)" row)."""
    rows = [i for i in range(len(tb)) if tb["stream"][i] == ALL_STREAMS]
    if len(rows) > 1:
        assert tb["plane"][rows[-1]] == ALL_DEVICES
    return rows[-1]


def test_temporal_breakdown_equals_htas_on_every_kineto_trace(files: dict[str, Path], hta: dict[str, dict],
                                                              traces: dict[str, polyprof.Trace]) -> None:
    compared = []
    for name in files:
        h = hta[name]
        tb = temporal_breakdown(traces[name], window=HTA)
        if name in UNREAD:
            assert "error" in h, (name, h)  # HTA's own limit, as UNREAD says
            assert len(tb) == 0, name  # nothing HTA would count
            continue
        if name in HTA_ASSERTS:
            assert h["error"] == "AssertionError", (name, h)
            i = htas_row(tb)  # ours adds up: compute + non-compute + idle is the span
            assert sum(int(tb[f"{k}_ns"][i]) for k in ("idle", "compute", "non_compute")) == int(tb["span_ns"][i])
            continue
        assert "error" not in h, (name, h)
        i = htas_row(tb)
        # HTA prints percentages to 2 decimals: equal to 0.01 points; its µs exactly
        for ours, theirs in (("idle", "idle_time"), ("compute", "compute_time"), ("non_compute", "non_compute_time")):
            assert abs(float(tb[f"{ours}_pct"][i]) - h[f"{theirs}_pctg"]) <= 0.01, (name, ours, tb.to_pandas(), h)
            assert int(tb[f"{ours}_ns"][i]) == 1000 * h[f"{theirs}(us)"], (name, ours)
        assert int(tb["span_ns"][i]) == 1000 * h["kernel_time(us)"], name
        compared.append(name)
    assert len(compared) == len(files) - len(UNREAD) - len(HTA_ASSERTS) == 28


def test_idle_time_breakdown_equals_htas(files: dict[str, Path], hta: dict[str, dict],
                                        traces: dict[str, polyprof.Trace]) -> None:
    """HTA's get_idle_time_breakdown (per stream: host-wait, kernel-wait, other; its 30 µs
    threshold) equals polyprof's under window "hta", to the ns, on every file HTA reads."""
    from polyprof.analyze.breakdown import idle_time_breakdown
    from polyprof.analyze.hta_compat import idle_gaps

    cats = {"host_wait": 0, "kernel_wait": 1, "other": 2}
    compared = 0
    for name in files:
        h = hta[name]
        t = traces[name]
        if name in UNREAD:
            assert "idle_error" in h and not idle_gaps(t), name
            continue
        assert "idle" in h, (name, h)
        theirs: dict[int, list[float]] = {}
        for stream, cat, us in h["idle"]:
            theirs.setdefault(stream, [0.0, 0.0, 0.0])[cats[cat]] = 1000 * us
        ours = idle_gaps(t)
        assert set(ours) == set(theirs), name
        for stream, g in ours.items():
            assert [g.host_wait, g.kernel_wait, g.other] == theirs[stream], (name, stream)
        it = idle_time_breakdown(t, window=HTA)
        per_stream = np.asarray(it["track_id"]) >= 0
        assert int(np.asarray(it["host_wait_ns"])[per_stream].sum()) == sum(v[0] for v in theirs.values()), name
        compared += 1
    assert compared == len(files) - len(UNREAD)


def test_streams_sharing_a_track_are_told_apart() -> None:
    """rocprofv3's 565 HTA streams (its ``stream`` values) run on 4 queues: each row is
    named with its stream (before: 565 rows of 4 names, ``queue 18`` three times in a
    row), each device's rows longest idle first, their sum the device's row."""
    from polyprof.analyze.breakdown import idle_time_breakdown

    t = load(Path(__file__).parent / "data" / "rocprof" / "tracelens_908_results.json.gz")
    it = idle_time_breakdown(t, window=HTA)
    per_stream = np.asarray(it["track_id"]) >= 0
    names = np.asarray(it["stream"], object)[per_stream].tolist()
    assert len(names) == 565 and len(set(names)) == 565
    assert {"queue 16", "queue 20", "queue 18 stream 567", "queue 18 stream 5"} <= set(names)
    idle = np.asarray(it["idle_ns"])[per_stream]
    assert (np.diff(idle) <= 0).all()
    assert int(idle.sum()) == int(np.asarray(it["idle_ns"])[~per_stream].sum())


def test_queue_length_summary_equals_htas(files: dict[str, Path], hta: dict[str, dict],
                                          traces: dict[str, polyprof.Trace]) -> None:
    """HTA's get_queue_length_summary, stream by stream: count, min, quartiles and max
    exactly, mean and std to HTA's printed precision (pandas shows 6 decimals), on every
    file; none where HTA has none (no launch with a device activity)."""
    from polyprof.analyze.queues import queue_length_summary

    names = {"count": "changes", "mean": "mean", "std": "std", "min": "min", "25%": "p25", "50%": "p50",
             "75%": "p75", "max": "max"}
    compared = 0
    for name in files:
        want = hta[name].get("queue") or {}
        ours = queue_length_summary(traces[name], window=HTA)
        assert [s.removeprefix("stream ") for s in ours["stream"].tolist()] == list(want), name
        for i, (stream, h) in enumerate(want.items()):
            for theirs, col in names.items():
                a, b = float(ours[col][i]), h[theirs]
                assert (np.isnan(a) and np.isnan(b)) or round(a, 6) == round(b, 6), (name, stream, theirs, a, b)
        compared += len(want) > 0
    assert compared == len(files) - len(UNREAD)
    assert hta["v100_ns_resolution_rank0"]["queue"]["7"]["max"] == 1022  # the long queue


def test_kernel_type_table_equals_htas(files: dict[str, Path], hta: dict[str, dict],
                                      traces: dict[str, polyprof.Trace]) -> None:
    """HTA's kernel-type table (get_gpu_kernel_breakdown): the same rows in the same order,
    µs sums equal, percentages equal at HTA's one decimal, zero-length rows included
    (resnet50_num_workers_0 has one), on every file."""
    from polyprof.analyze.kernel_states import kernel_state_breakdown

    label = {"COMPUTATION": "compute", "COMMUNICATION": "communication", "MEMORY": "memory"}
    for name in files:
        want = hta[name]["kernel_types"]
        ours = kernel_state_breakdown(traces[name], window=HTA)
        assert len(ours) == len(want), (name, ours.to_pandas(), want)
        for i, (kind, us, pct) in enumerate(want):
            parts = [label[k] for k in kind.split(" overlapping ")]
            assert ours["state"][i] == " + ".join(parts) + (" only" if len(parts) == 1 else ""), (name, i)
            assert int(ours["time_ns"][i]) == 1000 * us, (name, kind)
            assert round(float(ours["busy_pct"][i]), 1) == pct, (name, kind)
    assert ["COMPUTATION overlapping MEMORY", 0, 0.0] in hta["resnet50_num_workers_0"]["kernel_types"]


def test_htas_rules_by_hand(files: dict[str, Path], hta: dict[str, dict]) -> None:
    """The small file's figures worked out by hand (rules_trace) are HTA's and polyprof's;
    polyprof's own convention (every step, first to last activity) counts the orphan
    kernel, the last step and the DMA request."""
    h = hta["rules"]
    assert (h["kernel_time(us)"], h["idle_time(us)"], h["compute_time(us)"]) == (165, 90, 50)
    tb = temporal_breakdown(load(files["rules"]), window=HTA)
    i = htas_row(tb)
    assert (int(tb["span_ns"][i]), int(tb["busy_ns"][i]), int(tb["compute_ns"][i])) == (165_000, 75_000, 50_000)
    assert int(tb["activities"][i]) == 4  # k1, k2, the copy, the Event Sync
    from polyprof.analyze.window import Window

    own = temporal_breakdown(load(files["rules"]), window=Window(span="device"))
    assert int(own["span_ns"][htas_row(own)]) > 165_000


def test_cli_window_hta(files: dict[str, Path], hta: dict[str, dict], tmp_path: Path) -> None:
    """``summary --window hta --json`` as users run it; ``export --window hta`` writes a
    trace; ``report --window hta`` says the window; --window hta with --steps is one
    error line."""
    f = files["a100_nccl_rank0"]
    env = {**os.environ}
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(f), "--window", "hta", "--json"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert "HTA" in doc["overview"]["window"]
    rec = [x for x in doc["tables"]["temporal_breakdown"]["records"] if x["stream"] == ALL_STREAMS][-1]
    assert abs(rec["idle_pct"] - hta["a100_nccl_rank0"]["idle_time_pctg"]) <= 0.01
    q = {r["stream"]: r for r in doc["tables"]["queue_length_summary"]["records"]}
    assert round(q["stream 7"]["mean"], 6) == round(hta["a100_nccl_rank0"]["queue"]["7"]["mean"], 6)
    ks = doc["tables"]["kernel_state_breakdown"]["records"]
    assert [r["time_ns"] // 1000 for r in ks] == [us for _, us, _ in hta["a100_nccl_rank0"]["kernel_types"]]
    out = tmp_path / "w.json.gz"
    r = subprocess.run([sys.executable, "-m", "polyprof", "export", str(f), "--window", "hta", "-o", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 0 < load(out).n_events < load(f).n_events  # the last step left out
    html = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "polyprof", "report", str(files["triton_example"]), "--window", "hta",
                        "-o", str(html)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "the one step (1) (HTA 0.5" in html.read_text()  # one step: HTA keeps it, first to last activity
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(f), "--window", "hta", "--steps", "4:5"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "--window hta" in r.stderr


def test_window_hta_is_a_window_string() -> None:
    from polyprof.analyze.window import select

    with pytest.raises(WindowError, match="'hta'"):
        select(load(DATA / "traces" / "kineto" / "triton_example.json.gz"), "htaa")
