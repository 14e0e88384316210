"""torch's CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``) read as memory
events (``formats/torch_memory_snapshot.py``)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze.memory import memory_at_peak, memory_peak
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect

MiB = 1 << 20


def _frames(*py: tuple[str, int, str], op: str = "") -> list[dict[str, object]]:
    """A CUDA stack as the allocator records it, innermost first: its own frames, an
    ATen op's, then Python's."""
    own = [{"name": "torch::unwind::unwind()", "filename": "??", "line": 0},
           {"name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned "
                    "long, CUstream_st*)", "filename": "CUDACachingAllocator.cpp", "line": 0},
           {"name": "at::_ops::empty_strided::call(c10::ArrayRef<c10::SymInt>)", "filename": "", "line": 0}]
    ops = [{"name": f"at::_ops::{op}::call(at::Tensor const&, at::Tensor const&)", "filename": "??", "line": 0},
           {"name": f"at::_ops::{op}::redispatch(c10::DispatchKeySet)", "filename": "??", "line": 0}] if op else []
    return own + ops + [{"name": n, "filename": f, "line": ln} for f, ln, n in py]


def cuda_snapshot() -> dict[str, object]:
    """A snapshot in the layout torch 2.x's CUDA caching allocator writes (keys, actions,
    ``time_us``, blocks with ``requested_size``, a tuple ``segment_pool_id``), built here:
    a CUDA allocator cannot run on this machine. Device 0: a 20 MiB segment holding a
    weight allocated before the history (8 MiB, still allocated) and a buffer freed in
    it that the history never allocated (2 MiB); the history allocates an activation (4
    MiB, freed) and an output (6 MiB, kept), and records an OOM."""
    step = _frames(("/w/model.py", 40, "forward"), ("/w/train.py", 12, "step"), op="mm")
    trace = [
        {"action": "segment_alloc", "addr": 0x7000, "size": 20 * MiB, "stream": 0, "time_us": 1_000, "frames": step},
        {"action": "alloc", "addr": 0x8000, "size": 4 * MiB, "stream": 0, "time_us": 1_010, "frames": step},
        {"action": "alloc", "addr": 0xA000, "size": 6 * MiB, "stream": 0, "time_us": 1_030, "frames": step},
        {"action": "free_requested", "addr": 0x9000, "size": 2 * MiB, "stream": 0, "time_us": 1_035, "frames": []},
        {"action": "free_completed", "addr": 0x9000, "size": 2 * MiB, "stream": 0, "time_us": 1_036, "frames": []},
        {"action": "free_requested", "addr": 0x8000, "size": 4 * MiB, "stream": 0, "time_us": 1_040, "frames": step},
        {"action": "free_completed", "addr": 0x8000, "size": 4 * MiB, "stream": 0, "time_us": 1_050, "frames": step},
        {"action": "oom", "addr": 0, "size": 64 * MiB, "stream": 0, "time_us": 1_060, "device_free": 3 * MiB,
         "frames": step},
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 1_070, "frames": []},
    ]
    weight = _frames(("/w/model.py", 7, "__init__"), ("/w/train.py", 3, "<module>"))
    blocks = [{"address": 0x6000, "size": 8 * MiB, "requested_size": 8 * MiB, "state": "active_allocated",
               "frames": weight},
              {"address": 0xA000, "size": 6 * MiB, "requested_size": 6 * MiB, "state": "active_allocated",
               "frames": step},
              {"address": 0xB000, "size": 6 * MiB, "state": "inactive", "frames": []}]
    return {"segments": [{"device": 0, "address": 0x6000, "total_size": 40 * MiB, "allocated_size": 14 * MiB,
                          "active_size": 14 * MiB, "requested_size": 14 * MiB, "stream": 0, "segment_type": "large",
                          "segment_pool_id": (0, 0), "is_expandable": False, "blocks": blocks, "frames": weight}],
            "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
            "external_annotations": []}


def test_a_cuda_snapshot_reads_as_its_allocators_history(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(cuda_snapshot(), protocol=4))
    assert detect(path) == "torch-memory-snapshot"
    trace = polyprof.load(path)
    (peak,) = memory_peak(trace).to_pandas().to_dict("records")
    # held before the history (its start): 8 MiB kept + 2 MiB freed in it; then +4, +6 (the peak), -2, -4
    assert (peak["device"], peak["allocator"], peak["start_bytes"]) == ("/device:GPU:0", "torch", 10 * MiB)
    assert (peak["peak_bytes"], peak["end_bytes"], peak["allocations"], peak["frees"]) == (
        20 * MiB, 14 * MiB, 2, 2)
    assert peak["peak_ns"] == 1_030_000  # the output's allocation, in ns of the file's clock
    live = memory_at_peak(trace).to_pandas()
    assert sorted(live["bytes"].tolist()) == [4 * MiB, 6 * MiB]  # allocated in the history
    rows = {int(r.bytes): r for r in live.itertuples()}
    assert rows[6 * MiB].stack == "train.py:12 step > model.py:40 forward" and rows[6 * MiB].op == "aten::mm"
    ev = trace.events
    names = trace.names()
    (oom,) = np.flatnonzero(names == "OutOfMemoryError")
    assert ev["start_ns"][oom] == 1_060_000
    assert trace.stats.get("requested_bytes").lookup(np.array([oom]))[1].tolist() == [64 * MiB]
    assert trace.stats.get("device_free").lookup(np.array([oom]))[1].tolist() == [3 * MiB]
    # reserved: 40 MiB at the snapshot, 20 MiB of it by the history's first entry
    has, reserved = trace.stats.get("total_reserved").lookup(np.arange(trace.n_events))
    assert has.all() and reserved.tolist() == [40 * MiB] * trace.n_events
    assert trace.names()[0] == "[segment]"
    assert trace.metadata["torch_memory_snapshot"]["entries"] == [9]


def test_a_snapshot_without_history_gives_its_allocated_blocks(tmp_path: Path) -> None:
    """``torch.cuda.memory._snapshot()`` without a recorded history: the blocks allocated
    then, at time 0, with their own stacks (or none), and no word about missing times."""
    doc = cuda_snapshot()
    doc["device_traces"] = []
    path = tmp_path / "now.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    trace = polyprof.load(path)
    (peak,) = memory_peak(trace).to_pandas().to_dict("records")
    assert (peak["start_bytes"], peak["peak_bytes"], peak["allocations"]) == (0, 14 * MiB, 2)
    live = {int(r.bytes): r for r in memory_at_peak(trace).to_pandas().itertuples()}
    assert live[8 * MiB].stack == "train.py:3 <module> > model.py:7 __init__"
    # only a bare allocation op in its stack: that one
    assert live[8 * MiB].op == "aten::empty_strided"
    assert not trace.metadata.get("warnings")


def test_the_segments_alone_read_as_a_snapshot_without_history(tmp_path: Path) -> None:
    """``torch.cuda.memory_snapshot()`` is the list of segments alone, pickled as it is by
    programs (Muduard/LayoutEditing's public memory_snapshot.pkl: 255 segments) and read
    by torch's own _memory_viz: its allocated blocks, as a snapshot without history's."""
    segments = cuda_snapshot()["segments"]
    for protocol in (2, 4, 5):
        path = tmp_path / f"segments{protocol}.pkl"
        path.write_bytes(pickle.dumps(segments, protocol=protocol))
        assert detect(path) == "torch-memory-snapshot"
        (peak,) = memory_peak(polyprof.load(path)).to_pandas().to_dict("records")
        assert (peak["device"], peak["start_bytes"], peak["peak_bytes"], peak["allocations"]) == (
            "/device:GPU:0", 0, 14 * MiB, 2)
    other = tmp_path / "other.pkl"  # a list of other dicts: not a snapshot
    other.write_bytes(pickle.dumps([{"device": "cpu", "name": "x"}], protocol=4))
    with pytest.raises(TraceFormatError, match="unrecognised format"):
        polyprof.load(other)


def test_a_profile_converted_by_torch_reads_as_its_history(tmp_path: Path) -> None:
    """torch's own converter of a profile (``_profile_to_snapshot``, what memory_viz
    shows of a ``torch.profiler`` run) on the CPU: its history has no times."""
    torch = pytest.importorskip("torch")
    from torch.cuda._memory_viz import _profile_to_snapshot

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    x = torch.randn(32, 64)
    with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(3):
            model(x).sum().backward()
    snap = _profile_to_snapshot(prof)
    path = tmp_path / "profile.pickle"
    path.write_bytes(pickle.dumps(snap))
    trace = polyprof.load(path)
    entries = snap["device_traces"][0]
    allocs = [e for e in entries if e["action"] == "alloc"]
    frees = [e for e in entries if e["action"] == "free_completed"]
    # independently: the blocks allocated at the snapshot, less the history's net, held before it
    end = sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    level = end - sum(e["size"] for e in allocs) + sum(e["size"] for e in frees)
    levels = [level]
    for e in entries:
        level += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_completed" else 0
        levels.append(level)
    (peak,) = memory_peak(trace).to_pandas().to_dict("records")
    assert (peak["start_bytes"], peak["peak_bytes"], peak["end_bytes"]) == (levels[0], max(levels), end)
    assert peak["allocations"] == len(allocs) and peak["frees"] == len(frees)
    assert peak["device"] == "/host:CPU"  # the converter's last index (no GPU here: its only one)
    # its segments' sizes are address spans, not reserved memory: no reserved bytes, no
    # "the allocator reserved up to 43087.1 GiB" finding (a review)
    assert trace.stats.get("total_reserved") is None
    from polyprof import analyze

    assert not [f for f in analyze.findings(trace) if f.id == "memory_cached"]
    assert any("has no times" in w for w in trace.metadata["warnings"])
    has, cats = trace.stats.get("memory_category").lookup(np.arange(trace.n_events))
    assert has.sum() == len(allocs) and {"activation", "gradient"} <= set(cats.tolist())


def test_a_snapshot_taken_on_windows_names_its_files_without_their_folders(tmp_path: Path) -> None:
    """A public snapshot taken on Windows (cs336 assignment 2) names its Python files
    ``D:\\Dev\\...\\model.py``: the stack keeps the file's name, as it does of a POSIX path."""
    doc = cuda_snapshot()
    frames = {id(f): f for e in doc["device_traces"][0] for f in e.get("frames") or []}  # type: ignore[index]
    for f in frames.values():  # (entries share their frames)
        if f["filename"].endswith(".py"):
            f["filename"] = "D:\\Dev\\a2" + f["filename"].replace("/", "\\")
    path = tmp_path / "windows.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    live = {int(r.bytes): r for r in memory_at_peak(polyprof.load(path)).to_pandas().itertuples()}
    assert live[6 * MiB].stack == live[4 * MiB].stack == "train.py:12 step > model.py:40 forward"


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_names_a_python_object_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    doc = cuda_snapshot()
    doc["segments"].append(_Payload(marker))  # type: ignore[attr-defined]
    path = tmp_path / "hostile.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    with pytest.raises(TraceFormatError, match=r"hostile\.pickle.*names a Python object, posix\.system"):
        polyprof.load(path)
    assert not marker.exists()


