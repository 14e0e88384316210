"""The rows of one SQL query on a database file, opened read-only: the independent
reading the SQLite readers' tests (nsys, rocpd, rpd) compare polyprof with; and
statements run on a file, for tests that make or damage one."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def query(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def execute(path: Path, *sql: str) -> Path:
    """``path`` after running the statements ``sql`` on it (a new file where none is)."""
    conn = sqlite3.connect(path)
    try:
        for s in sql:
            conn.execute(s)
        conn.commit()
    finally:
        conn.close()
    return path
