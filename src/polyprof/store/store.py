"""A store opened for reading: its ranks one at a time as Traces, or all of them through
DuckDB with a memory limit (it spills to disk beyond it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from ..errors import PolyprofError, TraceFormatError, one_line
from ..formats import duck_query
from ..formats.safety import duckdb_sandbox
from ..trace.core import Trace
from .manifest import read_manifest
from .rankfiles import read_header, read_rank

#: DuckDB's memory limit for SQL over a store, unless given.
SQL_MEMORY_LIMIT = "1GB"


class Store:
    """The ranks of a store. ``load(rank)`` reads one rank back into a Trace."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.manifest = read_manifest(self.root)
        self._entries = {r["rank"]: r for r in self.manifest["ranks"]}

    @property
    def ranks(self) -> list[int]:
        return sorted(self._entries)

    def entry(self, rank: int) -> dict[str, Any]:
        try:
            return self._entries[rank]
        except KeyError:
            raise PolyprofError(f"{self.root}: no rank {rank} (ranks: {_span(self.ranks)})") from None

    def path(self, rank: int) -> Path:
        return self.root / self.entry(rank)["path"]

    def load(self, rank: int) -> Trace:
        return read_rank(self.path(rank))

    def traces(self) -> Iterator[tuple[int, Trace]]:
        """(rank, Trace), one rank in memory at a time."""
        for r in self.ranks:
            yield r, self.load(r)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, ranks {_span(self.ranks)})"

    # ------------------------------------------------------------------ SQL
    def connect(self, memory_limit: str = SQL_MEMORY_LIMIT, threads: int | None = None) -> Any:
        """A DuckDB connection with views over every rank: events, flows, counters (each
        with a ``rank`` column), planes and tracks."""
        import duckdb

        con = duckdb.connect()
        con.execute(f"SET memory_limit = '{_sql_literal(memory_limit)}'")
        con.execute(f"SET temp_directory = '{_sql_literal(str(self.root / '.duckdb-spill'))}'")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET preserve_insertion_order = false")  # lets big sorts and group-bys spill
        for table, files, sql in self._views():
            try:  # DuckDB reads every file's footer here (union_by_name): a damaged one fails now
                con.execute(f"CREATE VIEW {table} AS {sql}")
            except duckdb.Error as e:
                error = self._damaged(con, e, files)
                con.close()
                raise error from None
        planes, tracks = self._plane_track_tables()
        con.register("planes", planes)
        con.register("tracks", tracks)
        return con

    def _views(self) -> list[tuple[str, list[Path], str]]:
        """(view, the files it reads, its SELECT) for events, flows and counters: the
        columns and meanings of a trace file's tables (``polyprof sql FILE``), plus
        ``rank``. Flows' src and dst are the events' ``input_row`` (the rows of the trace
        the rank was converted from, as in a file's tables and in :meth:`load`), not the
        rows of ``events.parquet`` that ``flows.parquet`` holds as ``src`` and ``dst``;
        flows.parquet holds them, and the category, since store schema 2, so the view
        reads it alone; a schema 1 store's are found by joining events.parquet and
        strings.parquet. Counters' name is the string ``strings.parquet`` holds at its id."""
        files = {t: [self.path(r) / f"{t}.parquet" for r in self.ranks]
                 for t in ("events", "flows", "counters", "strings")}

        def scan(table: str, rows: bool = False) -> str:
            return (f"read_parquet([{_files(files[table])}], hive_partitioning = true, union_by_name = true"
                    f"{', file_row_number = true' if rows else ''})")

        strings = f"(SELECT rank, file_row_number AS at, s FROM {scan('strings', True)})"
        if self.manifest["schema_version"] >= 2:
            flows = f"SELECT src_input_row AS src, dst_input_row AS dst, id, category, rank FROM {scan('flows')}"
            flow_files = files["flows"]
        else:  # (schema 1: flows.parquet has rows of events.parquet and category ids only)
            event_rows = f"(SELECT rank, file_row_number AS at, input_row FROM {scan('events', True)})"
            flows = (f"SELECT s.input_row AS src, d.input_row AS dst, f.id, c.s AS category, f.rank "
                     f"FROM {scan('flows')} f "
                     f"JOIN {event_rows} s ON s.rank = f.rank AND s.at = f.src "
                     f"JOIN {event_rows} d ON d.rank = f.rank AND d.at = f.dst "
                     f"LEFT JOIN {strings} c ON c.rank = f.rank AND c.at = f.category_id")
            flow_files = files["flows"] + files["events"] + files["strings"]
        counters = (f"SELECT c.plane, n.s AS name, c.ts_ns, c.value, c.rank FROM {scan('counters')} c "
                    f"LEFT JOIN {strings} n ON n.rank = c.rank AND n.at = c.name_id")
        return [("events", files["events"], f"SELECT * FROM {scan('events')}"),
                ("flows", flow_files, flows),
                ("counters", files["counters"] + files["strings"], counters)]

    def _damaged(self, con: Any, e: Exception, files: list[Path]) -> TraceFormatError:
        """DuckDB's error ``e`` over ``files`` as the store's, naming the damaged file: the
        one DuckDB names, else the first it cannot read alone, else the store."""
        import duckdb  # (as connect: only for SQL)

        said = one_line(str(e).split("\nLINE ")[0], None)  # not the CREATE VIEW quoted back
        named = [f for f in files if f"{f}'" in said or f'{f}"' in said]
        if not named:
            for f in files:
                try:
                    con.execute(f"DESCRIBE SELECT * FROM read_parquet([{_files([f])}])")
                except duckdb.Error:
                    named = [f]
                    break
        return TraceFormatError(named[0] if named else self.root, f"damaged store file ({said})")

    def _plane_track_tables(self) -> tuple[pa.Table, pa.Table]:
        planes: dict[str, list] = {"rank": [], "id": [], "name": [], "kind": [], "vendor": [], "index": []}
        tracks: dict[str, list] = {"rank": [], "id": [], "plane": [], "name": [], "kind": [], "tid": []}
        for r in self.ranks:
            h = read_header(self.path(r))
            for p in h["planes"]:
                for k in planes:
                    planes[k].append(r if k == "rank" else p.get(k))
            for t in h["tracks"]:
                for k in tracks:
                    tracks[k].append(r if k == "rank" else t.get(k))
        return pa.table(planes), pa.table(tracks)

    def sql(self, query: str, memory_limit: str = SQL_MEMORY_LIMIT, allow_external: bool = False,
            timeout_s: float | None = duck_query.TIMEOUT_S) -> pa.Table:
        """Run ``query`` over the store's tables; returns a pyarrow Table (a result bigger
        than memory is better read with :meth:`stream`)."""
        schema, batches = self.stream(query, memory_limit, allow_external, timeout_s)
        return pa.Table.from_batches(list(batches), schema)

    def stream(self, query: str, memory_limit: str = SQL_MEMORY_LIMIT, allow_external: bool = False,
               timeout_s: float | None = duck_query.TIMEOUT_S) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """``query`` over the store's tables as (schema, record batches), computed as they
        are read, stopped after ``timeout_s`` (``formats/duck_query.py``). Unless
        ``allow_external``, the query reads the store's own Parquet files only
        (formats.safety.duckdb_sandbox)."""
        con = self.connect(memory_limit)
        if not allow_external:
            duckdb_sandbox(con, paths=[self.path(r) / f"{t}.parquet" for r in self.ranks
                                       for t in ("events", "flows", "counters", "strings")],
                           directories=[self.root / ".duckdb-spill"])
        return duck_query.run(con, query, timeout_s, "the store's tables", damaged=self.root)


def open_store(path: str | Path) -> Store:
    return Store(path)


def _files(paths: list[Path]) -> str:
    """A list of files as DuckDB's SQL writes it."""
    return ", ".join(f"'{_sql_literal(str(p))}'" for p in paths)


def _sql_literal(s: str) -> str:
    return s.replace("'", "''")


def _span(ranks: list[int]) -> str:
    if not ranks:
        return "none"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}..{ranks[-1]}"
    return ", ".join(map(str, ranks))
