"""Lanes for slices that overlap without nesting, shared by the Chrome JSON and Perfetto
exports (``formats/chrome.py``, ``writers/perfetto.py``).

A viewer's thread or track is a stack: a slice that starts inside another of its track
and ends after it cannot be drawn there (Perfetto's JSON importer spills it onto an
overflow track with an import error, older versions drop it; chrome://tracing flags it).
Both exports put such slices on an extra thread or child track "<track> (overlap k)":
:func:`slice_lanes` gives every event its lane, 0 where the track's events nest.
Both of polyprof's readers put a lane's events back on its track (:data:`LANE`: the
lane's name, :func:`lane_name`, read back; the Kineto reader in a file polyprof wrote). Tracks
where everything nests (most) cost one NumPy pass; the first-fit search runs only on
the tracks that cross (the TPU and MTIA traces have some).
"""

from __future__ import annotations

import logging
import re

import numpy as np

from ..trace.sorting import member, unique

log = logging.getLogger("polyprof")

#: a lane's name, read back: group 1 is its track's (:func:`lane_name`)
LANE = re.compile(r"^(.*) \(overlap \d+\)$")


def lane_name(track: str, lane: int) -> str:
    """The name of lane ``lane`` (> 0) of a track named ``track``."""
    return f"{track} (overlap {lane})"

#: lanes searched one by one before the search goes to NumPy; slices past the last lane share it
SCAN_LANES, MAX_LANES = 16, 256


def lane_pairs(track: np.ndarray, lane: np.ndarray) -> list[tuple[int, int]]:
    """The distinct (track, lane) pairs of lanes above 0, ascending: the extra tracks to write."""
    has = lane > 0
    if not has.any():
        return []
    pairs = unique(track[has].astype(np.int64) * MAX_LANES + lane[has])
    return [(int(p) // MAX_LANES, int(p) % MAX_LANES) for p in pairs]


def slice_lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray, by_rank: np.ndarray,
                label: str) -> np.ndarray:
    """Lane of every event on its track: 0 where events nest, k > 0 for events that would
    cross the stack of lanes 0..k-1 (partial overlaps). Zero-duration events stay in lane 0.
    ``by_rank``: the events by (start, longest first), as the writer orders them;
    ``label``: the format, named in the warning when lanes run out."""
    lane = np.zeros(len(track), np.int64)
    bad = _crossing_tracks(track, start, end)
    if not len(bad):
        return lane
    order = by_rank[np.argsort(track[by_rank], kind="stable")]  # by track, then start, longest first
    order = order[member(track[order], bad)]
    tr, s, e = track[order], start[order], end[order]
    slice_ = e > s
    crowded = 0
    cut = np.flatnonzero(tr[1:] != tr[:-1]) + 1
    for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, len(tr)].tolist()):
        seg = np.flatnonzero(slice_[lo:hi]) + lo
        idx, lanes, full = stack_lanes(s[seg].tolist(), e[seg].tolist())
        if lanes.any():
            lane[order[seg[idx]]] = lanes[idx]
        crowded += full
    if crowded:
        log.warning("%s: more than %d overlapping lanes on %d track(s); the rest share lane %d",
                    label, MAX_LANES - 1, crowded, MAX_LANES - 1)
    return lane


def _crossing_tracks(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Tracks where some slice crosses another (starts inside it, ends after it).

    With spans ordered by (track, start, longest first) and their nesting depth, the
    spans nest iff each one ends within the last span before it one level up (the first
    crossing span would otherwise have a crossing parent, which comes earlier)."""
    from ..derive.intervals import nesting_depth  # (the writers' alone: a reader asks only LANE)

    order, _, depth = nesting_depth(track, start, end)
    if not len(order):
        return np.zeros(0, np.int64)
    tr, e = track[order], end[order]
    # each span's parent: the last span before it one level up, found for all levels at
    # once among the spans keyed by (depth, position) (a loop per level was quadratic in
    # the depth: 200,000 unended B events on one thread took 14 s)
    n = len(order) + 1
    depth = depth.astype(np.int64)
    keys = np.sort(depth * n + np.arange(len(order), dtype=np.int64))
    ch = np.flatnonzero(depth > 0)
    j = np.searchsorted(keys, (depth[ch] - 1) * n + ch) - 1
    found = keys[np.maximum(j, 0)]
    p = found % n
    wrong = (j < 0) | (found < (depth[ch] - 1) * n) | (tr[p] != tr[ch]) | (e[ch] > e[p])
    # a slice starting exactly where an open one ends is not counted as inside it
    return unique(tr[ch[wrong]])  # sorted: np.unique's first call imports numpy.ma


def stack_lanes(starts: list[int], ends: list[int]) -> tuple[np.ndarray, np.ndarray, bool]:
    """Lanes for slices sorted by (start, longest first) so that each lane is a stack:
    each slice goes to the first lane whose open slices all contain it. Linear in the
    slices for a bounded number of lanes: beyond ``SCAN_LANES`` lanes the first fit is
    found over a NumPy array of the lanes' innermost open ends, and past ``MAX_LANES``
    slices share the last lane (then the third value is True)."""
    stacks: list[list[int]] = [[]]
    out = np.zeros(len(starts), np.int64)
    for i, (s, e) in enumerate(zip(starts, ends)):
        for k, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or e <= st[-1]:
                st.append(e)
                out[i] = k
                break
        else:
            if len(stacks) == SCAN_LANES:
                full = _stack_lanes_wide(starts, ends, i, stacks, out)
                return np.flatnonzero(out), out, full
            stacks.append([e])
            out[i] = len(stacks) - 1
    return np.flatnonzero(out), out, False



def _stack_lanes_wide(starts: list[int], ends: list[int], first: int, stacks: list[list[int]],
                      out: np.ndarray) -> bool:
    """:func:`stack_lanes` from slice ``first`` on, when the lanes are many; True if
    some slice fitted in none of the ``MAX_LANES``."""
    full = False
    empty = np.iinfo(np.int64).max
    top = np.full(MAX_LANES, empty, np.int64)  # each lane's innermost open end (empty: any slice fits)
    for k, st in enumerate(stacks):
        top[k] = st[-1] if st else empty
    stacks.extend([] for _ in range(MAX_LANES - len(stacks)))
    for i in range(first, len(starts)):
        s, e = starts[i], ends[i]
        for k in np.flatnonzero(top <= s).tolist():  # lanes whose innermost slices ended
            st = stacks[k]
            while st and st[-1] <= s:
                st.pop()
            top[k] = st[-1] if st else empty
        fit = np.flatnonzero(top >= e)
        if not len(fit):
            out[i] = MAX_LANES - 1  # crosses every lane: shares the last (warned)
            full = True
            continue
        k = int(fit[0])
        stacks[k].append(e)
        top[k] = e
        out[i] = k
    return full
