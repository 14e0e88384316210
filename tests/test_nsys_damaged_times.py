"""A damaged Nsight Systems export (a call starting at -2**63 ns) is read without that
row, said in a warning: before, every summary of it was an internal error (OverflowError
in the temporal breakdown's span)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import polyprof

SAXPY = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"


def test_rows_with_times_beyond_2_62_ns_are_left_out_and_said(tmp_path: Path) -> None:
    path = tmp_path / "damaged.sqlite"
    shutil.copy(SAXPY, path)
    with sqlite3.connect(path) as con:
        (corr,) = con.execute("SELECT min(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = -9223372036854775808 WHERE correlationId = ?",
                    (corr,))
    whole, damaged = polyprof.load(SAXPY), polyprof.load(path)
    assert damaged.n_events == whole.n_events - 1
    assert any("1 row(s) of CUPTI_ACTIVITY_KIND_RUNTIME left out" in w for w in damaged.metadata["warnings"])
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
