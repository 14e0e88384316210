"""What a big summary holds at its peak (docs/benchmarks.md, "Whole-process scale"): a
per-event table computed only as another's input is not kept, the nesting memo is kept
compact and only where a later analysis reads it, ``op_stats``, the breakdowns and
``launch_stats`` hold less per event, and a read-only
command's analyses run with the freed-pages handler (``lowlevel.heap.for_command``).
Real traces: a synthetic Kineto trace of launches (written here) and the shared V100 one."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.analyze import breakdown, nesting, ops
from polyprof.analyze.common import device_view
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


def test_the_nesting_memo_keeps_16_bytes_per_row():
    trace = polyprof.load(V100)
    rows = np.sort(np.concatenate([trace.rows_of_kind(Kind.CPU_OP), trace.rows_of_kind(Kind.RUNTIME)]))
    first = nesting.of_rows(trace, rows)
    assert nesting.of_rows(trace, rows.copy()) is first  # the same rows: the memo's
    assert nesting.of_rows(trace, rows[:-1]) is not first
    store = cache.memo(trace, "nesting", lambda t: {})
    kept = [(seen, found) for sets in store.values() for seen, found in sets]
    assert len(kept) == 2 and np.array_equal(kept[0][0], rows)
    # the rows, order, depths and parents in 4 bytes each (they were the caller's rows and 3 int64 arrays)
    assert sum(a.nbytes for a in (kept[0][0], *kept[0][1])) == 16 * len(rows)
    whole = nesting.parents(cache.threads(trace)[trace.events["track"][rows]], trace.events["start_ns"][rows],
                            trace.events["start_ns"][rows] + trace.events["dur_ns"][rows])
    assert all(np.array_equal(a, b) for a, b in zip(first, whole))  # the same nesting, smaller


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
    assert peak / 30_000 < 300, peak / 30_000


def _peak_per_launch(trace: polyprof.Trace, fn) -> float:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn(trace)
        return (tracemalloc.get_traced_memory()[1] - before) / 30_000
    finally:
        tracemalloc.stop()


def test_the_breakdowns_and_launch_stats_hold_one_copy_of_the_activities(launches: Path):
    """The live memory each adds at its peak, per launch (30k launched kernels): the
    breakdowns take each kind of group (stream, device; communication, compute, either)
    in a pass of its own, not every activity copied once per group it is in (temporal
    ~280 -> ~130 bytes, idle ~310 -> ~105, overlap ~220 -> ~115), and ``launch_stats``
    makes its columns in launch order, not made and then copied so (~290 -> ~195)."""
    trace = polyprof.load(launches)
    cache.correlation(trace), cache.threads(trace), device_view(trace)  # (made before them in a summary)
    assert _peak_per_launch(trace, breakdown.temporal_breakdown) < 180
    assert _peak_per_launch(trace, breakdown.idle_time_breakdown) < 160
    assert _peak_per_launch(trace, breakdown.comm_comp_overlap) < 160
    assert _peak_per_launch(trace, ops.launch_stats) < 240


def test_op_stats_keeps_no_nesting_where_its_calls_launched_work(launches: Path):
    """The critical path reads ``op_stats``' nesting only for a window of host calls
    alone: where the calls launched device work it is not kept (16 bytes per op and
    call through every later analysis)."""
    trace = polyprof.load(launches)
    ops.op_stats(trace)
    assert not cache.memo(trace, "nesting", lambda t: {})
    rows = np.sort(np.concatenate([trace.rows_of_kind(Kind.CPU_OP), trace.rows_of_kind(Kind.RUNTIME)]))
    assert nesting.of_rows(trace, rows, keep=False) is not nesting.of_rows(trace, rows, keep=False)
    assert nesting.of_rows(trace, rows) is nesting.of_rows(trace, rows, keep=False)  # kept: looked up


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


SAMPLED = V100.parent / "sampled_rank0.json.gz"  # (compute, communication and memory at once: 8 states)


def test_kernel_states_and_event_stats_hold_a_few_columns_at_once(launches: Path):
    """The live memory each adds at its peak, per launch (30k launched kernels, 120k
    events): ``kernel_state_breakdown`` sweeps one sorted int64 key per instant, its fields
    read out one at a time (~270 -> ~90 bytes; its own part is below ``clipped_unions``'),
    and ``event_stats`` sorts one int64 per event packing its group, duration and row,
    without an order array or gathered copies (~225 -> ~90)."""
    from polyprof.analyze import events, kernel_states

    trace = polyprof.load(launches)
    cache.correlation(trace), cache.threads(trace), device_view(trace)  # (made before them in a summary)
    assert _peak_per_launch(trace, kernel_states.kernel_state_breakdown) < 150
    assert _peak_per_launch(trace, events.event_stats) < 150


@pytest.mark.parametrize("name", ["launches", "v100", "sampled"])
def test_the_packed_sweep_and_grouping_give_the_general_tables(monkeypatch, launches: Path, name: str):
    """Where the keys would not fit in an int64 the general ways run (``np.lexsort`` of
    the instants; :func:`~polyprof.analyze.grouping.duration_columns`): the tables are
    the same, dtypes included."""
    from polyprof.analyze import events, kernel_states

    trace = polyprof.load({"launches": launches, "v100": V100, "sampled": SAMPLED}[name])
    states, stats = kernel_states.kernel_state_breakdown(trace), events.event_stats(trace)
    assert len(states) and len(stats)
    monkeypatch.setattr(kernel_states, "_LIMIT", 0)
    monkeypatch.setattr(events, "_pack", lambda *a: None)
    assert kernel_states.kernel_state_breakdown(trace).equals(states)
    assert events.event_stats(trace).equals(stats)


def test_the_sweep_matches_the_lexsort_one_on_random_segments():
    """Devices, classes and stretches at random (segments touching across classes and
    stretches, times near 2**60 and below 0): the same times and stretch counts."""
    from polyprof.analyze.kernel_states import _sweep, _sweep_lexsort

    rng = np.random.default_rng(35)
    for _ in range(200):
        n, k = int(rng.integers(1, 5)), 3
        t0 = int(rng.choice([-(10**6), 0, 2**60]))
        t1 = t0 + int(rng.integers(0, 50))
        cuts = np.sort(rng.integers(t0, t1 + 1, 2 * int(rng.integers(1, 3)))).tolist()
        parts = []
        for a, b in zip(cuts[0::2], cuts[1::2]):
            gs, ss, es = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
            for g in range(n * k):  # each group's segments disjoint, not touching, by start
                pts = np.sort(rng.choice(np.arange(a, b + 1), min(2 * int(rng.integers(0, 8)), b - a + 1) // 2 * 2,
                                         replace=False))
                gs.append(np.full(len(pts) // 2, g, np.int64))
                ss.append(pts[0::2].astype(np.int64))
                es.append(pts[1::2].astype(np.int64))
            parts.append((np.concatenate(gs), np.concatenate(ss), np.concatenate(es)))
        want = _sweep_lexsort(parts, n, k, t0, t1)
        got = _sweep([tuple(x.copy() for x in p) for p in parts], n, k, t0, t1)
        for x, y in zip(got, want):
            assert x.dtype == y.dtype and np.array_equal(x, y)
