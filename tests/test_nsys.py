"""The Nsight Systems SQLite reader (formats/nsys) against real exports and SQL recomputes.

Two export schema versions:

- ``tests/data/nsys/saxpy_2022.sqlite``: a real export (nsys 2022.2.1, export schema
  2.9.1; MPI + CUDA saxpy on an A100, from hpcgroup/pipit's test data, MIT: see
  LICENSE-pipit and README.md there). The rows of tables polyprof does not read were
  deleted to keep it small; every table it reads is as exported.
- a newer layout (``META_DATA_EXPORT``, ``ENUM_*`` tables, inline NVTX text, green
  contexts, CUDA graph node events, two processes, sync records, fills, OS runtime calls,
  a table this reader does not know) **built in this test** from the real export's rows,
  as Nsight Systems 2024 exports lay them out; no public export of that version is small
  enough to ship. It has no GPU hardware behind it, only the real export's timings.

Every number checked here is recomputed by SQL from the file itself.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from sqlite_query import query as _sql

DATA = Path(__file__).resolve().parent / "data" / "nsys"
REAL = DATA / "saxpy_2022.sqlite"
SECOND_PID = 4242
SHIFT = 7_000_000  # the second process's calls start 7 ms later


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=120)


def _copy_table(src: sqlite3.Connection, dst: sqlite3.Connection, table: str, cols: list[str],
                rows: list[tuple], extra: dict[str, str] | None = None) -> None:
    """``table`` with ``cols`` in reversed order (readers must go by name) plus ``extra`` columns."""
    names = list(reversed(cols)) + list(extra or {})
    dst.execute(f'CREATE TABLE {table} ({", ".join(chr(34) + c + chr(34) for c in names)})')
    order = [cols.index(c) for c in reversed(cols)]
    fill = [v for v in (extra or {}).values()]
    dst.executemany(f'INSERT INTO {table} VALUES ({", ".join("?" * len(names))})',
                    [tuple(r[i] for i in order) + tuple(fill) for r in rows])


def build_newer_export(path: Path) -> Path:
    """The real export's rows in a 2024-style layout, with a second process (see module doc)."""
    src = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    src.text_factory = lambda b: b.decode("utf-8", "replace")
    dst = sqlite3.connect(path)
    strings = dict(src.execute("SELECT id, value FROM StringIds").fetchall())
    gtid = src.execute("SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    gpid = gtid & ~0xFFFFFF
    gpid2 = (SECOND_PID << 24) | (gpid & ~((1 << 48) - 1))
    gtid2 = gpid2 | SECOND_PID
    # strings: the real ones plus the OS runtime and graph names added below
    extra_strings = {9001: "pthread_mutex_lock", 9002: "cudaGraphInstantiate", 9003: "rank 1 main"}
    dst.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    dst.executemany("INSERT INTO StringIds VALUES (?, ?)", list(strings.items()) + list(extra_strings.items()))
    dst.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    dst.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", "2024.2.1.106"),
        ("EXPORT_SCHEMA_VERSION", "3.11.1")])
    dst.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
    dst.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)", [
        (34, "NvtxMark", "NVTX mark"), (59, "NvtxPushPopRange", "NVTX push/pop range"),
        (60, "NvtxStartEndRange", "NVTX start/end range"), (75, "NvtxDomainCreate", "NVTX domain")])
    dst.execute("CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
    dst.executemany("INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES (?, ?, ?)", [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"), (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver")])
    dst.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
    dst.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", [
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (14, "CUDA_MEMCPY_KIND_FUTURE", "Future kind")])
    for table, cols in (("TARGET_INFO_SESSION_START_TIME", ["utcEpochNs", "utcTime", "localTime"]),
                        ("ThreadNames", ["nameId", "priority", "globalTid"]),
                        ("PROCESSES", ["globalPid", "pid", "name"])):
        rows = src.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
        if table == "ThreadNames":
            rows.append((9003, 0, gtid2))
        if table == "PROCESSES":
            rows.append((gpid2, SECOND_PID, "./saxpy-mpi-cuda"))
        _copy_table(src, dst, table, cols, rows)
    gpu_cols = ["id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor", "cuDevice"]
    _copy_table(src, dst, "TARGET_INFO_GPU", gpu_cols, src.execute(f"SELECT {', '.join(gpu_cols)} FROM TARGET_INFO_GPU").fetchall())

    def twice(table: str, cols: list[str], pid_col: str, extra: dict[str, str] | None = None) -> None:
        rows = src.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM {table}").fetchall()
        i_pid, i_s, i_e = cols.index(pid_col), cols.index("start"), cols.index("end")
        i_c = cols.index("correlationId") if "correlationId" in cols else None
        more = []
        for r in rows:
            r = list(r)
            r[i_pid] = gtid2 if pid_col == "globalTid" else gpid2
            r[i_s] += SHIFT
            if r[i_e] is not None:
                r[i_e] += SHIFT
            if i_c is not None:
                r[i_c] += 100000
            more.append(tuple(r))
        _copy_table(src, dst, table, cols, rows + more, extra)

    kcols = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
             "shortName", "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
             "staticSharedMemory", "dynamicSharedMemory", "graphNodeId"]
    twice("CUPTI_ACTIVITY_KIND_KERNEL", kcols, "globalPid", {"greenContextId": None, "graphId": None})
    mcols = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
             "srcKind", "dstKind", "graphNodeId"]
    twice("CUPTI_ACTIVITY_KIND_MEMCPY", mcols, "globalPid")
    # the runtime calls of the CUDA classes only (2024 exports have no backtrace duplicates)
    rcols = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"]
    src.execute("CREATE TEMP VIEW rt AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass IN (0, 1)")
    twice("rt", rcols, "globalTid")
    dst.execute("ALTER TABLE rt RENAME TO CUPTI_ACTIVITY_KIND_RUNTIME")
    # NVTX with inline text only (resolved from the real export's textId)
    src.execute("CREATE TEMP VIEW nv AS SELECT n.start, n.end, n.eventType, coalesce(n.text, s.value) AS text, "
                "n.globalTid, n.domainId FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId")
    twice("nv", ["start", "end", "eventType", "text", "globalTid", "domainId"], "globalTid")
    dst.execute("ALTER TABLE nv RENAME TO NVTX_EVENTS")
    # a fill and a sync record per kernel of the first process, after it on its stream
    k = src.execute("SELECT end, deviceId, contextId, streamId, correlationId, globalPid FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    dst.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start, "end", deviceId, contextId, streamId, '
                "correlationId, globalPid, value, bytes, graphNodeId, memKind)")
    dst.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [(e + 10, e + 510, d, c, s, None, p, 0, 4096, None, 2) for e, d, c, s, _, p in k])
    dst.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, "end", deviceId, contextId, streamId, '
                "correlationId, globalPid, syncType, eventId)")
    dst.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?,?)",
                    [(e + 600, e + 900, d, c, s, None, p, 3, None) for e, d, c, s, _, p in k])
    dst.execute('CREATE TABLE OSRT_API (start, "end", eventClass, globalTid, nameId, returnValue, nestingLevel, '
                "callchainId)")
    dst.executemany("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)",
                    [(1000 * i, 1000 * i + 300, 27, gtid, 9001, 0, 0, None) for i in range(1, 4)])
    # a CUDA graph launch: one cudaGraphLaunch call, two kernels of the graph with its
    # correlation id and their graph node ids (after the real export's last activity)
    end0 = src.execute('SELECT max("end") FROM CUPTI_ACTIVITY_KIND_RUNTIME').fetchone()[0]
    dst.execute("INSERT INTO StringIds VALUES (9004, 'cudaGraphLaunch_v10000')")
    dst.execute('INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid, correlationId, nameId, '
                "returnValue) VALUES (?, ?, 0, ?, 777777, 9004, 0)", (end0 + 1000, end0 + 6000, gtid))
    for node, (a, b) in ((5, (end0 + 9000, end0 + 19000)), (6, (end0 + 20000, end0 + 26000))):
        dst.execute('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, "end", deviceId, contextId, streamId, '
                    "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, "
                    "blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, graphNodeId, graphId) "
                    "VALUES (?, ?, 0, 1, 7, 777777, ?, 670, 671, 26, 2, 1, 1, 512, 1, 1, 0, 0, ?, 3)",
                    (a, b, gpid, node))
    dst.execute('CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start, "end", globalTid, nameId, graphNodeId, graphExecId)')
    dst.execute("INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (5000, 9000, ?, 9002, 17, 3)", (gtid,))
    dst.execute("CREATE TABLE SOME_FUTURE_TABLE (x, y)")
    dst.execute("INSERT INTO SOME_FUTURE_TABLE VALUES (1, 2)")
    dst.commit()
    dst.close()
    src.close()
    return path


