"""Correlation, steps, projection and derived lines on hand-built traces."""

from __future__ import annotations

import numpy as np

from polyprof.derive import correlate, derive, find_steps
from polyprof.derive.correlate import BY_FLOW, BY_ID, IN_ORDER
from polyprof.derive.projection import innermost_section
from polyprof.trace import TraceBuilder, keys

from .synth import US, gpu_trace


def _names(trace, rows):
    return [trace.strings[i] for i in trace.events["name"][rows]]


def test_correlation_by_id_links_every_activity_to_its_launch():
    t = gpu_trace()
    c = correlate(t)
    assert c.counts["device_activities"] == 6
    assert c.counts["matched_by_correlation_id"] == 6
    assert c.counts["unmatched_device_activities"] == 0
    assert _names(t, c.launch) == ["cudaLaunchKernel", "cudaLaunchKernel", "cudaMemcpyAsync"] * 2
    # framework op: the kernels' ops by external id; the memcpy was launched outside any op
    ops = [t.strings[t.events["name"][o]] if o >= 0 else None for o in c.op]
    assert ops == ["aten::linear", "aten::relu", None] * 2
    # cudaDeviceSynchronize is not a launch; every launch-like call has activity
    assert c.counts["launch_calls"] == 6 and c.counts["launch_calls_without_device_activity"] == 0


def test_correlation_by_flow_when_device_side_has_no_id():
    t = gpu_trace(with_ids=False)
    c = correlate(t)
    assert (c.method == BY_FLOW).sum() == 4  # the kernels
    assert (c.method == BY_ID).sum() == 2  # the copies still carry ids
    assert c.counts["unmatched_device_activities"] == 0


