"""Host records -> Trace. One builder for the live host plugin and for the crash
journal's reader, so a recovered trace looks exactly like a collected one."""

from __future__ import annotations

import logging
import os
import threading
from operator import itemgetter
from typing import Any, Sequence

import numpy as np

from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from ..trace.identity import hostname as _hostname
from ..trace.sorting import unique


#: an empty column (what a HostRecords column is until assigned)
_NONE = np.zeros(0, np.int64)
_NONE.flags.writeable = False

log = logging.getLogger("polyprof")


class HostRecords:
    """What the host side recorded, as columns (one entry per record). The columns
    start empty and are assigned whole. (A plain class: `polyprof run` builds one at
    every stop, and defining these 21 fields as a dataclass is slower in each run.)"""

    #: completed sections: names (object), start and end ns, stats (object: dict or None), thread keys
    sec_names: np.ndarray = _NONE
    sec_start: np.ndarray = _NONE
    sec_end: np.ndarray = _NONE
    sec_stats: np.ndarray = _NONE
    sec_ident: np.ndarray = _NONE
    #: marks and user counters, with the thread that made them
    mark_names: np.ndarray = _NONE
    mark_ts: np.ndarray = _NONE
    mark_ident: np.ndarray = _NONE
    ctr_names: np.ndarray = _NONE
    ctr_ts: np.ndarray = _NONE
    ctr_values: np.ndarray = _NONE
    #: process samples: time, CPU seconds used so far, RSS bytes, thread count
    proc_ts: np.ndarray = _NONE
    proc_cpu: np.ndarray = _NONE
    proc_rss: np.ndarray = _NONE
    proc_threads: np.ndarray = _NONE

    def __init__(self, start_ns: int, *, threads: dict[int, tuple[str, int]] | None = None,
                 main_ident: int | None = None, steps: Sequence[int] = (), pid: int | None = None,
                 hostname: str | None = None):
        self.start_ns = start_ns
        #: thread key -> (name, OS thread id): the thread's ident, unless an earlier thread
        #: had that ident (Recorder.threads)
        self.threads: dict[int, tuple[str, int]] = {} if threads is None else threads
        #: the ident whose track sorts first (the main thread)
        self.main_ident = main_ident
        #: polyprof.step() times
        self.steps: np.ndarray | Sequence[int] = steps
        self.pid = os.getpid() if pid is None else pid
        self.hostname = _hostname() if hostname is None else hostname


def section_columns(secs: Sequence[tuple]) -> tuple[np.ndarray, ...]:
    """The recorder's section tuples ``(name, start_ns, end_ns, stats, ident)`` as five
    columns (names and stats as object arrays), one C-level pass per column: ``zip(*secs)``
    costs far more per section at a few hundred thousand."""
    n = len(secs)
    return (np.fromiter(map(itemgetter(0), secs), object, n), np.fromiter(map(itemgetter(1), secs), np.int64, n),
            np.fromiter(map(itemgetter(2), secs), np.int64, n), np.fromiter(map(itemgetter(3), secs), object, n),
            np.fromiter(map(itemgetter(4), secs), np.int64, n))


def _thread_tracks(b: TraceBuilder, plane: int, r: HostRecords, idents: np.ndarray) -> dict[int, int]:
    """One track per thread that recorded anything, the main thread first."""
    main = r.main_ident if r.main_ident is not None else threading.main_thread().ident
    tracks: dict[int, int] = {}
    for order, ident in enumerate(sorted(idents.tolist(), key=lambda i: (i != main, r.threads.get(i, ("", i))[1]))):
        tname, tid = r.threads.get(ident, (f"thread {ident}", ident))
        tracks[ident] = b.track(plane, tname, "thread", tid=tid, sort_index=order)
    return tracks


def _track_ids(tracks: dict[int, int], idents: np.ndarray) -> np.ndarray:
    """The track of each thread ident (every ident has one). By a search in the sorted
    idents: np.unique's first call imports numpy.ma."""
    known = np.array(sorted(tracks), np.int64)
    ids = np.array([tracks[i] for i in known.tolist()], np.int32)
    return ids[np.searchsorted(known, np.asarray(idents, np.int64).reshape(-1))]


def _section_stats(b: TraceBuilder, rows: np.ndarray, stats: Sequence[dict[str, Any] | None] | np.ndarray) -> None:
    """Keyword stats of the sections that have any (most have none)."""
    col = np.asarray(stats, dtype=object).reshape(-1)
    by_key: dict[str, tuple[list[int], list[Any]]] = {}
    for local in np.flatnonzero(np.fromiter(map(bool, col), bool, len(col))).tolist():
        for k, v in col[local].items():
            rs, vs = by_key.setdefault(k, ([], []))
            rs.append(rows[local])
            vs.append(v)
    for k, (rs, vs) in by_key.items():
        b.add_stat(k, np.asarray(rs, np.int64), vs)


