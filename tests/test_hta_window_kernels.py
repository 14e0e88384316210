"""``--window hta``: the per-kernel table, the comm/compute overlap and the launch table
count what HTA 0.5 counts, with HTA's times (audit H1, H2), and the per-kernel table the
``cuda_sync`` rows HTA types COMPUTATION (``Stream Wait Event``: a100_alexnet_small's 20,
10 µs), which the device view leaves out.

Before, under HTA's window only the temporal, idle, queue and kernel-type tables read
HTA's rows (``analyze/hta_compat.py``): ``kernel_breakdown`` and ``launch_stats`` summed
the file's ns where the window says "rounded to whole µs" (a100_nccl_rank0: 102,978 µs
against HTA's kernel table's 100,462 µs), and ``kernel_breakdown`` and
``comm_comp_overlap`` counted device activity whose launch is not in the file, which HTA
drops (HTA's negative_queue_length_values_check trace: 6,372 activities against HTA's
5,500, overlap 1.25 % against 1.37 %). Now every device table reads the rows HTA's
temporal breakdown counts, rounded as HTA rounds them; outside HTA's window nothing
changes.

Files: ``tests/data/traces/kineto/a100_nccl_rank0.json.gz`` (fractional µs, HTA rounds
it) and a small Kineto file written here (:func:`orphans_trace`): fractional times, an
NCCL kernel and a compute kernel whose launches are not in the file running at once, a
sub-µs kernel HTA's rounding reverses, the last step. HTA is run here on both (one
subprocess for the module).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyprof.analyze.breakdown import comm_comp_overlap, kernel_breakdown
from polyprof.analyze.frames import column
from polyprof.analyze.ops import launch_stats
from polyprof.analyze.window import HTA, Window
from polyprof.formats.detect import load
from polyprof.trace.keys import CORRELATION_ID
from test_hta_window import _event  # (a complete event of a Kineto trace written here)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("hta") is None,
                                reason="Holistic Trace Analysis is not installed (pip install HolisticTraceAnalysis)")

A100 = Path(__file__).parent / "data" / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
#: cuda_sync records on streams: Stream Wait Event (HTA's COMPUTATION), Stream Sync and
#: Context Sync (its OTHER)
ALEXNET = A100.with_name("a100_alexnet_small.json.gz")

_DRIVER = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
out = {}
for d in sys.argv[2:]:
    ta = TraceAnalysis(trace_dir=d)
    _, km = ta.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=100000,
                                        include_memory_kernels=True)
    r = {"kernels": {x["name"]: float(x["sum (us)"]) for x in km.to_dict("records")}}
    r["overlap_pct"] = float(ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0])
    ls = next(iter(ta.get_cuda_kernel_launch_stats(ranks=list(ta.t.traces), visualize=False).values()))
    r["launches"] = {str(int(x["correlation"])): [float(x["cpu_duration"]), float(x["gpu_duration"]),
                                                  float(x["launch_delay"])] for x in ls.to_dict("records")}
    out[d] = r
json.dump(out, open(sys.argv[1], "w"))
"""


NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def orphans_trace() -> dict:
    """Three steps (HTA drops the last); compute kernels on stream 7, NCCL kernels on
    stream 8, times in fractional µs. ``k_orphan`` and an NCCL kernel carry correlation
    ids no launch call in the file has (HTA drops them) and run at the same time (22 µs of
    overlap, were they counted); ``k_tiny`` (0.5 µs) rounds to an end 1 µs before its start."""
    host = [_event(f"ProfilerStep#{i + 1}", "user_annotation", 1, 1, 100.0 * i + 0.25, 99.5) for i in range(3)]
    launches = [(1, 10.5), (2, 12.25), (3, 14.5), (4, 110.5), (5, 112.75), (6, 210.5)]
    host += [_event("cudaLaunchKernel", "cuda_runtime", 1, 1, ts, 3.7, correlation=c) for c, ts in launches]
    dev = [_event("k_a", "kernel", 0, 7, 20.3, 30.4, stream=7, correlation=1, device=0),
           _event(NCCL, "kernel", 0, 8, 30.7, 25.2, stream=8, correlation=2, device=0),
           _event("k_tiny", "kernel", 0, 7, 55.2, 0.5, stream=7, correlation=3, device=0),
           _event("k_a", "kernel", 0, 7, 120.25, 20.5, stream=7, correlation=4, device=0),
           _event(NCCL, "kernel", 0, 8, 125.6, 10.1, stream=8, correlation=5, device=0),
           _event("k_a", "kernel", 0, 7, 220.4, 10.0, stream=7, correlation=6, device=0),  # the last step
           _event(NCCL, "kernel", 0, 8, 60.2, 40.3, stream=8, correlation=98, device=0),  # no launch in the file
           _event("k_orphan", "kernel", 0, 7, 70.1, 22.7, stream=7, correlation=99, device=0)]
    meta = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    return {"schemaVersion": 1, "traceEvents": meta + host + dev}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each file as HTA reads it: ``<dir>/rank0.json.gz``."""
    tmp = tmp_path_factory.mktemp("hta_kernels")
    out = {}
    for name, data in (("a100_nccl_rank0", A100.read_bytes()),
                       ("orphans", gzip.compress(json.dumps(orphans_trace()).encode())),
                       ("a100_alexnet_small", ALEXNET.read_bytes())):
        (tmp / name).mkdir()
        out[name] = tmp / name / "rank0.json.gz"
        out[name].write_bytes(data)
    return out


@pytest.fixture(scope="module")
def hta(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """HTA 0.5's kernel table (memory kernels included), overlap and launch stats."""
    res = tmp_path_factory.mktemp("hta_kernels_out") / "hta.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(res), *(str(p.parent) for p in files.values())],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {Path(k).name: v for k, v in json.loads(res.read_text()).items()}


