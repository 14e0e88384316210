"""rocprofv3's CSV output (formats/rocprof_csv.py).

- ``tests/data/rocprof/csv/*.csv``: rocprofiler-sdk's own documentation samples
  (``source/docs/data``, MIT: LICENSE-rocprofiler-sdk beside them), each from a
  different small run; read as files and as one directory.
- A run written by **this test** in rocprofv3's CSV layout (the columns and order of
  rocprofiler-sdk's ``generateCSV.cpp``): the kernel dispatches of the real rocprofv3
  JSON of tests/data/rocprof (an MI350X, from TraceLens's tests) as
  ``908_kernel_trace.csv`` with its ``agent_info.csv``, and made-up around them (no AMD
  hardware ran these): a hipLaunchKernel per kernel with the kernel's Correlation_Id, a
  hipMemcpy with a host-to-device copy of the same id, ROCTx ranges and a mark. The same
  JSON read by the rocprofv3 JSON reader must give the same kernel totals.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect

DATA = Path(__file__).resolve().parent / "data" / "rocprof"
DOCS = DATA / "csv"
REAL_JSON = DATA / "tracelens_908_results.json.gz"
PID = 908

KERNEL_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                 "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size",
                 "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X",
                 "Grid_Size_Y", "Grid_Size_Z"]
API_HEADER = ["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp",
              "End_Timestamp"]
COPY_HEADER = ["Kind", "Direction", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
               "Start_Timestamp", "End_Timestamp"]
AGENT_HEADER = ["Node_Id", "Logical_Node_Id", "Agent_Type", "Cpu_Cores_Count", "Simd_Count", "Wave_Front_Size",
                "Cu_Count", "Simd_Per_Cu", "Gfx_Target_Version", "Name", "Vendor_Name", "Product_Name",
                "Model_Name"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=120)


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    """As rocprofiler-sdk's csv_encoder writes: every header cell and text cell quoted."""
    with open(path, "w", newline="") as f:
        f.write(",".join(f'"{h}"' for h in header) + "\n")
        for r in rows:
            f.write(",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in r) + "\n")


def _kernels(tool: dict) -> list[dict]:
    return tool["buffer_records"]["kernel_dispatch"]


def _names(tool: dict) -> dict[int, str]:
    return {s["kernel_id"]: s.get("formatted_kernel_name") or s.get("demangled_kernel_name") or s["kernel_name"]
            for s in tool["kernel_symbols"]}


KERNEL_HEADER_7 = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                   "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size",
                   "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y",
                   "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]
COPY_HEADER_7 = ["Kind", "Direction", "Stream_Id", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
                 "Start_Timestamp", "End_Timestamp"]


def write_run(out: Path, layout: str = "6") -> Path:
    """The real JSON's kernels and the made-up calls, copy and ranges as rocprofv3 CSV
    files: ``"6"`` as rocprofiler-sdk wrote them before ROCm 7 (agents as node ids),
    ``"7"`` with ROCm 7's columns (``Stream_Id``, register counts; agents as
    ``Agent <logical node id>``), ``"7-type"`` with ``--agent-index type-relative``
    (``GPU 0``, ``CPU 0``)."""
    with gzip.open(REAL_JSON) as f:
        tool = json.load(f)["rocprofiler-sdk-tool"][0]
    out.mkdir(parents=True, exist_ok=True)
    by_handle = {a["id"]["handle"]: a for a in tool["agents"]}

    def agent(a: dict):
        if layout == "6":
            return a["node_id"]
        if layout == "7":
            return f"Agent {a['logical_node_id']}"
        return f"{'GPU' if a['type'] == 2 else 'CPU'} {a['logical_node_type_id']}"

    names = _names(tool)
    syms = {s["kernel_id"]: s for s in tool["kernel_symbols"]}
    kd = _kernels(tool)
    rows = []
    for k in kd:
        di = k["dispatch_info"]
        a, sym = by_handle[di["agent_id"]["handle"]], syms[di["kernel_id"]]
        wg, grid = [di["workgroup_size"][x] for x in "xyz"], [di["grid_size"][x] for x in "xyz"]
        head = ["KERNEL_DISPATCH", agent(a), di["queue_id"]["handle"]]
        if layout == "6":
            rows.append([*head, k["thread_id"], di["dispatch_id"], di["kernel_id"], names[di["kernel_id"]],
                         k["correlation_id"]["internal"], k["start_timestamp"], k["end_timestamp"],
                         di["private_segment_size"], di["group_segment_size"], *wg, *grid])
        else:
            rows.append([*head, k["stream_id"]["handle"], k["thread_id"], di["dispatch_id"], di["kernel_id"],
                         names[di["kernel_id"]], k["correlation_id"]["internal"], k["start_timestamp"],
                         k["end_timestamp"], di["group_segment_size"], di["private_segment_size"],
                         sym["arch_vgpr_count"], sym["accum_vgpr_count"], sym["sgpr_count"], *wg, *grid])
    write_csv(out / f"{PID}_kernel_trace.csv", KERNEL_HEADER if layout == "6" else KERNEL_HEADER_7, rows)
    first = min(k["start_timestamp"] for k in kd)
    last_corr = max(k["correlation_id"]["internal"] for k in kd)
    calls = [["HIP_RUNTIME_API", "hipLaunchKernel", PID, k["thread_id"], k["correlation_id"]["internal"],
              k["start_timestamp"] - 50_000, k["start_timestamp"] - 49_100] for k in kd]
    copy_corr = last_corr + 1
    calls.append(["HIP_RUNTIME_API", "hipMemcpy", PID, PID, copy_corr, first - 900_000, first - 700_000])
    write_csv(out / f"{PID}_hip_api_trace.csv", API_HEADER, calls)
    cpu = next(a for a in tool["agents"] if a["type"] == 1)
    gpu = by_handle[kd[0]["dispatch_info"]["agent_id"]["handle"]]
    copy = [agent(cpu), agent(gpu), copy_corr, first - 880_000, first - 720_000]
    write_csv(out / f"{PID}_memory_copy_trace.csv", COPY_HEADER if layout == "6" else COPY_HEADER_7,
              [["MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", *([] if layout == "6" else [0]), *copy]])
    marker = "MARKER_CORE_API" if layout == "6" else "MARKER_CORE_RANGE_API"
    write_csv(out / f"{PID}_marker_api_trace.csv", API_HEADER, [
        [marker, "warmup, then\nthe copy", PID, PID, copy_corr + 1, first - 1_000_000, first - 600_000],
        [marker, "copied", PID, PID, copy_corr + 2, first - 650_000, first - 650_000]])
    agents = [[a["node_id"], a["logical_node_id"], "GPU" if a["type"] == 2 else "CPU", 0, 0, 64, 256, 4, 90500,
               a["name"], "AMD", a.get("product_name", ""), a.get("model_name", "")] for a in tool["agents"]]
    write_csv(out / f"{PID}_agent_info.csv", AGENT_HEADER, agents)
    write_csv(out / f"{PID}_kernel_stats.csv", ["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage",
                                               "MinNs", "MaxNs", "StdDev"], [["x", 1, 1, 1.0, 100.0, 1, 1, 0.0]])
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("rocprofv3") / "host")