def repair(r: HostRecords) -> list[str]:
    """Mend in place what no trace can hold, and say what was mended: a section that ends
    before it starts is dropped; step boundaries out of time order (two threads' calls)
    are sorted; step 0 never begins after the first boundary. The recorder makes none of
    these; one such record must not cost the whole host data (before, a negative step
    failed the trace's check and the plugin's collect: every section, mark and sample
    was lost)."""
    notes = []
    start, end = np.asarray(r.sec_start, np.int64), np.asarray(r.sec_end, np.int64)
    bad = end < start
    if bad.any():
        keep = ~bad
        r.sec_names, r.sec_start, r.sec_end = np.asarray(r.sec_names, object)[keep], start[keep], end[keep]
        for col in ("sec_stats", "sec_ident"):  # (given for every section, or not at all)
            v = np.asarray(getattr(r, col), object if col == "sec_stats" else np.int64).reshape(-1)
            setattr(r, col, v[keep] if len(v) == len(keep) else v)
        notes.append(f"{int(bad.sum()):,} section(s) that end before they start were dropped")
    marks = np.asarray(r.steps, np.int64)
    if len(marks) > 1 and (np.diff(marks) < 0).any():
        marks = r.steps = np.sort(marks)
        notes.append("step boundaries out of time order were sorted")
    if len(marks) and r.start_ns > marks[0]:
        notes.append(f"step 0 began {(r.start_ns - int(marks[0])) / 1e6:.3f} ms after the boundary that ends "
                     "it: it begins there")
        r.start_ns = int(marks[0])
    for note in notes:
        log.warning("host records: %s", note)
    return notes


def build(r: HostRecords, metadata: dict[str, Any] | None = None) -> Trace:
    b = TraceBuilder(metadata)
    notes = repair(r)
    if notes:
        b.metadata[mkeys.WARNINGS] = [*b.metadata.get(mkeys.WARNINGS, []),
                                      *({"plugin": "host", "message": n} for n in notes)]
    plane = b.plane(keys.HOST_PLANE, "host", pid=r.pid, properties={"hostname": r.hostname})
    sec_ident = np.asarray(r.sec_ident, np.int64).reshape(-1)
    mark_ident = np.asarray(r.mark_ident, np.int64).reshape(-1)
    tracks = _thread_tracks(b, plane, r, unique(np.concatenate([sec_ident, mark_ident])))
    n = len(r.sec_names)
    if n:
        starts = np.asarray(r.sec_start, np.int64)
        rows = b.events(_track_ids(tracks, sec_ident), np.asarray(r.sec_names, dtype=object), starts,
                        np.asarray(r.sec_end, np.int64) - starts, keys.CAT_SECTION)
        _section_stats(b, rows, r.sec_stats)
    m = len(r.mark_names)
    if m:
        b.events(_track_ids(tracks, mark_ident), np.asarray(r.mark_names, dtype=object), np.asarray(r.mark_ts, np.int64),
                 np.zeros(m, np.int64), keys.CAT_MARK)
    if len(r.ctr_names):
        names = np.asarray(r.ctr_names, dtype=object)
        ts, vals = np.asarray(r.ctr_ts, np.int64), np.asarray(r.ctr_values, np.float64)
        for name in dict.fromkeys(r.ctr_names):
            sel = names == name
            b.counter(plane, name, ts[sel], vals[sel])
    _steps(b, plane, r)
    _process_counters(b, plane, r)
    return b.build()


def _steps(b: TraceBuilder, plane: int, r: HostRecords) -> None:
    """Step N runs from the previous step() call (or session start) to the Nth call."""
    marks = np.asarray(r.steps, np.int64)
    if not len(marks):
        return
    track = b.track(plane, keys.LINE_STEPS, "steps", tid=0, sort_index=-1)
    starts = np.concatenate([[r.start_ns], marks[:-1]])
    n = len(marks)
    b.events(track, np.array([f"step {i}" for i in range(n)], object), starts, marks - starts,
             keys.CAT_STEP, stats={keys.STEP: np.arange(n, dtype=np.int64)})


def _process_counters(b: TraceBuilder, plane: int, r: HostRecords) -> None:
    n = min(len(r.proc_ts), len(r.proc_cpu), len(r.proc_rss), len(r.proc_threads))
    if n < 2:
        return
    ts = np.asarray(r.proc_ts[:n], np.int64)
    cpu = np.asarray(r.proc_cpu[:n], np.float64)
    pct = np.diff(cpu) / np.maximum(np.diff(ts), 1) * 1e9 * 100.0
    b.counter(plane, "process.cpu_percent", ts[1:], pct)
    b.counter(plane, "process.rss_bytes", ts, np.asarray(r.proc_rss[:n], np.float64))
    b.counter(plane, "process.threads", ts, np.asarray(r.proc_threads[:n], np.float64))
