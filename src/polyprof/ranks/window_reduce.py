"""The launch and queue-length tables of a rank summarised window by window, from
per-window reductions whose merged state does not grow with the rank's launches
(``ranks/window_values.py``, ``ranks/stepwise.py``).

- **Launches** (``launch_summary``): each window writes, per (plane, launch call name),
  its count, distinct launch calls, graph launches, the sums of the calls' and the
  activities' durations and its smallest and largest launch delay
  (:func:`spill_launches`), and its (key, delay) pairs to a raw file on disk. The
  merge adds the counts and sums (exact: integers) and finds each key's median and p99
  delay by a selection over the files (:func:`order_stats`: a histogram of at most
  :data:`BINS` bins per pass narrows the range that holds each wanted rank until
  :data:`COLLECT` values or fewer are left, then read once for all the key's ranks in
  it, a few keys at a time), so memory holds a chunk of :data:`CHUNK` pairs and at most
  :data:`COLLECT` collected values, never every launch; the values are those
  ``group_stats`` gives read whole, to the last digit.
- **Queue lengths** (``queue_length_summary``): each window writes per stream its
  changes, the sum of the lengths, their histogram (bounded by the lengths a queue
  reaches, not by the launches), its first and last change and the length-weighted
  time between its changes (:func:`spill_queues`), and its lengths in order to a raw
  file. The merge joins the streams' windows end to end (the time from a window's last
  change to the next window's first is weighted by the last length), takes the
  quartiles from the merged histogram and the standard deviation by NumPy's own
  pairwise summation over the lengths read back a chunk at a time
  (:func:`_pairwise_squares`): the table read whole, to the last digit (the time mean
  exactly while a stream's length-weighted time stays below 2**53).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np

from ..analyze.frames import column, empty_frame, factorize, frame, rows_frame
from ..analyze.grouping import group_reduce, group_stats
from ..analyze.ops import first_of_each
from ..analyze.ordering import order_desc
from ..analyze.queues import SUMMARY
from ..analyze.table import Table

#: values read from a spilled file at once
CHUNK = 1 << 20
#: histogram bins per pass of :func:`order_stats`
BINS = 1 << 16
#: at most this many values left in a wanted rank's range: they are read and partitioned
COLLECT = 1 << 20
#: the launch names and their order of first appearance (``launch_summary`` orders ties by it)
LAUNCH_NAMES = "launch-names.json"
#: a launch key: its plane's name code times this plus its launch call name's code
KEY_BASE = 1 << 32
#: the columns of ``launch_summary`` (``analyze.ops``)
LAUNCH_COLUMNS = ("plane", "launch_name", "count", "launches", "graph_launches", "cpu_mean_ns", "device_mean_ns",
                  "delay_median_ns", "delay_p99_ns")
#: per key of a window's launches: count, launches, graph launches, call and activity time, least and most delay
LAUNCH_PARTS = ("count", "launches", "graph_launches", "cpu_ns", "device_ns", "min", "max")


def spill_launches(launches: Table, folder: Path, i: int, names: dict[str, int]) -> None:
    """Write window ``i``'s launch table (one row per launched activity) reduced per
    (plane, launch call name) as ``launch_summary`` groups it, and its (key, delay) pairs."""
    path = folder / LAUNCH_NAMES
    seen = json.loads(path.read_text()) if path.exists() else {"planes": [], "names": []}
    codes = {}
    for c, kind in (("plane", "planes"), ("launch_name", "names")):
        at, distinct = factorize(np.asarray(column(launches, c), object))  # (first appearance: launch_summary's order)
        to = np.array([names.setdefault(x, len(names)) for x in distinct.tolist()], np.int64)
        known = set(seen[kind])
        seen[kind] += [x for x in to.tolist() if x not in known]
        codes[c] = to[at] if len(at) else np.zeros(0, np.int64)
    seen["text"] = list(names)
    path.write_text(json.dumps(seen))
    key = codes["plane"] * KEY_BASE + codes["launch_name"]
    delay = np.asarray(column(launches, "launch_delay_ns"), np.int64)
    key.tofile(folder / f"launch-k-{i}.bin")
    delay.tofile(folder / f"launch-v-{i}.bin")
    g = group_stats(key, delay)
    o, st = g["order"], g["starts"]
    row = np.asarray(column(launches, "launch_row"), np.int64)
    first = first_of_each(codes["plane"] * (int(row.max()) + 1 if len(row) else 1) + row).astype(np.int64)
    graph = (first * np.asarray(column(launches, "graph_launch"), np.int64) if "graph_launch" in launches.columns
             else first * 0)
    parts = [g["count"], group_reduce(o, st, first, np.add), group_reduce(o, st, graph, np.add),
             group_reduce(o, st, np.asarray(column(launches, "cpu_duration_ns"), np.int64) * first, np.add),
             group_reduce(o, st, np.asarray(column(launches, "device_duration_ns"), np.int64), np.add),
             g["min"], g["max"]]
    np.save(folder / f"launch-parts-{i}.npy", np.stack([g["key"].astype(np.int64), *(np.asarray(p, np.int64)
                                                                                    for p in parts)]))


def launch_summary(folder: Path, windows: int) -> Table:
    """``launch_summary`` of the rank from its windows' reductions (:func:`spill_launches`;
    empty, as ``analyze.ops.launch_summary`` of no launch, where none were spilled)."""
    path = folder / LAUNCH_NAMES
    none = empty_frame(list(LAUNCH_COLUMNS), LAUNCH_COLUMNS[:2], np.float64)  # (as launch_summary's)
    if not windows or not path.exists():
        return none
    seen = json.loads(path.read_text())
    parts = np.concatenate([np.load(folder / f"launch-parts-{i}.npy") for i in range(windows)], axis=1)
    if not parts.shape[1]:
        return none
    g = group_stats(parts[0], np.zeros(parts.shape[1], np.int64))
    o, st = g["order"], g["starts"]
    total = dict(zip(LAUNCH_PARTS, (group_reduce(o, st, parts[1 + k], np.minimum if c == "min" else
                                                 np.maximum if c == "max" else np.add)
                                    for k, c in enumerate(LAUNCH_PARTS))))
    key = g["key"]
    n = total["count"]
    wanted = {}
    for k, c, lo, hi in zip(key.tolist(), n.tolist(), total["min"].tolist(), total["max"].tolist()):
        pos = (np.int64(c) - 1) * np.array([0.5, 0.99])
        a = np.floor(pos).astype(np.int64)
        for r in {*a.tolist(), *np.minimum(a + 1, c - 1).tolist()}:
            wanted[(k, r)] = (lo, hi, c)
    got = order_stats([(folder / f"launch-k-{i}.bin", folder / f"launch-v-{i}.bin") for i in range(windows)], wanted)
    q = {}
    for name, frac in (("median", 0.5), ("p99", 0.99)):
        pos = (n - 1) * frac
        a = np.floor(pos).astype(np.int64)
        va = np.array([got[(k, r)] for k, r in zip(key.tolist(), a.tolist())], np.int64).astype(np.float64)
        vb = np.array([got[(k, r)] for k, r in zip(key.tolist(), np.minimum(a + 1, n - 1).tolist())],
                      np.int64).astype(np.float64)
        q[name] = va + (vb - va) * (pos - a)  # (as analyze.grouping._quantile)
    text = np.empty(len(seen["text"]), object)
    text[:] = seen["text"]
    plane, call = np.divmod(key, KEY_BASE)
    rank = {c: i for i, c in enumerate(seen["planes"])}, {c: i for i, c in enumerate(seen["names"])}
    # launch_summary's groups: planes, then names, in order of first appearance; then by count, most first
    at = np.array([rank[0][p] * KEY_BASE + rank[1][m] for p, m in zip(plane.tolist(), call.tolist())], np.int64)
    order = np.argsort(at, kind="stable")
    order = order[order_desc(n[order])]
    calls = total["launches"]
    return frame({"plane": text[plane], "launch_name": text[call], "count": n, "launches": calls,
                  "graph_launches": total["graph_launches"], "cpu_mean_ns": total["cpu_ns"] / calls,
                  "device_mean_ns": total["device_ns"] / n, "delay_median_ns": q["median"],
                  "delay_p99_ns": q["p99"]}, order=order)


def _chunks(files: list[tuple[Path, Path]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, values) of the spilled files, :data:`CHUNK` pairs at a time (read, not mapped:
    a mapped file's pages would count in the process's memory)."""
    for kf, vf in files:
        n = kf.stat().st_size // 8
        for a in range(0, n, CHUNK):
            yield (np.fromfile(kf, np.int64, min(CHUNK, n - a), offset=8 * a),
                   np.fromfile(vf, np.int64, min(CHUNK, n - a), offset=8 * a))


