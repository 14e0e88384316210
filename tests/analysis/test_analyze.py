"""The analyses on hand-built traces, checked against numbers worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polyprof
import polyprof.analyze as A
from polyprof.trace import TraceBuilder

from .synth import US, gpu_trace

PEERS = Path(__file__).parents[1] / "data" / "peers"


def test_temporal_and_idle_breakdown_by_hand():
    t = gpu_trace()
    tb = A.temporal_breakdown(t)
    dev = tb.take(tb["track_id"] == -1).to_dicts()[0]
    # span = the two ProfilerSteps (2 ms); compute = (100 + 10) µs x 2; copies 50 µs x 2
    assert (dev["span_ns"], dev["compute_ns"], dev["non_compute_ns"]) == (2000 * US, 220 * US, 100 * US)
    assert dev["idle_ns"] == 2000 * US - 320 * US
    it = A.idle_time_breakdown(t)
    row = it.take(it["track_id"] == -1).to_dicts()[0]
    # gaps: [0,50) host (gemm launched at 30 >= 0); [150,160) kernel-wait (relu launched at 130);
    # [170,600) host up to 520, where cudaMemcpyAsync [510,520) returned, then 80 µs other (the
    # copy waited after its call: queued); [650,1050) host; [1150,1160) kernel; [1170,1600) host
    # up to 1520, then 80 other; tail [1650,2000) other
    assert row["host_wait_ns"] == (50 + 350 + 400 + 350) * US
    assert row["kernel_wait_ns"] == 20 * US
    assert row["other_ns"] == (80 + 80 + 350) * US
    assert row["idle_ns"] == dev["idle_ns"]


def test_a_stream_waiting_with_its_work_queued_is_not_waiting_for_the_host():
    """TraceLens's SGLang decode of Qwen3-8B on an MI300X: stream 3's first kernel was
    launched 40 µs after ``hipStreamWaitEvent`` and started 463 ms later, behind a blocking
    ``hipMemcpyWithStream``. Its gap was all host-wait (the launch came after the gap
    began), and a "waiting for the host" finding advised a faster DataLoader; now only the
    time until the launch call returned is the host's, the rest other."""
    t = polyprof.load(PEERS / "tracelens" / "sglang_qwen3_8b_decode.json.gz")
    it = A.idle_time_breakdown(t)
    row = it.take(it["track_id"] == -1).to_dicts()[0]
    assert row["idle_ns"] > 450_000_000 and row["other_ns"] > 0.99 * row["idle_ns"], row
    assert 0 < row["host_wait_ns"] < 1_000_000, row
    assert "host_bound" not in {f.id for f in A.findings(t)}


def test_overlapping_streams_count_once_per_device():
    b = TraceBuilder()
    gpu = b.plane("/device:GPU:0", "device")
    s1 = b.track(gpu, "s1", "stream", tid=1)
    s2 = b.track(gpu, "s2", "stream", tid=2)
    b.event(s1, "k", 0, 100, "kernel")
    b.event(s2, "Memcpy DtoH", 50, 100, "gpu_memcpy")
    b.event(s2, "ncclKernel_AllReduce", 300, 100, "kernel")
    b.event(s1, "k", 350, 100, "kernel")
    t = b.build()
    tb = A.temporal_breakdown(t).to_pandas().set_index("stream")
    assert tb.loc["(all streams)", ["span_ns", "compute_ns", "non_compute_ns", "idle_ns"]].tolist() == [450, 200, 100, 150]
    assert tb.loc["s2", ["compute_ns", "non_compute_ns", "idle_ns"]].tolist() == [0, 200, 250]
    ov = A.comm_comp_overlap(t).to_dicts()[0]
    assert (ov["communication_ns"], ov["overlap_ns"], ov["overlap_pct"]) == (100, 50, 50.0)
    kb = A.kernel_breakdown(t).to_pandas().set_index("name")
    assert kb.loc["ncclKernel_AllReduce", "kind"] == "communication"
    assert kb.loc["k", ["count", "total_ns"]].tolist() == [2, 200]
    assert kb["share_pct"].sum() == pytest.approx(100.0)


