"""A bounded fuzz smoke run, in process, fixed seeds (seconds): damaged SQLite databases
through the compiled page walk and its SQL path, and through the whole Nsight Systems
reader; damaged Kineto JSON through the reader with the C tokenizer and with msgspec.
Only clean results may come out: columns or a Trace, or SQLite's error / polyprof's one
line (not the readers' last net, safety.ForeignError). Where SQLite finds the file
intact (integrity_check), the walk must read what SQL reads; where both Kineto paths
read, the same trace. The long runs are scripts/fuzz.py and scripts/fuzz_cli.py."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import polyprof
from fuzz import mutators, seeds
from fuzz.differential import fallback, fingerprint
from fuzz.sqlite_mutators import build_seeds
from polyprof.errors import PolyprofError, TraceFormatError
from polyprof.formats import sqlite_db, sqlite_pages
from polyprof.formats.safety import ForeignError

SEED = 20261128


def _integer_tables(conn: sqlite3.Connection) -> dict[str, dict[str, str]]:
    out = {}
    for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({sqlite_db.quote(t)})") if "INT" in str(r[2]).upper()]
        if cols:
            out[t] = {c: c for c in cols[:6]}
    return out


def _walk_and_sql(path: Path) -> tuple[int, int]:
    """(tables read by both paths, tables refused) of one damaged database; asserts the rest."""
    try:
        conn = sqlite_db.connect(path)
    except TraceFormatError:
        return 0, 1
    both = refused = 0
    try:
        try:
            tables = _integer_tables(conn)
            intact = conn.execute("PRAGMA integrity_check(1)").fetchone() == ("ok",)
        except sqlite_db.ERRORS:  # SQLite's errors; its NOMEM on a damaged schema record
            return 0, 1
        for table, exprs in tables.items():
            got = []
            for compiled in (True, False):
                try:
                    got.append(sqlite_db.read_columns(conn, table, exprs, compiled=compiled))
                except sqlite3.DatabaseError:
                    got.append(None)
                except MemoryError:  # SQLite's NOMEM (the SQL path), never the walk's
                    assert not compiled, (path, table)
                    got.append(None)
            if got[0] is not None and got[1] is not None:
                both += 1
                if intact:
                    for k in exprs:
                        assert np.array_equal(got[0][k], got[1][k]), (path, table, k)
            elif intact and not (got[0] is None and got[1] is None):
                raise AssertionError(f"{table}: one path refused an intact file ({path})")
            else:
                refused += 1
        if "StringIds" in tables and sqlite_pages.IMPLEMENTATION == "c":
            try:
                sqlite_db.read_texts(conn, "StringIds", "value")
            except sqlite3.DatabaseError:
                refused += 1
    finally:
        conn.close()
    return both, refused


def test_damaged_sqlite_through_the_page_walk_and_sql(tmp_path: Path) -> None:
    ss = build_seeds("nsys")
    read = refused = 0
    for i in range(250):
        _, data = mutators.mutate("nsys", ss[:2], SEED, i)  # the export as it is, and at 512-byte pages
        path = tmp_path / f"m{i}.sqlite"
        path.write_bytes(data)
        b, r = _walk_and_sql(path)
        read, refused = read + b, refused + r
        path.unlink()
    assert read > 250 and refused > 25, (read, refused)  # both kinds of outcome were reached


def test_damaged_nsys_exports_through_the_reader(tmp_path: Path) -> None:
    ss = build_seeds("nsys")
    outcomes = {"ok": 0, "error": 0}
    for i in range(30):
        _, data = mutators.mutate("nsys", ss[1:2], SEED, i)
        path = tmp_path / f"n{i}.sqlite"
        path.write_bytes(data)
        try:
            polyprof.load(path)
            outcomes["ok"] += 1
        except PolyprofError as e:
            assert not isinstance(e, ForeignError), f"input {i}: only the readers' net caught it: {e}"
            assert str(path) in str(e) and "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["ok"] and outcomes["error"], outcomes


@pytest.mark.parametrize("name", ["cpu_only_rank34.json", "cuda_event_sync_multistream.json"])
def test_damaged_kineto_json_through_both_paths(tmp_path: Path, name: str) -> None:
    ss = [s for s in seeds.load_seeds()["kineto"] if s[0] == name]
    assert ss, name
    outcomes = {"ok": 0, "error": 0}
    for i in range(120):
        _, data = mutators.mutate("kineto", ss, SEED, i)
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        path = tmp_path / f"k{i}.json"
        path.write_bytes(data)
        got = []
        for slow in (False, True):
            try:
                if slow:
                    with fallback():
                        got.append(fingerprint(polyprof.load(path)))
                else:
                    got.append(fingerprint(polyprof.load(path)))
            except PolyprofError as e:
                assert not isinstance(e, ForeignError), f"input {i}: only the readers' net caught it: {e}"
                assert "\n" not in str(e)
                got.append(None)
        assert got[0] == got[1], f"input {i}: the C tokenizer and msgspec disagree"
        outcomes["ok" if got[0] else "error"] += 1
    assert outcomes["ok"] and outcomes["error"], outcomes

