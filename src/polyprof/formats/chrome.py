"""Chrome trace JSON (Perfetto, chrome://tracing): one process per plane, one thread
per track, complete events, instants, counters and flows (one id each; correlation,
external and flow ids unique per source: ``export_ids.py``). ``.gz`` names are gzipped.
A thread is a stack in both viewers: a slice that starts inside another of its track and
ends after it goes to an extra thread "<track> (overlap k)" beside it, by the rule the
Perfetto export's child tracks follow (``slice_lanes.py``), so every thread nests.
Times are microseconds from the trace's first record, event or counter sample (a
session's process counters begin before its first event), so none is negative; the
absolute origin is kept in ``otherData`` (``origin_ns``), with the trace's wall anchor
(``wall_anchor``: its times shifted by the origin, as the file's are, so a reader that
takes the file's times as they are places them on the wall clock by it; polyprof's
Chrome/Kineto reader does, and a job of exported ranks aligns by it). The devices' properties
(model, SM count, memory...: what the efficiency tables match peaks and occupancy by)
are the top-level ``deviceProperties`` list, as in
Kineto's JSON (one entry per device plane, ``id`` its index): viewers ignore the key,
polyprof's reader puts them back on the planes. The job's rank, world size and process
groups are the top-level ``distributedInfo`` Kineto writes (:func:`distributed_info`),
which the reader takes back: the collectives' bus bandwidth needs each group's size;
the host the trace was recorded on is Kineto's top-level ``host_name``. These come
before ``traceEvents``, as in Kineto's files. The trace's warnings and plugin errors
(sections a plugin dropped, a session never stopped, a plugin that failed: what a
summary tells of data lost) are ``otherData.warnings`` / ``otherData.plugin_errors``
(:func:`notes`), which the reader restores (:func:`recorded_notes`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..trace import keys
from ..trace.core import Trace
from ..trace.memory import export_counters
from .device_list import device_properties
from .export_ids import SourceIds
from .export_notes import HOST_NAME, notes
from .jsonfile import EXACT_IN_JS, write_json
from .slice_lanes import MAX_LANES, lane_name, lane_pairs, slice_lanes
from ..trace import metadata_keys as mkeys


def _pids(trace: Trace) -> list[int]:
    used: set[int] = set()
    out = []
    for p in trace.planes:
        pid = p.pid if p.pid and p.pid not in used and 0 < p.pid <= EXACT_IN_JS else 1_000_000 + p.id
        used.add(pid)
        out.append(pid)
    return out


def _tids(trace: Trace) -> list[int]:
    used: set[tuple[int, int]] = set()
    out = []
    for t in trace.tracks:
        tid = t.tid if (t.plane, t.tid) not in used and 0 <= t.tid <= EXACT_IN_JS else 2_000_000 + t.id
        used.add((t.plane, tid))
        out.append(tid)
    return out


def _event_tids(trace: Trace, tids: list[int], track_tid: np.ndarray, out: list[dict[str, Any]]) -> np.ndarray:
    """The tid of every event: its track's, or for a slice that starts inside another of
    its track and ends after it, an extra thread "<track> (overlap k)" of the same process
    (``slice_lanes``: the Perfetto export's rule for its child tracks), whose metadata is
    added to ``out``. A viewer's thread is a stack: Perfetto's JSON importer spills such a
    slice onto an overflow track with an import error (older versions drop it), and
    chrome://tracing flags it as not nested."""
    ev = trace.events
    track = ev["track"].astype(np.int64)
    start, dur = ev["start_ns"], ev["dur_ns"]
    by_rank = np.lexsort((np.arange(len(start)), -dur, start))  # (start, longest first): the Perfetto export's order
    lane = slice_lanes(track, start, start + dur, by_rank, "chrome")
    tid = track_tid[track]
    pairs = lane_pairs(track, lane)
    if not pairs:
        return tid
    pids = _pids(trace)
    used = {(t.plane, x) for t, x in zip(trace.tracks, tids)}
    lane_tid = np.zeros(len(pairs), np.int64)
    candidate = 2_000_000 + len(trace.tracks)  # past _tids' own numbers for tracks
    for i, (tr_id, k) in enumerate(pairs):
        t = trace.tracks[tr_id]
        while (t.plane, candidate) in used:
            candidate += 1
        used.add((t.plane, candidate))
        lane_tid[i] = candidate
        out.append({"ph": "M", "name": "thread_name", "pid": pids[t.plane], "tid": candidate,
                    "args": {"name": lane_name(t.name, k)}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pids[t.plane], "tid": candidate,
                    "args": {"sort_index": t.sort_index}})  # beside its track
    moved = np.flatnonzero(lane > 0)
    keys = np.array([tr_id * MAX_LANES + k for tr_id, k in pairs], np.int64)  # ascending (lane_pairs)
    tid[moved] = lane_tid[np.searchsorted(keys, track[moved] * MAX_LANES + lane[moved])]
    return tid


def to_chrome_events(trace: Trace) -> list[dict[str, Any]]:
    """The trace's records as Chrome trace events, times from :func:`origin_ns`."""
    return _chrome_events(trace)[0]


def origin_ns(trace: Trace, counters: dict[str, np.ndarray]) -> int:
    """Time zero of the export: the first event's start or the first of ``counters``
    (``export_counters``: the trace's and its memory series'), whichever is earlier."""
    first = trace.span_ns[0] if trace.n_events else None
    ts = counters["ts_ns"]
    if len(ts):
        lo = int(ts.min())
        first = lo if first is None else min(first, lo)
    return 0 if first is None else first


def _chrome_events(trace: Trace) -> tuple[list[dict[str, Any]], int]:
    """(the trace's records as Chrome trace events, the origin their times count from)."""
    pids, tids = _pids(trace), _tids(trace)
    counters = export_counters(trace)  # with the memory series as counter tracks
    origin = origin_ns(trace, counters)
    out: list[dict[str, Any]] = []
    for p, pid in zip(trace.planes, pids):
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": p.name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": p.id}})
    for t, tid in zip(trace.tracks, tids):
        pid = pids[t.plane]
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": t.name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                    "args": {"sort_index": t.sort_index}})
    n = trace.n_events
    ev = trace.events
    track_pid = np.array([pids[t.plane] for t in trace.tracks], np.int64)
    track_tid = np.array(tids, np.int64)
    names, cats = trace.names(), trace.categories()
    ts = ((ev["start_ns"] - origin) / 1000.0).tolist()
    dur = (ev["dur_ns"] / 1000.0).tolist()
    pid_l = track_pid[ev["track"]].tolist() if n else []
    tid_l = _event_tids(trace, tids, track_tid, out).tolist() if n else []
    args: list[dict[str, Any]] = [{} for _ in range(n)]
    ids = SourceIds(trace)  # correlation, external and flow ids unique per source (export_ids.py)
    for key, col in trace.stats.items():
        values = ids.values(key, col)
        vals = values.tolist() if col.kind in "iuf" else [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]
        for r, v in zip(col.rows.tolist(), vals):
            args[r][key] = v
    if keys.HLO_OP in trace.stats:
        from .xspace.xla_costs import add_cost_args  # the HLO decoder: only a trace with XLA ops

        add_cost_args(trace, args)
    instant = (ev["dur_ns"] == 0).tolist()
    for i in range(n):
        e = {"ph": "i" if instant[i] else "X", "name": names[i], "cat": cats[i], "pid": pid_l[i],
             "tid": tid_l[i], "ts": ts[i]}
        if instant[i]:
            e["s"] = "t"
        else:
            e["dur"] = dur[i]
        if args[i]:
            e["args"] = args[i]
        out.append(e)
    fl = trace.flows
    used: set[tuple[str, int]] = set()
    for k, (s, d, fid, c) in enumerate(zip(fl["src"].tolist(), fl["dst"].tolist(), ids.flow_ids.tolist(),
                                            fl["category"].tolist())):
        cat = trace.strings[c] or "flow"
        # one id per flow: readers chain the ends of one (category, id) in time order
        ident = fid if fid > 0 and (cat, fid) not in used else 10 ** 12 + k
        used.add((cat, ident))
        out.append({"ph": "s", "id": ident, "name": cat, "cat": cat, "pid": pid_l[s], "tid": tid_l[s],
                    "ts": ts[s]})
        out.append({"ph": "f", "bp": "e", "id": ident, "name": cat, "cat": cat, "pid": pid_l[d],
                    "tid": tid_l[d], "ts": ts[d]})
    # a NaN or infinite sample is left out: JSON has no such number (it would be null, which
    # Perfetto skips as a parse failure and Chrome's viewer draws as 0; docs/formats.md)
    ok = np.isfinite(counters["value"])
    for pl, nm, t, v in zip(counters["plane"][ok].tolist(), counters["name"][ok].tolist(),
                            counters["ts_ns"][ok].tolist(), counters["value"][ok].tolist()):
        name = trace.strings[nm]
        out.append({"ph": "C", "name": name, "pid": pids[pl], "tid": 0, "ts": (t - origin) / 1000.0,
                    "args": {name: v}})
    return out, origin


