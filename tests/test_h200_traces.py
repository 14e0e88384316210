"""Traces recorded on a real NVIDIA H200 (tests/data/h200/README.md): what polyprof reads
from them is checked against the raw files, read independently here (the protobuf and
the JSON themselves), not against polyprof's own earlier output."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.cuda_graphs import cuda_graphs
from polyprof.derive import cache
from polyprof.derive.correlate import device_activity_rows
from polyprof.formats import xplane_pb2
from polyprof.trace.categories import Kind
from polyprof.trace.metadata_keys import clock_fits

DATA = Path(__file__).parent / "data" / "h200"


def device_kernels(trace: polyprof.Trace) -> np.ndarray:
    return np.intersect1d(device_activity_rows(trace), trace.rows_of_kind(Kind.KERNEL))


def test_jax_command_buffer_xspace_reads_every_kernel_and_replay() -> None:
    path = DATA / "jax_train_step_h200.xplane.pb"
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    stat = {k: m.name for k, m in gpu.stat_metadata.items()}
    names: Counter[str] = Counter()
    ps = 0
    graphs: Counter[tuple[int, int]] = Counter()
    for line in gpu.lines:
        for e in line.events:
            names[gpu.event_metadata[e.metadata_id].name] += 1
            ps += e.duration_ps
            st = {stat[s.metadata_id]: s for s in e.stats}
            graphs[(st["cuda_graph_id"].int64_value or st["cuda_graph_id"].uint64_value,
                    st["correlation_id"].int64_value or st["correlation_id"].uint64_value)] += 1
    assert sum(names.values()) == 48 and len(graphs) == 6  # 6 launches of one command buffer

    trace = polyprof.load(path)
    rows = device_kernels(trace)
    assert len(rows) == 48
    assert int(trace.events["dur_ns"][rows].sum()) == ps // 1000
    assert Counter(trace.strings[i] for i in trace.events["name"][rows]) == names
    # every kernel is matched to its launch by correlation id: device work is not "none"
    corr = cache.correlation(trace)
    assert np.isin(rows, corr.device_rows).all()
    g = cuda_graphs(trace)
    assert list(column(g, "replays")) == [6]
    assert list(column(g, "kernels_per_replay")) == [8]
    assert abs(int(column(g, "device_ns")[0]) * 6 - ps // 1000) < 6  # device time per replay


def test_torch_cuda_graph_replays_from_kineto() -> None:
    path = DATA / "torch_cuda_graph_h200.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    replayed = [e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in launches]
    assert len(launches) == 5 and len(replayed) == 25
    trace = polyprof.load(path)
    g = cuda_graphs(trace)
    assert list(column(g, "replays")) == [5]
    assert list(column(g, "kernels_per_replay")) == [5]
    # device time per replay; Kineto writes µs with 3 decimals
    want = sum(round(e["dur"] * 1000) for e in replayed) / 5
    assert abs(int(column(g, "device_ns")[0]) - want) <= len(replayed)


def test_cupy_recorded_by_the_cupti_plugin() -> None:
    trace = polyprof.load(DATA / "cupy_cupti_h200.polyprof")
    md = trace.metadata["cupti"]
    assert md["implementation"] == "c" and md["buffers"]["dropped"] == 0 and md["problems"] == []
    rows = device_kernels(trace)
    assert len(rows) == md["kernels"] == 35
    names = Counter(trace.strings[i] for i in trace.events["name"][rows])
    assert names["cupy_tanh__float32_float32"] == 10 and names["cupy_multiply__float32_float_float32"] == 10
    # each kernel linked to the runtime call that launched it
    assert np.isin(rows, cache.correlation(trace).device_rows).all()
    fits = [f for _plane, plugin, f in clock_fits(trace.metadata) if plugin == "cupti"]
    assert len(fits) == 1 and fits[0]["consistent"] and 0 < fits[0]["bound_ns"] < 1_000


def _hlo_messages() -> type:
    """``xla.HloProto`` as far as op attribution reads it, built here from field numbers
    (xla/service/hlo.proto) so the test decodes the HLO with protobuf itself."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="hlo_min_test.proto", package="hlo_min_test")
    T = descriptor_pb2.FieldDescriptorProto
    spec = {"OpMetadata": [("op_type", 1, T.TYPE_STRING, ""), ("op_name", 2, T.TYPE_STRING, "")],
            "Instruction": [("name", 1, T.TYPE_STRING, ""), ("opcode", 2, T.TYPE_STRING, ""),
                            ("metadata", 7, T.TYPE_MESSAGE, ".hlo_min_test.OpMetadata")],
            "Computation": [("name", 1, T.TYPE_STRING, ""),
                            ("instructions", 2, T.TYPE_MESSAGE, ".hlo_min_test.Instruction")],
            "Module": [("name", 1, T.TYPE_STRING, ""),
                       ("computations", 3, T.TYPE_MESSAGE, ".hlo_min_test.Computation")],
            "HloProto": [("hlo_module", 1, T.TYPE_MESSAGE, ".hlo_min_test.Module")]}
    for msg, fields in spec.items():
        m = fdp.message_type.add(name=msg)
        for name, num, typ, tname in fields:
            repeated = name in ("instructions", "computations")
            f = m.field.add(name=name, number=num, type=typ,
                            label=T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL)
            if tname:
                f.type_name = tname
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("hlo_min_test.HloProto"))