def order_stats(files: list[tuple[Path, Path]], wanted: dict[tuple[int, int], tuple[int, int, int]]
                ) -> dict[tuple[int, int], int]:
    """The value of rank ``r`` (0: the least) among the values of key ``k`` in the spilled
    (key, value) ``files``, for each ``(k, r)`` of ``wanted`` (given the key's least and most
    value and its count). The ranks of one key whose ranges are the same are one group
    (a key's median and p99 and the ranks after them start as one). Each pass over the
    files narrows the range of each group of more than :data:`COLLECT` values by a
    histogram of :data:`BINS` bins, and reads the values of groups of fewer, as many
    groups as hold :data:`COLLECT` values together (one group at least), each into one
    array of its exact count, partitioned in place at all its ranks at once: the values
    held at once are at most :data:`COLLECT` (before, every wanted rank of a key of up to
    :data:`COLLECT` values had its own copy of all of them, every key at once)."""
    state = {t: (lo, hi, t[1], c) for t, (lo, hi, c) in wanted.items()}  # range, rank within it, values in it
    out: dict[tuple[int, int], int] = {}
    while state:
        out.update({t: lo for t, (lo, hi, _, _) in state.items() if lo == hi})
        groups: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        for t, (lo, hi, _, _) in state.items():
            if lo != hi:
                groups.setdefault((t[0], lo, hi), []).append(t)
        state = {t: state[t] for ts in groups.values() for t in ts}
        if not groups:
            break
        count = {g: state[ts[0]][3] for g, ts in groups.items()}
        shift = {g: max(0, (g[2] - g[1]).bit_length() - 16) for g in groups if count[g] > COLLECT}
        hist = {g: np.zeros(((g[2] - g[1]) >> s) + 1, np.int64) for g, s in shift.items()}
        kept: dict[tuple[int, int, int], np.ndarray] = {}
        held = 0
        for g in groups:
            if g not in shift and (not kept or held + count[g] <= COLLECT):
                kept[g] = np.empty(count[g], np.int64)
                held += count[g]
        filled = dict.fromkeys(kept, 0)
        for g, v in _group_values(files, [*hist, *kept]):
            if g in shift:
                hist[g] += np.bincount((v - g[1]) >> shift[g], minlength=len(hist[g]))
            else:
                kept[g][filled[g]:filled[g] + len(v)] = v
                filled[g] += len(v)
        for g, v in kept.items():
            ranks = sorted({state[t][2] for t in groups[g]})
            v.partition(ranks)
            for t in groups[g]:
                out[t] = int(v[state[t][2]])
                del state[t]
        kept.clear()
        for g, h in hist.items():
            cum = np.cumsum(h)
            for t in groups[g]:
                lo, hi, r, _ = state[t]
                b = int(np.searchsorted(cum, r, side="right"))
                below = int(cum[b - 1]) if b else 0
                start = lo + (b << shift[g])
                state[t] = (start, min(hi, start + (1 << shift[g]) - 1), r - below, int(h[b]))
    return out


