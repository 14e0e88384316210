"""Each finding fires on a trace that has its problem and stays quiet on one that does not.

The traces are small training loops in the shape torch.profiler records them
(``synth.pipeline_trace``): healthy by default, with one problem switched on per case.
"""

from __future__ import annotations

import pytest

import polyprof.analyze as A

from .synth import pipeline_trace

ALL = {"host_bound", "input_bound", "launch_bound", "copy_bound", "sync_stalls", "idle_between_steps",
       "exposed_communication", "queued_stall"}

# case -> (pipeline_trace arguments, findings that must fire, findings that must not)
CASES = {
    "healthy": ({}, set(), ALL),
    "host_bound": ({"kernel_us": 100}, {"host_bound"}, ALL - {"host_bound"}),
    "input_bound": ({"loader_us": 4000, "kernel_us": 250}, {"input_bound"}, {"launch_bound", "copy_bound",
                                                                            "sync_stalls"}),
    "small_input": ({"loader_us": 200}, set(), {"input_bound"}),
    "launch_bound": ({"kernels": 400, "kernel_us": 5, "step_us": 6000}, {"launch_bound"},
                     {"copy_bound", "sync_stalls", "input_bound"}),
    "copy_bound": ({"copy_us": 3000, "kernel_us": 300}, {"copy_bound"}, ALL - {"copy_bound"}),
    # a few small copies on a device that is idle anyway: the host is the problem, not copies
    "small_copies_on_idle_device": ({"copy_us": 40, "kernels": 2, "kernel_us": 40}, {"host_bound"},
                                    {"copy_bound"}),
    "sync_in_steps": ({"sync_us": 3000, "kernel_us": 300}, {"sync_stalls"}, {"copy_bound", "launch_bound"}),
    # torch.profiler synchronises once when it stops, after the last step: not a stall of the loop
    "profiler_sync_after_last_step": ({"end_sync_us": 20_000}, set(), ALL),
    "idle_between_steps": ({"host_gap_us": 3000}, {"idle_between_steps"}, ALL - {"idle_between_steps"}),
    # the stream waits on an event another records 3 ms later: the device idle, the host not late
    "queued_stall": ({"stall_us": 3000}, {"queued_stall"}, ALL - {"queued_stall", "idle_between_steps"}),
    # ... for 40 µs: launch latency, not a stall
    "short_queued_wait": ({"stall_us": 40}, set(), ALL),
}


@pytest.mark.parametrize("case", list(CASES))
def test_finding_fires_only_on_its_problem(case):
    kwargs, must, must_not = CASES[case]
    got = {f.id for f in A.findings(pipeline_trace(**kwargs))}
    assert must <= got, (case, got)
    assert not (must_not & got), (case, got)


@pytest.mark.parametrize("name, fires", [
    ("prefetch_to_device", True),  # flax's / JAX's input prefetch
    ("PrefetchDataset", True), ("Iterator::Prefetch", True),  # tf.data
    ("cudaMemPrefetchAsync", False),  # CUDA's unified memory, not an input pipeline
    ("context.prefetchInputs", False),  # Bazel's action inputs (EngFlow's Bazel profiles)
])
def test_input_bound_by_name_not_any_prefetch(name, fires):
    """Input-pipeline work is named for it; a name that only holds "prefetch" (CUDA's
    unified-memory prefetch, a build tool's) is not."""
    got = {f.id for f in A.findings(pipeline_trace(loader_us=4000, kernel_us=250, loader_name=name))}
    assert ("input_bound" in got) == fires, got


def test_sync_share_is_per_thread_and_never_exceeds_100_percent():
    # four threads each block 3 ms of every 10 ms step: each thread waits 30%, not 120%
    f = {x.id: x for x in A.findings(pipeline_trace(sync_us=3000, kernel_us=300, sync_threads=4))}
    ev = f["sync_stalls"].evidence
    assert ev["share_pct"] == pytest.approx(30.0)
    assert ev["threads_syncing"] == 4
    assert f["sync_stalls"].events[0]["name"] == "cudaStreamSynchronize"
    by_thread = A.sync_by_thread(pipeline_trace(sync_us=3000, kernel_us=300, sync_threads=4)).to_pandas()
    assert len(by_thread) == 4 and (by_thread["share_pct"] <= 100).all()
    assert (by_thread["calls"] == 5).all()


def test_copy_bound_names_its_device_and_share_of_span():
    f = {x.id: x for x in A.findings(pipeline_trace(copy_us=3000, kernel_us=300))}["copy_bound"]
    assert f.plane == "/device:GPU:0"
    assert f.evidence["copy_pct_of_span"] == pytest.approx(30.0, abs=0.5)


