"""XSpace (.xplane.pb) reading and writing, checked against an independent wire-format
decoder (tests/xspace_wire.py), a TPU profile from XProf and a profile JAX writes here."""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polyprof.errors import TraceFormatError
from polyprof.formats import xspace
from polyprof.writers import xspace as xspace_writer
from polyprof.formats.detect import detect, load
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.core import Trace
from xspace_wire import decode, expected_events

# keys the reader adds on top of what the file holds
_ADDED = {"long_name", *xspace.XPROF_ALIASES.values(),
          # the memory stats of MemoryAllocation / MemoryDeallocation events (formats/xprof_memory.py)
          keys.ALLOC_BYTES, keys.ALLOCATOR, keys.TOTAL_ALLOCATED, keys.TOTAL_RESERVED, keys.MEMORY_DEVICE}


def trace_rows(trace: Trace) -> list[tuple[str, str, str, int, int, dict[str, Any]]]:
    stats: list[dict[str, Any]] = [{} for _ in range(trace.n_events)]
    for key, col in trace.stats.items():
        for r, v in zip(col.rows.tolist(), col.values.tolist()):
            stats[r][key] = v
    names = trace.names()
    ev = trace.events
    return [(trace.planes[trace.tracks[t].plane].name, trace.tracks[t].name, names[i], s, d, stats[i])
            for i, (t, s, d) in enumerate(zip(ev["track"].tolist(), ev["start_ns"].tolist(),
                                               ev["dur_ns"].tolist()))]


def same_value(a: Any, b: Any) -> bool:
    """``a`` from the trace equals ``b`` from the file. A key holding numbers on some
    events and strings on others is one text column in the trace (its schema types
    stats per key), so a number may come back as its text."""
    if isinstance(a, str) and not isinstance(b, str):
        return a == str(b)
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0) or (math.isnan(a) and math.isnan(b))
    return a == b


def assert_matches_file(trace: Trace, data: bytes) -> int:
    """Every plane, line, event and stat of the file is in ``trace``; returns the stat count."""
    planes = decode(data)
    assert [p.name for p in trace.planes] == [p.name for p in planes]
    for i, p in enumerate(planes):
        assert [t.name for t in trace.tracks_of(i)] == [ln.name or ln.display_name for ln in p.lines], p.name
        for st in p.stats:
            key = p.stat_names[st.metadata_id]
            assert same_value(trace.planes[i].properties[key], p.value(st)), (p.name, key)
    expected = expected_events(planes)
    got = trace_rows(trace)
    assert len(got) == len(expected)
    n_stats = 0
    for g, e in zip(got, expected):
        assert g[:5] == e[:5]
        g_stats = {k: v for k, v in g[5].items() if k not in _ADDED or k in e[5]}
        assert set(g_stats) == set(e[5]), (g[:3], set(g_stats) ^ set(e[5]))
        for k, v in e[5].items():
            assert same_value(g_stats[k], v), (g[:3], k, g_stats[k], v)
        n_stats += len(e[5])
    return n_stats


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tpu_path(traces_dir: Path) -> Path:
    return traces_dir / "xspace" / "tpu_inference_2.xplane.pb"


@pytest.fixture(scope="module")
def tpu_trace(tpu_path: Path) -> Trace:
    return load(tpu_path)


@pytest.fixture(scope="module")
def jax_xspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XSpace written by jax.profiler on this machine around a small jitted loop."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    logdir = tmp_path_factory.mktemp("jaxlog")

    @jax.jit
    def step(w, x):
        return jnp.tanh(x @ w).sum()

    w = jnp.ones((64, 64))
    x = jnp.ones((32, 64))
    step(w, x).block_until_ready()
    with jax.profiler.trace(str(logdir)):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step(w, x).block_until_ready()
    files = list(logdir.glob("plugins/profile/*/*.xplane.pb"))
    assert len(files) == 1, files
    return files[0]


# ------------------------------------------------------------------------------ reading
def test_tpu_sample_every_plane_line_event_and_stat(tpu_path: Path, tpu_trace: Trace) -> None:
    data = tpu_path.read_bytes()
    n_stats = assert_matches_file(tpu_trace, data)
    planes = decode(data)
    assert tpu_trace.n_events == sum(len(ln.events) for p in planes for ln in p.lines) == 26723
    assert len(tpu_trace.tracks) == sum(len(p.lines) for p in planes)
    assert n_stats > 20000
    # every value kind of the file reached the trace, ref values as the referenced names
    kinds = {st.kind for p in planes for ln in p.lines for e in ln.events for st in e.stats}
    kinds |= {st.kind for p in planes for m in p.event_metadata.values() for st in m.stats}
    assert kinds == {"double", "uint64", "int64", "str", "bytes", "ref"}
    assert set(tpu_trace.stats["shape"].values) >= {"f32[5,1024,1024,256]"}


