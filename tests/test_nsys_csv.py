"""The ``nsys stats`` CSV trace report reader (formats/nsys_csv) against the SQLite export.

``tests/data/nsys_csv/saxpy_2022_*`` are the ``cuda_gpu_trace``, ``cuda_api_trace`` and
``nvtx_pushpop_trace`` reports of the real export ``tests/data/nsys/saxpy_2022.sqlite``,
made by this project's own SQL (``tests/nsys_stats_csv.py``); reading them must give what
reading the export gives: the same events, stats, flows and ``summary --json``. The other
nsys versions' layouts are made here from those files; ``pipit/`` holds a real
``nvtx_pushpop_trace`` written by nsys (hpcgroup/pipit, MIT).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.errors import TraceFormatError
from polyprof.formats import safety
from polyprof.formats.detect import detect

import nsys_stats_csv

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "nsys_csv"
SQLITE = HERE / "data" / "nsys" / "saxpy_2022.sqlite"
GPU, API, NVTX = (DATA / f"saxpy_2022_{r}.csv" for r in ("cuda_gpu_trace", "cuda_api_trace", "nvtx_pushpop_trace"))
STDOUT = DATA / "saxpy_2022_stats_stdout.txt"
NBODY = DATA / "pipit" / "nbody_nvtx_pushpop_trace.csv"
#: stats the CSV reports cannot hold: the NVTX domain (nsys 2022's report has no column for it)
NOT_IN_CSV = {"domain"}


def _events(t: polyprof.Trace) -> list[dict]:
    rows = t.to_arrow().to_pylist()
    return [{k: v for k, v in r.items() if k not in NOT_IN_CSV} for r in rows]


def _flows(t: polyprof.Trace) -> list[tuple]:
    f = t.flows
    return sorted(zip(np.asarray(f["src"]).tolist(), np.asarray(f["dst"]).tolist()))


@pytest.fixture(scope="module")
def exported() -> polyprof.Trace:
    return polyprof.load(SQLITE)


def test_fixtures_are_what_the_sql_makes() -> None:
    reps = nsys_stats_csv.reports(SQLITE)
    for name, text in reps.items():
        assert (DATA / f"saxpy_2022_{name}.csv").read_text() == text, name
    assert STDOUT.read_text() == nsys_stats_csv.stdout_form(reps)


@pytest.mark.parametrize("path", [GPU, API, NVTX, STDOUT, DATA], ids=["gpu+siblings", "api+siblings",
                                                                      "nvtx+siblings", "stdout", "directory"])
def test_same_trace_as_the_sqlite_export(path: Path, exported: polyprof.Trace) -> None:
    assert detect(path) == "nsys-stats-csv"
    t = polyprof.load(path)
    got, want = _events(t), _events(exported)
    assert len(got) == len(want) == 5 + 15 + 57 + 22  # kernels, copies, CUDA calls, NVTX ranges
    for g, w in zip(got, want):
        assert g == w
    assert _flows(t) == _flows(exported) and len(_flows(t)) == 20
    # the 38 repeats nsys 2022 records (another event class, a wider span) are left out, as the export's reader does
    assert "38 CUDA API rows repeat" in t.metadata["nsys"]["notes"][0]
    assert [p.name for p in t.planes] == [p.name for p in exported.planes]
    assert t.planes[1].properties["name"] == "NVIDIA A100-SXM4-40GB"


@pytest.mark.parametrize("form", ["stdout", "directory"])
def test_summary_json_matches_the_export(tmp_path: Path, form: str) -> None:
    """The ``polyprof`` command on nsys stats' printed output, and on -o PREFIX's directory
    (one trace, not a job of ranks: ranks/sources.py), gives the export's summary."""
    def summary(p: Path) -> dict:
        r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(p)], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    if form == "directory":
        for f in (GPU, API, NVTX):
            shutil.copy(f, tmp_path / f.name)
    got, want = summary(STDOUT if form == "stdout" else tmp_path), summary(SQLITE)
    for table in ("kernel_breakdown", "launch_stats", "section_stats", "idle_time_breakdown", "temporal_breakdown",
                  "event_stats", "device_op_breakdown"):
        assert got["tables"][table] == want["tables"][table], table
    assert got == want
    kb = {r["name"]: r for r in got["tables"]["kernel_breakdown"]["records"]}
    assert kb["saxpy(double *, double *, double *, double, int)"]["count"] == 5  # a quoted name with commas