def test_rocclr_blit_kernels_are_fills_and_copies():
    """ROCm runs hipMemset and device-side hipMemcpy as ROCclr's own kernels, which Kineto
    and rocprof record as kernels: the time shares count them as a fill and a copy (they
    were compute), HTA's window as compute, as HTA does."""
    b = TraceBuilder()
    s = b.track(b.plane("/device:GPU:0", "device"), "s", "stream", tid=1)
    b.event(s, "__amd_rocclr_fillBufferAligned", 0, 100 * US, "kernel")
    b.event(s, "__amd_rocclr_copyBuffer", 100 * US, 50 * US, "kernel")
    b.event(s, "Cijk_Ailk_Bljk_HHS_BH", 150 * US, 200 * US, "kernel")
    t = b.build()
    kb = A.kernel_breakdown(t).to_pandas().set_index("name")
    assert kb["kind"].to_dict() == {"__amd_rocclr_fillBufferAligned": "memset", "__amd_rocclr_copyBuffer": "memcpy",
                                    "Cijk_Ailk_Bljk_HHS_BH": "compute"}
    row = A.temporal_breakdown(t).to_dicts()[-1]
    assert (row["compute_ns"], row["non_compute_ns"]) == (200 * US, 150 * US)
    hta = A.temporal_breakdown(t, window="hta").to_dicts()[-1]
    assert (hta["compute_ns"], hta["non_compute_ns"]) == (350 * US, 0)


def test_op_stats_self_and_caused_device_time():
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    s = b.track(b.plane("/device:GPU:0", "device"), "s", "stream", tid=1)
    b.event(th, "aten::linear", 0, 100, "cpu_op", external_id=1)
    b.event(th, "aten::addmm", 10, 60, "cpu_op", external_id=2)
    b.event(th, "cudaLaunchKernel", 20, 5, "cuda_runtime", correlation_id=1, external_id=2)
    b.event(s, "gemm", 30, 40, "kernel", correlation_id=1)
    b.event(th, "cudaLaunchKernel", 80, 5, "cuda_runtime", correlation_id=2, external_id=1)
    b.event(s, "bias", 90, 7, "kernel", correlation_id=2)
    ops = A.op_stats(b.build()).to_pandas().set_index("name")
    assert ops.loc["aten::linear", ["total_ns", "self_ns", "device_ns", "self_device_ns", "launches"]].tolist() == [100, 35, 47, 7, 2]
    assert ops.loc["aten::addmm", ["total_ns", "self_ns", "device_ns", "self_device_ns", "launches"]].tolist() == [60, 55, 40, 40, 1]


def test_launch_stats_rows():
    ls = A.launch_stats(gpu_trace())
    assert len(ls) == 6
    first = ls.to_dicts()[0]
    assert (first["launch_name"], first["name"], first["step"]) == ("cudaLaunchKernel", "gemm", 1)
    assert (first["cpu_duration_ns"], first["launch_delay_ns"], first["queue_delay_ns"]) == (10 * US, 20 * US, 10 * US)
    assert (ls["device_start_ns"] >= ls["launch_start_ns"]).all()


def test_launch_summary_agrees_with_a_pandas_groupby(traces_dir):
    import polyprof

    table = A.launch_stats(polyprof.load(traces_dir / "kineto" / "v100_ns_resolution_rank0.json.gz"))
    ls = table.to_pandas()
    gb = ls.groupby(["plane", "launch_name"])
    want = gb.agg(count=("cpu_duration_ns", "size"), cpu=("cpu_duration_ns", "mean"),
                  dev=("device_duration_ns", "mean"), delay=("launch_delay_ns", "median"))
    want["p99"] = gb["launch_delay_ns"].quantile(0.99)
    got = A.launch_summary(None, table).to_pandas().set_index(["plane", "launch_name"])
    assert got["count"].tolist() == sorted(got["count"], reverse=True)
    assert len(got) == len(want) == 3
    for key, row in want.iterrows():
        g = got.loc[key]
        assert g["count"] == row["count"]
        assert np.allclose([g["cpu_mean_ns"], g["device_mean_ns"], g["delay_median_ns"], g["delay_p99_ns"]],
                           [row["cpu"], row["dev"], row["delay"], row["p99"]])
    empty = A.launch_summary(None, table.head(0))
    assert len(empty) == 0 and "delay_p99_ns" in empty.columns


