"""SQLite exports (Nsight Systems, rocpd) opened read-only and read as NumPy columns.

What the vendor readers share: the file is checked against its own header first (a cut
file says how much of it is missing), opened with the standard library's ``sqlite3``
through a ``mode=ro`` URI (no writes, no extension loading: ``sqlite3`` never enables
it and nothing here does), and tables are read column by column in SQL, never as one
Python tuple per row. A gzipped or xz-compressed database (``report.sqlite.gz``,
``prof.nvvp.xz``) is inflated into a temporary file, within the inflation limits, and
read from there (:func:`inflated`; the readers that sniff for it: ``compressed=True``).

How columns are read (:func:`read_columns`): where it applies (a table's plain integer
columns, every row), by walking the table's pages in C (:mod:`.sqlite_pages`); else
through SQL, where each column is one ``group_concat`` text
per chunk of ``CHUNK_ROWS`` rowids (all of a chunk's columns in one scan of it), parsed
by NumPy in C (``np.fromstring``); SQLite's VM does the per-row work, Python sees one
string per column and chunk, and the chunks bound the texts' memory. Columns declared
NOT NULL are read as they are; others through ``coalesce`` (group_concat skips NULLs,
which would misalign the columns). Measured alternatives, both slower: bit-packing
columns into fewer texts (the min/max pass it needs costs as much as it saves), and
``fetchmany`` of rows (a tuple per row). A view has no rowids: it is read row by row,
bounded (:func:`_streamed`). Every connection is :class:`.sqlite_bounds.Guarded`: each
statement bounded in time and memory, a signal stopping it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import operator
import os
import re
import sqlite3
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from ..errors import TraceFormatError, one_line
from . import sqlite_bounds, sqlite_pages
from .safety import XZ_MAGIC, Limits, current, packer

log = logging.getLogger("polyprof")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAGIC = b"SQLite format 3\x00"
#: rows of a table fetched per query (bounds the group_concat texts: ~12 bytes per value, twice:
#: SQLite's and Python's copy)
CHUNK_ROWS = 1 << 16


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


def connect(path: str | Path, shown: Path | None = None) -> sqlite3.Connection:
    """``path`` opened read-only; a file that is not SQLite, or cut short, is a
    :class:`TraceFormatError` naming it (``shown``, the compressed file, where ``path``
    is the temporary file it was inflated into: :func:`inflated`)."""
    path = Path(path)
    name, was = (shown, f" once inflated from {_packer(shown)}") if shown is not None else (path, "")
    try:
        with open(path, "rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError as e:
        raise TraceFormatError(name, f"cannot be read ({e.strerror or e})") from None
    if not is_sqlite(head):
        raise TraceFormatError(name, f"not an SQLite database{was} (no 'SQLite format 3' header)")
    want = _declared_size(path, head)
    if len(head) < 100 or (want is not None and size < want):
        raise TraceFormatError(name, f"truncated SQLite database{was}: {size:,} bytes of the "
                                     f"{want or 100:,} its header declares")
    from urllib.parse import quote

    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, factory=sqlite_bounds.Guarded)
        conn.arm()  # each statement bounded in time and memory, signals let through (sqlite_bounds)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        raise TraceFormatError(name, f"damaged SQLite database{was} ({e})") from None
    except UnicodeDecodeError:  # sqlite3 decodes SQLite's message, which may quote damaged bytes
        raise TraceFormatError(name, f"damaged SQLite database{was} (its schema is not readable)") from None
    except MemoryError as e:
        raise failure(name, e) from None
    return conn


#: what reading a damaged database can raise: SQLite's errors, the UnicodeDecodeError of
#: sqlite3 decoding a message or a name that quotes damaged bytes, and the MemoryError of
#: SQLITE_NOMEM (SQLite allocating what a damaged record declares)
ERRORS = (sqlite3.Error, UnicodeDecodeError, MemoryError)


T = TypeVar("T")


def read_file(path: str | Path, read: Callable[[sqlite3.Connection, Path], T]) -> T:
    """``read(connection, path)`` of the database at ``path``, opened read-only and closed
    after; an SQLite error on the way is one :class:`TraceFormatError` (:func:`failure`).
    A gzip- or xz-compressed database is read from a temporary copy (:func:`inflated`)."""
    path = Path(path)
    if _packer(path):
        with inflated(path, _sniffed(path)) as copy:
            return _read(connect(copy, shown=path), path, read)
    return _read(connect(path), path, read)


def _read(conn: sqlite3.Connection, path: Path, read: Callable[[sqlite3.Connection, Path], T]) -> T:
    try:
        with sqlite_bounds.heap_limited(conn):
            return read(conn, path)
    except ERRORS as e:
        raise failure(path, _stopped(conn, e)) from None
    finally:
        conn.close()


def _stopped(conn: sqlite3.Connection, e: BaseException) -> BaseException:
    """``e``, or what stopped the statement (its deadline: ``StatementTimeout``); a signal's
    handler that raised in SQLite's progress handler is raised again (``Interrupted``)."""
    got = sqlite_bounds.why(conn, e)
    if isinstance(got, sqlite_bounds.Interrupted):
        raise got from None
    return got


