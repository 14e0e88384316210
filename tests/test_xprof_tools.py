"""XProf's own analyses of what polyprof writes give polyprof's numbers.

The installed XProf converts polyprof's XSpace export of the real GPU traces offline
(kernel_stats, framework_op_stats, overview_page, op_profile), and the TPU sample as
XProf's own file; each figure is checked against the polyprof analysis that should
equal it. XProf runs in a subprocess (a C++ library that logs to stderr and could take
pytest down with it).
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

import polyprof.analyze as A
from polyprof.analyze.devops import device_op_breakdown
from polyprof.derive import cache
from polyprof.writers import xspace as xspace_writer
from polyprof.formats.detect import load

pytestmark = pytest.mark.skipif(importlib.util.find_spec("xprof") is None,
                                reason="xprof is not installed (pip install xprof)")

TOOLS = ("kernel_stats", "framework_op_stats", "overview_page", "op_profile")
_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
path, out = sys.argv[1], sys.argv[2]
res = {}
for tool in sys.argv[3].split(","):
    data, _ = r.xspace_to_tool_data([path], tool, {"use_saved_result": False})
    res[tool] = json.loads(data) if data else None
json.dump(res, open(out, "w"))
"""
GPU_TRACES = ["a100_nccl_rank0", "v100_ns_resolution_rank0", "sampled_rank0", "a100_alexnet_small"]


def xprof_tools(xplane: Path, tools: tuple[str, ...] = TOOLS) -> dict:
    out = xplane.with_suffix(".tools.json")
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(xplane.resolve()), str(out), ",".join(tools)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for tool in tools:
        assert res[tool] is not None, f"xprof {tool} gave nothing: {proc.stderr[-2000:]}"
    return res


def cells(row: dict) -> list:
    return [c.get("v") for c in row["c"]]


def kernel_stats(res: dict) -> tuple[Counter, Counter, dict]:
    """kernel_stats: (total ns, occurrences) per kernel name, and the table."""
    table = res["kernel_stats"]
    ids = [c["id"] for c in table["cols"]]
    kn, occ, tot = ids.index("kernel_name"), ids.index("occurrences"), ids.index("total_duration_us")
    got_ns: Counter = Counter()
    got_n: Counter = Counter()
    for r in table["rows"]:
        c = cells(r)
        got_ns[c[kn]] += c[tot] * 1000.0
        got_n[c[kn]] += c[occ]
    return got_ns, got_n, table


def device_ops(res: dict) -> dict[str, float]:
    """framework_op_stats: total device time (ns) per op, IDLE included."""
    table = res["framework_op_stats"][0]
    ids = [c["id"] for c in table["cols"]]
    where, op, total = ids.index("host_or_device"), ids.index("operation"), ids.index("total_time")
    out: Counter = Counter()
    for r in table["rows"]:
        c = cells(r)
        if c[where] == "Device":
            out[c[op]] += c[total] * 1000.0
    return dict(out)


@pytest.fixture(scope="module")
def exported(traces_dir: Path, tmp_path_factory) -> dict:
    """Each GPU trace, its polyprof Trace and XProf's tools on polyprof's export."""
    out = {}
    base = tmp_path_factory.mktemp("xprof_tools")
    for name in GPU_TRACES:
        t = load(traces_dir / "kineto" / f"{name}.json.gz")
        d = base / name
        d.mkdir()
        out[name] = (t, xprof_tools(xspace_writer.write(t, d / f"{name}.xplane.pb")))
    return out


@pytest.mark.parametrize("name", GPU_TRACES)
def test_kernel_stats_lists_polyprofs_kernels(name: str, exported: dict) -> None:
    t, res = exported[name]
    got_ns, got_n, table = kernel_stats(res)
    ids = [c["id"] for c in table["cols"]]
    kb = A.kernel_breakdown(t).to_pandas()
    kb = kb[kb["kind"].isin(["compute", "communication"])].groupby("name")[["total_ns", "count"]].sum()
    assert len(kb) > 5
    assert set(got_ns) == set(kb.index)
    for k, row in kb.iterrows():
        assert abs(got_ns[k] - row["total_ns"]) <= 0.01 * row["total_ns"], k
        assert got_n[k] == row["count"], k
    # launch parameters reach XProf's columns (Kineto's grid/block/registers)
    first = cells(table["rows"][0])
    assert first[ids.index("block_dim")] != "1,1,1" or first[ids.index("grid_dim")] != "1,1,1"


