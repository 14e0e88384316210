"""A store's rank in time windows that can be analysed one at a time (docs/store.md,
"Summary of a rank that does not fit").

A *quiet point* is the start of a step (a ``ProfilerStep#N`` event on the host) that
nothing spans: no event starts before it and ends after it, and no flow and no
correlation id joins an event before it to one after it (a launch and the kernel it
launched, on either side). The events between two quiet points then form a trace of
their own: every derivation (steps, correlation, flows, nesting) finds in it what it
finds in the whole rank, so the analyses of its steps are those of the whole rank's
restricted to them. :func:`plan` finds the quiet points in two passes over
``events.parquet`` (a row group at a time: the step events, then what spans or joins
them) and cuts the rank into windows of at most ``max_events`` events where it can; its
first pass also finds the planes the whole rank has device activity on, which a window
alone may not (``Plan.devices``). :func:`read_window` reads the events of one window back
as a Trace.

Memory: a row group, plus the start of every event (8 bytes each, to place the flows'
ends), the distinct (track, category, name) of device tracks, and the (id, start) pairs of
one id column at a time while the plan is made; a window's events while it is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TraceFormatError
from ..formats.parquet_pages import open_file
from ..trace.categories import DEVICE_ACTIVITY, kinds_for_strings, refine_by_name
from ..trace.core import COUNTER_COLUMNS, EVENT_COLUMNS, FLOW_COLUMNS, Trace
from ..trace.model import Plane, Source, Track
from ..trace.stats import StatColumn, StatTable
from ..trace.arrow_numpy import valid as valid_of
from ..trace.arrow_numpy import values as values_of
from .rankfiles import _WELL_KNOWN, FLOW_FILE_COLUMNS, _read, read_header
from ..trace.sorting import member, unique, unique_rows

#: a row group's values of one stat: numbers as an array, text and bytes as a list
StatValues = Union[np.ndarray, list]
_STEP = re.compile(r"^ProfilerStep#\d+$")
#: categories of a profiler's own span over the whole recording (Kineto's "PyTorch
#: Profiler (0)", category ``Trace``): it would block every quiet point, and is counted in
#: the window it starts in
_PROFILER_SPANS = frozenset({"trace"})
_FAR = 1 << 62
#: the id stats that join a launch to what it launched (and an op to its launches)
_JOINING = ("correlation_id",)
#: events handled at once where the plan goes over every event's start
_SLICE = 1 << 20
#: (id, start) pairs held at once where ids are sparse
_PAIRS = 1 << 21


@dataclass(frozen=True)
class Plan:
    """Windows ``[bounds[i], bounds[i+1])`` of event start times (the first from -inf,
    the last to +inf), the events in each, the steps as found, the largest window's events,
    and ``devices``: the ids (ascending) of the planes the whole rank has device activity
    on (``derive.correlate.device_activity_rows``: kernels, copies, fills and collectives on
    real tracks of planes not the host's), which a window without any is told
    (``analyze.common.carry_devices``)."""

    bounds: np.ndarray
    events: np.ndarray
    steps: int
    largest: int
    devices: np.ndarray

    def windows(self) -> Iterator[tuple[int, int]]:
        for i in range(len(self.bounds) - 1):
            yield int(self.bounds[i]), int(self.bounds[i + 1])


def _row_groups(path: Path, columns: list[str]) -> Iterator[tuple[int, pa.Table]]:
    """(first file row, table) of each row group of ``path``, with ``columns``."""
    f = _open(path)
    row = 0
    for g in range(f.num_row_groups):
        t = _group(path, f, g, columns)
        yield row, t
        row += t.num_rows


def _open(path: Path) -> pq.ParquetFile:
    """``path`` opened (its footer read), its pages' checksums checked as they are read."""
    try:
        return open_file(path)
    except FileNotFoundError:
        raise TraceFormatError(path, "missing: the store is damaged") from None
    except (pa.ArrowException, OSError) as e:
        raise TraceFormatError(path, f"damaged store file ({e})") from None


def _group(path: Path, f: pq.ParquetFile, g: int, columns: list[str]) -> pa.Table:
    """Row group ``g`` of ``f`` (the file ``path``), with ``columns``: a page whose checksum
    does not match, or that does not decode, is a damaged store file."""
    try:
        return f.read_row_group(g, columns=columns, use_threads=False)
    except (pa.ArrowException, OSError, KeyError) as e:
        raise TraceFormatError(path, f"damaged store file ({e})") from None


def _np(t: pa.Table, c: str) -> np.ndarray:
    return values_of(t.column(c)).astype(np.int64, copy=False)


def plan(directory: Path, max_events: int) -> Plan:
    """Cut the rank at ``directory`` into windows of whole steps between quiet points, each of
    at most ``max_events`` events where the quiet points allow (a window between two
    neighbouring quiet points may hold more)."""
    header = read_header(directory)
    path = directory / "events.parquet"
    strings = _read(directory / "strings.parquet").column("s").to_pylist()
    step_ids = np.array([i for i, s in enumerate(strings) if isinstance(s, str) and _STEP.match(s)], np.int64)
    own = np.array([i for i, s in enumerate(strings) if isinstance(s, str) and s.lower() in _PROFILER_SPANS], np.int64)
    n = int(header["events"])
    starts = np.empty(n, np.int64)
    s0: list[np.ndarray] = []
    s1: list[np.ndarray] = []
    host = _real_tracks(header, True)
    device = _real_tracks(header, False)
    seen = np.zeros((0, 3), np.int64)  # the distinct (track, category, name) on those of planes not the host's
    for row, t in _row_groups(path, ["name_id", "track_id", "category_id", "start_ns", "end_ns", "dur_ns"]):
        s = _np(t, "start_ns")
        starts[row:row + len(s)] = s
        names, tracks = _np(t, "name_id"), _np(t, "track_id")
        if len(step_ids):
            k = member(names, step_ids) & (_np(t, "dur_ns") > 0) & host[tracks]
            s0.append(s[k])
            s1.append(_np(t, "end_ns")[k])
        on = device[tracks]
        if on.any():
            seen = unique_rows(np.r_[seen[:, 0], tracks[on]], np.r_[seen[:, 1], _np(t, "category_id")[on]],
                               np.r_[seen[:, 2], names[on]])[0]
    devices = _activity_planes(seen, strings, header)
    del strings
    first, last = (np.concatenate(s0), np.concatenate(s1)) if s0 else (np.zeros(0, np.int64),) * 2
    order = np.argsort(first, kind="stable")
    c = _candidates(starts, first[order], last[order])
    if not len(c):
        return Plan(np.array([-_FAR, _FAR], np.int64), np.array([n], np.int64), len(first), n, devices)
    blocked = np.zeros(len(c) + 1, np.int64)  # a difference array over the candidates

    def block(lo: np.ndarray, hi: np.ndarray, right: str) -> None:
        """Candidates T with lo < T < hi (``right="left"``) or lo < T <= hi (``"right"``)."""
        i0 = np.searchsorted(c, lo, "right")
        i1 = np.searchsorted(c, hi, right)  # type: ignore[call-overload]
        k = i1 > i0
        blocked[:] += np.bincount(i0[k], minlength=len(blocked)) - np.bincount(i1[k], minlength=len(blocked))

    for _, t in _row_groups(path, ["start_ns", "end_ns", "category_id"]):
        keep = ~member(_np(t, "category_id"), own) if len(own) else slice(None)  # (one span over the whole profile)
        block(_np(t, "start_ns")[keep], _np(t, "end_ns")[keep], "left")
    fl = _read(directory / "flows.parquet", ["src", "dst"])
    for a in range(0, fl.num_rows, _SLICE):
        part = fl.slice(a, _SLICE)
        x, y = starts[_np(part, "src")], starts[_np(part, "dst")]
        block(np.minimum(x, y), np.maximum(x, y), "right")
    del fl
    counts = np.zeros(len(c) + 1, np.int64)
    for a in range(0, n, _SLICE):
        counts += np.bincount(np.searchsorted(c, starts[a:a + _SLICE], "right"), minlength=len(c) + 1)
    del starts
    for key in _JOINING:
        col = next((s["column"] for s in header["stats"] if s["key"] == key and s["kind"] in "iu"), None)
        if col is not None:
            _block_ids(path, col, block)
    quiet = np.cumsum(blocked)[:len(c)] == 0
    gap = np.searchsorted(first[order], c, "left")  # the step each candidate comes before
    q = np.flatnonzero(quiet)
    quiet[q[1:][gap[q[1:]] == gap[q[:-1]]]] = False  # one window start per gap between steps: its first
    quiet &= gap >= 2  # the first window holds two steps at least (the first is the warm-up, left out)
    return _cut(c, quiet, counts, max_events, len(first), devices)


def _real_tracks(header: dict, on_host: bool) -> np.ndarray:
    """Per track id: whether it is a real track (not a derived line) of a host plane
    (``on_host``; where a step is one of the rank's, derive/steps.py: a ``ProfilerStep#N``
    on a plane the trace labels a device is not), or of a plane not the host's (where
    device activity is, derive/correlate.py)."""
    host = {p["id"] for p in header["planes"] if p.get("kind") == "host"}
    tracks = header["tracks"]
    out = np.zeros(max((int(t["id"]) for t in tracks), default=-1) + 1, bool)
    for t in tracks:
        out[int(t["id"])] = (t.get("plane") in host) == on_host and t.get("kind") != "derived"
    return out


def _activity_planes(seen: np.ndarray, strings: list, header: dict) -> np.ndarray:
    """The planes (ids, ascending) of the distinct (track, category, name) ``seen`` on real
    tracks of planes not the host's whose kind is device activity, as ``Trace.kinds``
    tells the kinds (the category's, refined by name)."""
    if not len(seen):
        return np.zeros(0, np.int64)
    kinds = kinds_for_strings(strings)[seen[:, 1]]
    refine_by_name(strings, seen[:, 1], seen[:, 2], kinds)
    plane_of = {int(t["id"]): int(t["plane"]) for t in header["tracks"]}
    active = unique(seen[:, 0][member(kinds.astype(np.int64), np.array(DEVICE_ACTIVITY, np.int64))])
    return unique(np.array([plane_of[t] for t in active.tolist()], np.int64))  # (a few tracks)


def _candidates(starts: np.ndarray, s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """Where a window may begin: the start of a step but the first, or of an event that
    starts between two steps (after one ends, not after the next starts); ``s0``, the
    steps' starts, ascending, and ``s1`` their ends."""
    if len(s0) < 2:
        return np.zeros(0, np.int64)
    found = [s0[1:]]
    for a in range(0, len(starts), _SLICE):
        part = starts[a:a + _SLICE]
        i = np.searchsorted(s0, part, "left")  # the first step starting at or after each event
        between = (i >= 1) & (i < len(s0))
        between[between] &= part[between] >= s1[i[between] - 1]
        found.append(unique(part[between]))
    return unique(np.concatenate(found))


def _block_ids(path: Path, column: str, block: Callable[[np.ndarray, np.ndarray, str], None]) -> None:
    """Block the candidates between the first and last event of each id of ``column``:
    each id's first and last start, kept a row group at a time in arrays over the ids'
    range where that is dense, else from every (id, start) pair sorted by id."""
    lo, hi, present = _FAR, -_FAR, 0
    for _, t in _row_groups(path, [column]):
        ids = values_of(t.column(column).drop_null())
        present += len(ids)
        if len(ids):
            lo, hi = min(lo, int(ids.min())), max(hi, int(ids.max()))
    if present == 0:
        return
    if 0 < hi - lo + 1 <= 2 * present:  # dense ids (Kineto's correlation ids)
        first = np.full(hi - lo + 1, _FAR, np.int64)
        last = np.full(hi - lo + 1, -_FAR, np.int64)
        for _, t in _row_groups(path, [column, "start_ns"]):
            i, s = _ids(t, column)
            np.minimum.at(first, i - lo, s)
            np.maximum.at(last, i - lo, s)
        used = last > -_FAR
        block(first[used], last[used], "right")
        return
    parts = -(-present // _PAIRS)  # ids by their remainder, a share of them per pass
    for r in range(parts):
        pairs = [_ids(t, column, parts, r) for _, t in _row_groups(path, [column, "start_ns"])]
        i, s = np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])
        del pairs
        order = np.argsort(i, kind="stable")
        i, s = i[order], s[order]
        del order
        edge = np.flatnonzero(np.concatenate([[True], i[1:] != i[:-1]]))
        if len(edge):
            block(np.minimum.reduceat(s, edge), np.maximum.reduceat(s, edge), "right")


def _ids(t: pa.Table, column: str, parts: int = 1, r: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(id, start) of the events of ``t`` with an id (with ``parts``, those whose id is ``r``
    modulo ``parts``)."""
    col = t.column(column)
    valid = valid_of(col)
    i, s = values_of(col.drop_null()).astype(np.int64, copy=False), _np(t, "start_ns")[valid]
    if parts > 1:
        mine = i % parts == r
        i, s = i[mine], s[mine]
    return i, s



def _cut(c: np.ndarray, quiet: np.ndarray, counts: np.ndarray, max_events: int, steps: int,
         devices: np.ndarray) -> Plan:
    """Windows between quiet candidates, closing one before it would pass ``max_events``."""
    before = np.cumsum(counts)  # events starting before each candidate (and in all, last)
    total = int(before[-1])
    bounds = [-_FAR]
    sizes: list[int] = []
    opened = 0  # events before the current window
    for k in np.flatnonzero(quiet).tolist():
        nxt = np.flatnonzero(quiet[k + 1:])
        end = int(before[k + 1 + nxt[0]]) if len(nxt) else total  # the next quiet point's events before it
        if int(before[k]) > opened and end - opened > max_events:
            bounds.append(int(c[k]))
            sizes.append(int(before[k]) - opened)
            opened = int(before[k])
    bounds.append(_FAR)
    sizes.append(total - opened)
    return Plan(np.array(bounds, np.int64), np.array(sizes, np.int64), steps, max(sizes), devices)


class Window(NamedTuple):
    """A window's events as a Trace, and each one's row in the rank's Trace (its input row)."""

    trace: Trace
    input_rows: np.ndarray


def read_window(directory: Path, lo: int, hi: int, header: dict[str, Any] | None = None,
                strings: list[str] | None = None) -> Window:
    """The events of the rank at ``directory`` that start in ``[lo, hi)``, as a Trace: in
    the rank's input order, with the analyses' stats (trace.keys), the flows between them
    and the counters in the range. Planes, tracks, strings, sources and metadata are the
    rank's. A row group at a time is held as Arrow, the window's rows as NumPy."""
    header = header or read_header(directory)
    path = directory / "events.parquet"
    eager = [s for s in header["stats"] if s["key"] in _WELL_KNOWN]
    base = ["track_id", "name_id", "category_id", "start_ns", "dur_ns", "input_row"]
    cols: dict[str, list[np.ndarray]] = {c: [] for c in base}
    stat_at: dict[str, list[np.ndarray]] = {s["key"]: [] for s in eager}
    stat_values: dict[str, list[StatValues]] = {s["key"]: [] for s in eager}
    rows: list[np.ndarray] = []
    groups: list[tuple[int, np.ndarray | None]] = []
    f = _open(path)
    at = f.schema_arrow.get_field_index("start_ns")
    first = taken = 0
    for g in range(f.num_row_groups):
        md = f.metadata.row_group(g)
        st = md.column(at).statistics
        if st is not None and st.has_min_max and (st.max < lo or st.min >= hi):
            first += md.num_rows
            continue
        t = _group(path, f, g, [*base, *(s["column"] for s in eager)])
        s = _np(t, "start_ns")
        inside = (s >= lo) & (s < hi)
        keep = np.flatnonzero(inside)
        if len(keep):
            groups.append((g, inside if len(keep) < len(s) else None))
            if len(keep) < len(s):
                t = t.filter(pa.array(inside))
            for c in base:
                cols[c].append(_np(t, c))
            for m in eager:
                _take_stat(t.column(m["column"]), m["kind"], taken, stat_at[m["key"]], stat_values[m["key"]])
            rows.append(keep + first)
            taken += len(keep)
        first += md.num_rows
        del t
    joined = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in cols.items()}
    del cols
    file_rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    by_input = np.argsort(joined["input_row"], kind="stable")
    input_rows = joined["input_row"][by_input]
    local = np.empty(len(by_input), np.int64)
    local[by_input] = np.arange(len(by_input))  # each file row's row in the window's trace
    events = {k: joined[c].astype(EVENT_COLUMNS[k], copy=False)[by_input] for k, c in
              (("track", "track_id"), ("name", "name_id"), ("category", "category_id"),
               ("start_ns", "start_ns"), ("dur_ns", "dur_ns"))}
    del joined
    stats = _columns(eager, stat_at, stat_values, local)
    flows = _window_flows(directory, file_rows, local)
    ct = _read(directory / "counters.parquet")
    ts = values_of(ct.column("ts_ns"))
    inside = (ts >= lo) & (ts < hi)
    counters = {k: values_of(ct.column(c))[inside].astype(COUNTER_COLUMNS[k], copy=False)
                for k, c in (("plane", "plane"), ("name", "name_id"), ("ts_ns", "ts_ns"), ("value", "value"))}
    if strings is None:
        strings = _read(directory / "strings.parquet").column("s").to_pylist()
    trace = Trace(strings, [Plane(**p) for p in header["planes"]], [Track(**t) for t in header["tracks"]],
                  events, StatTable(stats), flows, counters, header.get("metadata", {}),
                  sources=[Source(**s) for s in header.get("sources", [])]).validate()
    lazy = [s for s in header["stats"] if s["key"] not in _WELL_KNOWN]
    if lazy:
        part = _WindowStats(path, lazy, groups, local)
        trace.stats.defer(part.decode, _WELL_KNOWN, part.may_hold, part.decode_rows, part.decode_keys)
    return Window(trace, input_rows)


def _columns(meta: list[dict[str, Any]], at: dict[str, list[np.ndarray]], values: dict[str, list[StatValues]],
             local: np.ndarray) -> dict[str, StatColumn]:
    """Each stat of ``meta`` at the window's rows that have it (``at``: positions in the
    window's file order, which ``local`` maps to rows)."""
    out = {}
    for m in meta:
        key = m["key"]
        r = local[np.concatenate(at[key])] if at[key] else np.zeros(0, np.int64)
        v = _values(values[key], m["kind"])
        order = np.argsort(r, kind="stable")
        out[key] = StatColumn(r[order], v[order])
    return out


class _WindowStats:
    """A window's other stats, read on first use (``StatTable.defer``) from the row
    groups the window came from, as ``rankfiles._StoredStats`` reads a whole rank's."""

    def __init__(self, path: Path, meta: list[dict[str, Any]], groups: list[tuple[int, np.ndarray | None]],
                 local: np.ndarray):
        self.path, self.meta, self.groups, self.local = path, meta, groups, local
        self.keys = frozenset(s["key"] for s in meta)

    def may_hold(self, key: str) -> bool:
        return key in self.keys

    def decode(self) -> dict[str, StatColumn]:
        return self.decode_keys(None)

    def decode_keys(self, keys: Iterable[str] | None, skip: Iterable[str] = ()) -> dict[str, StatColumn]:
        """The columns of ``keys`` (None: every key not in ``skip``)."""
        meta = [s for s in self.meta if (s["key"] not in skip if keys is None else s["key"] in keys)]
        if not meta:
            return {}
        at: dict[str, list[np.ndarray]] = {m["key"]: [] for m in meta}
        values: dict[str, list[StatValues]] = {m["key"]: [] for m in meta}
        f = _open(self.path)
        offset = 0
        for g, inside in self.groups:
            t = _group(self.path, f, g, [m["column"] for m in meta])
            if inside is not None:
                t = t.filter(pa.array(inside))
            for m in meta:
                _take_stat(t.column(m["column"]), m["kind"], offset, at[m["key"]], values[m["key"]])
            offset += t.num_rows
        return _columns(meta, at, values, self.local)

    def decode_rows(self, keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
        """The values of ``keys`` at the events ``rows`` (ascending) that have them."""
        out = {}
        for key, col in self.decode_keys(keys).items():
            keep = np.isin(col.rows, rows)
            out[key] = StatColumn(col.rows[keep], col.values[keep])
        return out


def _take_stat(col: pa.ChunkedArray, kind: str, offset: int, at: list[np.ndarray], values: list[StatValues]) -> None:
    """The positions (from ``offset``) and values of a stat column's present rows."""
    valid = valid_of(col)
    at.append(np.flatnonzero(valid) + offset)
    present = col.drop_null()
    values.append(values_of(present) if kind in "iuf" else present.to_pylist())


def _values(parts: list[StatValues], kind: str) -> np.ndarray:
    """A stat's values from its row groups' (as ``rankfiles._stat_columns`` types them)."""
    if kind in "iuf":
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    out = np.empty(sum(len(p) for p in parts), object)
    i = 0
    for p in parts:
        out[i:i + len(p)] = p
        i += len(p)
    return out


def _window_flows(directory: Path, file_rows: np.ndarray, local: np.ndarray) -> dict[str, np.ndarray]:
    """The flows of the rank with both ends among ``file_rows`` (ascending), as rows of the
    window's trace."""
    fl = _read(directory / "flows.parquet", list(FLOW_FILE_COLUMNS))
    src, dst = _np(fl, "src"), _np(fl, "dst")
    out = {}
    if len(file_rows) and len(src):
        a = np.minimum(np.searchsorted(file_rows, src), len(file_rows) - 1)
        b = np.minimum(np.searchsorted(file_rows, dst), len(file_rows) - 1)
        k = (file_rows[a] == src) & (file_rows[b] == dst)
        out = {"src": local[a[k]], "dst": local[b[k]]}
        idx = np.flatnonzero(k)
    else:
        out = {"src": np.zeros(0, np.int64), "dst": np.zeros(0, np.int64)}
        idx = np.zeros(0, np.int64)
    out["id"] = values_of(fl.column("id"))[idx]
    out["category"] = values_of(fl.column("category_id"))[idx]
    return {k: v.astype(FLOW_COLUMNS[k], copy=False) for k, v in out.items()}
