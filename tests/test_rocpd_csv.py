"""rocpd's own CSV files (``rocpd2csv`` / ``rocpd convert --output-format csv``, ROCm 7),
read by formats/rocprof_csv.py.

rocpd's writer puts a ``Guid`` column (the run's id) before rocprofv3's columns, may
spell register columns title-case (``Lds_Block_Size``, ``Vgpr_Count``, ``Sgpr_Count``)
and names agents ``Agent N``; one file may hold several runs (``rocpd2csv -i a.db b.db``),
told apart by their Guid. The kernel file is AMD's own sample (tests/data/rocprof/rocpd_csv,
from HPCTrainingExamples); the API, copy and agent files are written here in the columns
rocpd's writer gives them (rocprofiler-sdk's ``rocpd/source/csv.cpp`` and ``rocpd/csv.py``).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect

SAMPLE = Path(__file__).resolve().parent / "data" / "rocprof" / "rocpd_csv" / "out_kernel_trace.csv"
PID, GUID = 714789, "00006409-00d1-70d1-a5cb-b5ab88214544"

API = ["Guid", "Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp",
       "End_Timestamp"]
COPY = ["Guid", "Kind", "Direction", "Stream_Id", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
        "Start_Timestamp", "End_Timestamp"]
AGENT = ["Guid", "Node_Id", "Logical_Node_Id", "Agent_Type", "Cpu_Cores_Count", "Simd_Count", "Wave_Front_Size",
         "Cu_Count", "Simd_Per_Cu", "Gfx_Target_Version", "Name", "Vendor_Name", "Product_Name", "Model_Name"]


def rows_of(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write(path: Path, header: list[str], rows: list[list]) -> None:
    """As rocpd's writer does: header and text cells quoted, numbers bare."""
    with open(path, "w", newline="") as f:
        f.write(",".join(f'"{h}"' for h in header) + "\n")
        for r in rows:
            f.write(",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in r) + "\n")


def kernels(trace) -> np.ndarray:
    return np.array(trace.strings, dtype=object)[trace.events["category"]] == "kernel"


def test_amd_sample_is_read():
    """AMD's 9 dispatches: every one, its own times and names, on one GPU ("Agent 4"),
    register counts from the title-case columns, the Guid kept for the process."""
    assert detect(SAMPLE) == "rocprofv3-csv"
    want = rows_of(SAMPLE)
    trace = polyprof.load(SAMPLE)
    k = kernels(trace)
    assert int(k.sum()) == len(want) == 9
    durs = [int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in want]
    assert int(trace.events["dur_ns"][k].sum()) == sum(durs) == 551_280
    assert sorted(trace.events["dur_ns"][k].tolist()) == sorted(durs)
    assert sorted(trace.events["start_ns"][k].tolist()) == sorted(int(r["Start_Timestamp"]) for r in want)
    assert sorted(trace.names()[k].tolist()) == sorted(r["Kernel_Name"] for r in want)
    assert {r["Agent_Id"] for r in want} == {"Agent 4"}
    assert [p.name for p in trace.planes if p.kind == "device"] == ["/device:GPU:0"]
    order = np.argsort(trace.events["start_ns"][k])
    rows = np.flatnonzero(k)[order]
    assert trace.stat_dense("vgpr count", -1)[rows].tolist() == [int(r["Vgpr_Count"]) for r in want]
    assert trace.stat_dense("sgpr count", -1)[rows].tolist() == [int(r["Sgpr_Count"]) for r in want]
    assert trace.stat_dense("shared memory", -1)[rows].tolist() == [int(r["Lds_Block_Size"]) for r in want]
    assert trace.metadata["rocprof"]["guids"] == {GUID: trace.sources[0].pid}


def test_amd_sample_summary_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(SAMPLE)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = {rec["name"]: (rec["count"], rec["total_ns"])
           for rec in json.loads(r.stdout)["tables"]["kernel_breakdown"]["records"]}
    want: dict[str, tuple[int, int]] = {}
    for row in rows_of(SAMPLE):
        n, t = want.get(row["Kernel_Name"], (0, 0))
        want[row["Kernel_Name"]] = (n + 1, t + int(row["End_Timestamp"]) - int(row["Start_Timestamp"]))
    assert got == want


def write_run(out: Path, api_name: str, guid: str = GUID, pid: int = PID, shift: int = 0) -> list[list]:
    """Beside AMD's kernels: a launch per kernel (same Correlation_Id), a host-to-device
    copy to Agent 4 and agent_info (the GPU: node 4, logical node 4), as rocpd writes them."""
    kern = rows_of(SAMPLE)
    calls = [[guid, "HIP_RUNTIME_API", "hipLaunchKernel", pid, pid, int(r["Correlation_Id"]),
              int(r["Start_Timestamp"]) - 20_000 + shift, int(r["Start_Timestamp"]) - 19_000 + shift] for r in kern]
    first = int(kern[0]["Start_Timestamp"]) + shift
    calls.append([guid, "HIP_RUNTIME_API", "hipMemcpy", pid, pid, 10, first - 900_000, first - 700_000])
    write(out / f"out_{api_name}.csv", API, calls)
    write(out / "out_memory_copy_trace.csv", COPY, [
        [guid, "MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", 0, "Agent 0", "Agent 4", 10, first - 880_000,
         first - 720_000]])
    write(out / "out_agent_info.csv", AGENT, [
        [guid, 0, 0, "CPU", 64, 0, 0, 0, 0, 0, "AMD EPYC", "AuthenticAMD", "AMD EPYC", ""],
        [guid, 4, 4, "GPU", 0, 304, 64, 304, 4, 90402, "gfx942", "AMD", "AMD Instinct MI300A", "aqua_vanjaram"]])
    return calls


@pytest.mark.parametrize("api_name", ["hip_api_trace", "regions_trace"])
def test_rocpd_directory_every_file_kind(tmp_path, api_name):
    """Kernels, calls (``hip_api_trace.csv``, or ``regions_trace.csv`` with every domain),
    the copy and agent_info, each with its Guid column: the pid from Process_Id, the GPU
    named from agent_info, each launch linked to its kernel and the copy to its call."""
    shutil.copy(SAMPLE, tmp_path / SAMPLE.name)
    calls = write_run(tmp_path, api_name)
    trace = polyprof.load(tmp_path)
    assert [s.pid for s in trace.sources] == [PID]
    k = kernels(trace)
    assert int(k.sum()) == 9
    assert int(trace.events["dur_ns"][k].sum()) == 551_280
    gpu = trace.plane_by_name("/device:GPU:0")
    assert gpu is not None and gpu.properties["agent_node_id"] == 4
    assert gpu.properties["product_name"] == "AMD Instinct MI300A"
    names = trace.names()
    assert sorted(names[~k].tolist()) == sorted([c[2] for c in calls] + ["Memcpy HtoD"])
    src, dst = trace.flows["src"], trace.flows["dst"]
    assert len(src) == len(calls)
    assert names[dst[names[src] == "hipMemcpy"]].tolist() == ["Memcpy HtoD"]
    copy = np.flatnonzero(names == "Memcpy HtoD")
    assert int(trace.events["dur_ns"][copy][0]) == 160_000
    assert trace.tracks[int(trace.events["track"][copy[0]])].plane == gpu.id


def test_two_runs_in_one_file_are_two_processes(tmp_path):
    """``rocpd2csv -i a.db b.db`` writes both runs into each file, by Guid: two processes
    (pids from the calls' Process_Id), each with its own kernels."""
    other_guid, other_pid = "00006409-00d1-70d1-a5cb-000000000002", 715613
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    write_run(a, "hip_api_trace")
    write_run(b, "hip_api_trace", other_guid, other_pid, shift=10**9)
    lines = SAMPLE.read_text().splitlines(keepends=True)
    moved = []
    for line in lines[1:]:
        cells = line.split(",")
        cells[0] = f'"{other_guid}"'
        cells[10], cells[11] = str(int(cells[10]) + 10**9), str(int(cells[11]) + 10**9)
        moved.append(",".join(cells))
    out = tmp_path / "merged"
    out.mkdir()
    (out / SAMPLE.name).write_text("".join(lines) + "".join(moved))
    for name in ("out_hip_api_trace.csv", "out_memory_copy_trace.csv", "out_agent_info.csv"):
        text_a, text_b = (a / name).read_text(), (b / name).read_text()
        (out / name).write_text(text_a + "".join(text_b.splitlines(keepends=True)[1:]))
    trace = polyprof.load(out)
    assert sorted(s.pid for s in trace.sources) == [PID, other_pid]
    k = kernels(trace)
    src_of = np.array([p.source for p in trace.planes])[[t.plane for t in trace.tracks]][trace.events["track"]]
    for s, pid in enumerate(s.pid for s in trace.sources):
        mine = k & (src_of == s)
        assert int(mine.sum()) == 9 and int(trace.events["dur_ns"][mine].sum()) == 551_280, pid
    assert sorted(p.name for p in trace.planes) == ["/device:GPU:0", "/device:GPU:0", "/host:CPU", "/host:CPU"]
    assert len(trace.flows["src"]) == 2 * 10
    assert trace.metadata["rocprof"]["guids"] == {GUID: PID, other_guid: other_pid}


@pytest.mark.parametrize("damage, says", [
    ("drop Queue_Id", "(no Queue_Id)"),
    ("Kind last", "(it begins with Agent_Id, not Kind)"),
])
def test_a_near_header_names_what_is_wrong(tmp_path, damage, says):
    header, *rows = SAMPLE.read_text().splitlines()
    cols = next(csv.reader([header]))
    table = [next(csv.reader([r])) for r in rows]
    drop = cols.index("Queue_Id" if damage == "drop Queue_Id" else "Kind")
    keep = [i for i in range(len(cols)) if i != drop] + ([drop] if damage == "Kind last" else [])
    path = tmp_path / SAMPLE.name
    write(path, [cols[i] for i in keep], [[int(r[i]) if r[i].isdigit() else r[i] for i in keep] for r in table])
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(path)
    assert str(path) in str(e.value) and says in str(e.value), str(e.value)
