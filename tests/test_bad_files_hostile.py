"""Hostile values inside files that load: the HLO modules of an XSpace, XProf's and
Kineto's memory events, a store's rank.json. Each gives unknown figures, a dropped
value or one clear error naming the file; never an absurd number (a negative FLOP
count, a peak of 2**63 - 1 bytes), an internal error or a run of seconds.
(tests/test_bad_files.py: files that are not traces at all.)"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze import memory_peak
from polyprof.errors import TraceFormatError
from polyprof.formats import kineto_memory
from polyprof.formats.xspace import hlo
from polyprof.formats.xspace.hlo_cost import module_costs
from polyprof.store.rankfiles import read_rank
from hlo_wire import msg

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
JAX_CPU = DATA / "traces" / "xspace" / "jax_cpu_mlp_scan.xplane.pb"
H200 = DATA / "h200" / "jax_train_step_h200.xplane.pb"
F32, TUPLE = 11, 13


def _ins(iid: int, name: str, opcode: str, dims: tuple[int, ...], operands: tuple[int, ...] = (), *extra) -> bytes:
    return msg((1, name), (2, opcode), (3, msg((2, F32), (3, dims))), (35, iid), (36, operands), *extra)


def _module(*instructions: bytes) -> bytes:
    comp = msg(*((2, i) for i in instructions), (5, 0), (6, 1))
    return msg((1, msg((1, "m"), (3, comp))))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_hlo_dimensions_beyond_int64_or_negative_cost_nothing_known():
    """XLA keeps a shape's element and byte counts in int64 and its dimensions are not
    negative: an op whose shape breaks that has unknown figures, not -20 FLOPs or 1e66."""
    contracting = (30, msg((1, (1,))))
    costs = module_costs(_module(
        _ins(1, "p", "parameter", (4, 8)),
        _ins(2, "ok", "add", (4, 8), (1, 1)),
        _ins(3, "dot", "dot", (4, 4), (1, 1), contracting),
        _ins(4, "neg", "add", (-5, 4), (1, 1)),
        _ins(5, "huge", "add", (1 << 62, 1 << 62), (1, 1)),
        _ins(6, "bytes", "exponential", (1 << 31, 1 << 31), (1,)),  # 2**62 elements, 2**64 bytes
        _ins(7, "from_end", "dot", (4, 4), (1, 1), (30, msg((1, (-1,))))),  # dimension -1: no such
        _ins(8, "window", "reduce-window", (4, 8), (1,), (15, b"".join(msg((1, msg((1, 1 << 40))))
                                                                      for _ in range(4))))))
    assert costs["ok"] == (32.0, 0.0, 3 * 128.0, "fp32")
    assert costs["dot"].flops == 2 * 16 * 8 and costs["dot"].bytes == 64 + 2 * 128
    for name in ("neg", "huge", "bytes", "from_end", "window"):
        assert math.isnan(costs[name].flops) and math.isnan(costs[name].bytes), (name, costs[name])


def test_hlo_decoding_is_linear_in_repeated_fields():
    """A message field repeated 400,000 times is merged once (it was joined pairwise:
    4.7 s), and a shape of 10**6 dimensions is refused at the first that overflows
    (the product of them all took 15.8 s)."""
    extra = [(7, msg((2, "x")))] * 400_000 + [(7, msg((2, "jit(f)/last")))]
    many = msg((1, "a"), (2, "add"), (3, msg((2, F32), (3, (2,) * 1_000_000))), (35, 2))
    data = _module(_ins(1, "p", "parameter", (4,), (), *extra), many)
    start = time.process_time()  # CPU seconds: a busy machine does not stretch them
    costs = module_costs(data)
    names = hlo.op_names(data)
    assert time.process_time() - start < 3.0
    assert names["p"] == "jit(f)/last"  # the last occurrence's op name, as protobuf merges them
    assert math.isnan(costs["a"].flops)


def test_a_module_name_with_an_overlong_program_id_is_no_module(tmp_path: Path):
    """A program id of 5,000 digits (past Python's int() limit) was an internal error in
    summary; such a name is no module's (a program id is an int64)."""
    from polyprof.formats import xplane_pb2

    assert hlo.modules([{"name": "jit_f(" + "9" * 5000 + ")", "stats": {hlo.HLO_PROTO: b"\n\x00"}},
                        {"name": "jit_g(12)", "stats": {hlo.HLO_PROTO: b"\n\x00"}}]) == {("jit_g", 12): b"\n\x00"}
    space = xplane_pb2.XSpace()
    space.ParseFromString(JAX_CPU.read_bytes())
    renamed = 0
    for plane in space.planes:
        for em in plane.event_metadata.values():
            if em.stats and em.name.endswith(")"):
                em.name, renamed = em.name.split("(")[0] + "(" + "9" * 5000 + ")", renamed + 1
    assert renamed == 9
    path = tmp_path / "long_ids.xplane.pb"
    path.write_bytes(space.SerializeToString())
    r = _cli("summary", str(path))
    assert r.returncode == 0 and "error" not in r.stderr, r.stderr
    assert "polyprof summary" in r.stdout


def _xprof_memory(tmp_path: Path, values: dict[str, tuple[str, object]], allocator: str | None = None) -> Path:
    """The H200 XSpace with the stats of its MemoryAllocation/Deallocation events set."""
    from polyprof.formats import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(H200.read_bytes())
    for p in space.planes:
        kinds = {k for k, v in p.event_metadata.items() if v.name in ("MemoryAllocation", "MemoryDeallocation")}
        names = {k: v.name for k, v in p.stat_metadata.items()}
        for line in p.lines:
            for e in line.events:
                for st in e.stats if e.metadata_id in kinds else ():
                    name = names.get(st.metadata_id)
                    if name in values:
                        setattr(st, values[name][0], values[name][1])
                    elif name == "allocator_name" and allocator is not None:
                        st.str_value = allocator
    path = tmp_path / "memory.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


@pytest.mark.parametrize("field,value", [("int64_value", (1 << 63) - 1), ("uint64_value", (1 << 64) - 1),
                                         ("int64_value", -(1 << 63))])
def test_xprof_memory_sizes_beyond_2_62_are_no_memory_events(tmp_path: Path, field: str, value: int):
    """Before: a peak of 2**63 - 1 bytes and -24 allocated in all (int64 wrapped), or a
    uint64 of 2**64 - 1 read as -1 byte."""
    path = _xprof_memory(tmp_path, {"allocation_bytes": (field, value), "requested_bytes": (field, value)})
    assert len(memory_peak(polyprof.load(path))) == 0
    peak = memory_peak(polyprof.load(H200)).to_pandas()  # the file itself: its one allocator
    assert peak["peak_bytes"].tolist() == [14418432] and peak["allocations"].tolist() == [24]


def test_xprof_memory_negative_totals_and_long_device_indices(tmp_path: Path):
    """Bytes in use below 0 are dropped (the levels are then summed from the sizes); an
    allocator named after device 10**5000 is no device's (its int() leaked a ValueError)."""
    path = _xprof_memory(tmp_path, {"bytes_allocated": ("int64_value", -12345)}, "GPU_" + "9" * 5000 + "_bfc")
    peak = memory_peak(polyprof.load(path)).to_pandas()
    assert len(peak) == 1 and peak["peak_bytes"].min() >= 0 and peak["device"].tolist() == ["/host:CPU"]
    assert not peak["from_allocator"].any()  # from the sizes, not the damaged totals


def _kineto(tmp_path: Path, mem_args: list[dict]) -> Path:
    events = [{"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 100}]
    events += [{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 + i, "args": a}
               for i, a in enumerate(mem_args)]
    path = tmp_path / "mem.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("impl", ["c", "python"])
def test_kineto_memory_sizes_and_totals_out_of_range_are_dropped(tmp_path: Path, monkeypatch, impl: str):
    """tb_plugin-era events (Bytes and Device Type, no totals) summed as they run: a
    Bytes of 2**63 - 1 made the sum wrap (a live-at-peak of -2 bytes); a Total Allocated
    below 0 was taken as the level (a peak of -5 bytes)."""
    if impl == "python":
        monkeypatch.setattr(kineto_memory, "_kineto_memory", None)
    elif kineto_memory._kineto_memory is None:
        pytest.skip("the compiled pass is not built")
    big = (1 << 63) - 1
    path = _kineto(tmp_path, [{"Device Type": 0, "Device Id": -1, "Bytes": 100},
                              {"Device Type": 0, "Device Id": -1, "Bytes": big},
                              {"Device Type": 0, "Device Id": -1, "Bytes": big},
                              {"Device Type": 0, "Device Id": -1, "Bytes": 50},
                              {"Device Type": 0, "Device Id": -1, "Bytes": -100}])
    peak = memory_peak(polyprof.load(path)).to_pandas()
    assert peak["peak_bytes"].tolist() == [150] and peak["end_bytes"].tolist() == [50]
    assert peak["allocations"].tolist() == [2] and peak["live_at_peak_bytes"].tolist() == [150]
    path = _kineto(tmp_path, [{"Device Type": 1, "Device Id": 0, "Bytes": b, "Total Allocated": -5}
                              for b in (64, 32, -64)])
    peak = memory_peak(polyprof.load(path)).to_pandas()
    assert peak["peak_bytes"].tolist() == [96] and peak["device"].tolist() == ["/device:GPU:0"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("store") / "store"
    r = _cli("convert", str(JAX_CPU), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("case,phrase", [
    ("plane_name", "rank.json: planes[0].name is bytes b'\\x00\\x00\\x00', expected str"),
    ("stats", "rank.json's stats are not stat entries"),
    ("sources", "rank.json: sources is not a list"),
])
def test_a_rank_json_of_the_wrong_types_is_one_error_naming_it(store: Path, tmp_path: Path, case: str, phrase: str):
    """A plane name that is a bytes value ({"__bytes__": ...}) failed later with a
    TypeError naming no file; stat entries that are not objects leaked a KeyError."""
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    rank = copy / "rank=0" / "rank.json"
    header = json.loads(rank.read_text())
    if case == "plane_name":
        header["planes"][0]["name"] = {"__bytes__": "AAAA"}
    elif case == "stats":
        header["stats"] = [{"__bytes__": "AAAA"}]
    else:
        header["sources"] = {"__bytes__": "AAAA"}
    rank.write_text(json.dumps(header))
    with pytest.raises(TraceFormatError) as ei:
        read_rank(copy / "rank=0")
    assert phrase in str(ei.value) and str(rank) in str(ei.value)
    r = _cli("summary", str(copy))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1 and phrase in lines[0] and str(rank) in lines[0], r.stderr


def test_a_pprof_file_of_many_tiny_fields_is_named_fast(tmp_path: Path):
    """A 180 KB gzip whose profile holds 20 M one-byte fields after a pprof head: the
    message walked all 64 MB it read (9-14 s); now at most 2**20 fields."""
    import gzip

    head = msg((1, msg((1, 1), (2, 2))), (6, b""), (6, b"x"))
    path = tmp_path / "many.pb.gz"
    path.write_bytes(gzip.compress(head + msg((9, 1)) * (20 << 20), compresslevel=1))
    start = time.process_time()  # CPU seconds: a busy machine does not stretch them
    with pytest.raises(TraceFormatError) as ei:
        polyprof.load(path)
    assert time.process_time() - start < 3.0
    assert ei.value.problem == "a pprof profile (sampled stacks or a memory snapshot), not a trace"


def test_unended_slices_200000_deep_export_to_perfetto_fast(tmp_path: Path):
    """Chrome JSON whose 200,000 B events on one thread never end: they load (said in one
    warning) and nest 200,000 deep; the Perfetto export's check for crossing slices
    looped once per level (14 s), now once for all."""
    events = [{"ph": "B", "name": "f", "pid": 1, "tid": 1, "ts": i} for i in range(200_000)]
    events.append({"ph": "X", "name": "g", "pid": 1, "tid": 1, "ts": 10, "dur": 300_000})  # crosses them
    path = tmp_path / "unended.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = polyprof.load(path)
    assert any(w.startswith("kineto: 200000 slices never ended") for w in trace.metadata["warnings"])
    start = time.process_time()  # CPU seconds: a busy machine does not stretch them
    out = polyprof.export(trace, tmp_path / "out.pftrace", format="perfetto")
    assert time.process_time() - start < 5.0
    back = polyprof.load(out)
    assert len(back.events["start_ns"]) == 200_001
