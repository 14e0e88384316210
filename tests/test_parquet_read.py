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
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats.detect import detect
from polyprof.trace.native_write import header_json
from polyprof.report.tables import build

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb"))


def _as_saved(records: list) -> list:
    """Records as polyprof's files keep them: properties through JSON (bytes as text)."""
    return [orjson.loads(header_json(dataclasses.asdict(r))) for r in records]


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


# ------------------------------------------------------------------ other readers of the file
NCCL = ROOT / "tests/data/traces/kineto/a100_nccl_rank0.json.gz"  # 26,935 events, 4,317 flows, 9 categories
CUPY = ROOT / "tests/data/h200/cupy_cupti_h200.polyprof"  # flows and 107 counters
READ_BY_OTHERS = [NCCL, CUPY]


@pytest.fixture(scope="module", params=READ_BY_OTHERS, ids=[p.name for p in READ_BY_OTHERS])
def exported(request, tmp_path_factory):
    trace = polyprof.load(request.param)
    return trace, polyprof.export(trace, tmp_path_factory.mktemp("pq") / "t.parquet")


def _totals(trace, labels: np.ndarray) -> dict[str, tuple[int, int]]:
    """(events, total dur_ns) per label, as polyprof counts them."""
    out: dict[str, tuple[int, int]] = {}
    for label, dur in zip(labels.tolist(), trace.events["dur_ns"].tolist()):
        n, d = out.get(label, (0, 0))
        out[label] = (n + 1, d + dur)
    return out


def test_the_file_metadata_is_text(exported):
    """Parquet's key/value metadata holds UTF-8 strings (polars refuses a file otherwise)."""
    _, path = exported
    for key, value in pq.ParquetFile(path).metadata.metadata.items():
        key.decode("utf-8"), value.decode("utf-8")


def test_polars_reads_the_export(exported):
    pl = pytest.importorskip("polars")
    trace, path = exported
    want = _totals(trace, trace.names())
    df = pl.read_parquet(path)
    assert df.height == trace.n_events
    got = df.group_by("name").agg(pl.len(), pl.col("dur_ns").sum())
    assert {r[0]: (r[1], r[2]) for r in got.iter_rows()} == want
    lazy = (pl.scan_parquet(path).filter(pl.col("dur_ns") >= 0).group_by("name")
            .agg(pl.len(), pl.col("dur_ns").sum()).collect())
    assert {r[0]: (r[1], r[2]) for r in lazy.iter_rows()} == want
    assert pl.scan_parquet(path).select(pl.len()).collect().item() == trace.n_events


def test_duckdb_queries_the_export(exported):
    trace, path = exported
    rows = duckdb.sql(f"SELECT category, count(*), sum(dur_ns)::BIGINT FROM read_parquet('{path}') "
                      "GROUP BY category").fetchall()
    assert {c: (n, d) for c, n, d in rows} == _totals(trace, trace.categories())


def test_each_text_column_has_its_own_categories(exported):
    """pandas' categories of name, category, track and plane are the values that column
    holds, so a groupby gives one group per category the trace has (not one per string)."""
    trace, path = exported
    want = {"name": set(trace.names().tolist()), "category": set(trace.categories().tolist()),
            "plane": {trace.planes[trace.tracks[t].plane].name for t in set(trace.events["track"].tolist())},
            "track": {trace.tracks[t].name for t in set(trace.events["track"].tolist())}}
    for df in (trace.to_pandas(), pd.read_parquet(path)):
        for column, values in want.items():
            cats = df[column].cat.categories.tolist()
            assert len(cats) == len(set(cats)) and set(cats) == values, column
            assert df[column].astype(str).tolist() == df[column].tolist()
        assert len(df.groupby("category", observed=False)) == len(want["category"])
    assert df["name"].astype(str).tolist() == trace.names().tolist()
    assert df["category"].astype(str).tolist() == trace.categories().tolist()
    flows = trace.tables()["flows"].column("category")
    strings = np.array(trace.strings, object)
    assert set(flows.combine_chunks().dictionary.to_pylist()) == set(strings[trace.flows["category"]].tolist())


