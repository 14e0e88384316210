"""One rank of a store: a directory of Parquet files, written from a Trace and read back.

``rank=R/``
  ``events.parquet``   one row per event, sorted by start time, in row groups of
                       ``chunk_rows``: ``track_id``, ``name_id``, ``category_id`` (ids into
                       ``strings.parquet``), ``start_ns``, ``dur_ns``, ``end_ns``,
                       ``input_row`` (the event's row in the trace it came from); for SQL also
                       ``plane``, ``track``, ``name``, ``category`` as dictionary-encoded
                       strings (Parquet interns them per row group); then one nullable
                       column per stat (``stat.<key>`` where a key would clash).
  ``flows.parquet``    src, dst (rows of events.parquet), id, category_id; for SQL also
                       src_input_row, dst_input_row (their events' ``input_row``) and
                       ``category`` (dictionary-encoded), so the ``flows`` view reads this
                       file alone (store schema 2; schema 1 files lack them)
  ``counters.parquet`` plane, name_id, ts_ns, value
  ``strings.parquet``  the string table
  ``rank.json``        sources, planes, tracks, stat columns and their kinds, trace metadata

Reading a rank gives back the Trace it was written from, its events in time order
(stats and flows follow their events); ``Trace`` analyses do not depend on event order.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import orjson
import pyarrow as pa

from ..errors import OutputError, TraceFormatError
from ..formats.native import bytes_back, records
from ..formats.parquet_pages import open_file, write_table, writer as parquet_writer
from ..formats.safety import clean_metadata, guarded
from ..trace import keys
from ..trace.native_write import json_default
from ..trace.core import COUNTER_COLUMNS, EVENT_COLUMNS, FLOW_COLUMNS, Trace
from ..trace.model import Plane, Source, Track
from ..trace.stats import StatColumn, StatTable
from ..trace.arrow_arrays import array, from_column, table
from ..trace.arrow_columns import numeric, validity
from ..trace import tables
from ..trace.tables import _dict_column
from ..trace.arrow_numpy import valid as valid_of
from ..trace.arrow_numpy import values as values_of

#: Event rows per Parquet row group (what a streaming reader holds at once).
CHUNK_ROWS = 1 << 18
BASE_COLUMNS = ("track_id", "name_id", "category_id", "start_ns", "dur_ns", "end_ns", "input_row",
                "plane", "track", "name", "category")
#: the columns of flows.parquet a rank read back needs (its SQL columns are left unread)
FLOW_FILE_COLUMNS = ("src", "dst", "id", "category_id")
FILES = ("events.parquet", "flows.parquet", "counters.parquet", "strings.parquet", "rank.json")
#: the hidden sibling a new store NAME is built in, ``.NAME`` + this (store/writer.py), each
#: rank in a folder ``.part-N`` there
NEW = ".polyprof-new"
PART = ".part-"
_FULL = (errno.ENOSPC, errno.EDQUOT)


def store_of(directory: Path) -> Path:
    """The store a rank folder being written belongs to: ``NAME`` beside
    ``.NAME.polyprof-new/.part-N``, else the folder itself (``write_rank`` called directly)."""
    new = directory.parent
    if directory.name.startswith(PART) and new.name.startswith(".") and new.name.endswith(NEW) \
            and len(new.name) > len(NEW) + 1:
        return new.parent / new.name[1:-len(NEW)]
    return directory


@contextmanager
def writing(directory: Path, store: Path | None = None) -> Iterator[None]:
    """An OSError while a rank's files are written into ``directory`` (a full disk above
    all) as the OutputError of the store being written (``store``; by default the one
    ``directory`` belongs to, :func:`store_of`), not of the input being read: the
    executor names the rank's input, the message the store and what went wrong."""
    try:
        yield
    except OSError as e:
        store = store_of(directory) if store is None else store
        what = "the disk is full" if e.errno in _FULL else "a file cannot be written"
        if store == directory:
            raise OutputError(f"{directory}: the rank cannot be written: {what} ({e.strerror or e})") from None
        raise OutputError(f"{store}: the store cannot be written: {what} ({directory.name}: {e.strerror or e}); "
                          "a store already there is left as it was") from None


