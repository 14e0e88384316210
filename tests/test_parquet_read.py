"""polyprof's single-file Parquet export (`polyprof export -f parquet`) read back: the
Trace equals the one written (sources, planes, tracks, events, every stat, flows,
counters, metadata) for every real trace and a live session; bad files give one line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from polyprof.trace.native_write import _header_json
from polyprof.report.tables import build

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb"))


def _as_saved(records: list) -> list:
    """Records as polyprof's files keep them: properties through JSON (bytes as text)."""
    return [orjson.loads(_header_json(dataclasses.asdict(r))) for r in records]


def assert_same_trace(a, b) -> None:
    assert _as_saved(b.sources) == _as_saved(a.sources)
    assert _as_saved(b.planes) == _as_saved(a.planes)
    assert _as_saved(b.tracks) == _as_saved(a.tracks)
    for k in ("track", "start_ns", "dur_ns"):
        assert np.array_equal(b.events[k], a.events[k]), k
    assert b.names().tolist() == a.names().tolist()
    assert b.categories().tolist() == a.categories().tolist()
    assert list(b.stats) == list(a.stats)
    for key, col in a.stats.items():
        got = b.stats[key]
        assert got.rows.tolist() == col.rows.tolist(), key
        assert got.values.dtype.kind == col.values.dtype.kind, key
        if col.values.dtype.kind == "f":
            assert np.array_equal(got.values, col.values, equal_nan=True), key
        else:
            assert got.values.tolist() == col.values.tolist(), key
    for k in ("src", "dst", "id"):
        assert np.array_equal(b.flows[k], a.flows[k]), k
    sa, sb = np.array(a.strings + [""], object), np.array(b.strings + [""], object)
    assert sb[b.flows["category"]].tolist() == sa[a.flows["category"]].tolist()
    for k in ("plane", "ts_ns", "value"):
        assert np.array_equal(b.counters[k], a.counters[k]), k
    assert sb[b.counters["name"]].tolist() == sa[a.counters["name"]].tolist()
    assert b.metadata == a.metadata


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_every_real_trace_reads_back_equal(path, tmp_path):
    trace = polyprof.load(path)
    out = polyprof.export(trace, tmp_path / "t.parquet")
    assert detect(out) == "parquet"
    back = polyprof.load(out)
    assert_same_trace(trace, back)
    # and the summary a user sees of it
    a, b = build(trace), build(back)
    assert list(a.tables) == list(b.tables)
    for name, x in a.tables.items():
        y = b.tables[name]
        assert list(x.columns) == list(y.columns) and len(x) == len(y), name
        for c in x.columns:
            assert np.array_equal(np.asarray(x[c]), np.asarray(y[c]),
                                  equal_nan=np.asarray(x[c]).dtype.kind == "f"), (name, c)
    assert a.overview == b.overview


def test_a_live_session_with_counters_and_marks_reads_back_equal(tmp_path):
    script = tmp_path / "work.py"
    script.write_text("import polyprof\n"
                      "for i in range(20):\n"
                      "    with polyprof.section('step', i=i, tag='x' * (i % 3)):\n"
                      "        polyprof.counter('queue depth', i * 1.5)\n"
                      "        polyprof.mark('tick')\n")
    out = tmp_path / "run.polyprof"
    subprocess.run([sys.executable, "-m", "polyprof", "run", "-o", str(out), "--no-summary", str(script)],
                   check=True, capture_output=True, timeout=120)
    trace = polyprof.load(out)
    assert len(trace.counters["ts_ns"]) >= 20
    pq_out = tmp_path / "run.parquet"
    subprocess.run([sys.executable, "-m", "polyprof", "export", "-f", "parquet", str(out), "-o", str(pq_out)],
                   check=True, capture_output=True, timeout=120)
    assert_same_trace(trace, polyprof.load(pq_out))
    # the file stays a plain event table for SQL
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{pq_out}') WHERE name = 'step'").fetchall()[0][0] == 20


def test_an_export_without_the_layout_reads_from_its_columns(tmp_path):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/a100_alexnet_small.json.gz")
    old = tmp_path / "old.parquet"
    pq.write_table(trace.to_arrow(), old)  # what polyprof wrote before the layout was recorded
    back = polyprof.load(old)
    assert [p.name for p in back.planes] == [p.name for p in trace.planes]
    assert [(t.name, t.plane) for t in back.tracks] == [(t.name, t.plane) for t in trace.tracks]
    assert back.names().tolist() == trace.names().tolist()
    assert back.stats["correlation_id"].values.tolist() == trace.stats["correlation_id"].values.tolist()


def _one_line(e: pytest.ExceptionInfo, path: Path) -> str:
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_foreign_and_damaged_parquet_give_one_line(tmp_path):
    foreign = tmp_path / "sales.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS id, 'x' AS item) TO '{foreign}' (FORMAT parquet)")
    assert detect(foreign) == "parquet"
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(foreign)
    assert "not a polyprof export" in _one_line(e, foreign) and "track_id" in str(e.value)

    trace = polyprof.load(ROOT / "tests/data/traces/kineto/cpu_only_rank34.json.gz")
    data = polyprof.export(trace, tmp_path / "t.parquet").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2] + b"PAR1")  # both magics, the footer gone
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(cut)
    _one_line(e, cut)

    bad_layout = tmp_path / "bad_layout.parquet"
    table = pq.read_table(tmp_path / "t.parquet")
    meta = dict(table.schema.metadata)
    meta[b"polyprof.layout"] = b'{"planes": [{"id": 0, "name": 3}], "tracks": "x"}'
    pq.write_table(table.replace_schema_metadata(meta), bad_layout)
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(bad_layout)
    assert "polyprof.layout" in _one_line(e, bad_layout)

    wrong = tmp_path / "wrong_types.parquet"
    pq.write_table(pa.table({"track_id": [0], "track": ["t"], "name": [1.5], "category": ["c"],
                             "start_ns": [0], "dur_ns": [1]}), wrong)
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(wrong)
    assert "'name'" in _one_line(e, wrong)
