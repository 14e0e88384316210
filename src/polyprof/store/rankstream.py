"""One rank written chunk by chunk (a rank larger than memory; docs/store.md).

The files are those of :func:`rankfiles.write_rank`, with one difference: events are in
start order within each row group (a chunk each), not across the file. Each chunk is
written to a run file of its own (``.runs/N.parquet``) with the stat columns it has,
typed as they came; :meth:`RankStream.finish` then copies the runs, one at a time, into
``events.parquet`` with one type per stat (numbers widen, a stat that is text anywhere
is text everywhere: ``trace.stats.merge_columns``' rule), then writes the flows,
counters, strings and ``rank.json``. The first chunk is held until a second one comes:
a rank of one chunk (most ranks) goes straight into ``events.parquet``, the same file,
without a run written and read back. Memory: two chunks, and the flows' endpoints.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa

from ..errors import TraceFormatError
from ..formats.parquet_pages import open_file, write_table, writer
from ..trace.core import Trace
from ..trace.stats import StatColumn
from ..trace.tables import _dict_column
from ..trace.arrow_arrays import array, table
from ..trace.arrow_numpy import values as values_of
from .rankfiles import BASE_COLUMNS, masked, stat_columns, text_columns, write_rest, writing

_STATISTICS = ["start_ns", "end_ns", "dur_ns", "track_id"]


class ChunkNames(Protocol):
    """What a chunk's ids name."""
    @property
    def strings(self) -> list[str]: ...
    @property
    def plane_names(self) -> list[str]: ...
    @property
    def track_names(self) -> list[str]: ...
    @property
    def track_plane(self) -> np.ndarray: ...


class ChunkLike(Protocol):
    """Events in start order, each one's row in the input, stats by position in the chunk."""
    @property
    def events(self) -> dict[str, np.ndarray]: ...
    @property
    def input_row(self) -> np.ndarray: ...
    @property
    def stats(self) -> dict[str, StatColumn]: ...
    @property
    def names(self) -> ChunkNames: ...