def _cats(trace) -> np.ndarray:
    return np.array(trace.strings, dtype=object)[trace.events["category"]]


def _totals(trace) -> dict[str, int]:
    kb = kernel_breakdown(trace)
    return {n: int(t) for n, t in zip(column(kb, "name"), column(kb, "total_ns")) if not n.startswith("Memcpy")}


def _want_totals(path: Path) -> dict[str, int]:
    """Sums of End - Start by Kernel_Name, with the csv module."""
    want: dict[str, int] = defaultdict(int)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            want[row["Kernel_Name"]] += int(row["End_Timestamp"]) - int(row["Start_Timestamp"])
    return dict(want)


# --- the documentation samples ---------------------------------------------------
@pytest.mark.parametrize("name", ["kernel_trace.csv", "hip_runtime_trace.csv", "hip_compile_trace.csv",
                                  "hsa_api_trace.csv", "marker_api_trace.csv", "memory_copy_trace.csv"])
def test_docs_trace_files_are_sniffed_by_header(name):
    assert detect(DOCS / name) == "rocprofv3-csv"


@pytest.mark.parametrize("name, says", [("counter_collection.csv", "rocprofv3's counter_collection file"),
                                         ("hip_api_stats.csv", "rocprofv3's hip_api_stats file"),
                                         ("pc_sampling_host_trap.csv",  # ROCm/rocm-systems 1b1610fc
                                          "rocprofv3's pc_sampling_host_trap file \\(program counter samples"),
                                         ("kernel_names.csv", "unrecognised format")])
