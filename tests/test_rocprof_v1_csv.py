"""rocprof (v1)'s kernel CSV (``results.csv``): a row per dispatch, read as kernels.

The real file is gunrock's (tests/data/peers/gunrock, Apache-2.0): a BFS run under
``rocprof --stats`` on one AMD GPU (gpu-id 2, two queues), with the
``results.stats.csv`` rocprof wrote from the same run: the per-kernel counts and ns are
checked against it.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from polyprof.trace.categories import Kind

GUNROCK = Path(__file__).resolve().parent / "data" / "peers" / "gunrock"

#: the header rocprof v1 wrote in ROCm 5/6 (gunrock's, the rocm-blogs example's)
HEADER = ('"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr","lds","scr","arch_vgpr",'
          '"accum_vgpr","sgpr","wave_size","sig","obj","DispatchNs","BeginNs","EndNs","CompleteNs","DurationNs"')


def _per_name(t: polyprof.Trace) -> tuple[Counter, Counter]:
    calls: Counter = Counter()
    ns: Counter = Counter()
    for n, d in zip(t.names().tolist(), t.dur_ns.tolist()):
        calls[n] += 1
        ns[n] += d
    return calls, ns


def test_gunrock_results_csv_matches_its_stats_file():
    t = polyprof.load(GUNROCK / "results.csv")
    assert detect(GUNROCK / "results.csv") == "rocprof-v1-csv"
    calls, ns = _per_name(t)
    with open(GUNROCK / "results.stats.csv", newline="") as f:
        stats = {r["Name"]: (int(r["Calls"]), int(r["TotalDurationNs"])) for r in csv.DictReader(f)}
    assert len(stats) == 8 and {n: (calls[n], ns[n]) for n in calls} == stats
    assert t.n_events == 56 and sum(ns.values()) == 9_025_354
    assert [p.name for p in t.planes] == ["/device:GPU:2"] and t.planes[0].vendor == "AMD"
    per_track = Counter(t.tracks[k].name for k in t.events["track"].tolist())
    assert per_track == {"queue 0": 28, "queue 1": 28}
    assert (t.kinds == Kind.KERNEL).all()
    first = int(np.argmin(t.start_ns))  # Index 0: __amd_rocclr_copyBuffer.kd, BeginNs..EndNs as written
    assert t.names()[first] == "__amd_rocclr_copyBuffer.kd"
    assert (int(t.start_ns[first]), int(t.dur_ns[first])) == (3599977333839958, 3599977333845531 - 3599977333839958)
    row = t.stats.lookup_rows(["grid", "block", "dispatch id", "shared memory"], np.array([first]))
    assert [row[k][1][0] for k in ("grid", "block", "dispatch id", "shared memory")] == ["155648", "512", 0, 0]


def test_end_before_begin_is_zero_ns_and_said(tmp_path):
    """Real files have rows whose EndNs is before BeginNs (a copy kernel of -756 ns in a
    public results.csv): such a dispatch is 0 ns long, counted in a warning; an older
    header (``Index`` unquoted, no pid, ``vgpr``/``fbar``) reads the same."""
    p = tmp_path / "results.csv"
    p.write_text('Index,"KernelName","gpu-id","queue-id","queue-index","tid","grd","wgr","lds","scr","vgpr","sgpr",'
                 '"fbar","sig","DispatchNs","BeginNs","EndNs","CompleteNs","DurationNs"\n'
                 '0,"__amd_rocclr_copyBuffer.kd",1,0,14,611771,512,512,0,0,16,128,0,0x0,1,255625569889490,'
                 '255625569890975,2,1485\n'
                 '1,"__amd_rocclr_copyBuffer.kd",1,0,16,611771,512,512,0,0,16,128,0,0x0,1,255625569903820,'
                 '255625569903064,2,-756\n'
                 '2,"matmul_kernel(long, int*, int*, int*)",1,1,2,611771,1016064,256,0,0,0,0,0,0x0,1,'
                 '255625570000000,255625570017218,2,17218\n')
    t = polyprof.load(p)
    calls, ns = _per_name(t)
    assert calls == {"__amd_rocclr_copyBuffer.kd": 2, "matmul_kernel(long, int*, int*, int*)": 1}
    assert ns == {"__amd_rocclr_copyBuffer.kd": 1485, "matmul_kernel(long, int*, int*, int*)": 17218}
    assert [p.name for p in t.planes] == ["/device:GPU:1"]
    assert any("1 of 3 dispatches end before they begin" in w for w in t.metadata["warnings"])


def test_devices_processes_and_counters(tmp_path):
    """gpu-id is the device (as rocprof's results.json names it ``GPU<n>``), pid the
    process; the counters asked for with ``-i`` (columns after the times) are stats."""
    p = tmp_path / "results.csv"
    rows = [(0, "k_a", 2, 0, 100, 1000, 1500, 72.5), (1, "k_b", 3, 0, 100, 1200, 1300, 10.0),
            (2, "k_a", 2, 1, 200, 2000, 2600, 50.0)]
    p.write_text(HEADER + ',"VALUUtilization"\n' + "".join(
        f'{i},"{n}",{g},{q},0,{pid},{pid},256,64,0,0,8,0,16,64,"0x0","0x1",1,{b},{e},1,{e - b},{u}\n'
        for i, n, g, q, pid, b, e, u in rows))
    t = polyprof.load(p)
    assert sorted(s.pid for s in t.sources) == [100, 200]  # a plane per device of each process
    assert sorted((t.sources[pl.source].pid, pl.name) for pl in t.planes) == [
        (100, "/device:GPU:2"), (100, "/device:GPU:3"), (200, "/device:GPU:2")]
    order = np.argsort(t.start_ns)
    assert t.dur_ns[order].tolist() == [500, 100, 600]
    util = t.stats.lookup_rows(["VALUUtilization"], order)["VALUUtilization"][1]
    assert np.asarray(util, float).tolist() == [72.5, 10.0, 50.0]
    planes = [t.planes[t.track_plane[k]].name for k in t.events["track"][order]]
    assert planes == ["/device:GPU:2", "/device:GPU:3", "/device:GPU:2"]


@pytest.mark.parametrize("name, header, what", [
    ("results.stats.csv", '"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n"k",1,5280,5280,100.0\n',
     "give polyprof results.csv beside it instead: the kernel dispatches it sums up"),
    ("results.hip_stats.csv", '"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n"hipMalloc",1,9,9,100.0\n',
     "give polyprof results.json beside it instead: the HIP calls"),
    ("output.csv", 'Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,accum_vgpr,sgpr,'
     'wave_size,sig,obj,GPUBusy,Wavefronts\n0,"vector_add(float*) [clone .kd]",4,0,0,29564,29564,1000000000,256,0,0,'
     '8,0,16,64,0x0,0x7faada620900,100.0,15625000.0\n', "kernel CSV without times"),
])
def test_what_is_not_a_trace_says_what_to_give(tmp_path, name, header, what):
    f = tmp_path / name
    f.write_text(header)
    with pytest.raises(TraceFormatError, match=what):
        polyprof.load(f)


@pytest.mark.parametrize("begin, what", [("3e2", "malformed CSV (column 'BeginNs': In CSV column #18: CSV conversion error to int64: "
                                                    "invalid value '3e2')"), ("", "row 3: BeginNs is empty")])
def test_a_bad_time_is_named(tmp_path, begin, what):
    p = tmp_path / "results.csv"
    p.write_text(HEADER + '\n0,"k",2,0,0,1,1,256,64,0,0,8,0,16,64,"0x0","0x1",1,100,200,1,100\n'
                 f'1,"k",2,0,0,1,1,256,64,0,0,8,0,16,64,"0x0","0x1",1,{begin},400,1,100\n')
    with pytest.raises(TraceFormatError, match=re.escape(what)):
        polyprof.load(p)
