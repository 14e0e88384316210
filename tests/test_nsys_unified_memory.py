"""Nsight Systems exports of managed-memory programs: the driver's unified-memory migrations
are rows of ``CUPTI_ACTIVITY_KIND_MEMCPY`` with a ``Unified HtoD``/``Unified DtoH`` copy
kind, stream 0 and correlation id 0 (no API call made them; real files: ynan1/aws_gpu's
``report2.sqlite``, 834 + 1,536 such rows, sdroruganti/cuda-kernel-library's, 155 + 72).
They are on their own line, ``unified memory``, not on a ``stream 0`` the program never
used, and the correlation counts them apart, not as device activity whose launch was not
found. Built here from the kept saxpy export (tests/data/nsys/README.md) with such rows
added."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np

import polyprof
from polyprof.analyze.breakdown import temporal_breakdown
from polyprof.derive.correlate import correlate
from polyprof.trace import keys

SAXPY = Path(__file__).parent / "data" / "nsys" / "saxpy_2022.sqlite"
#: (start, end, copyKind, bytes) of the migrations added: HtoD and DtoH, on no stream
MIGRATIONS = [(1_000_000_000, 1_000_004_000, 11, 65536), (1_000_010_000, 1_000_013_000, 11, 4096),
              (1_000_020_000, 1_000_022_000, 12, 65536)]


def _managed(tmp_path: Path) -> Path:
    path = tmp_path / "managed.sqlite"
    shutil.copy(SAXPY, path)
    with sqlite3.connect(path) as conn:
        gpid = conn.execute("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY LIMIT 1").fetchone()[0]
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, \"end\", deviceId, contextId, streamId, "
                         "correlationId, globalPid, bytes, copyKind, srcKind, dstKind) "
                         "VALUES (?, ?, 0, 1, 0, 0, ?, ?, ?, 7, 7)",
                         [(s, e, gpid, b, k) for s, e, k, b in MIGRATIONS])
    return path


def test_unified_memory_migrations_are_a_line_of_their_own_and_not_unmatched(tmp_path):
    t = polyprof.load(_managed(tmp_path))
    c = correlate(t)
    counts = c.counts
    # saxpy's 5 kernels and 15 copies, each found by its correlation id; the 3 migrations have no launch call
    assert (counts["device_activities"], counts["matched_by_correlation_id"]) == (23, 20)
    assert (counts["unmatched_device_activities"], counts["device_activities_without_launch_call"]) == (0, 3)
    names = t.names()
    lines = {}
    for r in c.device_rows.tolist():
        lines.setdefault(t.tracks[int(t.events["track"][r])].name, []).append(names[r])
    assert sorted(lines) == ["stream 7", "unified memory"]
    assert sorted(lines["unified memory"]) == ["Memcpy Unified DtoH (Unknown -> Unknown)",
                                               "Memcpy Unified HtoD (Unknown -> Unknown)",
                                               "Memcpy Unified HtoD (Unknown -> Unknown)"]
    um = [r for r in c.device_rows.tolist() if t.tracks[int(t.events["track"][r])].name == "unified memory"]
    assert np.sum(t.events["dur_ns"][um]) == 9_000
    tb = {r["stream"]: r for r in temporal_breakdown(t).to_dicts() if r["plane"] == "/device:GPU:0"}
    assert tb["unified memory"]["non_compute_ns"] == 9_000  # their time is still the device's memory time
    assert "stream 0" not in tb


def test_the_summary_names_them(tmp_path, capsys):
    from polyprof.cli import main  # the command, as a user runs it

    assert main(["summary", str(_managed(tmp_path))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "unmatched 0;" in out and "no launch call (correlation id 0, as unified-memory migrations) 3" in out
    assert "unified memory" in out and "stream 0" not in out


def test_the_kineto_export_keeps_their_id_0(tmp_path):
    """Small ids are written shifted so that HTA can load the file (writers/kineto.py,
    ``correlation_offset``); id 0, no API call, stays 0, so the export read back counts
    the migrations as the original does."""
    from polyprof.trace import TraceBuilder
    from polyprof.writers.kineto import HTA_ID_OFFSET, write

    b = TraceBuilder()
    host = b.track(b.plane("/host:CPU", "host"), "thread 1", "thread", tid=1)
    gpu = b.plane("/device:GPU:0", "device")
    stream, um = b.track(gpu, "stream 7", "stream", tid=7), b.track(gpu, "unified memory", "stream", tid=-2)
    for i in range(1, 101):  # ids up to 100, more than 127 rows: the ids are shifted
        b.event(host, "cudaLaunchKernel", i * 100, 5, "cuda_runtime", correlation_id=i)
        b.event(stream, "k", i * 100 + 10, 20, "kernel", correlation_id=i)
    for i in range(3):
        b.event(um, "Memcpy Unified HtoD", 50_000 + i * 100, 30, "gpu_memcpy", correlation_id=0)
    t = b.build()
    back = polyprof.load(write(t, tmp_path / "t.json"))
    ids = back.stats[keys.CORRELATION_ID]
    assert sorted(set(ids.values.tolist())) == [0] + [HTA_ID_OFFSET + i for i in range(1, 101)]
    for trace in (t, back):
        c = correlate(trace).counts
        assert (c["matched_by_correlation_id"], c["unmatched_device_activities"],
                c["device_activities_without_launch_call"]) == (100, 0, 3)
