"""What a big summary holds at its peak (docs/benchmarks.md, "Whole-process scale"): a
per-event table computed only as another's input is not kept, the nesting memo keeps no
copy of the rows it was asked about, ``op_stats`` holds less per op, and a read-only
command's analyses run with the freed-pages handler (``lowlevel.heap.for_command``).
Real traces: a synthetic Kineto trace of launches (written here) and the shared V100 one."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import nesting, ops
from polyprof.analyze.registry import Tables
from polyprof.derive import cache
from polyprof.lowlevel import heap
from polyprof.trace.categories import Kind

V100 = Path(__file__).resolve().parent / "data" / "traces" / "kineto" / "v100_ns_resolution_rank0.json.gz"

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name  # type: ignore[no-redef]


def _launches(path: Path, groups: int) -> Path:
    """A Kineto trace of ``groups`` (cpu op, launch, kernel) triples, a step every 100."""
    ev = []
    for g in range(groups):
        ts = 1000.0 + 20.0 * g
        if g % 100 == 0:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{g // 100}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": 1999.0})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts + 0.5, "dur": 12.5,
                   "args": {"External id": g}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 2,
                   "dur": 5.0, "args": {"External id": g, "correlation": g + 10}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"k{g % 7}", "pid": 0, "tid": 7, "ts": ts + 8, "dur": 15.0,
                   "args": {"External id": g, "device": 0, "stream": 7, "correlation": g + 10}})
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> Path:
    return _launches(tmp_path_factory.mktemp("launches") / "launches.json", 30_000)


def test_a_per_event_input_is_not_kept_unless_asked_for(launches: Path):
    trace = polyprof.load(launches)
    t = Tables(trace)
    summary = t["launch_summary"]
    assert "launch_stats" not in t.computed()  # made for launch_summary alone, then let go
    kept = Tables(trace)
    rows = kept["launch_stats"]
    assert len(rows) == 30_000 and "launch_stats" in kept.computed()
    assert kept["launch_summary"].equals(summary)
    assert kept.computed()["launch_stats"] is rows  # asked for first: kept, and read from there


def test_the_nesting_memo_keeps_no_copy_of_the_rows():
    trace = polyprof.load(V100)
    rows = np.sort(np.concatenate([trace.rows_of_kind(Kind.CPU_OP), trace.rows_of_kind(Kind.RUNTIME)]))
    first = nesting.of_rows(trace, rows)
    assert nesting.of_rows(trace, rows.copy()) is first  # the same rows: the memo's
    assert nesting.of_rows(trace, rows[:-1]) is not first
    store = cache.memo(trace, "nesting", lambda t: {})
    kept = [seen for sets in store.values() for seen, _ in sets]
    assert len(kept) == 2 and kept[0] is rows  # the caller's array itself: no copy, 8 bytes per row


def test_op_stats_peak_per_op(launches: Path):
    """The live memory ``op_stats`` adds at its peak, per op, on 30k launched ops (was
    ~505 bytes, now ~335: the range min / max tables of the lengths below a block, the query's
    copies of its ranges, arrays kept past their use)."""
    trace = polyprof.load(launches)
    cache.correlation(trace), cache.threads(trace)  # (what the summary made before op_stats)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        ops.op_stats(trace)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak / 30_000 < 400, peak / 30_000


@pytest.mark.skipif(heap.IMPLEMENTATION != "c", reason="the compiled _heapcache is not built")
def test_a_read_only_command_runs_its_analyses_with_the_reuse_handler(monkeypatch, launches: Path, capsys):
    from polyprof.cli import main

    seen = []
    fn = ops.op_stats
    monkeypatch.setattr(ops, "op_stats", lambda *a, **k: seen.append(get_handler_name()) or fn(*a, **k))
    assert main(["summary", str(launches)]) == 0
    assert seen == ["polyprof_reuse_freed_pages"] and "polyprof summary" in capsys.readouterr().out
    assert get_handler_name() == "default_allocator" and heap.reuse_stats()["kept_bytes"] == 0
    with heap.for_command(False):
        assert get_handler_name() == "default_allocator"
