"""The XSpace export of a trace of several processes keeps them apart (audV finding 2).

XProf reads one host plane, the first named ``/host:CPU``. The writer wrote one
``/host:CPU`` XPlane per process, so XProf showed only the first process's threads, and
polyprof's reader merged the planes of one name into one process: rank 1's kernels were
projected into rank 0's NVTX ranges (``MPI_Send`` 191 ms of device time against 0 in
the file). Now every process's threads are on the one ``/host:CPU`` XPlane, each other
process's plane an empty placeholder (``/host:CPU:<pid>``) that keeps its name, and the
trace's sources are written beside (``polyprof.sources``, each plane's layout naming its
own), which the reader restores.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

import polyprof
from polyprof.analyze.frames import column
from polyprof.analyze.sections import section_stats
from polyprof.derive import cache
from polyprof.errors import TraceFormatError
from polyprof.formats import xspace
from polyprof.formats.xspace import names as N
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.core import Trace
from polyprof.writers import xspace as xspace_writer
from test_export_source_ids import links, two_ranks


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_ranks(tmp_path_factory.mktemp("mpi") / "sx_2proc.sqlite")


def planes(t: Trace) -> list[tuple]:
    return sorted((p.name, p.kind, p.source, p.index) for p in t.planes)


def sources(t: Trace) -> list[tuple]:
    return [(s.rank, s.host, s.pid, s.label) for s in t.sources]


def events(t: Trace) -> list[tuple]:
    """Every event with its plane's name and source and its track's name."""
    ev, names = t.events, t.names()
    tp = t.track_plane[ev["track"]]
    return sorted(zip((t.planes[p].name for p in tp.tolist()), t.plane_source[tp].tolist(),
                      (t.tracks[k].name for k in ev["track"].tolist()), names.tolist(),
                      ev["start_ns"].tolist(), ev["dur_ns"].tolist()))


def test_an_mpi_report_reads_back_with_its_processes(report: Path, tmp_path: Path) -> None:
    t = polyprof.load(report)
    out = polyprof.export(t, tmp_path / "x.xplane.pb", format="xspace")
    space = xspace_writer.pb().XSpace()
    space.ParseFromString(out.read_bytes())
    host = [p for p in space.planes if p.name.startswith(keys.HOST_PLANE)]
    # one /host:CPU, holding both processes' threads; the other process's plane a placeholder
    assert sorted((p.name, len(p.lines)) for p in host) == [("/host:CPU", 2), ("/host:CPU:1230494", 0)]
    back = polyprof.load(out)
    assert planes(back) == planes(t)
    assert sources(back) == sources(t)
    assert events(back) == events(t)
    assert links(back) == links(t)
    ss = section_stats(back)
    device = dict(zip(column(ss, "name").tolist(), column(ss, "device_ns").tolist()))
    assert device["MPI_Send"] == 0  # (was 190,522,346: rank 1's kernels in rank 0's ranges)


def _shared_device() -> Trace:
    """Two processes on one host and one GPU: process 0 has a section, process 1 launches
    kernels outside any (so no section holds them: projection stays within a process)."""
    b = TraceBuilder()
    for k, pid in enumerate((100, 200)):
        s = b.source(host="box", pid=pid, label=f"pid {pid}", metadata={"rank_note": k})
        host = b.plane(keys.HOST_PLANE, "host", pid=pid, source=s, properties={"hostname": "box"})
        dev = b.plane(keys.device_plane("GPU", 0), "device", vendor="NVIDIA", index=0, source=s)
        th, st = b.track(host, "main", "thread", tid=pid), b.track(dev, "stream 7", "stream", tid=7)
        if k == 0:
            b.event(th, "step", 1_000_000, 100_000, keys.CAT_SECTION)
        for i in range(3):
            at = 1_000_000 + 1_000 + i * 20_000
            c = b.event(th, "cudaLaunchKernel", at, 500, "cuda_runtime", correlation_id=i + 1)
            d = b.event(st, f"kernel{k}", at + 700 + k * 5_000, 3_000, keys.CAT_KERNEL, correlation_id=i + 1)
            b.flow(c, d, i + 1, "ac2g")
    return b.build()


def test_two_processes_on_one_gpu_stay_two() -> None:
    t = _shared_device()
    space = xspace_writer.to_space(t)
    names = [p.name for p in space.planes]
    # XProf would take two planes of one name for one device: the second is GPU 1 in the file
    assert names.count("/device:GPU:0") == names.count("/device:GPU:1") == 1
    back = xspace.from_space(space)
    assert planes(back) == planes(t) and sources(back) == sources(t)
    assert [s.metadata for s in back.sources] == [s.metadata for s in t.sources]
    assert events(back) == events(t)
    for tr in (t, back):
        ss = section_stats(tr)
        assert column(ss, "device_ns").tolist() == [9_000]  # process 0's three kernels only
    # the ids are unique per source in the file (XProf joins calls and kernels by them)
    ids = back.stats[keys.CORRELATION_ID]
    es = back.event_sources()[ids.rows]
    assert not set(ids.values[es == 0].tolist()) & set(ids.values[es == 1].tolist())
    assert cache.correlation(back).counts == cache.correlation(t).counts


def test_a_trace_of_one_source_is_written_as_before() -> None:
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host", pid=7)
    b.event(b.track(host, "main", "thread", tid=7), "work", 1_000, 500)
    t = b.build()
    space = xspace_writer.to_space(t)
    stats = {m.name for p in space.planes for m in p.stat_metadata.values()}
    assert N.PLANE_STAT_SOURCES not in stats
    assert len(xspace.from_space(space).sources) == 1


def _edit_layout(space, name: str, **changes) -> None:
    plane = next(p for p in space.planes if p.name == name)
    sid = next(i for i, m in plane.stat_metadata.items() if m.name == N.PLANE_STAT_LAYOUT)
    st = next(s for s in plane.stats if s.metadata_id == sid)
    st.str_value = orjson.dumps({**orjson.loads(st.str_value), **changes}).decode()


def test_a_damaged_source_is_named(tmp_path: Path) -> None:
    space = xspace_writer.to_space(_shared_device())
    _edit_layout(space, "/device:GPU:1", source=5)
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(space.SerializeToString())
    with pytest.raises(TraceFormatError, match=r"bad\.xplane\.pb.*names source 5"):
        polyprof.load(path)
    space = xspace_writer.to_space(_shared_device())
    env = next(p for p in space.planes if p.name == N.TASK_ENV)
    sid = next(i for i, m in env.stat_metadata.items() if m.name == N.PLANE_STAT_SOURCES)
    next(s for s in env.stats if s.metadata_id == sid).str_value = '{"sources": 3}'
    path.write_bytes(space.SerializeToString())
    with pytest.raises(TraceFormatError, match=r"bad\.xplane\.pb.*polyprof\.sources"):
        polyprof.load(path)


_XPROF = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data, _ = r.xspace_to_tool_data([sys.argv[1]], "trace_viewer", {"use_saved_result": False})
ev = json.loads(data)["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
out = [[names.get(e["pid"]), e.get("tid"), e["name"], (e.get("args") or {}).get("correlation_id")]
       for e in ev if e.get("ph") == "X"]
ok = all(r.xspace_to_tool_data([sys.argv[1]], t, {"use_saved_result": False})[0] for t in ("overview_page",
                                                                                             "framework_op_stats"))
json.dump({"events": out, "tools": ok}, open(sys.argv[2], "w"))
"""


