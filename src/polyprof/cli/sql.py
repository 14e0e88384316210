"""polyprof sql: query a trace's event table with DuckDB."""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterator

from ..errors import PolyprofError
from ..formats import duck_query
from ..formats.duck_query import TIMEOUT_S
from .common import Subparsers, add_window_args, count, load_trace, seconds, window_from

HELP = """\
Tables: events (plane: its name, track_id, track, name, category, start_ns,
dur_ns, end_ns, input_row and one column per stat, e.g. correlation_id,
external_id, stream), flows (src, dst: the input_row of its events; id,
category), counters (plane: its id, name, ts_ns, value), planes (id, name,
kind, vendor, index), tracks (id, plane: its id, name, kind, tid); a store's
have a rank column too. A plane id joins planes.id. Examples:

  polyprof sql trace.json.gz "SELECT name, count(*) n, sum(dur_ns)/1e6 ms
    FROM events WHERE category = 'kernel' GROUP BY name ORDER BY ms DESC
    LIMIT 10"

  polyprof sql STORE "SELECT f.rank, s.name, d.name, count(*) n
    FROM flows f JOIN events s ON s.rank = f.rank AND s.input_row = f.src
    JOIN events d ON d.rank = f.rank AND d.input_row = f.dst GROUP BY ALL"

(on a trace file, the same join without the rank conditions)

A table shows each number whole, right-aligned (a float to six significant
digits) and folds text; a result whose numbers and headers leave its text no
room (SELECT *) prints one "column | value" line per column for each row.
--csv for programs (every digit).

The query sees the trace's tables only: DuckDB runs with external access
disabled (no reading or writing files, no COPY ... TO, no ATTACH, no extension
installs or network), and the setting is locked. --allow-external lifts that
for a query you trust.
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser("sql", help="run SQL (DuckDB) over a trace's events",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="trace file (any format polyprof reads) or a store (polyprof convert: "
                                "every rank, with a rank column)")
    p.add_argument("query", help="a SQL query over the tables listed above")
    p.add_argument("--derive", action="store_true", help="add the derived lines (Steps, Sections, ...) first")
    add_window_args(p, "the steps to query (default: the whole trace; --steps or --skip-first: the events the "
                       "analyses of that window count, as polyprof export)")
    p.add_argument("--max-rows", type=count, default=200, metavar="N",
                   help="rows to print as a table (default 200, at most 20,000: --csv streams any number)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.add_argument("--memory-limit", default=None, type=memory_size,
                   help="DuckDB's memory limit, e.g. 4GB (default: a quarter of RAM; a store spills beyond it)")
    p.add_argument("--timeout", type=seconds, default=TIMEOUT_S,
                   help=f"stop a statement running longer than this many seconds (default {TIMEOUT_S:g}; 0: never)")
    p.add_argument("--allow-external", action="store_true",
                   help="let the query read and write files, ATTACH databases and install extensions "
                        "(off by default: a query sees only the trace's tables)")
    p.set_defaults(func=run)


def memory_size(text: str) -> str:
    """argparse type of ``--memory-limit``: a size as DuckDB reads it (``4GB``, ``512MiB``)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*", text, re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 4GB or 512MiB")
    return text.strip()


def default_memory_limit() -> str:
    """A quarter of the machine's memory, DuckDB's way of writing it."""
    import psutil

    return f"{max(psutil.virtual_memory().total // 4 >> 20, 64)}MB"


def query(trace: Any, sql: str, allow_external: bool = False, memory_limit: str | None = None,
          timeout_s: float | None = TIMEOUT_S) -> Any:
    """Run ``sql`` over the trace's tables; returns a pyarrow Table.

    Unless ``allow_external``, the query can touch nothing but those tables (SANDBOX).
    DuckDB's memory is bounded by ``memory_limit`` (default: a quarter of RAM) and the
    statement by ``timeout_s``; a result bigger than memory is better read with
    :func:`stream`."""
    import pyarrow as pa

    schema, batches = stream(trace, sql, allow_external, memory_limit, timeout_s)
    return pa.Table.from_batches(list(batches), schema)


def stream(trace: Any, sql: str, allow_external: bool = False, memory_limit: str | None = None,
           timeout_s: float | None = TIMEOUT_S) -> tuple[Any, Iterator[Any]]:
    """:func:`query`'s result as (schema, record batches), computed as they are read, so
    a huge result (a cross join) is never held whole (``formats/duck_query.py``)."""
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{_literal(memory_limit or default_memory_limit())}'")
    for name, table in _tables(trace).items():
        con.register(name, table)
    if not allow_external:
        from ..formats.safety import duckdb_sandbox

        duckdb_sandbox(con)
    return duck_query.run(con, sql, timeout_s, "the trace's tables")


