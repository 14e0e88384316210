"""XLA's GPU profiler layout (``/device:GPU:N`` planes with ``Stream #N(<kinds>)`` lines):
kernels and copies by kind, streams, XLA and framework ops, host launches correlated;
per-op device time equal to XProf's framework_op_stats on the same file (XProf run here).

Real files: AMD-AGI/TraceLens's jax_conv_minimal XSpaces, recorded by JAX on MI300
(ROCm), and its jax_te_fused_attn XSpace (JAX with TransformerEngine's fused attention,
ROCm): kernels whose ``tf_op`` is the module (``jit(loss_fn)``, ``XlaModule:``) or a
neighbour's op, which XProf attributes by the HLO instruction's ``op_name``. The CUDA spelling of the same layout (``cuLaunchKernel``, ``MemcpyH2D`` lines)
and a stream line of several kinds are built inline, since no small public CUDA XSpace
exists (XProf's gpu_training_2.xplane.pb is over the size kept here).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.devops import device_op_breakdown
from polyprof.derive import cache
from polyprof.formats import xspace
from polyprof.trace import keys
from test_xspace_golden import Space

DATA = Path(__file__).parent / "data" / "peers" / "tracelens"
FILES = {"jax_conv_minimal_08.xplane.pb": 8, "jax_conv_minimal_legacy.xplane.pb": 8}
TE_ATTN = "jax_te_fused_attn_934987a2fc2f.xplane.pb"
_XPROF = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "framework_op_stats", {"use_saved_result": False})
json.dump(json.loads(data), open(sys.argv[2], "w"))
"""