def _raw_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_an_export_with_raw_arrow_ipc_metadata_still_reads_back_equal(tmp_path):
    """Files polyprof wrote before the metadata was text: flows and counters as raw Arrow
    IPC bytes under polyprof.flows and polyprof.counters, name and category with the
    whole string table as their dictionary. Made here with pyarrow, as that writer did."""
    trace = polyprof.load(CUPY)
    assert len(trace.flows["src"]) and len(trace.counters["ts_ns"])
    table = trace.to_arrow()
    assert len(set(trace.strings)) == len(trace.strings)
    for column, ids in (("name", trace.events["name"]), ("category", trace.events["category"])):
        shared = pa.DictionaryArray.from_arrays(pa.array(ids, pa.int32()), pa.array(trace.strings, pa.string()))
        table = table.set_column(table.schema.get_field_index(column), column, shared)
    strings = np.array(trace.strings, object)
    fl, c = trace.flows, trace.counters
    layout = {"version": 1, "sources": [dataclasses.asdict(s) for s in trace.sources],
              "planes": [dataclasses.asdict(p) for p in trace.planes],
              "tracks": [dataclasses.asdict(t) for t in trace.tracks],
              "stats": [{"key": k, "column": col, "kind": trace.stats[k].kind}
                        for k, col in zip(trace.stats, table.column_names[8:])]}
    meta = {b"polyprof": orjson.dumps(trace.metadata, default=str, option=orjson.OPT_NON_STR_KEYS),
            b"polyprof.layout": header_json(layout),
            b"polyprof.flows": _raw_ipc(pa.table({"src": fl["src"], "dst": fl["dst"], "id": fl["id"],
                                                  "category": pa.array(strings[fl["category"]], pa.string())})),
            b"polyprof.counters": _raw_ipc(pa.table({"plane": c["plane"],
                                                     "name": pa.array(strings[c["name"]], pa.string()),
                                                     "ts_ns": c["ts_ns"], "value": c["value"]}))}
    old = tmp_path / "old.parquet"
    pq.write_table(table.replace_schema_metadata(meta), old, compression="zstd")
    with pytest.raises(UnicodeDecodeError):
        meta[b"polyprof.flows"].decode("utf-8")  # the raw bytes this test is about
    assert_same_trace(trace, polyprof.load(old))


def test_a_pyarrow_that_cannot_add_footer_metadata_writes_the_same_trace(tmp_path, monkeypatch):
    """Without ParquetWriter.add_key_value_metadata (older pyarrow) flows and counters go
    in the schema's metadata: the file still reads back equal, and in polars."""
    pl = pytest.importorskip("polars")
    trace = polyprof.load(CUPY)
    monkeypatch.delattr(pq.ParquetWriter, "add_key_value_metadata")
    path = polyprof.export(trace, tmp_path / "t.parquet")
    assert b"polyprof.flows.base64" in pq.read_schema(path).metadata
    assert_same_trace(trace, polyprof.load(path))
    assert pl.read_parquet(path).height == trace.n_events


def test_damaged_base64_metadata_gives_one_line(tmp_path):
    trace = polyprof.load(CUPY)
    table = pq.read_table(polyprof.export(trace, tmp_path / "t.parquet"))
    bad = tmp_path / "bad_flows.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"polyprof.flows.base64": b"not base64!"}),
                   bad)
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(bad)
    assert "polyprof.flows.base64" in _one_line(e, bad)


POOL_PEAK = r"""
import os, sys
import pyarrow as pa
pool = pa.proxy_memory_pool(pa.default_memory_pool())
pa.set_memory_pool(pool)  # every Arrow allocation of the read counted on its own
import polyprof
trace = polyprof.load(sys.argv[1])
print(trace.n_events, pool.max_memory(), flush=True)
os._exit(0)  # the Trace's columns may hold the pool's buffers: no teardown
"""


def test_stat_columns_read_one_at_a_time(tmp_path):
    """Memory bounded by a column (issue 35): each stat column is read from the file
    when it becomes a stat, not the whole table first. The V100 trace's 45,422 events
    and 29 stat columns are 11.9 MB as a table; read whole, Arrow's peak was 13.5 MB,
    column by column 4 MB."""
    src = ROOT / "tests/data/traces/kineto/v100_ns_resolution_rank0.json.gz"
    out = tmp_path / "v100.parquet"
    polyprof.export(polyprof.load(src), out)
    whole = pq.ParquetFile(out).read().nbytes
    r = subprocess.run([sys.executable, "-c", POOL_PEAK, str(out)], capture_output=True, text=True, timeout=120)
    n, peak = map(int, r.stdout.split())
    assert n == 45_422 and len(pq.ParquetFile(out).schema_arrow.names) == 37
    assert peak < whole / 2, (peak, whole)
