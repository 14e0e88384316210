"""The OpenCL plugin on a real device (PoCL through pyopencl)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

cl = pytest.importorskip("pyopencl")
pytestmark = pytest.mark.opencl  # conftest: skipped, with the reason, where no device compiles

import polyprof  # noqa: E402
from polyprof.plugins.opencl import OpenCLPlugin  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
EXAMPLE = ROOT / "examples" / "opencl_pipeline.py"
FRAMES = 4
H, W = 96, 128
ARGS = ["--frames", str(FRAMES), "--height", str(H), "--width", str(W)]

if not OpenCLPlugin.availability():
    pytest.skip(f"no OpenCL device: {OpenCLPlugin.availability().reason}", allow_module_level=True)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *[p for p in [env.get("PYTHONPATH")] if p]])
    env["COLUMNS"] = "250"  # rich must not wrap the reasons we look for
    env.update(extra)
    return env


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240,
                          env=env or _env(), cwd=cwd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("opencl")
    trace = d / "pipeline.polyprof"
    p = _run("-m", "polyprof", "run", "--no-summary", "-o", str(trace), str(EXAMPLE), *ARGS,
             "--save", str(d / "with.npz"), cwd=d)
    assert p.returncode == 0, p.stderr
    p2 = _run(str(EXAMPLE), *ARGS, "--save", str(d / "without.npz"), cwd=d)
    assert p2.returncode == 0, p2.stderr
    return {"trace": trace, "with": d / "with.npz", "without": d / "without.npz"}


@pytest.fixture(scope="module")
def trace(runs: dict[str, Path]) -> polyprof.Trace:
    return polyprof.load(runs["trace"])


@pytest.fixture(scope="module")
def df(trace: polyprof.Trace) -> pd.DataFrame:
    return _frame(trace)


def _frame(trace: polyprof.Trace) -> pd.DataFrame:
    d = trace.to_pandas()
    for c in d.select_dtypes("category").columns:
        d[c] = d[c].astype(object)
    return d


def test_results_unchanged_by_profiling(runs: dict[str, Path]) -> None:
    a, b = np.load(runs["with"]), np.load(runs["without"])
    assert a["mags"].shape == (FRAMES, H, W)
    np.testing.assert_array_equal(a["mags"], b["mags"])
    np.testing.assert_array_equal(a["sums"], b["sums"])


def test_host_api_events(df: pd.DataFrame) -> None:
    api = df[df.category == "opencl_api"]
    assert set(api.plane) == {"/host:CPU"}
    assert set(api.track) == {"MainThread"}
    counts = api.name.value_counts()
    assert counts["clEnqueueNDRangeKernel"] == 4 * FRAMES
    assert counts["clEnqueueWriteBuffer"] == FRAMES
    assert counts["clEnqueueReadBuffer"] == FRAMES
    assert counts["clEnqueueFillBuffer"] == FRAMES
    assert counts["clEnqueueMapBuffer"] == FRAMES
    assert counts["clEnqueueUnmapMemObject"] == FRAMES
    assert counts["clWaitForEvents"] == 3 * FRAMES  # Event.wait x2, wait_for_events x1
    assert counts["clFinish"] >= 2
    assert api.correlation_id.notna().all() and api.correlation_id.is_unique
    launches = api[api.name == "clEnqueueNDRangeKernel"]
    assert sorted(set(launches.kernel)) == ["blur_h", "blur_v", "reduce_sum", "sobel"]
    assert set(launches[launches.kernel == "blur_h"].grid) == {f"{W},{H}"}
    assert set(launches[launches.kernel == "reduce_sum"].block) == {"64"}
    # the host API events sit inside the sections that issued them
    secs = df[df.category == "section"]
    for name, kernel in (("blur", "blur_h"), ("gradient", "sobel"), ("reduce", "reduce_sum")):
        s = secs[secs.name == name]
        for _, ev in launches[launches.kernel == kernel].iterrows():
            assert ((s.start_ns <= ev.start_ns) & (s.end_ns >= ev.end_ns)).any(), (name, kernel)


def test_device_tracks_kernels_and_transfers(trace: polyprof.Trace, df: pd.DataFrame) -> None:
    plane = next(p for p in trace.planes if p.name == "/device:OpenCL:0")
    assert plane.kind == "device" and plane.properties.get("name")
    dev = df[df.plane == "/device:OpenCL:0"]
    assert set(dev.track) == {"Queue 0", "Queue 1"}  # copy queue, compute queue
    kern = dev[dev.category == "kernel"]
    assert kern.name.value_counts().to_dict() == {"blur_h": FRAMES, "blur_v": FRAMES, "sobel": FRAMES,
                                                  "reduce_sum": FRAMES}
    assert set(kern.track) == {"Queue 1"}
    assert (kern.dur_ns > 0).all()
    assert set(kern[kern.name == "sobel"].grid) == {f"{W},{H}"}
    copies = dev[dev.category == "gpu_memcpy"]
    assert set(copies.name) == {"WriteBuffer (HtoD)", "ReadBuffer (DtoH)"}
    assert set(copies.bytes) == {H * W * 4}
    assert set(copies.track) == {"Queue 0"}
    fills = dev[dev.category == "gpu_memset"]
    assert len(fills) == FRAMES and set(fills.bytes) == {64 * 4}
    maps = dev[dev.category == "opencl_map"]
    assert sorted(set(maps.name)) == ["MapBuffer", "UnmapMemObject"]
    assert (dev.queue_delay_ns >= 0).all()
    assert trace.metadata["opencl"]["queues_made_profiling"] == 2  # both made without profiling
    assert trace.metadata["opencl"]["incomplete"] == 0


def test_flows_link_each_launch_to_its_device_activity(trace: polyprof.Trace, df: pd.DataFrame) -> None:
    fl = trace.flows
    dev_rows = np.flatnonzero(df.plane.to_numpy() == "/device:OpenCL:0")
    assert len(fl["src"]) == len(dev_rows)
    assert set(fl["dst"].tolist()) == set(dev_rows.tolist())
    src, dst = df.iloc[fl["src"]], df.iloc[fl["dst"]]
    assert (src.category.to_numpy() == "opencl_api").all()
    assert (src.correlation_id.to_numpy() == dst.correlation_id.to_numpy()).all()
    assert (fl["id"] == dst.correlation_id.to_numpy()).all()
    assert {trace.strings[c] for c in fl["category"]} == {"ac2g"}
    launch_kernel = src.kernel.to_numpy()
    is_kernel = dst.category.to_numpy() == "kernel"
    assert (launch_kernel[is_kernel] == dst.name.to_numpy()[is_kernel]).all()


def test_clock_sync_recorded_and_device_times_ordered(trace: polyprof.Trace, df: pd.DataFrame) -> None:
    sync = trace.metadata["clock_sync"]["/device:OpenCL:0"]["opencl"]
    assert sync["consistent"]
    assert sync["device_clock"] == "CLOCK_MONOTONIC_RAW"  # PoCL's timestamps, checked at stop
    assert 0 < sync["bound_ns"] < 50_000
    bound = sync["bound_ns"] + sync["growth_ppm"] * 1e-6 * 1e9  # generous: 1 s of extrapolation
    api = df[df.category == "opencl_api"]
    by_corr = api.set_index("correlation_id")
    dev = df[df.plane == "/device:OpenCL:0"]
    syncs = api[(api.name.isin(["clFinish", "clWaitForEvents"])) | (api.blocking == 1)]
    for _, ev in dev.iterrows():
        launch = by_corr.loc[ev.correlation_id]
        assert ev.start_ns >= launch.start_ns - bound, (ev["name"], ev.start_ns - launch.start_ns)
        # the first wait on this queue that covers the command (in-order queues)
        cover = syncs[(syncs.queue == ev.queue) & (syncs.start_ns >= launch.start_ns)
                      & ((syncs.name == "clFinish") | (syncs.waits_for >= ev.correlation_id)
                         | ((syncs.blocking == 1) & (syncs.correlation_id >= ev.correlation_id)))]
        assert len(cover), ev["name"]
        first = cover.sort_values("start_ns").iloc[0]
        assert ev.end_ns <= first.end_ns + bound, (ev["name"], first["name"], ev.end_ns - first.end_ns)


def _kernel_program(ctx: "cl.Context") -> "cl.Program":
    return cl.Program(ctx, "__kernel void twice(__global float *a) { a[get_global_id(0)] *= 2.0f; }").build()


def _real_properties(q: "cl.CommandQueue") -> int:
    return int(q.get_info(cl.command_queue_info.PROPERTIES))


def test_queue_without_profiling_in_process_and_unpatched_after() -> None:
    import pyopencl._cl as _cl

    originals = (cl.CommandQueue, _cl.enqueue_nd_range_kernel, _cl._enqueue_read_buffer,
                 _cl.Event.__dict__["wait"], _cl.CommandQueue.__dict__["finish"], cl.enqueue_nd_range_kernel,
                 _cl.CommandQueue.__dict__["properties"], _cl.CommandQueue.__dict__["_finalize"])
    ctx = cl.create_some_context(interactive=False)
    prg = _kernel_program(ctx)
    a = np.arange(4096, dtype=np.float32)
    with polyprof.profile(plugins=["opencl"]) as prof:
        q = cl.CommandQueue(ctx)  # no profiling asked for
        ooo = cl.CommandQueue(ctx, properties=cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
        assert isinstance(q, cl.CommandQueue) and isinstance(q, _cl.CommandQueue)
        P = cl.command_queue_properties
        assert _real_properties(q) & P.PROFILING_ENABLE
        assert _real_properties(ooo) & P.OUT_OF_ORDER_EXEC_MODE_ENABLE
        assert _real_properties(ooo) & P.PROFILING_ENABLE
        # what the program sees is what it asked for
        assert q.properties == 0 and ooo.properties == P.OUT_OF_ORDER_EXEC_MODE_ENABLE
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
        knl = cl.Kernel(prg, "twice")
        knl(q, a.shape, None, buf)
        prg.twice(q, a.shape, None, buf)
        knl.set_args(buf)
        cl.enqueue_nd_range_kernel(ooo, knl, a.shape, None).wait()
        out = np.empty_like(a)
        cl.enqueue_copy(q, out, buf)
        q.finish()
    np.testing.assert_array_equal(out, a * 8)
    assert (cl.CommandQueue, _cl.enqueue_nd_range_kernel, _cl._enqueue_read_buffer, _cl.Event.__dict__["wait"],
            _cl.CommandQueue.__dict__["finish"], cl.enqueue_nd_range_kernel, _cl.CommandQueue.__dict__["properties"],
            _cl.CommandQueue.__dict__["_finalize"]) == originals
    df = _frame(prof.trace)
    dev = df[df.plane == "/device:OpenCL:0"]
    assert (dev[dev.category == "kernel"].name == "twice").sum() == 3
    assert set(dev.track) == {"Queue 0", "Queue 1"}
    assert prof.trace.metadata["plugins"]["opencl"] == "ok"


def test_pending_commands_at_stop_are_reported_incomplete() -> None:
    ctx = cl.create_some_context(interactive=False)
    prg = _kernel_program(ctx)
    a = np.ones(256, np.float32)
    gate = cl.UserEvent(ctx)
    with polyprof.profile(plugins=["opencl"], options={"opencl": {"stop_timeout_s": 0.2}}) as prof:
        q = cl.CommandQueue(ctx)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
        cl.Kernel(prg, "twice")(q, a.shape, None, buf)
        q.finish()
        cl.Kernel(prg, "twice")(q, a.shape, None, buf, wait_for=[gate])  # held until after stop
    gate.set_status(cl.command_execution_status.COMPLETE)
    q.finish()
    t = prof.trace
    df = _frame(t)
    launches = df[df.name == "clEnqueueNDRangeKernel"]
    assert len(launches) == 2
    assert launches.incomplete.fillna(0).tolist() == [0, 1]
    assert ((df.plane == "/device:OpenCL:0") & (df.category == "kernel")).sum() == 1
    assert t.metadata["opencl"]["incomplete"] == 1
    assert any("pending" in w for w in t.metadata["warnings"])


def test_without_pyopencl_plugins_says_why_and_profiling_works(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['pyopencl'] = None\n")
    env = _env(PYTHONPATH=os.pathsep.join([str(site), str(SRC)]))
    p = _run("-c", "import pyopencl", env=env)
    assert p.returncode != 0 and ("ModuleNotFoundError" in p.stderr or "ImportError" in p.stderr)
    p = _run("-m", "polyprof", "plugins", env=env)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "opencl" in ln)
    assert "no" in line and "pyopencl not installed" in line
    out = tmp_path / "t.polyprof"
    p = _run("-m", "polyprof", "run", "--no-summary", "-o", str(out),
             str(ROOT / "examples" / "threaded_pipeline.py"), "--steps", "3", env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    t = polyprof.load(out)
    # a default plugin that cannot run is named with the reason, not run
    assert t.metadata["plugins"]["opencl"].startswith("unavailable: pyopencl not installed")
    assert (t.to_pandas().category == "section").sum() > 0


def test_without_device_plugins_says_why(tmp_path: Path) -> None:
    env = _env(POCL_DEVICES="nonexistent")  # PoCL then offers a platform with no device
    p = _run("-m", "polyprof", "plugins", env=env)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "opencl" in ln)
    assert "no OpenCL device found" in line
    # profiling a script still works, with the other plugins
    out = tmp_path / "t.polyprof"
    p = _run("-m", "polyprof", "run", "--no-summary", "-o", str(out),
             str(ROOT / "examples" / "threaded_pipeline.py"), "--steps", "3", env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    t = polyprof.load(out)
    # the script never imports pyopencl: the plugin waited for it and recorded nothing
    assert t.metadata["opencl"] == {"api_calls": 0, "device_events": 0, "pyopencl_imported": False}
    assert t.metadata["plugins"]["host"] == "ok"
    assert (t.to_pandas().category == "section").sum() > 0 and not t.metadata["plugin_errors"]
    # a script that imports pyopencl: the devices are checked then, and the reason given
    script = tmp_path / "uses_opencl.py"
    script.write_text("import polyprof, pyopencl\nwith polyprof.section('after import'):\n    pass\n")
    p = _run("-m", "polyprof", "run", "--no-summary", "-o", str(out), str(script), env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    t = polyprof.load(out)
    why = [w for w in t.metadata.get("warnings", []) if w.startswith("opencl:")]
    assert len(why) == 1 and "pyopencl was imported but no OpenCL device found" in why[0], why
    assert (t.to_pandas().name == "after import").sum() == 1 and not t.metadata["plugin_errors"]


def test_launches_from_a_worker_thread_land_on_its_track() -> None:
    import threading

    ctx = cl.create_some_context(interactive=False)
    prg = _kernel_program(ctx)
    a = np.ones(1024, np.float32)
    tids: dict[str, int] = {}

    def worker() -> None:
        tids["worker"] = threading.get_native_id()
        q = cl.CommandQueue(ctx)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
        knl = cl.Kernel(prg, "twice")
        for _ in range(3):
            knl(q, a.shape, None, buf)
        q.finish()

    with polyprof.profile(plugins=["opencl"]) as prof:
        with polyprof.section("main work"):
            t = threading.Thread(target=worker, name="cl-worker")
            t.start()
            t.join()
    trace = prof.trace
    df = _frame(trace)
    api = df[df.category == "opencl_api"]
    assert set(api.track) == {"cl-worker"}
    track = trace.tracks[int(api.track_id.iloc[0])]
    assert track.tid == tids["worker"] and track.kind == "thread"
    assert (df[(df.plane == "/device:OpenCL:0")].name == "twice").sum() == 3


def test_queue_created_before_the_session_is_reported_not_lost() -> None:
    ctx = cl.create_some_context(interactive=False)
    prg = _kernel_program(ctx)
    q = cl.CommandQueue(ctx)  # before polyprof: cannot be made to profile
    a = np.ones(1024, np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    knl = cl.Kernel(prg, "twice")
    with polyprof.profile(plugins=["opencl"]) as prof:
        knl(q, a.shape, None, buf)
        q.finish()
    df = _frame(prof.trace)
    assert (df.name == "clEnqueueNDRangeKernel").sum() == 1
    assert not (df.plane == "/device:OpenCL:0").any()
    assert prof.trace.metadata["opencl"]["unprofiled"] == 1
    assert any("no profiling information" in w for w in prof.trace.metadata["warnings"])


def test_pyopencl_array_and_queue_subclass_are_profiled() -> None:
    import pyopencl.array as cla

    ctx = cl.create_some_context(interactive=False)
    x = np.arange(1000, dtype=np.float32)
    with polyprof.profile(plugins=["opencl"]) as prof:
        class MyQueue(cl.CommandQueue):  # user subclass made during the session
            pass

        q = MyQueue(ctx)
        assert _real_properties(q) & cl.command_queue_properties.PROFILING_ENABLE
        assert q.properties == 0
        a = cla.to_device(q, x)
        y = (a * 2 + 1).get()
    np.testing.assert_array_equal(y, x * 2 + 1)
    df = _frame(prof.trace)
    dev = df[df.plane == "/device:OpenCL:0"]
    assert (dev.category == "kernel").sum() >= 1
    assert set(dev[dev.category == "gpu_memcpy"].name) >= {"WriteBuffer (HtoD)", "ReadBuffer (DtoH)"}
    assert set(dev[dev.category == "gpu_memcpy"].bytes) == {x.nbytes}


def test_clock_fit_without_enqueue_samples_predicts_queued_times() -> None:
    """Fit only on (MONOTONIC, RAW, MONOTONIC) triples and markers, then check it on what
    it did not see: every command's mapped QUEUED time inside its enqueue call."""
    from polyprof.demo import opencl_pipeline as demo

    with polyprof.profile(plugins=["opencl"], options={"opencl": {"event_samples": False}}) as prof:
        demo.run(frames=3, height=64, width=96)
    t = prof.trace
    sync = t.metadata["clock_sync"]["/device:OpenCL:0"]["opencl"]
    assert "enqueue_calls" not in sync["sources"] and sync["sources"]["markers"] > 0
    assert sync["consistent"]
    bound = sync["bound_ns"] + sync["growth_ppm"] * 1e-6 * 1e9
    df = _frame(t)
    api = df[df.category == "opencl_api"].set_index("correlation_id")
    dev = df[df.plane == "/device:OpenCL:0"]
    assert len(dev) > 10
    for _, ev in dev.iterrows():
        launch = api.loc[ev.correlation_id]
        queued = ev.start_ns - ev.queue_delay_ns
        assert launch.start_ns - bound <= queued <= launch.end_ns + bound, (ev["name"], queued - launch.start_ns)


