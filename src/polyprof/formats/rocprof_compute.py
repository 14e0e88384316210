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
(per-instruction hit counts and latencies; ServiceType, Issued and Stalled added in
later versions) beside a directory ``ui_output_agent_<a>_dispatch_<d>/`` of JSON files
for ROCprof Compute Viewer (``filenames.json``, the index of the others; ``code.json``,
the kernel's instructions with their counts; ``occupancy.json``; a file per traced wave,
``se<S>_sm<M>_sl<L>_wv<W>.json``; ``realtime.json``, perf counters, other SIMDs' and
shader data): named here too, by their directory's name or their keys, not as JSON
that is no Chrome/Kineto trace (:func:`thread_trace_json`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
    if cols[:7] == _ATT_STATS[:7] and cols[-1:] == ["Source"]:  # (later: ServiceType, Issued, Stalled before it)
        return ("rocprofv3's thread trace (--att) statistics (per-instruction hit counts and latencies of one "
                "kernel dispatch)")
    return None


def not_a_trace(head: bytes, path: Path) -> str | None:
    """What a rocprof-compute workload file or rocprofv3 thread-trace CSV is and what to
    give polyprof instead, from its header; None for any other file."""
    body = head[2:] if head.startswith(b"GZ") else head  # a gzipped one: the sniffs' mark
    what = _kind(header(body))
    return f"{what}: {GIVE}" if what else None


#: the directory rocprofv3 --att writes a dispatch's viewer files into (compiled on first use, re's cache)
_ATT_DIR = r"^ui_output_agent_\d+_dispatch_\d+$"
#: what the viewer files hold, by name (``att-tool/*.cpp`` of rocprofiler-sdk); a wave's
#: file is ``se<S>_sm<M>_sl<L>_wv<W>.json``
_ATT_FILES = {
    "filenames.json": "the index of its files",
    "code.json": "the kernel's instructions with their hit counts and latencies",
    "occupancy.json": "the waves' occupancy over time",
    "realtime.json": "the shader clock against the real-time clock",
    "snapshots.json": "the source files it copied",
}
_WAVE = r"^se\d+_sm\d+_sl\d+_wv\d+\.json$"
#: the start of ``code.json``'s ``header`` (its columns)
_CODE_HEADER = "ISA, _, LineNumber"
#: a viewer file's keys in its first bytes (:func:`is_thread_trace_head`): the index's, code.json's header
_ATT_KEYS = rb'"(?:wave_filenames|se_filenames)"\s*:|"header"\s*:\s*"ISA, _, LineNumber'


def _what(path: Path) -> str:
    """What a thread-trace viewer file holds, by its name."""
    if re.match(_WAVE, path.name):
        return "one wave's instructions, timed in shader clock cycles"
    return _ATT_FILES.get(path.name, "one of its files")


def thread_trace_json(path: Path, doc: dict[str, Any]) -> str | None:
    """What a JSON object without ``traceEvents`` is when it is one of rocprofv3 --att's
    files for ROCprof Compute Viewer (by its directory's name, the index's keys or
    ``code.json``'s header), and what to give polyprof instead; None for any other."""
    head = doc.get("header")
    if not (re.match(_ATT_DIR, path.parent.name) or "wave_filenames" in doc or "se_filenames" in doc
            or (isinstance(head, str) and head.startswith(_CODE_HEADER))):
        return None
    return (f"rocprofv3's thread trace (--att) output of one kernel dispatch, for ROCprof Compute Viewer "
            f"({path.name}: {_what(path)}): {GIVE}")


def is_thread_trace_head(head: bytes, path: Path) -> bool:
    """Whether a JSON file is one of rocprofv3 --att's viewer files, from its directory's
    name or the keys in its first bytes (a directory's listing: :func:`thread_trace_json`
    tells it from the whole document)."""
    return bool(re.match(_ATT_DIR, path.parent.name) or re.search(_ATT_KEYS, head))
