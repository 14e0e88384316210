"""polyprof sql: query a trace's event table with DuckDB."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_window_args, load_trace, window_from

HELP = """\
Tables: events (plane, track_id, track, name, category, start_ns, dur_ns, end_ns and one
column per stat, e.g. correlation_id, external_id, stream), flows, counters, planes, tracks.
Example: polyprof sql trace.json.gz "SELECT name, count(*) n, sum(dur_ns)/1e6 ms FROM events
WHERE category = 'kernel' GROUP BY name ORDER BY ms DESC LIMIT 10"

The query sees the trace's tables only: DuckDB runs with external access disabled (no
reading or writing files, no COPY ... TO, no ATTACH, no extension installs or network),
and the setting is locked. --allow-external lifts that for a query you trust.
"""




def register(sub: Any) -> None:
    p = sub.add_parser("sql", help="run SQL (DuckDB) over a trace's events",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="trace file (.polyprof, Kineto/Chrome JSON, XSpace) or a store (polyprof convert: "
                                "every rank, with a rank column)")
    p.add_argument("query", help="a SQL query over the tables listed above")
    p.add_argument("--derive", action="store_true", help="add the derived lines (Steps, Sections, ...) first")
    add_window_args(p, "steps to query (default: the whole trace; --steps or --skip-first: the events the "
                       "analyses of that window count, as polyprof export)")
    p.add_argument("--max-rows", type=int, default=200, help="rows to print (default 200)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.add_argument("--memory-limit", default="1GB", help="with a store: DuckDB's memory limit (spills beyond it)")
    p.add_argument("--allow-external", action="store_true",
                   help="let the query read and write files, ATTACH databases and install extensions "
                        "(off by default: a query sees only the trace's tables)")
    p.set_defaults(func=run)


def query(trace: Any, sql: str, allow_external: bool = False) -> Any:
    """Run ``sql`` over the trace's tables; returns a pyarrow Table.

    Unless ``allow_external``, the query can touch nothing but those tables (SANDBOX)."""
    import duckdb

    from ..errors import PolyprofError

    con = duckdb.connect(":memory:")
    for name, table in trace.tables().items():
        con.register(name, table)
    if not allow_external:
        from ..formats.safety import duckdb_sandbox

        duckdb_sandbox(con)
    try:
        rel = con.sql(sql)
        if rel is None:  # a statement without a result
            import pyarrow as pa

            return pa.table({})
        # duckdb 2 names it to_arrow_table; 1.x arrow()
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
        return fetch()
    except duckdb.PermissionException as e:
        raise PolyprofError(f"SQL refused: {_one_line(e)} (polyprof sql gives a query the trace's tables only: "
                            "no files, ATTACH, extensions or network; --allow-external lifts this)") from None
    except duckdb.Error as e:
        raise PolyprofError(f"SQL error: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def run(args: argparse.Namespace) -> int:
    import sys

    from ..store import commands as store

    if store.handles(args):
        if args.derive:
            from ..errors import PolyprofError

            raise PolyprofError("--derive does not apply to a store (its ranks are queried as stored)")
        if window_from(args, default=None) is not None:
            from ..errors import PolyprofError

            raise PolyprofError("--steps / --skip-first do not apply to a store (filter on its steps in SQL)")
        result = store.sql(args)
    else:
        trace = load_trace(args.file)
        window = window_from(args, default=None)
        if window is not None:
            from ..analyze.window import label, restrict

            print(f"polyprof: querying {label(trace, window)}", file=sys.stderr)
            trace = restrict(trace, window)
        if args.derive:
            from ..derive import derive

            trace = derive(trace)
        result = query(trace, args.query, allow_external=args.allow_external)
    if args.csv:
        import pyarrow.csv as pacsv

        pacsv.write_csv(result, sys.stdout.buffer)
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # cells and headers as Text: names such as "[memory]" are data, not rich markup
    t = Table(title=f"{result.num_rows} row(s)", title_justify="left")
    for c in result.column_names:
        t.add_column(Text(c), overflow="fold")
    for row in result.slice(0, args.max_rows).to_pylist():
        t.add_row(*[Text("" if v is None else str(v)) for v in row.values()])
    Console().print(t)
    if result.num_rows > args.max_rows:
        print(f"... {result.num_rows - args.max_rows} more row(s); use --max-rows or --csv", file=sys.stderr)
    return 0
