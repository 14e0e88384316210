"""polyprof sql: query a trace's event table with DuckDB."""

from __future__ import annotations

import argparse
from typing import Any

from .common import load_trace

HELP = """\
Tables: events (plane, track_id, track, name, category, start_ns, dur_ns, end_ns and one
column per stat, e.g. correlation_id, external_id, stream), flows, counters, planes, tracks.
Example: polyprof sql trace.json.gz "SELECT name, count(*) n, sum(dur_ns)/1e6 ms FROM events
WHERE category = 'kernel' GROUP BY name ORDER BY ms DESC LIMIT 10"
"""


def register(sub: Any) -> None:
    p = sub.add_parser("sql", help="run SQL (DuckDB) over a trace's events",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="trace file (.polyprof, Kineto/Chrome JSON, XSpace) or a store (polyprof convert: "
                                "every rank, with a rank column)")
    p.add_argument("query", help="a SQL query over the tables listed above")
    p.add_argument("--derive", action="store_true", help="add the derived lines (Steps, Sections, ...) first")
    p.add_argument("--max-rows", type=int, default=200, help="rows to print (default 200)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.add_argument("--memory-limit", default="1GB", help="with a store: DuckDB's memory limit (spills beyond it)")
    p.set_defaults(func=run)


def query(trace: Any, sql: str) -> Any:
    """Run ``sql`` over the trace's tables; returns a pyarrow Table."""
    import duckdb

    from ..errors import PolyprofError

    con = duckdb.connect()
    for name, table in trace.tables().items():
        con.register(name, table)
    try:
        rel = con.sql(sql)
        if rel is None:  # a statement without a result
            import pyarrow as pa

            return pa.table({})
        # duckdb 2 names it to_arrow_table; 1.x arrow()
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
        return fetch()
    except duckdb.Error as e:
        raise PolyprofError(f"SQL error: {e}") from None


def run(args: argparse.Namespace) -> int:
    import sys

    from ..store import commands as store

    if store.handles(args):
        if args.derive:
            from ..errors import PolyprofError

            raise PolyprofError("--derive does not apply to a store (its ranks are queried as stored)")
        result = store.sql(args)
    else:
        trace = load_trace(args.file)
        if args.derive:
            from ..derive import derive

            trace = derive(trace)
        result = query(trace, args.query)
    if args.csv:
        import pyarrow.csv as pacsv

        pacsv.write_csv(result, sys.stdout.buffer)
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{result.num_rows} row(s)", title_justify="left")
    for c in result.column_names:
        t.add_column(c, overflow="fold")
    for row in result.slice(0, args.max_rows).to_pylist():
        t.add_row(*["" if v is None else str(v) for v in row.values()])
    Console().print(t)
    if result.num_rows > args.max_rows:
        print(f"... {result.num_rows - args.max_rows} more row(s); use --max-rows or --csv", file=sys.stderr)
    return 0