def test_section_stats_projection_utilization_and_memory():
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    th = b.track(host, "main", tid=1)
    s = b.track(b.plane("/device:GPU:0", "device"), "s", "stream", tid=1)
    for k in range(3):
        o = k * 1000
        b.event(th, "Self Attention", o, 500, "section")
        b.event(th, "cudaLaunchKernel", o + 10, 5, "cuda_runtime", correlation_id=2 * k + 1)
        b.event(s, "qk", o + 100, 100, "kernel", correlation_id=2 * k + 1)
        b.event(th, "cudaLaunchKernel", o + 20, 5, "cuda_runtime", correlation_id=2 * k + 2)
        b.event(s, "softmax", o + 300, 100, "kernel", correlation_id=2 * k + 2)
    # a longer section that sorts first by time and by name: its projection stays its own
    b.event(th, "Backward", 5000, 2000, "section")
    b.event(th, "cudaLaunchKernel", 5010, 5, "cuda_runtime", correlation_id=99)
    b.event(s, "grad", 5100, 50, "kernel", correlation_id=99)
    b.counter(host, "process.rss_bytes", np.array([0, 499, 999, 1499, 2600]), np.array([10.0, 15, 20, 22, 40]))
    table = A.section_stats(b.build())
    assert table["name"].tolist() == ["Backward", "Self Attention"]
    bw = table.to_pandas().set_index("name").loc["Backward"]
    assert (bw["count"], bw["device_ops"], bw["device_ns"], bw["projected_ns"]) == (1, 1, 50, 50)
    sec = table.to_pandas().set_index("name").loc["Self Attention"]
    assert (sec["count"], sec["total_ns"], sec["p99_ns"]) == (3, 1500, 500)
    assert (sec["device_ops"], sec["device_ns"], sec["projected_ns"]) == (6, 600, 900)
    assert sec["device_util_pct"] == pytest.approx(100 * 600 / 900)
    # last sample at or before end minus at or before start, per instance:
    # [0,500): 15-10; [1000,1500): 22-20; [2000,2500): 22-22 (the 2600 sample is after it)
    assert sec["mem_delta_bytes"] == 7


def test_step_stats_and_findings():
    t = gpu_trace()
    ss = A.step_stats(t)
    assert ss["step"].tolist() == [1, 2]
    r = ss.to_dicts()[0]
    assert (r["busy_ns"], r["compute_ns"], r["idle_ns"], r["launch_count"]) == (160 * US, 110 * US, 840 * US, 3)
    assert (r["device_start_ns"], r["device_end_ns"]) == (50 * US, 650 * US)
    assert (ss["busy_ns"] + ss["idle_ns"] == ss["host_ns"]).all()
    ids = {f.id for f in A.findings(t)}
    assert {"host_bound", "copy_bound", "sync_stalls", "idle_between_steps"} <= ids
    assert "launch_bound" not in ids  # 4 kernels is not "many"


def test_launch_bound_finding_on_many_short_kernels():
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    s = b.track(b.plane("/device:GPU:0", "device"), "s", "stream", tid=1)
    n = 500
    st = np.arange(n, dtype=np.int64) * 10 * US
    b.events(th, np.full(n, "cudaLaunchKernel", object), st, np.full(n, 8 * US), "cuda_runtime",
             stats={"correlation_id": np.arange(n)})
    b.events(s, np.full(n, "elementwise", object), st + 9 * US, np.full(n, 2 * US), "kernel",
             stats={"correlation_id": np.arange(n)})
    f = {x.id: x for x in A.findings(b.build())}
    assert "launch_bound" in f
    assert f["launch_bound"].evidence["kernels"] == n
    assert f["launch_bound"].events[0]["name"] == "elementwise"


