"""XProf accepts the XSpace polyprof writes: its own converter (the one TensorBoard and
the XProf server run) turns our files into trace_viewer, framework_op_stats and
overview_page data. XProf runs in a subprocess: it is a C++ library that logs to
stderr and would take pytest down with it if it crashed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.writers import xspace as xspace_writer
from polyprof.analyze.common import device_view
from polyprof.derive import cache
from polyprof.formats.detect import load
from polyprof.trace.categories import Kind
from polyprof.trace.core import Trace

pytestmark = pytest.mark.skipif(importlib.util.find_spec("xprof") is None,
                                reason="xprof is not installed (pip install xprof)")

_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
path, out = sys.argv[1], sys.argv[2]
res = {}
for tool in sys.argv[3].split(","):
    data, _ = r.xspace_to_tool_data([path], tool, {"use_saved_result": False})
    if data is None:
        res[tool] = None
        continue
    doc = json.loads(data)
    if tool == "trace_viewer":
        ev = doc["traceEvents"]
        pn = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
        tn = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
        doc = [[pn.get(e["pid"]), tn.get((e["pid"], e.get("tid"))), e["name"], e["ph"], e["ts"], e.get("dur", 0)]
               for e in ev if e.get("ph") in ("X", "i")]
    res[tool] = doc
json.dump(res, open(out, "w"))
"""


_TOOLS = ("trace_viewer", "framework_op_stats", "overview_page")


def run_xprof(xplane: Path, tmp: Path, tools: tuple[str, ...] = _TOOLS) -> dict:
    out = tmp / f"{xplane.stem}.xprof.json"
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(xplane), str(out), ",".join(tools)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for tool in tools:
        assert res[tool] is not None, f"xprof {tool} failed: {proc.stderr[-3000:]}"
    assert all(res[t] for t in tools if t != "kernel_stats")
    return res


def device_analyses(res: dict) -> tuple[str, float, dict[str, tuple[int, float]], dict[str, tuple[int, float]]]:
    """What XProf's analyses (op stats) saw of the devices: the overview's hardware type,
    its device compute time (ms per step), and per op / kernel name (occurrences, total
    µs) of framework_op_stats' device rows and of kernel_stats."""
    run_env = next(x["p"] for x in res["overview_page"] if "hardware_type" in x.get("p", {}))
    ops: dict[str, tuple[int, float]] = {}
    cols = [c["id"] for c in res["framework_op_stats"][0]["cols"]]
    for row in res["framework_op_stats"][0]["rows"]:
        r = dict(zip(cols, (c["v"] for c in row["c"])))
        if r["host_or_device"] == "Device" and r["operation"] != "IDLE":
            ops[r["operation"]] = (int(r["occurrences"]), float(r["total_time"]))
    kernels: dict[str, tuple[int, float]] = {}
    ks = res.get("kernel_stats") or {}
    kcols = [c["id"] for c in ks.get("cols", [])]
    for row in ks.get("rows", []):
        r = dict(zip(kcols, (c["v"] for c in row["c"])))
        n, t = kernels.get(r["kernel_name"], (0, 0.0))
        kernels[r["kernel_name"]] = (n + int(r["occurrences"]), t + float(r["total_duration_us"]))
    return run_env["hardware_type"], float(run_env["device_compute_time_ms_avg"]), ops, kernels


def device_kernels(trace: Trace) -> dict[str, tuple[int, float]]:
    """polyprof's kernels (and collectives) of the trace's device planes, as it classes
    them: name -> (count, total µs)."""
    names = trace.names()
    ev = trace.events
    rows = device_view(trace).rows
    kinds = trace.kinds[rows]
    out: dict[str, tuple[int, float]] = {}
    for i in rows[((kinds == Kind.KERNEL) | (kinds == Kind.COLLECTIVE)) & (ev["dur_ns"][rows] > 0)].tolist():
        n, t = out.get(names[i], (0, 0.0))
        out[names[i]] = (n + 1, t + int(ev["dur_ns"][i]) / 1e3)
    return out


def assert_xprof_sees_the_kernels(res: dict, trace: Trace) -> None:
    """XProf's overview, framework_op_stats and kernel_stats count the trace's device
    kernels (a GPU to XProf), with their times."""
    hardware, compute_ms, ops, kernels = device_analyses(res)
    want = device_kernels(trace)
    assert want, "the trace has device kernels"
    assert hardware == "GPU"
    assert compute_ms > 0 or not len(cache.steps(trace))  # XProf's compute time is per step
    assert set(kernels) == set(want)
    for k, (n, us) in want.items():
        assert kernels[k][0] == n and kernels[k][1] == pytest.approx(us, abs=1e-3 * n + 1e-6 * us)
        assert ops[k][0] >= n


