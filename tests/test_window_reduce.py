"""The launch and queue-length tables of a rank summarised window by window
(ranks/window_reduce.py): the whole read's to the last digit, from merged state that does
not grow with the rank's launches.

The launch tables and queue series here are made up (many windows of many launches, as a
GPU rank's would be, which no trace in tests/data is large enough for); the real ranks'
windowed summaries are checked against their whole reads in tests/test_store_windows*.py."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from polyprof.analyze.frames import column, frame
from polyprof.analyze.ops import launch_summary
from polyprof.analyze.queues import quartiles
from polyprof.ranks import window_reduce, window_values

PLANES = np.array(["/device:GPU:0", "/device:GPU:1"], object)
CALLS = np.array(["cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync"], object)


def _launches(rng: np.random.Generator, n: int):
    """A window's launch table of ``n`` activities (a graph launch runs several)."""
    calls = rng.integers(0, 3, n)
    row = np.cumsum(np.where(calls == 1, rng.integers(0, 2, n), 1))  # graph launches: several activities a call
    return frame({"launch_row": row, "launch_delay_ns": rng.integers(-50, 40_000_000, n),
                  "cpu_duration_ns": rng.integers(1, 20_000, n), "device_duration_ns": rng.integers(1, 900_000, n),
                  "graph_launch": calls == 1, "plane": PLANES[rng.integers(0, 2, n)], "launch_name": CALLS[calls]})


def _merged(tmp_path, windows: int, per: int, seed: int = 0):
    """(the merged launch_summary, its peak traced bytes while merging, the windows' tables)."""
    rng = np.random.default_rng(seed)
    names: dict[str, int] = {}
    parts = []
    for i in range(windows):
        t = _launches(rng, per)
        parts.append(t)
        window_values.spill_launches(t, tmp_path, i, names)
    tracemalloc.start()
    try:
        got = window_reduce.launch_summary(tmp_path, windows)  # as ranks/stepwise.py takes it
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return got, peak, parts


def _same(a, b) -> None:
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        x, y = column(a, c), column(b, c)
        assert x.dtype == y.dtype, c
        assert x.tolist() == y.tolist(), c


def test_merged_launch_summary_is_the_whole_tables(tmp_path, monkeypatch):
    """Small chunks and few values collected: the selection takes several passes."""
    monkeypatch.setattr(window_reduce, "CHUNK", 4096)
    monkeypatch.setattr(window_reduce, "COLLECT", 64)
    got, _, parts = _merged(tmp_path, 5, 20_000)
    whole = [t.with_columns(launch_row=np.asarray(column(t, "launch_row")) + (i << 40)) for i, t in enumerate(parts)]
    from polyprof.analyze.table import Table  # (the whole read's launch table, end to end)

    _same(got, launch_summary(None, Table.concat(whole)))  # type: ignore[arg-type]


def test_no_launches_is_the_whole_reads_empty_table(tmp_path):
    """Windows without a launch, and no window spilled at all: the table a whole read of no
    launch gives (ranks/stepwise.py takes the merged table as it is; before, nothing
    spilled was None, and stepwise kept an empty table made from an empty launch table)."""
    rng = np.random.default_rng(1)
    whole = launch_summary(None, _launches(rng, 5).head(0))  # type: ignore[arg-type]
    _same(window_reduce.launch_summary(tmp_path, 0), whole)
    names: dict[str, int] = {}
    for i in range(2):
        window_values.spill_launches(_launches(rng, 5).head(0), tmp_path, i, names)
    _same(window_reduce.launch_summary(tmp_path, 2), whole)


def test_merged_launch_state_does_not_grow_with_the_launches(tmp_path, monkeypatch):
    """Merging 40 windows of 40,000 launches holds no more than merging 4: before, the
    windows' launch tables were joined (1.6M rows, ~90 MB), and grew with the rank."""
    monkeypatch.setattr(window_reduce, "CHUNK", 1 << 14)
    monkeypatch.setattr(window_reduce, "COLLECT", 1 << 14)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, few, _ = _merged(tmp_path / "a", 4, 40_000)
    _, many, _ = _merged(tmp_path / "b", 40, 40_000)
    assert many < 2 * few + (1 << 20), (few, many)
    assert many < 8 << 20  # 1.6M launches: under 5 bytes each


def _spilled_pairs(folder, keys: int, per: int, windows: int, seed: int = 0):
    """``windows`` files of (key, value) pairs, ``per`` values of each key in each."""
    rng = np.random.default_rng(seed)
    files = []
    for i in range(windows):
        k = np.repeat(np.arange(keys, dtype=np.int64), per)
        v = rng.integers(1000, 5_000_000, len(k), dtype=np.int64)
        v[:: 7] = 4242  # (ties)
        k.tofile(folder / f"k{i}.bin")
        v.tofile(folder / f"v{i}.bin")
        files.append((folder / f"k{i}.bin", folder / f"v{i}.bin"))
    return files