def test_columns_of_the_recording_match_its_records_field_by_field() -> None:
    """collect's columnar view (calls.flatten) against the record tuples
    (Recording.records): two threads, kernels with and without a local size,
    non-blocking and blocking transfers, and a wait."""
    import threading

    import pyopencl as cl

    from polyprof.plugins.opencl import calls
    from polyprof.plugins.opencl import intercept as ic

    rec = ic.Recording()
    patcher = ic.Patcher()
    ctx = cl.create_some_context(interactive=False)
    patcher.install(rec, None)
    try:
        q = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, "__kernel void k(__global float *a) { a[get_global_id(0)] += 1.0f; }").build()
        knl = cl.Kernel(prg, "k")
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
        knl.set_arg(0, buf)
        host = np.zeros(64, np.float32)

        def work(n: int) -> None:
            evs = [cl.enqueue_nd_range_kernel(q, knl, (64,), (16,) if i % 2 else None) for i in range(n)]
            cl.enqueue_copy(q, buf, host, is_blocking=False)
            cl.enqueue_copy(q, host, buf, is_blocking=True)
            cl.wait_for_events(evs[-2:])

        t = threading.Thread(target=work, args=(3,))
        t.start()
        work(5)
        t.join()
        q.finish()
    finally:
        patcher.uninstall()
    recs = rec.records()
    c = calls.flatten(rec)
    tuples = [r for _tid, _name, rs in recs for r in rs]
    assert c.n == len(tuples) >= 2 * 5
    assert c.threads == [(tid, name) for tid, name, _rs in recs] and len(c.threads) == 2
    assert c.thread.tolist() == [i for i, (_t, _n, rs) in enumerate(recs) for _ in rs]
    for j, col in enumerate((c.api, c.t0, c.t1, c.corr)):
        assert col.tolist() == [r[j] for r in tuples]
    for j, col in ((4, c.events), (5, c.queues), (6, c.info), (7, c.global_size), (8, c.local_size)):
        assert all(a is b for a, b in zip(col, (r[j] for r in tuples)))
    assert c.blocking.tolist() == [bool(r[9]) for r in tuples]
    assert c.blocking[c.api == ic.READ].all() and not c.blocking[c.api == ic.KERNEL].any()
    rows = np.arange(c.n)
    names = calls.device_names(c, rows)
    assert set(names[c.api == ic.KERNEL]) == {"k"}
    k, grid, block = calls.kernel_sizes(c, rows)
    assert set(grid) == {"64"} and set(block) == {"16", None} and len(k) == 8
    nb = calls.byte_counts(c, rows)
    assert set(nb[np.isin(c.api, (ic.READ, ic.WRITE))].tolist()) == {256}
    assert set(nb[~np.isin(c.api, (ic.READ, ic.WRITE))].tolist()) == {-1}