def _packer(path: Path) -> str:
    """"gzip" or "xz" for a file compressed so (by its first bytes), else ""."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(XZ_MAGIC))
    except OSError:
        return ""  # connect says why
    return packer(head)


@contextlib.contextmanager
def inflated(path: Path, data: Sequence[bytes] | None = None) -> Iterator[Path]:
    """A gzip- or xz-compressed database inflated into a temporary file (in ``TMPDIR``),
    within the inflation limits of every compressed input (``safety.Inflation``:
    ``max_inflated_bytes``, ``max_inflate_ratio``), removed when the block ends, whatever
    ends it (``data``: the database inflated already, by its sniff, its blocks written as
    they are). SQLite reads a database in place (pages at any offset), so not as a stream."""
    try:
        fd, name = tempfile.mkstemp(prefix="polyprof-", suffix=".sqlite")
    except OSError as e:
        raise TraceFormatError(path, f"cannot make a temporary file in {tempfile.gettempdir()} to inflate it "
                                     f"into ({e.strerror or e}; TMPDIR names another directory)") from None
    try:
        with os.fdopen(fd, "wb") as out:
            if data is None:
                from .inflate import Decompressed  # gzip's and xz's stream readers, with the limits: only
                # for a compressed database

                for block in Decompressed(path, 1 << 22).blocks():
                    _write(out, block, path)
            else:
                for block in data:
                    _write(out, block, path)
            _write(out, b"", path)
        yield Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _inflate_head(path: Path, head: int) -> tuple[tuple[bytes, ...], bool]:
    """The first ``head`` inflated bytes of the compressed ``path`` (a block of at most
    ``head`` more where they end within one), as their blocks, and whether they are all
    of it (its stream ended within them)."""
    from .inflate import Decompressed  # gzip's and xz's stream readers, with the limits: only for a
    # compressed database

    dec = Decompressed(path, min(head, 1 << 22))
    parts: list[bytes] = []
    done = 0
    with contextlib.closing(dec.blocks()) as blocks:
        for block in blocks:
            parts.append(block)
            done += len(block)
            if done >= head:
                return tuple(parts), dec.ended
    return tuple(parts), True


def _write(out: BinaryIO, block: bytes, path: Path) -> None:
    """``block`` written to the temporary copy (all of it flushed: an empty one); a
    failure (its disk full, say) is the :class:`TraceFormatError` naming ``path``."""
    try:
        if block:
            out.write(block)
        else:
            out.flush()
    except OSError as e:
        raise TraceFormatError(path, f"cannot inflate it into a temporary file in {tempfile.gettempdir()} "
                                     f"({e.strerror or e}; TMPDIR names another directory)") from None


def failure(path: str | Path, e: BaseException) -> TraceFormatError:
    """One line for an SQLite error met while reading ``path``."""
    if isinstance(e, MemoryError):
        return TraceFormatError(path, "out of memory while reading it (a damaged record may declare more than the "
                                      "file holds, or the database needs more memory than there is)")
    if isinstance(e, UnicodeDecodeError):
        return TraceFormatError(path, "damaged SQLite database (text that is not UTF-8 where SQLite keeps names)")
    text = one_line(e)
    if isinstance(e, (sqlite_bounds.StatementTimeout, sqlite_bounds.Refused)):
        return TraceFormatError(path, text)
    if isinstance(e, sqlite3.DataError) and "too big" in text:
        return TraceFormatError(path, f"holds or computes a value longer than {sqlite_bounds.MAX_VALUE_BYTES >> 20} "
                                      f"MiB (SQLite: {text}): no profile's; a view making it?")
    if isinstance(e, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text):
        return TraceFormatError(path, f"damaged or truncated SQLite database ({text})")
    return TraceFormatError(path, f"SQLite error while reading ({type(e).__name__}: {text})")


@dataclass
class Schema:
    """The tables and views of a database and their columns (names as written)."""

    columns: dict[str, tuple[str, ...]]
    views: frozenset[str]
    required: dict[str, frozenset[str]] = field(default_factory=dict)  # columns declared NOT NULL

    def not_null(self, table: str) -> frozenset[str]:
        return self.required.get(table, frozenset())

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns.get(table)
        return have is not None and all(c in have for c in cols)

    def present(self, table: str, cols: Iterable[str]) -> list[str]:
        have = set(self.columns.get(table, ()))
        return [c for c in cols if c in have]


def sniff(head: bytes, path: Path, is_ours: Callable[[Schema], bool], compressed: bool = False) -> bool:
    """An SQLite file whose tables ``is_ours`` recognises (opened read-only; any failure
    to open or read its schema: not ours). ``compressed``: also one gzipped or
    xz-compressed (``head``: its first bytes inflated after ``GZ``, as ``detect`` reads
    them), whose schema is read from a temporary copy once for every reader's sniff
    (:func:`_packed_schema`); inflating it past the limits, or corrupt compressed
    data, is the :class:`TraceFormatError` saying so. Drops the bytes of compressed
    databases sniffed too long ago (:func:`_expire`)."""
    if _WHOLE:
        with _WHOLE_LOCK:
            _expire(_now())
    if compressed and head.startswith(b"GZ" + MAGIC):
        try:
            st = path.stat()
        except OSError:
            return False
        got = _packed_schema(str(path), _stamp(st), current())
        if isinstance(got, TraceFormatError):
            raise got
        return got is not None and is_ours(got)
    if not is_sqlite(head):
        return False
    try:
        conn = connect(path)
    except TraceFormatError:
        return False
    try:
        return is_ours(schema(conn))
    except ERRORS as e:
        _stopped(conn, e)
        return False
    finally:
        conn.close()


#: inflated bytes of a compressed database its sniff reads its schema from first (a
#: schema's pages are written early: Nsight Systems' 96 tables in the first 256 KiB of
#: the 373 KiB of tests/data/nsys/saxpy_2022.sqlite)
SCHEMA_HEAD_BYTES = 4 << 20
#: databases whose sniff's head held all of them (less than twice ``SCHEMA_HEAD_BYTES``
#: each), by ``_packed_schema``'s key, with the time they were kept, until the read that
#: follows takes them (:func:`_sniffed`): such a file is inflated once, not twice. Kept
#: for a sniff with no read after it (detect alone, another reader chosen, a failed
#: read) until a later sniff or read finds them older than ``_WHOLE_SECONDS``, or
#: ``_WHOLE_KEPT`` newer ones push them out (ranks read in threads at once: a few)
_WHOLE: collections.OrderedDict[tuple[str, tuple[int, ...], Limits], tuple[float, tuple[bytes, ...]]] = \
    collections.OrderedDict()
_WHOLE_KEPT = 4
_WHOLE_SECONDS = 5.0
_WHOLE_LOCK = threading.Lock()
_now = time.monotonic  # (the tests' clock)


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What tells a file's contents apart from its earlier ones: size, modification and
    change times, inode and device (``os.utime`` sets a file's modification time back,
    never its change time: a file rewritten in place with its old size and time)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def _expire(now: float) -> None:
    """Drop the kept databases older than ``_WHOLE_SECONDS`` and those past
    ``_WHOLE_KEPT`` (the oldest first; the caller holds ``_WHOLE_LOCK``)."""
    while _WHOLE and (len(_WHOLE) > _WHOLE_KEPT or now - next(iter(_WHOLE.values()))[0] > _WHOLE_SECONDS):
        _WHOLE.popitem(last=False)


@functools.lru_cache(maxsize=4)
def _packed_schema(path: str, stamp: tuple[int, ...], limits: Limits) -> Schema | TraceFormatError | None:
    """The schema of a compressed database (None: not a readable one once inflated), or
    the error inflating it; one inflation for the sniffs of every SQLite format (the
    arguments after ``path``: the file as it is now, :func:`_stamp`, and the limits in
    force, so a changed file, or other limits, inflate it again). It is read from the database's first
    ``SCHEMA_HEAD_BYTES`` where they hold it, so that a database read after its sniff is
    inflated once in full, not twice (and where they are all of it, the read takes them:
    :data:`_WHOLE`); where they do not (a page past them reads as zeros, which SQLite
    calls malformed), from the whole."""
    try:
        got, whole = _schema_of(Path(path), SCHEMA_HEAD_BYTES)
        if got is not None and whole is not None:
            with _WHOLE_LOCK:
                now = _now()
                _WHOLE.pop((path, stamp, limits), None)  # (the newest last: _expire drops the first)
                _WHOLE[(path, stamp, limits)] = (now, whole)
                _expire(now)
        return got if got is not None else _schema_of(Path(path), 0)[0]
    except TraceFormatError as e:
        return e.with_traceback(None)  # kept: not the frames (and blocks) it was raised in


def _sniffed(path: Path) -> tuple[bytes, ...] | None:
    """The database at the compressed ``path`` as its sniff inflated it, where that was all
    of it and the file and the limits are as they were then (taken: a later read inflates
    it again), else None (and those kept too long dropped: :func:`_expire`)."""
    try:
        st = path.stat()
    except OSError:
        return None  # connect says why
    with _WHOLE_LOCK:
        _expire(_now())
        got = _WHOLE.pop((str(path), _stamp(st), current()), None)
    return None if got is None else got[1]


def _schema_of(path: Path, head: int) -> tuple[Schema | None, tuple[bytes, ...] | None]:
    """The schema of the compressed database at ``path`` from its first ``head`` inflated
    bytes (0: all), or None where they do not give one; and those bytes where they are
    the whole database (``head`` given, its stream ended within them)."""
    data, whole = _inflate_head(path, head) if head else (None, False)
    with inflated(path, data) as copy:
        if head:  # its header's page count is the whole's, which SQLite checks against the file: 0, not known
            with open(copy, "r+b") as f:
                f.seek(28)
                f.write(bytes(4))
        try:
            conn = connect(copy)
        except TraceFormatError:
            return None, None
        try:
            return schema(conn), data if whole else None
        except ERRORS:
            return None, None
        finally:
            conn.close()


def schema(conn: sqlite3.Connection) -> Schema:
    rows = conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    cols: dict[str, list[str]] = {n: [] for n, _ in rows if not n.startswith("sqlite_")}
    required: dict[str, set[str]] = {n: set() for n in cols}
    try:  # every table's columns in one query (SQLite >= 3.16)
        info = conn.execute("SELECT m.name, p.name, p.\"notnull\" FROM sqlite_master AS m, pragma_table_info(m.name) AS p "
                            "WHERE m.type IN ('table', 'view') ORDER BY m.name, p.cid").fetchall()
    except sqlite3.OperationalError:
        info = [(n, r[1], r[3]) for n in cols for r in conn.execute(f"PRAGMA table_info({quote(n)})").fetchall()]
    for table, col, notnull in info:
        if table in cols:
            cols[table].append(col)
            if notnull:
                required[table].add(col)
    return Schema({n: tuple(c) for n, c in cols.items()}, frozenset(n for n, t in rows if t == "view"),
                  {n: frozenset(r) for n, r in required.items()})


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _parse(text: str | None, what: str = "a column") -> np.ndarray:
    """A group_concat text of integers as int64; anything else (text, reals, numbers
    beyond int64) is a DatabaseError naming ``what``, not a warning and a short column."""
    if not text:
        return np.zeros(0, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=np.int64, sep=",")  # type: ignore[call-overload]
        except (DeprecationWarning, ValueError, OverflowError):
            raise sqlite3.DatabaseError(f"{what}, read as integers, holds other values (text or reals)") from None


def _rowid_chunks(conn: sqlite3.Connection, src: str, lo: int, hi: int) -> Iterator[str]:
    """Conditions of chunks of at most ``CHUNK_ROWS`` rowids that hold rows: each next
    chunk starts at the next rowid there is, so sparse rowids (one row at 2**62) cost
    one query per chunk of rows, not one per ``CHUNK_ROWS`` of the range between."""
    a: int | None = lo
    while a is not None:
        b = min(a + CHUNK_ROWS - 1, hi)
        yield f"rowid BETWEEN {a} AND {b}"
        if b >= hi:
            return
        a = conn.execute(f"SELECT min(rowid) FROM {src} WHERE rowid > {b}").fetchone()[0]


#: a NULL in a ``required`` column until its row is left out (no profile's time or id: -2**63 is damage too)
NULL_MARK = -(1 << 63)


def read_columns(conn: sqlite3.Connection, table: str, exprs: Mapping[str, str], where: str = "",
                 nulls: Mapping[str, int] | None = None, rowid: bool = True,
                 not_null: Iterable[str] = (), wide: Iterable[str] = (), compiled: bool = True,
                 required: Iterable[str] = (), notes: list[str] | None = None) -> dict[str, np.ndarray]:
    """Integer columns of ``table`` (``name -> SQL expression``) as int64 arrays, row by
    row aligned; NULL reads as ``nulls[name]`` (default -1). ``where`` filters rows.
    ``not_null``: columns the table declares NOT NULL (read without ``coalesce``).
    ``wide``: columns of long numbers that vary little (Nsight's ``globalTid``: 15
    digits), read as their difference from the table's first value (shorter texts).
    ``required``: columns a row cannot be placed without (times, thread, device): rows
    with NULL there are left out and counted in ``notes`` (:func:`_without_nulls`), not
    read as -1; unchecked where declared NOT NULL or read as ``NULL`` (a missing column).
    A table is read in chunks of rowids; a view (or ``rowid=False``) row by row (:func:`_streamed`).
    ``compiled``: the page walk where it applies (False: SQL only; tests compare them)."""
    nulls, plain = dict(nulls or {}), set(not_null)
    need = [n for n in dict.fromkeys(required) if n in exprs and exprs[n] not in plain and exprs[n].upper() != "NULL"]
    nulls.update(dict.fromkeys(need, NULL_MARK))
    if compiled and rowid and not where:
        fast = sqlite_pages.columns(conn, table, exprs, nulls)
        if fast is not None:
            return _without_nulls(fast, need, table, exprs, notes)
    names = list(exprs)
    if not names:
        return {}
    base: dict[str, int] = {}
    for n in wide:
        e = exprs.get(n)
        if e is not None and _IDENT.match(e):
            got = conn.execute(f"SELECT {quote(e)} FROM {quote(table)} WHERE {quote(e)} IS NOT NULL LIMIT 1").fetchone()
            if got and isinstance(got[0], int) and not isinstance(got[0], bool):
                base[n] = int(got[0])
    view = not rowid or is_view(conn, table)
    sql = _sql(exprs, nulls, base, set() if view else plain)
    out = _streamed(conn, table, sql, where) if view else \
        _chunked(conn, table, sql, where, {n: f"{table}.{e}" for n, e in exprs.items()})
    for n, k in base.items():
        out[n] = np.where(out[n] == NULL_MARK, NULL_MARK, out[n] + k) if nulls.get(n) == NULL_MARK else out[n] + k
    return _without_nulls(out, need, table, exprs, notes)


def _without_nulls(out: dict[str, np.ndarray], need: list[str], table: str, exprs: Mapping[str, str],
                   notes: list[str] | None) -> dict[str, np.ndarray]:
    """``out`` without the rows holding NULL (:data:`NULL_MARK`) in a ``need`` column, said in
    ``notes`` (else logged) by table, column and count; the readers add the file's name."""
    gone = {n: out[n] == NULL_MARK for n in need}
    drop = np.logical_or.reduce(list(gone.values())) if need else None
    if drop is None or not drop.any():
        return out
    label = {n: ".".join(m.groups()[::-1]) if (m := _SUBQUERY.match(e)) else e.strip('"') for n, e in exprs.items()}
    said = ", ".join(f"{label[n]} ({int(m.sum())})" for n, m in gone.items() if m.any())
    text = f"{int(drop.sum())} row(s) of {table} left out: NULL in {said}, which they cannot be placed without"
    (notes.append if notes is not None else log.warning)(text)
    return {k: v[~drop] for k, v in out.items()}


