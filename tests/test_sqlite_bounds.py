"""Hostile and odd SQLite inputs (the audit of 2026-11-30, audR findings 2, 3 and 5):
views over endless queries, values of any size, event tables behind views, and bogus
Nsight schemas. Each database is built here, small (a few KB); each test says what
polyprof did before (formats/sqlite_bounds.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats import sqlite_bounds
from sqlite_query import execute

#: an Nsight kernel row computed from x (what the audit's views select)
_ROW = ("x*1000 AS start, x*1000+500 AS end, 0 AS deviceId, 1 AS contextId, 7 AS streamId, x AS correlationId, "
        "16777216 AS globalPid, 1 AS demangledName, 1 AS shortName, 1 AS gridX, 1 AS gridY, 1 AS gridZ, "
        "1 AS blockX, 1 AS blockY, 1 AS blockZ")
_KERNEL = ("start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
           "globalPid INTEGER, demangledName INTEGER, shortName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, "
           "blockX INTEGER, blockY INTEGER, blockZ INTEGER")
_ROCPD = ('id INTEGER PRIMARY KEY, start INTEGER, "end" INTEGER, kernel_id INTEGER, agent_id INTEGER, queue_id INTEGER, '
          "stream_id INTEGER, region_name_id INTEGER, dispatch_id INTEGER, nid INTEGER, pid INTEGER, tid INTEGER")
_ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c)"


def _nsys_endless(path: Path, one_row: bool = False) -> Path:
    """An Nsight-named kernel table that is a view over a query without end: its rows
    (``one_row``: one row, the max of them, which SQLite never reaches)."""
    src = "(SELECT max(x) AS x FROM c)" if one_row else "c"
    return execute(path, "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)",
               f"CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS {_ENDLESS} SELECT {_ROW} FROM {src}")


def _error(path: Path) -> str:
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(path)
    assert str(path) in str(e.value)
    return str(e.value)


def test_endless_views_are_refused_by_the_rows_a_file_can_hold(tmp_path: Path) -> None:
    """Before: ``SELECT min(rowid), max(rowid)`` on the view ran for ever (SIGTERM could
    not stop it). Now a view is read row by row, at most half the file's bytes in rows."""
    nsys = _nsys_endless(tmp_path / "nsys_view.sqlite")
    rocpd = execute(tmp_path / "rocpd_view.sqlite", "CREATE TABLE rocpd_string(id INTEGER PRIMARY KEY, string TEXT)",
                "INSERT INTO rocpd_string VALUES(1, 'k')",
                f'CREATE VIEW rocpd_kernel_dispatch AS {_ENDLESS} SELECT x AS id, x*1000 AS start, x*1000+500 AS "end", '
                "1 AS kernel_id, 1 AS agent_id, 1 AS queue_id, 1 AS stream_id, 1 AS region_name_id, x AS dispatch_id, "
                "1 AS nid, 1 AS pid, 1 AS tid FROM c")
    for path, table in ((nsys, "CUPTI_ACTIVITY_KIND_KERNEL"), (rocpd, "rocpd_kernel_dispatch")):
        t0 = time.monotonic()
        msg = _error(path)
        assert f"{table} (a view) yields more than" in msg and "endless" in msg, msg
        assert time.monotonic() - t0 < 30


def test_a_statement_past_its_deadline_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view whose one row never comes (an aggregate over an endless query): before, a
    hang; now the statement's deadline (POLYPROF_SQLITE_SECONDS) stops it, named."""
    path = _nsys_endless(tmp_path / "agg.sqlite", one_row=True)
    monkeypatch.setenv(sqlite_bounds.SECONDS_ENV, "1")
    t0 = time.monotonic()
    msg = _error(path)
    assert "a statement ran past 1 s (POLYPROF_SQLITE_SECONDS)" in msg, msg
    assert time.monotonic() - t0 < 20