def dumps(obj: Any) -> bytes:
    """rank.json's text: as a ``.polyprof`` file's header (bytes values, an XSpace's HLO,
    as ``{"__bytes__": base64}``: trace/native_write.py), indented."""
    return orjson.dumps(obj, default=json_default,
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_INDENT_2)


def masked(dense: np.ndarray, valid: np.ndarray) -> pa.Array:
    """``pa.array(dense, mask=~valid)`` of a NumPy column. Here, as everywhere a rank is
    written, arrays are built from their buffers (``trace/arrow_arrays.py``): ``pa.array``
    imports pandas on its first call, some 45 MiB of a convert's peak."""
    col = numeric(dense)
    bitmap, nulls = validity(valid)
    return from_column(col._replace(null_count=nulls, buffers=(bitmap, col.buffers[1])))


def text_columns(schema: pa.Schema) -> list[str]:
    """The columns Parquet dictionary-encodes (``use_dictionary``): the text ones. A
    number column (times, ids, number stats) written with a dictionary is larger and its
    writer holds a hash table of every value of the row group (14 MiB of one V100
    rank's 45k-event write), to fall back to plain pages anyway."""
    return [f.name for f in schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)
            or pa.types.is_binary(f.type)]


def release() -> None:
    """Arrow's freed memory back to the system (its pool keeps it otherwise: a store's
    ranks are read or written one after another, each would start from the last's peak)."""
    pa.default_memory_pool().release_unused()


def time_order(trace: Trace) -> np.ndarray:
    """Rows by start time (ties in their original order)."""
    return np.argsort(trace.events["start_ns"], kind="stable")


def stat_columns(keys: Iterable[str]) -> dict[str, str]:
    """The events.parquet column of each stat key (``trace/tables.stat_columns``: the key,
    or ``stat.<key>`` where a base column or another key's has that name, case aside)."""
    return tables.stat_columns(keys, BASE_COLUMNS)


class _PlacedStat:
    """One stat's values in time order, for its column to be built a row group at a time:
    the time-sorted positions of its rows, its values in that order, its kind (i/u/f/s/b)
    and Arrow type, decided once over the whole column."""

    def __init__(self, col: StatColumn, order_inv: np.ndarray):
        pos = order_inv[col.rows]
        by_pos = np.argsort(pos, kind="stable")
        self.pos = pos[by_pos]
        kind, vals = col.kind, col.values
        if kind in "iuf":
            self.typ = None
        elif all(isinstance(v, bytes) for v in vals):
            kind, self.typ = "b", pa.binary()
        else:
            kind, self.typ = "s", pa.string()
            if not all(isinstance(v, str) for v in vals):
                vals = np.array([v if isinstance(v, str) else str(v) for v in vals], object)
        self.kind, self.values = kind, np.asarray(vals)[by_pos]

    def column(self, a: int, b: int) -> pa.Array:
        """The nullable column of the time-sorted rows ``a`` to ``b``."""
        lo, hi = np.searchsorted(self.pos, (a, b))
        at = self.pos[lo:hi] - a
        if self.typ is None:
            dense = np.zeros(b - a, self.values.dtype)
            dense[at] = self.values[lo:hi]
            valid = np.zeros(b - a, bool)
            valid[at] = True
            return masked(dense, valid)
        dense = np.full(b - a, None, object)
        dense[at] = self.values[lo:hi]
        return array(dense, self.typ)


def write_rank(trace: Trace, directory: Path, chunk_rows: int = CHUNK_ROWS) -> dict[str, Any]:
    """Write one rank's trace into ``directory``; returns its summary for the manifest.
    events.parquet is written a row group at a time: only one row group's columns (its
    stats dense) are made at once, not every stat as a column of every event. A full
    disk is an OutputError naming the store (:func:`writing`)."""
    with writing(Path(directory)):
        return _write_rank(trace, Path(directory), chunk_rows)