def test_tpu_sample_planes_tracks_and_keys(tpu_trace: Trace) -> None:
    tpu0 = tpu_trace.plane_by_name("/device:TPU:0")
    assert tpu0 is not None and tpu0.kind == "device" and tpu0.index == 0
    assert tpu0.properties["device_type_string"] == "TPU v6 Lite"
    assert tpu_trace.plane_by_name("/device:TPU:3").index == 3
    assert tpu_trace.plane_by_name("/host:CPU").kind == "host"
    ops = [t for t in tpu_trace.tracks_of(tpu0.id) if t.name == keys.LINE_XLA_OPS]
    assert len(ops) == 1 and ops[0].kind == "line"
    host_tracks = tpu_trace.tracks_of(tpu_trace.plane_by_name("/host:CPU").id)
    assert all(t.kind == "thread" for t in host_tracks)
    assert any(t.name.startswith("main/") for t in host_tracks)
    # XLA ops on a device are device activity; program_id from the op's metadata
    rows = np.flatnonzero(tpu_trace.categories() == "xla_op")
    assert len(rows) == 6013
    mask, prog = tpu_trace.stats[keys.PROGRAM_ID].lookup(rows)
    assert mask.mean() > 0.9
    # XProf's tf_op is also polyprof's framework op
    assert list(tpu_trace.stats[keys.OP].values) == list(tpu_trace.stats["tf_op"].values)
    # the HLO protos of /host:metadata have no events but are kept
    meta = tpu_trace.plane_by_name("/host:metadata").properties["xspace_event_metadata"]
    assert any(isinstance(m["stats"].get("Hlo Proto"), bytes) for m in meta)
    # relative times anchored at the profile start (wall clock)
    assert tpu_trace.metadata["wall_anchor"]["wall_ns"] == 1741722099081044120


def test_jax_written_xspace_loads_completely(jax_xspace: Path) -> None:
    trace = load(jax_xspace)
    assert trace.metadata["source"]["format"] == "xspace"
    assert_matches_file(trace, jax_xspace.read_bytes())
    # the compiled op, its module and program id, and the step annotations
    hlo = trace.stats[keys.HLO_OP]
    assert len(hlo) >= 3
    assert all(m.startswith("jit_step") for m in trace.stats[keys.HLO_MODULE].values)
    assert keys.PROGRAM_ID in trace.stats
    steps = trace.stats[keys.STEP]
    assert sorted(steps.values.tolist()) == [0, 1, 2]
    assert set(trace.categories(steps.rows)) == {keys.CAT_STEP}
    assert set(trace.names(steps.rows)) == {"train"}
    # times are ns since the profile start; the wall anchor says when that was
    start, end = trace.span_ns
    assert 0 <= start < end < 60 * 10**9
    assert abs(trace.metadata["wall_anchor"]["wall_ns"] - os.stat(jax_xspace).st_mtime_ns) < 60 * 10**9


# ------------------------------------------------------------------------------ round trip
def _assert_same(a: Trace, b: Trace) -> None:
    assert [(p.name, p.kind, p.vendor, p.index, p.properties) for p in a.planes] == \
        [(p.name, p.kind, p.vendor, p.index, p.properties) for p in b.planes]
    # the writer groups lines by plane, so track ids may be renumbered
    def tracks(t: Trace) -> list[tuple]:
        return sorted((t.planes[x.plane].name, x.name, x.kind, x.tid, repr(x.properties)) for x in t.tracks)
    assert tracks(a) == tracks(b)
    # events may come back in another order (sorted per line): compare as sorted tables
    def table(t: Trace) -> list[tuple]:
        rows = trace_rows(t)
        cats = t.categories()
        return sorted((r[0], r[1], r[2], r[3], r[4], cats[i], tuple(sorted((k, repr(v)) for k, v in r[5].items())))
                      for i, r in enumerate(rows))
    assert table(a) == table(b)
    for key, col in a.stats.items():
        assert b.stats[key].kind == col.kind, key
    assert set(a.stats) == set(b.stats)
    def flows(t: Trace) -> list[tuple]:
        fl, names, starts = t.flows, t.names(), t.start_ns
        return sorted((names[x], int(starts[x]), names[y], int(starts[y]), int(i), t.strings[c]) for x, y, i, c in
                      zip(fl["src"], fl["dst"], fl["id"], fl["category"]))
    assert flows(a) == flows(b)
    drop = ("source", "xspace")
    assert {k: v for k, v in a.metadata.items() if k not in drop} == \
        {k: v for k, v in b.metadata.items() if k not in drop}