def _group_values(files: list[tuple[Path, Path]], groups: list[tuple[int, int, int]]
                  ) -> Iterator[tuple[tuple[int, int, int], np.ndarray]]:
    """Per chunk of the spilled files, each group's (key, least, most) values in it: the
    chunk's pairs of the groups' keys sorted by key once, each group's a slice of them."""
    keys = np.array(sorted({g[0] for g in groups}), np.int64)
    for k, v in _chunks(files):
        mine = np.isin(k, keys)
        k, v = k[mine], v[mine]
        order = np.argsort(k, kind="stable")
        k, v = k[order], v[order]
        del order, mine
        for g in groups:
            a, b = np.searchsorted(k, [g[0], g[0] + 1])
            x = v[a:b]
            yield g, x[(x >= g[1]) & (x <= g[2])]


def spill_queues(track: np.ndarray, ts: np.ndarray, length: np.ndarray, folder: Path, i: int) -> None:
    """Write window ``i``'s queue-length series (``queues._series``: sorted by stream, then
    time) reduced per stream, and its lengths in that order."""
    length = length.astype(np.int64)
    length.tofile(folder / f"queue-len-{i}.bin")
    starts = np.flatnonzero(np.concatenate([[True], track[1:] != track[:-1]])) if len(track) else np.zeros(0, np.int64)
    ends = np.append(starts[1:], len(track)).astype(np.int64)
    dt = np.diff(ts.astype(np.int64))
    weighted = np.concatenate([[0], np.cumsum(length[:-1] * dt)]) if len(track) else np.zeros(0, np.int64)
    lo = np.minimum.reduceat(length, starts) if len(starts) else starts
    hi = np.maximum.reduceat(length, starts) if len(starts) else starts
    hist = [np.bincount(length[a:b] - m) for a, b, m in zip(starts.tolist(), ends.tolist(), lo.tolist())]
    np.save(folder / f"queue-{i}.npy", np.stack([
        np.asarray(track, np.int64)[starts], ends - starts, np.add.reduceat(length, starts) if len(starts) else starts,
        lo, hi, weighted[ends - 1] - weighted[starts], np.asarray(ts, np.int64)[starts],
        np.asarray(ts, np.int64)[ends - 1], length[ends - 1], starts,
        np.array([len(h) for h in hist], np.int64)]) if len(starts) else np.zeros((11, 0), np.int64))
    np.save(folder / f"queue-hist-{i}.npy", np.concatenate(hist) if hist else np.zeros(0, np.int64))