def _rewrite(src: Path, dst: Path, header: list[str], row: callable) -> Path:  # type: ignore[valid-type]
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    with open(dst, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(row(dict(zip(rows[0], r))) for r in rows[1:])
    return dst


_LONG = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device"}


def _nsys_2024(r: dict) -> list[str]:
    """A row as nsys 2024 on prints it: a GreenCtx column, copy kinds spelled out."""
    name = r["Name"]
    for short, long in _LONG.items():
        name = name.replace(f"[CUDA memcpy {short}]", f"[CUDA memcpy {long}]")
    vals = [r[c] for c in nsys_stats_csv.GPU_HEADER[:-2]] + ["", r["Strm"], name]
    return vals


def _in_us(r: dict, cols: tuple[str, ...]) -> dict:
    return {k: (f"{int(v) / 1000:.3f}" if k in cols else v) for k, v in r.items()}


def test_header_variants(tmp_path: Path, exported: polyprof.Trace) -> None:
    want = _events(exported)
    # nsys 2024 on: "Throughput (MB/s)", GreenCtx, [CUDA memcpy Host-to-Device]
    new = nsys_stats_csv.GPU_HEADER[:-2]
    new[new.index("Throughput (MBps)")] = "Throughput (MB/s)"
    run = tmp_path / "v2024"
    run.mkdir()
    _rewrite(GPU, run / "r_cuda_gpu_trace.csv", new + ["GreenCtx", "Strm", "Name"], _nsys_2024)
    shutil.copy(API, run / "r_cuda_api_trace.csv")
    shutil.copy(NVTX, run / "r_nvtx_pushpop_trace.csv")
    t = polyprof.load(run / "r_cuda_gpu_trace.csv")
    assert [{k: v for k, v in e.items()} for e in _events(t)] == want
    # nsys 2021's report names (gputrace, cudaapitrace, nvtxpptrace) and PID/TID spelled in capitals
    old = tmp_path / "v2021"
    old.mkdir()
    shutil.copy(GPU, old / "r_gputrace.csv")
    _rewrite(API, old / "r_cudaapitrace.csv", [h.upper() if h in ("Pid", "Tid") else h
                                               for h in nsys_stats_csv.API_HEADER], lambda r: list(r.values()))
    shutil.copy(NVTX, old / "r_nvtxpptrace.csv")
    assert _events(polyprof.load(old)) == want
    # --timeunit us: times with decimals, read back to the ns
    us = tmp_path / "us"
    us.mkdir()
    cols = ("Start (ns)", "Duration (ns)")
    _rewrite(GPU, us / "r_cuda_gpu_trace.csv", [c.replace("(ns)", "(us)") for c in nsys_stats_csv.GPU_HEADER],
             lambda r: list(_in_us(r, cols).values()))
    _rewrite(API, us / "r_cuda_api_trace.csv", [c.replace("(ns)", "(us)") for c in nsys_stats_csv.API_HEADER],
             lambda r: list(_in_us(r, cols).values()))
    t = polyprof.load(us)
    got = _events(t)
    dev = [e for e in want if e["category"] != "nvtx"]
    assert [(e["name"], e["start_ns"], e["dur_ns"]) for e in got] == [(e["name"], e["start_ns"], e["dur_ns"])
                                                                       for e in dev]


def test_truncated_last_line(tmp_path: Path, exported: polyprof.Trace) -> None:
    text = GPU.read_bytes()
    cut = tmp_path / "r_cuda_gpu_trace.csv"
    cut.write_bytes(text[:-25])  # the last row, cut inside its kernel name
    t = polyprof.load(cut)
    assert len(t.to_arrow()) == 19  # 20 device rows less the cut one
    assert any("cut short" in w for w in t.metadata["warnings"])
    assert any("no cuda_api_trace" in w for w in t.metadata["warnings"])


def test_summary_reports_refused_by_name(tmp_path: Path) -> None:
    header = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
    row = '100.0,88602440,5,17720488.0,17720488.0,17704808,17740872,14000.1,"saxpy(double *, double *, int)"\n'
    f = tmp_path / "run_cuda_gpu_kern_sum.csv"
    f.write_text(header + row)
    with pytest.raises(TraceFormatError, match=r"cuda_gpu_kern_sum\) have no timeline.*SQLite export.*_trace"):
        polyprof.load(f)
    out = tmp_path / "stats.txt"
    out.write_text("Processing [r.sqlite] with [/opt/nsys/reports/cuda_api_sum.py]... \n" + header + row + "\n")
    with pytest.raises(TraceFormatError, match=r"\(cuda_api_sum\) have no timeline"):
        polyprof.load(out)
    # summaries beside trace reports (nsys profile --stats=true's default set and a trace): read, summaries named
    mixed = tmp_path / "mixed.txt"
    mixed.write_text(out.read_text() + STDOUT.read_text())
    t = polyprof.load(mixed)
    assert "summary reports not read (no timeline): cuda_api_sum" in t.metadata["nsys"]["notes"]
    # -o PREFIX's directory with a summary beside the traces: one run, the summary named
    run = tmp_path / "run"
    shutil.copytree(DATA, run, ignore=shutil.ignore_patterns("pipit", "*.txt", "*.md"))
    shutil.copy(f, run / "saxpy_2022_cuda_gpu_kern_sum.csv")
    t = polyprof.load(run)
    assert len(t.to_arrow()) == 99
    assert "summary reports not read (no timeline): cuda_gpu_kern_sum" in t.metadata["nsys"]["notes"]


def test_nvtx_of_real_nsys_report() -> None:
    """pipit's nbody-nvtx/trace.csv, as nsys wrote it: 131 ranges on one thread."""
    with open(NBODY, newline="") as f:
        rows = list(csv.DictReader(f))
    t = polyprof.load(NBODY)
    st = section_stats(t)
    got = {n: (int(c), int(s)) for n, c, s in zip(column(st, "name"), column(st, "count"), column(st, "total_ns"))}
    want: dict[str, tuple[int, int]] = {}
    for r in rows:
        c, s = want.get(r["Name"], (0, 0))
        want[r["Name"]] = (c + 1, s + int(r["Duration (ns)"]))
    assert got == want and got["cudaDeviceSynchronize"][0] == 40
    assert len(t.to_arrow()) == len(rows) == 131


def test_domain_prefixed_names(tmp_path: Path) -> None:
    """nsys 2025 on writes NVTX names as ``<domain>:<text>`` (``:text`` in the default domain)."""
    f = tmp_path / "x_nvtx_pushpop_trace.csv"
    f.write_text(NVTX.read_text().splitlines()[0] + "\n"
                 "100,900,800,0,800,:copy_in,53,53,0,0,1,,:1,:copy_in\n"
                 "1000,1200,200,0,200,MPI:MPI_Send,53,53,0,0,2,,:2,MPI:MPI_Send\n")
    a = polyprof.load(f).to_arrow().to_pylist()
    assert [(e["name"], e["domain"]) for e in a] == [("copy_in", None), ("MPI_Send", "MPI")]


def test_not_taken_from_other_csvs(tmp_path: Path) -> None:
    other = tmp_path / "scores.csv"
    other.write_text("Start (ns),Name,Value\n1,a,2\n")
    with pytest.raises(TraceFormatError, match="unrecognised format"):
        detect(other)


def test_hostile_files_are_bounded(tmp_path: Path) -> None:
    """A report of 400,000 rows under a limit of 1,000 events is refused after the first
    batch; a 48 MB line is no header, nor a row (longer than a parser's block): each
    refused in one line, quickly."""
    big = tmp_path / "big_cuda_gpu_trace.csv"
    row = "1,2,3,1,1,1,1,1,1,8,0.000,0.000,,,,,GPU (0),1,7,k\n"
    with open(big, "w") as f:
        f.write(",".join(nsys_stats_csv.GPU_HEADER) + "\n")
        f.write(row * 400_000)
    t0 = time.perf_counter()
    with safety.override(max_events=1000), pytest.raises(TraceFormatError, match="more than 1,000 events"):
        polyprof.load(big)
    assert time.perf_counter() - t0 < 5
    line = tmp_path / "junk.txt"
    line.write_bytes(b"Processing [r.sqlite] with [r/cuda_gpu_trace.py]... \n" + b"9," * (24 << 20))
    t0 = time.perf_counter()
    with pytest.raises(TraceFormatError, match="no nsys stats trace report"):
        polyprof.load(line)
    row_of_48mb = tmp_path / "long_cuda_gpu_trace.csv"
    row_of_48mb.write_bytes(",".join(nsys_stats_csv.GPU_HEADER).encode() + b"\n1,2,3," + b"9" * (48 << 20) + b"\n")
    with pytest.raises(TraceFormatError, match="malformed CSV"):
        polyprof.load(row_of_48mb)
    assert time.perf_counter() - t0 < 10
    bad = tmp_path / "bad_cuda_gpu_trace.csv"
    bad.write_text(",".join(nsys_stats_csv.GPU_HEADER) + "\n" + row.replace("1,2,3", "x,2,3", 1))
    with pytest.raises(TraceFormatError, match="malformed CSV"):
        polyprof.load(bad)
    bad.write_text(",".join(nsys_stats_csv.GPU_HEADER) + "\n" + "1,2,3,,,,,,,,,,1e400,,,,GPU (0),1,7,[CUDA memset]\n")
    with pytest.raises(TraceFormatError, match="row 1: Bytes \\(MB\\) is not a size"):
        polyprof.load(bad)
    bad.write_text(",".join(c.replace("(ns)", "(s)") for c in nsys_stats_csv.GPU_HEADER) + "\n"
                   + "1e300,2,3,,,,,,,,,,1,,,,GPU (0),1,7,[CUDA memset]\n")
    with pytest.raises(TraceFormatError, match=r"row 1: Start \(s\) is 1e\+?300, not a time"):
        polyprof.load(bad)


def test_memsets_units_and_quoted_cells(tmp_path: Path) -> None:
    """Sizes in bytes (``(byte)``), a quoted device, a memset (its memory kind in
    SrcMemKd), a kernel name with commas and quotes, two processes told apart by the
    correlation ids of their calls."""
    gpu = tmp_path / "two_cuda_gpu_trace.csv"
    gpu.write_text(
        "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (byte),DymSMem (byte),"
        "Bytes (byte),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
        '1000,800,11,,,,,,,,,,4096,5.12,Device,,"NVIDIA H100 (1)",1,,7,[CUDA memset]\n'
        '2000,50,12,16,1,1,128,1,1,32,1024,2048,,,,,"NVIDIA H100 (1)",1,3,7,'
        '"void k<(int)1024, (bool)0>(const float *, ""x"")"\n'
        '3000,70,21,,,,,,,,,,1048576,9.9,Pinned,Device,"NVIDIA H100 (1)",2,,9,[CUDA memcpy Host-to-Device]\n')
    (tmp_path / "two_cuda_api_trace.csv").write_text(
        "Start (ns),Duration (ns),Name,Result,CorrID,PID,TID,T-Pri,Thread Name\n"
        "900,10,cudaMemsetAsync,0,11,100,101,0,main\n1900,10,cuLaunchKernel,0,12,100,101,0,main\n"
        "2900,10,cudaMemcpyAsync_v3020,0,21,200,201,0,worker\n")
    t = polyprof.load(gpu)
    ev = {e["name"]: e for e in t.to_arrow().to_pylist()}
    assert ev["Memset (Device)"]["bytes"] == 4096 and ev["Memset (Device)"]["category"] == "gpu_memset"
    k = ev['void k<(int)1024, (bool)0>(const float *, "x")']
    assert (k["grid"], k["block"], k["registers per thread"], k["shared memory"]) == ("16,1,1", "128,1,1", 32, 3072)
    assert k["green context"] == 3 and k["plane"] == "/device:GPU:1"
    cp = ev["Memcpy HtoD (Pinned -> Device)"]
    assert (cp["bytes"], cp["copy kind"], cp["track"]) == (1048576, "HtoD", "stream 9")
    assert ev["cuLaunchKernel"]["category"] == "cuda_driver" and ev["cudaMemcpyAsync"]["category"] == "cuda_runtime"
    assert sorted(s.pid for s in t.sources) == [100, 200]
    src_of = t.event_sources()
    names = list(t.names())
    assert t.sources[src_of[names.index("Memcpy HtoD (Pinned -> Device)")]].pid == 200
    assert t.sources[src_of[names.index("Memset (Device)")]].pid == 100
    assert len(_flows(t)) == 3


def test_nvtx_gpu_projection_and_unended_ranges(tmp_path: Path) -> None:
    """nvtx_gpu_proj_trace (nsys 2026's header): its original host ranges, when there is
    no push/pop report; a push/pop range without an end is left out, said so."""
    proj = tmp_path / "r_nvtx_gpu_proj_trace.csv"
    proj.write_text("Name,Projected Start (ns),Projected Duration (ns),Orig Start (ns),Orig Duration (ns),Style,"
                    "PID,TID,NumGPUOps,Lvl,NumChild,RangeId,ParentId,RangeStack\n"
                    "step,1100,9000,1000,10000,PushPop,42,77,2,0,1,100,,:100\n"
                    "moe,3100,7000,1290,100,PushPop,42,77,1,1,0,300,100,:100:300\n")
    got = [(e["name"], e["start_ns"], e["dur_ns"], e["category"]) for e in polyprof.load(proj).to_arrow().to_pylist()]
    assert got == [("step", 1000, 10000, "nvtx"), ("moe", 1290, 100, "nvtx")]
    pp = tmp_path / "r_nvtx_pushpop_trace.csv"
    pp.write_text(NVTX.read_text().splitlines()[0] + "\n100,900,800,0,800,a,1,1,0,0,1,,:1,a\n"
                  "1000,,,0,,b,1,1,0,0,2,,:2,b\n")
    t = polyprof.load(pp)  # its sibling, the projection, is not read beside it
    assert [e["name"] for e in t.to_arrow().to_pylist()] == ["a"]
    assert any("1 NVTX ranges never ended" in w for w in t.metadata["warnings"])
    assert "nvtx_gpu_proj_trace not read" in t.metadata["nsys"]["notes"][0]


def test_long_preamble_is_skipped_quickly(tmp_path: Path) -> None:
    """A program's output before the reports (a million lines) is jumped over."""
    f = tmp_path / "out.txt"
    f.write_text("Processing [r.sqlite] with [r/cuda_api_trace.py]...\n" + "step 1 loss 0.5\n" * 1_000_000
                 + STDOUT.read_text())
    t0 = time.perf_counter()
    t = polyprof.load(f)
    assert time.perf_counter() - t0 < 10
    assert len(t.to_arrow()) == 99


def test_correlation_ids_repeated_across_processes_are_said(tmp_path: Path) -> None:
    """cuda_gpu_trace names no process: a device row whose id two processes' calls have
    goes to the first, and the trace says how many such rows there are."""
    (tmp_path / "m_cuda_gpu_trace.csv").write_text(
        ",".join(nsys_stats_csv.GPU_HEADER) + "\n"
        "1000,50,7,1,1,1,32,1,1,8,0.000,0.000,,,,,GPU (0),1,7,k\n2000,50,8,1,1,1,32,1,1,8,0.000,0.000,,,,,GPU (0),1,7,k\n")
    (tmp_path / "m_cuda_api_trace.csv").write_text(
        ",".join(nsys_stats_csv.API_HEADER) + "\n"
        "900,10,cudaLaunchKernel,0,7,100,100,0,a\n950,10,cudaLaunchKernel,0,7,200,200,0,b\n"
        "1900,10,cudaLaunchKernel,0,8,100,100,0,a\n")
    t = polyprof.load(tmp_path)
    assert any(w.startswith("1 device rows have a correlation id that calls of several processes have")
               for w in t.metadata["warnings"])
    names, src = list(t.names()), t.event_sources()
    assert {t.sources[src[i]].pid for i, n in enumerate(names) if n == "k"} == {100}


def test_a_directory_of_several_runs_is_a_job_of_ranks(tmp_path: Path) -> None:
    """``nsys stats -o rank0 ...`` and ``-o rank1 ...`` into one directory: on the command
    line, one rank per prefix (ranks/sources.py), each read with its siblings."""
    for r in (0, 1):
        for f in (GPU, API, NVTX):
            shutil.copy(f, tmp_path / f.name.replace("saxpy_2022_", f"rank{r}_"))
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(tmp_path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("polyprof summary: 2 ranks, 198 events")
    with pytest.raises(TraceFormatError, match="several runs"):
        polyprof.load(tmp_path)  # one trace asked for: which run is not guessed
