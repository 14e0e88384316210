"""The in-memory Trace: one schema for live sessions and for every reader.

Events are columns (NumPy): track, name, category, start_ns, dur_ns; names and
categories are ids into one string table. Stats are sparse typed columns per key, in a
StatTable (a mapping; a reader may leave some columns to be decoded on first use).
Times are integer nanoseconds on the session's reference clock (CLOCK_MONOTONIC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from ..errors import TraceSchemaError
from .assemble import Assembler
from .categories import Kind, kinds_for_strings, refine_by_name
from .model import COUNTER_COLUMNS, EVENT_COLUMNS, FACTORY, FLOW_COLUMNS, Plane, Props, Record, Source, Track
from .stats import StatColumn, StatTable

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


def _empty(spec: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.zeros(0, dtype=t) for k, t in spec.items()}


@dataclass(init=False, repr=False, eq=False)  # its __init__ below; __eq__ model.Record's (__repr__ its own)
class Trace(Record):
    """A complete capture: planes, tracks, events, stats, flows, counters, metadata."""

    strings: list[str] = field(default_factory=list)
    planes: list[Plane] = field(default_factory=list)
    tracks: list[Track] = field(default_factory=list)
    events: dict[str, np.ndarray] = field(default_factory=lambda: _empty(EVENT_COLUMNS))
    stats: StatTable = field(default_factory=StatTable)  # a plain dict given is wrapped
    flows: dict[str, np.ndarray] = field(default_factory=lambda: _empty(FLOW_COLUMNS))
    counters: dict[str, np.ndarray] = field(default_factory=lambda: _empty(COUNTER_COLUMNS))
    metadata: dict[str, Any] = field(default_factory=dict)
    #: where the planes' data came from (``Plane.source`` indexes it); never empty: a
    #: trace of one process or file has one source, made here when none is given
    sources: list[Source] = field(default_factory=list)

    def __init__(self, strings: list[str] = FACTORY, planes: list[Plane] = FACTORY,
                 tracks: list[Track] = FACTORY, events: dict[str, np.ndarray] = FACTORY,
                 stats: StatTable = FACTORY, flows: dict[str, np.ndarray] = FACTORY,
                 counters: dict[str, np.ndarray] = FACTORY, metadata: Props = FACTORY,
                 sources: list[Source] = FACTORY) -> None:
        self.strings = [] if strings is FACTORY else strings
        self.planes = [] if planes is FACTORY else planes
        self.tracks = [] if tracks is FACTORY else tracks
        self.events = _empty(EVENT_COLUMNS) if events is FACTORY else events
        self.stats = StatTable() if stats is FACTORY else stats
        self.flows = _empty(FLOW_COLUMNS) if flows is FACTORY else flows
        self.counters = _empty(COUNTER_COLUMNS) if counters is FACTORY else counters
        self.metadata = {} if metadata is FACTORY else metadata
        self.sources = [] if sources is FACTORY else sources
        self.__post_init__()

    def __post_init__(self) -> None:
        if not isinstance(self.stats, StatTable):
            self.stats = StatTable(self.stats)
        if not self.sources:
            self.sources = [Source(0)]

    # ------------------------------------------------------------------ checks
    def validate(self) -> "Trace":
        """Raise TraceSchemaError if columns, ids or stats are inconsistent."""
        for table, spec in (("events", EVENT_COLUMNS), ("flows", FLOW_COLUMNS),
                            ("counters", COUNTER_COLUMNS)):
            cols = getattr(self, table)
            if not isinstance(cols, dict) or set(cols) != set(spec):
                raise TraceSchemaError(f"{table} must have exactly the columns {sorted(spec)}")
            lengths = {len(np.asarray(c)) for c in cols.values()}
            if len(lengths) > 1:
                raise TraceSchemaError(f"{table} columns differ in length: {sorted(lengths)}")
            for k, t in spec.items():
                cols[k] = np.asarray(cols[k]).astype(t, copy=False)
        n, ns = self.n_events, len(self.strings)
        ev = self.events
        if n:
            if ev["track"].min() < 0 or ev["track"].max() >= len(self.tracks):
                raise TraceSchemaError("event track id out of range")
            for col in ("name", "category"):
                if ev[col].min() < 0 or ev[col].max() >= ns:
                    raise TraceSchemaError(f"event {col} id out of range of the string table")
            if ev["dur_ns"].min() < 0:
                raise TraceSchemaError("negative event duration")
        for i, tr in enumerate(self.tracks):
            if tr.id != i or not 0 <= tr.plane < len(self.planes):
                raise TraceSchemaError(f"track {tr.name!r} has a bad id or plane")
        for i, s in enumerate(self.sources):
            if s.id != i:
                raise TraceSchemaError(f"source {s.describe()!r} has id {s.id}, expected {i}")
        for i, p in enumerate(self.planes):
            if p.id != i:
                raise TraceSchemaError(f"plane {p.name!r} has id {p.id}, expected {i}")
            if not 0 <= p.source < len(self.sources):
                raise TraceSchemaError(f"plane {p.name!r} refers to source {p.source}, "
                                       f"but the trace has {len(self.sources)}")
        if not isinstance(self.stats, StatTable):  # a dict assigned after construction
            self.stats = StatTable(self.stats)
        self.stats.check(n)  # deferred stats are checked when decoded
        fl = self.flows
        if len(fl["src"]) and (min(fl["src"].min(), fl["dst"].min()) < 0
                               or max(fl["src"].max(), fl["dst"].max()) >= n):
            raise TraceSchemaError("flow refers to events that do not exist")
        if len(fl["category"]) and (fl["category"].min() < 0 or fl["category"].max() >= ns):
            raise TraceSchemaError("flow category refers to a string that does not exist")
        if len(self.counters["plane"]) and self.counters["plane"].max() >= len(self.planes):
            raise TraceSchemaError("counter plane id out of range")
        return self

    # ------------------------------------------------------------------ basics
    @property
    def n_events(self) -> int:
        return len(self.events["start_ns"])

    @property
    def start_ns(self) -> np.ndarray:
        return self.events["start_ns"]

    @property
    def dur_ns(self) -> np.ndarray:
        return self.events["dur_ns"]

    @property
    def end_ns(self) -> np.ndarray:
        return self.events["start_ns"] + self.events["dur_ns"]

    @cached_property
    def _string_array(self) -> np.ndarray:
        arr = np.empty(len(self.strings), dtype=object)
        arr[:] = self.strings
        return arr

    def names(self, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Event names as an object array (optionally for some rows)."""
        ids = self.events["name"] if rows is None else self.events["name"][rows]
        return self._string_array[ids]

    def categories(self, rows: np.ndarray | slice | None = None) -> np.ndarray:
        ids = self.events["category"] if rows is None else self.events["category"][rows]
        return self._string_array[ids]

    @cached_property
    def kinds(self) -> np.ndarray:
        """Kind (trace.categories.Kind) of every event, from its category."""
        if not self.n_events:
            return np.zeros(0, np.int8)
        kinds = kinds_for_strings(self.strings)[self.events["category"]]
        refine_by_name(self.strings, self.events["category"], self.events["name"], kinds)
        return kinds

    def rows_of_kind(self, *kinds: Kind) -> np.ndarray:
        """Rows whose kind is one of ``kinds`` (one table lookup per row: ``np.isin``'s
        set-up is paid on every call, and a summary asks a dozen times)."""
        k = self.kinds
        if k.dtype != np.int8:
            return np.flatnonzero(np.isin(k, np.asarray(kinds, dtype=np.int8)))
        want = np.zeros(256, bool)
        want[np.asarray(kinds, np.int64) & 0xFF] = True  # the kinds' int8 codes, as bytes
        return np.flatnonzero(want[k.view(np.uint8)])

    def rows_named(self, *names: str) -> np.ndarray:
        """Rows whose name is one of ``names`` (exact; one table lookup per row)."""
        ids = [i for i in map(self.string_id, names) if i >= 0]
        if not ids:
            return np.zeros(0, np.int64)
        want = np.zeros(len(self.strings), bool)
        want[ids] = True
        return np.flatnonzero(want[self.events["name"]])

    @cached_property
    def track_plane(self) -> np.ndarray:
        """Plane id of every track (index by track id)."""
        return np.array([t.plane for t in self.tracks], dtype=np.int32)

    def event_planes(self) -> np.ndarray:
        return self.track_plane[self.events["track"]] if self.n_events else np.zeros(0, np.int32)

    def string_id(self, s: str) -> int:
        """Id of ``s`` in the string table, or -1."""
        return self._string_index.get(s, -1)

    def intern(self, s: str) -> int:
        """Id of ``s`` in the string table, appended if new (appending keeps every id
        valid; the index of the strings grows with it). A pass that gives events a new
        category makes their kinds again itself (``kinds``: cached)."""
        i = self.string_id(s)
        if i < 0:
            i = len(self.strings)
            self.strings.append(s)
            self._string_index[s] = i
            self.__dict__.pop("_string_array", None)
        return i

    @cached_property
    def _string_index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.strings)}

    def stat(self, key: str) -> StatColumn | None:
        return self.stats.get(key)

    def stat_dense(self, key: str, fill: Any = None) -> np.ndarray:
        """Values of one stat for every event; ``fill`` where absent."""
        col = self.stats.get(key)
        if col is None:
            return np.full(self.n_events, fill, dtype=object if fill is None or isinstance(fill, str)
                           else np.asarray(fill).dtype)
        return col.dense(self.n_events, fill)

    def event_stats(self, row: int) -> dict[str, Any]:
        """All stats of one event (for display; not for hot paths)."""
        out = {}
        for key, col in self.stats.items():
            i = np.searchsorted(col.rows, row)
            if i < len(col.rows) and col.rows[i] == row:
                v = col.values[i]
                out[key] = v.item() if hasattr(v, "item") else v
        return out

    def plane_by_name(self, name: str, source: int | None = None) -> Plane | None:
        """The first plane called ``name`` (of ``source``, when given)."""
        return next((p for p in self.planes if p.name == name and (source is None or p.source == source)),
                    None)

    @cached_property
    def plane_source(self) -> np.ndarray:
        """Source id of every plane (index by plane id)."""
        return np.array([p.source for p in self.planes], dtype=np.int32)

    def event_sources(self) -> np.ndarray:
        """Source id of every event."""
        return self.plane_source[self.event_planes()] if self.n_events else np.zeros(0, np.int32)

    def tracks_of(self, plane: int) -> list[Track]:
        return [t for t in self.tracks if t.plane == plane]

    @property
    def span_ns(self) -> tuple[int, int]:
        """(first start, last end) over all events, or (0, 0) when empty."""
        if not self.n_events:
            return (0, 0)
        return int(self.start_ns.min()), int(self.end_ns.max())

    @property
    def extent_ns(self) -> tuple[int, int]:
        """(first, last) time of anything recorded: the events' span widened to the counter
        samples (a trace of GPU counters alone spans their samples), or (0, 0) when empty."""
        ts = self.counters["ts_ns"]
        if not len(ts):
            return self.span_ns
        lo, hi = int(ts.min()), int(ts.max())
        if not self.n_events:
            return lo, hi
        s0, s1 = self.span_ns
        return min(s0, lo), max(s1, hi)

    def __repr__(self) -> str:
        return (f"Trace({len(self.planes)} planes, {len(self.tracks)} tracks, {self.n_events} events, "
                f"{len(self.flows['src'])} flows, {len(self.counters['ts_ns'])} counter samples)")

    # ------------------------------------------------------------------ tables
    def to_arrow(self, stats: Iterable[str] | None = None) -> "pa.Table":
        """The event table as Arrow: one row per event, stats as nullable columns
        (``stats``: which, by key, one or several; default all of them; a key the trace
        does not have raises :class:`~polyprof.errors.TraceSchemaError`)."""
        from .tables import events_to_arrow  # pyarrow (and pandas) only for the tables' edge

        return events_to_arrow(self, stats)

    def to_pandas(self, stats: Iterable[str] | None = None) -> "pd.DataFrame":
        """The event table as a pandas DataFrame (see :meth:`to_arrow`)."""
        import pandas as pd
        import pyarrow as pa

        nullable = {pa.int64(): pd.Int64Dtype(), pa.uint64(): pd.UInt64Dtype()}
        return self.to_arrow(stats).to_pandas(types_mapper=nullable.get)

    def tables(self) -> dict[str, "pa.Table"]:
        """Every table: events, flows, counters, planes, tracks."""
        from .tables import all_tables  # pyarrow (and pandas) only for the tables' edge

        return all_tables(self)

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> Path:
        """Write the native ``.polyprof`` file (lossless)."""
        from .native_write import save  # the Arrow IPC writer only when a trace is saved, not on a load

        return save(self, path)

    def extend(self, other: "Trace") -> "Trace":
        """A new trace holding this one's data and ``other``'s (planes matched by
        source and name; the one pass of :func:`polyprof.trace.merge.merge`, made into a
        Trace here so that neither the builder nor merge is imported by this class)."""
        return Trace(*Assembler().add_trace(self).add_trace(other).parts()).validate()
