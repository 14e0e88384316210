"""Stat columns whose names differ only in case (torch's memory events' ``Bytes``, its
copies' ``bytes``): SQL folds case, and DuckDB read the second as ``bytes_1``, so
``sum(bytes)`` over torch's copies was NULL where it is the copies' bytes on Nsight,
nvprof and RPD traces. The lower-case key keeps its name; the other is ``stat.Bytes``,
on a trace file and in a store alike (an auditor's finding on a real H200 trace)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polyprof
from polyprof.trace.tables import stat_columns

H200 = Path(__file__).parent / "data" / "h200" / "torch_copies_h200.json.gz"
#: the copies' args.bytes summed, and their count, read from the file's JSON
COPY_BYTES, COPIES = 252_968_980, 340


def _sql(target: Path, query: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "polyprof", "sql", "--csv", str(target), query],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()[1:]


def test_the_lower_case_key_keeps_its_name() -> None:
    assert stat_columns(["Bytes", "bytes", "Name"], ["name"]) == {
        "Bytes": "stat.Bytes", "bytes": "bytes", "Name": "stat.Name"}
    assert stat_columns(["Bytes"], ["name"]) == {"Bytes": "Bytes"}  # alone: as it is


def test_sum_of_bytes_is_the_copies_bytes_on_a_trace_and_in_a_store(tmp_path: Path) -> None:
    query = "SELECT count(*), sum(bytes) FROM events WHERE category = 'gpu_memcpy'"
    assert _sql(H200, query) == [f"{COPIES},{COPY_BYTES}"]
    names = polyprof.load(H200).to_arrow().column_names
    assert "bytes" in names and "stat.Bytes" in names and "Bytes" not in names
    store = tmp_path / "job.store"
    r = subprocess.run([sys.executable, "-m", "polyprof", "convert", str(H200), "-o", str(store)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert _sql(store, query) == [f"{COPIES},{COPY_BYTES}"]
    assert _sql(store, 'SELECT count("stat.Bytes") > 0 FROM events') == ["true"]
