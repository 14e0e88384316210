"""The critical path's tracks never hold two slices that overlap without nesting
(``analyze/critical_path_track.path_lanes``): Perfetto's JSON importer drops such a
slice, and the protobuf writer moved it to a "critical path (overlap 1)" track apart from
its step. A job whose ranks are out of step (tests/data/traces/gloo_ddp_compute, slow:
rank 1 computes more) had step k's path end on rank 0 after step k+1's began on rank 1:
25 partial overlaps on the one track, 19 slices moved in the protobuf, and the track's
process was named "rank 0" like the real rank 0. A one-rank GPU trace whose steps' device
work runs into the next step (v100_ns_resolution_rank0) had 2098."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.critical_path_track import TRACK, path_lanes, with_critical_path
from polyprof.cli import main
from polyprof.ranks.critical_path import align, job_critical_path
from polyprof.ranks.traceset import load_ranks

DATA = Path(__file__).parent / "data" / "traces"


def _partial_overlaps(spans: list[tuple[int, int]]) -> int:
    """How many spans cross one open before them (start inside it, end after it)."""
    ends: list[int] = []
    bad = 0
    for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
        while ends and ends[-1] <= s:
            ends.pop()
        if ends and e > ends[-1]:
            bad += 1
        ends.append(e)
    return bad


def test_lanes_keep_each_step_together_and_overlapping_steps_apart():
    # step 0: 0-10, 10-30; step 1 starts at 25 (before step 0 ends); step 2 at 30;
    # step 3 at 100, after all; step 4: a slice 205-215 overlapping its own 200-210
    step = np.array([0, 0, 1, 1, 2, 3, 4, 4])
    start = np.array([0, 10, 25, 40, 30, 100, 200, 205])
    end = np.array([10, 30, 40, 60, 45, 110, 210, 215])
    lane = path_lanes(step, start, end)
    assert lane[:6].tolist() == [0, 0, 1, 1, 0, 0]
    assert lane[6] != lane[7]
    for k in np.unique(lane):
        m = lane == k
        assert _partial_overlaps(list(zip(start[m].tolist(), end[m].tolist()))) == 0
        spans = sorted(zip(start[m].tolist(), end[m].tolist()))
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # not even nested


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("slow_job")
    for f in (DATA / "gloo_ddp_compute").glob("slow.rank*.pt.trace.json.xz"):
        shutil.copy(f, d / f.name)
    return d


def _chrome(path: Path) -> list[dict]:
    doc = json.load(gzip.open(path, "rt") if path.suffix == ".gz" else path.open())
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def test_job_export_chrome_no_partial_overlap_and_a_process_of_its_own(job, tmp_path):
    out = tmp_path / "cp.json.gz"
    assert main(["export", str(job), "--critical-path", "-f", "chrome", "-o", str(out)]) == 0
    evs = _chrome(out)
    process = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name"}
    assert sorted(process.values()) == ["critical path", "rank 0", "rank 1"]
    (cp_pid,) = [p for p, n in process.items() if n == "critical path"]
    threads = {e["tid"]: e["args"]["name"] for e in evs if e.get("name") == "thread_name" and e["pid"] == cp_pid}
    assert sorted(threads.values()) == [TRACK, f"{TRACK} (2)"]  # the steps out of step take turns
    spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    lanes_of_step: dict[int, set[int]] = defaultdict(set)
    total = 0
    for e in evs:
        if e.get("ph") != "X":
            continue
        s = round(e["ts"] * 1000)
        spans[(e["pid"], e["tid"])].append((s, s + round(e["dur"] * 1000)))
        if e["pid"] == cp_pid:
            lanes_of_step[e["args"]["step"]].add(e["tid"])
            total += round(e["dur"] * 1000)
    for key in ((cp_pid, t) for t in threads):
        assert _partial_overlaps(spans[key]) == 0, key
    assert all(len(v) == 1 for v in lanes_of_step.values())  # a step's path on one track
    assert len(lanes_of_step) == 19  # the steps the summary analyses: the first (warm-up) left out
    # every step's whole path is there: the slices sum to the steps' path lengths
    from polyprof.analyze.window import AUTO, view

    traces = {r: view(t, AUTO) for r, t in load_ranks(job).traces()}  # (as the export windows them)
    cp = job_critical_path(traces, clocks=align(traces))  # (as the export aligns them)
    step = np.asarray(cp["step"])
    paths = int(np.asarray(cp["path_ns"])[np.unique(step, return_index=True)[1]].sum())
    n_slices = sum(len(spans[(cp_pid, t)]) for t in threads)
    assert abs(total - paths) <= n_slices, (total, paths)


def test_job_export_perfetto_keeps_each_step_on_its_own_tracks(job, tmp_path):
    P = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    out = tmp_path / "cp.pftrace"
    assert main(["export", str(job), "--critical-path", "-f", "perfetto", "-o", str(out)]) == 0
    chrome = tmp_path / "cp.json"
    assert main(["export", str(job), "--critical-path", "-f", "chrome", "-o", str(chrome)]) == 0
    want = sum(round(e["dur"] * 1000) for e in _chrome(chrome) if e.get("ph") == "X" and e["pid"] >= 1_000_000)
    name, parent, process = {}, {}, {}
    opened: dict[int, list[int]] = defaultdict(list)
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pkt in P.Trace.FromString(out.read_bytes()).packet:
        if pkt.HasField("track_descriptor"):
            td = pkt.track_descriptor
            parent[td.uuid] = td.parent_uuid
            if td.HasField("process"):
                process[td.uuid] = td.process.process_name
            name[td.uuid] = td.thread.thread_name if td.HasField("thread") else td.name
        if pkt.HasField("track_event"):  # begin and end paired as Perfetto pairs them: a stack per track
            te = pkt.track_event
            if te.type == P.TrackEvent.TYPE_SLICE_BEGIN:
                opened[te.track_uuid].append(pkt.timestamp)
            elif te.type == P.TrackEvent.TYPE_SLICE_END:
                spans[te.track_uuid].append((opened[te.track_uuid].pop(), pkt.timestamp))
    assert sorted(process.values()) == ["critical path", "rank 0", "rank 1"]
    (cp,) = [u for u, n in process.items() if n == "critical path"]
    mine = {u: spans[u] for u in name if parent.get(u) == cp and spans[u]}
    assert sorted(name[u] for u in mine) == [TRACK, f"{TRACK} (2)"]  # no "(overlap k)" track
    assert all(_partial_overlaps(v) == 0 for v in mine.values())
    assert sum(e - s for v in mine.values() for s, e in v) == want


def test_one_rank_track_no_partial_overlap():
    t = with_critical_path(polyprof.load(DATA / "kineto" / "v100_ns_resolution_rank0.json.gz"))
    tracks = {x.id: x.name for x in t.tracks if x.kind == "derived" and x.name.startswith(TRACK)}
    tr = np.asarray(t.events["track"])
    s = np.asarray(t.events["start_ns"], np.int64)
    e = s + np.asarray(t.events["dur_ns"], np.int64)
    for k in tracks:
        m = tr == k
        assert _partial_overlaps(list(zip(s[m].tolist(), e[m].tolist()))) == 0
    assert sorted(tracks.values()) == [TRACK, f"{TRACK} (2)"]
