"""rocprof-compute's (Omniperf's) workload files and rocprofv3's thread-trace statistics,
told by their headers: not traces, so polyprof says what each is and what to give it.

``rocprof-compute profile`` writes ``workloads/<name>/<gpu>/``: ``pmc_perf.csv`` (one row
per kernel dispatch: its launch parameters, hundreds of hardware counters and
``Start_Timestamp``/``End_Timestamp``), ``pmc_dispatch_info.csv``, ``pmc_kernel_top.csv``
(totals per kernel), ``sysinfo.csv``, ``roofline.csv`` and, in older versions, the files
of each run (``timestamps.csv``, ``SQ_*.csv``). Collecting that many counters takes one
run of the program per group of counters, and ``pmc_perf.csv``'s rows are those runs
merged (in a real MI300X workload its times are fractional ns: averaged over the runs),
so none of them is read as a kernel list. A timeline of one run comes from rocprofv3
itself (``--kernel-trace --hip-trace``), whose CSV, JSON and rocpd outputs polyprof
reads. Omniperf's oldest, rocprof (v1) based files (``Index,KernelName,gpu-id,...``) are
rocprof v1's kernel CSV: ``rocprof_v1_csv`` reads or names them. ``rocprofv3 --att``
(thread trace) writes, per dispatch, ``stats_ui_output_agent_<a>_dispatch_<d>.csv``
(per-instruction hit counts and latencies) beside JSON files for its viewer: named here
too.
"""

from __future__ import annotations

from pathlib import Path

from .rocprof_v1_csv import header

#: what polyprof reads of ROCm's profilers instead (the end of each message)
GIVE = ("not a trace polyprof reads; for a timeline, record the program with rocprofv3 --kernel-trace --hip-trace "
        "and give polyprof that output (its CSV, JSON or rocpd database)")

#: rocprofv3's thread trace statistics (``rocprof-trace-decoder``'s ``stats_*.csv``)
_ATT_STATS = ["CodeObj", "Vaddr", "Instruction", "Hitcount", "Latency", "Stall", "Idle", "Source"]


def _kind(cols: list[str]) -> str | None:
    """What a rocprof-compute / rocprofv3 --att CSV header is, None for any other."""
    first = set(cols[:40])  # pmc_perf.csv's header (thousands of counters) is cut in the head read
    if cols == ["Dispatch_ID", "Kernel_Name", "GPU_ID"]:
        return "rocprof-compute's pmc_dispatch_info.csv (each kernel dispatch's name and GPU, no times)"
    if cols[:1] == ["Dispatch_ID"] and {"GPU_ID", "Kernel_Name"} <= first:
        return ("a rocprof-compute (Omniperf) table of kernel dispatches (pmc_perf.csv: their hardware counters, "
                "merged from the runs of the program that collecting them takes; timestamps.csv, SQ_*.csv: one "
                "of those runs)")
    if cols[:2] == ["Kernel_Name", "Count"] and any(c.startswith("Sum(") for c in cols[2:4]):  # Sum(ns), Sum(us)..
        return "rocprof-compute's pmc_kernel_top.csv (totals per kernel)"
    if cols[:1] == ["workload_name"] and "ip_blocks" in first:
        return "rocprof-compute's (Omniperf's) sysinfo.csv (the profiled system and command)"
    if cols[:2] == ["device", "HBMBw"]:
        return "rocprof-compute's roofline.csv (the GPU's measured peak bandwidths and FLOP rates)"
    if cols == _ATT_STATS:
        return ("rocprofv3's thread trace (--att) statistics (per-instruction hit counts and latencies of one "
                "kernel dispatch)")
    return None


def not_a_trace(head: bytes, path: Path) -> str | None:
    """What a rocprof-compute workload file or rocprofv3 thread-trace CSV is and what to
    give polyprof instead, from its header; None for any other file."""
    body = head[2:] if head.startswith(b"GZ") else head  # a gzipped one: the sniffs' mark
    what = _kind(header(body))
    return f"{what}: {GIVE}" if what else None