def _write_rank(trace: Trace, directory: Path, chunk_rows: int) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    n = trace.n_events
    order = time_order(trace)
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    tp = trace.track_plane if trace.tracks else np.zeros(0, np.int32)
    planes, tracks = [p.name for p in trace.planes], [t.name for t in trace.tracks]
    placed = {name: (key, _PlacedStat(trace.stats[key], inv)) for key, name in stat_columns(trace.stats).items()}
    stats = [{"key": key, "column": name, "kind": st.kind} for name, (key, st) in placed.items()]
    writer = None
    try:
        for a in range(0, max(n, 1), chunk_rows):
            b = min(n, a + chunk_rows)
            rows = order[a:b]
            ev = {k: v[rows] for k, v in trace.events.items()}
            cols: dict[str, pa.Array] = {
                "track_id": array(ev["track"]), "name_id": array(ev["name"]),
                "category_id": array(ev["category"]), "start_ns": array(ev["start_ns"]),
                "dur_ns": array(ev["dur_ns"]), "end_ns": array(ev["start_ns"] + ev["dur_ns"]),
                "input_row": array(rows.astype(np.int64)),
                "plane": _dict_column(tp[ev["track"]] if len(rows) else np.zeros(0, np.int32), planes),
                "track": _dict_column(ev["track"], tracks),
                "name": _dict_column(ev["name"], trace.strings),
                "category": _dict_column(ev["category"], trace.strings),
            }
            for name, (_, st) in placed.items():
                cols[name] = st.column(a, b)
            events = table(cols)
            del ev, cols
            if writer is None:
                writer = parquet_writer(directory / "events.parquet", events.schema, compression="zstd",
                                        use_dictionary=text_columns(events.schema),
                                        write_statistics=["start_ns", "end_ns", "dur_ns", "track_id"])
            writer.write_table(events, row_group_size=chunk_rows)
            del events
    finally:
        if writer is not None:
            writer.close()
    fl = trace.flows
    flows = {"src": inv[fl["src"]] if len(fl["src"]) else fl["src"],
             "dst": inv[fl["dst"]] if len(fl["dst"]) else fl["dst"], "id": fl["id"], "category": fl["category"],
             "src_input_row": fl["src"], "dst_input_row": fl["dst"]}  # (a trace's rows are its input rows)
    return write_rest(trace, directory, flows, n, trace.span_ns, stats)


def write_rest(trace: Trace, directory: Path, flows: dict[str, np.ndarray], n: int, span_ns: tuple[int, int],
               stats: list[dict[str, str]]) -> dict[str, object]:
    """Every file of a rank but events.parquet: flows (``flows``: src, dst as rows of
    events.parquet, ``src_input_row``, ``dst_input_row`` as those events' ``input_row``, id,
    category), counters, strings and rank.json (``stats``: each stat's key, column and
    kind); the rank's summary for the manifest."""
    fl = table({"src": flows["src"], "dst": flows["dst"], "id": flows["id"], "category_id": flows["category"],
                **{k: np.asarray(flows[k]).astype(np.int64, copy=False) for k in ("src_input_row", "dst_input_row")},
                "category": _dict_column(np.asarray(flows["category"]), trace.strings)})
    write_table(fl, directory / "flows.parquet", compression="zstd", use_dictionary=["category"])
    del fl
    c = trace.counters
    write_table(table({"plane": c["plane"], "name_id": c["name"], "ts_ns": c["ts_ns"], "value": c["value"]}),
                directory / "counters.parquet", compression="zstd")
    write_table(table({"s": array(trace.strings, pa.string())}), directory / "strings.parquet", compression="zstd")
    info = {"events": n, "flows": len(flows["src"]), "counters": len(c["ts_ns"]),
            "span_ns": list(span_ns), "plane_names": [p.name for p in trace.planes]}
    header = {"sources": [asdict(s) for s in trace.sources], "planes": [asdict(p) for p in trace.planes],
              "tracks": [asdict(t) for t in trace.tracks], "stats": stats, "metadata": trace.metadata, **info}
    (directory / "rank.json").write_bytes(dumps(header))
    return info


def read_header(directory: Path) -> dict[str, Any]:
    path = directory / "rank.json"
    try:
        raw = path.read_bytes()
        header = orjson.loads(raw)
    except FileNotFoundError:
        raise TraceFormatError(path, "missing: the store is damaged (a rank without its rank.json)") from None
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"damaged store: rank.json is not valid JSON ({e})") from None
    if not isinstance(header, dict) or not {"planes", "tracks", "stats", "events"} <= set(header):
        raise TraceFormatError(path, "damaged store: rank.json lacks planes, tracks, stats or events")
    if b'"__bytes__"' in raw:  # (a store without bytes values is not walked)
        bytes_back(path, header, "rank.json")
    _check_header(path, header)
    return header


