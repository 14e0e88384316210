"""Copies, memory and graph capture recorded on a real NVIDIA H200 by
``scripts/gpu_memory_copies.py`` (tests/data/h200/README.md). The truth is the recording
programs' own counts and torch's own allocator statistics (``copies_truth.json``),
and the raw files read here without polyprof; not polyprof's earlier output."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof import analyze as A
from polyprof.analyze.copies import copies
from polyprof.analyze.frames import column
from polyprof.analyze.memory import memory_peak
from polyprof.cli import main
from polyprof.derive import cache
from polyprof.formats import xplane_pb2

DATA = Path(__file__).parent / "data" / "h200"
TRUTH = json.loads((DATA / "copies_truth.json").read_text())


def by_kind(trace: polyprof.Trace) -> dict[str, tuple[int, int, int, int]]:
    """kind -> (count, bytes, small, pageable) of the copies table."""
    t = copies(trace)
    cols = [column(t, c).tolist() for c in ("kind", "count", "total_bytes", "small", "pageable")]
    return {k: (int(n), int(b), int(s), int(p)) for k, n, b, s, p in zip(*cols)}


def fired(trace: polyprof.Trace) -> dict[str, dict]:
    return {f.id: f.evidence for f in A.findings(trace)}


def test_kineto_copies_equal_the_programs_count_and_the_raw_file() -> None:
    path = DATA / "torch_copies_h200.json.gz"
    truth = TRUTH[path.name]
    raw: Counter[str] = Counter()
    raw_bytes: Counter[str] = Counter()
    for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
        if e.get("cat") == "gpu_memcpy":
            kind = "HtoD" if "HtoD" in e["name"] else "DtoH" if "DtoH" in e["name"] else e["name"]
            raw[kind] += 1
            raw_bytes[kind] += e["args"]["bytes"]
    got = by_kind(polyprof.load(path))
    for kind in ("HtoD", "DtoH"):
        assert got[kind][:2] == (raw[kind], raw_bytes[kind]) == tuple(truth[kind])
    assert got["HtoD"][2] == truth["small_HtoD"]
    assert sum(v[3] for v in got.values()) == truth["pageable"]


def test_kineto_findings_match_torchs_own_allocator_statistics() -> None:
    path = DATA / "torch_copies_h200.json.gz"
    truth = TRUTH[path.name]
    trace = polyprof.load(path)
    found = fired(trace)
    pageable = found["pageable_copies"]
    assert pageable["copies"] == truth["pageable"] and pageable["by_kind"] == {"HtoD": 325, "DtoH": 5}
    cached = found["memory_cached"]
    assert cached["reserved_peak_bytes"] == truth["max_reserved"]
    assert cached["allocated_peak_bytes"] == truth["max_allocated"]
    oom = found["out_of_memory"]
    assert oom["requested_bytes"] == 1 << 50
    title = next(f.title for f in A.findings(trace) if f.id == "out_of_memory")
    assert "asking for 1.0 PiB (103.1 MiB allocated, 122.0 MiB reserved)" in title
    assert (oom["allocated_bytes"], oom["reserved_bytes"]) == (truth["end_allocated"], truth["end_reserved"])
    peak = memory_peak(trace)
    gpu = column(peak, "device").tolist().index("/device:GPU:0")
    assert column(peak, "peak_bytes")[gpu] == truth["max_allocated"]
    assert column(peak, "start_bytes")[gpu] == truth["start_allocated"]
    assert column(peak, "end_bytes")[gpu] == truth["end_allocated"]


def test_kineto_launches_captured_into_the_graph_are_not_lost_launches() -> None:
    path = DATA / "torch_copies_h200.json.gz"
    truth = TRUTH[path.name]
    corr = cache.correlation(polyprof.load(path))
    counts = corr.counts
    assert counts["launch_calls_recorded_into_graphs"] == truth["captured_launches"]
    assert counts["launch_calls_without_device_activity"] == 0


def test_snapshot_peak_and_end_equal_torchs_own() -> None:
    path = DATA / "torch_memory_h200.pickle"
    truth = TRUTH[path.name]
    trace = polyprof.load(path)
    peak = memory_peak(trace)
    assert column(peak, "device").tolist() == ["/device:GPU:0"]
    assert int(column(peak, "peak_bytes")[0]) == truth["max_allocated"]
    assert int(column(peak, "end_bytes")[0]) == truth["end_allocated"]
    assert int(column(peak, "start_bytes")[0]) == truth["start_allocated"]
    found = fired(trace)
    assert found["memory_cached"]["reserved_peak_bytes"] == truth["max_reserved"]
    assert found["out_of_memory"]["requested_bytes"] == 1 << 50


def test_cupti_copies_equal_the_programs_count() -> None:
    path = DATA / "torch_copies_cupti.polyprof"
    truth = TRUTH[path.name]
    got = by_kind(polyprof.load(path))
    assert got["HtoD"][:2] == tuple(truth["HtoD"])
    assert got["DtoH"][:2] == tuple(truth["DtoH"])
    assert sum(v[3] for v in got.values()) == truth["pageable"]
    assert "pageable_copies" in fired(polyprof.load(path))


def _raw_xspace_copies(path: Path) -> dict[str, tuple[int, int]]:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    gpu = next(p for p in space.planes if p.name == "/device:GPU:0")
    stat = {k: m.name for k, m in gpu.stat_metadata.items()}
    host = {"pageable", "pinned"}
    out: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for line in gpu.lines:
        for e in line.events:
            name = gpu.event_metadata[e.metadata_id].name
            details = next((s.str_value or stat[s.ref_value]  # (XLA interns the text as stat metadata)
                            for s in e.stats if stat[s.metadata_id] == "memcpy_details"), None)
            if details is None or not name.startswith("Memcpy"):  # (XLA's fills carry one too)
                continue
            tok = dict(t.split(":", 1) for t in details.split())
            ends = "".join("H" if tok[k] in host else "D" for k in ("kind_src", "kind_dst"))
            kind = {"MemcpyH2D": "HtoD", "MemcpyD2H": "DtoH"}.get(name, f"{ends[0]}to{ends[1]}")
            out[kind] += 1
            size[kind] += int(tok["size"])
    return {k: (out[k], size[k]) for k in out}


def test_xspace_copies_equal_the_programs_count_and_the_raw_details() -> None:
    path = DATA / "jax_copies_h200.xplane.pb"
    truth = TRUTH[path.name]
    raw = _raw_xspace_copies(path)
    got = by_kind(polyprof.load(path))
    for kind in ("HtoD", "DtoH", "HtoH"):  # XLA's MemcpyOther from pinned to pageable memory: HtoH
        assert got[kind][:2] == raw[kind] == tuple(truth[kind])
    assert "unknown" not in got


@pytest.mark.parametrize("name", ["torch_copies_h200.json.gz", "torch_memory_h200.pickle",
                                  "torch_copies_cupti.polyprof", "jax_copies_h200.xplane.pb"])
def test_summary_json_of_each_file(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole command a user runs: its copies table holds the programs' counts."""
    assert main(["summary", "--json", "--all-steps", str(DATA / name)]) == 0
    rows = json.loads(capsys.readouterr().out)["tables"].get("copies", {}).get("records", [])
    truth = TRUTH[name]
    for kind in ("HtoD", "DtoH"):
        if kind in truth:
            assert [(r["count"], r["total_bytes"]) for r in rows if r["kind"] == kind] == [tuple(truth[kind])]
    assert np.isfinite([r["bandwidth_gbps"] for r in rows if r["total_bytes"]]).all()
