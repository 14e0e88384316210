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
from polyprof.trace.memory import export_counters

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


DATA = Path(__file__).parent / "data"
#: every trace of tests/data with steps: the Kineto ones, the H200 run, and TraceLens's
#: with memory counters on the GPU plane (one GPU; two on the MI300)
STEP_TRACES = {**{n: DATA / "traces" / "kineto" / f"{n}.json.gz"
                  for n in ("a100_nccl_rank0", "v100_ns_resolution_rank0", "sampled_rank0", "sampled_rank1",
                            "mi250_rocm_minitoy", "triton_example", "cpu_only_rank34")},
               "torch_transformer_h200": DATA / "h200" / "torch_transformer_h200.json.gz",
               **{n: DATA / "peers" / "tracelens_perf" / f"{n}.json.gz"
                  for n in ("h100_gaunernst_bert-small-uncased__1016001", "mi300_gaunernst_bert-small-uncased__1016001")}}
_DEVICE_PARTS = ("deviceComputeTimeMs", "deviceToDeviceTimeMs", "deviceCollectivesTimeMs")


def step_graph(res: dict) -> dict[int, dict[str, float]]:
    """overview_page's step-time graph: step number -> its columns (ms)."""
    graph = next(tb for tb in res["overview_page"] if "stepnum" in [c["id"] for c in tb.get("cols", [])])
    ids = [c["id"] for c in graph["cols"]]
    out = {}
    for r in graph["rows"]:
        row = dict(zip(ids, cells(r)))
        out[int(str(row.pop("stepnum")).rsplit("#", 1)[-1])] = {k: v for k, v in row.items() if k.endswith("Ms")}
    return out


@pytest.mark.parametrize("name", list(STEP_TRACES))
def test_overview_page_step_times_are_polyprofs(name: str, tmp_path: Path) -> None:
    """XProf's step times on the export are polyprof's steps: the host step where it holds
    the step's device activity (a step the host waits for), else the device span of that
    activity (the device still runs it after the host moved on: v100's first two steps).
    Before the writer grouped every device event, XProf put each step's device
    annotations into the step before and made the H200 run's ~51.6 ms steps ~68 ms.
    The breakdown is sane: no negative part, the parts add up to the step, and the device
    time of a step XProf marks by the host step is polyprof's busy time."""
    t = load(STEP_TRACES[name])
    res = xprof_tools(xspace_writer.write(t, tmp_path / f"{name}.xplane.pb"), ("overview_page",))
    got = step_graph(res)
    steps = cache.steps(t)
    host = dict(zip(steps.number.tolist(), ((steps.end - steps.start) / 1e6).tolist()))
    ss = A.step_stats(t).to_pandas()
    dev = ss[ss["activities"] > 0].groupby("step").agg(first=("device_start_ns", "min"), last=("device_end_ns", "max"),
                                                        busy=("busy_ns", "sum"))
    with_device = set(dev.index) if len(dev) else set(host)  # a CPU-only trace: the host's steps
    assert got and set(got) <= with_device
    assert len(got) >= len(with_device) - 2  # XProf drops an incomplete first/last step at most
    h0 = dict(zip(steps.number.tolist(), steps.start.tolist()))
    h1 = dict(zip(steps.number.tolist(), steps.end.tolist()))
    for n, row in got.items():
        held = n not in dev.index or (h0[n] <= dev.loc[n, "first"] and dev.loc[n, "last"] <= h1[n])
        want = host[n] if held else (dev.loc[n, "last"] - dev.loc[n, "first"]) / 1e6
        assert row["stepTimeMs"] == pytest.approx(want, rel=0.01), (n, row["stepTimeMs"], host[n])
        parts = {k: v for k, v in row.items() if k != "stepTimeMs"}
        assert min(parts.values()) >= 0, (n, parts)
        assert sum(parts.values()) == pytest.approx(row["stepTimeMs"], rel=0.001), (n, parts)
        device_ms = sum(row.get(k, 0.0) for k in _DEVICE_PARTS)
        if n in dev.index:  # a step with device activity has device time, within the step
            assert 0 < device_ms <= row["stepTimeMs"] * 1.0001, (n, parts)
            if held:
                assert device_ms == pytest.approx(dev.loc[n, "busy"] / 1e6, rel=0.01), (n, parts)


