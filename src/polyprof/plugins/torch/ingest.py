"""One torch recording (a Kineto Trace) re-homed into the session: the session clock,
polyprof's host plane and the host plugin's thread tracks, without the plugin's clock
markers and its copies of polyprof sections and steps; torch's ``ProfilerStep#N`` ->
step N."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ...collect.plugin import SessionContext
from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.clock import ClockFit
from ...trace.core import Trace
from ...trace.vocabulary import PROFILER_STEP_PREFIX
from .align import Capture, describe, fit_alignment, fit_pairs, wall_alignment
from .memory import snap_to_sections
from ...trace import metadata_keys as mkeys

#: name of the ranges used to measure the Kineto <-> session clock offset
SYNC_NAME = "polyprof::clock_sync"
STEP_PREFIX = PROFILER_STEP_PREFIX
_ANNOTATION_CATEGORIES = ("user_annotation",)


def ingest_kineto(t: Trace, cap: Capture, mirrors: list[tuple[int, str, int, int]],
                  thread_names: dict[int, str], ctx: SessionContext | None,
                  host_has_steps: bool, sections: tuple[list, dict] | None = None) -> tuple[Trace, dict[str, Any]]:
    """Re-home one Kineto trace into the session: session clock, the host plane and
    the host plugin's thread tracks, without our markers and section copies. With the
    host ``sections`` (the recorder's tuples and threads), allocations inside a section's
    copy are kept inside the section (``memory.snap_to_sections``)."""
    n = t.n_events
    is_sync = t.events["name"] == t.string_id(SYNC_NAME)  # ids, not an object array of every name
    sync_rows = np.flatnonzero(is_sync)
    align = fit_alignment(cap.samples, t.start_ns[sync_rows]) if len(sync_rows) else None
    wall = wall_alignment(t, ctx)
    if align is None:
        align = wall
    start = align.to_host(t.start_ns) if n else np.zeros(0, np.int64)

    b = TraceBuilder()
    # the reader names the recording process /host:CPU (other processes /host:CPU:<pid>)
    host_planes = {p.id for p in t.planes if p.name == keys.HOST_PLANE}
    pmap, tmap, track_tid = _planes_and_tracks(b, t, host_planes, thread_names)

    keep = ~is_sync
    dropped_copies = 0
    if n and mirrors:
        drop, brackets = _mirror_rows(t, start, mirrors, int(math.ceil(align.bound_ns)), host_planes,
                                      track_tid)
        keep[drop] = False
        dropped_copies = len(drop)
        if align.method == "paired_markers" and len(drop):
            align = _refit(t, cap, sync_rows, drop, brackets, align)
            start = align.to_host(t.start_ns)
        if sections is not None and len(drop):
            start = snap_to_sections(t, start, drop, brackets, sections[0], sections[1], track_tid)
    program_steps = 0
    if cap.handed and n:  # ProfilerStep#N its profiler opened while ours recorded: its steps, not the session's
        ids = [k for k, x in enumerate(t.strings) if x.startswith(STEP_PREFIX)]
        theirs = keep & np.isin(t.events["name"], ids)
        keep &= ~theirs
        program_steps = int(theirs.sum())
    rows = np.flatnonzero(keep)
    _copy_rows(b, t, rows, start, tmap)
    _steps(b, t, rows, start, host_has_steps)
    _flows_and_counters(b, t, keep, rows, pmap, align)
    info = {"capture": cap.index, **describe(align, wall if align is not wall else None), "events": int(len(rows)),
            "dropped_section_copies": int(dropped_copies), "sync_markers": int(len(sync_rows)),
            "dropped_program_steps": program_steps}
    if t.metadata.get(mkeys.WARNINGS):
        b.metadata[mkeys.WARNINGS] = [f"torch: {w}" for w in t.metadata[mkeys.WARNINGS]]
    b.metadata[mkeys.TORCH] = {k: v for k, v in t.metadata.items()
                           if k in ("deviceProperties", "distributedInfo", "schemaVersion", "trace_id",
                                    "baseTimeNanoseconds", "displayTimeUnit", "host_name",
                                    "rank", "world_size", "backend")}
    dist = t.metadata.get(mkeys.DISTRIBUTED_INFO)
    if isinstance(dist, dict):  # as a Kineto file's: the groups analyze/process_groups.py reads, in every export
        b.metadata[mkeys.DISTRIBUTED_INFO] = dist
    return b.build(), info


def _planes_and_tracks(b: TraceBuilder, t: Trace, host_planes: set[int], thread_names: dict[int, str]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch's host process -> polyprof's host plane, its threads -> the host plugin's
    thread tracks; other planes and tracks as they are. (plane map, track map, tid per
    track)."""
    pid = os.getpid()
    pmap = np.zeros(max(1, len(t.planes)), np.int32)
    for p in t.planes:
        if p.id in host_planes:
            pmap[p.id] = b.plane(keys.HOST_PLANE, "host", pid=pid, properties={})
        else:
            pmap[p.id] = b.plane(p.name, p.kind, p.vendor, p.index, p.pid, p.properties)
    tmap = np.zeros(max(1, len(t.tracks)), np.int32)
    track_tid = np.zeros(max(1, len(t.tracks)), np.int64)
    for tr in t.tracks:
        track_tid[tr.id] = tr.tid
        if tr.plane in host_planes and tr.tid > 0:
            nm = thread_names.get(tr.tid, tr.name)
            tmap[tr.id] = b.track(int(pmap[tr.plane]), nm, "thread", tr.tid, tr.sort_index, tr.properties)
        else:
            tmap[tr.id] = b.track(int(pmap[tr.plane]), tr.name, tr.kind, tr.tid, tr.sort_index, tr.properties)
    return pmap, tmap, track_tid


def _refit(t: Trace, cap: Capture, sync_rows: np.ndarray, drop: np.ndarray, brackets: np.ndarray,
           align: ClockFit) -> ClockFit:
    """torch's copy of each section began inside the bracket of our enter call: more
    clock samples, spread over the whole recording; the tighter fit of the two."""
    sa = np.asarray(sorted(cap.samples), np.int64)
    k_all = np.concatenate([np.sort(t.start_ns[sync_rows]), t.start_ns[drop]])
    a_all = np.concatenate([sa[:, 0], brackets[:, 0]])
    b_all = np.concatenate([sa[:, 1], brackets[:, 1]])
    better = fit_pairs(a_all, b_all, k_all, "paired_markers+sections")
    return better if better is not None and better.bound_ns <= align.bound_ns else align


def _copy_rows(b: TraceBuilder, t: Trace, rows: np.ndarray, start: np.ndarray, tmap: np.ndarray) -> None:
    """The kept events (``rows``, in order) and their stats, at their session times."""
    ev = t.events
    smap = np.fromiter((b.intern(x) for x in t.strings), np.int32, len(t.strings))
    base = b.n_events
    if len(rows):
        b.events(tmap[ev["track"][rows]], smap[ev["name"][rows]], start[rows], ev["dur_ns"][rows],
                 smap[ev["category"][rows]])
    b.add_stats(t.stats, t.n_events, rows, base)  # torch's args stay undecoded until asked for


def _new_rows(keep: np.ndarray, rows: np.ndarray) -> np.ndarray:
    newrow = np.full(len(keep), -1, np.int64)
    newrow[rows] = np.arange(len(rows))
    return newrow


def _steps(b: TraceBuilder, t: Trace, rows: np.ndarray, start: np.ndarray, host_has_steps: bool) -> None:
    """ProfilerStep#N -> step N (and a Steps line when polyprof.step() made none)."""
    ev = t.events
    step_ids = [i for i, x in enumerate(t.strings) if x.startswith(STEP_PREFIX)]
    if not step_ids or not len(rows):
        return
    step_local = np.flatnonzero(np.isin(ev["name"][rows], step_ids))
    if not len(step_local):
        return
    nums = np.array([_step_num(t.strings[i]) for i in ev["name"][rows[step_local]]], np.int64)
    ok = nums >= 0
    step_local, nums = step_local[ok], nums[ok]
    # the materialised columns only: asking the deferred args would fetch them all from
    # torch (activities.py); torch gives its ProfilerStep ranges no "step" arg
    if len(step_local) and keys.STEP not in t.stats.loaded():
        b.add_stat(keys.STEP, step_local, nums)
    if len(step_local) and not host_has_steps:
        src = rows[step_local]
        host = b.plane(keys.HOST_PLANE, "host", pid=os.getpid())
        st = b.track(host, keys.LINE_STEPS, "steps", tid=0, sort_index=-1)
        b.events(st, np.array([f"step {k}" for k in nums], object), start[src], ev["dur_ns"][src],
                 keys.CAT_STEP, stats={keys.STEP: nums})


def _flows_and_counters(b: TraceBuilder, t: Trace, keep: np.ndarray, rows: np.ndarray, pmap: np.ndarray,
                        align: ClockFit) -> None:
    fl = t.flows
    if len(fl["src"]):
        ok = keep[fl["src"]] & keep[fl["dst"]]
        if ok.any():
            newrow = _new_rows(keep, rows)
            fcat = np.asarray(t.strings, dtype=object)[fl["category"][ok]]
            for cat in np.unique(fcat):
                m = fcat == cat
                b.flows(newrow[fl["src"][ok][m]], newrow[fl["dst"][ok][m]], fl["id"][ok][m], str(cat))
    c = t.counters
    if len(c["ts_ns"]):
        for nid in np.unique(c["name"]):
            m = c["name"] == nid
            for pl in np.unique(c["plane"][m]):
                mm = m & (c["plane"] == pl)
                b.counter(int(pmap[pl]), t.strings[nid], align.to_host(c["ts_ns"][mm]), c["value"][mm])


def _step_num(name: str) -> int:
    try:
        return int(name[len(STEP_PREFIX):])
    except ValueError:
        return -1


def _mirror_rows(t: Trace, start: np.ndarray, mirrors: list[tuple[int, str, int, int]],
                 unc: int, host_planes: set[int], track_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of torch's copies of polyprof sections: user_annotation ranges with the
    section's name, on its thread, starting inside the bracket of the mirror call;
    with the (before, after) bracket each one matched."""
    cat_ids = [t.string_id(c) for c in _ANNOTATION_CATEGORIES]
    cand = np.flatnonzero(np.isin(t.events["category"], cat_ids))
    if not len(cand):
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    tr = t.events["track"][cand]
    on_host = np.isin(t.track_plane[tr], list(host_planes))
    cand = cand[on_host]
    groups: dict[tuple[int, str], list[int]] = {}
    tids = track_tid[t.events["track"][cand]]
    for row, tid, nm in zip(cand.tolist(), tids.tolist(), t.names(cand).tolist()):
        groups.setdefault((tid, nm), []).append(row)
    slack = 2 * unc + 20_000
    drop: list[int] = []
    matched: list[tuple[int, int]] = []
    by_group: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for tid, nm, a, bb in mirrors:
        by_group.setdefault((tid, nm), []).append((a, bb))
    for key, brackets in by_group.items():
        rows = groups.get(key)
        if not rows:
            continue
        rows_arr = np.asarray(rows, np.int64)
        rows_arr = rows_arr[np.argsort(start[rows_arr], kind="stable")]
        st_arr = start[rows_arr]
        br = sorted(brackets)
        first = st_arr.searchsorted(np.array([a for a, _ in br], np.int64) - slack).tolist()
        st, row_list = st_arr.tolist(), rows_arr.tolist()
        used = [False] * len(st)
        for (a, bb), i in zip(br, first):
            while i < len(st) and st[i] <= bb + slack:
                if not used[i]:
                    used[i] = True
                    drop.append(row_list[i])
                    matched.append((a, bb))
                    break
                i += 1
    return np.asarray(drop, np.int64), np.asarray(matched, np.int64).reshape(-1, 2)
