"""SQLite exports (Nsight Systems, rocpd) opened read-only and read as NumPy columns.

What the vendor readers share: the file is checked against its own header first (a cut
file says how much of it is missing), opened with the standard library's ``sqlite3``
through a ``mode=ro`` URI (no writes, no extension loading: ``sqlite3`` never enables
it and nothing here does), and tables are read column by column in SQL, never as one
Python tuple per row.

How columns are read (:func:`read_columns`): one pass asks SQLite for each column's
minimum and maximum; the columns are then bit-packed into as few 62-bit words as their
ranges allow (a constant column costs nothing, a stream id a few bits), and each word is
fetched as one ``group_concat`` text per chunk of rows, parsed by NumPy in C. SQLite's
own VM does the per-row work; Python sees one string per word and chunk. Chunks of
``CHUNK_ROWS`` rows (by rowid) bound the memory of the texts.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from ..errors import TraceFormatError

log = logging.getLogger("polyprof")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAGIC = b"SQLite format 3\x00"
#: rows of a table fetched per query (bounds the group_concat texts: ~20 bytes per value)
CHUNK_ROWS = 1 << 18
#: bits of one packed word (a positive int64 that SQLite's integer arithmetic never overflows)
_WORD_BITS = 62


def is_sqlite(head: bytes) -> bool:
    return head.startswith(MAGIC)


def _declared_size(path: Path, head: bytes) -> int | None:
    """Bytes the header says the database has (page size x page count), when the count is
    valid (SQLite >= 3.7.0 writes it and marks it valid by the change counter)."""
    if len(head) < 100:
        return None
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    count = int.from_bytes(head[28:32], "big")
    if head[24:28] != head[92:96] or not count or page < 512 or page & (page - 1):
        return None
    return page * count


def connect(path: str | Path) -> sqlite3.Connection:
    """``path`` opened read-only; a file that is not SQLite, or cut short, is a
    :class:`TraceFormatError` naming it."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    if not is_sqlite(head):
        raise TraceFormatError(path, "not an SQLite database (no 'SQLite format 3' header)")
    want = _declared_size(path, head)
    if len(head) < 100 or (want is not None and size < want):
        raise TraceFormatError(path, f"truncated SQLite database: {size:,} bytes of the "
                                     f"{want or 100:,} its header declares")
    from urllib.parse import quote

    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        raise TraceFormatError(path, f"damaged SQLite database ({e})") from None
    return conn


def failure(path: str | Path, e: sqlite3.Error) -> TraceFormatError:
    """One line for an SQLite error met while reading ``path``."""
    text = str(e)
    if isinstance(e, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text):
        return TraceFormatError(path, f"damaged or truncated SQLite database ({text})")
    return TraceFormatError(path, f"SQLite error while reading ({type(e).__name__}: {text})")


@dataclass
class Schema:
    """The tables and views of a database and their columns (names as written)."""

    columns: dict[str, tuple[str, ...]]
    views: frozenset[str]

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns.get(table)
        return have is not None and all(c in have for c in cols)

    def present(self, table: str, cols: Iterable[str]) -> list[str]:
        have = set(self.columns.get(table, ()))
        return [c for c in cols if c in have]


def schema(conn: sqlite3.Connection) -> Schema:
    rows = conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    cols: dict[str, tuple[str, ...]] = {}
    for name, _ in rows:
        if name.startswith("sqlite_"):
            continue
        q = name.replace('"', '""')
        cols[name] = tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{q}")').fetchall())
    return Schema(cols, frozenset(n for n, t in rows if t == "view"))


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _parse(text: str | None) -> np.ndarray:
    if not text:
        return np.zeros(0, np.int64)
    return np.fromstring(text, dtype=np.int64, sep=",")  # type: ignore[call-overload]


