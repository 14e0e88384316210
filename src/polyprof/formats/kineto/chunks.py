"""A Kineto / Chrome JSON rank read in chunks of events, for conversion to a store with
memory bounded by a chunk (``ranks/convert.py``; docs/store.md, "One rank of any size").

The same stages as :func:`polyprof.formats.kineto.load`, in two passes over the file:

1. **scan**: every slice of events through the collector, keeping only what spans
   chunks: the string, pid and tid tables, the metadata events (Kineto writes them
   last), events per pid and the (pid, category) and (pid, tid) pairs (which pids are
   devices, which process is the main one, the tracks), the counters and the flow
   endpoints (a few dozen bytes each). Planes and tracks are then made exactly as the
   whole-file reader makes them.
2. **chunks**: the events again, a chunk of ``chunk_events`` at a time: their columns,
   their args typed (ids at load, the rest decoded now: a store has every stat as a
   column), the chunk sorted by start and handed on. Each flow endpoint keeps the best
   event found so far to bind to (the innermost enclosing slice on its thread, or the
   next to start: the order of ``flows._bind``, compared across chunks); after the last
   chunk the endpoints are chained as the whole-file reader chains them.

The result equals the whole-file reader's Trace event for event (tests/test_bigrank.py
checks every real Kineto trace). What it does not stream: ``B``/``E`` pairs, async
events and flow events v2 (``bind_id``), whose matching spans the file, and documents
the fast path cannot cut (read in one piece): :class:`Unsupported` says which, and the
caller reads such a file whole.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .. import kineto_memory
from ...errors import TemporaryFileError, TraceFormatError
from ...lowlevel.heap import collector_paused, trim
from ...trace.categories import Kind, kind_of
from ...trace.core import EVENT_COLUMNS, Trace
from ...trace.identity import identify
from ...trace.stats import StatColumn, merge_columns
from ..safety import check_events, clean_metadata
from . import ascend, legacy, onnxruntime, rocprof_v1, slicing, tf_timeline, tokenized
from .args import _EAGER_KEYS
from .build import _metadata, _written_by_polyprof, add_counters, anchor_host, base_ns, pair_tracks
from .collector import _Collector
from .deferred import DeferredArgs
from .devices import categorise_device_events, device_planes, shared_codes
from .flows import _bind, add_chained, endpoint_tracks
from .packed import PackedBatches
from ..inflate import Decompressed
from .progress import _Progress
from .slicing import Slice, _event_slices
from ...trace.sorting import unique

log = logging.getLogger("polyprof")

#: Events per chunk unless told (a store row group each; docs/store.md gives the memory).
CHUNK_EVENTS = 1 << 16
#: The scan's flow endpoint columns, narrowed as they come (codes fit 32 bits).
_NARROW = {"cat": np.int32, "pid": np.int32, "tid": np.int32}
#: A slice this much larger than a chunk means the document was read in one piece.
_ONE_PIECE = 1 << 20


class Unsupported(Exception):
    """This file cannot be read in chunks (the reason); read it whole."""


@dataclass
class Names:
    """What the chunks' ids name (known after the scan): strings, planes, tracks."""
    strings: list[str]
    plane_names: list[str]
    track_names: list[str]
    track_plane: np.ndarray


@dataclass
class Chunk:
    """Events in start order (stable): ``events`` (the Trace's event columns),
    ``input_row`` (each event's row in the Trace the whole-file reader makes) and
    ``stats`` (rows: positions in this chunk)."""
    events: dict[str, np.ndarray]
    input_row: np.ndarray
    stats: dict[str, StatColumn]
    names: Names


@dataclass
class Rest:
    """After the last chunk: ``trace`` has everything but events and flows (strings,
    planes, tracks, counters, metadata, its source); ``flows`` name events by their
    position in the sequence of chunks handed on."""
    trace: Trace
    flows: dict[str, np.ndarray]
    events: int
    span_ns: tuple[int, int]


