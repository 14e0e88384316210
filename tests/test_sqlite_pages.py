"""The compiled page walk (formats/_sqlite_pages.c) against SQLite's own reading of the same
tables (``read_columns(..., compiled=False)``: group_concat through sqlite3), on the Nsight
fixture and on databases made here to hold each record layout SQLite writes."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from polyprof.errors import TraceFormatError
from polyprof.formats import sqlite_db, sqlite_pages

NSYS = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"

pytestmark = pytest.mark.skipif(sqlite_pages.IMPLEMENTATION != "c", reason="the C extension is not built")


def both(conn: sqlite3.Connection, table: str, exprs: dict[str, str], **kw: object) -> dict[str, np.ndarray]:
    fast = sqlite_pages.columns(conn, table, exprs, dict(kw.get("nulls") or {}))  # type: ignore[arg-type]
    assert fast is not None, f"{table}: the page walk should apply"
    slow = sqlite_db.read_columns(conn, table, exprs, compiled=False, **kw)  # type: ignore[arg-type]
    assert list(fast) == list(slow)
    for k in slow:
        assert fast[k].dtype == np.int64 and np.array_equal(fast[k], slow[k]), (table, k)
    return fast


def integer_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Columns of ``table`` holding only integers and NULLs (what the readers read)."""
    out = []
    for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall():
        kinds = {k for (k,) in conn.execute(f'SELECT DISTINCT typeof("{r[1]}") FROM "{table}"')}
        if kinds <= {"integer", "null"} and r[4] is None:
            out.append(r[1])
    return out


def test_every_integer_column_of_the_nsys_fixture() -> None:
    conn = sqlite_db.connect(NSYS)
    tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    checked = 0
    for t in tables:
        cols = integer_columns(conn, t)
        if not cols or not conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone():
            continue
        got = both(conn, t, {c: c for c in cols} | {"rid": "rowid"}, nulls={c: -7 for c in cols})
        assert len(got["rid"]) == conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
        checked += 1
    assert checked >= 10


