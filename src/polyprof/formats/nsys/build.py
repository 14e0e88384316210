"""The Trace of an Nsight Systems export's parts: sources, planes, tracks, events, flows.

One source per process that has events (several MPI ranks profiled into one report are
several sources); per source a ``/host:CPU`` plane with a track per thread and a
``/device:GPU:<cuda device>`` plane per device with a track per stream. Host calls link
to the device work they launched by correlation id within their process (a flow per
pair, and the ``correlation_id`` stat on both). Times stay the export's (ns since the
session start); ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is the wall-clock anchor.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from .. import sqlite_db
from .schema import Export
from ..parts import Part, flow_pairs

#: TARGET_INFO_GPU columns -> the deviceProperties names Kineto writes (what analyses read)
_GPU_PROPS = {"name": "name", "totalMemory": "totalGlobalMem", "smCount": "numSms",
              "computeMajor": "computeMajor", "computeMinor": "computeMinor",
              "maxThreadsPerBlock": "maxThreadsPerBlock", "maxRegistersPerBlock": "regsPerBlock",
              "maxRegistersPerSm": "regsPerMultiprocessor", "threadsPerWarp": "warpSize",
              "maxShmemPerBlock": "sharedMemPerBlock", "maxShmemPerSm": "sharedMemPerMultiprocessor",
              "maxShmemPerBlockOptin": "sharedMemPerBlockOptin", "memoryBandwidth": "memoryBandwidth",
              "clockRate": "clockRate", "l2CacheSize": "l2CacheSize", "busLocation": "busLocation",
              "uuid": "uuid", "chipName": "chipName"}


def gpu_properties(conn: sqlite3.Connection, ex: Export) -> dict[int, dict[str, Any]]:
    """CUDA device index -> its properties (TARGET_INFO_GPU)."""
    t = "TARGET_INFO_GPU"
    cols = ex.cols(t)
    if not cols:
        return {}
    wanted = [c for c in _GPU_PROPS if c in cols]
    index = "cuDevice" if "cuDevice" in cols else "id" if "id" in cols else None
    if index is None or not wanted:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for row in sqlite_db.rows(conn, f"SELECT {index}, {', '.join(sqlite_db.quote(c) for c in wanted)} FROM {t}"):
        if not isinstance(row[0], int):
            continue
        props = {_GPU_PROPS[c]: v for c, v in zip(wanted, row[1:]) if v is not None}
        props["id"] = int(row[0])
        out[int(row[0])] = props
    return out


def _key_table(conn: sqlite3.Connection, ex: Export, table: str, key: str, value: str) -> dict[int, Any]:
    if not ex.has(table, key, value):
        return {}
    return {int(k): v for k, v in sqlite_db.rows(conn, f"SELECT {key}, {value} FROM {table}")
            if isinstance(k, int) and v is not None}


def fill_processes(parts: list[Part]) -> None:
    """Device events without a process (tables without ``globalPid``): the process of the
    runtime call with the same correlation id, else the only process there is."""
    host = [p for p in parts if not p.device and p.corr is not None]
    known = np.unique(np.concatenate([p.gpid for p in parts if len(p)] or [np.zeros(0, np.int64)]))
    known = known[known >= 0]
    for p in parts:
        if not p.device or not len(p) or (p.gpid >= 0).all():
            continue
        miss = np.flatnonzero(p.gpid < 0)
        if host and p.corr is not None:
            corr = np.concatenate([h.corr for h in host])  # type: ignore[misc]
            gp = np.concatenate([h.gpid for h in host])
            order = np.argsort(corr, kind="stable")
            corr, gp = corr[order], gp[order]
            pos = np.minimum(np.searchsorted(corr, p.corr[miss]), max(len(corr) - 1, 0))
            hit = (corr[pos] == p.corr[miss]) if len(corr) else np.zeros(len(miss), bool)
            p.gpid[miss[hit]] = gp[pos[hit]]
            miss = miss[~hit]
        if len(known) == 1:
            p.gpid[miss] = known[0]


def build(conn: sqlite3.Connection, ex: Export, parts: list[Part], path: Path,
          notes: list[str], info: list[str] = ()) -> Trace:  # type: ignore[assignment]
    parts = [p for p in parts if p is not None and len(p)]
    fill_processes(parts)
    b = TraceBuilder()
    anchor = None
    if ex.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        got = sqlite_db.rows(conn, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if got and isinstance(got[0][0], int):
            anchor = {"mono_ns": 0, "wall_ns": int(got[0][0]), "uncertainty_ns": 0}
    host = ""
    if ex.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        got = sqlite_db.rows(conn, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
        host = str(got[0][0]) if got and got[0][0] else ""
    pnames = _key_table(conn, ex, "PROCESSES", "globalPid", "name")
    tnames_raw = _key_table(conn, ex, "ThreadNames", "globalTid", "nameId")
    strings_needed = set(int(v) for v in tnames_raw.values() if isinstance(v, int))
    snames = {int(i): str(v) for i, v in sqlite_db.rows(
        conn, f"SELECT id, value FROM StringIds WHERE id IN ({', '.join(map(str, sorted(strings_needed)))})")
        } if strings_needed else {}
    tnames = {g: snames.get(int(v), "") for g, v in tnames_raw.items() if isinstance(v, int)}
    gpus = gpu_properties(conn, ex)

    gpids = np.unique(np.concatenate([p.gpid for p in parts])) if parts else np.zeros(0, np.int64)
    several = len(gpids) > 1
    source_of: dict[int, int] = {}
    for g in gpids.tolist():
        pid = (g >> 24) & 0xFFFFFF if g >= 0 else 0
        label = f"{path.name} pid {pid}" if several else ""
        smd = {"process_name": pnames[g]} if g in pnames else {}
        source_of[g] = b.source(host=host, pid=pid, label=label,
                                clock={"wall_anchor": dict(anchor)} if anchor else None, metadata=smd)

    # tracks: one per (process, thread) and per (process, device, stream)
    for p in parts:
        key = np.stack([p.gpid, p.dev, p.tid], axis=1)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        track_of = np.empty(len(uniq), np.int32)
        for i, (g, d, t) in enumerate(uniq.tolist()):
            src = source_of[g]
            pid = (g >> 24) & 0xFFFFFF if g >= 0 else 0
            if p.device:
                props = gpus.get(d, {})
                plane = b.plane(keys.device_plane("GPU", d), "device", "NVIDIA", d, d, props, source=src)
                name = f"stream {t}" if t >= 0 else "context"
                track_of[i] = b.track(plane, name, "stream", t)
            else:
                plane = b.plane(keys.HOST_PLANE, "host", "", 0, pid,
                                {"process_name": pnames[g]} if g in pnames else None, source=src)
                tname = tnames.get(g | t, "") or f"thread {t}"
                track_of[i] = b.track(plane, tname, "thread", t)
        names = b.intern_many(np.array(p.name_values, dtype=object))[p.names] if p.name_values else p.names
        cats = np.array([b.intern(c) for c in p.categories], np.int32)[p.category]
        dur = np.maximum(p.end - p.start, 0)
        p.rows = b.events(track_of[inv.ravel()], names.astype(np.int32), p.start, dur, cats, p.stats)
    _flows(b, parts)
    md: dict[str, Any] = {"clock": "nsys session time (ns since the session start)",
                          "nsys": {"version": dict(ex.version), "tables_not_read": ex.unread(),
                                   "notes": list(info)}}
    if anchor:
        md["wall_anchor"] = anchor
    if gpus:
        md["deviceProperties"] = [gpus[k] for k in sorted(gpus)]
    if notes:
        md["warnings"] = list(notes)
    b.metadata.update(md)
    return b.build()


def _flows(b: TraceBuilder, parts: list[Part]) -> None:
    """A flow from each runtime call to each device activity with its (process, correlation id)."""
    launches = [p for p in parts if not p.device and p.corr is not None]
    devices = [p for p in parts if p.device and p.corr is not None and p.table != "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"]
    if not launches or not devices:
        return
    cat = lambda ps, f: np.concatenate([getattr(p, f) for p in ps])  # noqa: E731
    src, dst, ids = flow_pairs(cat(launches, "gpid"), cat(launches, "corr"), cat(launches, "rows"),
                               cat(devices, "gpid"), cat(devices, "corr"), cat(devices, "rows"))
    if len(src):
        b.flows(src, dst, ids, category="ac2g")