_SUBQUERY = re.compile(r'^\(SELECT "?(\w+)"? FROM "?(\w+)"?', re.I)


def _sql(exprs: Mapping[str, str], nulls: Mapping[str, int], base: Mapping[str, int], plain: set[str]
         ) -> dict[str, str]:
    """Each column's SQL: NULL as its ``nulls`` value (coalesce), but for ``plain`` ones
    (declared NOT NULL); a ``base`` one less its base."""
    sql = {}
    for n, e in exprs.items():
        null = int(nulls.get(n, -1))
        null -= base.get(n, 0) if null != NULL_MARK else 0  # (the mark stays one: read_columns adds no base to it)
        if _IDENT.match(e) and e.upper() != "NULL":
            col = f"({quote(e)} - {base[n]})" if n in base else quote(e)
            sql[n] = col if e in plain else f"coalesce({col}, {null})"
        else:
            sql[n] = f"coalesce(({e}), {null})"
    return sql


def is_view(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` names a view (no rowids: read row by row, :func:`_streamed`)."""
    got = conn.execute("SELECT type FROM sqlite_master WHERE name = ? COLLATE NOCASE AND type IN ('table', 'view')",
                       (table,)).fetchone()
    return bool(got) and got[0] == "view"


def _streamed(conn: sqlite3.Connection, table: str, sql: Mapping[str, str], where: str) -> dict[str, np.ndarray]:
    """A view's columns: a view has no rowids to read it by in chunks, and one
    ``group_concat`` of all its rows is unbounded; so one statement whose rows are each
    one text of the row's values, fetched ``CHUNK_ROWS`` at a time and parsed per chunk
    (a Python string per row, made by sqlite3 in C), at most what the database's size
    can hold (``sqlite_bounds.max_rows``: a view that never ends, or multiplies rows, is
    refused), within the statement's deadline."""
    names = list(sql)
    what = f"{table} (a view)"
    cap = sqlite_bounds.max_rows(conn)
    text = " || ',' || ".join(f"({sql[n]})" for n in names)
    cur = conn.execute(f"SELECT {text} FROM {quote(table)}" + (f" WHERE ({where})" if where else ""))
    parts: list[np.ndarray] = []
    count = 0
    try:
        while chunk := cur.fetchmany(CHUNK_ROWS):
            count += len(chunk)
            if count > cap:
                raise sqlite_bounds.too_many_rows(what, cap)
            flat = _parse(",".join(map(operator.itemgetter(0), chunk)), what)
            if len(flat) != len(chunk) * len(names):
                raise sqlite_bounds.Refused(f"{what}: a value that is not one integer")
            parts.append(flat.reshape(len(chunk), len(names)))
    except TypeError:  # a NULL row text: a NULL where the view's column is declared NOT NULL
        raise sqlite_bounds.Refused(f"{what}: a NULL where an integer belongs") from None
    except sqlite3.OperationalError as e:  # its deadline, or a signal (sqlite_bounds.why)
        raise sqlite_bounds.why(conn, e) from None
    finally:
        cur.close()
    whole = np.concatenate(parts) if parts else np.zeros((0, len(names)), np.int64)
    return {n: np.ascontiguousarray(whole[:, i]) for i, n in enumerate(names)}


def _chunked(conn: sqlite3.Connection, table: str, sql: Mapping[str, str], where: str, labels: Mapping[str, str]
             ) -> dict[str, np.ndarray]:
    """A table's columns: one ``group_concat`` per column per chunk of rowids."""
    names = list(sql)
    src = quote(table)
    select = ", ".join(f"group_concat({sql[n]})" for n in names)
    lo, hi = conn.execute(f"SELECT min(rowid), max(rowid) FROM {src}").fetchone()
    if lo is None:
        return {n: np.zeros(0, np.int64) for n in names}
    parts: list[list[np.ndarray]] = [[] for _ in names]
    for c in _rowid_chunks(conn, src, int(lo), int(hi)):
        cond = " AND ".join(x for x in (c, f"({where})" if where else "") if x)
        row = conn.execute(f"SELECT {select} FROM {src}" + (f" WHERE {cond}" if cond else "")).fetchone()
        cols = [_parse(text, labels[n]) for n, text in zip(names, row)]
        if any(len(x) != len(cols[0]) for x in cols):  # a damaged page, or a NULL in a NOT NULL column
            raise sqlite3.DatabaseError(f"{table}: columns of different lengths ({[len(x) for x in cols]})")
        for i, x in enumerate(cols):
            parts[i].append(x)
    return {n: (np.concatenate(p) if len(p) != 1 else p[0]) for n, p in zip(names, parts)}


def read_texts(conn: sqlite3.Connection, table: str, expr: str, where: str = "", compiled: bool = True
               ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A text column's non-NULL values as (rowids, codes, distinct values sorted): row
    ``rowids[i]`` holds ``values[codes[i]]``. A plain column of every row: by the page
    walk where it applies (``compiled``); else the distinct values and each row's rank
    among them are computed by SQLite (rows without text cost only the NULL test)."""
    if compiled and not where:
        fast = sqlite_pages.texts(conn, table, expr)
        if fast is not None:
            return fast
    if is_view(conn, table):
        raise sqlite_bounds.Refused(f"{table} is a view: its texts have no rowids to tie them to its rows")
    cond = f" WHERE ({expr}) IS NOT NULL" + (f" AND ({where})" if where else "")
    src = quote(table)
    e = f"CAST(({expr}) AS TEXT)"
    values = [r[0] for r in conn.execute(f"SELECT DISTINCT {e} FROM {src}{cond} ORDER BY 1").fetchall()]
    if not values:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    rid, rank = conn.execute(f"SELECT group_concat(rowid), group_concat(r) FROM (SELECT rowid, dense_rank() OVER "
                             f"(ORDER BY {e}) - 1 AS r FROM {src}{cond})").fetchone()
    rid, rank = _parse(rid), _parse(rank)
    order = np.argsort(rid, kind="stable")
    return rid[order], rank[order], values


def rows(conn: sqlite3.Connection, sql: str, what: str = "a query") -> list[tuple]:
    """A small query's rows (metadata tables: a few rows), at most what the database's
    size can hold (more: a view that makes rows, ``sqlite_bounds.bounded_rows``)."""
    return sqlite_bounds.bounded_rows(conn, sql, what)