def _is_anchor(a: Any) -> bool:
    return isinstance(a, dict) and isinstance(a.get("wall_ns"), int) and isinstance(a.get("mono_ns"), int)


def wall_anchor(trace: Trace, origin: int) -> dict[str, Any] | None:
    """The trace's wall anchor for times counted from ``origin``: the tightest of its
    sources' (``Source.clock["wall_anchor"]``), else its metadata's, else (times on the
    wall clock) the identity; None for a trace on a clock of its own without one.
    ``mono_ns`` is shifted by the origin; ``host`` is its source's, when it names one."""
    found = [(s.clock[mkeys.SOURCE_WALL_ANCHOR], s.host) for s in trace.sources
             if _is_anchor(s.clock.get(mkeys.SOURCE_WALL_ANCHOR))]
    if not found and _is_anchor(trace.metadata.get(mkeys.WALL_ANCHOR)):
        found = [(trace.metadata[mkeys.WALL_ANCHOR], "")]
    if not found and trace.metadata.get(mkeys.CLOCK_NAME) == "wall":
        found = [({"mono_ns": 0, "wall_ns": 0, "uncertainty_ns": 0}, "")]
    if not found:
        return None
    anchor, host = min(found, key=lambda ah: float(ah[0].get("uncertainty_ns") or 0))
    out = {**anchor, "mono_ns": int(anchor["mono_ns"]) - origin}
    if host:
        out["host"] = host
    return out


