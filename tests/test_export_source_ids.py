"""An export of a trace of several sources keeps each source's launches linked to its own
device work (audV finding 1; formats/export_ids.py).

An MPI Nsight Systems report holds one process per rank, and each process's CUPTI
numbers its API calls from 1: both ranks have a ``cudaLaunchKernel`` of correlation id
140. polyprof matches ids within a source; an exported file is one source to every
reader, so the Kineto, Chrome, Perfetto and XSpace writers make the ids unique per
source. Before, every export read back with rank 1's kernels and copies attached to rank
0's calls of the same id (20 of 40 launch calls without device activity, GPU 1's launch
delay 3 ms instead of 32 µs), in polyprof as in HTA.

The two-rank report is built here from the real ``saxpy_2022.sqlite`` as the auditor
built it (``make_sx_2proc.sh``): its process copied as pid + 1 on GPU 1, 3 ms later, with
the same correlation ids.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.ops import launch_summary
from polyprof.analyze.sections import section_stats
from polyprof.derive import cache
from polyprof.formats.export_ids import SourceIds
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.categories import Kind
from polyprof.trace.merge import merge

REAL = Path(__file__).resolve().parent / "data" / "nsys" / "saxpy_2022.sqlite"
FORMATS = {"kineto": ".json", "chrome": ".json", "perfetto": ".pftrace", "xspace": ".xplane.pb"}


def two_ranks(path: Path) -> Path:
    """saxpy_2022's process copied as a second rank: pid + 1, GPU 1, 3 ms later, the same
    CUPTI correlation ids (each process's CUPTI numbers its own)."""
    shutil.copy(REAL, path)
    d = 1 << 24
    con = sqlite3.connect(path)
    con.executescript(f"""
        insert into PROCESSES select globalPid+{d}, pid+1, name from PROCESSES;
        insert into ThreadNames select nameId, priority, globalTid+{d}+1 from ThreadNames
            where globalTid=302119224788637;
        create temp table k as select * from CUPTI_ACTIVITY_KIND_KERNEL;
        update k set start=start+3000000, end=end+3000000, deviceId=deviceId+1, globalPid=globalPid+{d};
        insert into CUPTI_ACTIVITY_KIND_KERNEL select * from k;
        create temp table m as select * from CUPTI_ACTIVITY_KIND_MEMCPY;
        update m set start=start+3000000, end=end+3000000, deviceId=deviceId+1, globalPid=globalPid+{d};
        insert into CUPTI_ACTIVITY_KIND_MEMCPY select * from m;
        create temp table r as select * from CUPTI_ACTIVITY_KIND_RUNTIME;
        update r set start=start+3000000, end=end+3000000, globalTid=globalTid+{d}+1;
        insert into CUPTI_ACTIVITY_KIND_RUNTIME select * from r;
        create temp table n as select * from NVTX_EVENTS where eventType=59;
        update n set start=start+3000000, end=end+3000000, globalTid=globalTid+{d}+1;
        insert into NVTX_EVENTS select * from n;
    """)
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_ranks(tmp_path_factory.mktemp("mpi") / "sx_2proc.sqlite")


def links(trace: polyprof.Trace) -> dict:
    """What the launch-kernel links give: the correlation counts, per (GPU, launch call)
    the activities and the launch delay, and the sections' device time."""
    ls = launch_summary(trace)
    ss = section_stats(trace)
    return {
        "correlation": dict(cache.correlation(trace).counts),
        "launches": sorted(zip(column(ls, "plane").tolist(), column(ls, "launch_name").tolist(),
                               column(ls, "count").tolist(), column(ls, "delay_median_ns").tolist(),
                               column(ls, "delay_p99_ns").tolist())),
        "sections": sorted(zip(column(ss, "name").tolist(), column(ss, "count").tolist(),
                               column(ss, "device_ns").tolist())),
    }


def test_the_report_has_two_ranks_with_the_same_ids(report: Path) -> None:
    t = polyprof.load(report)
    assert len(t.sources) == 2
    got = links(t)
    assert got["correlation"]["launch_calls"] == 40
    assert got["correlation"]["launch_calls_without_device_activity"] == 0
    ids = t.stats[keys.CORRELATION_ID]
    es = t.event_sources()[ids.rows]
    assert set(ids.values[es == 0].tolist()) & set(ids.values[es == 1].tolist())  # they collide


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_export_reads_back_with_the_same_links(report: Path, tmp_path: Path, fmt: str) -> None:
    t = polyprof.load(report)
    out = polyprof.export(t, tmp_path / f"x.{fmt}{FORMATS[fmt]}", format=fmt)
    back = polyprof.load(out)
    want, got = links(t), links(back)
    assert got["correlation"] == want["correlation"]
    assert got["launches"] == want["launches"]  # GPU:1's median delay 32.5 µs, not 3.03 ms
    assert got["sections"] == want["sections"]  # MPI_Send: no device time, as in the file


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_merged_torch_ranks_export_with_their_links(fmt: str, tmp_path: Path) -> None:
    """Two real Kineto ranks merged (two sources, each with its own correlation and
    external ids from 1): before, 5 launch calls read back without device activity."""
    kineto = REAL.parents[1] / "traces" / "kineto"
    t = merge([polyprof.load(kineto / f"sampled_rank{r}.json.gz") for r in (0, 1)])
    assert len(t.sources) == 2
    back = polyprof.load(polyprof.export(t, tmp_path / f"x{FORMATS[fmt]}", format=fmt))
    want, got = links(t), links(back)
    assert got["correlation"] == want["correlation"]
    assert want["correlation"]["device_activities_with_framework_op"] > 2000  # (external ids: op of a launch)
    assert got["launches"] == want["launches"]


@pytest.mark.parametrize("fmt", ["kineto", "chrome"])
def test_each_id_in_the_json_is_one_call_and_its_own_work(report: Path, tmp_path: Path, fmt: str) -> None:
    t = polyprof.load(report)
    doc = json.loads(polyprof.export(t, tmp_path / "x.json", format=fmt).read_text())
    name = "correlation" if fmt == "kineto" else keys.CORRELATION_ID
    runtime = set(t.categories()[t.rows_of_kind(Kind.RUNTIME)].tolist())
    calls: dict[int, int] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in runtime and name in (e.get("args") or {}):
            calls[e["args"][name]] = calls.get(e["args"][name], 0) + 1
    with_id = np.isin(t.stats[keys.CORRELATION_ID].rows, t.rows_of_kind(Kind.RUNTIME))
    assert sum(calls.values()) == int(with_id.sum()) > 0  # every call of both ranks
    assert max(calls.values()) == 1  # before: rank 0's and rank 1's call 140 shared it
    ends: dict[tuple, int] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            ends[(e["cat"], e["id"], e["ph"])] = ends.get((e["cat"], e["id"], e["ph"]), 0) + 1
    assert max(ends.values()) == 1  # one start and one end per flow id (readers chain an id's ends)


def test_a_trace_of_one_source_keeps_its_ids(tmp_path: Path) -> None:
    t = polyprof.load(REAL)
    assert len(t.sources) == 1
    ids = SourceIds(t)
    assert not ids.columns and ids.flow_ids is t.flows["id"]
    doc = json.loads(polyprof.export(t, tmp_path / "x.json", format="chrome").read_text())
    written = sorted(e["args"][keys.CORRELATION_ID] for e in doc["traceEvents"]
                     if keys.CORRELATION_ID in (e.get("args") or {}))
    assert written == sorted(t.stats[keys.CORRELATION_ID].values.tolist())


def _two_sources(first_id: int) -> polyprof.Trace:
    """Two processes on GPU 0 whose launches have the same ids (from ``first_id``), plus
    a device activity of id 0 (CUPTI's: no API call made it)."""
    b = TraceBuilder()
    for k, pid in enumerate((100, 200)):
        s = b.source(host="box", pid=pid, label=f"pid {pid}")
        host = b.plane(keys.HOST_PLANE, "host", pid=pid, source=s)
        dev = b.plane(keys.device_plane("GPU", 0), "device", vendor="NVIDIA", index=0, source=s)
        th, st = b.track(host, "main", "thread", tid=pid), b.track(dev, "stream 7", "stream", tid=7)
        for i in range(3):
            at = 1_000_000 + i * 20_000
            c = b.event(th, "cudaLaunchKernel", at, 500, "cuda_runtime", correlation_id=first_id + i)
            d = b.event(st, f"k{k}", at + 700 + k * 5000, 3000, keys.CAT_KERNEL, correlation_id=first_id + i)
            b.flow(c, d, first_id + i, "ac2g")
        b.event(st, "migration", 1_090_000, 100, keys.CAT_MEMCPY, correlation_id=0)
    return b.build()


@pytest.mark.parametrize("first_id", [1, 2 ** 53 - 10])
def test_ids_are_offset_or_numbered_and_zero_stays_zero(first_id: int, tmp_path: Path) -> None:
    t = _two_sources(first_id)
    ids = SourceIds(t)
    got = ids.columns[keys.CORRELATION_ID]
    es = t.event_sources()[t.stats[keys.CORRELATION_ID].rows]
    pos = got > 0
    assert len(set(zip(es[pos].tolist(), got[pos].tolist()))) == len(set(got[pos].tolist())) == 6  # one per pair
    assert (got[t.stats[keys.CORRELATION_ID].values == 0] == 0).all()
    assert got.max() <= 2 ** 53 - 1
    if first_id == 1:  # source 1's ids read as "1" and its own: 1 -> 11
        assert sorted(set(got[es == 1].tolist())) == [0, 11, 12, 13]
    flow_src = t.event_sources()[t.flows["src"]]
    assert len(set(ids.flow_ids.tolist())) == 6 and set(zip(flow_src.tolist(), ids.flow_ids.tolist())) <= \
        set(zip(es.tolist(), got.tolist()))  # a flow keeps its launch's id
    for fmt in FORMATS:
        back = polyprof.load(polyprof.export(t, tmp_path / f"{first_id}.{fmt}{FORMATS[fmt]}", format=fmt))
        assert links(back)["correlation"] == links(t)["correlation"], fmt
        assert links(back)["launches"] == links(t)["launches"], fmt


_HTA = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[2])
df = next(iter(ta.get_cuda_kernel_launch_stats(visualize=False).values()))
json.dump(sorted(df["launch_delay"].tolist()), open(sys.argv[1], "w"))
"""


@pytest.mark.skipif(find_spec("hta") is None, reason="Holistic Trace Analysis is not installed")
def test_hta_links_each_kernel_to_its_own_launch(report: Path, tmp_path: Path) -> None:
    """HTA's kernel launch stats (launch call and kernel joined by correlation id) on the
    Kineto export: one row per kernel, each with its own delay. Before, 20 rows for the
    10 kernels, half of them 3 ms late (rank 0's call of the same id)."""
    t = polyprof.load(report)
    stage = tmp_path / "hta"
    stage.mkdir()
    polyprof.export(t, stage / "rank0.json.gz", format="kineto")
    out = tmp_path / "delays.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _HTA, str(out), str(stage)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    delays = json.loads(out.read_text())
    # the truth, from the file: each kernel's start after its own call's end, in µs
    corr = cache.correlation(t)
    dev = corr.device_rows
    kernel = t.kinds[dev] == Kind.KERNEL
    launch = corr.launch[kernel]
    ends = t.events["start_ns"][launch] + t.events["dur_ns"][launch]
    want = sorted(np.maximum((t.events["start_ns"][dev[kernel]] - ends) / 1000, 0).tolist())  # (HTA: >= 0)
    assert len(delays) == len(want) == 10
    assert np.allclose(delays, want, atol=2.0), (delays, want)
