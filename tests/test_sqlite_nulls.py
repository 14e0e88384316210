"""NULLs where a row cannot be placed without a value (its times, its thread, its device):
the row is left out and counted in a warning naming the file, the table, the column and
the count (``sqlite_db.read_columns``' ``required``), on the compiled page walk and on
the SQL path alike. Before, NULL read as -1 with no word: a rocpd kernel with no start
began at -1 ns and lasted 17 hours, one with no agent made ``/device:GPU:-1``, an
Nsight call with no ``globalTid`` made a process of its own (thread 16777215), and an
unknown kernel symbol id was named ``[string N]``."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.formats import sqlite_db, sqlite_pages
from test_rocprof import UUID, build_rocpd

SAXPY = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"


@pytest.fixture(params=["compiled", "sql"])
def path_kind(request, monkeypatch) -> str:
    """Each test on both ways of reading columns: the page walk (where built) and SQL."""
    if request.param == "compiled" and sqlite_pages.IMPLEMENTATION != "c":
        pytest.skip("the C extension is not built")
    if request.param == "sql":
        monkeypatch.setattr(sqlite_pages, "_sqlite_pages", None)
    return request.param


def _table(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE ev (start INTEGER, dur INTEGER NOT NULL, dev INTEGER, tid INTEGER, note INTEGER)")
    rows = [(10 * i, 5, i % 3, 302119224788637 + i % 2, None if i % 4 else 7) for i in range(40)]
    rows[3] = (None, 5, 1, 302119224788637, 1)  # no start
    rows[8] = (80, 5, None, 302119224788637, 1)  # no device
    rows[9] = (None, 5, None, None, 1)  # none of them
    rows[20] = (200, 5, 2, None, 1)  # no thread
    conn.executemany("INSERT INTO ev VALUES (?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()


def test_rows_with_null_in_required_columns_are_left_out_and_counted(tmp_path: Path, path_kind: str) -> None:
    path = tmp_path / "t.sqlite"
    _table(path)
    conn = sqlite_db.connect(path)
    exprs = {"start": "start", "dur": "dur", "dev": "dev", "tid": "tid", "note": "note"}
    notes: list[str] = []
    got = sqlite_db.read_columns(conn, "ev", exprs, not_null=("dur",), wide=("tid",), notes=notes,
                                 required=("start", "dev", "tid", "dur"))
    keep = [i for i in range(40) if i not in (3, 8, 9, 20)]
    assert got["start"].tolist() == [10 * i for i in keep]
    assert got["tid"].tolist() == [302119224788637 + i % 2 for i in keep]
    assert got["note"].tolist() == [-1 if i % 4 else 7 for i in keep]  # not required: NULL reads as -1
    assert notes == ["4 row(s) of ev left out: NULL in start (2), dev (2), tid (2), which they cannot be placed "
                     "without"]
    # without ``required``, as before: NULL reads as -1, every row kept
    assert len(sqlite_db.read_columns(conn, "ev", exprs, not_null=("dur",))["start"]) == 40


def test_sql_and_page_walk_agree_on_nulls(tmp_path: Path) -> None:
    if sqlite_pages.IMPLEMENTATION != "c":
        pytest.skip("the C extension is not built")
    path = tmp_path / "t.sqlite"
    _table(path)
    conn = sqlite_db.connect(path)
    exprs = {"start": "start", "dev": "dev", "tid": "tid"}
    got = []
    for compiled in (True, False):
        notes: list[str] = []
        got.append((sqlite_db.read_columns(conn, "ev", exprs, wide=("tid",), compiled=compiled, required=exprs,
                                           notes=notes), notes))
    (fast, fast_notes), (slow, slow_notes) = got
    assert fast_notes == slow_notes and all(np.array_equal(fast[k], slow[k]) for k in exprs)


def test_rocpd_rows_without_start_or_agent_are_left_out_and_said(tmp_path: Path, path_kind: str, caplog) -> None:
    path = build_rocpd(tmp_path / "null.db", 3)
    kd = f"rocpd_kernel_dispatch{UUID}"
    with sqlite3.connect(path) as db:
        whole = db.execute(f"SELECT count(*) FROM {kd}").fetchone()[0]
        db.execute(f"UPDATE {kd} SET start = NULL WHERE id = 6")
        db.execute(f"UPDATE {kd} SET agent_id = NULL WHERE id = 2")
        db.execute(f"UPDATE {kd} SET kernel_id = 99999 WHERE id = 5")
        span = db.execute(f"SELECT max(\"end\") - min(start) FROM {kd}").fetchone()[0]
    with caplog.at_level("WARNING", logger="polyprof"):
        t = polyprof.load(path)
    assert [p.name for p in t.planes if p.name.startswith("/device")] == ["/device:GPU:0"]  # no GPU:-1
    assert int((t.kinds == polyprof.trace.categories.Kind.KERNEL).sum()) == whole - 2
    assert int(t.events["start_ns"].min()) > 0 and int(t.events["start_ns"].max()) - int(t.events["start_ns"].min()) \
        <= span + 1_000_000  # the made-up calls start up to 200 us before the kernels
    warnings = t.metadata["warnings"]
    assert f"2 row(s) of {kd} left out: NULL in start (1), agent_id (1), which they cannot be placed without" \
        in warnings
    assert any(w.startswith(f"1 row(s) of {kd} hold a kernel symbol id that rocpd_info_kernel_symbol{UUID} lacks")
               and "(99999;" in w for w in warnings)
    assert "[kernel symbol 99999]" in t.strings and not any(s.startswith("[string") for s in t.strings)
    assert f"null.db: 2 row(s) of {kd} left out" in caplog.text  # the file named


def test_rocpd_4x_rows_whose_track_is_missing_are_left_out(tmp_path: Path, path_kind: str) -> None:
    path = build_rocpd(tmp_path / "track.db", 4)
    kd = f"rocpd_kernel_dispatch{UUID}"
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {kd} SET track_id = 99999 WHERE id IN (3, 4)")
    t = polyprof.load(path)
    assert f"2 row(s) of {kd} left out: NULL in rocpd_track{UUID}.pid (2), rocpd_track{UUID}.agent_id (2), " \
           f"rocpd_track{UUID}.queue_id (2), which they cannot be placed without" in t.metadata["warnings"]


def test_nsys_calls_without_a_thread_are_left_out_and_said(tmp_path: Path, path_kind: str, caplog) -> None:
    path = tmp_path / "tid.sqlite"
    shutil.copy(SAXPY, path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE NVTX_EVENTS SET globalTid = NULL WHERE textId = 85")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE correlationId = 140")
        nvtx = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE textId = 85").fetchone()[0]
        calls = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = 140").fetchone()[0]
    whole = polyprof.load(SAXPY)
    with caplog.at_level("WARNING", logger="polyprof"):
        t = polyprof.load(path)
    assert nvtx == 10 and calls == 2
    threads = {tr.name for tr in t.tracks if t.planes[tr.plane].kind == "host"}
    assert threads == {tr.name for tr in whole.tracks if whole.planes[tr.plane].kind == "host"}  # no phantom
    assert not any("16777215" in n for n in threads) and len(t.sources) == len(whole.sources)
    assert t.n_events == whole.n_events - nvtx - 1  # (the runtime row's backtrace twin was left out before)
    assert "10 row(s) of NVTX_EVENTS left out: NULL in globalTid (10), which they cannot be placed without" \
        in t.metadata["warnings"]
    assert "tid.sqlite: 2 row(s) of CUPTI_ACTIVITY_KIND_RUNTIME left out: NULL in globalTid (2)" in caplog.text
