"""The memory-copy table (analyze/copies.py) on every vendor's traces, checked against
the files themselves read by hand (sqlite3, protobuf, JSON) and against HTA 0.5's
``get_memory_bw_summary`` where both compute the same thing.

Data (tests/data, licences beside each): Nsight Systems SQLite of a saxpy run (pipit),
an RPD of a matmul (rocmProfileData), XLA's XSpace of a JAX transformer on an H200,
Kineto traces of AlexNet on an A100 (HTA's test data), a rocpd database made by
tests/test_rocprof.py's builder."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.copies import SMALL_BYTES, copies, copy_kind
from polyprof.formats import xplane_pb2

DATA = Path(__file__).parent / "data"
NSYS = DATA / "nsys" / "saxpy_2022.sqlite"
RPD = DATA / "rpd" / "matmul_result.rpd"
XSPACE = DATA / "h200" / "jax_transformer_h200.xplane.pb.gz"
ALEXNET = DATA / "peers" / "hta_critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"


def rows(t) -> dict[tuple[str, str], dict]:
    """The table's rows by (device, kind)."""
    return {(d, k): {c: t[c][i] for c in t.columns} for i, (d, k) in enumerate(zip(t["device"], t["kind"]))}


@pytest.mark.parametrize("name, kind", [
    ("Memcpy HtoD (Pinned -> Device)", "HtoD"), ("Memcpy DtoH (Device -> Pageable)", "DtoH"), ("MemcpyH2D", "HtoD"),
    ("MemcpyD2H", "DtoH"), ("MemcpyD2D", "DtoD"), ("MemcpyP2P", "PtoP"), ("Memcpy PtoP (Device -> Device)", "PtoP"),
    ("Memcpy DtoD", "DtoD"), ("HtoA", "HtoD"), ("AtoH", "DtoH"), ("Unified HtoD", "Unified HtoD"),
    ("[CUDA memcpy Host-to-Device]", "HtoD"), ("MEMORY_COPY_DEVICE_TO_HOST", "DtoH"), ("Memset (Device)", "memset"),
    ("Memset 0", "memset"), ("copy-start", "unknown"), ("Memcpy", "unknown")])
def test_copy_kind_from_names(name, kind):
    assert copy_kind(name) == kind


def test_nsys_sqlite_equals_the_files_memcpy_table():
    t = rows(copies(polyprof.load(NSYS)))
    with sqlite3.connect(NSYS) as db:
        want = db.execute("SELECT copyKind, srcKind, count(*), sum(bytes), sum(end - start), min(bytes) "
                          "FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind ORDER BY copyKind").fetchall()
    # copyKind 1 HtoD, 2 DtoH; srcKind 0 / dstKind 0: pageable host memory (ENUM_CUDA_MEM_KIND)
    assert want == [(1, 0, 10, 2621440000, 186001123, 262144000), (2, 2, 5, 1310720000, 98698477, 262144000)]
    for (_, _, n, nbytes, ns, _), label in zip(want, ("HtoD", "DtoH")):
        r = t[("/device:GPU:0", label)]
        assert (r["count"], r["total_bytes"], r["total_ns"], r["sized_ns"]) == (n, nbytes, ns, ns)
        assert r["bandwidth_gbps"] == pytest.approx(nbytes / ns)
        assert (r["pageable"], r["small"], r["unsized"]) == (n, 0, 0)
    assert t[("/device:GPU:0", "HtoD")]["median_gbps"] == pytest.approx(14.174585, rel=1e-6)
    assert len(t) == 2