def test_real_traces_no_false_sync_finding_from_the_profilers_own_sync(kineto_files):
    pytest.importorskip("polyprof.formats.kineto")
    import polyprof

    path = next(p for p in kineto_files if p.name.startswith("v100"))
    # its only sync is torch.profiler's cudaDeviceSynchronize after ProfilerStep#105
    assert "sync_stalls" not in {f.id for f in A.findings(polyprof.load(path))}
    mtia = next((p for p in kineto_files if p.name.startswith("mtia")), None)
    if mtia is not None:
        for f in A.findings(polyprof.load(mtia)):
            if f.id == "sync_stalls":
                assert f.evidence["share_pct"] <= 100
                assert "thread thread" not in f.title


def test_host_bound_evidence_holds_together_in_htas_window(kineto_files):
    """Under ``--window hta`` the idle table's all-streams row adds up every stream's idle
    (HTA's rule: 739 ms of host wait in the A100 NCCL trace's 436 ms span); the finding's
    host wait is its share of the device's idle time, so never more than that."""
    import polyprof
    from polyprof.analyze.window import HTA

    seen = 0
    for path in kineto_files:
        trace = polyprof.load(path)
        for f in A.findings(trace, window=HTA):
            if f.id == "host_bound":
                ev = f.evidence
                assert ev["host_wait_ns"] <= ev["idle_ns"] <= ev["span_ns"], (path.name, ev)
                assert ev["host_wait_pct_of_idle"] >= 50, (path.name, ev)  # never NaN (no idle to share)
                seen += 1
    assert seen >= 2


def test_tpu_async_copies_are_copies_and_one_finding_covers_all_devices(traces_dir):
    """The TPU sample spends most device time in XLA copy-done ops: copy time, not compute;
    the four devices have the same problem, reported once with the others named."""
    import polyprof

    tr = polyprof.load(traces_dir / "xspace" / "tpu_inference_2.xplane.pb")
    kb = A.kernel_breakdown(tr).to_pandas()
    copy_done = kb[kb["name"].str.startswith("copy-done")]
    assert len(copy_done) and set(copy_done["kind"]) == {"memcpy"}
    assert set(kb.loc[kb["name"].str.contains("fusion"), "kind"]) == {"compute"}
    tb = A.temporal_breakdown(tr).to_pandas()
    dev = tb[tb["track_id"] == -1]
    assert (dev["non_compute_pct"] > dev["compute_pct"]).all()
    found = [f for f in A.findings(tr) if f.id == "copy_bound"]
    assert len(found) == 1
    planes = {found[0].plane, *found[0].evidence["also_on"]}
    assert planes == {f"/device:TPU:{i}" for i in range(4)}
    # its top events: that device's copies and fills, ranked as the per-device kernel
    # breakdown ranks them (by total device time; XProf's per-op time, in float ns)
    by_dev = A.kernel_breakdown(tr, by_device=True).to_pandas()
    want = by_dev[(by_dev["plane"] == found[0].plane) & by_dev["kind"].isin(["memcpy", "memset"])]
    want = want.sort_values("total_ns", ascending=False, kind="stable").head(5)
    assert len(found[0].events) == len(want) == 5
    assert [e["name"] for e in found[0].events] == want["name"].tolist()
    assert [e["count"] for e in found[0].events] == want["count"].tolist()
    assert [e["total_ns"] for e in found[0].events] == want["total_ns"].tolist()
    assert [e["mean_ns"] for e in found[0].events] == want["mean_ns"].tolist()
    assert all(e["name"].startswith("copy") for e in found[0].events)


def test_mtia_command_processor_events_are_told_apart_by_name(traces_dir):
    import polyprof

    tr = polyprof.load(traces_dir / "kineto" / "mtia_inference_rank0.json.gz")
    kind = A.kernel_breakdown(tr).to_pandas().set_index("name")["kind"]
    assert kind["pe_exe"] == "compute" and kind["merge"] == "compute"
    assert kind["dma_request"] == "memcpy"
    assert "event_wait" not in kind.index  # waiting is not device activity