@pytest.fixture(scope="module")
def newer(tmp_path_factory) -> Path:
    return build_newer_export(tmp_path_factory.mktemp("nsys") / "saxpy_2024.sqlite")


@pytest.fixture(scope="module", params=["2022", "2024"])
def export(request, newer) -> Path:
    return REAL if request.param == "2022" else newer


def test_both_versions_are_sniffed_by_content(export, tmp_path):
    odd = tmp_path / "profile.bin"  # the name says nothing
    shutil.copy(export, odd)
    assert detect(odd) == "nsys"


def test_kernel_totals_per_name_equal_sql(export):
    trace = polyprof.load(export)
    kb = kernel_breakdown(trace)
    got = {n: int(t) for n, t, k in zip(column(kb, "name"), column(kb, "total_ns"), column(kb, "kind"))
           if k == "compute"}
    want = dict(_sql(export, 'SELECT s.value, sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
                             "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value"))
    assert got == want and want  # to the nanosecond
    counts = {n: int(c) for n, c in zip(column(kb, "name"), column(kb, "count"))}
    assert counts["saxpy(double *, double *, double *, double, int)"] == \
        _sql(export, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]


def test_copy_bytes_and_names_equal_sql(export):
    trace = polyprof.load(export)
    rows = np.flatnonzero(trace.categories() == "gpu_memcpy")
    total = int(trace.stat_dense("bytes", 0)[rows].sum())
    assert total == _sql(export, "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    names = set(trace.names(rows))
    assert names == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}


