"""Bounds on every SQLite statement polyprof runs on an input: time, memory, rows, signals.

An SQLite file is a program as much as data: a view is a query SQLite runs when it is
read, and a hostile one never ends (a recursive CTE: 8 KB that ran at 100% CPU until
SIGKILL) or makes values of any size (``CAST(zeroblob(900000000) AS TEXT)``: 3.5 GB).
Every connection :func:`polyprof.formats.sqlite_db.connect` opens is a :class:`Guarded`
one:

- **time**: each statement (from its ``execute`` through every row fetched) has
  ``POLYPROF_SQLITE_SECONDS`` (default :data:`QUERY_SECONDS`); a progress handler checks
  the deadline every :data:`PROGRESS_STEPS` VM instructions and interrupts the statement
  past it (:class:`StatementTimeout`, a ``sqlite3.OperationalError``, which the reader
  reports as one line naming the file);
- **signals**: Python runs a signal's handler only between bytecodes, never inside a C
  call, so before this a SIGTERM or SIGINT waited for the statement to end (for ever).
  The progress handler is Python code: the handler runs in it; its exception
  (``KeyboardInterrupt``, the CLI's ``Terminated``) makes the handler fail, which
  interrupts the statement, but ``sqlite3`` swallows the exception itself; so an
  interruption that was not the deadline is raised again as :class:`Interrupted` (a
  ``KeyboardInterrupt``: what polyprof's CLI unwinds on, then it ends by the signal);
- **memory**: no value longer than :data:`MAX_VALUE_BYTES` (``SQLITE_LIMIT_LENGTH``,
  Python 3.11+; past it SQLite stops the statement with "string or blob too big"), and
  SQLite's heap within :data:`MAX_HEAP_BYTES` while polyprof reads (``PRAGMA
  hard_heap_limit``; process-wide in SQLite, so set only where none is, and put back when
  the last reader closes: :func:`heap_limited`);
- **rows**: a query's rows (metadata tables, a view read row by row) at most
  :func:`max_rows`, what a database of its size can hold (a row costs at least 2 bytes of
  its file): a view that multiplies rows, or never stops making them, is refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from typing import Any, Iterator

from .. import envvars

#: seconds one statement may run by default (``POLYPROF_SQLITE_SECONDS``); the statements
#: of a real export's read are chunks of 65,536 rows (milliseconds each) and a string
#: table's distinct values (seconds)
QUERY_SECONDS = 300.0
SECONDS_ENV = "POLYPROF_SQLITE_SECONDS"
#: VM instructions between two deadline checks (a check costs ~0.3 us, 10,000 instructions ~100 us)
PROGRESS_STEPS = 10_000
#: the longest text or blob SQLite may make or read for polyprof (SQLITE_LIMIT_LENGTH)
MAX_VALUE_BYTES = 512 << 20
#: SQLite's heap while polyprof reads (PRAGMA hard_heap_limit)
MAX_HEAP_BYTES = 4 << 30
#: names (string tables' values) are cut to this many characters: C++ kernel names run to
#: ~20,000; a longer one is damage or hostile (a 900 MB "name" stalled the text report)
MAX_NAME_CHARS = 1 << 16


def seconds() -> float:
    """The deadline of one statement: ``POLYPROF_SQLITE_SECONDS`` if set, else :data:`QUERY_SECONDS`."""
    return envvars.number(SECONDS_ENV, QUERY_SECONDS, "seconds")


class StatementTimeout(sqlite3.OperationalError):
    """A statement ran past its deadline (:func:`seconds`)."""


class Refused(sqlite3.DatabaseError):
    """What polyprof refuses in a database SQLite reads (its message is the one line said)."""


class Interrupted(KeyboardInterrupt):
    """A signal's handler raised while SQLite ran a statement (``sqlite3`` swallowed it)."""