def test_docs_other_csvs_are_not_traces(name, says):
    """A counter or statistics file says what it is and names the trace file beside it
    (formats/rocprof_csv.not_a_trace); a CSV not named as rocprofv3's is unrecognised."""
    with pytest.raises(TraceFormatError, match=says):
        detect(DOCS / name)


def test_docs_directory_reads_every_trace_file():
    trace = polyprof.load(DOCS)
    assert detect(DOCS) == "rocprofv3-csv"
    assert _totals(trace) == _want_totals(DOCS / "kernel_trace.csv")
    names = trace.names()
    cats = _cats(trace).tolist()
    assert sorted(names[_cats(trace) == "gpu_memcpy"].tolist()) == ["Memcpy DtoH", "Memcpy HtoD"]
    with open(DOCS / "hsa_api_trace.csv") as f:
        assert cats.count("hsa_api") == sum(1 for _ in f) - 1
    with open(DOCS / "hip_compile_trace.csv") as f:
        assert cats.count("hip_compiler") == sum(1 for _ in f) - 1
    marks = names[np.array([c == "roctx_mark" for c in cats], bool)]
    assert set(marks.tolist()) >= {"before hipLaunchKernel", "after hipLaunchKernel"}
    md = trace.metadata["rocprof"]
    assert md["format"] == "rocprofv3 csv" and "counter_collection.csv" in md["files_not_read"]
    assert "pc_sampling_host_trap.csv" in md["files_not_read"]  # listed, not left out without a word


def test_docs_copies_have_a_direction_and_no_size():
    """The copies table on the sample memory_copy_trace.csv, against the file read by
    csv: one copy per direction, its time, on the GPU (agent 1; agent 0 the CPU). rocprofv3
    writes no size in this file (generateCSV.cpp: Kind, Direction, [Stream_Id,] agents,
    Correlation_Id, times), so every copy is unsized: no bytes, no bandwidth."""
    from polyprof.analyze.copies import copies  # the table checked

    with open(DOCS / "memory_copy_trace.csv", newline="") as f:
        got = list(csv.DictReader(f))
    assert not {"Bytes", "Size", "Copy_Bytes"} & set(got[0])
    want = {r["Direction"]: int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in got}
    assert want == {"MEMORY_COPY_HOST_TO_DEVICE": 563880, "MEMORY_COPY_DEVICE_TO_HOST": 581800}
    for path in (DOCS / "memory_copy_trace.csv", DOCS):
        t = copies(polyprof.load(path))
        rows = {k: (d, n, ns, b, u, bw) for k, d, n, ns, b, u, bw in zip(
            t["kind"], t["device"], t["count"], t["total_ns"], t["total_bytes"], t["unsized"], t["bandwidth_gbps"])}
        for direction, kind in (("MEMORY_COPY_HOST_TO_DEVICE", "HtoD"), ("MEMORY_COPY_DEVICE_TO_HOST", "DtoH")):
            d, n, ns, b, u, bw = rows.pop(kind)
            assert (d, n, ns, b, u) == ("/device:GPU:0", 1, want[direction], 0, 1) and np.isnan(bw)
        assert not rows


