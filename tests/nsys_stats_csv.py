"""``nsys stats`` CSV trace reports made from an Nsight Systems SQLite export by this
project's own SQL (not NVIDIA's report scripts): the columns, units and order of
``cuda_gpu_trace``, ``cuda_api_trace`` and ``nvtx_pushpop_trace`` as nsys prints them
(see tests/data/nsys_csv/README.md for where the layouts were seen).

- ``cuda_gpu_trace``: one row per kernel, memcpy and memset, by start time; sizes in
  MB (10^6 bytes) with 3 decimals, as nsys prints them; the device as ``<name> (<id>)``.
- ``cuda_api_trace``: one row per CUDA API call (every row of the runtime table, the
  repeats nsys 2022 records with backtraces included).
- ``nvtx_pushpop_trace``: push/pop ranges with their nesting (level, parent, children)
  worked out per thread.

Run as a script to rewrite the fixtures: ``python tests/nsys_stats_csv.py``.
"""

from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent
SQLITE = HERE / "data" / "nsys" / "saxpy_2022.sqlite"
OUT = HERE / "data" / "nsys_csv"

#: nsys 2022-2023's header (``Throughput (MBps)``, no green context column)
GPU_HEADER = ["Start (ns)", "Duration (ns)", "CorrId", "GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ", "Reg/Trd",
              "StcSMem (MB)", "DymSMem (MB)", "Bytes (MB)", "Throughput (MBps)", "SrcMemKd", "DstMemKd", "Device",
              "Ctx", "Strm", "Name"]
API_HEADER = ["Start (ns)", "Duration (ns)", "Name", "Result", "CorrID", "Pid", "Tid", "T-Pri", "Thread Name"]
NVTX_HEADER = ["Start (ns)", "End (ns)", "Duration (ns)", "DurChild (ns)", "DurNonChild (ns)", "Name", "PID", "TID",
               "Lvl", "NumChild", "RangeId", "ParentId", "RangeStack", "NameTree"]

_MEM_KIND = "CASE {c} WHEN 0 THEN 'Pageable' WHEN 1 THEN 'Pinned' WHEN 2 THEN 'Device' WHEN 3 THEN 'Array' " \
            "WHEN 4 THEN 'Managed' WHEN 5 THEN 'Device Static' WHEN 6 THEN 'Managed Static' ELSE '' END"
_COPY = "CASE copyKind WHEN 1 THEN 'HtoD' WHEN 2 THEN 'DtoH' WHEN 8 THEN 'DtoD' WHEN 9 THEN 'HtoH' " \
        "WHEN 10 THEN 'PtoP' ELSE 'Unknown' END"
_MB = "printf('%.3f', {c} / 1000000.0)"

GPU_SQL = f"""
WITH gpu AS (SELECT cuDevice AS dev, name FROM TARGET_INFO_GPU)
SELECT * FROM (
  SELECT k.start, k.end - k.start, k.correlationId, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
         k.registersPerThread, {_MB.format(c='k.staticSharedMemory')}, {_MB.format(c='k.dynamicSharedMemory')},
         NULL, NULL, NULL, NULL, g.name || ' (' || k.deviceId || ')', k.contextId, k.streamId, s.value
  FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k.demangledName
       LEFT JOIN gpu g ON g.dev = k.deviceId
  UNION ALL
  SELECT m.start, m.end - m.start, m.correlationId, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         {_MB.format(c='m.bytes')}, printf('%.3f', (m.bytes / 1000000.0) / ((m.end - m.start) / 1e9)),
         {_MEM_KIND.format(c='m.srcKind')}, {_MEM_KIND.format(c='m.dstKind')},
         g.name || ' (' || m.deviceId || ')', m.contextId, m.streamId, '[CUDA memcpy ' || {_COPY} || ']'
  FROM CUPTI_ACTIVITY_KIND_MEMCPY m LEFT JOIN gpu g ON g.dev = m.deviceId
) ORDER BY 1, 3
"""