#: lines XProf derives itself on a GPU plane from the stats polyprof writes for its tools
#: (tf_op -> framework op lines, group_id -> the Steps line), beside polyprof's own
XPROF_DERIVED = re.compile(r"^(Steps|Framework Ops|Framework Name Scope|Source code|Launch Stats|XLA Ops|"
                           r"XLA Modules)( - from #\d+)?$")


def viewer_events(res: dict, skip_lines: tuple[str, ...] = ("polyprof counters",),
                  trace: Trace | None = None) -> Counter:
    """XProf's trace_viewer events as (plane, line, name, start ns, dur ns), without the
    lines XProf derived that ``trace`` does not have."""
    own: set[tuple[str, str]] = set()
    if trace is not None:  # (plane as written, line): a host "Steps" track is not a device's
        written = dict(zip((p.name for p in trace.planes), xspace_writer.written_names(trace.planes)))
        own = {(written[trace.planes[t.plane].name], t.name) for t in trace.tracks}
    return Counter((p, t, n, round(ts * 1000), round(d * 1000))
                   for p, t, n, ph, ts, d in res["trace_viewer"]
                   if t not in skip_lines and ((p, t) in own or not XPROF_DERIVED.match(str(t))))


def polyprof_events(trace: Trace) -> Counter:
    names = trace.names()
    ev = trace.events
    return Counter((trace.planes[trace.tracks[t].plane].name, trace.tracks[t].name, names[i], s, d)
                   for i, (t, s, d) in enumerate(zip(ev["track"].tolist(), ev["start_ns"].tolist(),
                                                      ev["dur_ns"].tolist())))


# ------------------------------------------------------------------------------ (a) live session
def test_xprof_reads_a_live_session(tmp_path: Path) -> None:
    with polyprof.profile(plugins=["host"]) as prof:
        for _ in range(3):
            with polyprof.section("train step"):
                with polyprof.section("forward"):
                    time.sleep(0.002)
                with polyprof.section("backward"):
                    time.sleep(0.001)
                polyprof.mark("checkpoint")
            polyprof.step()
    trace = prof.trace
    assert trace.n_events >= 12
    path = xspace_writer.write_logdir(trace, tmp_path / "logs", run="live")
    res = run_xprof(path, tmp_path)
    got, want = viewer_events(res, trace=trace), polyprof_events(trace)
    assert sum(got.values()) == trace.n_events
    assert got == want
    # and the counters polyprof sampled are there as instants on their own line
    n_counters = sum(1 for e in res["trace_viewer"] if e[1] == "polyprof counters")
    assert n_counters == len(trace.counters["ts_ns"])


@pytest.mark.opencl
def test_xprof_reads_a_live_opencl_session(tmp_path: Path) -> None:
    """A device XProf has no name for (OpenCL) is still in every XProf tool."""
    pytest.importorskip("polyprof.plugins.opencl", reason="OpenCL plugin not on this branch")
    demo = pytest.importorskip("polyprof.demo.opencl_pipeline", reason="pyopencl or an OpenCL device missing")
    with polyprof.profile(["host", "opencl"]) as prof:
        demo.main(["--frames", "2", "--height", "32", "--width", "32"])
    trace = prof.trace
    dev = [p for p in trace.planes if p.name.startswith("/device:OpenCL")]
    assert dev and any(len(trace.tracks_of(p.id)) for p in dev)
    path = xspace_writer.write(trace, tmp_path / "opencl.xplane.pb")
    res = run_xprof(path, tmp_path, (*_TOOLS, "kernel_stats"))
    got = viewer_events(res, trace=trace)
    assert sum(got.values()) == trace.n_events
    # XProf shows the device as /device:GPU:<n>; the events are the same otherwise
    renamed = {p.name: n for p, n in zip(trace.planes, xspace_writer.written_names(trace.planes))}
    assert renamed[dev[0].name].startswith("/device:GPU:")
    want = Counter({(renamed[p], t, n, s, d): c for (p, t, n, s, d), c in polyprof_events(trace).items()})
    assert got == want
    # and in XProf's analyses: the OpenCL kernels are a GPU's, with their times
    assert_xprof_sees_the_kernels(res, trace)
    back = load(path)  # polyprof reads its own device back: name, kind, vendor, index
    assert [(p.name, p.kind, p.vendor, p.index) for p in back.planes] == \
        [(p.name, p.kind, p.vendor, p.index) for p in trace.planes]
    assert device_kernels(back) == device_kernels(trace)