def distributed_info(trace: Trace) -> dict[str, Any]:
    """Kineto's ``distributedInfo``: the one the trace was read with, else its top-level
    keys, else the rank (and world size) of the recording session (``polyprof run`` under
    torchrun): HTA reads a job's rank files by it (without, every file is rank 0)."""
    meta = trace.metadata
    dist = meta.get(mkeys.DISTRIBUTED_INFO)
    if isinstance(dist, dict):
        return dist
    dist = {k: meta[k] for k in ("backend", "rank", "world_size") if k in meta}
    session = meta.get(mkeys.SESSION)
    if "rank" not in dist and len(trace.sources) == 1 and trace.sources[0].rank is not None:
        dist["rank"] = int(trace.sources[0].rank)
        if isinstance(session, dict) and isinstance(session.get("world_size"), int):
            dist["world_size"] = session["world_size"]
    return dist


def host_name(trace: Trace) -> str:
    """The host the trace was recorded on: its sources' one host (none when they name
    several), else the ``host_name`` of the Kineto file it was read from; "" for none."""
    hosts = {s.host for s in trace.sources if s.host}
    if len(hosts) == 1:
        return hosts.pop()
    named = trace.metadata.get(HOST_NAME)
    return named if isinstance(named, str) and not hosts else ""


def spaced(dist: dict[str, Any]) -> orjson.Fragment:
    """``distributedInfo`` spaced as Kineto writes it (``"rank": 1``): HTA finds a file's
    rank with a pattern that needs the space, and took every compact file for rank 0."""
    return orjson.Fragment(json.dumps(dist, default=str))


def write(trace: Trace, path: str | Path) -> Path:
    path = Path(path)
    events, origin = _chrome_events(trace)
    other: dict[str, Any] = {"origin_ns": origin, "clock": trace.metadata.get(mkeys.CLOCK_NAME, ""),
                             "producer": "polyprof"}
    anchor = wall_anchor(trace, origin)
    if anchor is not None:
        other["wall_anchor"] = anchor
    other.update(notes(trace, -origin))  # (warnings, plugin_errors, schedule: the reader restores them)
    # the header before the events, as Kineto writes it: a job's files are told apart by
    # their first MiB (ranks/identity.py reads the rank and host there)
    doc: dict[str, Any] = {"displayTimeUnit": "ns", "otherData": other}
    devices = device_properties(trace)
    if devices:
        doc["deviceProperties"] = devices
    dist = distributed_info(trace)
    if dist:
        doc["distributedInfo"] = spaced(dist)
    host = host_name(trace)
    if host:
        doc[HOST_NAME] = host
    doc["traceEvents"] = events
    return write_json(doc, path)