@pytest.mark.parametrize("name", ["h100_gaunernst_bert-small-uncased__1016001",
                                  "mi300_gaunernst_bert-small-uncased__1016001", "a100_nccl_rank0"])
def test_framework_op_stats_lists_real_ops_not_counters(name: str, tmp_path: Path) -> None:
    """Counters are no ops: XProf takes any host event named like ``name:type`` for a
    framework op, and listed the memory counter ``memory.allocated_bytes:torch`` as host
    op ``memory.allocated_bytes`` of type ``torch``. The writer names such a counter's
    events so XProf does not parse them (``counter_event_name``); polyprof reads the
    counters back by their own names and values. Every host op XProf lists is a host
    event of the trace (a100_nccl's ``nccl:all_reduce``)."""
    t = load(STEP_TRACES[name])
    c = export_counters(t)
    counter_names = {t.strings[n] for n in c["name"].tolist()}
    path = xspace_writer.write(t, tmp_path / f"{name}.xplane.pb")
    table = xprof_tools(path, ("framework_op_stats",))["framework_op_stats"][0]
    ids = [c_["id"] for c_ in table["cols"]]
    where, kind, op = ids.index("host_or_device"), ids.index("type"), ids.index("operation")
    rows = [(r[where], r[kind], r[op]) for r in map(cells, table["rows"]) if r[op] != "IDLE"]
    host_names = set(t.names(np.flatnonzero(np.array([p.kind == "host" for p in t.planes])[
        t.track_plane[t.events["track"]]])).tolist())
    for w, k, o in rows:
        assert f"{o}:{k}" not in counter_names and o not in counter_names, (w, k, o)
        if w == "Host":
            assert f"{o}:{k}" in host_names, (k, o)
    if name == "a100_nccl_rank0":
        assert ("Host", "all_reduce", "nccl") in rows
    else:
        assert any(":" in n for n in counter_names)  # named as XProf names ops
    # polyprof reads the counters back as they were written
    back = load(path)
    def series(tr, cols: dict) -> dict:
        out: dict = {}
        for p_, n, ts, v in zip(cols["plane"].tolist(), cols["name"].tolist(), cols["ts_ns"].tolist(),
                                cols["value"].tolist()):
            out.setdefault((tr.planes[p_].name, tr.strings[n]), []).append((ts, v))
        return {k: sorted(v) for k, v in out.items()}
    assert series(back, back.counters) == series(t, c)


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


def test_tpu_export_lists_no_kernels_in_kernel_stats(traces_dir: Path, tmp_path: Path) -> None:
    """kernel_stats is XProf's GPU tool: on the TPU sample it lists nothing, and so on
    polyprof's XSpace export of it (which gave 17 XLA ops as "kernels", 315 s)."""
    src = traces_dir / "xspace" / "tpu_inference_2.xplane.pb"
    out = tmp_path / "tpu.xplane.pb"
    xspace_writer.write(load(src), out)
    assert kernel_stats(xprof_tools(out, ("kernel_stats",)))[2]["rows"] == []


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
    kb = kb[kb["kind"] == "compute"]
    # polyprof's rows are kernels of their XLA module (module/kernel); kernel_stats sums a kernel's rows
    assert (kb["module"] != "").all() and (kb["name"].str.len() > kb["module"].str.len() + 1).all()
    kernel = [n[len(m) + 1:] for n, m in zip(kb["name"], kb["module"])]
    kb = kb.assign(name=kernel).groupby("name")[["count", "total_ns"]].sum()
    assert dict(got_n) == kb["count"].to_dict()
    for k, ns in got_ns.items():
        assert abs(ns - kb.loc[k, "total_ns"]) <= 0.001 * ns + 1000, k
