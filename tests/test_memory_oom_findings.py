"""The memory findings of a run that ran out of memory (``out_of_memory``) and of an
allocator cache that holds much more than was ever allocated at once
(``memory_cached``), in ``analyze/memory_findings.py``.

No licensed snapshot of a real CUDA run exists: the snapshots are the CUDA allocator's
layout as ``test_torch_memory_snapshot.cuda_snapshot`` builds it. The Kineto traces of
TraceLens' perf samples (H100 and MI300, torch's ``[memory]`` events with ``Total
Reserved``; licence beside them) are real, and healthy: no cache finding."""

from __future__ import annotations

import copy
import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

import polyprof
import polyprof.analyze as A
from polyprof.analyze import memory_findings as mf
from polyprof.analyze.window import Window
from test_torch_memory_snapshot import cuda_snapshot

MiB = 1 << 20
PERF = Path(__file__).parent / "data" / "peers" / "tracelens_perf"
_SIZES = ("size", "total_size", "requested_size", "allocated_size", "active_size", "device_free")


def _load(tmp_path: Path, doc: dict[str, Any], name: str = "snapshot.pickle") -> polyprof.Trace:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(doc, protocol=4))
    return polyprof.load(path)


def _scaled(doc: Any, k: int) -> Any:
    """``doc`` with every byte count times ``k`` (addresses kept)."""
    if isinstance(doc, dict):
        return {key: v * k if key in _SIZES and isinstance(v, int) else _scaled(v, k) for key, v in doc.items()}
    if isinstance(doc, list):
        return [_scaled(v, k) for v in doc]
    return doc


def _found(trace: polyprof.Trace, rule: str) -> list[A.Finding]:
    return [f for f in A.findings(trace) if f.id == rule]


def test_out_of_memory_names_the_device_the_request_and_what_was_live(tmp_path):
    """cuda_snapshot's history: 8 MiB (before it: the level it starts from, no
    allocation of its own) and 6 MiB still allocated when 64 MiB was asked for with 3 MiB
    free, 40 MiB reserved."""
    (f,) = _found(_load(tmp_path, cuda_snapshot()), "out_of_memory")
    assert (f.plane, f.severity) == ("/device:GPU:0", "high")
    assert f.evidence == {"requested_bytes": 64 * MiB, "device_free_bytes": 3 * MiB, "allocated_bytes": 14 * MiB,
                          "reserved_bytes": 40 * MiB, "reserved_unallocated_bytes": 26 * MiB, "at_ns": 60_000,
                          "out_of_memory_events": 1}
    assert f.title == ("/device:GPU:0: out of memory asking for 64.0 MiB (3.0 MiB free on the device, 14.0 MiB "
                       "allocated, 40.0 MiB reserved)")
    assert [(e["bytes"], e["op"], e["stack"]) for e in f.events] == [
        (6 * MiB, "aten::mm", "train.py:12 step > model.py:40 forward")]
    # 26 of 40 MiB reserved and free: fragmentation is named, then torch's advice
    assert f.suggestion.startswith("26.0 MiB of the 40.0 MiB reserved was not allocated")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f.suggestion
    assert "torch.utils.checkpoint" in f.suggestion  # a snapshot is torch's: torch's advice