class _Stream:
    """One stream's queue series over the windows so far, reduced."""

    def __init__(self) -> None:
        self.n = self.total = self.weighted = self.span = 0
        self.lo = 0
        self.hist = np.zeros(0, np.int64)  # counts of lengths from self.lo (none yet: empty)
        self.last: tuple[int, int] | None = None  # time and length of the last change
        self.pieces: list[tuple[int, int, int]] = []  # (window, first row in its length file, rows)

    def add(self, i: int, row: np.ndarray, hist: np.ndarray) -> None:
        n, total, lo, _, weighted, first_ts, last_ts, last_len, start, _ = (int(x) for x in row[1:11])
        if self.last is not None:  # the time from the last window's last change to this one's first
            self.weighted += self.last[1] * (first_ts - self.last[0])
            self.span += first_ts - self.last[0]
        self.n += n
        self.total += total
        self.weighted += weighted
        self.span += last_ts - first_ts
        self.last = (last_ts, last_len)
        self.pieces.append((i, start, n))
        base = min(self.lo, lo) if len(self.hist) else lo
        size = max(self.lo - base + len(self.hist), lo - base + len(hist))
        merged = np.zeros(size, np.int64)
        merged[self.lo - base:self.lo - base + len(self.hist)] += self.hist
        merged[lo - base:lo - base + len(hist)] += hist
        self.lo, self.hist = base, merged


def queue_summary(table: Table, folder: Path, windows: int, trace_tracks: list[str], planes: list[str],
                  track_plane: np.ndarray) -> Table:
    """``queue_length_summary`` of the windows' series end to end (as the table makes it)."""
    streams: dict[int, _Stream] = {}
    for i in range(windows):
        parts, hist = np.load(folder / f"queue-{i}.npy"), np.load(folder / f"queue-hist-{i}.npy")
        at = np.concatenate([[0], np.cumsum(parts[10])]) if parts.shape[1] else np.zeros(1, np.int64)
        for j in range(parts.shape[1]):
            streams.setdefault(int(parts[0, j]), _Stream()).add(i, parts[:, j], hist[at[j]:at[j + 1]])
    if not streams:
        return table
    out = []
    for track in sorted(streams):
        s = streams[track]
        mean = np.float64(s.total) / s.n  # (NumPy's mean of integers: their exact sum over n)
        std = (float(np.sqrt(_pairwise_squares(folder, s.pieces, 0, s.n, mean) / (s.n - 1))) if s.n > 1
               else np.nan)
        tm = float(np.float64(s.weighted) / np.float64(s.span)) if s.span > 0 else float(mean)
        out.append((planes[int(track_plane[track])], trace_tracks[track], s.n, float(mean), std,
                    float(s.lo), *map(float, _hist_quartiles(s.hist, s.lo, s.n)), float(s.lo + len(s.hist) - 1), tm))
    return rows_frame(out, SUMMARY)


def _hist_quartiles(hist: np.ndarray, lo: int, n: int) -> np.ndarray:
    """``analyze.queues.quartiles`` of the ``n`` values counted by ``hist`` (from ``lo``)."""
    virtual = (n - 1) * np.array([0.25, 0.5, 0.75])
    prev = np.floor(virtual)
    nxt = prev + 1
    last = virtual >= n - 1
    prev[last] = -1
    nxt[last] = -1
    cum = np.cumsum(hist)
    a, b = (np.searchsorted(cum, x.astype(np.int64) % n, side="right").astype(np.float64) + lo for x in (prev, nxt))
    t = virtual - prev
    d = b - a
    out = a + d * t
    np.subtract(b, d * (1 - t), out=out, where=t >= 0.5)
    return out


def _pairwise_squares(folder: Path, pieces: list[tuple[int, int, int]], at: int, n: int, mean: np.float64) -> float:
    """The sum of ``(x - mean)**2`` over the stream's lengths ``at`` to ``at + n``, added as
    NumPy's pairwise summation adds them in one array (its halves split at a multiple of 8
    above :data:`CHUNK` values; below, NumPy's own sum of the chunk), so ``std`` is the
    whole read's to the last digit."""
    if n > CHUNK:
        half = n // 2
        half -= half % 8
        return (_pairwise_squares(folder, pieces, at, half, mean)
                + _pairwise_squares(folder, pieces, at + half, n - half, mean))
    got, seen = [], 0
    for i, start, rows in pieces:
        a, b = max(at, seen), min(at + n, seen + rows)
        if a < b:
            got.append(np.fromfile(folder / f"queue-len-{i}.bin", np.int64, b - a, offset=8 * (start + a - seen)))
        seen += rows
    d = np.concatenate(got).astype(np.float64) - mean
    return float(np.add.reduce(d * d))