_PROJECTED = """
WITH api AS (SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME
             WHERE eventClass IN (0, 1)),
     dev AS (SELECT correlationId, globalPid, "end" - start AS d FROM CUPTI_ACTIVITY_KIND_KERNEL
             UNION ALL SELECT correlationId, globalPid, "end" - start FROM CUPTI_ACTIVITY_KIND_MEMCPY),
     nv AS (SELECT n.start, n."end", n.globalTid, {name} AS name FROM NVTX_EVENTS n {join}
            WHERE n.eventType IN (59, 60) AND n."end" IS NOT NULL)
SELECT nv.name, sum(dev.d) FROM nv
  JOIN api ON api.globalTid = nv.globalTid AND api.start >= nv.start AND api.start < nv."end"
  JOIN dev ON dev.correlationId = api.correlationId AND dev.globalPid = (api.globalTid & ~16777215)
GROUP BY nv.name
"""


def test_nvtx_projected_device_time_equals_sql(export):
    """Each NVTX range's device time: the kernels and copies whose runtime call started
    inside it on its thread (Nsight's NVTX GPU projection), recomputed in SQL."""
    trace = polyprof.load(export)
    st = section_stats(trace)
    got = {n: int(d) for n, d in zip(column(st, "name"), column(st, "device_ns")) if d > 0}
    has_id = "textId" in {r[1] for r in _sql(export, "PRAGMA table_info(NVTX_EVENTS)")}
    q = _PROJECTED.format(name="coalesce(n.text, s.value)" if has_id else "n.text",
                          join="LEFT JOIN StringIds s ON s.id = n.textId" if has_id else "")
    want = {n: int(v) for n, v in _sql(export, q)}
    assert got == want and want["saxpy"] > 0
    # and the host side: every range, by name, as the file has it
    count = {n: int(c) for n, c in zip(column(st, "name"), column(st, "count"))}
    assert sum(count.values()) == _sql(export, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)")[0][0]


def test_summary_shows_the_tables(tmp_path):
    r = cli("summary", str(REAL))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for title in ("Top device activity", "Device time", "Launches", "Sections", "cudaLaunchKernel"):
        assert title in out
    # saxpy's NVTX range caused the 5 kernels: 88.6 ms of device time
    line = next(s for s in out.splitlines() if "│ saxpy " in s)
    assert "88.6 ms" in line