def test_rpd_equals_the_files_ops_and_copyapi():
    t = rows(copies(polyprof.load(RPD)))
    with sqlite3.connect(RPD) as db:
        want = dict((s, r) for s, *r in db.execute(
            "SELECT s.string, count(*), sum(o.end - o.start), sum(ca.size), count(ca.size) FROM rocpd_op o "
            "JOIN rocpd_string s ON s.id = o.opType_id LEFT JOIN rocpd_api_ops ao ON ao.op_id = o.id "
            "LEFT JOIN rocpd_copyapi ca ON ca.api_ptr_id = ao.api_id WHERE s.string != 'KernelExecution' "
            "GROUP BY s.string"))
    assert want == {"CopyDeviceToHost": [53, 334758, 296, 53], "CopyHostToDevice": [2, 157178063, 2032000000, 2],
                    "FillBuffer": [1, 5440, None, 0]}
    for op, kind in (("CopyDeviceToHost", "DtoH"), ("CopyHostToDevice", "HtoD")):
        n, ns, nbytes, _ = want[op]
        r = t[("/device:GPU:2", kind)]
        assert (r["count"], r["total_ns"], r["total_bytes"], r["unsized"]) == (n, ns, nbytes, 0)
    fill = t[("/device:GPU:2", "memset")]
    assert (fill["count"], fill["total_ns"], fill["unsized"], fill["sized_ns"]) == (1, 5440, 1, 0)
    assert np.isnan(fill["bandwidth_gbps"]) and np.isnan(fill["median_gbps"])
    assert t[("/device:GPU:2", "DtoH")]["small"] == 53  # 296 bytes in 53 copies


def _xspace_details(path: Path) -> dict[tuple[str, str], list[int]]:
    """(plane, event name) -> [count, bytes, duration ps] of the device events with a copy
    or fill detail stat, read with protobuf alone."""
    xs = xplane_pb2.XSpace()
    xs.ParseFromString(gzip.open(path).read())
    out: dict[tuple[str, str], list[int]] = {}
    for p in (p for p in xs.planes if p.name.startswith("/device:")):
        names = {k: v.name for k, v in p.stat_metadata.items()}
        for line in p.lines:
            for e in line.events:
                meta = p.event_metadata[e.metadata_id]
                for s in [*e.stats, *meta.stats]:
                    if names[s.metadata_id].lower() not in ("memcpy_details", "memset_details"):
                        continue
                    text = s.str_value or names[s.ref_value]
                    tok = dict(x.split(":", 1) for x in text.split() if ":" in x)
                    o = out.setdefault((p.name, meta.name), [0, 0, 0])
                    o[0] += 1
                    o[1] += int(tok.get("num_bytes", tok.get("size", 0)))
                    o[2] += e.duration_ps
    return out


