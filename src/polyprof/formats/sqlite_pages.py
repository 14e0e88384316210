"""Integer columns of an SQLite table read from the file's pages (``_sqlite_pages.c``).

:func:`columns` is :func:`polyprof.formats.sqlite_db.read_columns` for the cases a B-tree
walk can answer exactly as SQLite would: a rowid table (not a view, not ``WITHOUT
ROWID``, not virtual, no generated columns) of a database not in WAL mode, columns named
as the table declares them (or ``rowid``, or ``NULL``), none with a default value (rows
written before an ``ALTER TABLE ADD COLUMN`` lack the column and would read as the
default). Anything else returns None and the caller reads through SQL, which is also
what the tests hold this path to (tests/test_sqlite_pages.py). Rows come in rowid order,
as SQLite's scan of the table gives them.

Why: through ``sqlite3`` every value is a step of SQLite's VM and a Python object, or a
piece of a ``group_concat`` text to parse; the walk decodes the records straight into
int64 columns, some ten times faster on Nsight's event tables.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
from ..lowlevel.compiled import optional

_sqlite_pages = optional(__package__, "_sqlite_pages")  # the SQL path otherwise (lowlevel/compiled.py)

#: "c" (``_sqlite_pages.c``) or "sql": how large integer columns are read
IMPLEMENTATION = "c" if _sqlite_pages is not None else "sql"


def _header(path: Path) -> tuple[int, int, int] | None:
    """(page size, reserved bytes per page, text encoding: 1 UTF-8) of a database in
    rollback-journal mode; None for WAL mode (the newest pages may be in the ``-wal``
    file) or an unreadable header."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError:
        return None
    if len(head) < 100 or head[18] != 1 or head[19] != 1 or Path(f"{path}-wal").exists():
        return None
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    return page, head[20], int.from_bytes(head[56:60], "big")


def _main_file(conn: sqlite3.Connection) -> Path | None:
    for _, name, file in conn.execute("PRAGMA database_list").fetchall():
        if name == "main" and file:
            return Path(file)
    return None


def _plan(conn: sqlite3.Connection, table: str, exprs: Iterable[str]) -> tuple[int, list[int]] | None:
    """(root page, record column per output: -1 rowid, -2 NULL) when the walk applies."""
    got = conn.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (table,)).fetchone()
    if not got or not isinstance(got[0], int) or got[0] < 1:
        return None  # a view, a virtual table, or no such table
    sql = " ".join(str(got[1] or "").upper().split())
    if "WITHOUT ROWID" in sql or sql.startswith("CREATE VIRTUAL"):
        return None
    info = conn.execute(f"PRAGMA table_xinfo({_quote(table)})").fetchall()  # cid, name, type, notnull, default, pk, hidden
    if any(r[6] for r in info):
        return None  # generated (or hidden) columns are not in the records
    by_name = {r[1]: r for r in info}
    pks = [r for r in info if r[5]]
    want: list[int] = []
    for e in exprs:
        r = by_name.get(e)
        if r is None:
            if e.lower() == "rowid" and "rowid" not in {n.lower() for n in by_name}:
                want.append(-1)
            elif e.upper() == "NULL":
                want.append(-2)
            else:
                return None
        elif r[4] is not None:
            return None
        elif len(pks) == 1 and r[5] and str(r[2]).upper() == "INTEGER":
            want.append(-1)  # INTEGER PRIMARY KEY: the rowid itself (the record holds NULL)
        else:
            want.append(int(r[0]))
    return int(got[0]), want


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(conn: sqlite3.Connection, table: str, exprs: Mapping[str, str],
            nulls: Mapping[str, int]) -> dict[str, np.ndarray] | None:
    """``exprs``' columns of every row of ``table`` as int64 arrays (NULL: ``nulls[name]``,
    default -1), or None where the page walk does not apply (the caller reads through
    SQL). A damaged B-tree raises ``sqlite3.DatabaseError`` ("malformed"); a value that
    is not an integer returns None too, so SQL says what it makes of it."""
    if _sqlite_pages is None or not exprs:
        return None
    path = _main_file(conn)
    head = _header(path) if path is not None else None
    plan = _plan(conn, table, exprs.values()) if head is not None else None
    if plan is None or path is None or head is None:
        return None
    root, want = plan
    names = list(exprs)
    walk = [(n, w) for n, w in zip(names, want) if w != -2]
    out: dict[str, np.ndarray] = {}
    if walk:
        try:
            got = _sqlite_pages.columns(str(path), head[0], head[1], root, tuple(w for _, w in walk),
                                        tuple(int(nulls.get(n, -1)) for n, _ in walk))
        except ValueError as e:
            raise sqlite3.DatabaseError(f"database disk image is malformed ({e})") from None
        except TypeError:
            return None
        out = {n: np.frombuffer(b, np.int64) for (n, _), b in zip(walk, got)}
        rows = len(next(iter(out.values())))
    else:
        rows = int(conn.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()[0])
    return {n: out[n] if n in out else np.full(rows, int(nulls.get(n, -1)), np.int64) for n in names}


def texts(conn: sqlite3.Connection, table: str, column: str) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """:func:`polyprof.formats.sqlite_db.read_texts` of a plain column of every row:
    (rowids of the rows with text, each one's code, the distinct texts sorted as SQLite
    sorts them: by their UTF-8 bytes), or None where the walk does not apply (a number
    or a blob in the column, a database not in UTF-8, see :func:`columns`)."""
    if _sqlite_pages is None:
        return None
    path = _main_file(conn)
    head = _header(path) if path is not None else None
    plan = _plan(conn, table, [column]) if head is not None and head[2] == 1 else None
    if plan is None or path is None or head is None or plan[1][0] < 0:
        return None
    try:
        rid, code, raw = _sqlite_pages.texts(str(path), head[0], head[1], plan[0], plan[1][0])
    except ValueError as e:
        raise sqlite3.DatabaseError(f"database disk image is malformed ({e})") from None
    except TypeError:
        return None
    order = sorted(range(len(raw)), key=raw.__getitem__)
    rank = np.empty(len(raw), np.int64)
    rank[order] = np.arange(len(raw))
    codes = rank[np.frombuffer(code, np.int64)] if len(raw) else np.zeros(0, np.int64)
    return np.frombuffer(rid, np.int64), codes, [raw[i].decode("utf-8", "replace") for i in order]