def _command_buffer_truth(space: xplane_pb2.XSpace) -> dict[str, tuple[str, str]]:
    """kernel name -> (HLO instruction, its op_name), from the raw file: the kernels'
    ``program_id`` names the module on /host:metadata whose instruction, with '.' as '_',
    is the kernel's name."""
    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    meta = next(p for p in space.planes if p.name == "/host:metadata")
    stat = {k: m.name for k, m in gpu.stat_metadata.items()}
    pids = {st.int64_value for line in gpu.lines for e in line.events for st in e.stats
            if stat[st.metadata_id] == "program_id"}
    assert len(pids) == 1
    module = f"jit_step({pids.pop()})"
    md = next(m for m in meta.event_metadata.values() if m.name == module)
    proto = _hlo_messages()()
    proto.ParseFromString(next(s.bytes_value for s in md.stats
                               if meta.stat_metadata[s.metadata_id].name == "Hlo Proto"))
    by_name = {i.name.replace(".", "_"): (i.name, i.metadata.op_name)
               for c in proto.hlo_module.computations for i in c.instructions}
    kernels = {gpu.event_metadata[e.metadata_id].name for line in gpu.lines for e in line.events}
    return {k: by_name[k] for k in kernels}


def _kernel_ops(trace: polyprof.Trace) -> tuple[list[str], list[str], list[str]]:
    rows = device_kernels(trace)
    found, hlo = trace.stats["hlo_op"].lookup(rows)
    assert found.all()
    _, tf = trace.stats["tf_op"].lookup(rows)
    return [trace.strings[i] for i in trace.events["name"][rows]], list(hlo), list(tf)


