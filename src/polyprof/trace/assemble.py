"""A Trace's parts gathered: strings interned; sources, planes and tracks by identity;
event, stat, flow and counter columns; whole traces added side by side (``add_trace``,
the one pass of :func:`polyprof.trace.merge.merge`). ``parts()`` gives the Trace's
fields; ``TraceBuilder`` (builder.py) and ``Trace.extend`` make the Trace of them, so
this module stands below the Trace class and imports it for annotations only.

Scalar ``event()`` calls are for small producers; readers hand whole columns to
``events()`` so large traces never become one Python object per event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import TraceSchemaError
from .factorize import factorize
from .model import COUNTER_COLUMNS, EVENT_COLUMNS, FLOW_COLUMNS, Plane, Source, Track
from .stats import RowMap, StatTable, TextCodes, _Part, as_values, merge_stat_parts

if TYPE_CHECKING:
    from numpy.typing import ArrayLike  # annotations only: numpy.typing is not imported by NumPy itself

    from .core import Trace


class Parts(NamedTuple):
    """A Trace's fields, in the order of its constructor: ``Trace(*parts)``."""

    strings: list[str]
    planes: list[Plane]
    tracks: list[Track]
    events: dict[str, np.ndarray]
    stats: StatTable
    flows: dict[str, np.ndarray]
    counters: dict[str, np.ndarray]
    metadata: dict[str, Any]
    sources: list[Source]


