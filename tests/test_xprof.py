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
from polyprof.formats import xspace
from polyprof.formats.detect import load
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.core import Trace

pytestmark = pytest.mark.skipif(importlib.util.find_spec("xprof") is None,
                                reason="xprof is not installed (pip install xprof)")

_DRIVER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
path, out = sys.argv[1], sys.argv[2]
res = {}
for tool in ("trace_viewer", "framework_op_stats", "overview_page"):
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


def run_xprof(xplane: Path, tmp: Path) -> dict:
    out = tmp / f"{xplane.stem}.xprof.json"
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(xplane), str(out)], capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for tool in ("trace_viewer", "framework_op_stats", "overview_page"):
        assert res[tool] is not None, f"xprof {tool} failed: {proc.stderr[-3000:]}"
    assert res["framework_op_stats"] and res["overview_page"]
    return res


def viewer_events(res: dict, skip_lines: tuple[str, ...] = ("polyprof counters",)) -> Counter:
    """XProf's trace_viewer events as (plane, line, name, start ns, dur ns)."""
    return Counter((p, t, n, round(ts * 1000), round(d * 1000))
                   for p, t, n, ph, ts, d in res["trace_viewer"] if t not in skip_lines)


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
    path = xspace.write_logdir(trace, tmp_path / "logs", run="live")
    res = run_xprof(path, tmp_path)
    got, want = viewer_events(res), polyprof_events(trace)
    assert sum(got.values()) == trace.n_events
    assert got == want
    # and the counters polyprof sampled are there as instants on their own line
    n_counters = sum(1 for e in res["trace_viewer"] if e[1] == "polyprof counters")
    assert n_counters == len(trace.counters["ts_ns"])


# ------------------------------------------------------------------------------ (b) Kineto-shaped
def _kineto_like() -> Trace:
    """What the Kineto reader produces for a CUDA training step: CPU ops and runtime calls
    on host threads, kernels and copies on GPU streams, launch -> kernel flows.
    (Built here because this machine has no GPU to record one.)"""
    b = TraceBuilder(metadata={"source_format": "kineto"})
    host = b.plane("/host:CPU", "host", pid=1234)
    gpu = b.plane("/device:GPU:0", "device", vendor="NVIDIA", index=0, properties={"name": "A100"})
    main = b.track(host, "thread 1234 (python)", "thread", tid=1234)
    s7 = b.track(gpu, "stream 7", "stream", tid=7)
    s8 = b.track(gpu, "stream 8", "stream", tid=8)
    t = 1_700_000_000_000_000
    rng = np.random.default_rng(0)
    for step in range(3):
        st = b.event(main, f"ProfilerStep#{step}", t, 900_000, "user_annotation", step=step)
        for k in range(5):
            op0 = t + 1_000 + k * 150_000
            b.event(main, "aten::linear", op0, 100_000, "cpu_op", external_id=step * 10 + k)
            corr = step * 100 + k
            launch = b.event(main, "cudaLaunchKernel", op0 + 10_000, 8_000, "cuda_runtime",
                             correlation_id=corr, external_id=step * 10 + k)
            kern = b.event(s7, "ampere_sgemm_128x64_tn", op0 + 30_000, int(rng.integers(20_000, 90_000)),
                           "kernel", correlation_id=corr, grid="4,1,1", block="128,1,1", stream=7, device=0)
            b.flow(launch, kern, corr, "ac2g")
        b.event(s8, "Memcpy HtoD (Pageable -> Device)", t + 5_000, 40_000, "gpu_memcpy", bytes=1 << 20,
                stream=8, device=0)
        del st
        t += 1_000_000
    return b.build()


def test_xprof_reads_a_kineto_trace(tmp_path: Path) -> None:
    trace = _kineto_like()
    path = xspace.write(trace, tmp_path / "kineto.xplane.pb")
    res = run_xprof(path, tmp_path)
    got, want = viewer_events(res), polyprof_events(trace)
    assert sum(got.values()) == trace.n_events == sum(want.values())
    assert got == want


# ------------------------------------------------------------------------------ (c) the TPU sample
def test_xprof_reads_the_tpu_sample_written_by_polyprof(traces_dir: Path, tmp_path: Path) -> None:
    src = traces_dir / "xspace" / "tpu_inference_2.xplane.pb"
    orig_dir = tmp_path / "orig"
    orig_dir.mkdir()
    orig = orig_dir / src.name  # XProf caches results next to the file: work on a copy
    orig.write_bytes(src.read_bytes())
    ours = xspace.write(load(src), tmp_path / "ours.xplane.pb")
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