@pytest.mark.parametrize("name", GPU_TRACES)
def test_framework_op_stats_has_polyprofs_device_ops(name: str, exported: dict) -> None:
    t, res = exported[name]
    got = device_ops(res)
    want = device_op_breakdown(t).to_pandas().groupby("op")["total_ns"].sum()
    ops = {k: v for k, v in got.items() if k != "IDLE"}
    assert len(ops) >= 5 and set(ops) == set(want.index)
    for k, v in want.items():
        assert abs(ops[k] - v) <= 0.01 * max(v, 1), k
    # and the GPU is not "100% idle": XProf's idle is the span of every event on the
    # device's lines (annotations included) minus the busy op time
    ev = t.events
    gpu = [tr.id for tr in t.tracks if t.planes[tr.plane].name == "/device:GPU:0"]
    on = np.isin(ev["track"], gpu)
    span = int((ev["start_ns"] + ev["dur_ns"])[on].max() - ev["start_ns"][on].min())
    assert got["IDLE"] < span
    assert abs(got["IDLE"] - (span - want.sum())) <= 0.01 * span
    # op_profile: the same device op time under the program, the rest idle
    prog = res["op_profile"]["byProgram"]
    busy = sum(c["metrics"]["rawTime"] for c in prog["children"] if c["name"] != "IDLE") / 1000
    assert abs(busy - want.sum()) <= 0.01 * want.sum()


@pytest.mark.parametrize("name", ["a100_nccl_rank0", "v100_ns_resolution_rank0", "sampled_rank0"])
def test_overview_page_finds_polyprofs_steps(name: str, exported: dict) -> None:
    t, res = exported[name]
    steps = cache.steps(t)
    graph = next(tb for tb in res["overview_page"] if "stepnum" in [c["id"] for c in tb.get("cols", [])])
    got = [int(cells(r)[0]) for r in graph["rows"]]
    ss = A.step_stats(t)
    with_device = ss["step"][ss["activities"] > 0].tolist()
    assert got and set(got) <= set(steps.number.tolist()) and set(got) <= set(with_device)
    # XProf drops an incomplete first/last step at most
    assert len(got) >= len(with_device) - 2


def test_tpu_per_op_device_time_equals_xprof(traces_dir: Path, tmp_path: Path) -> None:
    """Per-op device time on the TPU sample uses XProf's device_duration_ps: the ten
    largest ops of XProf's framework_op_stats (on the original file) within 0.5%."""
    src = traces_dir / "xspace" / "tpu_inference_2.xplane.pb"
    copy = tmp_path / src.name  # XProf caches results next to the file: work on a copy
    copy.write_bytes(src.read_bytes())
    got = device_ops(xprof_tools(copy, ("framework_op_stats",)))
    want = device_op_breakdown(load(src)).to_pandas().groupby("op")["total_ns"].sum()
    top = sorted(((v, k) for k, v in got.items() if k != "IDLE"), reverse=True)[:10]
    assert len(top) == 10
    for v, k in top:
        assert abs(want[k] - v) <= 0.005 * v, (k, want[k], v)
    # the async copies are where the event span and the op's own time differ most
    kb = A.kernel_breakdown(load(src)).to_pandas().set_index("name")
    assert abs(kb.loc["copy-done.2", "total_ns"] - got["copy-done.2"]) <= 0.005 * got["copy-done.2"]


@pytest.mark.parametrize("name", ["jax_train_step_h200.xplane.pb", "jax_transformer_h200.xplane.pb.gz"])
def test_kernel_stats_of_jaxs_own_gpu_xspace_equal_polyprofs(name: str, tmp_path: Path) -> None:
    """JAX's XSpaces from an H200 (tests/data/h200), read by XProf's kernel_stats and by
    polyprof: the same kernels, counts and time. The transformer's command-buffer memsets
    (``Memset_details``, as XLA spells it) are fills, not kernels, in both."""
    import gzip

    src = Path(__file__).parent / "data" / "h200" / name
    copy = tmp_path / name.removesuffix(".gz")
    copy.write_bytes(gzip.decompress(src.read_bytes()) if name.endswith(".gz") else src.read_bytes())
    got_ns, got_n, _ = kernel_stats(xprof_tools(copy, ("kernel_stats",)))
    kb = A.kernel_breakdown(load(src)).to_pandas()
    kb = kb[kb["kind"] == "compute"].set_index("name")
    assert dict(got_n) == kb["count"].to_dict()
    for k, ns in got_ns.items():
        assert abs(ns - kb.loc[k, "total_ns"]) <= 0.001 * ns + 1000, k