def make(path: Path, page_size: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA page_size = {page_size}")
    conn.execute("CREATE TABLE ev (a INTEGER NOT NULL, big TEXT, b INTEGER, c INTEGER)")
    values = [0, 1, -1, 127, -128, 128, 32767, -32768, 40000, (1 << 23) - 1, -(1 << 23), 1 << 31, -(1 << 31) - 1,
              (1 << 47) - 1, -(1 << 47), 1 << 47, (1 << 63) - 1, -(1 << 63)]
    rows = []
    for i in range(3000):
        v = values[i % len(values)]
        big = "x" * (i % 7) * 400 if i % 5 == 0 else None  # spills onto overflow pages on small pages
        rows.append((v, big, None if i % 3 == 0 else -v if v > -(1 << 63) else 5, i * 1_000_003))
    conn.executemany("INSERT INTO ev VALUES (?, ?, ?, ?)", rows)
    conn.execute("DELETE FROM ev WHERE rowid % 97 = 0")  # gaps in the rowids, freed cells
    conn.execute("ALTER TABLE ev ADD COLUMN late INTEGER")  # older records lack it: NULL
    conn.execute("INSERT INTO ev (a, late) VALUES (42, 43)")
    conn.execute("CREATE TABLE ids (id INTEGER PRIMARY KEY, v INTEGER)")
    conn.executemany("INSERT INTO ids VALUES (?, ?)", [(i * 10, i) for i in range(500)])
    conn.commit()
    return conn


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_record_layouts_against_sqlite(tmp_path: Path, page_size: int) -> None:
    path = tmp_path / "t.sqlite"
    make(path, page_size).close()
    conn = sqlite_db.connect(path)
    got = both(conn, "ev", {"a": "a", "c": "c", "b": "b", "late": "late", "r": "rowid", "none": "NULL"},
               nulls={"b": -5, "late": 99})
    assert (got["none"] == -1).all() and got["late"][-1] == 43 and (got["late"][:-1] == 99).all()
    assert got["a"].min() == -(1 << 63) and got["a"].max() == (1 << 63) - 1
    ids = both(conn, "ids", {"id": "id", "v": "v"})  # INTEGER PRIMARY KEY: the rowid
    assert np.array_equal(ids["id"], ids["v"] * 10)


def test_where_the_walk_does_not_apply(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    conn = make(path, 1024)
    conn.execute("CREATE TABLE wr (k INTEGER PRIMARY KEY, v INTEGER) WITHOUT ROWID")
    conn.execute("INSERT INTO wr VALUES (1, 2)")
    conn.execute("CREATE VIEW vw AS SELECT a FROM ev")
    conn.execute("ALTER TABLE ev ADD COLUMN dflt INTEGER DEFAULT 5")
    conn.execute("CREATE TABLE txt (v INTEGER)")
    conn.execute("INSERT INTO txt VALUES (1), ('one')")
    conn.commit()
    conn.close()
    conn = sqlite_db.connect(path)
    for table, exprs in (("wr", {"v": "v"}), ("vw", {"a": "a"}), ("ev", {"d": "dflt"}), ("ev", {"s": "a + 1"})):
        assert sqlite_pages.columns(conn, table, exprs, {}) is None, table
    assert sqlite_db.read_columns(conn, "ev", {"d": "dflt"})["d"][0] == 5  # SQL reads the default
    assert sqlite_pages.columns(conn, "txt", {"v": "v"}, {}) is None  # a text: SQL says what it is
    with pytest.raises(sqlite3.DatabaseError, match="integers"):
        sqlite_db.read_columns(conn, "txt", {"v": "v"})


def texts_both(conn: sqlite3.Connection, table: str, column: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    fast = sqlite_pages.texts(conn, table, column)
    assert fast is not None, f"{table}.{column}: the page walk should apply"
    slow = sqlite_db.read_texts(conn, table, column, compiled=False)
    assert fast[2] == slow[2]
    assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])
    return fast


def test_text_columns_against_sqlite(tmp_path: Path) -> None:
    conn = sqlite_db.connect(NSYS)
    rid, codes, values = texts_both(conn, "NVTX_EVENTS", "text")
    assert "saxpy" in values and len(rid) == 7
    texts_both(conn, "StringIds", "value")
    conn.close()
    path = tmp_path / "t.sqlite"
    make(path, 512).close()
    w = sqlite3.connect(path)
    w.execute("CREATE TABLE names (a INTEGER, s TEXT)")
    w.executemany("INSERT INTO names VALUES (?, ?)", [(i, None if i % 4 == 0 else f"{'é' * (i % 300)}k{i % 9}")
                                                      for i in range(2000)])
    w.execute("INSERT INTO names VALUES (1, '')")
    w.commit()
    w.close()
    conn = sqlite_db.connect(path)
    rid, codes, values = texts_both(conn, "names", "s")
    assert "" in values and len(values) > 500
    texts_both(conn, "ev", "big")  # texts spilling onto overflow pages
    assert sqlite_pages.texts(conn, "ev", "a") is None  # numbers: SQL casts them


def _interior_root(path: Path, table: str) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    return root, page


def test_a_damaged_tree_is_one_line(tmp_path: Path) -> None:
    """A root page that points to itself, and one that is no b-tree page: the walk stops
    with SQLite's "malformed", which the readers turn into one line naming the file."""
    path = tmp_path / "t.sqlite"
    make(path, 1024).close()
    root, page = _interior_root(path, "ev")
    data = bytearray(path.read_bytes())
    at = (root - 1) * page
    assert data[at] == 0x05  # an interior page: 3,000 rows do not fit one 1 KB page
    loop = bytearray(data)
    loop[at + 8:at + 12] = root.to_bytes(4, "big")  # its right-most child: itself
    bad = bytearray(data)
    bad[at] = 0x42
    for name, image in (("loop", loop), ("bad", bad)):
        p = tmp_path / f"{name}.sqlite"
        p.write_bytes(bytes(image))
        conn = sqlite_db.connect(p)
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            sqlite_pages.columns(conn, "ev", {"a": "a"}, {})
        conn.close()


def test_a_damaged_nsys_export_is_one_line(tmp_path: Path) -> None:
    from polyprof.formats import nsys

    p = tmp_path / "damaged.sqlite"
    shutil.copy(NSYS, p)
    root, page = _interior_root(p, "CUPTI_ACTIVITY_KIND_RUNTIME")
    data = bytearray(p.read_bytes())
    data[(root - 1) * page] = 0x42
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as e:
        nsys.load(p)
    assert str(p) in str(e.value) and "damaged" in str(e.value) and "\n" not in str(e.value)


def test_the_nsys_fixture_reads_the_same_without_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole reader on the SQL path (no extension) gives the Trace the walk gives:
    events, stats and flows."""
    from polyprof.formats import nsys

    walked = nsys.load(NSYS)
    monkeypatch.setattr(sqlite_pages, "_sqlite_pages", None)
    by_sql = nsys.load(NSYS)
    assert walked.n_events == by_sql.n_events == 99
    for k in walked.events:
        assert np.array_equal(walked.events[k], by_sql.events[k]), k
    assert walked.strings == by_sql.strings
    assert sorted(walked.stats) == sorted(by_sql.stats)
    for k in walked.stats:
        a, b = walked.stats[k], by_sql.stats[k]
        assert np.array_equal(a.rows, b.rows) and list(a.values) == list(b.values), k
    for k in walked.flows:
        assert np.array_equal(walked.flows[k], by_sql.flows[k]), k