def test_round_trip_tpu_sample(tpu_trace: Trace) -> None:
    back = xspace.from_bytes(xspace_writer.to_bytes(tpu_trace))
    _assert_same(tpu_trace, back)
    # already in file order, so the rows line up one to one
    assert np.array_equal(back.start_ns, tpu_trace.start_ns)
    assert np.array_equal(back.dur_ns, tpu_trace.dur_ns)


def _synthetic() -> Trace:
    b = TraceBuilder(metadata={"session": {"hostname": "box"}})
    host = b.plane(keys.HOST_PLANE, "host", pid=4242, properties={"hostname": "box", "cores": 8})
    dev = b.plane(keys.device_plane("GPU", 0), "device", vendor="acme", index=0,
                  properties={"peak_flops": 1.5e12, "blob": b"\x00\x01"})
    main = b.track(host, "MainThread", "thread", tid=4242, properties={"os_name": "python3"})
    b.track(host, keys.LINE_STEPS, "steps", tid=0)
    other = b.track(host, "worker", "thread", tid=4243)
    stream = b.track(dev, "Stream #7", "stream", tid=7)
    ops = b.track(dev, keys.LINE_XLA_OPS, "line", tid=100)
    t0 = 5_000_000_000_000
    sec = b.event(main, "Self Attention", t0, 10_000, keys.CAT_SECTION, step=3)
    launch = b.event(main, "cudaLaunchKernel", t0 + 100, 50, "cuda_runtime", correlation_id=11)
    b.event(main, "mark!", t0 + 5_000, 0, keys.CAT_MARK)
    b.event(other, "load batch", t0 - 2_000, 1_500, keys.CAT_SECTION, note="x" * 3)
    kern = b.event(stream, "gemm", t0 + 400, 2_000, keys.CAT_KERNEL, correlation_id=11, grid="4,1,1",
                   flops=1.5, big=2**63 + 5, neg=-7, raw=b"\xff\x00")
    b.event(ops, "dot.1", t0 + 400, 2_000, "xla_op", hlo_op="dot.1", program_id=9)
    b.flow(launch, kern, 11, "ac2g")
    b.flow(sec, kern, 0, "")
    b.counter(host, "rss", [t0, t0 + 1_000], [1.0e6, 2.5e6])
    b.counter(dev, "mem", [t0 + 10], [3.0])
    return b.build()


def test_round_trip_any_trace_keeps_events_stats_flows_counters() -> None:
    trace = _synthetic()
    data = xspace_writer.to_bytes(trace)
    back = xspace.from_bytes(data)
    _assert_same(trace, back)
    assert back.stats["big"].values.dtype == np.uint64 and back.stats["big"].values[0] == 2**63 + 5
    assert back.stats["raw"].values[0] == b"\xff\x00"
    names = back.names()
    flows = sorted((names[s], names[d], i, back.strings[c]) for s, d, i, c in zip(
        back.flows["src"], back.flows["dst"], back.flows["id"], back.flows["category"]))
    assert flows == [("Self Attention", "gemm", 0, ""), ("cudaLaunchKernel", "gemm", 11, "ac2g")]
    c = back.counters
    got = sorted((back.planes[p].name, back.strings[n], t, v) for p, n, t, v in zip(
        c["plane"].tolist(), c["name"].tolist(), c["ts_ns"].tolist(), c["value"].tolist()))
    assert got == [("/device:GPU:0", "mem", 5_000_000_000_010, 3.0),
                   ("/host:CPU", "rss", 5_000_000_000_000, 1.0e6), ("/host:CPU", "rss", 5_000_000_001_000, 2.5e6)]
    # the file itself: XSpace value kinds and XProf names, read with the independent decoder
    planes = decode(data)
    gpu = next(p for p in planes if p.name == "/device:GPU:0")
    kinds = {gpu.stat_names[s.metadata_id]: s.kind for ln in gpu.lines for e in ln.events for s in e.stats}
    assert kinds["big"] == "uint64" and kinds["neg"] == "int64" and kinds["flops"] == "double"
    assert kinds["raw"] == "bytes" and kinds["grid"] == "str"
    host = next(p for p in planes if p.name == "/host:CPU")
    assert "step_num" in {host.stat_names[s.metadata_id] for ln in host.lines for e in ln.events for s in e.stats}
    assert host.id == 4242 and any(ln.id == 4243 and ln.name == "worker" for ln in host.lines)