def _by_name(kb) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, ns in zip(column(kb, "name").tolist(), column(kb, "total_ns").tolist()):
        out[name] = out.get(name, 0) + int(ns)
    return out


@pytest.mark.parametrize("name", ["a100_nccl_rank0", "orphans", "a100_alexnet_small"])
def test_kernel_table_equals_htas(files: dict[str, Path], hta: dict[str, dict], name: str) -> None:
    """Each kernel name's total is HTA's ``sum (us)`` to the µs, the same names (before:
    a100_nccl 72 of 72 names off, total 102,978 µs against 100,462; the orphans file
    counted k_orphan and the launch-less NCCL kernel)."""
    kb = kernel_breakdown(load(files[name]), window=HTA)
    want = {k: int(round(1000 * v)) for k, v in hta[name]["kernels"].items()}
    assert _by_name(kb) == want
    if name == "a100_nccl_rank0":
        assert sum(want.values()) == 100_462_000 and int(column(kb, "count").sum()) == 2516
    elif name == "a100_alexnet_small":  # the one cuda_sync row HTA lists (the device view leaves it out)
        assert want["Stream Wait Event"] == 10_000 and "Stream Sync" not in want
    else:  # k_tiny: rounded to an end 1 µs before its start, as HTA sums it
        assert want == {"k_a": 48_000, NCCL: 33_000, "k_tiny": -1_000}


def test_overlap_equals_htas(files: dict[str, Path], hta: dict[str, dict]) -> None:
    """HTA's comm/compute overlap (its 2 decimals), without the launch-less pair."""
    for name in ("a100_nccl_rank0", "orphans"):
        co = comm_comp_overlap(load(files[name]), window=HTA)
        assert round(float(column(co, "overlap_pct")[0]), 2) == hta[name]["overlap_pct"], name
    assert hta["a100_nccl_rank0"]["overlap_pct"] == 14.31
    co = comm_comp_overlap(load(files["orphans"]), window=HTA)
    # NCCL 31-55 and 126-135 (33 µs), k_a 21-50 and 121-140 under them: 19 + 9 µs
    assert (int(column(co, "communication_ns")[0]), int(column(co, "overlap_ns")[0])) == (33_000, 28_000)


def test_launch_table_equals_htas(files: dict[str, Path], hta: dict[str, dict]) -> None:
    """On the launches HTA lists (its launch names), each launch call's and device
    activity's duration is HTA's (before: a100_nccl's 23,788 µs of calls against 21,289),
    and HTA's ``launch_delay`` is polyprof's ``queue_delay_ns`` clipped at 0 (from the
    call's end; polyprof's ``launch_delay_ns`` runs from its start)."""
    for name in ("a100_nccl_rank0", "orphans"):
        t = load(files[name])
        ls = launch_stats(t, window=HTA)
        corr = t.stats.get(CORRELATION_ID)
        assert corr is not None
        has, ids = corr.lookup(column(ls, "device_row"))
        assert has.all()
        got = {str(int(c)): [int(a), int(b), max(int(q), 0)] for c, a, b, q in
               zip(ids.tolist(), column(ls, "cpu_duration_ns").tolist(), column(ls, "device_duration_ns").tolist(),
                   column(ls, "queue_delay_ns").tolist())}
        want = {c: [int(round(1000 * x)) for x in v] for c, v in hta[name]["launches"].items()}
        assert {c: got[c] for c in want} == want, name
        assert set(got) == set(want), name  # cudaLaunchKernel only in both
    assert sum(v[0] for v in hta["a100_nccl_rank0"]["launches"].values()) == 21_289


def test_round_us_alone_rounds_the_kernel_table() -> None:
    """``Window(round_us=True)`` rounds each activity for the kernel table too: whole µs,
    the same rows as without it."""
    t = load(A100)
    plain = kernel_breakdown(t, window=Window(skip_first=None))
    rounded = kernel_breakdown(t, window=Window(skip_first=None, round_us=True))
    assert int(column(plain, "count").sum()) == int(column(rounded, "count").sum())
    assert not (np.asarray(column(rounded, "total_ns")) % 1000).any()
    assert (np.asarray(column(plain, "total_ns")) % 1000).any()
    assert int(column(rounded, "total_ns").sum()) < int(column(plain, "total_ns").sum())


def test_outside_htas_window_nothing_changes(files: dict[str, Path]) -> None:
    """Without HTA's window the file's ns and every device activity count: the orphans
    file's launch-less kernels are in the kernel table and the overlap."""
    t = load(files["orphans"])
    kb = _by_name(kernel_breakdown(t))
    assert kb == {"k_a": 60_900, NCCL: 75_600, "k_tiny": 500, "k_orphan": 22_700}
    co = comm_comp_overlap(t)
    assert int(column(co, "overlap_ns")[0]) > 28_000