# --- a whole run, made consistent --------------------------------------------------
def test_run_kernels_durations_and_launches(run_dir):
    kt = run_dir / f"{PID}_kernel_trace.csv"
    trace = polyprof.load(kt)  # a single kernel_trace.csv reads its siblings
    assert _totals(trace) == _want_totals(kt)
    with gzip.open(REAL_JSON) as f:
        tool = json.load(f)["rocprofiler-sdk-tool"][0]
    kd = _kernels(tool)
    kernel = _cats(trace) == "kernel"
    assert int(kernel.sum()) == len(kd)
    assert sorted(trace.events["dur_ns"][kernel].tolist()) == sorted(
        k["end_timestamp"] - k["start_timestamp"] for k in kd)
    # every kernel and the copy reached by a flow from the call with its Correlation_Id
    src, dst = trace.flows["src"], trace.flows["dst"]
    names = trace.names()
    assert len(src) == len(kd) + 1
    assert set(names[src].tolist()) == {"hipLaunchKernel", "hipMemcpy"}
    assert names[dst[names[src] == "hipMemcpy"]].tolist() == ["Memcpy HtoD"]
    assert (trace.events["start_ns"][src] < trace.events["start_ns"][dst]).all()
    # GPUs named from agent_info: node 2 is GPU 0
    assert {p.name for p in trace.planes} == {"/host:CPU", "/device:GPU:0"}
    cats = _cats(trace).tolist()
    assert cats.count("roctx") == 1 and cats.count("roctx_mark") == 1
    assert names[_cats(trace) == "roctx"].tolist() == ["warmup, then\nthe copy"]  # a message as written
    # the range holds the hipMemcpy call: its device time is the copy's (160 us)
    st = section_stats(trace)
    assert dict(zip(column(st, "name"), column(st, "device_ns")))["warmup, then\nthe copy"] == 160_000
    assert trace.metadata["rocprof"]["files_not_read"] == [f"{PID}_kernel_stats.csv"]


def test_run_same_kernel_totals_as_rocprofv3_json(run_dir):
    assert _totals(polyprof.load(run_dir)) == _totals(polyprof.load(REAL_JSON))


@pytest.mark.parametrize("layout", ["7", "7-type"])
def test_rocm7_columns_and_agent_names(tmp_path, layout):
    """ROCm 7's kernel and copy columns, agents as ``Agent N`` or ``GPU N``: the same
    kernels on the same GPU, the copy on it, every launch linked, registers read."""
    trace = polyprof.load(write_run(tmp_path, layout))
    assert _totals(trace) == _totals(polyprof.load(REAL_JSON))
    assert {p.name for p in trace.planes} == {"/host:CPU", "/device:GPU:0"}
    gpu = next(p for p in trace.planes if p.name == "/device:GPU:0")
    assert gpu.properties["agent_node_id"] == 2
    assert len(trace.flows["src"]) == len(_kernels(json.load(gzip.open(REAL_JSON))["rocprofiler-sdk-tool"][0])) + 1
    cats = _cats(trace).tolist()
    assert cats.count("roctx") == 1 and cats.count("roctx_mark") == 1 and cats.count("gpu_memcpy") == 1


def test_summary_of_the_directory(run_dir):
    r = cli("summary", "--json", str(run_dir))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    want = _want_totals(run_dir / f"{PID}_kernel_trace.csv")
    got = {rec["name"]: rec["total_ns"] for rec in doc["tables"]["kernel_breakdown"]["records"]
           if rec["name"] in want}  # (the kernels: not the copy of the memory copy CSV)
    kinds = {rec["name"]: rec["kind"] for rec in doc["tables"]["kernel_breakdown"]["records"]}
    assert kinds["__amd_rocclr_copyBuffer"] == "memcpy"  # ROCclr's blit kernel: a copy, not compute
    top = sorted(want.items(), key=lambda kv: -kv[1])[:len(got)]
    assert got == dict(top)
    assert doc["overview"]["correlation"]["matched_by_correlation_id"] == sum(1 for _ in open(
        run_dir / f"{PID}_kernel_trace.csv")) - 1 + 1
    r = cli("summary", str(run_dir))  # the terminal tables: the top kernel by name
    assert r.returncode == 0, r.stderr
    assert "Top device activity" in r.stdout and top[0][0][:20] in r.stdout


