"""CUPTI profiler ranges attributed to ops (``cupti_counters``): on a100_cupti_counters
(HTA's own cupti_profiler test trace) every range equals what Holistic Trace Analysis's
``get_cupti_counter_data_with_operators`` gives, HTA run here; HTA's pairing rule checked
by hand on small traces written here (counts that differ, a launch outside every op,
several ranks, a step window).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.cupti_ranges import cupti_counters
from polyprof.analyze.registry import ANALYSES

KINETO = Path(__file__).parent / "data" / "traces" / "kineto"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"

# HTA 0.5 under pandas 3 / NumPy 2: its call-stack builder checks for duplicate rows with
# np.unique(axis=0) on an object array (pandas 3 no longer downcasts the replaced "kind"
# column), which NumPy refuses; that check only logs. The shim gives the check numbers
# and leaves everything HTA computes as it is.
_DRIVER = r"""
import json, logging, sys, types, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
import numpy as np
import hta.common.trace_call_stack as tcs
shim = types.ModuleType("numpy_shim")
shim.__dict__.update(np.__dict__)
def unique(a, *args, **kw):
    a = np.asarray(a)
    return np.unique(a.astype(np.float64) if a.dtype == object and kw.get("axis") is not None else a, *args, **kw)
shim.unique = unique
tcs.np = shim
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[2]).get_cupti_counter_data_with_operators()[0]
counters = [c for c in df.columns if "__" in c]
out = [{"name": r["name"], "top": r["top_level_op"], "bottom": r["bottom_level_op"], "stack": list(r["op_stack"]),
        "counters": {c: int(r[c]) for c in counters}} for r in df.to_dict("records")]
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.skipif(importlib.util.find_spec("hta") is None, reason="Holistic Trace Analysis is not installed")
def test_every_range_equals_htas(tmp_path: Path) -> None:
    d = tmp_path / "trace"
    d.mkdir()
    (d / "rank0.json.gz").write_bytes((KINETO / "a100_cupti_counters.json.gz").read_bytes())
    out = tmp_path / "hta.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(out), str(d)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hta = json.loads(out.read_text())
    tb = cupti_counters(polyprof.load(KINETO / "a100_cupti_counters.json.gz"))
    assert len(tb) == len(hta) == 77
    for i, h in enumerate(hta):
        assert (tb["name"][i], tb["top_op"][i], tb["bottom_op"][i]) == (h["name"], h["top"], h["bottom"]), i
        assert tb["op_stack"][i] == " > ".join(h["stack"]), i
        assert {c: int(tb[c][i]) for c in h["counters"]} == h["counters"], i
    assert len(hta[0]["counters"]) == 9
    # HTA's test_cupti_profiler: the 6th range, an fft2d_r2c_32x32 kernel of aten::conv2d
    assert "fft2d_r2c_32x32" in tb["name"][5] and int(tb[FADD][5]) == 86_114_304
    assert (tb["top_op"][5], tb["bottom_op"][5]) == ("aten::conv2d", "aten::cudnn_convolution")
    # FLOPs from the instruction counters: fma counts two
    assert tb["flops"][1] == 2 * 9_119_334_400 + 24_780_800


def _x(name: str, cat: str, pid: int, tid: int, ts: int, dur: int, **args: object) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _ranges(pid: int, n: int, first: int = 1000) -> list[dict]:
    return [_x(f"kernel{i}", "cuda_profiler_range", pid, 0, first + 100 * i, 100, **{FFMA: 10 * (i + 1), FADD: i})
            for i in range(n)]


def _write(tmp: Path, events: list[dict], name: str = "t.json.gz", **top: object) -> Path:
    p = tmp / name
    p.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": events, **top}).encode()))
    return p


def test_pairing_by_hand(tmp_path: Path) -> None:
    """Three launches, two inside ``outer > inner`` ops and one outside every op; the
    ranges, written out of order, pair with them in order of start."""
    host = [_x("outer", "cpu_op", 1, 1, 0, 100), _x("inner", "cpu_op", 1, 1, 10, 50),
            _x("cudaLaunchKernel", "cuda_runtime", 1, 1, 20, 5), _x("cudaLaunchKernelExC", "cuda_runtime", 1, 1, 70, 5),
            _x("cudaLaunchKernel", "cuda_runtime", 1, 1, 200, 5), _x("cudaMemcpyAsync", "cuda_runtime", 1, 1, 80, 5)]
    tb = cupti_counters(polyprof.load(_write(tmp_path, host + _ranges(0, 3)[::-1])))
    assert tb["name"].tolist() == ["kernel0", "kernel1", "kernel2"]
    assert tb["top_op"].tolist() == ["outer", "outer", ""]
    assert tb["bottom_op"].tolist() == ["inner", "outer", ""]
    assert tb["op_stack"].tolist() == ["outer > inner", "outer", ""]
    assert tb["launch_ns"].tolist() == [20_000, 70_000, 200_000]
    assert tb["flops"].tolist() == [20.0, 41.0, 62.0]
    assert tb[FFMA].dtype == np.int64