def _opencl_like(extra_device: int = 0):
    """Enqueue calls naming their queue, device commands on that queue, no ids at all."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    th = b.track(host, "main", tid=1)
    dev = b.plane("/device:OpenCL:0", "device")
    q = b.track(dev, "queue0", "queue", tid=1)
    for i in range(3):
        b.event(th, "clEnqueueNDRangeKernel", i * 100 * US, 5 * US, "opencl_api", queue="queue0")
        b.event(q, f"k{i}", i * 100 * US + 20 * US, 30 * US, "kernel")
    for j in range(extra_device):
        b.event(q, "orphan", 900 * US + j, 1, "kernel")
    return b.build()


def test_in_order_matching_on_a_queue_without_ids_and_unmatched_counted():
    t = _opencl_like(extra_device=1)
    c = correlate(t)
    assert (c.method == IN_ORDER).sum() == 3
    dev_names = _names(t, c.device_rows)
    launched = {n: (l >= 0) for n, l in zip(dev_names, c.launch)}
    assert launched == {"k0": True, "k1": True, "k2": True, "orphan": False}
    assert c.counts["unmatched_device_activities"] == 1
    st = t.events["start_ns"]
    m = c.launch >= 0
    assert np.all(st[c.launch[m]] <= st[c.device_rows[m]])


def test_unknown_correlation_id_is_reported_not_hidden():
    b = TraceBuilder()
    gpu = b.plane("/device:GPU:0", "device")
    s = b.track(gpu, "stream 1", "stream", tid=1)
    b.event(s, "lonely", 0, 10, "kernel", correlation_id=42)
    c = correlate(b.build())
    assert c.counts["unmatched_device_activities"] == 1
    assert c.launch.tolist() == [-1]


def test_framework_op_by_enclosure_when_no_external_id():
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    th = b.track(host, "main", tid=1)
    other = b.track(host, "other", tid=2)
    gpu = b.plane("/device:GPU:0", "device")
    s = b.track(gpu, "stream 1", "stream", tid=1)
    b.event(th, "outer", 0, 100, "cpu_op")
    b.event(th, "inner", 10, 50, "cpu_op")
    b.event(other, "elsewhere", 0, 1000, "cpu_op")  # another thread: must not be chosen
    b.event(th, "cudaLaunchKernel", 20, 5, "cuda_runtime", correlation_id=1)
    b.event(th, "cudaLaunchKernel", 70, 5, "cuda_runtime", correlation_id=2)
    b.event(s, "k1", 30, 5, "kernel", correlation_id=1)
    b.event(s, "k2", 80, 5, "kernel", correlation_id=2)
    t = b.build()
    c = correlate(t)
    assert _names(t, c.op) == ["inner", "outer"]


def test_steps_from_profiler_step_polyprof_steps_and_step_num():
    assert find_steps(gpu_trace()).number.tolist() == [1, 2]
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    st = b.track(host, "Steps", "steps")
    b.event(st, "step 0", 0, 10, "step", step=0)
    b.event(st, "step 1", 10, 10, "step", step=1)
    s = find_steps(b.build())
    assert (s.source, s.number.tolist(), s.start.tolist(), s.end.tolist()) == ("polyprof", [0, 1], [0, 10], [10, 20])
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    b.event(th, "train", 100, 50, "", step_num=7)
    b.event(th, "train", 200, 50, "", step_num=8)
    s = find_steps(b.build())
    assert (s.source, s.number.tolist()) == ("annotation", [7, 8])
    assert s.of(np.array([120, 160, 210])).tolist() == [0, -1, 1]


def test_device_work_belongs_to_the_innermost_section_of_its_launch():
    t = gpu_trace()
    c = correlate(t)
    sec = innermost_section(t, c)
    assert _names(t, sec) == ["forward", "forward", "optimizer"] * 2  # not ProfilerStep#N (a step)


def _line(trace, plane_name, line):
    p = trace.plane_by_name(plane_name).id
    tr = [x.id for x in trace.tracks if x.plane == p and x.name == line and x.kind == "derived"]
    assert len(tr) == 1, f"{line} missing on {plane_name}"
    rows = np.flatnonzero(trace.events["track"] == tr[0])
    rows = rows[np.argsort(trace.events["start_ns"][rows], kind="stable")]
    return rows, _names(trace, rows), trace.events["start_ns"][rows], trace.events["start_ns"][rows] + trace.events["dur_ns"][rows]


def test_derived_lines_steps_sections_framework_ops():
    t = derive(gpu_trace())
    rows, names, s, e = _line(t, "/device:GPU:0", keys.LINE_STEPS)
    # step k: first device activity (gemm at +50 µs) to last (memcpy ends +650 µs)
    assert names == ["1", "2"]
    assert s.tolist() == [50 * US, 1050 * US] and e.tolist() == [650 * US, 1650 * US]
    st = t.stats
    assert st["launch_count"].lookup(rows)[1].tolist() == [3, 3]
    assert st["launch_max_ns"].lookup(rows)[1].tolist() == [10 * US, 10 * US]
    _, names, s, e = _line(t, "/device:GPU:0", keys.LINE_SECTIONS)
    assert names == ["forward", "optimizer"] * 2
    assert (e - s).tolist() == [120 * US, 50 * US] * 2  # gemm start .. relu end; the copy
    _, names, s, e = _line(t, "/device:GPU:0", keys.LINE_FRAMEWORK_OPS)
    assert names == ["aten::linear", "aten::relu"] * 2
    assert t.metadata["correlation"]["device_activities"] == 6
    assert derive(t) is t  # already derived


def _scoped_trace():
    """XLA-style device ops with hierarchical names, two steps, consecutive repeats."""
    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU"), "main", tid=1)
    gpu = b.plane("/device:GPU:0", "device")
    s = b.track(gpu, "stream 1", "stream", tid=1)
    corr = 1
    for k in range(2):
        o = k * 1000
        b.event(th, f"ProfilerStep#{k}", o, 1000, "user_annotation")
        for i, (name, t0, d) in enumerate((("model/dense/MatMul:MatMul", 100, 50), ("model/dense/MatMul:MatMul", 160, 50),
                                           ("model/dense/BiasAdd", 220, 10), ("model/out/MatMul", 240, 100))):
            b.event(th, "cudaLaunchKernel", o + 10 + i, 1, "cuda_runtime", correlation_id=corr)
            b.event(s, name, o + t0, d, "kernel", correlation_id=corr, hlo_op=name.split(":")[0].rsplit("/", 1)[-1],
                    hlo_module="jit_step")
            corr += 1
    return b.build()


def test_name_scopes_modules_and_ops_merge_and_nest():
    t = derive(_scoped_trace())
    _, names, s, e = _line(t, "/device:GPU:0", keys.LINE_NAME_SCOPE)
    by = {}
    for n, a, b in zip(names, s, e):
        by.setdefault(n, []).append((int(a), int(b)))
    assert by["model"] == [(100, 340), (1100, 1340)]
    assert by["dense"] == [(100, 230), (1100, 1230)]
    assert by["out"] == [(240, 340), (1240, 1340)]
    _, names, s, e = _line(t, "/device:GPU:0", keys.LINE_XLA_OPS)
    # the two consecutive MatMuls of one step merge; steps do not merge across
    assert names == ["MatMul", "BiasAdd", "MatMul"] * 2
    assert (s[0], e[0]) == (100, 210)
    _, names, s, e = _line(t, "/device:GPU:0", keys.LINE_XLA_MODULES)
    assert names == ["jit_step", "jit_step"]
    # a nested line never outlasts its parent step on the same device
    _, _, ss, se = _line(t, "/device:GPU:0", keys.LINE_STEPS)
    for line in (keys.LINE_NAME_SCOPE, keys.LINE_XLA_OPS, keys.LINE_XLA_MODULES):
        _, _, a, b = _line(t, "/device:GPU:0", line)
        k = np.searchsorted(ss, a, side="right") - 1
        assert np.all(a >= ss[k]) and np.all(b <= se[k]), line


def test_derived_lines_are_separate_tracks_per_device_in_chrome_export(tmp_path):
    import orjson

    from polyprof.formats.chrome import write

    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", pid=5), "main", tid=1)
    for d in range(2):
        s = b.track(b.plane(f"/device:GPU:{d}", "device", index=d), "stream 7", "stream", tid=7)
        b.event(th, "cudaLaunchKernel", d * 100, 5, "cuda_runtime", correlation_id=d + 1)
        b.event(th, "aten::mm", d * 100, 50, "cpu_op")
        b.event(s, "gemm", d * 100 + 10, 20, "kernel", correlation_id=d + 1)
    t = derive(b.build())
    out = write(t, tmp_path / "t.json")
    doc = orjson.loads(out.read_bytes())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in doc if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(procs[e["pid"]], e["args"]["name"]) for e in doc if e["ph"] == "M" and e["name"] == "thread_name"}
    for d in range(2):
        assert (f"/device:GPU:{d}", keys.LINE_FRAMEWORK_OPS) in threads
        assert (f"/device:GPU:{d}", "stream 7") in threads
    tid_of = {(procs[e["pid"]], e["args"]["name"]): e["tid"] for e in doc if e["ph"] == "M" and e["name"] == "thread_name"}
    assert tid_of[("/device:GPU:0", keys.LINE_FRAMEWORK_OPS)] != tid_of[("/device:GPU:0", "stream 7")]
    ops = [e for e in doc if e.get("cat") == "derived" and e["name"] == "aten::mm"]
    assert len(ops) == 2 and len({e["pid"] for e in ops}) == 2


def test_derived_lines_in_xspace_export_use_xprof_line_names():
    from polyprof.formats import xspace
    from polyprof.writers import xspace as xspace_writer

    t = derive(_scoped_trace())
    space = xspace_writer.to_space(t)
    lines = {p.name: {l.name for l in p.lines} for p in space.planes}
    assert {keys.LINE_STEPS, keys.LINE_XLA_MODULES, keys.LINE_XLA_OPS, keys.LINE_NAME_SCOPE} <= lines["/device:GPU:0"]
    back = xspace.from_space(space)
    p = back.plane_by_name("/device:GPU:0").id
    names = {tr.name for tr in back.tracks if tr.plane == p}
    assert keys.LINE_XLA_OPS in names and keys.LINE_NAME_SCOPE in names


def test_one_os_thread_split_over_two_tracks_still_projects():
    """Sections from the host plugin and API calls from a device plugin land on two
    tracks of the same OS thread (same plane and tid, different names)."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    sec_track = b.track(host, "MainThread", "thread", tid=42)
    api_track = b.track(host, "thread 42", "thread", tid=42)
    other = b.track(host, "worker", "thread", tid=43)
    q = b.track(b.plane("/device:OpenCL:0", "device"), "queue0", "queue", tid=1)
    b.event(sec_track, "blur", 0, 100, "section")
    b.event(api_track, "clEnqueueNDRangeKernel", 10, 5, "opencl_api", correlation_id=1)
    b.event(q, "blur_kernel", 50, 200, "kernel", correlation_id=1)
    b.event(other, "prefetch", 15, 20, "section")  # another thread, inside a section of its own
    b.event(other, "clEnqueueNDRangeKernel", 20, 5, "opencl_api", correlation_id=2)
    b.event(q, "other_kernel", 300, 10, "kernel", correlation_id=2)
    import polyprof.analyze as A

    table = A.section_stats(b.build()).to_pandas().set_index("name")
    sec = table.loc["blur"]
    assert (sec["device_ops"], sec["device_ns"], sec["projected_ns"]) == (1, 200, 200)
    assert table.loc["prefetch", "device_ops"] == 1