def test_out_of_memory_knows_expandable_segments_were_on(tmp_path):
    doc = cuda_snapshot()
    doc["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "expandable_segments": True}
    (f,) = _found(_load(tmp_path, doc), "out_of_memory")
    assert "expandable_segments is already on" in f.suggestion and "=expandable_segments:True" not in f.suggestion


def test_no_out_of_memory_without_the_event(tmp_path):
    doc = cuda_snapshot()
    doc["device_traces"][0] = [e for e in doc["device_traces"][0] if e["action"] != "oom"]  # type: ignore[index]
    assert not _found(_load(tmp_path, doc), "out_of_memory")


def test_torch_profilers_out_of_memory_event(tmp_path):
    """torch.profiler writes ``[OutOfMemory]`` (args Bytes, Total Allocated, Total
    Reserved, Device Type, Device Id) where an allocation fails; the request is not an
    allocation that is then live."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 100, "dur": 10, "args": {}},
          {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 101,
           "args": {"Total Reserved": 2 * MiB, "Total Allocated": MiB, "Bytes": MiB, "Addr": 4096, "Device Id": 1,
                    "Device Type": 1}},
          {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[OutOfMemory]", "pid": 1, "tid": 1, "ts": 105,
           "args": {"Total Reserved": 2 * MiB, "Total Allocated": MiB, "Bytes": 1 << 30, "Device Id": 1,
                    "Device Type": 1}}]
    path = tmp_path / "oom.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": ev, "schemaVersion": 1}))
    (f,) = _found(polyprof.load(path), "out_of_memory")
    assert f.plane == "/device:GPU:1"
    e = f.evidence
    assert (e["requested_bytes"], e["allocated_bytes"], e["reserved_bytes"], e["device_free_bytes"]) == (
        1 << 30, MiB, 2 * MiB, None)
    assert [(x["bytes"], x["op"]) for x in f.events] == [(MiB, "aten::empty")]
    assert f.title == "/device:GPU:1: out of memory asking for 1.0 GiB (1.0 MiB allocated, 2.0 MiB reserved)"


def test_a_cache_much_larger_than_the_peak(tmp_path):
    """cuda_snapshot at 64x: 2.5 GiB reserved, at most 1.25 GiB allocated at once."""
    trace = _load(tmp_path, _scaled(copy.deepcopy(cuda_snapshot()), 64))
    (f,) = _found(trace, "memory_cached")
    assert (f.plane, f.severity) == ("/device:GPU:0", "high")
    assert f.evidence == {"reserved_peak_bytes": 2560 * MiB, "allocated_peak_bytes": 1280 * MiB,
                          "unallocated_bytes": 1280 * MiB, "share_pct": 50.0,
                          "reserved_at_allocated_peak_bytes": 2560 * MiB, "allocated_peak_at_ns": 30_000,
                          "allocator": "torch"}
    assert "expandable_segments:True" in f.suggestion and "torch.cuda.empty_cache()" in f.suggestion
    assert f.title == ("/device:GPU:0: the allocator reserved up to 2.5 GiB but never had more than 1.2 GiB "
                       "allocated at once: 1.2 GiB (50%) held as cache or fragments")
    # the same shape at 1x: 20 MiB held back is not worth a finding
    assert not _found(_load(tmp_path, cuda_snapshot(), "small.pickle"), "memory_cached")


@pytest.mark.parametrize("name", sorted(p.name for p in PERF.glob("*.json.gz")))
def test_real_torch_caches_are_healthy(name, monkeypatch):
    """Reserved at most 1.5x the allocated peak, under 80 MB apart: no finding. With the
    byte threshold lowered, the numbers are the file's own ``Total Reserved`` and
    ``Total Allocated`` maxima."""
    path = PERF / name
    assert not _found(polyprof.load(path), "memory_cached")
    mem = [e["args"] for e in json.load(gzip.open(path))["traceEvents"]
           if e.get("name") == "[memory]" and e["args"]["Device Type"] != 0]
    reserved, allocated = max(a["Total Reserved"] for a in mem), max(a["Total Allocated"] for a in mem)
    share = 100 * (reserved - allocated) / reserved
    assert reserved - allocated < mf.CACHED_MIN_BYTES
    monkeypatch.setattr(mf, "CACHED_MIN_BYTES", 1)
    got = _found(polyprof.load(path), "memory_cached")
    assert bool(got) == (share >= mf.CACHED_SHARE)
    if got:  # mi300 bert: 224 MB reserved against a 146 MB peak
        assert (got[0].evidence["reserved_peak_bytes"], got[0].evidence["allocated_peak_bytes"]) == (reserved,
                                                                                                     allocated)
        assert name.startswith("mi300_gaunernst")


def test_out_of_memory_in_a_window_only_where_it_happened(tmp_path):
    """Three torch.profiler steps, the failure in step 2: a window of steps 0-1 has none."""
    steps = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": k * 1000,
              "dur": 900, "args": {}} for k in range(3)]
    mem = [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": name, "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Reserved": 4 * MiB, "Total Allocated": MiB, "Bytes": nbytes, "Device Id": 0,
                     "Device Type": 1, **({"Addr": 4096} if name == "[memory]" else {})}}
           for name, ts, nbytes in (("[memory]", 10, MiB), ("[OutOfMemory]", 2100, 64 * MiB))]
    path = tmp_path / "steps.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": steps + mem, "schemaVersion": 1}))
    trace = polyprof.load(path)
    assert not [f for f in A.findings(trace, window=Window(0, 2)) if f.id == "out_of_memory"]
    (f,) = [f for f in A.findings(trace, window=Window(2, 3)) if f.id == "out_of_memory"]
    assert (f.evidence["requested_bytes"], f.evidence["allocated_bytes"], f.evidence["reserved_bytes"]) == (
        64 * MiB, MiB, 4 * MiB)


def test_torch_profilers_out_of_memory_event_is_no_allocation(tmp_path):
    """``[OutOfMemory]`` carries ``Bytes`` beside the totals, as a memory event does: it
    was counted as a live 1 GiB allocation (live at the peak 1,076,887,552 bytes where 3
    MiB were; allocations 3)."""
    ev = [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": name, "pid": 1, "tid": 1, "ts": ts,
           "args": {"Total Reserved": 8 * MiB, "Total Allocated": total, "Bytes": nbytes, "Device Id": 0,
                    "Device Type": 1, **({"Addr": addr} if addr else {})}}
          for name, ts, total, nbytes, addr in (("[memory]", 101, MiB, MiB, 4096),
                                                ("[OutOfMemory]", 105, MiB, 1 << 30, 0),
                                                ("[memory]", 110, 3 * MiB, 2 * MiB, 8192))]
    path = tmp_path / "oom2.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": ev, "schemaVersion": 1}))
    from polyprof.analyze.memory import memory_peak

    (peak,) = memory_peak(polyprof.load(path)).to_pandas().to_dict("records")
    assert (peak["allocations"], peak["peak_bytes"], peak["live_at_peak_bytes"]) == (2, 3 * MiB, 3 * MiB)