def test_counts_that_differ_attribute_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = [_x("op", "cpu_op", 1, 1, 0, 100), _x("cudaLaunchKernel", "cuda_runtime", 1, 1, 20, 5)]
    with caplog.at_level(logging.WARNING, logger="polyprof.analyze.cupti_ranges"):
        tb = cupti_counters(polyprof.load(_write(tmp_path, host + _ranges(0, 2))))
    assert len(tb) == 2 and tb["top_op"].tolist() == ["", ""] and tb["launch_ns"].tolist() == [-1, -1]
    assert "2 CUPTI profiler ranges but 1 kernel launch calls" in caplog.text
    assert tb[FFMA].tolist() == [10, 20]  # the counters are still there


def test_ranks_pair_apart(tmp_path: Path) -> None:
    """Two ranks' files merged: each rank's ranges pair with its own launches."""
    paths = []
    for rank in (0, 1):
        host = [_x(f"op{rank}", "cpu_op", 1, 1, 0, 100),
                *[_x("cudaLaunchKernel", "cuda_runtime", 1, 1, 10 + 10 * i, 5) for i in range(rank + 1)]]
        paths.append(_write(tmp_path, host + _ranges(0, rank + 1, 500 * rank), f"r{rank}.json.gz",
                            distributedInfo={"rank": rank, "world_size": 2}))
    from polyprof.trace.merge import merge

    t = merge([polyprof.load(p) for p in paths])
    tb = cupti_counters(t)
    assert sorted(zip(tb["name"].tolist(), tb["top_op"].tolist())) == [
        ("kernel0", "op0"), ("kernel0", "op1"), ("kernel1", "op1")]


def test_a_step_window_keeps_the_ranges_launched_in_it(tmp_path: Path) -> None:
    steps = [_x(f"ProfilerStep#{i}", "user_annotation", 1, 1, 100 * i, 100) for i in range(3)]
    host = [_x("cudaLaunchKernel", "cuda_runtime", 1, 1, 100 * i + 10, 5) for i in range(3)]
    t = polyprof.load(_write(tmp_path, steps + host + _ranges(0, 3)))
    from polyprof.analyze.window import Window

    tb = cupti_counters(t, window=Window(start=1, stop=2))
    assert tb["name"].tolist() == ["kernel1"] and tb["launch_ns"].tolist() == [110_000]
    assert len(cupti_counters(t)) == 3


def test_registered_and_in_the_summary() -> None:
    assert any(a.name == "cupti_counters" for a in ANALYSES)
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(KINETO / "a100_cupti_counters.json.gz"),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = json.loads(r.stdout)["tables"]["cupti_counters"]["records"]
    assert len(recs) == 77 and recs[5]["bottom_op"] == "aten::cudnn_convolution" and recs[5][FADD] == 86_114_304
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(KINETO / "a100_cupti_counters.json.gz")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "160"})
    assert r.returncode == 0 and "CUPTI counter ranges by op" in r.stdout and "aten::cudnn_convolution" in r.stdout
    assert len(cupti_counters(polyprof.load(KINETO / "triton_example.json.gz"))) == 0


def test_shown_in_the_html_report(tmp_path: Path) -> None:
    """The report's CUPTI card lists the ranges with their ops; a trace without ranges hides it."""
    import re

    from polyprof.report.html import write

    html = write(polyprof.load(KINETO / "a100_cupti_counters.json.gz"), tmp_path / "r.html")
    from analysis import browser

    if browser.chromium() is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    dom, _ = browser.dump_dom(html)
    assert 'data-rendered="1"' in re.search(r"<html[^>]*>", dom).group(0)
    card = dom.split('id="cupti-card"', 1)[1].split("</section>", 1)[0]
    assert card.count("<tr>") == 78 and "aten::cudnn_convolution" in card and "fft2d_r2c_32x32" in card
    other = write(polyprof.load(KINETO / "triton_example.json.gz"), tmp_path / "o.html")
    dom, _ = browser.dump_dom(other)
    assert re.search(r'id="cupti-card"[^>]*style="display: none;?"', dom)


def test_ranges_without_a_launch_stay_in_a_window_of_every_step(tmp_path: Path) -> None:
    """Every step is a window with an open start (analyze/window.py): ranges paired with
    no launch are kept in it, as with no window; before, the default window of a 1-step
    trace left them all out."""
    from polyprof.analyze.window import Window

    host = [_x("ProfilerStep#0", "user_annotation", 1, 1, 0, 1000), _x("op", "cpu_op", 1, 1, 0, 100),
            _x("cudaLaunchKernel", "cuda_runtime", 1, 1, 20, 5)]
    t = polyprof.load(_write(tmp_path, host + _ranges(0, 2)))
    assert [len(cupti_counters(t, window=w)) for w in (None, "auto", Window(skip_first=0))] == [2, 2, 2]