def test_work_handed_to_a_thread_without_an_open_section_projects_onto_the_open_one():
    """Like PyTorch's backward: the section is opened on the main thread, the kernels are
    launched by the autograd thread. That thread's own section keeps its own launches;
    a launch outside every section stays unattributed; another process never gives."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    main = b.track(host, "main", "thread", tid=1)
    autograd = b.track(host, "autograd", "thread", tid=2)
    other_proc = b.track(b.plane("/host:CPU:other", "host"), "main", "thread", tid=9)
    s = b.track(b.plane("/device:GPU:0", "device"), "stream 7", "stream", tid=7)
    b.event(main, "## forward ##", 0, 1000, "user_annotation")
    b.event(main, "## backward ##", 1000, 1000, "user_annotation")
    b.event(main, "cudaLaunchKernel", 100, 5, "cuda_runtime", correlation_id=1)
    b.event(s, "fwd", 200, 100, "kernel", correlation_id=1)
    b.event(autograd, "cudaLaunchKernel", 1100, 5, "cuda_runtime", correlation_id=2)  # handed off
    b.event(s, "bwd_a", 1200, 300, "kernel", correlation_id=2)
    b.event(autograd, "nccl:all_reduce", 1500, 100, "user_annotation")  # its own section
    b.event(autograd, "cudaLaunchKernel", 1510, 5, "cuda_runtime", correlation_id=3)
    b.event(s, "allreduce", 1600, 50, "kernel", correlation_id=3)
    b.event(autograd, "cudaLaunchKernel", 2500, 5, "cuda_runtime", correlation_id=4)  # after every section
    b.event(s, "late", 2600, 10, "kernel", correlation_id=4)
    b.event(other_proc, "cudaLaunchKernel", 1300, 5, "cuda_runtime", correlation_id=5)  # another process
    b.event(s, "theirs", 1700, 20, "kernel", correlation_id=5)
    trace = b.build()
    import polyprof.analyze as A

    table = A.section_stats(trace).to_pandas().set_index("name")
    assert tuple(table.loc["## backward ##", ["device_ops", "device_ns", "projected_ns"]]) == (1, 300, 300)
    assert tuple(table.loc["## forward ##", ["device_ops", "device_ns"]]) == (1, 100)
    assert tuple(table.loc["nccl:all_reduce", ["device_ops", "device_ns"]]) == (1, 50)
    c = correlate(trace)
    sec = innermost_section(trace, c)
    by_kernel = {trace.strings[trace.events["name"][d]]: (trace.strings[trace.events["name"][r]] if r >= 0 else None)
                 for d, r in zip(c.device_rows, sec)}
    assert by_kernel == {"fwd": "## forward ##", "bwd_a": "## backward ##", "allreduce": "nccl:all_reduce",
                         "late": None, "theirs": None}


def _handed_off_by_thread(trace, sections, l_thread, l_start):
    """The reference for ``handed_off``: one innermost query per thread with sections."""
    from polyprof.derive import cache
    from polyprof.derive.intervals import innermost

    ev = trace.events
    th = cache.threads(trace)
    s_thread = th[ev["track"][sections]]
    s0 = ev["start_ns"][sections]
    s1 = s0 + ev["dur_ns"][sections]
    q = np.flatnonzero(innermost(s_thread, s0, s1, l_thread, l_start) < 0)
    out = l_thread.copy()
    best = np.full(len(q), np.iinfo(np.int64).min)
    for t in np.unique(s_thread).tolist():
        same = trace.track_plane[l_thread[q]] == trace.track_plane[t]
        hit = innermost(s_thread, s0, s1, np.full(len(q), t), l_start[q])
        start = s0[np.maximum(hit, 0)]
        take = same & (hit >= 0) & (start > best)
        best[take] = start[take]
        out[q[take]] = t
    return out


def _nested_spans(rng, t0, t1, depth):
    """Random properly nested spans inside [t0, t1) (as one thread's sections are)."""
    out = []
    t = t0
    while depth and t1 - t > 4 and len(out) < 6:
        a = int(rng.integers(t, t1 - 2))
        b = int(rng.integers(a + 1, min(t1, a + 40) + 1))
        out.append((a, b))
        out += _nested_spans(rng, a, b, depth - 1)
        t = b
    return out


def test_handed_off_matches_one_query_per_thread():
    """The batched hand-off (every launch against every thread at once, in chunks) picks
    what one query per thread picks, ties (two sections opened at the same time on two
    threads) included, on random nested sections in two processes."""
    from polyprof.derive import cache, projection
    from polyprof.derive.projection import handed_off

    rng = np.random.default_rng(7)
    for trial in range(40):
        b = TraceBuilder()
        threads = []
        for p in range(2):
            plane = b.plane(f"/host:CPU:{p}")
            threads += [b.track(plane, f"t{i}", "thread", tid=10 * p + i + 1) for i in range(int(rng.integers(1, 5)))]
        for tr in threads:
            for a, c in _nested_spans(rng, 0, 200, 3):
                b.event(tr, "s", a, c - a, "user_annotation")
        for _ in range(60):
            b.event(threads[int(rng.integers(len(threads)))], "launch", int(rng.integers(0, 220)), 1, "cuda_runtime")
        trace = b.build()
        ev = trace.events
        th = cache.threads(trace)
        secs = np.flatnonzero(ev["dur_ns"] > 1)
        launches = np.flatnonzero(ev["dur_ns"] == 1)
        lt, ls = th[ev["track"][launches]], ev["start_ns"][launches]
        want = _handed_off_by_thread(trace, secs, lt, ls)
        assert np.array_equal(handed_off(trace, secs, lt, ls), want), trial
        old = projection._PAIRS
        projection._PAIRS = 3  # many small chunks
        try:
            assert np.array_equal(handed_off(trace, secs, lt, ls), want), trial
        finally:
            projection._PAIRS = old
        if trial == 0:
            assert (want != lt).any()  # some launches were handed over


def test_torch_compile_metadata_marks_are_not_sections():
    """torch.compile records an empty ``record_function`` named ``<event>_data: key=value``
    beside each timed compile event (``CompileEventLogger.add_record_function_data``): 46
    of them filled an AOTInductor program's Sections table. They are metadata, not
    sections; a section of the program named alike without ``key=`` stays one."""
    from polyprof.analyze.sections import section_stats
    from polyprof.analyze.frames import column

    b = TraceBuilder()
    th = b.track(b.plane("/host:CPU", "host", pid=100), "main", "thread", tid=1)
    b.event(th, "compile_file (dynamo_timed)", 0, 4_000 * US, "cpu_op")
    b.event(th, "compile_file_data: compile_id=None", 10 * US, 15 * US, "user_annotation")
    b.event(th, "Scheduler.fused_nodes_data: compile_id=0/0", 40 * US, 60 * US, "user_annotation")
    b.event(th, "train", 5_000 * US, 900 * US, "user_annotation")
    b.event(th, "load_data: shard 3", 6_000 * US, 100 * US, "user_annotation")
    t = b.build()
    assert sorted(column(section_stats(t), "name").tolist()) == ["load_data: shard 3", "train"]