def _stop(path: Path, signum: int) -> tuple[subprocess.CompletedProcess[str], float]:
    """``polyprof summary path`` sent ``signum`` once it is in the endless statement: the
    process and the seconds from the signal to its end (at most 30: killed past them)."""
    env = {k: v for k, v in os.environ.items() if k != sqlite_bounds.SECONDS_ENV}
    proc = subprocess.Popen([sys.executable, "-m", "polyprof", "summary", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(4)  # started, sniffed and in the statement (which has its 300 s)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signum)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=30)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_during_an_endless_statement_ends_the_command(tmp_path: Path) -> None:
    """Before: the process was still running 21 s after SIGTERM (Python runs a signal's
    handler between bytecodes; SQLite was in one C call); only SIGKILL ended it. Now the
    progress handler lets the handler run, the statement stops, the command unwinds and
    dies by the signal (status -15), without a word."""
    got, waited = _stop(_nsys_endless(tmp_path / "agg.sqlite", one_row=True), signal.SIGTERM)
    assert got.returncode == -signal.SIGTERM, got.stderr
    assert waited < 10 and got.stderr == "", got.stderr


def test_sigint_during_an_endless_statement_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    """Ctrl-C: sqlite3 swallows the KeyboardInterrupt its progress handler raised; it is
    raised again (``sqlite_bounds.Interrupted``, a KeyboardInterrupt), so the command ends
    as Ctrl-C ends it elsewhere ("polyprof: interrupted", exit 130). Before: it ran on."""
    got, waited = _stop(_nsys_endless(tmp_path / "agg.sqlite", one_row=True), signal.SIGINT)
    assert got.returncode == 130 and waited < 10, got.stderr
    assert got.stderr.strip().splitlines()[-1] == "polyprof: interrupted", got.stderr


def test_a_signal_handler_that_raises_in_process_stops_the_load(tmp_path: Path) -> None:
    """polyprof.load in a program: its handler's exception stops the statement, and the
    program gets a KeyboardInterrupt (sqlite3 swallowed the handler's own)."""
    path = _nsys_endless(tmp_path / "agg.sqlite", one_row=True)

    def on_alarm(signum: int, frame: object) -> None:
        raise RuntimeError("alarm")

    before = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt) as e:
            polyprof.load(path)
        assert isinstance(e.value, sqlite_bounds.Interrupted) and time.monotonic() - t0 < 10
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Connection.setlimit: Python 3.11+")
def test_a_string_table_view_of_a_900_mb_value_is_refused(tmp_path: Path) -> None:
    """Before: 3.5 GB RSS and still running at 120 s (the text report measuring the name).
    Now SQLite stops at SQLITE_LIMIT_LENGTH (512 MiB) before it makes the value."""
    path = execute(tmp_path / "nsys_blob.sqlite",
               "CREATE VIEW StringIds AS SELECT 1 AS id, CAST(zeroblob(900000000) AS TEXT) AS value",
               f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL({_KERNEL})",
               "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES(1000,2000,0,1,7,1,16777216,1,1,1,1,1,1,1,1)")
    t0 = time.monotonic()
    msg = _error(path)
    assert "value longer than 512 MiB" in msg, msg
    assert time.monotonic() - t0 < 20


def test_names_past_the_limit_are_cut(tmp_path: Path) -> None:
    """A kernel name of 200,000 characters in StringIds (a table, not a view): cut to
    MAX_NAME_CHARS, the kernel still read."""
    long = "k" * 200_000
    path = execute(tmp_path / "long.sqlite", "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)",
               f"INSERT INTO StringIds VALUES(1, '{long}')", f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL({_KERNEL})",
               "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES(1000,2000,0,1,7,1,16777216,1,1,1,1,1,1,1,1)")
    t = polyprof.load(path)
    assert t.n_events == 1
    assert max(len(n) for n in t.names()) == sqlite_bounds.MAX_NAME_CHARS


def _same_kernels(table: Path, view: Path) -> None:
    a, b = polyprof.load(table), polyprof.load(view)
    assert a.n_events == b.n_events == 100
    assert np.array_equal(np.sort(a.events["start_ns"]), np.sort(b.events["start_ns"]))


def test_rocpd_kernels_behind_a_view_read_as_the_same_rows_in_a_table(tmp_path: Path) -> None:
    """A rocpd database without metadata whose kernel table is a view (rocprofv3 names its
    tables ``<name><uuid>`` and its views ``<name>``). Before: 0 events, exit 0, no word
    (``min(rowid)`` of a view is NULL: read as empty)."""
    rows = [f"INSERT INTO kd VALUES({i},{i * 1000},{i * 1000 + 500},1,1,1,1,1,{i},1,1,1)" for i in range(1, 101)]
    strings = ("CREATE TABLE rocpd_string(id INTEGER PRIMARY KEY, string TEXT)", "INSERT INTO rocpd_string VALUES(1,'k')")
    view = execute(tmp_path / "view.sqlite", *strings, f"CREATE TABLE kd({_ROCPD})", *rows,
               "CREATE VIEW rocpd_kernel_dispatch AS SELECT * FROM kd")
    table = execute(tmp_path / "table.sqlite", *strings, f"CREATE TABLE rocpd_kernel_dispatch({_ROCPD})",
                *(r.replace("INTO kd", "INTO rocpd_kernel_dispatch") for r in rows))
    _same_kernels(table, view)


def test_nsys_kernels_behind_a_view_read_as_the_same_rows_in_a_table(tmp_path: Path) -> None:
    """Before: "its tables: none" (the view read as empty)."""
    strings = ("CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)", "INSERT INTO StringIds VALUES(1, 'k')")
    rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 100)"
    view = execute(tmp_path / "view.sqlite", *strings, f"CREATE TABLE k({_KERNEL})",
               f"INSERT INTO k {rows} SELECT {_ROW} FROM c",
               "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM k")
    table = execute(tmp_path / "table.sqlite", *strings, f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL({_KERNEL})",
                f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL {rows} SELECT {_ROW} FROM c")
    _same_kernels(table, view)


def test_a_string_table_with_text_ids_names_the_table(tmp_path: Path) -> None:
    """Before: "damaged or unsupported content (ValueError: invalid literal for int() with
    base 10: 'x')", the last net's words, no table named."""
    path = execute(tmp_path / "bogus1.sqlite", "CREATE TABLE StringIds(id TEXT, value INTEGER)",
               "INSERT INTO StringIds VALUES('x', 5)",
               "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start TEXT, end TEXT, demangledName TEXT, deviceId TEXT)",
               "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES('a','b','c','d')")
    msg = _error(path)
    assert "StringIds.id holds str ('x'), not integer ids" in msg and "ValueError" not in msg, msg


def test_a_kernel_table_without_its_columns_is_said(tmp_path: Path) -> None:
    """Before: exit 0 with "its tables: none" (the kernel table, with a row, left out of
    the list). Now the warning names the table and the columns it lacks."""
    path = execute(tmp_path / "bogus2.sqlite", "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)",
               "INSERT INTO StringIds VALUES(1, 'k')", "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(foo INTEGER)",
               "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES(1)")
    warnings = " ".join(polyprof.load(path).metadata["warnings"])
    assert "CUPTI_ACTIVITY_KIND_KERNEL lacks start, end, deviceId, streamId, correlationId" in warnings, warnings
    assert "none" not in warnings