def test_layout_of_the_real_export():
    trace = polyprof.load(REAL)
    assert sorted(p.name for p in trace.planes) == ["/device:GPU:0", "/host:CPU"]
    gpu = trace.plane_by_name("/device:GPU:0")
    assert gpu.vendor == "NVIDIA" and gpu.properties["name"] == "NVIDIA A100-SXM4-40GB"
    assert gpu.properties["numSms"] == 108
    src = trace.sources[0]
    assert src.pid == 1230493 and src.host == "nid001608"
    assert trace.metadata["wall_anchor"] == {"mono_ns": 0, "wall_ns": 1687813257637297504, "uncertainty_ns": 0}
    assert src.clock["wall_anchor"]["wall_ns"] == 1687813257637297504
    assert {t.name for t in trace.tracks} == {"stream 7", "MPI Rank 0"}
    k = np.flatnonzero(trace.categories() == "kernel")
    ex = trace.event_stats(int(k[0]))
    assert ex["grid"] == "2,1,1" and ex["block"] == "512,1,1" and ex["registers per thread"] == 26
    assert ex["stream"] == 7 and ex["device"] == 0 and ex["context"] == 1
    # every kernel and copy has a flow from its runtime call, and the same correlation id
    fl = trace.flows
    assert len(fl["src"]) == 20
    corr = trace.stat_dense("correlation_id", -1)
    assert (corr[fl["src"]] == corr[fl["dst"]]).all()
    assert set(trace.names(fl["src"])) == {"cudaLaunchKernel", "cudaMemcpy"}
    # runtime names lose their API version suffix; the driver call is a driver call
    cats = dict(zip(trace.names(), trace.categories()))
    assert cats["cudaMemcpy"] == "cuda_runtime" and cats["cuModuleGetLoadingMode"] == "cuda_driver"
    assert "EXPORT_META_DATA" not in trace.metadata["nsys"]["tables_not_read"]
    assert trace.metadata["nsys"]["version"]["EXPORT_SCHEMA_VERSION"] == "2.9.1"


def test_newer_layout_several_processes_and_more_tables(newer):
    trace = polyprof.load(newer)
    assert sorted(s.pid for s in trace.sources) == sorted([1230493, SECOND_PID])
    assert all(s.clock["wall_anchor"]["wall_ns"] == 1687813257637297504 for s in trace.sources)
    planes = sorted((trace.sources[p.source].pid, p.name) for p in trace.planes)
    assert planes == sorted([(1230493, "/device:GPU:0"), (1230493, "/host:CPU"),
                             (SECOND_PID, "/device:GPU:0"), (SECOND_PID, "/host:CPU")])
    assert "rank 1 main" in {t.name for t in trace.tracks}
    cats = trace.categories()
    assert (cats == "gpu_memset").sum() == 5 and (cats == "cuda_sync").sum() == 5
    assert set(trace.names(np.flatnonzero(cats == "cuda_sync"))) == {"Stream Synchronize"}
    assert set(trace.names(np.flatnonzero(cats == "os_runtime"))) == {"pthread_mutex_lock"}
    g = np.flatnonzero(cats == "cuda_graph")
    assert trace.names(g).tolist() == ["cudaGraphInstantiate"] and trace.event_stats(int(g[0]))["graph node id"] == 17
    # flows stay within a process: 20 per process, each to a device op of its own source
    fl = trace.flows
    es = trace.event_sources()
    assert len(fl["src"]) == 42 and (es[fl["src"]] == es[fl["dst"]]).all()
    assert trace.metadata["nsys"]["version"]["EXPORT_SCHEMA_VERSION"] == "3.11.1"
    assert "SOME_FUTURE_TABLE" in trace.metadata["nsys"]["tables_not_read"]
    # the summary's correlation: all 40 device ops matched by id, within their process
    from polyprof.derive.correlate import correlate

    c = correlate(trace)
    assert int((c.launch >= 0).sum()) == 42
    # the graph launch: both kernels of the graph come from the one call, which is a graph launch
    from polyprof.analyze.ops import launch_stats

    call = int(np.flatnonzero(trace.names() == "cudaGraphLaunch")[0])
    kernels = c.device_rows[c.launch == call]
    assert len(kernels) == 2
    assert sorted(trace.event_stats(int(k))["graph node id"] for k in kernels) == [5, 6]
    ls = launch_stats(trace)
    graph = {n: bool(g) for n, g in zip(column(ls, "launch_name"), column(ls, "graph_launch"))}
    assert graph["cudaGraphLaunch"] and not graph["cudaLaunchKernel"]


def test_truncated_sqlite_gives_one_line(tmp_path):
    cut = tmp_path / "cut.sqlite"
    data = REAL.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated SQLite database"):
        polyprof.load(cut)
    r = cli("summary", str(cut))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "cut.sqlite" in err[0] and "truncated" in err[0]