def _tables(trace: Any) -> dict[str, Any]:
    """The trace's tables, its events with ``input_row`` (each event's row, which flows'
    src and dst name) after ``end_ns``, as a store's events have it: a flow joins its
    events as on a store (``JOIN flows f ON e.input_row = f.src``). A stat of that name
    becomes ``stat.input_row``, as in a store."""
    import numpy as np
    import pyarrow as pa

    tables = trace.tables()
    events = tables["events"]
    if "input_row" in events.column_names:
        events = events.rename_columns([f"stat.{c}" if c == "input_row" else c for c in events.column_names])
    rows = pa.array(np.arange(events.num_rows, dtype=np.int64))
    tables["events"] = events.add_column(events.column_names.index("end_ns") + 1, "input_row", rows)
    return tables


def _literal(v: str) -> str:
    return str(v).replace("'", "''")


def run(args: argparse.Namespace) -> int:
    import sys

    from .ranks import is_store

    if not args.query.strip():
        raise PolyprofError("no SQL statement given (the tables: polyprof sql --help)")
    if is_store(args.file):
        if args.derive:
            raise PolyprofError("--derive does not apply to a store (its ranks are queried as stored)")
        from ..analyze.window import Window  # (a store given: only then)

        if window_from(args, default=None) not in (None, Window(skip_first=0)):  # (every step: the whole store)
            raise PolyprofError("--steps, --skip-first, --span, --round-us and --window do not apply to a store "
                                "(filter on its steps in SQL)")
        from ..store.store import Store

        schema, batches = Store(args.file).stream(args.query, memory_limit=args.memory_limit or default_memory_limit(),
                                                  allow_external=args.allow_external, timeout_s=args.timeout or None)
    else:
        _one_trace(args.file)
        trace = load_trace(args.file)
        window = window_from(args, default=None)
        if window is not None:
            from ..analyze.window import label
            from ..analyze.window_counting import restrict

            print(f"polyprof: querying {label(trace, window)}", file=sys.stderr)
            trace = restrict(trace, window)
        if args.derive:
            from ..derive import derive

            trace = derive(trace)
        schema, batches = stream(trace, args.query, allow_external=args.allow_external,
                                 memory_limit=args.memory_limit, timeout_s=args.timeout or None)
    return _print(schema, batches, args)


def _one_trace(path: str) -> None:
    """A directory of ranks is no trace to query: say how to query it (a store)."""
    from pathlib import Path

    from ..store.manifest import refuse_rank_dir
    from .ranks import is_job

    refuse_rank_dir(path)
    if Path(path).is_dir() and is_job(path):
        raise PolyprofError(f"{path}: a directory (a job's ranks?), not one trace: polyprof sql queries a trace file "
                            f"or a store of the ranks, with a rank column; convert the directory first: "
                            f"polyprof convert {path} -o STORE, then polyprof sql STORE \"...\"")


#: the most rows printed as a table, whatever --max-rows asks: each cell becomes Python
#: objects and a rich cell (about 3 KB a row: --max-rows 10000000 of a 5.4M-row join grew
#: past 9 GB before it printed anything); --csv streams any number
TABLE_ROWS = 20_000


def _print(schema: Any, batches: Iterator[Any], args: argparse.Namespace) -> int:
    """The result as CSV (streamed) or as a table of its first ``--max-rows`` rows; the
    rest is counted, not kept."""
    import sys

    import pyarrow as pa

    schema, batches = _flat(schema, batches)
    if args.csv:
        import pyarrow.csv as pacsv

        with pacsv.CSVWriter(sys.stdout.buffer, schema) as w:
            for b in batches:
                w.write_batch(b)
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    shown = min(args.max_rows, TABLE_ROWS)
    kept, n = [], 0
    for b in batches:
        if n < shown:
            kept.append(b.slice(0, shown - n))
        n += b.num_rows
    console = Console()
    got = pa.Table.from_batches(kept, schema)  # by position: result columns may share a name (s.name, d.name)
    numeric = [_is_number(f.type) for f in schema]
    rows = [[_cell(v) for v in row] for row in zip(*(c.to_pylist() for c in got.columns))]
    widths = _widths(schema.names, numeric, rows, console.width)
    if widths is None:
        # numbers are never folded or cut (a start_ns folded as "17164233229" over
        # "65734014" read as a number 10^8 too small), so a result whose numbers and
        # headers leave the text no room prints as psql's expanded display (\x auto):
        # every value whole, every line within the terminal. DuckDB's own CLI leaves
        # middle columns out instead, and a line run past the width would be folded by
        # the terminal itself, mid-number.
        print("\n".join(_records(f"{n} row(s)", schema.names, rows, console.width, numeric)))
    else:
        # cells and headers as Text: names such as "[memory]" are data, not rich markup
        console.print(Text(f"{n} row(s)"))  # (a table's title wraps at a narrow table's width)
        t = Table()
        for c, w, num in zip(schema.names, widths, numeric):
            t.add_column(Text(c), width=w, no_wrap=num, justify="right" if num else "left", overflow="fold")
        for cells in rows:
            t.add_row(*[Text(v) for v in cells])
        console.print(t)
    if n > shown:
        more = "--max-rows or --csv" if shown == args.max_rows else \
            f"--csv: a table holds at most {TABLE_ROWS:,} rows (its cells are Python objects)"
        print(f"... {n - shown} more row(s); use {more}", file=sys.stderr)
    return 0