def test_xspace_copy_sizes_from_their_detail_stats():
    want = _xspace_details(XSPACE)
    assert want == {("/device:GPU:0", "Memset 0"): [3600, 14400, 3197638000],
                    ("/device:GPU:0", "MemcpyD2H"): [200, 800, 321278000]}
    trace = polyprof.load(XSPACE)
    t = rows(copies(trace))
    for (plane, name), (n, nbytes, ps) in want.items():
        r = t[(plane, copy_kind(name))]
        assert (r["count"], r["total_bytes"], r["total_ns"], r["unsized"]) == (n, nbytes, ps // 1000, 0)
        assert r["small"] == n and r["pageable"] == 0
    # the memory kinds of the copies (kind_src:device kind_dst:pinned)
    gpu = [i for i, p in enumerate(trace.planes) if p.name == "/device:GPU:0"]
    d2h = np.flatnonzero((trace.names() == "MemcpyD2H") & np.isin(trace.track_plane[trace.events["track"]], gpu))
    assert len(d2h) == 200
    assert set(trace.stats["dst kind"].lookup(d2h)[1].tolist()) == {"Pinned"}
    assert set(trace.stats["src kind"].lookup(d2h)[1].tolist()) == {"Device"}


def _kineto_copies(path: Path) -> dict[str, list]:
    """Per HTA's name (the first 11 characters): [count, bytes, bandwidths], from the JSON."""
    out: dict[str, list] = {}
    for e in json.load(gzip.open(path))["traceEvents"]:
        if e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            o = out.setdefault("Memset" if e["name"].startswith("Memset") else e["name"][:11], [0, 0, []])
            o[0] += 1
            o[1] += e["args"]["bytes"]
            o[2].append(e["args"]["memory bandwidth (GB/s)"])
    return out


#: HTA 0.5's get_memory_bw_summary of ALEXNET (rank 0): count, min, 50%, max
HTA_ALEXNET = {"Memcpy HtoD": (16, 0.142777, 4.393736, 11.146690), "Memset": (3, 0.225352, 0.225352, 4.729927)}


def test_kineto_equals_the_file_and_htas_summary():
    """Where copies of a kind never overlap, HTA's series of concurrent bandwidth holds
    each copy's bandwidth once: its count, min, median and max are the table's."""
    want = _kineto_copies(ALEXNET)
    t = rows(copies(polyprof.load(ALEXNET)))
    for name, kind in (("Memcpy HtoD", "HtoD"), ("Memset", "memset")):
        n, nbytes, bws = want[name]
        r = t[("/device:GPU:0", kind)]
        assert (r["count"], r["total_bytes"]) == (n, nbytes)
        assert (r["min_gbps"], r["median_gbps"], r["max_gbps"]) == pytest.approx(
            (min(bws), float(np.median(bws)), max(bws)))
        assert (r["count"], r["min_gbps"], r["median_gbps"], r["max_gbps"]) == pytest.approx(HTA_ALEXNET[name],
                                                                                             abs=1e-6)
    assert t[("/device:GPU:0", "HtoD")]["small"] == sum(1 for b in _sizes(ALEXNET, "Memcpy HtoD") if b < SMALL_BYTES)
    assert t[("/device:GPU:0", "HtoD")]["pageable"] == 16  # Memcpy HtoD (Pageable -> Device)


def _sizes(path: Path, prefix: str) -> list[int]:
    return [e["args"]["bytes"] for e in json.load(gzip.open(path))["traceEvents"]
            if e.get("cat") == "gpu_memcpy" and e["name"].startswith(prefix)]


_HTA = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
s = TraceAnalysis(trace_dir=sys.argv[1]).get_memory_bw_summary()["memory_bw_gbps"]
print(json.dumps({n: [s.loc[(0, n), c] for c in ("count", "min", "50%", "max")] for _, n in s.index}))
"""


@pytest.mark.skipif(importlib.util.find_spec("hta") is None, reason="HTA is not installed")
def test_htas_own_numbers(tmp_path):
    shutil.copy(ALEXNET, tmp_path)
    got = json.loads(subprocess.run([sys.executable, "-c", _HTA, str(tmp_path)], capture_output=True, text=True,
                                    check=True, timeout=300).stdout)
    assert set(got) == set(HTA_ALEXNET)
    for name, want in HTA_ALEXNET.items():
        assert tuple(got[name]) == pytest.approx(want, abs=1e-6)


def test_rocpd_copy(tmp_path):
    from test_rocprof import build_rocpd  # the rocpd database the reader's tests make

    db = build_rocpd(tmp_path / "run.db", 4)
    with sqlite3.connect(db) as c:
        table = next(n for (n,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                     if n.startswith("rocpd_memory_copy"))
        want = c.execute(f'SELECT count(*), sum(size), sum("end" - start) FROM {table}').fetchone()
    assert want == (1, 1048576, 30000)
    t = copies(polyprof.load(db))
    assert len(t) == 1 and t["kind"][0] == "HtoD"
    assert (t["count"][0], t["total_bytes"][0], t["total_ns"][0], t["small"][0]) == (1, 1048576, 30000, 0)
    assert t["bandwidth_gbps"][0] == pytest.approx(1048576 / 30000)


def test_window_counts_the_copies_the_other_tables_count():
    """Under a window, the copies launched in its steps: as many as the kernel breakdown's
    memcpy and memset rows count (v100_ns_resolution_rank0: 5 steps, 101-105)."""
    from polyprof.analyze.breakdown import kernel_breakdown  # the table to agree with
    from polyprof.analyze.window import Window, view  # the window under test

    trace = polyprof.load(DATA / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz")
    for w, want in ((None, [1600, 145]), (Window(skip_first=1), [1280, 116]), (Window(102, 104), [640, 58])):
        t = copies(trace, w)
        assert t["kind"].tolist() == ["DtoD", "memset"] and t["count"].tolist() == want
        kb = kernel_breakdown(view(trace, w))
        assert [int(kb["count"][kb["kind"] == k].sum()) for k in ("memcpy", "memset")] == want


def test_summary_text_json_and_html_show_the_table(tmp_path):
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(NSYS)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("Memory copies and fills", 1)[1].splitlines()
    assert any("HtoD" in ln and "2.4 GiB" in ln and "14.1" in ln for ln in text[:8])
    assert max(len(ln) for ln in text[:8]) <= 80
    js = subprocess.run([sys.executable, "-m", "polyprof", "summary", "--json", str(NSYS)], capture_output=True,
                        text=True, timeout=300, check=True).stdout
    rec = json.loads(js)["tables"]["copies"]["records"]
    assert {(r["kind"], r["count"], r["total_bytes"]) for r in rec} == {("HtoD", 10, 2621440000),
                                                                         ("DtoH", 5, 1310720000)}
    html = tmp_path / "r.html"
    subprocess.run([sys.executable, "-m", "polyprof", "report", str(NSYS), "-o", str(html)], check=True,
                   capture_output=True, timeout=300)
    data = html.read_text()
    assert 'id="copies-table"' in data and "2621440000" in data


def test_no_copies_no_table():
    t = copies(polyprof.load(DATA / "jax_cpu" / "jax_cpu_steps.xplane.pb"))
    assert len(t) == 0 and t.columns[:3] == ["device", "kind", "count"]


def _copy_record(op: int, src: int, dst: int, nbytes: int, start: int, dur: int, corr: int) -> dict:
    """A rocprofiler-sdk ``memory_copy`` buffer record (kind 10: MEMORY_COPY; op 2 HtoD, 4 DtoD)."""
    return {"size": 64, "kind": 10, "operation": op, "thread_id": 908, "correlation_id": {"internal": corr,
            "external": 0}, "start_timestamp": start, "end_timestamp": start + dur, "dst_agent_id": {"handle": dst},
            "src_agent_id": {"handle": src}, "bytes": nbytes, "stream_id": {"handle": 0}}


def test_rocprofv3_json_copies_and_a_peer_copy(tmp_path):
    """TraceLens' rocprofv3 JSON (MI355, no copies recorded) with three copies added: one
    host-to-GPU 0, one GPU 0 to GPU 1 (a peer copy: DEVICE_TO_DEVICE between two agents),
    one within GPU 0."""
    d = json.load(gzip.open(DATA / "rocprof" / "tracelens_908_results.json.gz"))
    tool = d["rocprofiler-sdk-tool"][0]
    assert tool["buffer_records"]["memory_copy"] == []
    cpu, gpu0, gpu1 = 37944, 37946, 37947
    t0 = tool["buffer_records"]["kernel_dispatch"][0]["start_timestamp"]
    tool["buffer_records"]["memory_copy"] = [
        _copy_record(2, cpu, gpu0, 1 << 20, t0 - 100_000, 40_000, 9001),
        _copy_record(4, gpu0, gpu1, 4 << 20, t0 - 50_000, 20_000, 9002),
        _copy_record(4, gpu0, gpu0, 512, t0 - 20_000, 1_000, 9003)]
    path = tmp_path / "copies_results.json"
    path.write_text(json.dumps(d))
    t = rows(copies(polyprof.load(path)))
    assert set(t) == {("/device:GPU:0", "HtoD"), ("/device:GPU:1", "PtoP"), ("/device:GPU:0", "DtoD")}
    h, p, dd = t[("/device:GPU:0", "HtoD")], t[("/device:GPU:1", "PtoP")], t[("/device:GPU:0", "DtoD")]
    assert (h["count"], h["total_bytes"], h["total_ns"], h["small"]) == (1, 1 << 20, 40_000, 0)
    assert h["bandwidth_gbps"] == pytest.approx((1 << 20) / 40_000)
    assert (p["total_bytes"], p["total_ns"], p["max_gbps"]) == (4 << 20, 20_000, pytest.approx((4 << 20) / 20_000))
    assert (dd["total_bytes"], dd["total_ns"], dd["small"]) == (512, 1_000, 1)


def test_rpd_copies_launched_by_graphs_have_no_size(tmp_path):
    """vLLM's RPD (mytrace.rpd.gz): 640 of its 804 device-to-device copies were launched by
    hipGraphLaunch, whose copies RPD's rocpd_copyapi does not hold: unsized, not zero."""
    path = tmp_path / "mytrace.rpd"
    path.write_bytes(gzip.open(DATA / "rpd" / "mytrace.rpd.gz").read())
    with sqlite3.connect(path) as db:
        want = {s: r for s, *r in db.execute(
            "SELECT s.string, count(*), sum(o.end - o.start), sum(ca.size), count(ca.size) FROM rocpd_op o "
            "JOIN rocpd_string s ON s.id = o.opType_id LEFT JOIN rocpd_api_ops ao ON ao.op_id = o.id "
            "LEFT JOIN rocpd_copyapi ca ON ca.api_ptr_id = ao.api_id WHERE s.string LIKE 'Copy%' GROUP BY s.string")}
    assert want == {"CopyDeviceToDevice": [804, 6169262, 4295133376, 164], "CopyDeviceToHost": [22, 747692, 672, 22],
                    "CopyHostToDevice": [350, 2570452, 563008, 350]}
    t = rows(copies(polyprof.load(path)))
    for op, kind in (("CopyDeviceToDevice", "DtoD"), ("CopyDeviceToHost", "DtoH"), ("CopyHostToDevice", "HtoD")):
        n, ns, nbytes, sized = want[op]
        r = t[("/device:GPU:2", kind)]
        assert (r["count"], r["total_ns"], r["total_bytes"], r["unsized"]) == (n, ns, nbytes, n - sized)


def test_copies_of_no_size_show_as_unknown_not_0_b(tmp_path):
    """The RPD's ``hipMemsetAsync`` fill has no ``rocpd_copyapi`` row: its size is unknown
    (``unsized`` 1, ``total_bytes`` 0 in the table). Before, the terminal and the HTML
    report showed ``0 B``; now ``?`` (and ``≥`` before the bytes where only some are
    unknown)."""
    from polyprof.report.terminal import _copy_bytes

    t = copies(polyprof.load(RPD))
    r = rows(t)
    assert r[("/device:GPU:2", "memset")]["unsized"] == 1 and r[("/device:GPU:2", "memset")]["total_bytes"] == 0
    shown = dict(zip(t["kind"], _copy_bytes(t)))
    assert shown["memset"] == "?" and shown["HtoD"] == "1.9 GiB"
    part = t.with_columns(unsized=np.where(t["kind"] == "HtoD", 1, t["unsized"]))
    assert dict(zip(part["kind"], _copy_bytes(part)))["HtoD"] == "≥1.9 GiB"
    out = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(RPD)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("Memory copies and fills", 1)[1].splitlines()[:8]
    assert any("memset" in ln and "│       ? │" in ln for ln in text) and not any("0 B" in ln for ln in text), text
    from analysis.browser import chromium

    if chromium() is None:
        return
    import cdp  # only where Chromium is installed

    html = tmp_path / "r.html"
    subprocess.run([sys.executable, "-m", "polyprof", "report", str(RPD), "-o", str(html)], check=True,
                   capture_output=True, timeout=300)
    with cdp.report_page(html) as page:
        cells = page.eval("Array.from(document.querySelectorAll('#copies-table tr')).map(r => r.innerText)")
    memset = [c for c in cells if "memset" in c]
    assert len(memset) == 1 and "\t?\t" in memset[0] and "0 B" not in memset[0], cells