@pytest.mark.parametrize("keys", [1, 8])
def test_order_stats_collects_each_key_once_and_bounded(tmp_path, monkeypatch, keys):
    """Keys of at most COLLECT values: each key's values are read once for all its wanted
    ranks (median, p99 and the ranks after them), and no more than COLLECT values across
    keys at once. Before, each wanted rank kept its own copy of all its key's values, every
    key at once (a reviewer's 8 keys of 1M launches: peak RSS 68 -> 314 MiB; here 8 keys of
    30,000: ~8 MB traced, now under 1.5 MB). The values are np.sort's."""
    monkeypatch.setattr(window_reduce, "CHUNK", 1 << 13)
    monkeypatch.setattr(window_reduce, "COLLECT", 1 << 15)
    windows, per = 4, 7500
    files = _spilled_pairs(tmp_path, keys, per, windows)
    n = windows * per
    wanted = {}
    for key in range(keys):
        a = np.floor((n - 1) * np.array([0.5, 0.99])).astype(np.int64)
        for r in {*a.tolist(), *np.minimum(a + 1, n - 1).tolist(), 0, n - 1}:
            wanted[(key, r)] = (1000, 5_000_000, n)
    tracemalloc.start()
    try:
        got = window_reduce.order_stats(files, wanted)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    allk = np.concatenate([np.fromfile(k, np.int64) for k, _ in files])
    allv = np.concatenate([np.fromfile(v, np.int64) for _, v in files])
    assert got == {(k, r): int(np.sort(allv[allk == k])[r]) for k, r in wanted}
    held = 8 * window_reduce.COLLECT + 6 * 8 * window_reduce.CHUNK  # the values collected, a chunk's arrays
    assert peak < held + (256 << 10), (peak, held)


def test_order_stats_narrows_large_keys_by_histograms(tmp_path, monkeypatch):
    """Keys of more than COLLECT values: narrowed by histograms, then collected a few
    groups at a time; np.sort's values, ranks of one key in different ranges included."""
    monkeypatch.setattr(window_reduce, "CHUNK", 1 << 12)
    monkeypatch.setattr(window_reduce, "COLLECT", 512)
    files = _spilled_pairs(tmp_path, 3, 4000, 3, seed=5)
    n = 12000
    wanted = {(k, r): (1000, 5_000_000, n) for k in range(3) for r in (0, 1, 5999, 6000, 11879, 11880, n - 1)}
    got = window_reduce.order_stats(files, wanted)
    allk = np.concatenate([np.fromfile(k, np.int64) for k, _ in files])
    allv = np.concatenate([np.fromfile(v, np.int64) for _, v in files])
    assert got == {(k, r): int(np.sort(allv[allk == k])[r]) for k, r in wanted}


def _series(rng: np.random.Generator, windows: int, per: int):
    """Windows' queue series of three streams (sorted by stream, then time), the windows in time order."""
    out = []
    for i in range(windows):
        track = np.sort(rng.integers(0, 3, per))
        ts = np.concatenate([np.sort(rng.integers(0, 10**9, (track == k).sum())) for k in range(3)]) + i * 10**9
        out.append((track, ts, rng.integers(0, 300, per)))
    return out


def test_merged_queue_summary_is_the_whole_tables(tmp_path, monkeypatch):
    """The series end to end, as ``queue_length_summary`` computes its rows (NumPy's mean,
    std, quartiles and time mean of each stream), to the last digit: the standard
    deviation's pairwise sum over chunks of the lengths read back included."""
    monkeypatch.setattr(window_reduce, "CHUNK", 1000)
    rng = np.random.default_rng(3)
    parts = _series(rng, 6, 9000)
    for i, (track, ts, length) in enumerate(parts):
        window_reduce.spill_queues(track, ts, length, tmp_path, i)
    tracks = ["s0", "s1", "s2"]
    got = window_values.queue_summary(None, tmp_path, len(parts), tracks, ["gpu"], np.zeros(3, np.int64))  # type: ignore[arg-type]
    rows = [r for r in zip(*(column(got, c).tolist() for c in got.columns))]
    for k, r in enumerate(rows):
        x = np.concatenate([length[track == k] for track, _, length in parts]).astype(np.float64)
        ts = np.concatenate([t[track == k] for track, t, _ in parts])
        dt = np.diff(ts)
        want = ("gpu", tracks[k], len(x), float(x.mean()), float(x.std(ddof=1)), float(x.min()),
                *map(float, quartiles(x)), float(x.max()), float((x[:-1] * dt).sum() / dt.sum()))
        assert r == want
    assert len(rows) == 3


@pytest.mark.parametrize("n", [1, 2, 7])
def test_short_queue_series(tmp_path, n):
    """A stream of one change has no standard deviation; few changes, exact quartiles."""
    track, ts, length = np.zeros(n, np.int64), np.arange(n, dtype=np.int64) * 10, np.arange(n, dtype=np.int64) % 3
    window_reduce.spill_queues(track, ts, length, tmp_path, 0)
    got = window_values.queue_summary(None, tmp_path, 1, ["s"], ["gpu"], np.zeros(1, np.int64))  # type: ignore[arg-type]
    x = length.astype(np.float64)
    assert column(got, "p25").tolist() + column(got, "p75").tolist() == [float(v) for v in quartiles(x)[[0, 2]]]
    assert (n == 1) == bool(np.isnan(column(got, "std")[0]))