class Assembler:
    """The parts of one Trace as they are added; ``parts()`` gives them as its fields."""

    def __init__(self, metadata: dict[str, Any] | None = None):
        self.strings: list[str] = []
        self._sid: dict[str, int] = {}
        self.sources: list[Source] = []
        self._source_by_key: dict[tuple, int] = {}
        self.planes: list[Plane] = []
        self._plane_by_name: dict[tuple[int, str], int] = {}
        self.tracks: list[Track] = []
        self._track_by_key: dict[tuple, int] = {}
        self._chunks: list[dict[str, np.ndarray]] = []
        self._small: dict[str, list] = {k: [] for k in EVENT_COLUMNS}
        self._n = 0
        self._stat_parts: dict[str, list[tuple[np.ndarray, np.ndarray | TextCodes]]] = {}
        self._stat_small: dict[str, tuple[list, list]] = {}
        self._stat_deferred: list[_Part] = []
        self._flows: dict[str, list] = {k: [] for k in FLOW_COLUMNS}
        self._flow_chunks: list[dict[str, np.ndarray]] = []  # flows() columns, kept as arrays
        self._counter_chunks: list[dict[str, np.ndarray]] = []
        self.metadata: dict[str, Any] = dict(metadata or {})

    # -------------------------------------------------------------- strings
    def string_id(self, s: str) -> int:
        """Id of ``s`` if interned already, else -1 (as ``Trace.string_id``)."""
        return self._sid.get(s, -1)

    def intern(self, s: str) -> int:
        i = self._sid.get(s)
        if i is None:
            i = self._sid[s] = len(self.strings)
            self.strings.append(s)
        return i

    def intern_many(self, values: Sequence[str] | np.ndarray) -> np.ndarray:
        """Ids for many strings at once, factorised (``trace/factorize.py``: a dict of
        the distinct values, or pandas' hash table when pandas is loaded and the array
        long), so the cost is per distinct string. A missing value (None, NaN) is
        interned as its text, as ``str`` writes it, like any other value."""
        values = np.asarray(values, dtype=object).reshape(-1)
        if not len(values):
            return np.zeros(0, np.int32)
        codes, uniques = factorize(values)
        if codes.min() < 0:  # factorize leaves missing values out: give them their text
            values = np.array([str(v) if c < 0 else v for v, c in zip(values.tolist(), codes.tolist())], dtype=object)
            codes, uniques = factorize(values)
        table = np.fromiter((self.intern(str(u)) for u in uniques.tolist()), np.int32, len(uniques))
        return table[codes]

    # -------------------------------------------------------------- sources, planes, tracks
    def source(self, rank: int | None = None, host: str = "", pid: int = 0, label: str = "",
               clock: Mapping[str, object] | None = None, metadata: Mapping[str, object] | None = None) -> int:
        """Id of the source with this identity (rank, host, pid, label), created on first
        use; a later call's clock and metadata fill what the first left out."""
        key = (rank, host, pid, label)
        i = self._source_by_key.get(key)
        if i is None:
            i = self._source_by_key[key] = len(self.sources)
            self.sources.append(Source(i, rank, host, pid, label, dict(clock or {}), dict(metadata or {})))
        else:
            s = self.sources[i]
            for into, more in ((s.clock, clock), (s.metadata, metadata)):
                for k, v in (more or {}).items():
                    into.setdefault(k, v)
        return i

    def plane(self, name: str, kind: str = "host", vendor: str = "", index: int = 0,
              pid: int = 0, properties: Mapping[str, object] | None = None, source: int = 0) -> int:
        """Id of the plane called ``name`` of ``source``, created on first use."""
        pid_ = self._plane_by_name.get((source, name))
        if pid_ is None:
            pid_ = self._plane_by_name[(source, name)] = len(self.planes)
            self.planes.append(Plane(pid_, name, kind, vendor, index, pid, dict(properties or {}), source))
        elif properties:
            self.planes[pid_].properties.update(properties)
        return pid_

    def track(self, plane: int, name: str, kind: str = "thread", tid: int = 0,
              sort_index: int | None = None, properties: Mapping[str, object] | None = None) -> int:
        """Id of the track (plane, kind, tid, name), created on first use."""
        key = (plane, kind, tid, name)
        t = self._track_by_key.get(key)
        if t is None:
            t = self._track_by_key[key] = len(self.tracks)
            self.tracks.append(Track(t, plane, name, kind, tid,
                                     len(self.tracks) if sort_index is None else sort_index,
                                     dict(properties or {})))
        return t

    # -------------------------------------------------------------- events
    @property
    def n_events(self) -> int:
        return self._n

    def event(self, track: int, name: str, start_ns: int, dur_ns: int = 0,
              category: str = "", **stats: object) -> int:
        """Add one event; returns its row."""
        row = self._n
        small = self._small
        small["track"].append(track)
        small["name"].append(self.intern(name))
        small["category"].append(self.intern(category))
        small["start_ns"].append(int(start_ns))
        small["dur_ns"].append(int(dur_ns))
        self._n += 1
        for k, v in stats.items():
            if v is not None:
                rows, vals = self._stat_small.setdefault(k, ([], []))
                rows.append(row)
                vals.append(v)
        return row

    def _flush_small(self) -> None:
        if self._small["track"]:
            self._chunks.append({k: np.asarray(v, dtype=EVENT_COLUMNS[k]) for k, v in self._small.items()})
            self._small = {k: [] for k in EVENT_COLUMNS}

    def events(self, track: np.ndarray | int, name: np.ndarray, start_ns: np.ndarray,
               dur_ns: np.ndarray, category: np.ndarray | int | str = "",
               stats: Mapping[str, ArrayLike] | None = None, copy: bool = True) -> np.ndarray:
        """Add many events from columns; names/categories as ids or strings.

        ``stats`` maps key -> values for every new event (None/NaN-free), or
        key -> (local_rows, values) for a subset. Returns the new rows. Each column is
        copied once (converted to its type on the way); with ``copy=False`` a column
        already of its type, contiguous and of the events' length is kept as given, for
        a reader that hands over arrays it no longer changes (a big load's columns: one
        copy of each fewer).
        """
        n = len(start_ns)
        self._flush_small()
        cols = {
            "track": _int32(np.asarray(track), n, copy),
            "name": self._ids(name, n, copy),
            "category": self._ids(category, n, copy),
            "start_ns": _owned(np.asarray(start_ns), np.int64, copy),
            "dur_ns": _owned(np.asarray(dur_ns), np.int64, copy),
        }
        for k, v in cols.items():
            if len(v) != n:
                raise TraceSchemaError(f"column {k} has {len(v)} values, expected {n}")
        base = self._n
        self._chunks.append(cols)
        self._n += n
        for key, val in (stats or {}).items():
            if isinstance(val, tuple):
                rows, values = val
                self.add_stat(key, np.asarray(rows, np.int64) + base, values)
            else:
                self.add_stat(key, np.arange(base, base + n, dtype=np.int64), val)
        return np.arange(base, base + n, dtype=np.int64)

    def _ids(self, values: ArrayLike, n: int, copy: bool = True) -> np.ndarray:
        if isinstance(values, str):
            return np.full(n, self.intern(values), np.int32)
        arr = np.asarray(values)
        if arr.dtype.kind in "iu":
            return _int32(arr, n, copy)
        return self.intern_many(arr)

    def add_stat(self, key: str, rows: ArrayLike, values: ArrayLike | TextCodes) -> None:
        """Attach ``values`` under ``key`` to the given event rows (text as
        :class:`TextCodes` where it has few distinct values: no object per event until
        the columns are made). Stats given at the same ``rows`` array share it in the Trace."""
        rows = np.asarray(rows, np.int64)
        vals = values if isinstance(values, TextCodes) else as_values(values)
        if len(rows) != len(vals):
            raise TraceSchemaError(f"stat {key!r}: {len(rows)} rows but {len(vals)} values")
        self._stat_parts.setdefault(key, []).append((rows, vals))

    def add_stats(self, stats: StatTable, n_events: int, rows: np.ndarray | None = None, base: int = 0) -> None:
        """Every stat of a trace of ``n_events`` events, for its events ``rows`` (ascending;
        None: all), which are this builder's rows ``base`` onwards, in order. Columns it has
        not decoded stay undecoded (decoded, and their rows mapped, on first use here)."""
        cols, parts = stats.carried(RowMap.of(n_events, rows, base))
        for key, col in cols.items():
            self._stat_parts.setdefault(key, []).append((col.rows, col.values))
        self._stat_deferred.extend(parts)

    # -------------------------------------------------------------- flows, counters
    def flow(self, src: int, dst: int, flow_id: int = 0, category: str = "") -> None:
        f = self._flows
        f["src"].append(src)
        f["dst"].append(dst)
        f["id"].append(flow_id)
        f["category"].append(self.intern(category))

    def flows(self, src: np.ndarray, dst: np.ndarray, flow_id: np.ndarray | None = None,
              category: str = "") -> None:
        src = np.asarray(src, np.int64)
        n = len(src)
        ids = np.zeros(n, np.int64) if flow_id is None else np.asarray(flow_id)
        cols = {"src": src, "dst": np.asarray(dst, np.int64), "id": ids,
                "category": np.full(n, self.intern(category))}
        self._flow_chunks.append({k: np.asarray(cols[k], t) for k, t in FLOW_COLUMNS.items()})

    def counter(self, plane: int, name: str, ts_ns: ArrayLike, value: ArrayLike) -> None:
        """Add samples of the counter ``name`` (scalars or arrays)."""
        ts = np.atleast_1d(np.asarray(ts_ns, np.int64))
        self._counter_chunks.append({
            "plane": np.full(len(ts), plane, np.int32),
            "name": np.full(len(ts), self.intern(name), np.int32),
            "ts_ns": ts,
            "value": np.atleast_1d(np.asarray(value, np.float64)),
        })

    # -------------------------------------------------------------- whole traces
    def add_trace(self, t: "Trace") -> "Assembler":
        """Add every part of ``t`` after what is here: its sources matched by identity
        (``Source.key``), planes by (source, name), tracks by (plane, kind, tid, name),
        every id remapped by array indexing, its stats carried (deferred ones stay
        deferred). ``t.metadata`` goes to its source when it has one named source, and
        into this trace's metadata (``merge_metadata``)."""
        offset = self._n
        single = len(t.sources) == 1
        srcmap = []
        for s in t.sources:
            i = self.source(s.rank, s.host, s.pid, s.label, s.clock, s.metadata)
            if single and s.key() != (None, "", 0, ""):
                merge_metadata(self.sources[i].metadata, t.metadata)
            srcmap.append(i)
        smap = np.fromiter((self.intern(s) for s in t.strings), np.int32, len(t.strings))
        pmap = np.array([self.plane(p.name, p.kind, p.vendor, p.index, p.pid, p.properties, srcmap[p.source])
                         for p in t.planes], dtype=np.int32)
        tmap = np.array([self.track(int(pmap[tr.plane]), tr.name, tr.kind, tr.tid, tr.sort_index,
                                    tr.properties) for tr in t.tracks], dtype=np.int32)
        n = t.n_events
        if n:
            ev = t.events
            self.events(tmap[ev["track"]], smap[ev["name"]], ev["start_ns"], ev["dur_ns"], smap[ev["category"]])
        self.add_stats(t.stats, n, base=offset)
        fl = t.flows
        if len(fl["src"]):
            self._flow_chunks.append({"src": fl["src"] + offset, "dst": fl["dst"] + offset,
                                      "id": fl["id"].astype(np.int64), "category": smap[fl["category"]]})
        c = t.counters
        if len(c["ts_ns"]):
            self._counter_chunks.append({"plane": pmap[c["plane"]], "name": smap[c["name"]],
                                         "ts_ns": c["ts_ns"], "value": c["value"]})
        merge_metadata(self.metadata, t.metadata)
        return self

    # -------------------------------------------------------------- the parts
    def parts(self) -> Parts:
        """Every part gathered, as the Trace's fields; the builder keeps them, so asking
        again gives the same parts."""
        self._flush_small()
        events = {}
        for k, t in EVENT_COLUMNS.items():  # column by column, each chunk's part freed once copied
            parts = [c.pop(k) for c in self._chunks]  # (one chunk: its own column, copied in events())
            events[k] = (parts[0] if len(parts) == 1 else np.concatenate(parts)) if parts else np.zeros(0, t)
        self._chunks = [dict(events)] if self._chunks else []  # building again gives the same trace
        for key, (rows, vals) in self._stat_small.items():
            self._stat_parts.setdefault(key, []).append((np.asarray(rows, np.int64), as_values(vals)))
        self._stat_small = {}
        merged = merge_stat_parts(self._stat_parts, consume=True)
        self._stat_parts = {k: [(c.rows, c.values)] for k, c in merged.items()}
        stats = StatTable(merged)
        stats.adopt(self._stat_deferred)
        flows = {k: np.concatenate([np.asarray(self._flows[k], dtype=t)] + [c[k] for c in self._flow_chunks])
                 for k, t in FLOW_COLUMNS.items()}
        counters = {k: (np.concatenate([c[k] for c in self._counter_chunks]) if self._counter_chunks
                        else np.zeros(0, t)) for k, t in COUNTER_COLUMNS.items()}
        return Parts(list(self.strings), list(self.planes), list(self.tracks), events, stats,
                     flows, counters, dict(self.metadata), list(self.sources))


def _int32(arr: np.ndarray, n: int, copy: bool) -> np.ndarray:
    """An int32 column of ``n`` values from ``arr`` (a scalar or one value is repeated)."""
    if arr.shape != (n,):
        return np.broadcast_to(arr.astype(np.int32), (n,)).copy()
    return _owned(arr, np.int32, copy)


def _owned(arr: np.ndarray, dtype: type, copy: bool) -> np.ndarray:
    """``arr`` as ``dtype`` in one copy, or itself when ``copy`` is false and it already
    is a contiguous array of that type."""
    if copy or arr.dtype != dtype or not arr.flags.c_contiguous:
        return np.array(arr, dtype=dtype)
    return arr


def merge_metadata(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Lists concatenate, dicts merge recursively, other values: first one wins."""
    for k, v in other.items():
        if k not in into:
            into[k] = v if not isinstance(v, (list, dict)) else (list(v) if isinstance(v, list) else dict(v))
        elif isinstance(into[k], list) and isinstance(v, list):
            into[k] = into[k] + v
        elif isinstance(into[k], dict) and isinstance(v, dict):
            merge_metadata(into[k], v)