def test_a_recording_read_after_stop_is_the_one_of_stop() -> None:
    """A wrapper of another thread that saw the recording active just before stop still
    appends its call; what collect reads is the recording as stop ended it (else a
    launch whose command had not completed read as "no profiling information")."""
    from polyprof.plugins.opencl import calls
    from polyprof.plugins.opencl import intercept as ic

    rec = ic.Recording()
    record = (ic.KERNEL, 1, 2, 1, None, None, None, None, None, False, None)
    mine = rec.buffer()
    mine.extend(record)
    theirs: list[list[object]] = []
    t = threading.Thread(target=lambda: theirs.append(rec.buffer()))
    t.start()
    t.join()
    theirs[0].extend(record)
    rec.stop()
    mine.extend(record)  # late: after stop
    theirs[0].extend(record)
    late = threading.Thread(target=lambda: rec.buffer().extend(record))  # a thread's first call, late
    late.start()
    late.join()
    assert calls.flatten(rec).n == 2 and [len(f) for _t, _n, f in rec.threads] == [ic.STRIDE] * 2


def test_kernels_launched_while_a_session_stops_are_timed_or_not_recorded() -> None:
    """A thread launching kernels without pause while sessions stop: every launch the
    trace holds has its kernel on the device, and none reads as unprofiled."""
    ctx = cl.create_some_context(interactive=False)
    knl = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *a) { a[get_global_id(0)] += 1.0f; }")
                    .build(), "k")
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
    knl.set_arg(0, buf)
    for _ in range(4):
        q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        running = threading.Event()
        running.set()

        def launch(q: cl.CommandQueue = q, running: threading.Event = running) -> None:
            while running.is_set():
                cl.enqueue_nd_range_kernel(q, knl, (64,), None)

        t = threading.Thread(target=launch)
        with polyprof.profile(plugins=["opencl"]) as prof:
            t.start()
            time.sleep(0.05)
        running.clear()
        t.join()
        q.finish()
        df = _frame(prof.trace)
        launches = df[df.name == "clEnqueueNDRangeKernel"]
        kernels = df[(df.name == "k") & df.plane.str.startswith("/device:OpenCL")]
        assert len(kernels) == len(launches) > 10
        assert prof.trace.metadata["opencl"]["unprofiled"] == 0