def test_crafted_pickles_cost_what_their_size_does(tmp_path: Path) -> None:
    """Small hostile files: a memo index of 2**26 (the C unpickler's memo array took 1 GB
    for 42 bytes), allocator settings of a shared list 40 levels deep (2**40 leaves once
    written out), and 4,000 entries sharing one stack of 4,000 frames (each made once)."""
    import resource
    import time

    memo = tmp_path / "memo.pickle"
    memo.write_bytes(b"\x80\x04}\x94(\x8c\x08segments\x94]\x94r" + (1 << 26).to_bytes(4, "little") + b"u.")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    polyprof.load(memo)  # an empty snapshot
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB

    doc = cuda_snapshot()
    deep: list[object] = []
    for _ in range(40):
        deep = [deep, deep]
    doc["allocator_settings"] = {"expandable_segments": False, "deep": deep}
    frames = _frames(*[(f"/w/f{i}.py", i, f"f{i}") for i in range(4000)])
    doc["device_traces"][0] += [{"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 2_000 + i,
                                 "frames": frames} for i in range(4000)]  # type: ignore[operator]
    path = tmp_path / "crafted.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    t0 = time.monotonic()
    trace = polyprof.load(path)
    polyprof.export(trace, tmp_path / "out.polyprof")
    assert time.monotonic() - t0 < 30
    assert trace.metadata["torch_memory_snapshot"]["allocator_settings"] == {"expandable_segments": False}


def test_damaged_snapshots_say_what_is_wrong(tmp_path: Path) -> None:
    doc = cuda_snapshot()
    doc["device_traces"][0][1]["size"] = "4 MiB"  # type: ignore[index]
    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    with pytest.raises(TraceFormatError, match=r"bad\.pickle.*device 0 entry 1 \(alloc\) size '4 MiB'"):
        polyprof.load(path)
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(pickle.dumps(cuda_snapshot(), protocol=4)[:300])
    with pytest.raises(TraceFormatError, match=r"cut\.pickle.*not a readable memory snapshot"):
        polyprof.load(cut)


def test_the_summary_shows_the_peak_and_its_stacks(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(cuda_snapshot(), protocol=4))
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, COLUMNS="160"))
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "Memory peak" in out and "20.0 MiB" in out and "train.py:12 step > model.py:40 forward" in out