def _flat(schema: Any, batches: Iterator[Any]) -> tuple[Any, Iterator[Any]]:
    """The result with each nested column (a list, struct or map: ``list(name)``,
    ``{'a': 1}``) as JSON text, which CSV cannot write otherwise (it raised "Unsupported
    Type: list<...>") and a table showed as Python reprs (``[Decimal('1.5')]``)."""
    import pyarrow as pa

    nested = [i for i, f in enumerate(schema) if pa.types.is_nested(f.type)]
    if not nested:
        return schema, batches
    out = schema
    for i in nested:
        out = out.set(i, pa.field(schema.field(i).name, pa.string()))

    def flat() -> Iterator[Any]:
        import json  # only for a result with nested columns

        for b in batches:
            cols = list(b.columns)
            for i in nested:
                cols[i] = pa.array([None if v is None else json.dumps(v, default=str, ensure_ascii=False)
                                    for v in cols[i].to_pylist()], pa.string())
            yield pa.RecordBatch.from_arrays(cols, schema=out)
    return out, flat()


def _is_number(t: Any) -> bool:
    """An integer, float or decimal column (a sum is DuckDB's HUGEINT, a decimal): shown
    whole and right-aligned, never folded."""
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _cell(v: Any) -> str:
    """A value as the table shows it: a float to six significant digits, its integer part
    whole while a double holds it exactly (``40196685.190476194``: ``40196685``; ``1/3``:
    ``0.333333``), as a terminal reader wants it; ``--csv`` keeps every digit."""
    if v is None:
        return ""
    if not isinstance(v, float) or not math.isfinite(v) or v == 0:
        return str(v)
    a = abs(v)
    if a >= 1e16 or a < 1e-4:
        return f"{v:.6g}"
    text = f"{v:.{max(0, 5 - math.floor(math.log10(a)))}f}"
    text = text.rstrip("0") if "." in text else text  # (1234.50000: 1234.5; 3.00000: 3.0)
    return text + "0" if text.endswith(".") else text


def _widths(names: list[str], numeric: list[bool], rows: list[list[str]], width: int) -> list[int] | None:
    """Each column's width in a table of ``width`` cells, or None where none fits: a number
    column as wide as its widest value (never folded), a header never cut, and text columns
    narrowed as the summary's tables narrow theirs (``report/grid.py``: the widest first,
    kinds and categories before names, to :data:`~polyprof.report.grid.NAME_FLOOR` and then
    to ten cells) to fold their texts in that width."""
    from ..report.grid import NAME_FLOOR, _least, _narrowed
    from ..report.textout import _cells, cell_sizes

    keys = [c if names.count(c) == 1 else f"{c}#{i}" for i, c in enumerate(names)]  # (columns may share a name)
    need = {k: max([_cells(c), *cell_sizes([r[i] for r in rows])]) for i, (k, c) in enumerate(zip(keys, names))}
    text = tuple(k for k, num in zip(keys, numeric) if not num)
    floor = {k: min(need[k], NAME_FLOOR) if k in text else need[k] for k in keys}
    least = {k: _least(k, c, floor[k], [k]) if k in text else need[k] for k, c in zip(keys, names)}
    w, over = _narrowed([(k,) for k in keys], need, floor, least, text, width)
    return None if over > 0 else [w[k] for k in keys]


def _records(title: str, names: list[str], rows: list[list[str]], width: int,
             numeric: list[bool]) -> Iterator[str]:
    """The rows as records, one ``column | value`` line per column (psql's expanded
    display), each text wrapped to the terminal's width, each number whole on its line:
    for a result with more columns than a table can show (``SELECT *``)."""
    import textwrap  # (only for such a result)

    label = min(max(map(len, names), default=0), 24)
    room = max(width - label - 3, 20)
    yield title
    for i, cells in enumerate(rows, 1):
        yield f"-[ row {i} ]".ljust(min(width, label + 3 + 20), "-")
        for name, value, num in zip(names, cells, numeric):
            lines = [value] if num else textwrap.wrap(value, room, break_long_words=True, break_on_hyphens=False) or [""]
            yield f"{name:<{label}} | {lines[0]}".rstrip()
            yield from (f"{'':<{label}} | {more}" for more in lines[1:])