def test_jax_command_buffer_ops_are_the_hlo_instructions_and_jax_ops(tmp_path: Path) -> None:
    from polyprof.analyze.devops import device_op_breakdown

    path = DATA / "jax_train_step_h200.xplane.pb"
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    truth = _command_buffer_truth(space)
    assert len(truth) == 8 and all(op.startswith("jit(step)/") for _, op in truth.values())

    trace = polyprof.load(path)
    kernels, hlo, tf = _kernel_ops(trace)
    assert hlo == [truth[k][0] for k in kernels]  # e.g. gemm_fusion_dot_2 -> gemm_fusion_dot.2
    assert tf == [truth[k][1] for k in kernels]  # not the placeholder "XlaModule:"
    rows = device_kernels(trace)
    want: dict[str, list[int]] = {}
    for k, d in zip(kernels, trace.events["dur_ns"][rows].tolist()):
        want.setdefault(truth[k][1], []).append(d)
    bd = device_op_breakdown(trace)  # the whole file: all 48 kernels
    got = {o: (c, t) for o, c, t in zip(column(bd, "op"), column(bd, "count"), column(bd, "total_ns"))}
    assert got == {o: (len(d), sum(d)) for o, d in want.items()}
    assert len(got) == 5  # dot_general, the transposed dot, mul, sub... not one "XlaModule" row

    # Without the HLO (metadata plane emptied), the kernel names are the instruction names
    # and the jitted function (hlo_module) the framework op.
    meta = next(p for p in space.planes if p.name == "/host:metadata")
    meta.ClearField("event_metadata")
    bare = tmp_path / "no_hlo.xplane.pb"
    bare.write_bytes(space.SerializeToString())
    kernels, hlo, tf = _kernel_ops(polyprof.load(bare))
    assert hlo == kernels and set(tf) == {"jit_step"}

    # A kernel the HLO does not name (a library kernel, e.g. cuBLAS's, as XLA's command
    # buffers run them: a renamed kernel, no GPU here) keeps the command buffer as its op.
    space.ParseFromString(path.read_bytes())
    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    lib = next(m for m in gpu.event_metadata.values() if m.name == "gemm_fusion_dot_2")
    lib.name = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
    lib_file = tmp_path / "library_kernel.xplane.pb"
    lib_file.write_bytes(space.SerializeToString())
    kernels, hlo, tf = _kernel_ops(polyprof.load(lib_file))
    lib_at = [i for i, k in enumerate(kernels) if k == lib.name]
    assert len(lib_at) == 6
    assert {hlo[i] for i in lib_at} == {"command_buffer_1"} and {tf[i] for i in lib_at} == {"jit_step"}
    assert all(hlo[i] == truth[k][0] for i, k in enumerate(kernels) if k != lib.name)


def test_torch_transformer_training_from_kineto() -> None:
    """torch.profiler on an H200, 15 AdamW steps of a 6-layer transformer (30 MB of JSON):
    every kernel, copy and fill, their device time, their launches and the steps."""
    path = DATA / "torch_transformer_h200.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    steps = sorted(int(e["name"].split("#")[1]) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    assert len(device) == 6780 and len(kernels) == 5850 and steps == list(range(2, 17))

    trace = polyprof.load(path)
    rows = device_kernels(trace)
    assert len(rows) == len(kernels)
    assert Counter(trace.strings[i] for i in trace.events["name"][rows]) == Counter(e["name"] for e in kernels)
    want_ns = sum(round(e["dur"] * 1000) for e in kernels)  # Kineto writes µs with 3 decimals
    assert abs(int(trace.events["dur_ns"][rows].sum()) - want_ns) <= len(kernels)
    counts = cache.correlation(trace).counts
    assert counts["device_activities"] == len(device)
    assert counts["matched_by_correlation_id"] == sum(e["args"]["correlation"] in launches for e in device)
    assert cache.steps(trace).number.tolist() == steps


def test_jax_transformer_xspace_steps_and_device_time() -> None:
    """JAX's own XSpace on an H200, 200 steps of a jitted transformer train step (11 MB):
    every device activity with its time, and one step per StepTraceAnnotation."""
    path = DATA / "jax_transformer_h200.xplane.pb.gz"
    space = xplane_pb2.XSpace()
    space.ParseFromString(gzip.decompress(path.read_bytes()))
    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    names: Counter[str] = Counter()
    ps = 0
    for line in gpu.lines:
        for e in line.events:
            names[gpu.event_metadata[e.metadata_id].name] += 1
            ps += e.duration_ps
    host = next(p for p in space.planes if p.name == "/host:CPU")
    steps = sum(host.event_metadata[e.metadata_id].name == "train" for line in host.lines for e in line.events)
    assert sum(names.values()) == 51800 and steps == 200

    trace = polyprof.load(path)
    rows = device_activity_rows(trace)
    assert Counter(trace.strings[i] for i in trace.events["name"][rows]) == names
    assert abs(int(trace.events["dur_ns"][rows].sum()) - ps // 1000) <= len(rows)
    assert cache.correlation(trace).counts["unmatched_device_activities"] == 0
    assert len(cache.steps(trace).number) == steps