def test_sync_calls_by_category_and_name_as_a_pandas_groupby():
    """The sync_stalls evidence groups its calls with NumPy: the same rows, counts, totals
    and order (ties included) as the groupby it replaced."""
    import numpy as np
    import pandas as pd

    from polyprof.analyze.findings import _by_category_and_name
    from polyprof.trace import TraceBuilder

    rng = np.random.default_rng(5)
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", "thread", tid=1)
    names = ["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "clFinish"]
    for i in range(200):
        b.event(th, names[int(rng.integers(4))], 10 * i, int(rng.choice([5, 5, 7, 9])),
                ["cuda_runtime", "cuda_sync"][int(rng.integers(2))])
    trace = b.build()
    rows = np.flatnonzero(rng.random(trace.n_events) < 0.7)
    ev = trace.events
    want = pd.DataFrame({"category": [trace.strings[c] for c in ev["category"][rows]],
                         "name": [trace.strings[n] for n in ev["name"][rows]], "dur": ev["dur_ns"][rows]})
    want = want.groupby(["category", "name"], sort=False)["dur"].agg(count="size", total_ns="sum").reset_index()
    want = want.sort_values("total_ns", ascending=False)
    got = _by_category_and_name(trace, rows)
    assert len(got) == 8
    assert got.to_dicts() == want.to_dict("records")
    assert len(_by_category_and_name(trace, rows[:0])) == 0


def test_sync_stall_of_a_device_bound_loop_is_low():
    """Kernels queued back to back keep the device busy through each step's 3 ms
    cudaStreamSynchronize: the host waits 30% of the step for nothing the device loses.
    The finding's evidence has the device's idle in and after the waits, it is low and
    its advice says why; the same wait with kernels that leave the device idle during it
    is high."""
    busy = {f.id: f for f in A.findings(pipeline_trace(sync_us=3000))}["sync_stalls"]
    assert busy.evidence["share_pct"] == pytest.approx(30.0)
    assert busy.evidence["device_idle_pct"] < 2 and busy.severity == "low", busy
    assert "device-bound" in busy.suggestion
    idle = {f.id: f for f in A.findings(pipeline_trace(sync_us=3000, kernel_us=300))}["sync_stalls"]
    assert idle.evidence["device_idle_pct"] > 30 and idle.severity == "high", idle
    assert "device-bound" not in idle.suggestion


def test_sync_stall_gains_at_most_the_hosts_wait():
    """A host-bound loop: 15% of each step in a sync, and the device, done with its short
    kernels, idle through it and the 1 ms the host takes to launch the next step's first
    one: over 20% of the step. Without the sync the host gains its 15%, no more (the
    rest of the idle is the host's slowness): medium, not high."""
    f = {f.id: f for f in A.findings(pipeline_trace(sync_us=1500, kernel_us=50, lead_us=1000))}["sync_stalls"]
    assert f.evidence["share_pct"] == pytest.approx(15.0)
    assert f.evidence["device_idle_pct"] > 20
    assert f.severity == "medium"


def test_device_idle_by_sync_calls_counts_each_idle_stretch_once():
    """Device work [0, 10) and [50, 60) ns; the windows [0, 40) and [45, 100). A call
    ending while the device works costs nothing; two calls ending in the gap count it
    once, from the first one's start; after the device's last work, to the windows' end."""
    import numpy as np

    from polyprof.analyze.sync import device_idle_by
    from polyprof.trace import TraceBuilder

    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host"), "main", "thread", tid=1)
    s = b.track(b.plane("/device:GPU:0", "device"), "stream 7", "stream", tid=7)
    for i, (a, d) in enumerate(((0, 10), (50, 10))):
        b.event(th, "cudaLaunchKernel", a, 1, "cuda_runtime", correlation_id=i + 1)
        b.event(s, "k", a, d, "kernel", correlation_id=i + 1, stream=7)
    t = b.build()
    ws, we = np.array([0, 45]), np.array([40, 100])

    def idle(*calls):
        return device_idle_by(t, np.array([c[0] for c in calls]), np.array([c[1] for c in calls]), ws, we)

    assert idle((5, 8)) == 0
    assert idle((12, 20)) == (40 - 12) + (50 - 45)
    assert idle((12, 20), (15, 30)) == idle((12, 20))
    assert idle((5, 20)) == (40 - 10) + (50 - 45)  # from the device's last work, not the call's start
    assert idle((70, 80)) == 30
    empty = TraceBuilder()
    empty.event(empty.track(empty.plane("/host:CPU", "host"), "main", "thread", tid=1), "clFinish", 0, 5, "sync")
    assert device_idle_by(empty.build(), np.array([0]), np.array([5]), ws, we) is None


def test_sync_stall_of_the_h200_transformer_is_low():
    """The H200 transformer (tests/data/h200) synchronises once a step and its host waits
    49% of the step there, while the GPU computes 96% of it: a device-bound loop whose
    syncs cost the device 1.4% of the step (its idle from each sync's end to the next
    kernel)."""
    from pathlib import Path

    import polyprof

    t = polyprof.load(Path(__file__).parents[1] / "data" / "h200" / "torch_transformer_h200.json.gz")
    f = {f.id: f for f in A.findings(t, window="auto")}["sync_stalls"]
    assert f.evidence["share_pct"] == pytest.approx(49.3, abs=0.1)
    assert f.evidence["device_idle_pct"] == pytest.approx(1.4, abs=0.1)
    assert f.severity == "low" and f.events[0]["name"] == "cudaDeviceSynchronize"