def test_default_session_starts_opencl_when_the_program_imports_pyopencl(tmp_path: Path) -> None:
    """A default session does not import pyopencl (a program that never uses OpenCL pays
    nothing for it); the plugin starts at the program's `import pyopencl`, makes the
    queues it creates profile and records their commands."""
    code = f"""
import sys, json, numpy as np, polyprof
with polyprof.profile() as s:
    before = "pyopencl" in sys.modules
    import pyopencl as cl
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    knl = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *a) {{ a[get_global_id(0)] += 1.0f; }}").build(), "k")
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
    knl.set_arg(0, buf)
    for _ in range(4):
        cl.enqueue_nd_range_kernel(q, knl, (64,), None)
    q.finish()
t = s.trace
df = t.to_pandas()
json.dump({{"before": before, "meta": t.metadata.get("opencl"),
           "kernels": int(((df.category == "kernel") & (df.name == "k")).sum())}}, open({str(tmp_path / "out.json")!r}, "w"))
"""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads((tmp_path / "out.json").read_text())
    assert out["before"] is False
    assert out["kernels"] == 4
    assert out["meta"]["device_events"] == 4 and out["meta"]["queues_made_profiling"] == 1


@pytest.mark.parametrize("imports", [False, True])
def test_stop_and_collect_run_on_the_session_thread_until_pyopencl_is_imported(imports: bool) -> None:
    """Before the program imports pyopencl the plugin touched no device: its stop and
    collect run on the session's thread (no thread hand-off at the session's end);
    after that import they run in helper threads under the time limits."""
    code = f"""
import json, sys, threading, polyprof
from polyprof.plugins.opencl import OpenCLPlugin
here = {{}}
def spy(phase):
    real = getattr(OpenCLPlugin, phase)
    def call(self):
        here[phase] = threading.current_thread() is threading.main_thread()
        return real(self)
    setattr(OpenCLPlugin, phase, call)
spy("_stop"); spy("_collect")
with polyprof.profile() as s:
    if {imports!r}:
        import pyopencl
print(json.dumps({{"here": here, "status": s.trace.metadata["plugins"].get("opencl"),
                  "imported": s.trace.metadata["opencl"].get("pyopencl_imported", True)}}))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok" and out["imported"] is imports
    assert out["here"] == {"_stop": not imports, "_collect": not imports}


def test_session_availability_does_not_import_pyopencl() -> None:
    code = ("import sys; from polyprof.plugins.opencl import OpenCLPlugin; "
            "a = OpenCLPlugin.session_availability(); print(bool(a), 'pyopencl' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "False"]


def test_compiled_profiling_timestamps_equal_pyopencl_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """profinfo.py reads each command's four timestamps in one C loop through the ICD
    loader pyopencl uses; pyopencl's own get_profiling_info is the reference. Kernels,
    writes and reads on real PoCL queues; an event with a bad handle reads as -1."""
    from polyprof.plugins.opencl import profinfo

    if profinfo.implementation() != "c":
        pytest.skip("the compiled loop is not built here (python setup.py build_ext --inplace)")
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    knl = cl.Kernel(_kernel_program(ctx), "twice")
    a = np.ones(1024, np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, a.nbytes)
    events = []
    for _ in range(50):
        events.append(cl.enqueue_copy(q, buf, a, is_blocking=False))
        events.append(knl(q, a.shape, None, buf))
        events.append(cl.enqueue_copy(q, a, buf, is_blocking=False))
    q.finish()
    got, ok = profinfo.timestamps(events, cl.profiling_info)
    pi = cl.profiling_info
    want = np.array([[e.get_profiling_info(w) for w in (pi.QUEUED, pi.SUBMIT, pi.START, pi.END)] for e in events],
                    np.int64)
    assert ok.all() and np.array_equal(got, want)
    assert (np.diff(got, axis=1) >= 0).all()  # queued <= submit <= start <= end
    monkeypatch.setattr(profinfo, "_profinfo", None)  # the fallback gives the same
    slow, slow_ok = profinfo.timestamps(events, cl.profiling_info)
    assert slow_ok.all() and np.array_equal(slow, want)
    monkeypatch.undo()

    class Bad:  # a null handle: OpenCL refuses it; the loop does not call it
        int_ptr = 0

    got, ok = profinfo.timestamps([events[0], Bad(), events[1]], cl.profiling_info)
    assert ok.tolist() == [True, False, True] and (got[1] == -1).all() and np.array_equal(got[[0, 2]], want[:2])


def test_clock_sampler_runs_on_no_python_thread_and_still_samples() -> None:
    """The RAW clock sampler is polyprof's background ticker (collect/background.py): no
    Python thread a program's profiler (torch ``with_stack``) would list, yet its
    samples reach the device's clock fit."""
    import threading
    import time

    ctx = cl.create_some_context(interactive=False)
    prg = _kernel_program(ctx)
    a = np.ones(1024, np.float32)
    before = {t.ident for t in threading.enumerate()}
    with polyprof.profile(plugins=["opencl"], options={"opencl": {"clock_interval_s": 0.005}}) as prof:
        q = cl.CommandQueue(ctx)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
        cl.Kernel(prg, "twice")(q, a.shape, None, buf)
        q.finish()
        time.sleep(0.3)
        during = [t.name for t in threading.enumerate() if t.ident not in before]
    assert during == []  # no new Python thread at all while the plugin records
    sync = prof.trace.metadata["clock_sync"]["/device:OpenCL:0"]["opencl"]
    assert sync["device_clock"] == "CLOCK_MONOTONIC_RAW" and sync["consistent"]
    # 8 triples at start and 8 at stop; the ticker adds one every 5 ms of the 0.3 s
    assert sync["sources"]["monotonic_raw_pairs"] >= 16 + 20, sync["sources"]