def read_chunks(path: str | Path, on_chunk: Callable[[Chunk], None], chunk_events: int = CHUNK_EVENTS,
                progress: bool = False) -> Rest:
    """Read ``path`` chunk by chunk, handing each :class:`Chunk` to ``on_chunk``.
    Raises :class:`Unsupported` (before any chunk) for a file that needs the whole-file reader."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, "no such file")
    with collector_paused():
        try:
            reader = _Reader(path, max(1, int(chunk_events)), progress)
            reader.scan()
            return reader.chunks(on_chunk)
        except MemoryError:
            raise TraceFormatError(path, "not enough memory to read this trace") from None
        except RecursionError:
            raise TraceFormatError(path, "invalid JSON: nested too deeply") from None


class _Reader:
    def __init__(self, path: Path, chunk_events: int, progress: bool):
        self.path, self.chunk_events, self.progress = path, chunk_events, progress
        self.col = _Collector(path)
        self.col.tok = tokenized.tokenizer()  # the C tokenizer where built (its code tables: both passes)
        self.top: dict[str, object] = {}

    def _slices(self, what: str) -> Iterator[int]:
        """Each slice of the file added to the collector (as ``kineto.load`` adds it); its events."""
        bar = _Progress(self.progress, self.path, self.path.stat().st_size)
        bar.stage(f"{what} {self.path.name}", self.path.stat().st_size, of_bytes=True)
        col = self.col
        scan = col.tok.scan if col.tok is not None else None
        try:
            seen = 0
            top: dict[str, object] = {}
            for events in _event_slices(self.path, Decompressed(self.path, slicing.CHUNK_BYTES, bar.advance).blocks(), top, scan):
                n = _add(col, events)
                del events
                seen += n
                check_events(self.path, seen, so_far=True)
                yield n
            self.top = top
        finally:
            bar.stop()

    # ------------------------------------------------------------------ pass 1
    def scan(self) -> None:
        col = self.col
        counts = np.zeros(0, np.int64)
        pid_cat: set[int] = set()
        pid_tid: set[int] = set()
        for n in self._slices("scan"):
            if n > max(self.chunk_events, _ONE_PIECE):
                raise Unsupported("the document could not be cut into slices (read in one piece)")
            c = col.cols
            if c["pid"]:
                pid, tid, cat = (np.concatenate(c[k]) for k in ("pid", "tid", "cat"))
                for k in c:
                    c[k].clear()
                got = np.bincount(pid)
                if len(got) > len(counts):
                    counts = np.concatenate([counts, np.zeros(len(got) - len(counts), np.int64)])
                counts[:len(got)] += got
                pid_cat.update(unique((pid << 32) | cat).tolist())
                pid_tid.update(unique((pid << 32) | tid).tolist())
            col.arg_raws, col.arg_batches, col.arg_base = [], PackedBatches(), col.n
            col.b._stat_parts = {}
            for k, t in _NARROW.items():
                parts = col.flow_cols[k]
                if parts and parts[-1].dtype != t:
                    parts[-1] = parts[-1].astype(t)
            for what, has in (("B/E events", col.b_rows or col.ends), ("async events", col.asyncs),
                              ("flow events v2 (bind_id)", col.flow_v2)):
                if has:
                    raise Unsupported(f"{what} are matched across the whole file")
        self.n = col.n
        self._layout(counts, pid_cat, pid_tid)

    def _layout(self, counts: np.ndarray, pid_cat: set[int], pid_tid: set[int]) -> None:
        """Planes, tracks and the flow endpoints, as the whole-file reader makes them."""
        col = self.col
        pid_vals = col.id_values[id(col.pids)]
        tid_vals = col.id_values[id(col.tids)]
        self.base = base_ns(self.top)
        pc = np.array(sorted(pid_cat), np.int64)
        counts = np.concatenate([counts, np.zeros(max(0, len(pid_vals) - len(counts)), np.int64)])
        self.planes = device_planes(col, self.top, pid_vals, pc >> 32, pc & 0xFFFFFFFF, counts)
        if shared_codes(col, self.planes):  # (build.pair_tracks: per thread, from every event's category)
            raise Unsupported("a process labelled both a host's and a device's holds both: its threads are told "
                              "apart once the whole file is read")
        if ascend.is_ascend(col) or rocprof_v1.is_rocprof_v1(col):
            raise Unsupported("its events' categories or times are set from their args after the whole file is read")
        if legacy.has_cuda_functions(col):  # (legacy.link: from the flows, over the whole file)
            raise Unsupported("torch's legacy export: its ops' CUDA intervals are sorted out once the whole file is read")
        if tf_timeline.has_gpu_lines(col):  # (its memcpy line, its kernels' ops: over the whole file)
            raise Unsupported("TensorFlow 1.x's timeline: its GPU lines are sorted out and linked to its ops once "
                              "the whole file is read")
        if onnxruntime.may_be_onnxruntime(col):  # (onnxruntime.classify: over the whole trace)
            raise Unsupported("onnxruntime's profile: its runs and nodes are told once the whole file is read")
        self.ntid = max(len(tid_vals), 1)
        pt = np.array(sorted(pid_tid), np.int64)
        self.pairs = unique((pt >> 32) * self.ntid + (pt & 0xFFFFFFFF))
        track_of_pair = pair_tracks(col, self.planes, self.pairs, self.ntid, _written_by_polyprof(self.top))
        self.pair_track = np.array([track_of_pair[u] for u in self.pairs.tolist()], np.int32)
        b = col.b
        self.names = Names(b.strings, [p.name for p in b.planes], [t.name for t in b.tracks],
                           np.array([t.plane for t in b.tracks], np.int32))
        ann = [i for i, s in enumerate(b.strings) if kind_of(s) in (Kind.ANNOTATION, Kind.DEVICE_ANNOTATION, Kind.STEP)]
        self.annotation = np.zeros(len(b.strings) + 1, bool)
        self.annotation[ann] = True
        self.flows = _Endpoints(col, track_of_pair, self.ntid, self.base)
        # what pass 2 adds again is put back as the scan found it
        self.kept = (list(col.counters), list(col.other_meta), dict(col.skipped), dict(col.dropped.counts))

    # ------------------------------------------------------------------ pass 2
    def chunks(self, on_chunk: Callable[[Chunk], None]) -> Rest:
        col = self.col
        col.n = col.seen = col.arg_base = 0
        col.cols = {k: [] for k in col.cols}
        col.arg_raws, col.arg_batches = [], PackedBatches()
        col.b._stat_parts = {}
        col.backwards = 0  # counted again as the events pass again
        n_counters = len(col.counters)
        self.handed = 0
        self.first = 0
        self.span = [np.iinfo(np.int64).max, np.iinfo(np.int64).min]
        self.epoch = 0  # events whose time looks like an epoch (the clock's name, build._metadata)
        for _ in self._slices("convert"):
            col.flow_cols = {k: [] for k in col.flow_cols}  # known from the scan
            del col.counters[n_counters:]
            if col.n - self.first >= self.chunk_events:
                self._emit(on_chunk)
        if col.n > self.first or not self.handed:
            self._emit(on_chunk)
        if col.n != self.n:
            raise TraceFormatError(self.path, "the file changed while it was read")
        return self._rest()

    def _annotations_of_new_strings(self) -> None:
        """``self.annotation`` (whether each string id is an annotation's category) grown
        to the strings interned since the layout."""
        strings = self.col.b.strings
        old = len(self.annotation)
        if len(strings) < old:
            return
        grown = np.zeros(len(strings) + 1, bool)
        grown[:old] = self.annotation
        grown[old - 1:len(strings)] = [kind_of(x) in (Kind.ANNOTATION, Kind.DEVICE_ANNOTATION, Kind.STEP)
                                       for x in strings[old - 1:]]
        self.annotation = grown

    def _emit(self, on_chunk: Callable[[Chunk], None]) -> None:
        col = self.col
        col._flush_args()
        c = col.cols
        cat = lambda k, t: np.concatenate(c[k]).astype(t, copy=False) if c[k] else np.zeros(0, t)
        pid, tid = cat("pid", np.int64), cat("tid", np.int64)
        ts, dur = cat("ts", np.int64) + self.base, cat("dur", np.int64)
        name, category = cat("name", np.int32), cat("cat", np.int32)
        categorise_device_events(col, self.planes, pid, tid, category, name)
        self._annotations_of_new_strings()  # the categories that pass interned (kernel, cpu_op...)
        col.cols = {k: [] for k in c}
        track = self.pair_track[np.searchsorted(self.pairs, pid * self.ntid + tid)] if len(ts) else \
            np.zeros(0, np.int32)
        del pid, tid
        stats = self._stats()
        n = len(ts)
        order = np.argsort(ts, kind="stable")
        inv = np.empty(n, np.int64)
        inv[order] = np.arange(n)
        if n:
            self.span = [min(self.span[0], int(ts.min())), max(self.span[1], int((ts + dur).max()))]
            self.epoch += int(np.count_nonzero(ts > 10 ** 17))
        self.flows.offer(track, ts, dur, self.annotation[category], inv + self.handed)
        events = {"track": track[order], "name": name[order], "category": category[order],
                  "start_ns": ts[order], "dur_ns": dur[order]}
        events = {k: v.astype(EVENT_COLUMNS[k], copy=False) for k, v in events.items()}
        moved = {k: StatColumn(inv[s.rows], s.values) for k, s in stats.items()}
        on_chunk(Chunk(events, order.astype(np.int64) + self.first, moved, self.names))
        self.handed += n
        self.first = col.n
        del events, moved, stats, order, inv, ts, dur, track, name, category
        trim()

    def _stats(self) -> dict[str, StatColumn]:
        """This chunk's stats, rows from its first event: the ones typed at load, then the
        other args decoded (as the whole-file reader decodes them on first use)."""
        col = self.col
        parts, col.b._stat_parts = col.b._stat_parts, {}
        out = {k: merge_columns(v) for k, v in parts.items()}
        batches, col.arg_batches = col.arg_batches, PackedBatches()
        if batches:
            skip = _EAGER_KEYS | kineto_memory.MEMORY_KEYS | set(out)
            out.update(DeferredArgs(batches, {}).columns(None, skip))
        return {k: StatColumn(v.rows - self.first, v.values) for k, v in out.items() if len(v.rows)}

    def _rest(self) -> Rest:
        col = self.col
        col.counters, col.other_meta = self.kept[0], self.kept[1]
        col.skipped, col.dropped.counts = self.kept[2], self.kept[3]
        flows = self.flows.chained(self.handed)
        add_counters(col, self.planes, self.base)
        ts_like = np.zeros(0, np.int64) if not self.handed else \
            np.array([2 * 10 ** 17 if 2 * self.epoch > self.handed else 0], np.int64)
        col.b.metadata.update(_metadata(col, self.top, self.base, ts_like))
        trace = col.b.build()
        anchor_host(trace, self.top)
        clean_metadata(trace.metadata)
        identify(trace, label=self.path.name)
        span = (self.span[0], self.span[1]) if self.handed else (0, 0)
        return Rest(trace, flows, self.handed, span)


def _add(col: _Collector, events: Slice) -> int:
    """One slice into the collector (tokenized in C, or decoded by msgspec); its events."""
    if isinstance(events, tuple):
        tokenized.add(col, events)
        return int(events[0])
    col.add(events)
    return len(events)


@contextlib.contextmanager
def _temporary() -> Iterator[None]:
    """The spilled flow endpoints' temporary file written or read back: its failure (a
    full TMPDIR, ``ulimit -f``) said as the temporary directory's, not the input's."""
    try:
        yield
    except OSError as e:
        raise TemporaryFileError(f"cannot spill the flow endpoints into a temporary file in "
                                 f"{tempfile.gettempdir()} ({e.strerror or e}; TMPDIR names another "
                                 "directory)") from None


class _Endpoints:
    """The flow endpoints of the scan, each with the best event found so far to bind to
    (its position among the events handed on, -1: none yet) and that event's start,
    duration and whether it is a real op (not an annotation), compared as ``flows._bind``
    orders slices: the innermost enclosing slice is the last in (start, -duration, real
    op, row) order that contains the endpoint's time, the next slice the first to start
    at or after it."""

    def __init__(self, col: _Collector, track_of_pair: dict[int, int], ntid: int, base: int):
        fc = col.flow_cols

        def cat(k: str, t: type) -> np.ndarray:  # each column's parts freed once joined
            parts, fc[k] = fc[k], []
            return np.concatenate(parts).astype(t, copy=False) if parts else np.zeros(0, t)

        # category, id and phase are needed only to chain, at the end: on disk meanwhile
        with _temporary():
            self.spilled = tempfile.TemporaryFile()
            for k, t in (("cat", np.int32), ("id", np.int64), ("ph", np.int8)):
                np.save(self.spilled, cat(k, t))
            self.spilled.flush()
        self.ts = cat("ts", np.int64) + base
        pair = cat("pid", np.int64) * ntid + cat("tid", np.int64)
        self.track = endpoint_tracks(track_of_pair, pair).astype(np.int32) if track_of_pair else \
            np.full(len(pair), -1, np.int32)
        del pair
        self.enclosing = cat("enclosing", bool)
        col.flow_cols = {k: [] for k in fc}
        self.col = col
        e = len(self.ts)
        self.row = np.full(e, -1, np.int64)
        self.start = np.zeros(e, np.int64)
        self.dur = np.zeros(e, np.int64)
        self.real = np.zeros(e, bool)

    def offer(self, track: np.ndarray, start: np.ndarray, dur: np.ndarray, annotation: np.ndarray,
              position: np.ndarray) -> None:
        """The events of one chunk (in input order; ``position``: each one's place among
        the events handed on) as candidates."""
        if not len(start) or not len(self.ts):
            return
        lo, hi = int(start.min()), int((start + dur).max())
        # enclosing: the time within the chunk's span; next: the time at or before its last start
        near = np.flatnonzero((self.track >= 0) & np.where(self.enclosing, (self.ts >= lo) & (self.ts <= hi),
                                                           self.ts <= int(start.max())))
        if not len(near):
            return
        local = _bind(track, start, dur, annotation, self.track[near], self.ts[near], self.enclosing[near])
        got = local >= 0
        near, local = near[got], local[got]
        s, d, r = start[local], dur[local], ~annotation[local]
        bs, bd, br = self.start[near], self.dur[near], self.real[near]
        first = self.row[near] < 0
        later = (s > bs) | ((s == bs) & ((d < bd) | ((d == bd) & (r >= br))))  # ties: the later chunk
        earlier = (s < bs) | ((s == bs) & ((d > bd) | ((d == bd) & (r < br))))  # ties: the earlier chunk
        take = first | np.where(self.enclosing[near], later, earlier)
        near, local = near[take], local[take]
        self.row[near] = position[local]
        self.start[near], self.dur[near], self.real[near] = start[local], dur[local], ~annotation[local]

    def chained(self, n_events: int) -> dict[str, np.ndarray]:
        """The flows, chained (``flows.add_chained``); their rows: positions among the events."""
        col = self.col
        b = col.b
        if not len(self.ts) or not n_events:
            col.unbound_flows = len(self.ts)
            self.spilled.close()
            return {"src": np.zeros(0, np.int64), "dst": np.zeros(0, np.int64), "id": np.zeros(0, np.int64),
                    "category": np.zeros(0, np.int32)}
        del self.start, self.dur, self.real, self.track, self.enclosing
        trim()
        with _temporary():
            self.spilled.seek(0)
            ends = {k: np.load(self.spilled) for k in ("cat", "id", "ph")}
        self.spilled.close()
        ends["ts"], ends["row"] = self.ts, self.row
        del self.ts, self.row
        add_chained(col, ends)
        chunks, b._flow_chunks = b._flow_chunks, []
        return {k: np.concatenate([c[k] for c in chunks]) if chunks else np.zeros(0, t)
                for k, t in (("src", np.int64), ("dst", np.int64), ("id", np.int64), ("category", np.int32))}