API_SQL = """
SELECT r.start, r.end - r.start, s.value, r.returnValue, r.correlationId, (r.globalTid >> 24) & 16777215,
       r.globalTid & 16777215, t.priority, COALESCE(tn.value, '')
FROM CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId
     LEFT JOIN ThreadNames t ON t.globalTid = r.globalTid LEFT JOIN StringIds tn ON tn.id = t.nameId
ORDER BY r.start, r.correlationId
"""

NVTX_SQL = """
SELECT n.start, n.end, COALESCE(n.text, s.value, ''), (n.globalTid >> 24) & 16777215, n.globalTid & 16777215
FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
WHERE n.eventType = 59 AND n.end IS NOT NULL
ORDER BY n.globalTid, n.start, n.end DESC
"""


def _csv(header: list[str], rows: list[list[object]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows([["" if v is None else v for v in r] for r in rows])
    return buf.getvalue()


def gpu_trace(conn: sqlite3.Connection) -> str:
    return _csv(GPU_HEADER, [list(r) for r in conn.execute(GPU_SQL)])


def api_trace(conn: sqlite3.Connection) -> str:
    return _csv(API_HEADER, [list(r) for r in conn.execute(API_SQL)])


def pushpop_trace(conn: sqlite3.Connection) -> str:
    """Push/pop ranges, each thread's nesting worked out with a stack."""
    ranges = [list(r) for r in conn.execute(NVTX_SQL)]
    out: list[dict[str, object]] = []
    stack: list[dict[str, object]] = []
    key = None
    for rid, (start, end, name, pid, tid) in enumerate(ranges, 1):
        if (pid, tid) != key:
            stack, key = [], (pid, tid)
        while stack and int(stack[-1]["end"]) <= start:  # type: ignore[call-overload]
            stack.pop()
        parent = stack[-1] if stack else None
        r = {"start": start, "end": end, "name": name, "pid": pid, "tid": tid, "lvl": len(stack), "id": rid,
             "parent": parent["id"] if parent else "", "child": 0, "nchild": 0,
             "stack": (str(parent["stack"]) if parent else "") + f":{rid}"}
        if parent:
            parent["child"] = int(parent["child"]) + (end - start)  # type: ignore[call-overload]
            parent["nchild"] = int(parent["nchild"]) + 1  # type: ignore[call-overload]
        stack.append(r)
        out.append(r)
    out.sort(key=lambda r: (r["start"], r["id"]))
    rows = [[r["start"], r["end"], int(r["end"]) - int(r["start"]), r["child"],  # type: ignore[call-overload]
             int(r["end"]) - int(r["start"]) - int(r["child"]), r["name"], r["pid"], r["tid"],  # type: ignore[call-overload]
             r["lvl"], r["nchild"], r["id"], r["parent"], r["stack"], "--" * int(r["lvl"]) + str(r["name"])]  # type: ignore[call-overload]
            for r in out]
    return _csv(NVTX_HEADER, rows)


def reports(sqlite: Path = SQLITE) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        return {"cuda_gpu_trace": gpu_trace(conn), "cuda_api_trace": api_trace(conn),
                "nvtx_pushpop_trace": pushpop_trace(conn)}
    finally:
        conn.close()


def stdout_form(reps: dict[str, str], sqlite_name: str = "saxpy_2022.sqlite") -> str:
    """What ``nsys stats -f csv -r cuda_api_trace,cuda_gpu_trace,nvtx_pushpop_trace`` prints."""
    out = [f"NOTICE: Existing SQLite export found: {sqlite_name}\n",
           "        It is assumed file was previously exported from: saxpy_2022.nsys-rep\n",
           "        Consider using --force-export=true if needed.\n", "\n"]
    for name in ("cuda_api_trace", "cuda_gpu_trace", "nvtx_pushpop_trace"):
        out.append(f"Processing [{sqlite_name}] with [/opt/nvidia/nsight-systems/host-linux-x64/reports/{name}.py]... \n")
        out.append(reps[name])
        out.append("\n")
    return "".join(out)


if __name__ == "__main__":
    reps = reports()
    for name, text in reps.items():
        (OUT / f"saxpy_2022_{name}.csv").write_text(text)
    (OUT / "saxpy_2022_stats_stdout.txt").write_text(stdout_form(reps))
