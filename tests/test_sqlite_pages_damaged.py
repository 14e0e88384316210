"""The compiled page walk (formats/_sqlite_pages.c) on records and cells SQLite itself
would never write, made byte by byte (tests/sqlite_craft.py): each is refused with
"malformed" (ValueError; the readers' one line), never a crash, a read outside the
record or an allocation the file cannot fill. Each case runs in a child process, so a
regression fails its test instead of killing the run."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sqlite_craft as craft
from polyprof.formats import sqlite_pages

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sqlite_pages.IMPLEMENTATION != "c", reason="the page walk is not built")

CHILD = """
import json, sys
from polyprof.formats import _sqlite_pages as w
out = []
for call, path, page, col in json.loads(sys.argv[1]):
    try:
        if call == "texts":
            got = w.texts(path, page, 0, 2, col)
            out.append(["read", [len(got[0]) // 8, [b.decode() for b in got[2]]]])
        else:
            got = w.columns(path, page, 0, 2, (col,), (-1,))
            out.append(["read", [int.from_bytes(got[0][i:i + 8], "little", signed=True)
                                 for i in range(0, len(got[0]), 8)]])
    except (ValueError, TypeError) as e:
        out.append([type(e).__name__, str(e)])
print(json.dumps(out))
"""


def walk(cases: list[tuple[str, Path, int, int]]) -> list[list]:
    """(call, file, page size, column) -> [outcome, what] per case, from a child process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps([[c, str(p), ps, col] for c, p, ps, col in cases])],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, f"the walk died (status {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout)


def test_serial_types_near_2_63_do_not_wrap(tmp_path: Path) -> None:
    """Two values whose declared sizes add up past 2**64 (serial types of 9-byte varints):
    the offset of the next value wrapped to a small number, so texts() hashed 2**63
    bytes from outside the record (SIGSEGV) and columns() read bytes before it."""
    wrap_text = craft.write(tmp_path / "t.sqlite", [craft.record([2**64 - 2, 2**64 - 1], b"abcdefgh")])
    # hsize 20 + (2**63 - 7) + (2**63 - 17) = 2**64 - 4: an int64 at "offset -4"
    wrap_int = craft.write(tmp_path / "i.sqlite", [craft.record([2**64 - 2, 2**64 - 22, 6], bytes(16))])
    # the same record, spilled onto an overflow page (the record then starts a heap buffer)
    rec = craft.record([2**64 - 2, 2**64 - 22, 6], bytes(3000))
    c, pages = craft.spilled(1, rec, 1024, 3)
    wrap_spilled = craft.write(tmp_path / "s.sqlite", [], cells=[c], extra_pages=pages)
    got = walk([("texts", wrap_text, 1024, 1), ("columns", wrap_int, 1024, 2), ("columns", wrap_spilled, 1024, 2)])
    for outcome, what in got:
        assert outcome == "ValueError" and "record body shorter than its header" in what, got
    for p in (wrap_text, wrap_int):  # SQLite says the same of them
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            sqlite3.connect(p).execute("SELECT * FROM t").fetchall()


def test_a_payload_larger_than_the_file_is_not_allocated(tmp_path: Path) -> None:
    """A cell declaring a 2 GB payload in a 3 KB file: refused before the walk allocates
    the payload's buffer (which a memory limit turned into a MemoryError)."""
    rec = craft.record([6, 6, 6], bytes(24))  # 103 bytes on the page (the minimum local part), then page 3
    size = 1003 + 1020 * 2_000_000
    cell = craft.varint(size) + craft.varint(1) + rec.ljust(103, b"\0") + (3).to_bytes(4, "big")
    path = craft.write(tmp_path / "big.sqlite", [], cells=[cell], extra_pages=[bytes(1024)])
    [(outcome, what)] = walk([("columns", path, 1024, 0)])
    assert outcome == "ValueError" and "payload larger than the file" in what


def test_overflow_chains_that_loop_or_leave_the_file(tmp_path: Path) -> None:
    """A chain that points back to its own page ends (each page is read at most as many
    times as the file has pages, and a payload is only as long as it says); one that
    points past the end of the file is "malformed"."""
    rec = craft.text_record([5, "z" * 3000, 7])
    cell, pages = craft.spilled(1, rec, 1024, 3)
    good = craft.write(tmp_path / "good.sqlite", [], cells=[cell], extra_pages=pages)
    loop = [bytearray(p) for p in pages]
    loop[0][:4] = (3).to_bytes(4, "big")  # the first overflow page points to itself
    looped = craft.write(tmp_path / "loop.sqlite", [], cells=[cell], extra_pages=[bytes(p) for p in loop])
    past = [bytearray(p) for p in pages]
    past[0][:4] = (9999).to_bytes(4, "big")
    gone = craft.write(tmp_path / "past.sqlite", [], cells=[cell], extra_pages=[bytes(p) for p in past])
    big = craft.varint(2 * 2**20) + cell[len(craft.varint(len(rec))):]  # 2 MB declared in a 5 KB file
    grown = craft.write(tmp_path / "grown.sqlite", [], cells=[big], extra_pages=loop)
    got = walk([("columns", good, 1024, 2), ("texts", good, 1024, 1), ("columns", looped, 1024, 2),
                ("columns", gone, 1024, 2), ("columns", grown, 1024, 2)])
    assert got[0] == ["read", [7]] and got[1] == ["read", [1, ["z" * 3000]]]
    assert got[2][0] in ("read", "ValueError")  # a bounded read of the wrong bytes, or refused
    assert got[3][0] == "ValueError" and "page number out of range" in got[3][1]
    assert got[4][0] == "ValueError" and "payload larger than the file" in got[4][1]
    assert sqlite3.connect(good).execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_crafted_records_read_as_sqlite_reads_them(tmp_path: Path, page_size: int) -> None:
    """The builder's files are valid: SQLite and the walk read the same rows, texts
    spilled or not, at the smallest, a common and the largest page size."""
    recs = [craft.text_record([i, "w" * (i * 97 % (page_size // 8)), -i]) for i in range(1, 6)]
    path = craft.write(tmp_path / "v.sqlite", recs, page_size=page_size)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    want = conn.execute("SELECT a, b, c FROM t ORDER BY rowid").fetchall()
    got = walk([("columns", path, page_size, 0), ("columns", path, page_size, 2), ("texts", path, page_size, 1)])
    assert got[0] == ["read", [r[0] for r in want]] and got[1] == ["read", [r[2] for r in want]]
    assert got[2][1][0] == len(want) and sorted(got[2][1][1]) == sorted({r[1] for r in want})


def test_sparse_rowids_are_read_by_chunks_of_rows(tmp_path: Path) -> None:
    """A valid table with rows at rowids 1 and 2**62 (the fuzzer's rocpd hang): the SQL
    path made a list of one condition per 65,536 rowids of the range, 7e13 of them; it
    now asks for the next rowid there is after each chunk."""
    import time

    from polyprof.formats import sqlite_db

    path = tmp_path / "sparse.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t(a INTEGER, b INTEGER)")
    conn.executemany("INSERT INTO t(rowid, a, b) VALUES (?, ?, ?)",
                     [(1, 10, 11), (2, 20, None), (2**62, 30, 31), (2**63 - 1, 40, 41)])
    conn.commit()
    t = time.perf_counter()
    got = sqlite_db.read_columns(conn, "t", {"a": "a", "b": "b", "r": "rowid"}, compiled=False)
    assert time.perf_counter() - t < 5
    assert got["a"].tolist() == [10, 20, 30, 40] and got["b"].tolist() == [11, -1, 31, 41]
    assert got["r"].tolist() == [1, 2, 2**62, 2**63 - 1]
    walked = sqlite_db.read_columns(conn, "t", {"a": "a", "b": "b", "r": "rowid"})
    assert all(walked[k].tolist() == got[k].tolist() for k in got)


def test_rocpd_ids_of_other_types_are_one_line(tmp_path: Path) -> None:
    """A text or a blob where rocpd's process and thread tables hold integers (found by
    the fuzzer): one line naming the file, not a ValueError caught by the readers' net."""
    from polyprof.errors import TraceFormatError
    from polyprof.formats import rocpd
    from polyprof.formats.safety import ForeignError
    from test_rocprof import build_rocpd

    src = build_rocpd(tmp_path / "r.db", 3)
    tables = {r[0] for r in sqlite3.connect(src).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, col, value in (("rocpd_info_process", "pid", "HSA queue 16"), ("rocpd_info_thread", "tid", b"\0\xff")):
        name = next(t for t in tables if t.startswith(table))
        path = tmp_path / f"{table}.db"
        path.write_bytes(src.read_bytes())
        conn = sqlite3.connect(path)
        conn.execute(f'UPDATE "{name}" SET "{col}" = ?', (value,))
        conn.commit()
        conn.close()
        with pytest.raises(TraceFormatError) as e:
            rocpd.load(path)
        assert not isinstance(e.value, ForeignError)
        assert str(path) in str(e.value) and f"{table}.{col}" in str(e.value) and "\n" not in str(e.value)


def test_sqlite_out_of_memory_on_a_damaged_schema_is_one_line(tmp_path: Path) -> None:
    """The nsys export with the payload size of a schema cell (page 9, offset 555) made a
    9-byte varint (found by the fuzzer): SQLite answers SQLITE_NOMEM, which sqlite3
    raises as MemoryError, and the command said "polyprof: error: out of memory" without
    the file. Now one line naming it, from the reader and from the command."""
    from polyprof.errors import TraceFormatError
    from polyprof.formats import nsys

    data = bytearray((ROOT / "tests" / "data" / "nsys" / "saxpy_2022.sqlite").read_bytes())
    assert data[8192] == 0x0D and data[8192 + 554] == 0x83  # a leaf of sqlite_master; the cell's size varint
    data[8192 + 555:8192 + 564] = b"\xff" * 9
    path = tmp_path / "nomem.sqlite"
    path.write_bytes(bytes(data))
    with pytest.raises(MemoryError):
        sqlite3.connect(path).execute("SELECT count(*) FROM sqlite_master").fetchone()
    with pytest.raises(TraceFormatError) as e:
        nsys.load(path)
    assert str(path) in str(e.value) and "out of memory" in str(e.value) and "\n" not in str(e.value)
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and str(path) in r.stderr, r.stderr
