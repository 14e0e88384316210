"""rocprofv3 CSV read speed and memory, whole processes: against the same run as rocprofv3
JSON (polyprof's other reader of the same records) and a pandas peer.

Makes one run two ways from the real rocprofv3 JSON of tests/data/rocprof (TraceLens's
908_results, 3,000 kernel dispatches), its dispatches replicated ``--copies`` times, each
copy shifted in time by the run's span and in correlation id by a fixed step:

- ``<dir>/908_kernel_trace.csv`` with ``908_agent_info.csv``, in ROCm 7's columns (agents
  as ``Agent <logical node id>``), as rocprofv3 writes them;
- ``<dir>/results.json``: the same dispatches as rocprofv3's JSON.

Then times, in fresh processes, alternating:

- csv-load / json-load: ``polyprof.load`` of the directory / the JSON;
- csv-summary / json-summary: ``python -m polyprof summary`` of each (what a user runs);
- peer: what one does with the CSV without polyprof: ``pandas.read_csv`` of the kernel
  trace and the total time per kernel name.

Reports wall and CPU time (user + system), MB of CSV per second and peak RSS; min and
median of ``--repeat`` rounds; the ratios csv / json and csv-load / peer per round; the
load average.

    python bench/rocprof_csv.py [--copies 100] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from child_env import child_env
from timed_child import run

ROOT = Path(__file__).resolve().parents[1]
REAL_JSON = ROOT / "tests" / "data" / "rocprof" / "tracelens_908_results.json.gz"
CORR_STEP = 1 << 20

LOAD = r"""
import sys, logging
logging.disable(logging.CRITICAL)
import polyprof
print(polyprof.load(sys.argv[1]).n_events)
"""

PEER = r"""
import sys
import pandas as pd
k = pd.read_csv(sys.argv[1])
print(len((k["End_Timestamp"] - k["Start_Timestamp"]).groupby(k["Kernel_Name"]).sum()))
"""

KERNEL_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                 "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size",
                 "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y",
                 "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]
AGENT_HEADER = ["Node_Id", "Logical_Node_Id", "Agent_Type", "Name", "Vendor_Name", "Product_Name"]


def make(out: Path, copies: int) -> tuple[Path, Path]:
    """The replicated run as rocprofv3 CSV (a directory) and as rocprofv3 JSON."""
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(REAL_JSON) as f:
        doc = json.load(f)
    tool = doc["rocprofiler-sdk-tool"][0]
    kd = tool["buffer_records"]["kernel_dispatch"]
    span = max(k["end_timestamp"] for k in kd) - min(k["start_timestamp"] for k in kd) + 1
    agents = {a["id"]["handle"]: a for a in tool["agents"]}
    syms = {s["kernel_id"]: s for s in tool["kernel_symbols"]}
    name = {i: s.get("formatted_kernel_name") or s["kernel_name"] for i, s in syms.items()}
    reps = []
    csv_dir = out / "csv"
    csv_dir.mkdir(exist_ok=True)
    with open(csv_dir / "908_kernel_trace.csv", "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(KERNEL_HEADER)
        for r in range(copies):
            for k in kd:
                k2 = dict(k, start_timestamp=k["start_timestamp"] + r * span, end_timestamp=k["end_timestamp"] + r * span,
                          correlation_id=dict(k["correlation_id"], internal=k["correlation_id"]["internal"]
                                              + r * CORR_STEP))
                reps.append(k2)
                di, s = k["dispatch_info"], syms[k["dispatch_info"]["kernel_id"]]
                w.writerow(["KERNEL_DISPATCH", f"Agent {agents[di['agent_id']['handle']]['logical_node_id']}",
                            di["queue_id"]["handle"], k["stream_id"]["handle"], k["thread_id"], di["dispatch_id"],
                            di["kernel_id"], name[di["kernel_id"]], k2["correlation_id"]["internal"],
                            k2["start_timestamp"], k2["end_timestamp"], di["group_segment_size"],
                            di["private_segment_size"], s["arch_vgpr_count"], s["accum_vgpr_count"], s["sgpr_count"],
                            *(di["workgroup_size"][a] for a in "xyz"), *(di["grid_size"][a] for a in "xyz")])
    with open(csv_dir / "908_agent_info.csv", "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(AGENT_HEADER)
        for a in tool["agents"]:
            w.writerow([a["node_id"], a["logical_node_id"], "GPU" if a["type"] == 2 else "CPU", a["name"],
                        a.get("vendor_name", ""), a.get("product_name", "")])
    tool["buffer_records"]["kernel_dispatch"] = reps
    with open(out / "results.json", "w") as f:
        json.dump(doc, f)
    return csv_dir, out / "results.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=100, help="copies of the 3,000 dispatches (default 100)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="make the files here and keep them (reused when they exist)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rocprof-csv-bench-"))
    out = args.keep or tmp
    csv_dir, js = out / "csv", out / "results.json"
    if not js.exists():
        t0 = time.perf_counter()
        csv_dir, js = make(out, args.copies)
        print(f"made {out} in {time.perf_counter() - t0:.1f} s")
    kt = csv_dir / "908_kernel_trace.csv"
    size = kt.stat().st_size
    print(f"kernel_trace.csv {size / 1e6:.1f} MB, results.json {js.stat().st_size / 1e6:.1f} MB")
    env = child_env(str(ROOT / "src"))
    tools = {"csv-load": ["-c", LOAD, str(csv_dir)], "json-load": ["-c", LOAD, str(js)],
             "csv-summary": ["-m", "polyprof", "summary", str(csv_dir)],
             "json-summary": ["-m", "polyprof", "summary", str(js)], "peer": ["-c", PEER, str(kt)]}
    for argv in tools.values():  # warm-up: bytecode, page cache
        run(argv, env)
    load0 = os.getloadavg()
    res: dict[str, list[tuple[float, float, int]]] = {k: [] for k in tools}
    for _ in range(args.repeat):
        for k, argv in tools.items():
            res[k].append(run(argv, env))
    load1 = os.getloadavg()
    print(f"{args.repeat} whole processes each, alternating; load average {load0[0]:.1f} -> {load1[0]:.1f}")
    print(f"  {'process':<13} {'wall min':>9} {'median':>8} {'CPU min':>8} {'CSV MB/s':>9} {'RSS max':>9}")
    for k, v in res.items():
        walls, cpus = [w for w, _, _ in v], [u for _, u, _ in v]
        print(f"  {k:<13} {min(walls):>8.2f}s {statistics.median(walls):>7.2f}s {min(cpus):>7.2f}s "
              f"{size / 1e6 / min(walls):>9.0f} {max(r for _, _, r in v) / 1e6:>7.0f}MB")
    for a, b in (("csv-load", "json-load"), ("csv-summary", "json-summary"), ("csv-load", "peer")):
        for i, what in ((0, "wall"), (1, "CPU")):
            ratios = [x[i] / y[i] for x, y in zip(res[a], res[b])]
            print(f"  {a} / {b} {what}: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
