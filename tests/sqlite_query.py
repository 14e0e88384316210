"""The rows of one SQL query on a database file, opened read-only: the independent
reading the SQLite readers' tests (nsys, rocpd, rpd) compare polyprof with."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def query(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
