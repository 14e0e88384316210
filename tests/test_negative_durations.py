"""An event that ends before it starts (a damaged file) is never changed silently: every
reader keeps it at its start, 0 ns long, and says so in a warning (and the trace's
``warnings``). Each case is a real file with one row damaged here: Nsight Systems'
export and ``nsys stats`` CSV, nvprof, RPD, rocpd, rocprofv3 JSON, Kineto JSON (through
the compiled tokenizer and through msgspec, which must agree)."""

from __future__ import annotations

import gzip
import json
import logging
import lzma
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.formats.kineto import tokenized
from polyprof.formats.kineto.chunks import read_chunks

from test_rocprof import build_rocpd

DATA = Path(__file__).resolve().parent / "data"
SAXPY = DATA / "nsys" / "saxpy_2022.sqlite"
GPU_CSV = DATA / "nsys_csv" / "saxpy_2022_cuda_gpu_trace.csv"
NVVP = DATA / "peers" / "blinkplus_nccl" / "output.nvvp.xz"
MATMUL = DATA / "rpd" / "matmul_result.rpd"
ROCPROF_JSON = DATA / "rocprof" / "tracelens_908_results.json.gz"
SAID = "end before they start (a damaged file): kept at their start, 0 ns long"


def _edited(src: Path, dst: Path, sql: str) -> Path:
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as con:
        assert con.execute(sql).rowcount == 1
    con.close()
    return dst


def _kernel_durations(trace: polyprof.Trace) -> np.ndarray:
    cats = np.asarray(trace.strings, dtype=object)[trace.events["category"]]
    return trace.dur_ns[cats == "kernel"]


def _check(good: Path, bad: Path, caplog: pytest.LogCaptureFixture, said: str) -> None:
    """``bad`` (``good`` with one kernel damaged) loads with that kernel kept, 0 ns long,
    and ``said`` in its warnings and in a logged warning."""
    whole = polyprof.load(good)
    with caplog.at_level(logging.WARNING):
        damaged = polyprof.load(bad)
    assert damaged.n_events == whole.n_events  # kept, not left out
    kw, kd = _kernel_durations(whole), _kernel_durations(damaged)
    assert len(kw) == len(kd) and (kd >= 0).all()
    assert np.count_nonzero(kd == 0) == np.count_nonzero(kw == 0) + 1
    assert any(said in w for w in damaged.metadata["warnings"]), damaged.metadata.get("warnings")
    assert any(said in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_nsys_export(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = _edited(SAXPY, tmp_path / "neg.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = start - 5000 "
                                                  "WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    _check(SAXPY, bad, caplog, f"1 row(s) of CUPTI_ACTIVITY_KIND_KERNEL {SAID}")
    r = subprocess.run([sys.executable, "-m", "polyprof", "summary", str(bad)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "CUPTI_ACTIVITY_KIND_KERNEL end before they start" in r.stderr, r.stderr


def test_nsys_stats_csv(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = GPU_CSV.read_text().splitlines(keepends=True)
    row = next(i for i, ln in enumerate(lines) if i and "memcpy" not in ln and "memset" not in ln)
    start, dur, rest = lines[row].split(",", 2)
    lines[row] = f"{start},-{dur},{rest}"
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    good, bad = tmp_path / "good" / GPU_CSV.name, tmp_path / "bad" / GPU_CSV.name  # the report alone
    shutil.copy(GPU_CSV, good)
    bad.write_text("".join(lines))
    _check(good, bad, caplog, f"1 row(s) of cuda_gpu_trace {SAID}")


def test_nvprof(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plain = tmp_path / "output.nvvp"
    plain.write_bytes(lzma.decompress(NVVP.read_bytes()))
    bad = _edited(plain, tmp_path / "neg.nvvp", "UPDATE CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL SET \"end\" = start - 1 "
                  "WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)")
    _check(plain, bad, caplog, f"1 row(s) of CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL {SAID}")


def test_rpd(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = _edited(MATMUL, tmp_path / "neg.rpd", "UPDATE rocpd_op SET \"end\" = start - 5000 WHERE id = (SELECT "
                  "min(o.id) FROM rocpd_op o JOIN rocpd_string s ON s.id = o.opType_id WHERE s.string = "
                  "'KernelExecution')")
    _check(MATMUL, bad, caplog, SAID)


def test_rocpd(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = build_rocpd(tmp_path / "run.db", 3)
    with sqlite3.connect(good) as con:  # the table under the view of that name
        (table,) = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE "
                               "'rocpd_kernel_dispatch%'").fetchone()
    con.close()
    bad = _edited(good, tmp_path / "neg.db", f"UPDATE {table} SET \"end\" = start - 5000 WHERE id = "
                  f"(SELECT min(id) FROM {table})")
    _check(good, bad, caplog, SAID)


def test_rocprofv3_json(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    doc = json.loads(gzip.decompress(ROCPROF_JSON.read_bytes()))
    k = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]
    k["end_timestamp"] = k["start_timestamp"] - 5000
    bad = tmp_path / "neg_results.json"
    bad.write_text(json.dumps(doc))
    _check(ROCPROF_JSON, bad, caplog, SAID)


@pytest.mark.parametrize("compiled", [True, False], ids=["tokenizer", "python"])
def test_kineto_json(tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
                     compiled: bool) -> None:
    if compiled and tokenized.IMPLEMENTATION != "c":
        pytest.skip("the _tokens extension is not built")
    if not compiled:
        monkeypatch.setattr(tokenized, "_tokens", None)
    took = []
    add = tokenized.add
    monkeypatch.setattr(tokenized, "add", lambda col, events: took.append(1) or add(col, events))
    events = [{"ph": "X", "name": f"k{i}", "cat": "kernel", "ts": 10 * i, "dur": 5, "pid": 0, "tid": 7}
              for i in range(2000)]  # enough for the tokenizer to take the slices
    events[3]["dur"] = -5
    events.append({"ph": "X", "name": "step", "cat": "user_annotation", "ts": 0, "dur": 20_000, "pid": 1,
                   "tid": 1})
    good, bad = tmp_path / "good.json", tmp_path / "neg.json"
    good.write_text(json.dumps({"traceEvents": [{**e, "dur": abs(e["dur"])} for e in events]}))
    bad.write_text(json.dumps({"traceEvents": events}))
    whole = polyprof.load(good)
    whole.dur_ns[whole.names() == "k3"] = 0  # what the damaged file's k3 becomes
    with caplog.at_level(logging.WARNING):
        damaged = polyprof.load(bad)
    assert bool(took) == compiled  # the path this case is about
    assert damaged.n_events == whole.n_events
    assert np.array_equal(damaged.dur_ns, whole.dur_ns)
    said = "kineto: 1 events end before they start (a negative dur: a damaged file): kept at their start, 0 ns long"
    assert damaged.metadata["warnings"] == [said]
    assert any(r.getMessage().endswith(said) and r.levelno == logging.WARNING for r in caplog.records)
    # read in chunks (a store's conversion: the events pass the collector twice), counted once
    rest = read_chunks(bad, lambda chunk: None, chunk_events=997)
    assert rest.trace.metadata["warnings"] == [said]