def test_round_trip_every_kineto_trace(kineto_files: list[Path]) -> None:
    for path in kineto_files:
        trace = load(path)
        back = xspace.from_bytes(xspace_writer.to_bytes(trace), source=str(path))
        _assert_same(trace, back)
        assert len(back.flows["src"]) == len(trace.flows["src"])


def test_round_trip_jax_profile(jax_xspace: Path) -> None:
    trace = load(jax_xspace)
    _assert_same(trace, xspace.from_bytes(xspace_writer.to_bytes(trace)))


def test_write_gz_and_logdir(tmp_path: Path) -> None:
    trace = _synthetic()
    p = xspace_writer.write(trace, tmp_path / "a.xplane.pb.gz")
    assert gzip.decompress(p.read_bytes())[:1] == b"\x0a"
    assert load(p).n_events == trace.n_events
    out = xspace_writer.write_logdir(trace, tmp_path / "logs", run="run1")
    assert out == tmp_path / "logs" / "plugins" / "profile" / "run1" / "box.xplane.pb"
    assert load(out).n_events == trace.n_events
    assert decode(out.read_bytes())[0].name == keys.HOST_PLANE


def test_detected_by_content_not_name(tpu_path: Path, tmp_path: Path) -> None:
    odd = tmp_path / "profile.bin"
    odd.write_bytes(tpu_path.read_bytes())
    assert detect(odd) == "xspace"
    assert load(odd).n_events == 26723


# ------------------------------------------------------------------------------ bad input
def _bad(path: Path) -> str:
    with pytest.raises(TraceFormatError) as e:
        load(path)
    assert str(path) in str(e.value)
    return e.value.problem


