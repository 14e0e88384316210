"""The RPD reader (formats/rpd.py) against real databases of ROCm's rocmProfileData tracer.

``tests/data/rpd`` (README.md there): ``matmul_result.rpd`` with the JSON the project's
own converter (``rpd2tracing.py``) made of it, and ``mytrace.rpd.gz``, a vLLM decode with
HIP graph replays and ROCTx ranges, as the project's raptor tests keep it. Every number
checked is recomputed by SQL from the database itself, or taken from rpd2tracing's JSON.
"""

from __future__ import annotations

import gzip
import tempfile
import importlib.util
import json
import logging
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.cuda_graphs import cuda_graphs
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.derive import cache
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from polyprof.trace import keys
from polyprof.trace.categories import Kind
from sqlite_query import query as _sql

DATA = Path(__file__).resolve().parent / "data" / "rpd"
MATMUL = DATA / "matmul_result.rpd"
#: rpd2tracing's names of the ops it names by their type, and ours
_COPY = {"CopyHostToDevice": "Memcpy HtoD", "CopyDeviceToHost": "Memcpy DtoH", "FillBuffer": "Memset"}


@pytest.fixture(scope="module")
def vllm(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rpd") / "mytrace.rpd"
    with gzip.open(DATA / "mytrace.rpd.gz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _events(trace: polyprof.Trace, kinds: tuple[Kind, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = np.flatnonzero(np.isin(trace.kinds, kinds))
    return trace.names()[rows], trace.events["start_ns"][rows], trace.events["dur_ns"][rows]


def test_rpd_is_sniffed_by_content(vllm, tmp_path):
    assert detect(MATMUL) == "rpd" and detect(vllm) == "rpd"
    renamed = tmp_path / "trace.sqlite"  # not by its name
    shutil.copy(MATMUL, renamed)
    assert detect(renamed) == "rpd"


def test_device_ops_equal_rpd2tracing(tmp_path):
    """Every GPU op of the matmul: the same names and counts as the JSON rpd2tracing made
    of the database; times within the µs that JSON kept of them."""
    ref = [e for e in json.loads((DATA / "matmul_result.json").read_text())
           if e.get("ph") == "X" and str(e.get("pid")) == "2"]  # rpd2tracing's GPU 2 process
    t = polyprof.load(MATMUL)
    names, start, dur = _events(t, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    ours = sorted(zip(names.tolist(), start.tolist(), dur.tolist()), key=lambda x: (x[1], x[0]))
    theirs = sorted(((_COPY.get(e["name"], e["name"]), float(e["ts"]), float(e["dur"])) for e in ref),
                    key=lambda x: (x[1], x[0]))
    assert len(ours) == len(theirs) == 85
    assert Counter(n for n, _, _ in ours) == Counter(n for n, _, _ in theirs)
    for (n, s, d), (rn, rs, rd) in zip(ours, theirs):
        assert n == rn
        assert abs(s / 1000 - rs) < 1 and abs(d / 1000 - rd) < 1


def test_calls_equal_rpd2tracing():
    """The host side: one event per call of rpd2tracing's JSON, by name, on its thread."""
    ref = Counter((str(e["tid"]), e["name"]) for e in json.loads((DATA / "matmul_result.json").read_text())
                  if e.get("ph") == "X" and str(e.get("pid")) != "2")
    t = polyprof.load(MATMUL)
    host = np.flatnonzero(~np.isin(t.kinds, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)))
    tracks = t.events["track"][host]
    ours = Counter((str(t.tracks[int(k)].tid), n) for k, n in zip(tracks.tolist(), t.names()[host].tolist()))
    assert ours == ref and sum(ours.values()) == 125


def test_every_op_links_to_its_call_and_takes_its_launch_stats():
    t = polyprof.load(MATMUL)
    corr = cache.correlation(t)
    assert corr.counts["device_activities"] == 85 and corr.counts["matched_by_correlation_id"] == 85
    kernels = np.flatnonzero(t.kinds == Kind.KERNEL)
    grid, block = t.stat(keys.GRID), t.stat(keys.BLOCK)
    want = dict(((k, (f"{gx},{gy},{gz}", f"{wx},{wy},{wz}")) for k, gx, gy, gz, wx, wy, wz in _sql(
        MATMUL, "SELECT api_ptr_id, gridX, gridY, gridZ, workgroupX, workgroupY, workgroupZ FROM rocpd_kernelapi")))
    cid = t.stat(keys.CORRELATION_ID)
    has, ids = cid.lookup(kernels)
    assert has.all()
    gm, gv = grid.lookup(kernels)
    bm, bv = block.lookup(kernels)
    assert gm.all() and bm.all()  # every kernel of this run was launched by a call with a kernelapi row
    assert [(g, b) for g, b in zip(gv.tolist(), bv.tolist())] == [want[int(i)] for i in ids.tolist()]
    copies = np.flatnonzero(t.kinds == Kind.MEMCPY)
    size = dict(_sql(MATMUL, "SELECT api_ptr_id, size FROM rocpd_copyapi"))
    m, nbytes = t.stat(keys.BYTES).lookup(copies)
    _, cids = cid.lookup(copies)
    assert m.all() and nbytes.tolist() == [size[int(i)] for i in cids.tolist()]


def test_vllm_device_time_equals_sql(vllm):
    t = polyprof.load(vllm)
    names, _, dur = _events(t, (Kind.KERNEL,))
    want = dict(_sql(vllm, "SELECT CASE WHEN s.string = '' THEN ty.string ELSE s.string END, sum(o.\"end\" - o.start) "
                           "FROM rocpd_op o JOIN rocpd_string s ON s.id = o.description_id "
                           "JOIN rocpd_string ty ON ty.id = o.opType_id "
                           "WHERE ty.string IN ('KernelExecution', 'Task') GROUP BY 1"))
    ours: Counter[str] = Counter()
    for n, d in zip(names.tolist(), dur.tolist()):
        ours[n] += d
    assert dict(ours) == want and len(names) == 1228 + 7720


def test_vllm_graph_replays(vllm):
    """hipGraphLaunch is a graph launch: its 20 replays of one graph (its graphExec from
    the call's args), each op of a replay linked to its call."""
    t = polyprof.load(vllm)
    g = cuda_graphs(t)
    assert column(g, "graph").tolist() == ["graph 0x24922d90"]
    assert column(g, "replays").tolist() == [20]
    per_replay = _sql(vllm, "SELECT count(*) FROM rocpd_api_ops o JOIN api a ON a.id = o.api_id "
                            "WHERE a.apiName = 'hipGraphLaunch'")[0][0] / 20
    assert column(g, "kernels_per_replay").tolist() == [per_replay]  # 386 kernels and 32 copies


def test_vllm_roctx_ranges_are_sections_with_their_device_time(vllm):
    t = polyprof.load(vllm)
    s = section_stats(t)
    count = dict(zip(column(s, "name").tolist(), column(s, "count").tolist()))
    want = dict(_sql(vllm, "SELECT args, count(*) FROM api WHERE apiName = 'UserMarker' GROUP BY 1"))
    assert sum(want.values()) == 11884
    assert count == {**want, "run_to_completion": 1}  # a range pushed through rpd's own API
    device = dict(zip(column(s, "name").tolist(), column(s, "device_ns").tolist()))
    assert device["execute_model"] > 0.9 * device["run_to_completion"] > 0


def test_vllm_tracer_writes_are_overhead_and_unread_tables_named(vllm):
    t = polyprof.load(vllm)
    cats = t.categories()
    names = t.names()
    writes = {n for n in set(names[cats == "overhead"].tolist())}
    assert writes == {"ApiTable::writeRows", "OpTable::writeRows", "KernelApiTable::writeRows",
                      "CopyApiTable::writeRows", "MonitorTable::writeRows", "hcc_activity_callback", "rpdflush"}
    md = t.metadata["rpd"]
    assert md["schema_version"] == "2"
    assert {"rocpd_monitor", "ext_autogradapi"} <= set(md["tables_not_read"])


def test_schema_3_reads_args_from_ustring(tmp_path):
    """rpd_tracer's schema 3 keeps args in ``rocpd_ustring``: a marker's name comes from
    there, not from ``rocpd_string`` (where the same id names something else)."""
    db = tmp_path / "v3.rpd"
    shutil.copy(MATMUL, db)
    conn = sqlite3.connect(db)
    conn.execute('CREATE TABLE "rocpd_ustring" ("id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, '
                 '"string" varchar(4096) NOT NULL)')
    marker = conn.execute("INSERT INTO rocpd_string (string) VALUES ('UserMarker')").lastrowid
    text = conn.execute("INSERT INTO rocpd_ustring (id, string) VALUES (7, 'forward pass')").lastrowid
    conn.execute("INSERT INTO rocpd_api (pid, tid, start, \"end\", apiName_id, args_id) "
                 "SELECT pid, tid, min(start), max(\"end\"), ?, ? FROM rocpd_api", (marker, text))
    conn.execute("UPDATE rocpd_metadata SET value = '3' WHERE tag = 'schema_version'")
    conn.commit()
    conn.close()
    t = polyprof.load(db)
    s = section_stats(t)
    assert column(s, "name").tolist() == ["forward pass"]
    _, _, dur = _events(t, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    assert column(s, "device_ns")[0] == dur.sum()  # every op was launched inside it


def test_a_gzipped_database_reads_as_the_plain_one(tmp_path):
    """As raptor's tests keep RPD files (``mytrace.rpd.gz``): inflated into a temporary copy."""
    gz = tmp_path / "trace.rpd.gz"
    gz.write_bytes(gzip.compress(MATMUL.read_bytes()))
    plain, packed = polyprof.load(MATMUL), polyprof.load(gz)
    assert packed.n_events == plain.n_events and (packed.events["dur_ns"] == plain.events["dur_ns"]).all()
    assert not list(Path(tempfile.gettempdir()).glob("polyprof-*.sqlite"))


def test_other_sqlite_names_what_it_lacks(tmp_path):
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE rocpd_api (id integer)")  # a name alone is not RPD
    conn.commit()
    conn.close()
    with pytest.raises(TraceFormatError, match="an RPD database.*nor an nvprof file.*rocpd_api"):
        polyprof.load(db)


def _edited(tmp_path: Path, name: str, *sql: tuple[str, tuple]) -> Path:
    """A copy of MATMUL named ``name`` with these SQL statements applied."""
    db = tmp_path / name
    shutil.copy(MATMUL, db)
    conn = sqlite3.connect(db)
    for stmt, params in sql:
        conn.execute(stmt, params)
    conn.commit()
    conn.close()
    return db


def test_damaged_op_table_is_one_error(tmp_path):
    db = _edited(tmp_path, "bad.rpd", ("UPDATE rocpd_op SET start = 'soon' WHERE id = 3", ()))
    with pytest.raises(TraceFormatError, match="bad.rpd"):
        polyprof.load(db)


def test_a_blank_copy_size_leaves_that_copys_bytes_out(tmp_path, caplog):
    """rmpd's own ``matmul_result_large.rpd`` stores one ``rocpd_copyapi.size`` as ''
    (the file is not kept here: 98 KB), as rpd_tracer writes a size of 0 or less: the
    database reads and that copy has no bytes (said by the copies table's unsized count,
    not warned of); a kernel's grid of text is warned of, naming its table."""
    blank = _sql(MATMUL, "SELECT api_ptr_id FROM rocpd_copyapi ORDER BY api_ptr_id LIMIT 1")[0][0]
    bad_kernel = _sql(MATMUL, "SELECT api_ptr_id FROM rocpd_kernelapi ORDER BY api_ptr_id LIMIT 1")[0][0]
    db = _edited(tmp_path, "blank.rpd", ("UPDATE rocpd_copyapi SET size = '' WHERE api_ptr_id = ?", (blank,)),
                 ("UPDATE rocpd_kernelapi SET gridX = 'wide' WHERE api_ptr_id = ?", (bad_kernel,)))
    with caplog.at_level("WARNING", logger="polyprof"):
        t = polyprof.load(db)
    assert "rocpd_copyapi" not in caplog.text and "rocpd_kernelapi: 1 rows" in caplog.text
    whole = polyprof.load(MATMUL)
    assert t.n_events == whole.n_events
    cid = t.stat(keys.CORRELATION_ID)
    for kind, stat, left_out in ((Kind.MEMCPY, keys.BYTES, blank), (Kind.KERNEL, keys.GRID, bad_kernel)):
        rows = np.flatnonzero(t.kinds == kind)
        _, ids = cid.lookup(rows)
        has, values = t.stat(stat).lookup(rows)
        assert (~has).tolist() == (ids == left_out).tolist() and (ids == left_out).any()
        whole_has, whole_values = whole.stat(stat).lookup(rows)
        assert whole_has.all() and values.tolist() == whole_values[has].tolist()


def test_copies_match_the_database_and_pinned_is_not_pageable():
    """The copies table on matmul_result.rpd, recomputed by SQL (each op's first call in
    rocpd_api_ops, its rocpd_copyapi row): count, bytes, time per op type. Its
    ``pinned`` column is 0 on every row (no RPD writer sets it: rpd_tracer's row keeps
    its default), so no copy counts as pageable."""
    from polyprof.analyze.copies import copies  # the table checked

    want = {op: r for op, *r in _sql(MATMUL, """
        SELECT s.string, count(*), sum(c.size), sum(o."end" - o.start), max(c.pinned) FROM rocpd_op o
        JOIN rocpd_string s ON s.id = o.opType_id
        JOIN (SELECT op_id, min(id) AS first FROM rocpd_api_ops GROUP BY op_id) f ON f.op_id = o.id
        JOIN rocpd_api_ops a ON a.id = f.first JOIN rocpd_copyapi c ON c.api_ptr_id = a.api_id
        GROUP BY s.string""")}
    assert want == {"CopyHostToDevice": [2, 2032000000, 157178063, 0], "CopyDeviceToHost": [53, 296, 334758, 0]}
    t = copies(polyprof.load(MATMUL))
    got = {k: (n, b, ns, p, u) for k, n, b, ns, p, u in zip(t["kind"], t["count"], t["total_bytes"], t["total_ns"],
                                                             t["pageable"], t["unsized"])}
    assert got["HtoD"] == (2, 2032000000, 157178063, 0, 0) and got["DtoH"] == (53, 296, 334758, 0, 0)
    assert got["memset"][0] == 1 and set(t["device"]) == {"/device:GPU:2"}


def test_a_2d_copys_bytes_are_its_width_times_height(tmp_path):
    """rpd_tracer (RoctracerDataSource.cpp) writes a hipMemcpy2D's ``width`` (bytes) and
    ``height`` (rows), never its ``size`` (0). No public RPD holds a 2D copy: this edits
    one of matmul_result.rpd's device-to-host copies (4 bytes) into the row rpd_tracer
    writes for a 64 x 3 hipMemcpy2D; it was read as a copy of 0 bytes."""
    from polyprof.analyze.copies import copies  # the table checked

    api = _sql(MATMUL, "SELECT api_ptr_id FROM rocpd_copyapi WHERE kind = 2 AND size = 4 ORDER BY api_ptr_id")[0][0]
    db = _edited(tmp_path, "copy2d.rpd",
                 ("UPDATE rocpd_copyapi SET size = 0, width = 64, height = 3 WHERE api_ptr_id = ?", (api,)))
    t = polyprof.load(db)
    rows = np.flatnonzero(t.kinds == Kind.MEMCPY)
    _, ids = t.stat(keys.CORRELATION_ID).lookup(rows)
    has, nbytes = t.stat(keys.BYTES).lookup(rows)
    assert has.all() and nbytes[ids == api].tolist() == [192]
    d2h = copies(t)
    r = np.flatnonzero(d2h["kind"] == "DtoH")[0]
    assert (d2h["count"][r], d2h["total_bytes"][r], d2h["unsized"][r]) == (53, 296 - 4 + 192, 0)


def test_a_text_in_an_integer_column_is_named(tmp_path):
    db = _edited(tmp_path, "bad.rpd", ("UPDATE rocpd_op SET gpuId = 'first' WHERE id = 3", ()))
    with pytest.raises(TraceFormatError, match=r"bad\.rpd.*rocpd_op\.gpuId.*text or reals"):
        polyprof.load(db)


def test_a_directory_of_rpd_files_is_a_job(tmp_path):
    """rmpd's examples folder holds its .rpd files beside a JSON: the folder read as one
    rank (the JSON) and a folder of .rpd files alone was "no trace files"."""
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        shutil.copy(MATMUL, job / f"rank{r}.rpd")
    ts = polyprof.load_ranks(job)
    assert [Path(str(e.path)).name for e in ts.entries] == ["rank0.rpd", "rank1.rpd"]
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(job)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("polyprof summary: 2 ranks")


def test_rpd2tracing_json_has_the_same_device_time():
    """rpd2tracing's JSON writes no category: its GPU process's events are still device
    activity (formats/kineto/devices.py), the same kernels, copies and fill as the
    database, and its HIP calls the launches its flows link them to."""
    from polyprof.analyze.breakdown import kernel_breakdown

    def table(t: polyprof.Trace) -> dict[str, tuple[int, str, int]]:
        kb = kernel_breakdown(t)
        return {n: (c, k, d) for n, c, k, d in zip(column(kb, "name").tolist(), column(kb, "count").tolist(),
                                                   column(kb, "kind").tolist(), column(kb, "total_ns").tolist())}

    trace = polyprof.load(DATA / "matmul_result.json")
    counts = cache.correlation(trace).counts  # its hip calls are launches, linked by its api_op flows
    assert counts["device_activities"] == counts["matched_by_flow"] == 85
    db, js = table(polyprof.load(MATMUL)), table(trace)
    js = {_COPY.get(n, n): v for n, v in js.items()}
    assert sorted(db) == sorted(js) and len(db) == 23
    for name, (count, kind, total) in db.items():
        assert js[name][:2] == (count, kind)
        assert abs(js[name][2] - total) <= 1000 * count  # the JSON kept whole µs


@pytest.mark.parametrize("name, says", [("report1.nsys-rep", "nsys export --type sqlite"),
                                        ("old.qdrep", "nsys export --type sqlite"),
                                        ("kernels.ncu-rep", "Nsight Compute report")])
def test_other_tools_reports_say_what_to_give_instead(tmp_path, name, says):
    """A report polyprof does not read (no reader takes it) is named for what it is, with
    what to give polyprof instead: not the list of every format."""
    path = tmp_path / name
    path.write_bytes(b"\x00\x01binary report\x00" * 8)
    with pytest.raises(TraceFormatError, match=says) as e:
        polyprof.load(path)
    assert name in str(e.value) and "unrecognised" not in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("hta") is None, reason="Holistic Trace Analysis is not installed")
def test_hta_window_equals_htas_kernel_types_on_the_kineto_export(vllm, tmp_path):
    """An RPD op's queue is its stream (``stream`` stat): ``--window hta`` then reads the
    database as HTA 0.5 reads polyprof's Kineto export of it, HTA run here."""
    from polyprof.analyze.kernel_states import kernel_state_breakdown
    from polyprof.analyze.window import HTA

    trace = polyprof.load(vllm)
    (tmp_path / "hta").mkdir()
    polyprof.export(trace, tmp_path / "hta" / "rank0.json", format="kineto")
    driver = ("import json, logging, sys, warnings\nwarnings.filterwarnings('ignore')\n"
              "logging.disable(logging.CRITICAL)\nfrom hta.trace_analysis import TraceAnalysis\n"
              "df = TraceAnalysis(trace_dir=sys.argv[1]).get_gpu_kernel_breakdown(visualize=False)[0]\n"
              "print(json.dumps([[r['kernel_type'], int(r['sum'])] for r in df.to_dict('records')]))\n")
    out = subprocess.run([sys.executable, "-c", driver, str(tmp_path / "hta")], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    want = {kind: us for kind, us in json.loads(out.strip().splitlines()[-1])}
    ours = kernel_state_breakdown(trace, window=HTA)
    got = {s: int(t) // 1000 for s, t in zip(column(ours, "state").tolist(), column(ours, "time_ns").tolist())}
    assert want == {"COMPUTATION": 398175, "MEMORY": 8334}
    assert got == {"compute only": want["COMPUTATION"], "memory only": want["MEMORY"]}


def test_an_empty_database_says_nothing_was_read(tmp_path):
    """rpd_tracer's schema with no rows (Ajcarroll155/amelia-benchmark's ``trace.rpd``: a
    run that recorded nothing): `summary` printed "0 events on 0 plane(s)", exit 0, no
    word; now a warning says nothing was read, as for the empty Nsight and Chrome files."""
    db = _edited(tmp_path, "empty.rpd", *((f"DELETE FROM {t}", ()) for t in (
        "rocpd_api_ops", "rocpd_kernelapi", "rocpd_copyapi", "rocpd_op", "rocpd_api")))
    t = polyprof.load(db)
    assert t.n_events == 0
    assert t.metadata["warnings"] == ["nothing polyprof reads: the RPD database has no calls or device "
                                      "operations (rocpd_api and rocpd_op: no rows)"]
    p = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(db)], capture_output=True, text=True)
    assert p.returncode == 0 and f"{db}: nothing polyprof reads" in p.stderr, p.stderr
    assert "warnings" not in polyprof.load(MATMUL).metadata  # a database with rows: no such warning


def test_an_rpd_copy_of_0_bytes_warns_of_nothing(tmp_path: Path, caplog) -> None:
    """rpd_tracer writes '' for a 1D copy's width and height (matmul_result.rpd): one
    copy of size 0 reads them, and no warning says launch stats are left out (none is)."""
    p = tmp_path / "z.rpd"
    shutil.copy(MATMUL, p)
    with sqlite3.connect(p) as c:
        c.execute("UPDATE rocpd_copyapi SET size = 0 WHERE api_ptr_id = 48")
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        polyprof.load(p)
    assert not [r for r in caplog.records if "left out" in r.getMessage()]


def test_an_rpd_2d_copy_whose_width_times_height_overflows_is_not_0_bytes(tmp_path: Path) -> None:
    """width x height past int64 would wrap (2**33 x 2**31 = 0, a sized copy of 0 bytes):
    the copy reads unsized."""
    from polyprof.analyze.copies import copies

    p = tmp_path / "wh.rpd"
    shutil.copy(MATMUL, p)
    with sqlite3.connect(p) as c:
        c.execute("UPDATE rocpd_copyapi SET size = 0, width = ?, height = ? WHERE rowid = "
                  "(SELECT min(rowid) FROM rocpd_copyapi)", (2**33, 2**31))
    t = copies(polyprof.load(p))
    htod = list(column(t, "kind")).index("HtoD")
    assert column(t, "unsized")[htod] == 1 or column(t, "total_bytes")[htod] >= 2**62


def test_a_2d_copy_as_rpd_tracer_writes_it_is_sized(tmp_path: Path, caplog) -> None:
    """rpd_tracer's CopyApiTable writes '' for a hipMemcpy2D's size (not > 0) and its
    width (bytes) and height (rows) as integers: the copy is width x height bytes, and
    nothing is said left out (before: unsized, and a warning of NULLs)."""
    from polyprof.analyze.copies import copies

    p = tmp_path / "c2d.rpd"
    shutil.copy(MATMUL, p)
    with sqlite3.connect(p) as c:
        api = c.execute("SELECT api_ptr_id FROM rocpd_copyapi WHERE kind = 2 AND size = 4 "
                        "ORDER BY api_ptr_id").fetchone()[0]
        c.execute("UPDATE rocpd_copyapi SET size = '', width = 64, height = 3 WHERE api_ptr_id = ?", (api,))
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        t = copies(polyprof.load(p))
    dtoh = list(column(t, "kind")).index("DtoH")
    assert (column(t, "count")[dtoh], column(t, "total_bytes")[dtoh], column(t, "unsized")[dtoh]) == (53, 484, 0)
    assert not [r for r in caplog.records if "left out" in r.getMessage()]


def test_a_database_without_its_link_table_says_what_that_costs(tmp_path, caplog):
    """Without ``rocpd_api_ops`` no op can be tied to its call (no correlation) and no
    copy has its bytes: before, the summary said only ``unmatched 85`` and the copies'
    2 GB were gone, with no warning."""
    db = _edited(tmp_path, "noapi.rpd")
    conn = sqlite3.connect(db)
    for (view,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        conn.execute(f"DROP VIEW {view}")  # (views over the table: SQLite keeps them dangling otherwise)
    conn.execute("DROP TABLE rocpd_api_ops")
    conn.commit()
    conn.close()
    n_ops = _sql(MATMUL, "SELECT count(*) FROM rocpd_op")[0][0]
    with caplog.at_level("WARNING", logger="polyprof"):
        t = polyprof.load(db)
    said = [w for w in t.metadata["warnings"] if w.startswith("no rocpd_api_ops table")]
    assert len(said) == 1 and f"the {n_ops} GPU ops cannot be tied to the calls" in said[0]
    assert "copies' bytes" in said[0] and "noapi.rpd: no rocpd_api_ops table" in caplog.text
    assert "warnings" not in polyprof.load(MATMUL).metadata  # the whole file: nothing to say