def test_a_map_and_unmap_move_no_counted_bytes() -> None:
    """A blocking map of a whole 8 MiB buffer and its unmap on PoCL's CPU device (host
    memory: nothing moved): the copy table had them as copies of unknown direction with
    the mapped size, 39,898 GB/s; now kind ``map``, no bytes, no bandwidth, beside the
    read whose bytes and rate stay."""
    from polyprof.analyze.copies import copies
    from polyprof.analyze.frames import column

    ctx = cl.create_some_context(interactive=False)
    host = np.zeros(8 << 18, np.float32)  # 8 MiB
    with polyprof.profile(plugins=["opencl"]) as prof:
        q = cl.CommandQueue(ctx)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, host.nbytes)
        cl.enqueue_fill_buffer(q, buf, np.float32(1), 0, host.nbytes)
        mapped, _ = cl.enqueue_map_buffer(q, buf, cl.map_flags.READ, 0, host.shape, host.dtype)
        mapped.base.release(q)
        cl.enqueue_copy(q, host, buf)
        q.finish()
    t = copies(prof.trace)
    rows = {str(k): i for i, k in enumerate(column(t, "kind").tolist())}
    m = rows["map"]
    assert int(column(t, "count")[m]) == 2 and int(column(t, "total_bytes")[m]) == 0
    assert np.isnan(column(t, "bandwidth_gbps")[m]) and int(column(t, "unsized")[m]) == 2
    assert int(column(t, "total_bytes")[rows["DtoH"]]) == host.nbytes and column(t, "bandwidth_gbps")[rows["DtoH"]] > 0