def _check_header(path: Path, header: dict[str, Any]) -> None:
    """TraceFormatError unless rank.json's parts have the types its readers take: planes,
    tracks and sources field by field as the .polyprof header's (``native.records``),
    stat entries, the event count; its metadata cleaned as every reader's."""
    for what, cls in (("planes", Plane), ("tracks", Track), ("sources", Source)):
        records(path, what, header.get(what, []), cls, "rank.json")
    n = header["events"]
    if type(n) is not int or not 0 <= n < 2**63:
        raise TraceFormatError(path, f"damaged store: rank.json's event count is {n!r}"[:120])
    stats = header["stats"]
    if not isinstance(stats, list) or not all(
            isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("key", "column", "kind")) for s in stats):
        raise TraceFormatError(path, "damaged store: rank.json's stats are not stat entries (key, column, kind)")
    metadata = header.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise TraceFormatError(path, "damaged store: rank.json's metadata is not an object")
    clean_metadata(metadata)


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:  # ParquetFile.read: no dataset layer, no thread pool (less memory for one rank)
        table = open_file(path).read(columns=columns, use_threads=False)  # (pages' checksums checked)
        table.validate(full=True)  # damaged buffers crash pyarrow later instead of raising
        return table
    except FileNotFoundError:
        raise TraceFormatError(path, "missing: the store is damaged") from None
    except (pa.ArrowException, OSError, KeyError) as e:
        raise TraceFormatError(path, f"damaged store file ({e})") from None


@guarded  # whatever the checks here miss still leaves as a TraceFormatError naming the rank
def read_rank(directory: Path) -> Trace:
    """The Trace of one rank, its events in the order of the trace it was converted from
    (``input_row``; the files hold them in time order), so that reading a rank back
    gives the very trace that was written: every analysis of it, event rows included,
    equals that of the input file.

    The stats analyses look up (``trace.keys``) are read at once; the others (Kineto's
    other args, XSpace's other stats) on first use, as the Kineto reader defers them, so
    a summary never reads them."""
    header = read_header(directory)
    stats_meta = header["stats"]
    eager = [s for s in stats_meta if s["key"] in _WELL_KNOWN]
    lazy = [s for s in stats_meta if s["key"] not in _WELL_KNOWN]
    path = directory / "events.parquet"
    table = _read(path, ["track_id", "name_id", "category_id", "start_ns", "dur_ns", "input_row",
                         *(s["column"] for s in eager)])
    n = header["events"]
    if table.num_rows != n:
        raise TraceFormatError(path, f"damaged store: {table.num_rows} events, rank.json says {n}")
    input_rows = values_of(table.column("input_row")).astype(np.int64, copy=False)
    order = _input_order(path, input_rows)
    events = {k: values_of(table.column(c)).astype(EVENT_COLUMNS[k], copy=False)[order] for k, c in
              (("track", "track_id"), ("name", "name_id"), ("category", "category_id"),
               ("start_ns", "start_ns"), ("dur_ns", "dur_ns"))}
    stats = _stat_columns(table, eager, input_rows)
    del table
    fl = _read(directory / "flows.parquet", list(FLOW_FILE_COLUMNS))
    flows = {k: values_of(fl.column(c)).astype(FLOW_COLUMNS[k], copy=False)
             for k, c in (("src", "src"), ("dst", "dst"), ("id", "id"), ("category", "category_id"))}
    if len(flows["src"]):
        if (flows["src"].min(initial=0) < 0 or flows["dst"].min(initial=0) < 0
                or max(flows["src"].max(), flows["dst"].max()) >= n):
            raise TraceFormatError(directory / "flows.parquet", "damaged store: a flow names an event beyond the rank's")
        flows["src"] = input_rows[flows["src"]]
        flows["dst"] = input_rows[flows["dst"]]
    ct = _read(directory / "counters.parquet")
    counters = {k: values_of(ct.column(c)).astype(COUNTER_COLUMNS[k], copy=False)
                for k, c in (("plane", "plane"), ("name", "name_id"), ("ts_ns", "ts_ns"), ("value", "value"))}
    strings = _read(directory / "strings.parquet").column("s").to_pylist()
    try:
        trace = Trace(strings, [Plane(**p) for p in header["planes"]], [Track(**t) for t in header["tracks"]],
                      events, StatTable(stats), flows, counters, header.get("metadata", {}),
                      sources=[Source(**s) for s in header.get("sources", [])])
        trace.validate()
    except Exception as e:  # ids out of range, bad planes: a damaged or hand-edited store
        raise TraceFormatError(directory, f"damaged store: inconsistent rank ({e})") from None
    if lazy:
        part = _StoredStats(path, lazy, input_rows)
        trace.stats.defer(part.decode, _WELL_KNOWN, part.may_hold, part.decode_rows, part.decode_keys)
    release()
    return trace