def _launches(per_call: int, calls: int, call_us: int, kernel_us: int):
    """``calls`` launch calls of ``call_us`` each, every one launching ``per_call`` kernels of
    ``kernel_us`` (one: cudaLaunchKernel; many: a CUDA graph's replay), the device idle
    half of the time between them."""
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    s = b.track(b.plane("/device:GPU:0", "device"), "s", "stream", tid=1)
    period = 2 * (call_us + per_call * kernel_us) * US
    st = np.arange(calls, dtype=np.int64) * period
    name = "cudaGraphLaunch" if per_call > 1 else "cudaLaunchKernel"
    b.events(th, np.full(calls, name, object), st, np.full(calls, call_us * US), "cuda_runtime",
             stats={"correlation_id": np.arange(calls)})
    k = np.repeat(st + call_us * US, per_call) + np.tile(np.arange(per_call) * kernel_us * US, calls)
    b.events(s, np.full(calls * per_call, "gemm", object), k, np.full(calls * per_call, kernel_us * US), "kernel",
             stats={"correlation_id": np.repeat(np.arange(calls), per_call)})
    return {x.id: x for x in A.findings(b.build())}


def test_launch_bound_weighs_a_graph_launch_against_all_its_kernels():
    """A launch call slower than its kernel is launch-bound; a graph launch is shared by
    every kernel of its replay: 1 ms to launch 100 kernels of 20 µs is 10 µs per kernel."""
    one = _launches(per_call=1, calls=400, call_us=30, kernel_us=20)["launch_bound"]
    assert one.title.startswith("launch calls take longer than the 400 kernels they launch "
                                "(median 20.0 µs, launch call 30.0 µs)")
    assert one.evidence["median_launch_cpu_ns"] == 30 * US and one.evidence["median_kernel_ns"] == 20 * US
    assert "launch_bound" not in _launches(per_call=100, calls=20, call_us=1000, kernel_us=20)
    slow = _launches(per_call=100, calls=20, call_us=3000, kernel_us=20)["launch_bound"]
    assert slow.evidence["median_launch_cpu_ns"] == 30 * US
    assert "(median 20.0 µs, launch call per kernel 30.0 µs)" in slow.title
    assert "already run from graph replays" in slow.suggestion and "graph replays" not in one.suggestion


def test_empty_and_host_only_traces_give_empty_tables():
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    b.event(th, "work", 0, 100, "section")
    t = b.build()
    for fn in (A.temporal_breakdown, A.idle_time_breakdown, A.kernel_breakdown, A.op_stats, A.launch_stats,
               A.comm_comp_overlap, A.step_stats):
        assert len(fn(t)) == 0, fn.__name__
    assert A.section_stats(t)["name"].tolist() == ["work"]
    assert A.findings(t) == []
    assert len(A.temporal_breakdown(TraceBuilder().build())) == 0


def test_every_analysis_documents_each_of_its_columns():
    import inspect
    import re

    from .synth import gpu_trace

    t = gpu_trace()
    for name in A.__all__:
        fn = getattr(A, name)
        if name in ("findings", "Finding"):
            continue
        documented = set(re.findall(r"``([a-z0-9_]+)``", inspect.getdoc(fn) or ""))
        missing = set(fn(t).columns) - documented
        assert not missing, f"{name}: columns not in its docstring: {sorted(missing)}"


def test_summary_tables_are_tables_with_text_as_numpy_objects(traces_dir):
    """Every table of a summary is a Table; text columns are NumPy object arrays of str,
    and stay ``object`` (not pandas 3's Arrow strings) in ``to_pandas()``."""
    import polyprof
    from polyprof.analyze.table import Table
    from polyprof.report.tables import build

    report = build(polyprof.load(traces_dir / "kineto" / "v100_ns_resolution_rank0.json.gz"))
    for name, t in report.tables.items():
        assert isinstance(t, Table), name
        for c in t.columns:
            assert t[c].dtype.kind in "biufO", (name, c)
            assert t[c].dtype != object or all(type(v) is str for v in t[c].tolist()), (name, c)
        df = t.to_pandas()
        assert df.columns.dtype == object and all(df[c].dtype != "str" for c in df.columns), name
    assert isinstance(report.tables["kernel_breakdown"]["name"][0], str)