@pytest.mark.skipif(importlib.util.find_spec("xprof") is None, reason="xprof is not installed")
def test_xprof_shows_both_processes_and_joins_each_call_to_its_own_work(report: Path, tmp_path: Path) -> None:
    """XProf's trace viewer: both processes' threads (before: rank 0's alone, the second
    /host:CPU unread), and each correlation id on one host call and its own device work
    (before: rank 1's kernels shared rank 0's ids)."""
    t = polyprof.load(report)
    path = polyprof.export(t, tmp_path / "x.xplane.pb", format="xspace")
    out = tmp_path / "xprof.json"
    proc = subprocess.run([sys.executable, "-c", _XPROF, str(path), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["tools"]
    shown = [e for e in res["events"] if e[0] == keys.HOST_PLANE]
    on_host = np.array([p.kind == "host" for p in t.planes])[t.event_planes()]
    assert len(shown) == int(on_host.sum())
    assert {e[1] for e in shown} == {1230493, 1230494}
    calls: dict[str, int] = {}
    for e in shown:
        if e[3] is not None:
            calls[str(e[3])] = calls.get(str(e[3]), 0) + 1
    assert calls and max(calls.values()) == 1
    device = [e for e in res["events"] if str(e[0]).startswith("/device:") and e[3] is not None]
    assert len(device) == 40 and all(str(e[3]) in calls for e in device)