class RankStream:
    """``add(chunk)`` for each chunk (events in start order, stats by position in the
    chunk), then ``finish(...)``."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        with writing(self.directory):
            self.directory.mkdir(parents=True, exist_ok=True)
            self.runs = self.directory / ".runs"
            self.runs.mkdir(exist_ok=True)
        self.n = 0
        self.n_runs = 0
        self.kinds: dict[str, set[str]] = {}  # stat key -> the kinds its chunks had (i/u/f/s/b)
        self.held: ChunkLike | None = None  # the first chunk, until a second comes

    def add(self, chunk: ChunkLike) -> None:
        if not len(chunk.events["start_ns"]):
            return
        if not self.n_runs and self.held is None:
            self.held = chunk
            return
        with writing(self.directory):  # a full disk names the store, not the input
            if self.held is not None:
                self._write_run(self.held)
                self.held = None
            self._write_run(chunk)

    def _write_run(self, chunk: ChunkLike) -> None:
        t = self._table(chunk)
        write_table(t, self.runs / f"{self.n_runs}.parquet", compression="zstd", use_dictionary=text_columns(t.schema),
                    row_group_size=max(len(chunk.events["start_ns"]), 1))
        self.n_runs += 1

    def _table(self, chunk: ChunkLike) -> pa.Table:
        """One chunk's columns, its stats typed as they came (their kinds noted)."""
        ev, nm = chunk.events, chunk.names
        n = len(ev["start_ns"])
        self.n += n
        cols: dict[str, pa.Array] = {
            "track_id": array(ev["track"]), "name_id": array(ev["name"]),
            "category_id": array(ev["category"]), "start_ns": array(ev["start_ns"]),
            "dur_ns": array(ev["dur_ns"]), "end_ns": array(ev["start_ns"] + ev["dur_ns"]),
            "input_row": array(chunk.input_row.astype(np.int64, copy=False)),
            "plane": _dict_column(nm.track_plane[ev["track"]], nm.plane_names),
            "track": _dict_column(ev["track"], nm.track_names),
            "name": _dict_column(ev["name"], nm.strings),
            "category": _dict_column(ev["category"], nm.strings),
        }
        for key, col in chunk.stats.items():
            arr, kind = _stat_array(col, n)
            cols[f"s:{key}"] = arr
            self.kinds.setdefault(key, set()).add(kind)
        return table(cols)

    def finish(self, trace: Trace, flows: dict[str, np.ndarray], span_ns: tuple[int, int]) -> dict[str, object]:
        """Write events.parquet from the runs, and the rank's other files (``trace``: its
        strings, planes, tracks, counters, metadata and sources; ``flows``: rows are
        positions among the events added); returns the rank's summary for the manifest."""
        with writing(self.directory):
            return self._finish(trace, flows, span_ns)

    def _finish(self, trace: Trace, flows: dict[str, np.ndarray], span_ns: tuple[int, int]) -> dict[str, object]:
        ends = _EndpointRows(flows["src"], flows["dst"])
        only = None
        if self.held is not None:  # the only chunk
            only, self.held = self._table(self.held), None
        final = {key: _final_kind(k) for key, k in self.kinds.items()}
        column = stat_columns(final)
        fields = [pa.field(c, t) for c, t in _base_schema()]
        fields += [pa.field(column[k], _ARROW[final[k]]) for k in final]
        schema = pa.schema(fields)
        with writer(self.directory / "events.parquet", schema, compression="zstd",
                    use_dictionary=text_columns(schema), write_statistics=_STATISTICS) as w:
            if only is not None:
                ends.take(only)
                w.write_table(_conform(only, schema, final, column), row_group_size=max(only.num_rows, 1))
                del only
            for i in range(self.n_runs):
                run = self.runs / f"{i}.parquet"
                t = _read_run(run)
                ends.take(t)
                w.write_table(_conform(t, schema, final, column), row_group_size=max(t.num_rows, 1))
                del t
                run.unlink()
        shutil.rmtree(self.runs, ignore_errors=True)
        stats = [{"key": k, "column": column[k], "kind": final[k]} for k in final]
        src_input, dst_input = ends.rows()
        del ends
        flows = {**flows, "src_input_row": src_input, "dst_input_row": dst_input}
        return write_rest(trace, self.directory, flows, self.n, span_ns, stats)

    def abort(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _read_run(run: Path) -> pa.Table:
    """A run file written before, its pages' checksums checked (a run damaged on disk
    between its write and this read is said so, not copied into the store)."""
    try:
        return open_file(run).read(use_threads=False)
    except (pa.ArrowException, OSError) as e:
        raise TraceFormatError(run, f"damaged run file of the rank being written ({e})") from None


class _EndpointRows:
    """The ``input_row`` of each flow's events (given as positions among the events
    added), found as the chunks are copied into events.parquet in that order (each
    chunk's own ``input_row`` column): memory grows with the flows (about 24 bytes an
    endpoint), not with the events."""

    def __init__(self, src: np.ndarray, dst: np.ndarray):
        self.n = len(src)
        ends = np.concatenate([np.asarray(src, np.int64), np.asarray(dst, np.int64)])
        self.order = np.argsort(ends, kind="stable")
        self.at = ends[self.order]
        del ends
        self.out = np.full(len(self.at), -1, np.int64)
        self.offset = 0  # the position of the next chunk's first event

    def take(self, chunk: pa.Table) -> None:
        """The next chunk's events (``input_row`` among its columns)."""
        m = chunk.num_rows
        lo, hi = np.searchsorted(self.at, (self.offset, self.offset + m))
        if hi > lo:
            rows = values_of(chunk.column("input_row"))
            self.out[self.order[lo:hi]] = rows[self.at[lo:hi] - self.offset]
        self.offset += m

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The input rows of the flows' sources and of their destinations."""
        return self.out[:self.n], self.out[self.n:]


_ARROW = {"i": pa.int64(), "u": pa.uint64(), "f": pa.float64(), "s": pa.string(), "b": pa.binary()}


def _base_schema() -> list[tuple[str, pa.DataType]]:
    d = pa.dictionary(pa.int32(), pa.string())
    return [("track_id", pa.int32()), ("name_id", pa.int32()), ("category_id", pa.int32()),
            ("start_ns", pa.int64()), ("dur_ns", pa.int64()), ("end_ns", pa.int64()), ("input_row", pa.int64()),
            ("plane", d), ("track", d), ("name", d), ("category", d)]


def _stat_array(col: StatColumn, n: int) -> tuple[pa.Array, str]:
    """A stat as a nullable column over the chunk's rows, and its kind (i/u/f/s/b)."""
    valid = np.zeros(n, bool)
    valid[col.rows] = True
    vals = col.values
    if vals.dtype.kind in "iuf":
        dense = np.zeros(n, vals.dtype)
        dense[col.rows] = vals
        return masked(dense, valid), vals.dtype.kind
    kind, typ = ("b", pa.binary()) if all(isinstance(v, bytes) for v in vals) else ("s", pa.string())
    if kind == "s" and not all(isinstance(v, str) for v in vals):
        vals = np.array([v if isinstance(v, str) else str(v) for v in vals], object)
    dense = np.full(n, None, object)
    dense[col.rows] = vals
    return array(dense, typ), kind


def _final_kind(kinds: set[str]) -> str:
    """One kind for a stat whose chunks had ``kinds`` (merge_columns' rule)."""
    if len(kinds) == 1:
        return next(iter(kinds))
    if kinds & {"s", "b"}:
        return "s"
    return "f" if "f" in kinds else "i"


def _conform(t: pa.Table, schema: pa.Schema, final: dict[str, str], column: dict[str, str]) -> pa.Table:
    """A run's table with every column of ``schema``, typed as it says."""
    n = t.num_rows
    out = [t.column(name) for name in BASE_COLUMNS]
    for key, kind in final.items():
        name = f"s:{key}"
        typ = _ARROW[kind]
        if name not in t.column_names:
            out.append(pa.nulls(n, typ))
            continue
        col = t.column(name).combine_chunks()
        if col.type != typ:
            col = _cast(col, kind)
        out.append(col)
    return pa.Table.from_arrays(out, schema=schema)


def _cast(col: pa.Array, kind: str) -> pa.Array:
    if kind == "s":  # numbers as merge_columns writes them: str() of each NumPy value
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        vals = np.full(len(col), None, object)
        if pa.types.is_binary(col.type):
            vals[valid] = [v.decode("utf-8", "replace") for v in col.drop_null().to_pylist()]
        else:
            vals[valid] = [str(x) for x in col.drop_null().to_numpy(zero_copy_only=False)]
        return array(vals, pa.string())
    return col.cast(_ARROW[kind], safe=False)  # u -> i wraps, as merge_columns' astype does