def test_random_bytes_named_xplane(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    for i in range(20):
        p = tmp_path / f"r{i}.xplane.pb"
        p.write_bytes(rng.bytes(4096))
        problem = _bad(p)
        assert "XSpace" in problem
    p = tmp_path / "noise.bin"
    p.write_bytes(b"\x00\x17" + rng.bytes(1000))
    assert "unrecognised" in _bad(p)


def test_truncated_and_empty(tpu_path: Path, tmp_path: Path) -> None:
    data = tpu_path.read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[: len(data) // 3])
    assert "truncated" in _bad(cut)
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    assert "empty" in _bad(empty)
    gz = tmp_path / "cut.xplane.pb.gz"
    gz.write_bytes(gzip.compress(data)[:5000])
    assert "gzip" in _bad(gz)
    with pytest.raises(TraceFormatError, match="<native>"):
        xspace.from_bytes(b"\x0a\x05\x12\x03abc\xff", source="<native>")


def test_cli_export(tpu_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from polyprof.cli import main

    out = tmp_path / "o.xplane.pb"
    assert main(["export", str(tpu_path), "-f", "xspace", "-o", str(out)]) == 0
    assert load(out).n_events == 26723
    assert main(["export", str(tpu_path), "-f", "tensorboard", "-o", str(tmp_path / "tb")]) == 0
    files = list((tmp_path / "tb" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(files) == 1 and load(files[0]).n_events == 26723


def test_tpu_sample_as_a_table(tpu_trace: Trace) -> None:
    """Several devices with the same line names ("XLA Ops") still make one DataFrame."""
    df = tpu_trace.to_pandas()
    assert len(df) == 26723
    per_line = df.groupby(["plane", "track"], observed=True).size()
    assert per_line[("/device:TPU:0", "XLA Ops")] == 1504
    assert per_line[("/device:TPU:1", "XLA Ops")] == 1503


def test_xprof_flow_stats_become_flows() -> None:
    """An XSpace from another producer whose events share XProf "flow" stats (a launch,
    a kernel, a memcpy in one flow; flow value = id << 2 | direction, context type in
    the top 6 bits) reads as two linked flows in time order."""
    from polyprof.formats import xplane_pb2 as pb

    space = pb.XSpace()
    plane = space.planes.add(id=0, name="/device:GPU:0")
    plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "flow"
    for i, name in enumerate(["launch", "kernel", "copy", "other"], start=1):
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, name
    line = plane.lines.add(id=7, name="Stream #7", timestamp_ns=1000)
    flow_id, ctx = 77, 9
    for mid, off, direction in [(2, 5_000, 3), (1, 1_000, 2), (3, 9_000, 1), (4, 2_000, 0)]:
        ev = line.events.add(metadata_id=mid, offset_ps=off * 1000, duration_ps=1000)
        if direction:
            ev.stats.add(metadata_id=1, uint64_value=(flow_id << 2) | direction | (ctx << 58))
    trace = xspace.from_bytes(space.SerializeToString())
    names = trace.names()
    got = [(names[s], names[d], int(i), trace.strings[c]) for s, d, i, c in
           zip(trace.flows["src"], trace.flows["dst"], trace.flows["id"], trace.flows["category"])]
    assert got == [("launch", "kernel", 77, "xflow:9"), ("kernel", "copy", 77, "xflow:9")]


def test_devices_xprof_has_no_name_for_are_written_as_gpus_and_read_back() -> None:
    """XProf's analyses read /device:TPU:* planes, else /device:GPU:* (a CUSTOM plane is
    only in its timeline); an OpenCL or MTIA plane is written as /device:GPU:<n> and
    polyprof restores its name, kind, vendor and index."""
    b = TraceBuilder()
    host = b.plane("/host:CPU", "host", pid=7)
    ocl = b.plane("/device:OpenCL:0", "device", vendor="PoCL", index=0, pid=1)
    mtia = b.plane("/device:MTIA:17", "device", vendor="Meta", index=17, pid=17)
    for plane, name in ((host, "main"), (ocl, "Queue 0"), (mtia, "Stream 1")):
        t = b.track(plane, name, "thread" if plane == host else "stream", tid=1)
        b.event(t, "work", 1_000, 500, category="kernel")
    trace = b.build()
    space = xspace_writer.to_space(trace)
    assert [p.name for p in space.planes if p.name.startswith("/device:")] == \
        ["/device:GPU:0", "/device:GPU:17"]
    back = xspace.from_space(space)
    assert [(p.name, p.kind, p.vendor, p.index) for p in back.planes] == \
        [(p.name, p.kind, p.vendor, p.index) for p in trace.planes]
    assert back.n_events == 3


def test_a_jax_log_directory_is_one_rank_and_its_json_has_the_steps(tmp_path: Path) -> None:
    """jax.profiler.trace(create_perfetto_trace=True) writes ``<host>.xplane.pb``,
    ``<host>.trace.json.gz`` and ``perfetto_trace.json.gz``: the same events three times,
    which were three ranks of one job. The log directory is now the XSpace alone. The
    trace viewer JSON writes every arg as text (``"step_num": "0"``): its steps are
    found, the same as the XSpace's."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from polyprof.derive import cache
    from polyprof.ranks import load_ranks

    @jax.jit
    def step(w, x):
        return jnp.tanh(x @ w).sum()

    w, x = jnp.ones((64, 64)), jnp.ones((32, 64))
    step(w, x).block_until_ready()
    with jax.profiler.trace(str(tmp_path / "log"), create_perfetto_trace=True):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step(w, x).block_until_ready()
    run = next((tmp_path / "log" / "plugins" / "profile").iterdir())
    names = sorted(p.name for p in run.iterdir())
    assert any(n.endswith(".trace.json.gz") for n in names) and "perfetto_trace.json.gz" in names
    ts = load_ranks(tmp_path / "log")
    assert [Path(str(e.path)).name for e in ts.entries] == [n for n in names if n.endswith(".xplane.pb")]
    xs = cache.steps(load(run / next(n for n in names if n.endswith(".xplane.pb"))))
    js = cache.steps(load(run / next(n for n in names if n.endswith(".trace.json.gz"))))
    assert js.number.tolist() == xs.number.tolist() == [0, 1, 2]
    assert np.abs((js.end - js.start) - (xs.end - xs.start)).max() <= 1000  # the JSON's µs