def test_xprof_analyses_read_an_mtia_trace(traces_dir: Path, tmp_path: Path) -> None:
    """A device XProf has no name for (MTIA, from a real Kineto trace) is in XProf's
    analyses, not only its timeline: overview_page, framework_op_stats and kernel_stats
    count its kernels (audit F1: as /device:CUSTOM:<n> they were CPU_ONLY with no device
    ops)."""
    trace = load(traces_dir / "kineto" / "mtia_inference_rank0.json.gz")
    path = xspace_writer.write(trace, tmp_path / "mtia.xplane.pb")
    res = run_xprof(path, tmp_path, ("framework_op_stats", "overview_page", "kernel_stats"))
    assert_xprof_sees_the_kernels(res, trace)
    back = load(path)
    assert [(p.name, p.kind, p.vendor, p.index) for p in back.planes] == \
        [(p.name, p.kind, p.vendor, p.index) for p in trace.planes]


# ------------------------------------------------------------------------------ (b) Kineto
@pytest.mark.parametrize("name", ["a100_alexnet_small", "mi250_rocm_minitoy", "cpu_only_rank34",
                                  "mtia_inference_rank0", "triton_example"])
def test_xprof_reads_real_kineto_traces(name: str, traces_dir: Path, tmp_path: Path) -> None:
    """Kineto JSON recorded by torch.profiler (CUDA, ROCm, CPU-only) -> polyprof -> XSpace
    -> XProf: every event, at its time (XProf sees times relative to the first event;
    the writer records that origin)."""
    trace = load(traces_dir / "kineto" / f"{name}.json.gz")
    path = xspace_writer.write(trace, tmp_path / f"{name}.xplane.pb")
    res = run_xprof(path, tmp_path)
    origin = trace.span_ns[0]
    got = viewer_events(res, trace=trace)
    # XProf shows devices it has no name for as GPUs, the threads of every host process on /host:CPU
    homes = xspace_writer.line_homes(trace.planes)
    renamed = {p.name: n for p, n in zip(trace.planes, xspace_writer.written_names(trace.planes))}
    renamed.update({p.name: trace.planes[homes[p.id]].name for p in trace.planes if homes[p.id] != p.id})
    want = Counter({(renamed[p], t, n, s - origin, d): c for (p, t, n, s, d), c in polyprof_events(trace).items()})
    assert sum(got.values()) == trace.n_events
    assert got == want


# ------------------------------------------------------------------------------ (c) the TPU sample
def test_xprof_reads_the_tpu_sample_written_by_polyprof(traces_dir: Path, tmp_path: Path) -> None:
    src = traces_dir / "xspace" / "tpu_inference_2.xplane.pb"
    orig_dir = tmp_path / "orig"
    orig_dir.mkdir()
    orig = orig_dir / src.name  # XProf caches results next to the file: work on a copy
    orig.write_bytes(src.read_bytes())
    ours = xspace_writer.write(load(src), tmp_path / "ours.xplane.pb")
    a, b = run_xprof(orig, tmp_path), run_xprof(ours, tmp_path)
    ev_a, ev_b = a["trace_viewer"], b["trace_viewer"]
    assert len(ev_a) == len(ev_b) > 26000
    # same events at the same times: the file keeps ps, polyprof ns (starts rounded
    # down, ends up), so times agree to 1 ns (2 ns for durations). XProf packs
    # overlapping offload copies into "row N" lines itself; which row an op lands in
    # can change with sub-ns differences, so rows are compared as one line.
    def key(e: list) -> tuple:
        return (e[0], re.sub(r" row \d+$", "", e[1]), e[2], e[3])

    sa = sorted(ev_a, key=lambda e: (*key(e), e[4], e[5]))
    sb = sorted(ev_b, key=lambda e: (*key(e), e[4], e[5]))
    assert [key(e) for e in sa] == [key(e) for e in sb]
    ts_a = np.array([e[4] for e in sa]) * 1000
    ts_b = np.array([e[4] for e in sb]) * 1000
    du_a = np.array([e[5] for e in sa]) * 1000
    du_b = np.array([e[5] for e in sb]) * 1000
    assert np.abs(ts_a - ts_b).max() <= 1.001
    assert np.abs(du_a - du_b).max() <= 2.001
    # XProf's own analyses of the two files agree
    assert a["framework_op_stats"][0]["rows"] == b["framework_op_stats"][0]["rows"]
    assert a["overview_page"][0]["p"] == b["overview_page"][0]["p"]