def test_two_pids_in_one_directory_are_two_processes_or_ranks(run_dir, tmp_path):
    for q in run_dir.iterdir():
        shutil.copy(q, tmp_path / q.name)
        if q.name.endswith(("_api_trace.csv",)):
            text = q.read_text().replace(f",{PID},", ",909,")
        else:
            text = q.read_text()
        (tmp_path / q.name.replace(f"{PID}_", "909_")).write_text(text)
    trace = polyprof.load(tmp_path)
    assert sorted(s.pid for s in trace.sources) == [PID, 909]
    assert sum(_totals(trace).values()) == 2 * sum(_want_totals(run_dir / f"{PID}_kernel_trace.csv").values())
    r = cli("summary", "--json", str(tmp_path))  # on the command line: a job, a rank per pid
    assert r.returncode == 0, r.stderr
    ov = json.loads(r.stdout)["overview"]
    # numbered in the order of their files: a pid is a bare number, not a rank (ranks/identity.py)
    assert ov["ranks"] == 2 and ov["rank_ids"] == [0, 1]
    assert {k: v["events"] for k, v in ov["per_rank"].items()} == {"0": trace.n_events // 2, "1": trace.n_events // 2}


# --- refused in one line -------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "text_in_number", "missing_column", "empty_time"])
def test_malformed_files_are_refused_in_one_line(run_dir, tmp_path, damage):
    for q in run_dir.iterdir():
        shutil.copy(q, tmp_path / q.name)
    kt = tmp_path / f"{PID}_kernel_trace.csv"
    lines = kt.read_text().splitlines(keepends=True)
    if damage == "truncated":
        kt.write_text("".join(lines[:40]) + lines[40][:25])
    elif damage == "missing_column":
        kt.write_text(lines[0].replace('"Queue_Id"', '"Queue"') + "".join(lines[1:]))
    else:  # a cell of row 5 changed, the file rewritten as rocprofv3 writes it
        with open(kt, newline="") as f:
            rows = list(csv.reader(f))
        rows[5][rows[0].index("Start_Timestamp")] = "12x4" if damage == "text_in_number" else ""
        write_csv(kt, rows[0], [[int(v) if v.isdigit() else v for v in r] for r in rows[1:]])
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(kt)
    assert str(kt) in str(e.value) and "\n" not in str(e.value)
    r = cli("summary", str(kt))
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and str(kt) in r.stderr


def test_other_csvs_are_not_rocprofv3(tmp_path):
    """TraceLens's perf-report CSV, Nsight Systems' CSV export, polyprof's own CSV
    output: none is taken for rocprofv3's."""
    samples = {
        "tracelens_ops_summary.csv": '"name","op category","Count","total_direct_kernel_time_ms","Kernel_Name"\n'
                                     '"aten::mm","GEMM",3,1.5,"Cijk_Alik"\n',
        "nsys_cuda_gpu_trace.csv": '"Start (ns)","Duration (ns)","CorrId","GrdX","GrdY","GrdZ","Device","Name"\n'
                                   '1000,200,5,1,1,1,"NVIDIA H100 (0)","kernel"\n',
        "nsys_kernel_sum.csv": "Time (%),Total Time (ns),Instances,Avg (ns),Name\n50.0,100,2,50,kernel\n",
    }
    for name, text in samples.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(TraceFormatError, match="unrecognised format"):
            detect(tmp_path / name)
    # polyprof's own CSV (sql --csv), of this very trace: quoted headers as rocprofv3's
    r = cli("sql", str(DOCS), "SELECT * FROM events ORDER BY start_ns", "--csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('"')
    out = tmp_path / "events.csv"
    out.write_text(r.stdout)
    with pytest.raises(TraceFormatError, match="unrecognised format"):
        detect(out)


def test_an_export_it_cannot_hold_names_the_file(tmp_path):
    """The docs' samples come from different runs (clocks 8.8e15 ns apart): more than an
    XSpace's picosecond offsets hold. The refusal is one line naming the input, and
    nothing is written."""
    out = tmp_path / "x.xplane.pb"
    p = cli("export", "-f", "xspace", str(DOCS / "kernel_trace.csv"), "-o", str(out))
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("polyprof: error: kernel_trace.csv: spans "), p.stderr
    assert "more than XSpace's ps offsets can hold" in lines[0]
    assert lines[0].endswith("export it in another format (it has no steps to export a window of)")  # not --steps
    assert not out.exists()


POOL_PEAK = r"""
import os, sys
import pyarrow as pa
pool = pa.proxy_memory_pool(pa.default_memory_pool())
pa.set_memory_pool(pool)  # every Arrow allocation of the read counted on its own
import polyprof
trace = polyprof.load(sys.argv[1])
anon = lambda: int(next(x for x in open("/proc/self/status") if x.startswith("RssAnon")).split()[1]) << 10
before = anon()
pa.default_memory_pool().release_unused()  # what Arrow's allocator still held after the load
print(trace.n_events, pool.max_memory(), before - anon(), flush=True)
os._exit(0)  # the Trace's columns hold the pool's buffers: no teardown
"""


def test_csv_streamed_a_block_at_a_time(tmp_path):
    """Memory bounded by a block (issue 35): the kernel trace is parsed block by block,
    not read whole with its text and parse buffers beside the table. Arrow's peak over
    the whole load, 30,000 rows: 1.8 times the file's bytes streamed, 2.8 read whole.
    (The pool is Arrow's allocator itself, mimalloc or jemalloc: with it, /proc's RssAnon.)"""
    d = write_run(tmp_path / "run", "7")
    lines = next(d.glob("*_kernel_trace.csv")).read_text().splitlines(keepends=True)
    head, rows = lines[0], lines[1:]
    (tmp_path / "big").mkdir()
    src = tmp_path / "big" / "908_kernel_trace.csv"  # the kernels alone
    with open(src, "w") as f:  # 10 copies of the 3,000 dispatches (the rows' values as they are)
        f.write(head + "".join(rows * 10))
    r = subprocess.run([sys.executable, "-c", POOL_PEAK, str(src)], capture_output=True, text=True, timeout=120)
    n, peak, kept = map(int, r.stdout.split())
    assert n == len(rows) * 10 == 30_000
    assert peak < 2.2 * src.stat().st_size, (peak, src.stat().st_size)  # read whole: 2.8 times
    # and the freed blocks are given back once the Trace is built (kept, they stayed in
    # the process beside everything a summary allocates next: 4.6 times the file here)
    if sys.platform == "linux":
        assert kept < 2 * src.stat().st_size, (kept, src.stat().st_size)


def test_a_row_longer_than_a_block_is_read(tmp_path):
    """A kernel name of 2 MB (longer than the 1 MB block the CSV is parsed in) is read,
    with larger blocks, not refused as "straddling object straddles two block boundaries"."""
    d = write_run(tmp_path / "run", "7")
    lines = next(d.glob("*_kernel_trace.csv")).read_text().splitlines(keepends=True)
    row = next(csv.reader([lines[6]]))
    long_name = "k" * (2 << 20)
    row[7] = long_name
    (tmp_path / "long").mkdir()
    src = tmp_path / "long" / "908_kernel_trace.csv"
    with open(src, "w", newline="") as f:
        f.write("".join(lines[:6]))
        csv.writer(f, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n").writerow(
            [int(v) if v.lstrip("-").isdigit() else v for v in row])
        f.write("".join(lines[7:]))
    trace = polyprof.load(src)
    assert trace.n_events == len(lines) - 1
    names = [trace.strings[i] for i in trace.events["name"].tolist()]
    assert names.count(long_name) == 1


def test_a_column_empty_in_its_first_block_then_numbers(tmp_path, monkeypatch):
    """Streamed, each block takes the first block's types: a Stream_Id empty for the first
    rows (a null column there) and numbers later is read whole instead (pyarrow widens the
    type over the whole column there), not refused; a later non-integer is still named."""
    from polyprof.formats import rocprof_csv

    monkeypatch.setattr(rocprof_csv, "BLOCK", 1 << 16, raising=False)
    d = write_run(tmp_path / "run", "7")
    lines = next(d.glob("*_kernel_trace.csv")).read_text().splitlines()
    head, rows = lines[0], lines[1:]
    col = next(csv.reader([head])).index("Stream_Id")
    out = []
    for i, line in enumerate(rows):
        cells = next(csv.reader([line]))
        if i < 1000:  # about 150 KB: the first blocks
            cells[col] = ""
        out.append(",".join(v if v == "" or v.lstrip("-").isdigit() else f'"{v}"' for v in cells))
    (tmp_path / "gap").mkdir()
    src = tmp_path / "gap" / "908_kernel_trace.csv"
    src.write_text(head + "\n" + "\n".join(out) + "\n")
    trace = polyprof.load(src)
    assert trace.n_events == len(rows)
    cells = next(csv.reader([out[2500]]))
    cells[next(csv.reader([head])).index("Start_Timestamp")] = "soon"
    out[2500] = ",".join(v if v == "" or v.lstrip("-").isdigit() else f'"{v}"' for v in cells)
    src.write_text(head + "\n" + "\n".join(out) + "\n")
    with pytest.raises(TraceFormatError, match=r"row 2502: Start_Timestamp is 'soon', not an integer"):
        polyprof.load(src)