def read_columns(conn: sqlite3.Connection, table: str, exprs: Mapping[str, str], where: str = "",
                 nulls: Mapping[str, int] | None = None, rowid: bool = True) -> dict[str, np.ndarray]:
    """Integer columns of ``table`` (``name -> SQL expression``) as int64 arrays, row by
    row aligned; NULL reads as ``nulls[name]`` (default -1). ``where`` filters rows.
    ``rowid=False`` (views) reads the table in one chunk."""
    nulls = dict(nulls or {})
    names = list(exprs)
    exprs = {n: quote(e) if _IDENT.match(e) and e.upper() != "NULL" else e for n, e in exprs.items()}
    if not names:
        return {}
    sql = {n: f"coalesce(({exprs[n]}), {int(nulls.get(n, -1))})" for n in names}
    cond = f" WHERE {where}" if where else ""
    src = quote(table)
    agg = ", ".join(f"min({sql[n]}), max({sql[n]})" for n in names)
    first = conn.execute(f"SELECT count(*), min(rowid), max(rowid), {agg} FROM {src}{cond}"
                         if rowid else f"SELECT count(*), 0, 0, {agg} FROM {src}{cond}").fetchone()
    count = int(first[0])
    if not count:
        return {n: np.zeros(0, np.int64) for n in names}
    lo = {n: int(first[3 + 2 * i]) for i, n in enumerate(names)}
    hi = {n: int(first[4 + 2 * i]) for i, n in enumerate(names)}
    out = {n: np.full(count, lo[n], np.int64) for n in names if lo[n] == hi[n]}
    # pack the varying columns: (column, shift) per word
    words: list[list[tuple[str, int]]] = []
    used = _WORD_BITS + 1
    for n in names:
        if n in out:
            continue
        span = hi[n] - lo[n]
        bits = span.bit_length() if span < (1 << 63) else 64
        if bits > _WORD_BITS:
            words.append([(n, -1)])  # read as it is
            used = _WORD_BITS + 1
            continue
        if used + bits > _WORD_BITS:
            words.append([])
            used = 0
        words[-1].append((n, used))
        used += bits
    word_sql = []
    for w in words:
        if w[0][1] < 0:
            word_sql.append(sql[w[0][0]])
        else:
            word_sql.append(" + ".join(f"(({sql[n]}) - ({lo[n]})) * {1 << s}" if s else f"(({sql[n]}) - ({lo[n]}))"
                                       for n, s in w))
    if not words:  # every column constant
        return {n: out[n] for n in names}
    parts: list[list[np.ndarray]] = [[] for _ in words]
    select = ", ".join(f"group_concat({w})" for w in word_sql)
    if rowid and count > CHUNK_ROWS:
        r0, r1 = int(first[1]), int(first[2])
        step = CHUNK_ROWS
        for a in range(r0, r1 + 1, step):
            c = f"rowid BETWEEN {a} AND {a + step - 1}" + (f" AND ({where})" if where else "")
            row = conn.execute(f"SELECT {select} FROM {src} WHERE {c}").fetchone()
            for i, text in enumerate(row):
                parts[i].append(_parse(text))
    else:
        row = conn.execute(f"SELECT {select} FROM {src}{cond}").fetchone()
        for i, text in enumerate(row):
            parts[i].append(_parse(text))
    for w, p in zip(words, parts):
        packed = np.concatenate(p) if len(p) != 1 else p[0]
        if len(packed) != count:  # the table changed under us, or a damaged page
            raise sqlite3.DatabaseError(f"{table}: read {len(packed)} of {count} rows")
        if w[0][1] < 0:
            out[w[0][0]] = packed
            continue
        for n, s in w:
            span = hi[n] - lo[n]
            mask = (1 << span.bit_length()) - 1
            out[n] = ((packed >> s) & mask) + lo[n]
    return {n: out[n] for n in names}


def read_texts(conn: sqlite3.Connection, table: str, expr: str, where: str = "") -> tuple[np.ndarray, list[str]]:
    """A text column as (codes, distinct values): ``values[codes]`` is the column, NULL
    as ``""``. The distinct values and each row's rank among them are computed by SQLite."""
    cond = f" WHERE {where}" if where else ""
    src = quote(table)
    e = f"coalesce(CAST(({expr}) AS TEXT), '')"
    values = [r[0] for r in conn.execute(f"SELECT DISTINCT {e} FROM {src}{cond} ORDER BY 1").fetchall()]
    if not values:
        return np.zeros(0, np.int64), []
    text = conn.execute(f"SELECT group_concat(r) FROM (SELECT dense_rank() OVER (ORDER BY {e}) - 1 AS r "
                        f"FROM {src}{cond} ORDER BY rowid)").fetchone()[0]
    return _parse(text), values


def rows(conn: sqlite3.Connection, sql: str) -> list[tuple]:
    """A small query's rows (metadata tables: a few rows)."""
    return conn.execute(sql).fetchall()