def test_event_stats_agrees_with_a_pandas_groupby(traces_dir):
    import polyprof

    trace = polyprof.load(traces_dir / "kineto" / "v100_ns_resolution_rank0.json.gz")
    got = A.event_stats(trace).to_pandas()
    ev = trace.to_pandas()
    ev = ev[ev["dur_ns"] > 0]
    gb = ev.groupby([ev["category"].astype(object), ev["name"].astype(object)])["dur_ns"]
    want = gb.agg(["size", "sum", "median", "max"])
    want["p99"] = gb.quantile(0.99)
    assert len(got) == len(want) > 50
    assert got["total_ns"].tolist() == sorted(got["total_ns"], reverse=True)
    for row in got.itertuples():
        w = want.loc[(row.category, row.name)]
        assert (row.count, row.total_ns, row.max_ns) == (w["size"], w["sum"], w["max"])
        assert np.isclose(row.median_ns, w["median"]) and np.isclose(row.p99_ns, w["p99"])


def _step_stats_by_loop(t):
    """The per-step reference: each step and device on its own (clip, union, sum)."""
    from polyprof.analyze.common import COMPUTE, device_view
    from polyprof.derive import cache
    from polyprof.derive.intervals import clip_union

    steps, v, ev = cache.steps(t), device_view(t), t.events
    of = steps.of(np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start))
    rows = []
    for i in range(len(steps)):
        a, b = int(steps.start[i]), int(steps.end[i])
        for plane in np.unique(v.plane).tolist():
            on = v.plane == plane
            bs, be = clip_union(v.start[on], v.end[on], a, b)
            comp = on & (v.cls == COMPUTE)
            cs, ce = clip_union(v.start[comp], v.end[comp], a, b)
            mine = on & (of == i)
            launched = mine & (v.launch >= 0)
            ld = ev["dur_ns"][np.unique(v.launch[launched])]
            busy, compute = int((be - bs).sum()), int((ce - cs).sum())
            rows.append((int(steps.number[i]), t.planes[plane].name, a, b, b - a,
                         int(v.start[mine].min()) if mine.any() else -1, int(v.end[mine].max()) if mine.any() else -1,
                         busy, compute, busy - compute, (b - a) - busy, int(launched.sum()), len(ld),
                         float(ld.mean()) if len(ld) else 0.0, int(ld.max()) if len(ld) else 0,
                         int((mine & ~launched).sum())))
    return rows


@pytest.mark.parametrize("seed", range(4))
def test_step_stats_of_every_step_at_once_equal_step_by_step(seed):
    """Random overlapping kernels and copies on two GPUs, launched from one thread or not
    at all, some outside every step: step_stats' columns, from one pass per device, equal
    the step-by-step reference."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    streams = [b.track(b.plane(f"/device:GPU:{g}", "device"), "s", "stream", tid=1) for g in range(2)]
    nsteps = 7
    b.events(th, np.array([f"ProfilerStep#{i}" for i in range(nsteps)], object), np.arange(nsteps) * 1000 * US,
             np.full(nsteps, 900 * US), "user_annotation")
    n = 300
    launch = np.sort(rng.integers(0, nsteps * 1000, n)) * US
    b.events(th, np.full(n, "cudaLaunchKernel", object), launch, rng.integers(1, 20, n) * US, "cuda_runtime",
             stats={"correlation_id": np.arange(n)})
    start = launch + rng.integers(0, 3000, n) * US
    for tr in streams:
        sel = np.flatnonzero(rng.random(n) < 0.5)
        b.events(tr, np.where(rng.random(len(sel)) < 0.8, "gemm", "Memcpy HtoD"), start[sel],
                 rng.integers(1, 400, len(sel)) * US, np.where(rng.random(len(sel)) < 0.8, "kernel", "gpu_memcpy"),
                 stats={"correlation_id": np.where(rng.random(len(sel)) < 0.9, sel, 10_000 + sel)})
    t = b.build()
    got = A.step_stats(t)
    want = _step_stats_by_loop(t)
    assert len(want) == len(got) == nsteps * 2
    for c, col in enumerate(got.columns):
        ref = [r[c] for r in want]
        vals = got[col].tolist()
        assert vals == pytest.approx(ref) if col == "launch_mean_ns" else vals == ref, col
