"""A store's rank summarised window by window (ranks/stepwise.py) gives the memory tables,
the breakdowns' row order and the trace span of the rank read whole:

- ``memory_at_peak`` lists, at each series' peak, the allocations live there made in any
  earlier window (ranks/window_memory.py), from the window holding the peak
  (ranks/table_merge.py: at_peaks); ``memory_peak`` counts them. Before, the first
  window's table was the rank's, and a window counted only its own allocations.
- ``temporal_breakdown`` and ``idle_time_breakdown`` keep each device's ``(all
  streams)`` row after its streams when a stream is first active in a later window.
- ``trace_span_ns`` spans the counter samples past the last event.

The trace is generated here (torch's memory events with addresses and totals, a CUDA
trace cannot be made on this machine); the bound is forced low, as in
tests/test_store_windows_merge.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import polyprof
from polyprof.ranks import fits, stepwise, window_memory
from summary_json import summary_json

LOW = str((fits.BASE_BYTES >> 20) + 1)
N = 3000  # steps
WINDOW = 4000  # events a window holds at most (about 5 windows)
MB = 1 << 20
#: (step, address, bytes): allocations (> 0) and frees (< 0) besides each step's own
EXTRA = [
    (10, 0xA000, 100 * MB),  # made in the first window, freed after the peak: live at it
    (20, 0xB000, 50 * MB),  # its address allocated again before any free: live from then on, read whole
    (30, 0xB000, 10 * MB),
    (40, 0xB000, -10 * MB),
    (50, 0xC000, 7 * MB),  # made and freed before the peak: not live at it
    (60, 0xC000, -7 * MB),
    (2400, 0xD000, 200 * MB),  # the peak, in a late window
    (2400, 0xD000, -200 * MB),
    (2900, 0xA000, -100 * MB),
]


def _mem(ts: float, addr: int, nbytes: int, total: int) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100, "tid": 100, "ts": ts,
            "args": {"Total Reserved": 1 << 34, "Total Allocated": total, "Bytes": nbytes, "Device Id": 0,
                     "Device Type": 1, "Addr": addr}}


def _trace(path: Path) -> Path:
    """N steps of 100 µs: an ``aten::empty`` allocating 1 MB it frees in the step, a
    kernel on stream 7 (and one on stream 9 in the second half), and the allocations of
    :data:`EXTRA`; an RSS counter sample past the last event."""
    ev: list[dict] = []
    total = 0
    extra: dict[int, list[tuple[int, int]]] = {}
    for s, addr, nbytes in EXTRA:
        extra.setdefault(s, []).append((addr, nbytes))
    t, corr = 1000.0, 0
    for s in range(N):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 100, "tid": 100,
                   "ts": t, "dur": 100.0, "args": {}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 100, "tid": 100, "ts": t + 1,
                   "dur": 4.0, "args": {}})
        total += MB
        ev.append(_mem(t + 2, 0x1000 + s % 3, MB, total))
        for j, (addr, nbytes) in enumerate(extra.get(s, [])):
            total += nbytes
            ev.append({"ph": "X", "cat": "cpu_op", "name": f"aten::extra_{s}_{j}", "pid": 100, "tid": 100,
                       "ts": t + 10 + 5 * j, "dur": 4.0, "args": {}})
            ev.append(_mem(t + 11 + 5 * j, addr, nbytes, total))
        total -= MB
        ev.append(_mem(t + 50, 0x1000 + s % 3, -MB, total))
        for stream in (7, 9) if s >= N // 2 else (7,):
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                       "ts": t + 50 + stream, "dur": 1.0, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": f"k{stream}", "pid": 0, "tid": stream,
                       "ts": t + 60 + stream, "dur": 3.0, "args": {"correlation": corr, "stream": stream,
                                                                   "device": 0}})
        t += 100.0
    ev.append({"ph": "C", "name": "process.rss_bytes", "pid": 100, "tid": 0, "ts": t + 5000.0,
               "args": {"process.rss_bytes": 123456}})
    meta = [{"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
            {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev + meta}))
    return path


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """The summary's JSON read whole and window by window, and the windows."""
    d = tmp_path_factory.mktemp("memory")
    store = polyprof.load_ranks([_trace(d / "rank0.json")]).convert(d / "s", chunk_rows=20000)
    mp = pytest.MonkeyPatch()
    try:
        whole = summary_json(store)
        mp.setenv("POLYPROF_MEMORY_BOUND", LOW)
        mp.setattr(fits, "window_events", lambda bound: WINDOW)
        seen: list = []
        real = stepwise.summarise
        mp.setattr(stepwise, "summarise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
        windowed = summary_json(store)
    finally:
        mp.undo()
    assert seen and len(seen[0].events) >= 3, "the windowed path ran, in three windows or more"
    return whole, windowed, seen[0]


def _records(doc: dict, name: str) -> list[dict]:
    return doc["tables"][name]["records"]


def test_live_at_the_peak_counts_allocations_of_earlier_windows(docs):
    whole, windowed, plan = docs
    got = _records(windowed, "memory_at_peak")
    assert got == _records(whole, "memory_at_peak")
    # the peak's own 200 MB, then the 100 MB made in the first window and freed after the
    # peak, the 50 MB its address's next allocation left live, the step's own 1 MB; not
    # the 7 MB freed before
    assert [(r["bytes"], r["addr"]) for r in got] == [(200 * MB, 0xD000), (100 * MB, 0xA000), (50 * MB, 0xB000),
                                                      (MB, 0x1000)]
    assert [r["op"] for r in got] == ["aten::extra_2400_0", "aten::extra_10_0", "aten::extra_20_0", "aten::empty"]
    (_, first_end), *_, (last_start, _) = plan.windows()
    assert got[1]["ts_ns"] < first_end and got[0]["ts_ns"] > last_start - 100_000_000  # (windows apart)
    assert _records(windowed, "memory_peak") == _records(whole, "memory_peak")
    peak = _records(whole, "memory_peak")[0]
    assert (peak["live_at_peak"], peak["live_at_peak_bytes"]) == (4, 351 * MB)


@pytest.mark.parametrize("name", ["temporal_breakdown", "idle_time_breakdown"])
def test_breakdown_rows_in_the_whole_reads_order(docs, name):
    """Stream 9 is first active in a later window: its row still comes before the
    device's ``(all streams)`` row (before: after it)."""
    whole, windowed, _ = docs
    got = _records(windowed, name)
    assert [r["stream"] for r in got] == [r["stream"] for r in _records(whole, name)]
    assert [r["stream"] for r in got][-1] == "(all streams)"
    assert got == _records(whole, name)


def test_trace_span_reaches_the_counter_samples(docs):
    whole, windowed, _ = docs
    span = windowed["overview"]["per_rank"]["0"]["trace_span_ns"]
    assert span == whole["overview"]["per_rank"]["0"]["trace_span_ns"]
    assert span >= (N * 100 + 5000) * 1000  # (the RSS sample 5 ms after the last step)


def test_the_carry_is_bounded(docs, tmp_path, monkeypatch, caplog):
    """At most CARRY allocations per series are carried, the largest: here the 100 MB of the
    two live at the first window's end; the 50 MB one is then missing at the peak."""
    monkeypatch.setattr(window_memory, "CARRY", 1)
    store = polyprof.load_ranks([_trace(tmp_path / "rank0.json")]).convert(tmp_path / "s", chunk_rows=20000)
    monkeypatch.setenv("POLYPROF_MEMORY_BOUND", LOW)
    monkeypatch.setattr(fits, "window_events", lambda bound: WINDOW)
    with caplog.at_level("INFO", logger="polyprof"):
        got = _records(summary_json(store), "memory_at_peak")
    assert [(r["bytes"], r["addr"]) for r in got] == [(200 * MB, 0xD000), (100 * MB, 0xA000), (MB, 0x1000)]
    assert "the 1 largest are carried" in caplog.text


def _finding(doc: dict, rule: str) -> list[dict]:
    return [f for f in doc["findings"] if f["id"] == rule]


def test_the_peak_held_by_one_is_the_whole_reads(docs):
    """``memory_peak_held_by_one`` reads the allocations live at the peak from the window
    holding it, with those earlier windows left live (ranks/window_memory.holder_table).
    Before, the rule ran on the rank without its events and found no holder."""
    whole, windowed, _ = docs
    found = _finding(whole, "memory_peak_held_by_one")
    assert found, "the whole read finds the peak held by one"
    assert _finding(windowed, "memory_peak_held_by_one") == found