def _input_order(path: Path, input_rows: np.ndarray) -> np.ndarray:
    """The file's rows in input order (the inverse of ``input_rows``, which must be a
    permutation of the rank's rows)."""
    n = len(input_rows)
    seen = np.zeros(n, bool)
    if n and (input_rows.min() < 0 or input_rows.max() >= n):
        raise TraceFormatError(path, "damaged store: input_row out of range")
    seen[input_rows] = True
    if not seen.all():
        raise TraceFormatError(path, "damaged store: input_row is not a permutation of the events")
    order = np.empty(n, np.int64)
    order[input_rows] = np.arange(n, dtype=np.int64)
    return order


#: stat keys analyses look up (trace.keys, and analyze.common's DEVICE_DURATION_PS); a
#: deferred part that lacks one says so, so looking it up decodes nothing
#: (tests/test_store.py checks that a summary leaves the text stats undecoded)
_WELL_KNOWN = frozenset([v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str)
                         and not k.startswith(("CAT_", "LINE_", "HOST_"))] + ["device_duration_ps"])


class _StoredStats:
    """A rank's stats read on first use (``StatTable.defer``): which keys it holds is
    known from rank.json, and each key is a column of its own, so a lookup reads that
    column alone, and a lookup of some events' values (``lookup_rows``) reads the
    columns asked for and keeps those events'."""

    def __init__(self, path: Path, meta: list[dict[str, Any]], input_rows: np.ndarray):
        self.path, self.meta, self.input_rows = path, meta, input_rows
        self.keys = frozenset(s["key"] for s in meta)

    def may_hold(self, key: str) -> bool:
        return key in self.keys

    def decode(self) -> dict[str, StatColumn]:
        return self.decode_keys(None)

    def decode_keys(self, keys: Any, skip: Any = ()) -> dict[str, StatColumn]:
        """The columns of ``keys`` (None: every key not in ``skip``)."""
        meta = [s for s in self.meta if (s["key"] not in skip if keys is None else s["key"] in keys)]
        if not meta:
            return {}
        return _stat_columns(_read(self.path, [s["column"] for s in meta]), meta, self.input_rows)

    def decode_rows(self, keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
        """The values of ``keys`` at the events ``rows`` (ascending) that have them."""
        out = {}
        for key, col in self.decode_keys(keys).items():
            at = np.searchsorted(rows, col.rows)
            keep = (at < len(rows)) & (rows[np.minimum(at, len(rows) - 1)] == col.rows) if len(rows) else \
                np.zeros(len(col.rows), bool)
            out[key] = StatColumn(col.rows[keep], col.values[keep])
        return out


def _stat_columns(table: pa.Table, meta: list[dict[str, Any]], input_rows: np.ndarray) -> dict[str, StatColumn]:
    """Each stat of ``meta`` at the events (in input order: ``input_rows``) that have it."""
    stats = {}
    for s in meta:
        col = table.column(s["column"])
        valid = valid_of(col)
        at = np.flatnonzero(valid)
        rows = input_rows[at]
        by_row = np.argsort(rows, kind="stable")
        present = col.drop_null()
        if s["kind"] in "iuf":
            values = values_of(present)[by_row]
        else:
            values = np.empty(len(rows), object)
            values[:] = present.to_pylist()
            values = values[by_row]
        stats[s["key"]] = StatColumn(rows[by_row], values)
    return stats
