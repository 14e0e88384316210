"""rocprof-compute's (Omniperf's) workload files and rocprofv3's thread-trace statistics
are refused saying what each is and what to give polyprof instead, not as an
"unrecognised format" (formats/rocprof_compute.py). The workload files are ROCm/omniperf's
own test workloads (tests/data/peers/omniperf/); the two kinds no licensed sample holds
(``pmc_kernel_top.csv``, the thread trace's ``stats_*.csv``) are made here with the
header those tools write."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.rocprof_compute import GIVE

OMNIPERF = Path(__file__).parent / "data" / "peers" / "omniperf"

#: each file -> the words that say what it is
CASES = {
    "vcopy_MI300X_A1_pmc_perf.csv": "a rocprof-compute (Omniperf) table of kernel dispatches (pmc_perf.csv",
    "vcopy_MI300X_A1_timestamps.csv": "a rocprof-compute (Omniperf) table of kernel dispatches (pmc_perf.csv",
    "vcopy_MI300X_A1_sysinfo.csv": "rocprof-compute's (Omniperf's) sysinfo.csv",
    "device_filter_MI200_pmc_dispatch_info.csv": "rocprof-compute's pmc_dispatch_info.csv",
    "device_filter_MI200_roofline.csv": "rocprof-compute's roofline.csv",
}


def _refusal(path: Path) -> str:
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(path)
    assert str(path) in str(e.value)
    return e.value.problem


@pytest.mark.parametrize("name", sorted(CASES))
def test_omniperf_workload_files_say_what_they_are(name: str) -> None:
    problem = _refusal(OMNIPERF / name)
    assert problem.startswith(CASES[name]), problem
    assert problem.endswith(GIVE) and "unrecognised format" not in problem


def test_made_files_say_what_they_are(tmp_path: Path) -> None:
    top = tmp_path / "pmc_kernel_top.csv"  # rocprof-compute's totals per kernel (its file_io.py's columns)
    top.write_text("Kernel_Name,Count,Sum(ns),Mean(ns),Median(ns),Pct\nvecCopy,3,300.0,100.0,100.0,100.0\n")
    assert _refusal(top).startswith("rocprof-compute's pmc_kernel_top.csv (totals per kernel)")
    att = tmp_path / "stats_ui_output_agent_1_dispatch_1.csv"  # rocprofv3 --att's per-instruction statistics
    att.write_text('"CodeObj","Vaddr","Instruction","Hitcount","Latency","Stall","Idle","Source"\n'
                   '1,18432,"s_endpgm",1,4,0,0,""\n')
    assert _refusal(att).startswith("rocprofv3's thread trace (--att) statistics")


def test_the_cli_says_it_in_one_line() -> None:
    path = OMNIPERF / "vcopy_MI300X_A1_pmc_perf.csv"
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "rocprofv3 --kernel-trace --hip-trace" in lines[0]