class _Clock:
    """The deadline of the statement running and whether the progress handler passed it."""

    __slots__ = ("seconds", "deadline", "expired")

    def __init__(self, limit: float) -> None:
        self.seconds, self.deadline, self.expired = limit, time.monotonic() + limit, False

    def start(self) -> None:
        self.deadline, self.expired = time.monotonic() + self.seconds, False

    def tick(self) -> int:
        # A pending signal's Python handler runs as this function is entered; what it
        # raises fails the call, which stops the statement as returning 1 does.
        if time.monotonic() > self.deadline:
            self.expired = True
            return 1
        return 0


class Guarded(sqlite3.Connection):
    """A connection whose statements are bounded (the module's docstring); made by
    ``sqlite3.connect(..., factory=Guarded)``, then :meth:`arm`."""

    clock: _Clock

    def arm(self) -> None:
        self.clock = _Clock(seconds())
        self.set_progress_handler(self.clock.tick, PROGRESS_STEPS)
        setlimit, length = getattr(self, "setlimit", None), getattr(sqlite3, "SQLITE_LIMIT_LENGTH", None)
        if setlimit is not None and length is not None:  # Python 3.11+
            setlimit(length, MAX_VALUE_BYTES)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        clock = getattr(self, "clock", None)
        if clock is not None:
            clock.start()
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as e:
            raise why(self, e) from None


def why(conn: sqlite3.Connection, e: BaseException) -> BaseException:
    """What stopped a statement of ``conn``: :class:`StatementTimeout` where its deadline
    passed, :class:`Interrupted` where a signal's handler raised in the progress handler
    (re-raised: sqlite3 swallowed it), else ``e`` itself."""
    if isinstance(e, (StatementTimeout, Interrupted)) or not isinstance(e, sqlite3.OperationalError) \
            or "interrupt" not in str(e):
        return e
    clock = getattr(conn, "clock", None)
    if clock is None:
        return e
    if clock.expired:
        return StatementTimeout(f"a statement ran past {clock.seconds:g} s ({SECONDS_ENV}): a view over an endless "
                                f"query, or a database too big for the limit")
    return Interrupted(f"a signal stopped an SQLite statement ({e})")


def max_rows(conn: sqlite3.Connection) -> int:
    """The most rows a query on ``conn``'s database can fairly yield: half its bytes (a
    row's cell takes at least 2 bytes of a page), at least 1,000."""
    size = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    return max(int(size) // 2, 1000)


def too_many_rows(what: str, cap: int) -> Refused:
    return Refused(f"{what} yields more than {cap:,} rows, more than the database's size can hold "
                                 f"(a view over an endless or multiplying query?)")


def bounded_rows(conn: sqlite3.Connection, sql: str, what: str) -> list[tuple]:
    """A query's rows, at most :func:`max_rows` (more: a DatabaseError naming ``what``)."""
    cap = max_rows(conn)
    cur = conn.execute(sql)
    out: list[tuple] = []
    try:
        while True:
            got = cur.fetchmany(4096)
            if not got:
                return out
            out += got
            if len(out) > cap:
                raise too_many_rows(what, cap)
    except sqlite3.OperationalError as e:
        raise why(conn, e) from None
    finally:
        cur.close()


_HEAP_LOCK = threading.Lock()
_heap_users = 0
_heap_set = False


@contextlib.contextmanager
def heap_limited(conn: sqlite3.Connection) -> Iterator[None]:
    """SQLite's heap limited to :data:`MAX_HEAP_BYTES` while the block runs, where no
    limit is set (a process-wide setting: set by the first reader, put back to none by
    the last; one the program set itself is left as it is)."""
    global _heap_users, _heap_set
    with _HEAP_LOCK:
        if _heap_users == 0:
            with contextlib.suppress(sqlite3.Error):
                _heap_set = int(conn.execute("PRAGMA hard_heap_limit").fetchone()[0]) == 0
                if _heap_set:
                    conn.execute(f"PRAGMA hard_heap_limit = {MAX_HEAP_BYTES}")
        _heap_users += 1
    try:
        yield
    finally:
        with _HEAP_LOCK:
            _heap_users -= 1
            if _heap_users == 0 and _heap_set:
                _heap_set = False
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA hard_heap_limit = 0")