def xprof_device_ops(path: Path, tmp: Path) -> tuple[dict[str, float], dict[str, float]]:
    """XProf's framework_op_stats of a copy of ``path``: (ns, occurrences) per device op."""
    copy = tmp / path.name  # XProf caches results beside the file
    copy.write_bytes(path.read_bytes())
    out = tmp / "fos.json"
    proc = subprocess.run([sys.executable, "-c", _XPROF, str(copy), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = json.loads(out.read_text())[0]
    ids = [c["id"] for c in table["cols"]]
    where, op, occ, total = (ids.index(k) for k in ("host_or_device", "operation", "occurrences", "total_time"))
    ns: Counter = Counter()
    n: Counter = Counter()
    for r in table["rows"]:
        c = [x.get("v") for x in r["c"]]
        if c[where] == "Device" and c[op] != "IDLE":
            ns[c[op]] += c[total] * 1000.0
            n[c[op]] += c[occ]
    return dict(ns), dict(n)


@pytest.mark.skipif(importlib.util.find_spec("xprof") is None, reason="xprof is not installed")
@pytest.mark.parametrize("name", [*sorted(FILES), TE_ATTN])
def test_per_op_device_time_equals_xprof(name: str, tmp_path: Path) -> None:
    want, _ = xprof_device_ops(DATA / name, tmp_path)
    if name == TE_ATTN:
        # the ops of kernels whose tf_op is the module (jit(loss_fn), XlaModule:): the HLO's
        # op_name (input_reduce_fusion -> reduce_sum), or the instruction where it has none
        assert round(want["jit(loss_fn)/jvp()/reduce_sum"]) == 261_763
        assert round(want["jit(loss_fn)/jvp()/concatenate"]) == 17_440
        assert round(want["loop_reduce_fusion.1"]) == 178_321
        assert round(sum(want.values())) == 12_133_585
    else:
        assert want["jit(forward_3d_conv)/conv_general_dilated" if "08" in name else
                    "jit(forward_3d_conv)/jit(main)/conv_general_dilated"] > 3e6  # the convolution
    trace = polyprof.load(DATA / name)
    got = device_op_breakdown(trace).to_pandas().groupby("op")["total_ns"].sum()
    for op, ns in want.items():
        assert abs(got[op] - ns) <= 1, (op, got[op], ns)  # XProf prints µs to 3 decimals
    # the rest of polyprof's rows is device activity without an HLO op, which XProf's
    # framework_op_stats leaves out (copies of input buffers, the first run's kernels)
    extra = set(got.index) - set(want)
    device = cache.correlation(trace).device_rows
    no_hlo = device[~np.isin(device, trace.stats[keys.HLO_OP].rows)]
    assert sum(int(got[op]) for op in extra) == int(trace.events["dur_ns"][no_hlo].sum()) >= 0
    if name == TE_ATTN:  # every kernel has its HLO op: the same ops, the module nowhere
        assert set(got.index) == set(want)
        assert not {"XlaModule", "jit(loss_fn)"} & set(got.index)
    else:
        assert extra


@pytest.mark.parametrize("name", sorted(FILES))
def test_kernels_copies_streams_and_launches(name: str) -> None:
    t = polyprof.load(DATA / name)
    assert not t.metadata.get("warnings")
    kinds = Counter(t.kinds.tolist())
    from polyprof.trace.categories import Kind
    corr = cache.correlation(t)
    assert kinds[Kind.KERNEL] > 0 and len(corr.device_rows) == kinds[Kind.KERNEL] + kinds[Kind.MEMCPY]
    assert (corr.launch >= 0).all()  # every kernel and copy matched to its host launch call by correlation_id
    # the launch calls are runtime calls on host threads (hip... names: hip_runtime; the
    # legacy tracer named them after their kernel: runtime)
    assert (t.kinds[corr.launch] == Kind.RUNTIME).all()
    assert {t.planes[t.track_plane[i]].name for i in t.events["track"][corr.launch].tolist()} == {"/host:CPU"}
    if "08" in name:
        assert "hipModuleLaunchKernel" in set(t.names(corr.launch))
    streams = [tr for tr in t.tracks if t.planes[tr.plane].name.startswith("/device:GPU") and tr.kind == "stream"]
    assert streams and all(tr.name.startswith("Stream #") for tr in streams)
    # the XLA op and module of the kernels XLA ran (the others: copies of input buffers)
    kern = np.flatnonzero(t.kinds == Kind.KERNEL)
    with_hlo = kern[np.isin(kern, t.stats[keys.HLO_OP].rows)]
    assert len(with_hlo) > 0.8 * len(kern)
    assert np.isin(with_hlo, t.stats[keys.HLO_MODULE].rows).all()
    assert set(t.stats[keys.HLO_MODULE].lookup(with_hlo)[1].tolist()) == {"jit_forward_3d_conv"}
    if "legacy" in name:  # the copies of this file are on lines of their own
        copies = np.flatnonzero(t.kinds == Kind.MEMCPY)
        assert len(copies) == 53
        assert {t.tracks[i].name for i in np.unique(t.events["track"][copies])} == {
            "Stream #7(MemcpyOther)", "Stream #8(MemcpyOther)", "Stream #9(MemcpyOther)",
            "Stream #10(MemcpyOther)"}


def _cuda_space() -> bytes:
    """The CUDA spelling: a stream of several kinds, a copy-only stream, launches on the host."""
    s = Space()
    host = s.plane("/host:CPU", 1)
    host.metadata(1, "cuLaunchKernel")
    host.metadata(2, "cuMemcpyHtoDAsync_v2")
    host.metadata(3, "cuMemsetD32Async")
    th = host.line("Host Threads/11", lid=11)
    th.event(1, 0, 5000, correlation_id=1).event(2, 10_000, 5000, correlation_id=2)
    th.event(3, 20_000, 5000, correlation_id=3).event(1, 30_000, 5000, correlation_id=4)
    gpu = s.plane("/device:GPU:0", 2, device_vendor="Nvidia")
    gpu.metadata(1, "fusion_kernel", kernel_details="regs:32 grid:1,1,1 block:32,1,1")
    gpu.metadata(2, "MemcpyH2D")
    gpu.metadata(3, "Memset")
    mixed = gpu.line("Stream #7(Kernel,MemcpyH2D,Memset)", lid=7)
    mixed.event(1, 40_000_000, 2_000_000, correlation_id=1, tf_op="XlaModule:", name="jit(f)/dot_general",
                hlo_op="fusion", hlo_module="jit_f")
    mixed.event(2, 50_000_000, 3_000_000, correlation_id=2, memcpy_details="kind:HtoD size:64")
    mixed.event(3, 60_000_000, 1_000_000, correlation_id=3, memset_details="size:64")
    gpu.line("Stream #8(MemcpyD2H)", lid=8).event(2, 70_000_000, 4_000_000, correlation_id=4)
    gpu2 = s.plane("/device:GPU:1", 3)
    gpu2.metadata(1, "something")
    gpu2.line("Unknown line").event(1, 0, 1000)
    return s.bytes()


def test_cuda_layout_mixed_stream_and_an_uninterpreted_plane(tmp_path: Path) -> None:
    t = xspace.from_bytes(_cuda_space())
    cats = {t.strings[t.events["name"][r]] + "@" + t.tracks[t.events["track"][r]].name: t.strings[c]
            for r, c in enumerate(t.events["category"].tolist())}
    assert cats["fusion_kernel@Stream #7(Kernel,MemcpyH2D,Memset)"] == "kernel"
    assert cats["MemcpyH2D@Stream #7(Kernel,MemcpyH2D,Memset)"] == "gpu_memcpy"
    assert cats["Memset@Stream #7(Kernel,MemcpyH2D,Memset)"] == "gpu_memset"
    assert cats["MemcpyH2D@Stream #8(MemcpyD2H)"] == "gpu_memcpy"
    assert cats["cuLaunchKernel@Host Threads/11"] == "cuda_runtime"
    corr = cache.correlation(t)
    assert sorted(t.names(corr.launch).tolist()) == ["cuLaunchKernel", "cuLaunchKernel", "cuMemcpyHtoDAsync_v2",
                                                      "cuMemsetD32Async"]
    ops = device_op_breakdown(t).to_pandas().set_index("op")
    assert ops.loc["jit(f)/dot_general", "total_ns"] == 2_000
    # the plane polyprof cannot read is named, once
    assert t.metadata["warnings"] == [
        "xspace: /device:GPU:1: 1 events on lines 'Unknown line' that polyprof does not interpret as device "
        "activity (not read as kernels, copies or XLA ops)"]
    p = tmp_path / "cuda.xplane.pb"
    p.write_bytes(_cuda_space())
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(p)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    said = (out.stdout + out.stderr).replace("\n", " ")
    assert "/device:GPU:1: 1 events on lines 'Unknown line'" in " ".join(said.split())


def test_busy_time_equals_tracelens(tmp_path: Path) -> None:
    """TraceLens's own expectation for the legacy file (its perf report's gpu_timeline.csv,
    kept beside it): GPU 7 computes 3.586493 ms, GPU 0 copies 0.889028 ms, the others are
    idle. polyprof's temporal breakdown gives the same busy times."""
    import csv

    import polyprof.analyze as A

    rows = list(csv.DictReader((DATA / "jax_conv_minimal_legacy.gpu_timeline.csv").open()))
    want = {(int(r["gpu_pid"]), r["type"]): float(r["time ms"]) for r in rows}
    t = polyprof.load(DATA / "jax_conv_minimal_legacy.xplane.pb")
    tb = A.temporal_breakdown(t)
    tb = tb.to_pandas()
    tb = tb[tb["stream"] == "(all streams)"].set_index("plane")
    for pid, plane in ((8, "/device:GPU:7"), (1, "/device:GPU:0")):  # TraceLens's pid: the XPlane id + 1
        assert tb.loc[plane, "compute_ns"] == round(want[pid, "computation_time"] * 1e6)
        assert tb.loc[plane, "non_compute_ns"] == round(want[pid, "total_memcpy_time"] * 1e6)
