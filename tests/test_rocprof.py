"""rocprofv3's outputs: its JSON (formats/rocprof_json.py) and the rocpd database (formats/rocpd).

- ``tests/data/rocprof/tracelens_908_results.json.gz``: a real rocprofv3 JSON (an AMD
  Instinct MI350X, PyTorch with RCCL; from AMD-AGI/TraceLens's tests, MIT: see
  LICENSE-TraceLens), cut to its first 3000 kernel dispatches. It has kernel dispatches
  only, no API or ROCTx records.
- No public rocpd database exists, so **this test builds them**, in both published
  layouts of AMD's rocpd schema (rocprofiler-sdk ``rocpd_tables.sql``: 3.x with
  ``pid``/``tid``/``agent_id`` on each event, 4.x with ``track_id`` into
  ``rocpd_track``), with the real JSON's kernel dispatches (names, agents, queues,
  times) and, around them, HIP launch calls and ROCTx ranges made up by the test (their
  times are placed before the real kernels; no AMD hardware ran them). The same made-up
  calls and ranges are also written as rocprofv3 JSON records, per rocprofiler-sdk's
  ``rocprofv3-schema.json``.

Kernel totals and ROCTx projections are recomputed independently: in SQL from the
database, in plain Python from the JSON.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import polyprof
from polyprof.analyze.breakdown import kernel_breakdown
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from sqlite_query import query as _sql

DATA = Path(__file__).resolve().parent / "data" / "rocprof"
REAL_JSON = DATA / "tracelens_908_results.json.gz"
UUID = "_5d0c8e1a_77b2_4f3e_9a61_0c2d4e6f8a10"
N_KERNELS = 3000  # the real file's dispatches, all of them, in the built databases
GROUP = 50  # launches per ROCTx "step" range


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyprof", *args], capture_output=True, text=True, timeout=120)


def real_doc() -> dict:
    with gzip.open(REAL_JSON) as f:
        return json.load(f)


def _kernel_name(sym: dict) -> str:
    return sym.get("formatted_kernel_name") or sym.get("demangled_kernel_name") or sym.get("kernel_name")


def made_up_calls(tool: dict) -> tuple[list[dict], list[dict]]:
    """A hipLaunchKernel call 50 us before each of the first N_KERNELS kernels (on the
    kernel's thread, with its correlation id), and ROCTx ranges per thread: "step" over
    each GROUP launches and "forward" over the first half of each step."""
    kd = tool["buffer_records"]["kernel_dispatch"][:N_KERNELS]
    calls = []
    for k in kd:
        s = k["start_timestamp"] - 50_000
        calls.append({"tid": k["thread_id"], "corr": k["correlation_id"]["internal"], "start": s, "end": s + 900})
    ranges = []
    by_thread: dict[int, list[dict]] = defaultdict(list)
    for c in sorted(calls, key=lambda c: c["start"]):
        by_thread[c["tid"]].append(c)
    for tid, cs in by_thread.items():
        for i in range(0, len(cs), GROUP):
            g = cs[i:i + GROUP]
            ranges.append({"tid": tid, "name": "step", "start": g[0]["start"] - 100, "end": g[-1]["end"] + 100})
            h = g[:max(len(g) // 2, 1)]
            ranges.append({"tid": tid, "name": "forward", "start": h[0]["start"] - 50, "end": h[-1]["end"] + 50})
    return calls, ranges


# --- rocpd, built from the published schema -------------------------------------
_COMMON = {
    "rocpd_metadata": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "tag" TEXT NOT NULL, "value" TEXT NOT NULL',
    "rocpd_string": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "string" TEXT NOT NULL UNIQUE',
    "rocpd_info_node": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "hash" BIGINT, "machine_id" TEXT, '
                       '"system_name" TEXT, "hostname" TEXT, "release" TEXT, "version" TEXT, "hardware_name" TEXT, '
                       '"domain_name" TEXT',
    "rocpd_info_process": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER, '
                          '"pid" INTEGER, "init" BIGINT, "fini" BIGINT, "start" BIGINT, "end" BIGINT, '
                          '"command" TEXT, "environment" JSONB DEFAULT "{}", "extdata" JSONB DEFAULT "{}"',
    "rocpd_info_thread": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER, '
                         '"pid" INTEGER, "tid" INTEGER, "name" TEXT, "start" BIGINT, "end" BIGINT, '
                         '"extdata" JSONB DEFAULT "{}"',
    "rocpd_info_agent": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                        '"type" TEXT, "absolute_index" INTEGER, "logical_index" INTEGER, "type_index" INTEGER, '
                        '"uuid" INTEGER, "name" TEXT, "model_name" TEXT, "vendor_name" TEXT, "product_name" TEXT, '
                        '"user_name" TEXT, "extdata" JSONB DEFAULT "{}"',
    "rocpd_info_queue": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                        '"name" TEXT, "extdata" JSONB DEFAULT "{}"',
    "rocpd_info_stream": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                         '"name" TEXT, "extdata" JSONB DEFAULT "{}"',
    "rocpd_info_kernel_symbol": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                                '"code_object_id" INTEGER, "kernel_name" TEXT, "display_name" TEXT, '
                                '"kernel_object" INTEGER, "kernarg_segment_size" INTEGER, '
                                '"kernarg_segment_alignment" INTEGER, "group_segment_size" INTEGER, '
                                '"private_segment_size" INTEGER, "sgpr_count" INTEGER, "arch_vgpr_count" INTEGER, '
                                '"accum_vgpr_count" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_event": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "category_id" INTEGER, "stack_id" INTEGER, '
                   '"parent_stack_id" INTEGER, "correlation_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_sample": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "track_id" INTEGER, "timestamp" BIGINT, '
                    '"event_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
}
_V3 = {
    "rocpd_region": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, "tid" INTEGER, '
                    '"start" BIGINT, "end" BIGINT, "name_id" INTEGER, "event_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_kernel_dispatch": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                             '"tid" INTEGER, "agent_id" INTEGER, "kernel_id" INTEGER, "dispatch_id" INTEGER, '
                             '"queue_id" INTEGER, "stream_id" INTEGER, "start" BIGINT, "end" BIGINT, '
                             '"private_segment_size" INTEGER, "group_segment_size" INTEGER, '
                             '"workgroup_size_x" INTEGER, "workgroup_size_y" INTEGER, "workgroup_size_z" INTEGER, '
                             '"grid_size_x" INTEGER, "grid_size_y" INTEGER, "grid_size_z" INTEGER, '
                             '"region_name_id" INTEGER, "event_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_memory_copy": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                         '"tid" INTEGER, "start" BIGINT, "end" BIGINT, "name_id" INTEGER, "dst_agent_id" INTEGER, '
                         '"dst_address" INTEGER, "src_agent_id" INTEGER, "src_address" INTEGER, "size" INTEGER, '
                         '"queue_id" INTEGER, "stream_id" INTEGER, "region_name_id" INTEGER, "event_id" INTEGER, '
                         '"extdata" JSONB DEFAULT "{}"',
}
_V4 = {
    "rocpd_info_category": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "name" TEXT NOT NULL, '
                           '"extdata" JSONB DEFAULT "{}"',
    "rocpd_track": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER, '
                   '"pid" INTEGER, "tid" INTEGER, "agent_id" INTEGER, "queue_id" INTEGER, "stream_id" INTEGER, '
                   '"name_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_region": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "track_id" INTEGER, "name_id" INTEGER, '
                    '"start" BIGINT, "end" BIGINT, "event_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_kernel_dispatch": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "track_id" INTEGER, '
                             '"kernel_id" INTEGER, "dispatch_id" INTEGER, "start" BIGINT, "end" BIGINT, '
                             '"private_segment_size" INTEGER, "group_segment_size" INTEGER, '
                             '"workgroup_size_x" INTEGER, "workgroup_size_y" INTEGER, "workgroup_size_z" INTEGER, '
                             '"grid_size_x" INTEGER, "grid_size_y" INTEGER, "grid_size_z" INTEGER, '
                             '"region_name_id" INTEGER, "event_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
    "rocpd_memory_copy": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "track_id" INTEGER, "start" BIGINT, '
                         '"end" BIGINT, "name_id" INTEGER, "dst_agent_id" INTEGER, "dst_address" INTEGER, '
                         '"src_agent_id" INTEGER, "src_address" INTEGER, "size" INTEGER, "region_name_id" INTEGER, '
                         '"event_id" INTEGER, "extdata" JSONB DEFAULT "{}"',
}


def build_rocpd(path: Path, version: int, legacy: bool = False) -> Path:
    tool = real_doc()["rocprofiler-sdk-tool"][0]
    kd = tool["buffer_records"]["kernel_dispatch"][:N_KERNELS]
    calls, ranges = made_up_calls(tool)
    db = sqlite3.connect(path)
    tables = {**_COMMON, **(_V3 if version == 3 else _V4)}
    for name, cols in tables.items():
        db.execute(f"CREATE TABLE `{name}{UUID}` ({cols})")
        db.execute(f"CREATE VIEW `{name}` AS SELECT * FROM `{name}{UUID}`")  # as rocpd_views.sql does
    t = lambda n: f"`{n}{UUID}`"  # noqa: E731
    db.executemany(f"INSERT INTO {t('rocpd_metadata')} (tag, value) VALUES (?, ?)",
                   [("schema_version", "3" if version == 3 else "4.1.0"), ("uuid", UUID)])
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
            db.execute(f"INSERT INTO {t('rocpd_string')} (id, string) VALUES (?, ?)", (strings[s], s))
        return strings[s]

    cat_table = "rocpd_info_category" if version == 4 else "rocpd_string"
    cats: dict[str, int] = {}

    def cid(s: str) -> int:
        if version == 3:
            return sid(s)
        if s not in cats:
            cats[s] = len(cats) + 1
            db.execute(f"INSERT INTO {t(cat_table)} (id, name) VALUES (?, ?)", (cats[s], s))
        return cats[s]

    node = tool["metadata"]["node"]
    db.execute(f"INSERT INTO {t('rocpd_info_node')} (id, hash, machine_id, hostname) VALUES (1, 1, ?, ?)",
               (node["machine_id"], node["hostname"]))
    db.execute(f"INSERT INTO {t('rocpd_info_process')} (id, nid, pid, command) VALUES (1, 1, ?, 'python')",
               (tool["metadata"]["pid"],))
    threads = sorted({k["thread_id"] for k in kd})
    thread_row = {tid: i + 1 for i, tid in enumerate(threads)}
    db.executemany(f"INSERT INTO {t('rocpd_info_thread')} (id, nid, pid, tid, name) VALUES (?, 1, 1, ?, ?)",
                   [(thread_row[tid], tid, f"worker {tid}") for tid in threads])
    agent_row = {}
    for i, a in enumerate(tool["agents"]):
        agent_row[a["id"]["handle"]] = i + 1
        db.execute(f"INSERT INTO {t('rocpd_info_agent')} (id, nid, pid, type, type_index, name, product_name) "
                   "VALUES (?, 1, 1, ?, ?, ?, ?)",
                   (i + 1, "GPU" if a["type"] == 2 else "CPU", a.get("logical_node_type_id"), a.get("name"),
                    a.get("product_name")))
    queues = sorted({k["dispatch_info"]["queue_id"]["handle"] for k in kd})
    queue_row = {q: i + 1 for i, q in enumerate(queues)}
    db.executemany(f"INSERT INTO {t('rocpd_info_queue')} (id, nid, pid, name) VALUES (?, 1, 1, ?)",
                   [(queue_row[q], f"HSA queue {q}") for q in queues])
    syms = {s["kernel_id"]: s for s in tool["kernel_symbols"]}
    db.executemany(f"INSERT INTO {t('rocpd_info_kernel_symbol')} (id, nid, pid, code_object_id, kernel_name, "
                   "display_name, arch_vgpr_count) VALUES (?, 1, 1, 0, ?, ?, ?)",
                   [(k, s["kernel_name"], _kernel_name(s), s.get("arch_vgpr_count")) for k, s in syms.items()])
    events = 0

    def event(category: str, corr: int) -> int:
        """An event row as rocprofiler-sdk's writer makes it: the internal correlation id
        in ``stack_id`` (and ``parent_stack_id`` for a device op: its launching call), the
        external one (0: none) in ``correlation_id``; ``legacy`` puts the internal one there."""
        nonlocal events
        events += 1
        device = category in ("KERNEL_DISPATCH", "MEMORY_COPY")
        row = (0, 0, corr) if legacy else (corr, corr if device else 0, 0)
        db.execute(f"INSERT INTO {t('rocpd_event')} (id, category_id, stack_id, parent_stack_id, correlation_id) "
                   "VALUES (?, ?, ?, ?, ?)", (events, cid(category), *row))
        return events

    tracks: dict[tuple, int] = {}

    def track(tid_row=None, agent=None, queue=None) -> int:
        key = (tid_row, agent, queue)
        if key not in tracks:
            tracks[key] = len(tracks) + 1
            db.execute(f"INSERT INTO {t('rocpd_track')} (id, nid, pid, tid, agent_id, queue_id, stream_id) "
                       "VALUES (?, 1, 1, ?, ?, ?, NULL)", (tracks[key], tid_row, agent, queue))
        return tracks[key]

    for k in kd:
        di = k["dispatch_info"]
        ev = event("KERNEL_DISPATCH", k["correlation_id"]["internal"])
        common = (di["kernel_id"], di["dispatch_id"], k["start_timestamp"], k["end_timestamp"],
                  di["private_segment_size"], di["group_segment_size"], *di["workgroup_size"].values(),
                  *di["grid_size"].values(), ev)
        if version == 3:
            db.execute(f"INSERT INTO {t('rocpd_kernel_dispatch')} (nid, pid, tid, agent_id, queue_id, stream_id, "
                       "kernel_id, dispatch_id, start, \"end\", private_segment_size, group_segment_size, "
                       "workgroup_size_x, workgroup_size_y, workgroup_size_z, grid_size_x, grid_size_y, grid_size_z, "
                       "event_id) VALUES (1, 1, ?, ?, ?, NULL, ?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (thread_row[k["thread_id"]], agent_row[di["agent_id"]["handle"]],
                        queue_row[di["queue_id"]["handle"]], *common))
        else:
            tr = track(None, agent_row[di["agent_id"]["handle"]], queue_row[di["queue_id"]["handle"]])
            db.execute(f"INSERT INTO {t('rocpd_kernel_dispatch')} (track_id, kernel_id, dispatch_id, start, \"end\", "
                       "private_segment_size, group_segment_size, workgroup_size_x, workgroup_size_y, "
                       "workgroup_size_z, grid_size_x, grid_size_y, grid_size_z, event_id) "
                       "VALUES (?, ?,?,?,?,?,?,?,?,?,?,?,?,?)", (tr, *common))

    def region(tid: int, name: str, start: int, end: int, ev: int) -> None:
        if version == 3:
            db.execute(f"INSERT INTO {t('rocpd_region')} (nid, pid, tid, start, \"end\", name_id, event_id) "
                       "VALUES (1, 1, ?, ?, ?, ?, ?)", (thread_row[tid], start, end, sid(name), ev))
        else:
            db.execute(f"INSERT INTO {t('rocpd_region')} (track_id, start, \"end\", name_id, event_id) "
                       "VALUES (?, ?, ?, ?, ?)", (track(thread_row[tid]), start, end, sid(name), ev))

    for c in calls:
        region(c["tid"], "hipLaunchKernel", c["start"], c["end"], event("HIP_RUNTIME_API_EXT", c["corr"]))
    for i, r in enumerate(ranges):
        region(r["tid"], r["name"], r["start"], r["end"], event("MARKER_CORE_API", 10_000_000 + i))
    # a host-to-device copy, launched by a hipMemcpy call on the first thread
    gpu = next(agent_row[a["id"]["handle"]] for a in tool["agents"] if a["type"] == 2)
    cpu = next(agent_row[a["id"]["handle"]] for a in tool["agents"] if a["type"] == 1)
    s0 = kd[0]["start_timestamp"] - 200_000
    region(threads[0], "hipMemcpy", s0, s0 + 40_000, event("HIP_RUNTIME_API_EXT", 20_000_000))
    ev = event("MEMORY_COPY", 20_000_000)
    if version == 3:
        db.execute(f"INSERT INTO {t('rocpd_memory_copy')} (nid, pid, tid, start, \"end\", name_id, dst_agent_id, "
                   "src_agent_id, size, event_id) VALUES (1, 1, 1, ?, ?, ?, ?, ?, 1048576, ?)",
                   (s0 + 5_000, s0 + 35_000, sid("MEMORY_COPY_HOST_TO_DEVICE"), gpu, cpu, ev))
    else:
        db.execute(f"INSERT INTO {t('rocpd_memory_copy')} (track_id, start, \"end\", name_id, dst_agent_id, "
                   "src_agent_id, size, event_id) VALUES (?, ?, ?, ?, ?, ?, 1048576, ?)",
                   (track(None, gpu, None), s0 + 5_000, s0 + 35_000, sid("MEMORY_COPY_HOST_TO_DEVICE"), gpu, cpu, ev))
    db.commit()
    db.close()
    return path


@pytest.fixture(scope="module", params=[3, 4])
def rocpd_db(request, tmp_path_factory) -> Path:
    return build_rocpd(tmp_path_factory.mktemp("rocpd") / f"run_v{request.param}.db", request.param)


def _kernel_totals(trace) -> dict[str, int]:
    kb = kernel_breakdown(trace)
    return {n: int(t) for n, t in zip(column(kb, "name"), column(kb, "total_ns"))
            if not n.startswith("Memcpy")}


def test_rocpd_is_sniffed_by_content(rocpd_db):
    assert detect(rocpd_db) == "rocpd"


def test_rocpd_kernel_totals_equal_sql(rocpd_db):
    trace = polyprof.load(rocpd_db)
    want = dict(_sql(rocpd_db, "SELECT S.display_name, sum(K.\"end\" - K.start) FROM rocpd_kernel_dispatch K "
                               "JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id GROUP BY S.display_name"))
    assert _kernel_totals(trace) == want and len(want) > 5


def test_rocpd_roctx_projection_equals_sql(rocpd_db):
    """A ROCTx range's device time: the kernels whose HIP call started inside it on its thread."""
    v4 = "rocpd_track" in {r[0] for r in _sql(rocpd_db, "SELECT name FROM sqlite_master")}
    tid = "(SELECT tid FROM rocpd_track T WHERE T.id = R.track_id)" if v4 else "R.tid"
    cat = "rocpd_info_category" if v4 else "rocpd_string"
    catname = "name" if v4 else "string"
    q = f"""
    WITH reg AS (SELECT R.start, R."end", {tid} AS tid, S.string AS name, C.{catname} AS cat, E.stack_id AS corr
                 FROM rocpd_region R JOIN rocpd_string S ON S.id = R.name_id
                 JOIN rocpd_event E ON E.id = R.event_id JOIN {cat} C ON C.id = E.category_id),
         dev AS (SELECT E.stack_id AS corr, K."end" - K.start AS d FROM rocpd_kernel_dispatch K
                 JOIN rocpd_event E ON E.id = K.event_id
                 UNION ALL SELECT E.stack_id, M."end" - M.start FROM rocpd_memory_copy M
                 JOIN rocpd_event E ON E.id = M.event_id)
    SELECT m.name, sum(dev.d) FROM reg m
      JOIN reg a ON a.cat LIKE 'HIP%' AND a.tid = m.tid AND a.start >= m.start AND a.start < m."end"
      JOIN dev ON dev.corr = a.corr
    WHERE m.cat LIKE 'MARKER%' GROUP BY m.name"""
    want = {n: int(v) for n, v in _sql(rocpd_db, q)}
    st = section_stats(polyprof.load(rocpd_db))
    got = {n: int(d) for n, d in zip(column(st, "name"), column(st, "device_ns"))}
    assert got == want and set(want) == {"step", "forward"}


def test_rocpd_device_ops_matched_by_stack_id(rocpd_db):
    """rocprofiler-sdk keeps the internal correlation id in ``rocpd_event.stack_id``
    (``correlation_id`` is the external one, 0 when the program set none: every row of a
    real MI-series database): each kernel and copy is matched to its HIP call by it."""
    assert {r[0] for r in _sql(rocpd_db, "SELECT DISTINCT correlation_id FROM rocpd_event")} == {0}
    from polyprof.derive.correlate import correlate

    corr = correlate(polyprof.load(rocpd_db))
    assert int((corr.launch >= 0).sum()) == N_KERNELS + 1 == len(corr.device_rows)


def test_rocpd_internal_id_in_correlation_id_is_read(tmp_path):
    """A database whose events hold the internal id in ``correlation_id`` and none in
    ``stack_id`` is matched by that."""
    from polyprof.derive.correlate import correlate

    corr = correlate(polyprof.load(build_rocpd(tmp_path / "legacy.db", 3, legacy=True)))
    assert int((corr.launch >= 0).sum()) == N_KERNELS + 1


def test_rocpd_layout(rocpd_db):
    trace = polyprof.load(rocpd_db)
    assert [p.name for p in trace.planes if p.kind == "device"] == ["/device:GPU:0"]
    gpu = trace.plane_by_name("/device:GPU:0")
    assert gpu.vendor == "AMD" and gpu.properties["product_name"] == "AMD Instinct MI350X"
    assert trace.sources[0].pid == 908 and trace.sources[0].host == "smci350-zts-gtu-c6-25"
    assert {t.name for t in trace.tracks if t.kind == "stream"} >= {"HSA queue 18", "HSA queue 19"}
    kd = real_doc()["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][:N_KERNELS]
    assert {t.name for t in trace.tracks if t.kind == "thread"} == {f"worker {k['thread_id']}" for k in kd}
    cats = trace.categories()
    assert (cats == "kernel").sum() == N_KERNELS and (cats == "gpu_memcpy").sum() == 1
    assert (cats == "hip_runtime").sum() == N_KERNELS + 1
    copy = int((cats == "gpu_memcpy").nonzero()[0][0])
    assert trace.names([copy])[0] == "Memcpy HtoD" and trace.event_stats(copy)["bytes"] == 1048576
    # every device op flows from its HIP call; the summary matches them all by id
    assert len(trace.flows["src"]) == N_KERNELS + 1
    from polyprof.derive.correlate import correlate

    assert int((correlate(trace).launch >= 0).sum()) == N_KERNELS + 1
    k = int((cats == "kernel").nonzero()[0][0])
    st = trace.event_stats(k)
    assert st["grid"] == "512,1,1" and st["block"] == "512,1,1"


def test_rocpd_summary_shows_sections_and_launches(rocpd_db):
    r = cli("summary", str(rocpd_db))
    assert r.returncode == 0, r.stderr
    for title in ("Top device activity", "Device time", "Launches", "Sections", "hipLaunchKernel", "forward"):
        assert title in r.stdout


# --- rocprofv3 JSON ------------------------------------------------------------------
def test_real_json_kernel_totals_equal_recompute():
    assert detect(REAL_JSON) == "rocprofv3-json"
    tool = real_doc()["rocprofiler-sdk-tool"][0]
    syms = {s["kernel_id"]: _kernel_name(s) for s in tool["kernel_symbols"]}
    want: dict[str, int] = defaultdict(int)
    for k in tool["buffer_records"]["kernel_dispatch"]:
        want[syms[k["dispatch_info"]["kernel_id"]]] += k["end_timestamp"] - k["start_timestamp"]
    trace = polyprof.load(REAL_JSON)
    assert _kernel_totals(trace) == dict(want)
    assert trace.sources[0].pid == 908
    assert trace.plane_by_name("/device:GPU:0").properties["product_name"] == "AMD Instinct MI350X"
    queues = {t.name for t in trace.tracks}
    assert queues == {f"queue {q}" for q in {k["dispatch_info"]["queue_id"]["handle"]
                                              for k in tool["buffer_records"]["kernel_dispatch"]}}


def _json_with_calls(tmp_path: Path) -> Path:
    """The real JSON with made-up HIP calls and ROCTx ranges added as rocprofv3 records."""
    doc = real_doc()
    tool = doc["rocprofiler-sdk-tool"][0]
    calls, ranges = made_up_calls(tool)
    tool["buffer_records"]["kernel_dispatch"] = tool["buffer_records"]["kernel_dispatch"][:N_KERNELS]
    kinds = [k["kind"] for k in tool["strings"]["buffer_records"]]
    hip, marker = kinds.index("HIP_RUNTIME_API_EXT"), kinds.index("MARKER_CORE_API")
    hip_ops = tool["strings"]["buffer_records"][hip]["operations"]
    marker_ops = tool["strings"]["buffer_records"][marker]["operations"]
    launch, push = hip_ops.index("hipLaunchKernel"), marker_ops.index("roctxRangePushA")
    tool["buffer_records"]["hip_api"] = [
        {"size": 56, "kind": hip, "operation": launch, "thread_id": c["tid"],
         "correlation_id": {"internal": c["corr"], "external": 0},
         "start_timestamp": c["start"], "end_timestamp": c["end"]} for c in calls]
    tool["buffer_records"]["marker_api"] = [
        {"size": 56, "kind": marker, "operation": push, "thread_id": r["tid"],
         "correlation_id": {"internal": 10_000_000 + i, "external": 0},
         "start_timestamp": r["start"], "end_timestamp": r["end"]} for i, r in enumerate(ranges)]
    tool["strings"]["marker_api"] = [{"key": 10_000_000 + i, "value": r["name"]} for i, r in enumerate(ranges)]
    out = tmp_path / "results.json"
    out.write_text(json.dumps(doc))
    return out


def test_json_roctx_projection_equals_recompute(tmp_path):
    path = _json_with_calls(tmp_path)
    tool = json.loads(path.read_text())["rocprofiler-sdk-tool"][0]
    calls, ranges = made_up_calls(tool)
    dur = {k["correlation_id"]["internal"]: k["end_timestamp"] - k["start_timestamp"]
           for k in tool["buffer_records"]["kernel_dispatch"]}
    want: dict[str, int] = defaultdict(int)
    for r in ranges:
        for c in calls:
            if c["tid"] == r["tid"] and r["start"] <= c["start"] < r["end"]:
                want[r["name"]] += dur[c["corr"]]
    trace = polyprof.load(path)
    st = section_stats(trace)
    assert {n: int(d) for n, d in zip(column(st, "name"), column(st, "device_ns"))} == dict(want)
    assert len(trace.flows["src"]) == N_KERNELS
    r = cli("summary", str(path))
    assert r.returncode == 0 and "Sections" in r.stdout and "hipLaunchKernel" in r.stdout


def test_json_that_is_not_rocprofv3_gives_one_line(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text('{"rocprofiler-sdk-tool": {"metadata": 3}}')
    with pytest.raises(TraceFormatError, match="not rocprofv3 JSON"):
        polyprof.load(bad)
    r = cli("summary", str(bad))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "results.json" in err[0]


def test_json_numbers_beyond_64_bits_give_one_line(tmp_path):
    doc = real_doc()
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]["start_timestamp"] = 2**70
    bad = tmp_path / "big.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match="beyond 64 bits") as e:
        polyprof.load(bad)
    assert "big.json" in str(e.value)


def test_truncated_rocpd_gives_one_line(rocpd_db, tmp_path):
    cut = tmp_path / "cut.db"
    data = rocpd_db.read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    r = cli("summary", str(cut))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "cut.db" in err[0] and "truncated" in err[0]


def _replicated_json(tmp_path: Path, copies: int) -> tuple[Path, list[dict]]:
    doc = real_doc()
    kd = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    span = max(k["end_timestamp"] for k in kd) - min(k["start_timestamp"] for k in kd) + 1
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"] = reps = [
        {**k, "start_timestamp": k["start_timestamp"] + r * span, "end_timestamp": k["end_timestamp"] + r * span}
        for r in range(copies) for k in kd]
    out = tmp_path / "results.json"
    out.write_text(json.dumps(doc))
    return out, reps


def test_json_records_decoded_a_chunk_at_a_time(tmp_path, monkeypatch):
    """Memory bounded by a chunk (issue 35): the records' nested structs (about 1 KB
    each) are decoded ``CHUNK`` at a time and the file is read once, not joined from its
    blocks, so the peak above the file's bytes is what the columns take per record.
    Decoded whole, 24,000 dispatches peaked 1,190 B per record above the file."""
    from polyprof.formats import rocprof_json

    path, reps = _replicated_json(tmp_path, 8)
    monkeypatch.setattr(rocprof_json, "CHUNK", 1000, raising=False)
    import tracemalloc

    tracemalloc.start()
    try:
        trace = polyprof.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert trace.n_events == len(reps) == 24_000
    assert (peak - path.stat().st_size) / len(reps) < 700
    # every chunk's rows in place: each dispatch's duration, in time order
    want = sorted((k["start_timestamp"], k["end_timestamp"] - k["start_timestamp"]) for k in reps)
    got = sorted(zip(trace.events["start_ns"].tolist(), trace.events["dur_ns"].tolist()))
    assert got == want


def test_json_bad_record_named_in_its_chunk(tmp_path, monkeypatch):
    from polyprof.formats import rocprof_json

    path, reps = _replicated_json(tmp_path, 1)
    doc = json.loads(path.read_text())
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][2500]["start_timestamp"] = "soon"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(rocprof_json, "CHUNK", 1000, raising=False)
    with pytest.raises(TraceFormatError, match=r"kernel_dispatch\[2500\]\.start_timestamp") as e:
        polyprof.load(path)
    assert "results.json" in str(e.value) and "not rocprofv3 JSON" in str(e.value)
