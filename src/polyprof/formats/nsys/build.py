"""The Trace of an Nsight Systems export's parts: sources, planes, tracks, events, flows.

One source per process that has events (several MPI ranks profiled into one report are
several sources); per source a ``/host:CPU`` plane with a track per thread and a
``/device:GPU:<cuda device>`` plane per device with a track per stream. Host calls link
to the device work they launched by correlation id within their process (a flow per
pair, and the ``correlation_id`` stat on both). Times stay the export's (ns since the
session start); ``anchor.py`` reads the wall-clock anchor (``TARGET_INFO_SESSION_START_TIME``),
which places ranks that have no collective to align by.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from .. import sqlite_db
from .anchor import clock_name, session_anchor
from .schema import Export
from .schema import defaulted_note
from .tables import UNIFIED_MEMORY, UNKNOWN_STREAM, names
from ..parts import Part, flow_pairs, group_rows, read_parts

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


def fill_process(p: Part, launches: list[tuple[np.ndarray, np.ndarray]], known: set[int]) -> None:
    """Device events without a process (tables without ``globalPid``): the process of the
    runtime call with the same correlation id, else the only process there is."""
    if not p.device or not len(p) or (p.gpid >= 0).all():
        return
    miss = np.flatnonzero(p.gpid < 0)
    if launches and p.corr is not None:
        gp = np.concatenate([g for g, _ in launches])
        corr = np.concatenate([c for _, c in launches])
        order = np.argsort(corr, kind="stable")
        corr, gp = corr[order], gp[order]
        pos = np.minimum(np.searchsorted(corr, p.corr[miss]), max(len(corr) - 1, 0))
        hit = (corr[pos] == p.corr[miss]) if len(corr) else np.zeros(len(miss), bool)
        p.gpid[miss[hit]] = gp[pos[hit]]
        miss = miss[~hit]
    if len(known) == 1:
        p.gpid[miss] = next(iter(known))


def build(conn: sqlite3.Connection, ex: Export, readers: list[Callable[[], Part | None]], path: Path,
          notes: list[str], info: list[str] = ()) -> Trace:  # type: ignore[assignment]
    """The Trace of the parts ``readers`` return, read one at a time (the runtime calls
    first, whose processes device tables without ``globalPid`` take); what a part leaves
    behind once its events are in the builder is what flows need."""
    b = TraceBuilder()
    host = ""
    if ex.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        got = sqlite_db.rows(conn, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
        host = str(got[0][0]) if got and got[0][0] else ""
    pnames = _key_table(conn, ex, "PROCESSES", "globalPid", "name")
    tnames_raw = _key_table(conn, ex, "ThreadNames", "globalTid", "nameId")
    strings_needed = set(int(v) for v in tnames_raw.values() if isinstance(v, int))
    snames = names(conn, "StringIds", "id", "value", f" WHERE id IN ({', '.join(map(str, sorted(strings_needed)))})"
                   ) if strings_needed and ex.has("StringIds", "id", "value") else {}
    tnames = {g: snames.get(int(v), "") for g, v in tnames_raw.items() if isinstance(v, int)}
    gpus = gpu_properties(conn, ex)

    source_of: dict[int, int] = {}
    launches: list[tuple[np.ndarray, np.ndarray]] = []  # (process, correlation id) of runtime calls
    linked: list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]] = []  # (device, process, corr, rows)

    def source(g: int, pid: int) -> int:  # sources in order of first appearance; labelled below
        return b.source(host=host, pid=pid, label=f"pid {pid}",
                        metadata={"process_name": pnames[g]} if g in pnames else None)

    notes.extend(column_notes(conn, ex))
    for p in read_parts(readers, notes):
        fill_process(p, launches, set(source_of))
        rows = add_part(b, p, source_of, gpus, source, pid_of=lambda g: (g >> 24) & 0xFFFFFF if g >= 0 else 0,
                        host_properties=lambda g: {"process_name": pnames[g]} if g in pnames else None,
                        thread_name=lambda g, t: tnames.get(g | t, ""))
        if p.corr is not None and p.table != "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION":
            linked.append((p.device, p.gpid, p.corr, rows))
            if not p.device:
                launches.append((p.gpid, p.corr))
        del p, rows
    lacking = [f"{t} lacks {', '.join(miss)}" for t, miss in ex.lacking().items() if _has_rows(conn, t)]
    if lacking:  # rows polyprof would read, but not the columns it reads them by: never silently left out
        notes.append(f"{'nothing polyprof reads: ' if not source_of else ''}{'; '.join(lacking)} (columns its "
                     "reader needs), so those rows are not read")
    elif not source_of:  # no part had rows; never silently empty (an export of scheduling data only)
        other = [t for t in ex.unread() if not t.startswith(("TARGET_INFO", "META_DATA", "ANALYSIS"))
                 and _has_rows(conn, t)]
        notes.append("nothing polyprof reads: no CUDA, NVTX or OS runtime rows (the export holds other data; "
                     f"its tables: {', '.join(other[:8]) + (', ...' if len(other) > 8 else '') or 'none'})")
    anchor = session_anchor(conn, ex)
    for s in b.sources:  # one process: the file's own label (identify); several: the file and the pid
        s.label = f"{path.name} pid {s.pid}" if len(b.sources) > 1 else ""
        if anchor:
            s.clock["wall_anchor"] = dict(anchor)
    add_flows(b, linked)
    del linked, launches
    md: dict[str, Any] = {"clock": clock_name(ex),
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


def add_part(b: TraceBuilder, p: Part, source_of: dict[int, int], gpus: dict[int, dict[str, Any]],
             new_source: Callable[[int, int], int], *, pid_of: Callable[[int], int],
             host_properties: Callable[[int], dict[str, Any] | None],
             thread_name: Callable[[int, int], str]) -> np.ndarray:
    """One part's events in ``b`` (their rows): per process (``p.gpid``, a source made by
    ``new_source(gpid, pid)`` the first time, kept in ``source_of``) a host plane with a
    track per thread, or a device plane per GPU with a track per stream. The SQLite
    export's reader and the ``nsys stats`` CSV reader (formats/nsys_csv) lay out alike."""
    inv, uniq = group_rows(p.gpid, p.dev, p.tid)
    track_of = np.empty(len(uniq), np.int32)
    for i, (g, d, t) in enumerate(uniq.tolist()):
        pid = pid_of(g)
        if g not in source_of:
            source_of[g] = new_source(g, pid)
        if p.device:
            plane = b.plane(keys.device_plane("GPU", d), "device", "NVIDIA", d, d, gpus.get(d, {}),
                            source=source_of[g])
            name = "unified memory" if t == UNIFIED_MEMORY else "unknown stream" if t == UNKNOWN_STREAM \
                else f"stream {t}" if t >= 0 else "context"
            track_of[i] = b.track(plane, name, "stream", t)
        else:
            plane = b.plane(keys.HOST_PLANE, "host", "", 0, pid, host_properties(g), source=source_of[g])
            track_of[i] = b.track(plane, thread_name(g, t) or f"thread {t}", "thread", t)
    names = b.intern_many(np.array(p.name_values, dtype=object))[p.names] if p.name_values else p.names
    cats = np.array([b.intern(c) for c in p.categories], np.int32)[p.category]
    # p.end >= p.start: read_parts (Part.forward_times) made the rows that end before they start 0 ns long
    return b.events(track_of[inv], names.astype(np.int32), p.start, p.end - p.start, cats, p.stats)


def add_flows(b: TraceBuilder, linked: list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """A flow from each runtime call to each device activity with its (process, correlation id)."""
    launches = [x for x in linked if not x[0]]
    devices = [x for x in linked if x[0]]
    if not launches or not devices:
        return
    cat = lambda xs, i: xs[0][i] if len(xs) == 1 else np.concatenate([x[i] for x in xs])  # noqa: E731
    src, dst, ids = flow_pairs(cat(launches, 1), cat(launches, 2), cat(launches, 3),
                               cat(devices, 1), cat(devices, 2), cat(devices, 3))
    if len(src):
        b.flows(src, dst, ids, category="ac2g")


def column_notes(conn: sqlite3.Connection, ex: Export) -> list[str]:
    """A warning per event table with rows read without a column it lacks (its default:
    schema.DEFAULTS), never silently (the tables without a column they need: build)."""
    return [defaulted_note(t, miss) for t, miss in ex.defaulted().items() if _has_rows(conn, t)]


def _has_rows(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` has a row (a table it cannot read counts as none: only a note)."""
    try:
        return bool(sqlite_db.rows(conn, f"SELECT 1 FROM {sqlite_db.quote(table)} LIMIT 1"))
    except sqlite3.Error:
        return False