def test_sqlite_that_is_not_an_export_gives_one_line(tmp_path):
    other = tmp_path / "inventory.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE parts (id INTEGER, name TEXT)")
    conn.execute("INSERT INTO parts VALUES (1, 'bolt')")
    conn.commit()
    conn.close()
    r = cli("summary", str(other))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1, r.stderr
    assert "inventory.sqlite" in err[0] and "not an Nsight Systems export" in err[0] and "parts" in err[0]


def test_an_export_with_nothing_polyprof_reads_says_so(tmp_path):
    """An export of scheduling data only (``nsys profile --trace=none``, as the SC23 OpenMP
    tutorial's report1.sqlite): 0 events, and a warning naming the tables it holds, not a
    silent empty summary. Built from the real export with its event rows deleted."""
    only = tmp_path / "sched_only.sqlite"
    shutil.copy(REAL, only)
    conn = sqlite3.connect(only)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for t in tables:
        if t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "OSRT_")):
            conn.execute(f'DELETE FROM "{t}"')
    if "SCHED_EVENTS" not in tables:
        conn.execute("CREATE TABLE SCHED_EVENTS (start INTEGER, cpu INTEGER, isSchedIn INTEGER, globalTid INTEGER)")
    n = len(conn.execute("PRAGMA table_info(SCHED_EVENTS)").fetchall())
    conn.execute(f"INSERT INTO SCHED_EVENTS VALUES ({', '.join(['1'] * n)})")
    conn.commit()
    conn.close()
    trace = polyprof.load(only)
    assert trace.n_events == 0
    warnings = trace.metadata.get("warnings", [])
    assert len(warnings) == 1 and warnings[0].startswith("nothing polyprof reads") and "SCHED_EVENTS" in warnings[0]
    r = cli("summary", str(only))
    assert r.returncode == 0 and "sched_only.sqlite: nothing polyprof reads" in r.stderr, r.stderr


def test_damaged_pages_give_one_error_naming_the_file(tmp_path):
    bad = tmp_path / "damaged.sqlite"
    data = bytearray(REAL.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for p in range(2, len(data) // page):  # scribble over every page but the schema's
        data[p * page + 8: p * page + 40] = b"\xff" * 32
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(bad)
    assert "damaged.sqlite" in str(e.value) and "\n" not in str(e.value)


def test_values_of_the_wrong_type_give_one_line(tmp_path):
    odd = tmp_path / "odd.sqlite"
    shutil.copy(REAL, odd)
    odd.chmod(0o644)
    conn = sqlite3.connect(odd)
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 2")
    conn.commit()
    conn.close()
    r = cli("summary", str(odd))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "odd.sqlite" in err[0] and "integers" in err[0], r.stderr


def test_read_only_and_unchanged(tmp_path):
    ro = tmp_path / "ro.sqlite"
    shutil.copy(REAL, ro)
    ro.chmod(0o444)
    before = ro.read_bytes()
    trace = polyprof.load(ro)
    assert trace.n_events == 99
    assert ro.read_bytes() == before
    assert not (tmp_path / "ro.sqlite-journal").exists() and not (tmp_path / "ro.sqlite-wal").exists()


def test_damaged_copies_give_a_trace_or_one_checked_error(tmp_path):
    """Seeded byte flips, zeroed bytes and cuts of the real export: each loads, or fails
    with a TraceFormatError the reader raised itself (not one it did not check for)."""
    import random

    from polyprof.formats.safety import ForeignError

    data = REAL.read_bytes()
    rng = random.Random(7)
    bad = tmp_path / "bad.sqlite"
    failed = 0
    for _ in range(25):
        d = bytearray(data)
        kind = rng.choice(["flip", "zero", "cut"])
        if kind == "cut":
            d = d[:rng.randrange(100, len(d))]
        else:
            for _ in range(rng.randrange(1, 40)):
                d[rng.randrange(100, len(d))] = rng.randrange(256) if kind == "flip" else 0
        bad.write_bytes(bytes(d))
        try:
            polyprof.load(bad)
        except ForeignError as e:  # pragma: no cover - what this test is for
            pytest.fail(f"unchecked failure: {e}")
        except TraceFormatError as e:
            failed += 1
            assert "bad.sqlite" in str(e) and "\n" not in str(e)
    assert failed  # the mutations do damage it
