"""One rank of any size (issue 34): a Kineto rank converted a chunk of events at a time
equals the whole-file reader's Trace, flows across chunks included; files the chunked
reader cannot stream are read whole, said in the log; a store converted so summarises
as the file does (a small replicate of a real trace; bench/big_rank.py the 2 GB one)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import orjson
import pytest

import polyprof
from polyprof.formats.kineto.chunks import Unsupported, read_chunks
from polyprof.report.tables import build, to_json
from polyprof.store import Store

KINETO = sorted((Path(__file__).resolve().parent / "data/traces/kineto").glob("*.json.gz"))
NCCL = next(p for p in KINETO if p.name.startswith("a100_nccl"))


def _stat(trace, key) -> list:
    col = trace.stats[key]
    out = np.full(trace.n_events, None, object)
    out[col.rows] = col.values.tolist()
    return out.tolist()


@pytest.mark.parametrize("path", KINETO, ids=[p.name for p in KINETO])
def test_chunks_are_the_whole_file_trace(path):
    """Small chunks (many per file, so flows bind and chain across them): the events
    handed on, put back in input order, are the whole-file reader's, stats and flows too."""
    whole = polyprof.load(path)
    chunks = []
    rest = read_chunks(path, chunks.append, chunk_events=997)
    assert len(chunks) >= min(3, whole.n_events // 997)
    assert rest.events == whole.n_events == sum(len(c.input_row) for c in chunks)
    rows = np.concatenate([c.input_row for c in chunks])
    back = np.empty(len(rows), np.int64)  # input row -> position among the events handed on
    back[rows] = np.arange(len(rows))
    for k in ("track", "name", "category", "start_ns", "dur_ns"):
        got = np.concatenate([c.events[k] for c in chunks])
        assert np.array_equal(got[back], whole.events[k]), k
    for c in chunks:
        assert np.all(np.diff(c.events["start_ns"]) >= 0)  # each chunk in start order
    assert [(t.plane, t.name, t.tid) for t in rest.trace.tracks] == [(t.plane, t.name, t.tid) for t in whole.tracks]
    assert [(p.name, p.vendor) for p in rest.trace.planes] == [(p.name, p.vendor) for p in whole.planes]
    assert rest.trace.strings == whole.strings
    for k in ("src", "dst"):
        assert np.array_equal(rows[rest.flows[k]], whole.flows[k]), k
    for k in ("id", "category"):
        assert np.array_equal(rest.flows[k], whole.flows[k]), k
    assert rest.span_ns == whole.span_ns
    keys = set().union(*(c.stats for c in chunks))
    assert keys == set(whole.stats)
    for key in ("correlation_id", "external_id", "grid", "Sequence number"):
        if key not in keys:
            continue
        dense = np.full(whole.n_events, None, object)
        for c in chunks:
            if key in c.stats:
                dense[c.input_row[c.stats[key].rows]] = c.stats[key].values.tolist()
        assert dense.tolist() == _stat(whole, key), key
    assert orjson.loads(orjson.dumps(rest.trace.metadata, default=str)) == \
        orjson.loads(orjson.dumps(whole.metadata, default=str, option=orjson.OPT_NON_STR_KEYS))


def test_begin_end_pairs_are_read_whole_and_said(tmp_path, caplog):
    doc = {"traceEvents": [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "X", "name": "inner", "pid": 1, "tid": 1, "ts": 11, "dur": 2},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 20}]}
    path = tmp_path / "be.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(Unsupported, match="B/E events"):
        read_chunks(path, lambda c: None)
    with caplog.at_level(logging.WARNING, logger="polyprof"):
        store = polyprof.load_ranks([path]).convert(tmp_path / "s")
    assert "read whole, not in chunks (B/E events" in caplog.text
    got = Store(store).load(0)
    assert sorted(got.events["dur_ns"].tolist()) == [2000, 10000]


def _replicate(src: Path, out: Path, copies: int) -> Path:
    """``copies`` copies of ``src``'s events, each shifted by the trace's span, with its
    ids and step numbers made distinct (bench/big_rank.py makes the 2 GB rank so)."""
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M"]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    body = []
    for k in range(copies):
        for e in timed:
            e = dict(e, ts=round(e["ts"] + k * span, 3))
            if isinstance(e.get("id"), int):
                e["id"] += k << 40
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'][13:]) + 10 * k}"
            if isinstance(e.get("args"), dict):
                e["args"] = {a: (v + (k << 40) if a in ("correlation", "External id") and isinstance(v, int) else v)
                             for a, v in e["args"].items()}
            body.append(e)
    doc["traceEvents"] = body + [e for e in events if e.get("ph") == "M"]
    out.write_bytes(orjson.dumps(doc))
    return out


def test_summary_of_a_streamed_store_equals_the_file_summary(tmp_path):
    """Item 1's equality on a smaller replicate: two copies of the A100 NCCL trace
    streamed in chunks of 15000 events; every table and finding of the store's summary (its
    rank) equals the whole-file summary's."""
    path = _replicate(NCCL, tmp_path / "rank0.json", 2)
    store = polyprof.load_ranks([path]).convert(tmp_path / "s", chunk_rows=15000)
    whole = orjson.loads(to_json(build(polyprof.load(path))))
    got = orjson.loads(to_json(build(Store(store).load(0))))
    assert got["tables"].keys() == whole["tables"].keys()
    for name in whole["tables"]:
        assert got["tables"][name] == whole["tables"][name], name
    assert got["findings"] == whole["findings"]


@pytest.mark.parametrize("target", ["file", "store"])
def test_summary_that_would_not_fit_says_so_in_one_line(tmp_path, monkeypatch, capsys, target):
    """Rather than be killed part way (silently, under a memory cgroup), summary compares
    a rank's estimated need with the memory this process may use (here made 64 MiB)."""
    from polyprof.cli import main
    from polyprof.ranks import fits

    path = NCCL if target == "file" else polyprof.load_ranks([NCCL]).convert(tmp_path / "s")
    monkeypatch.setattr(fits, "available_bytes", lambda: 64 << 20)
    assert main(["summary", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "64 MiB is available" in err
    assert ("polyprof convert" in err) == (target == "file") and "polyprof sql" in err
    monkeypatch.setenv("POLYPROF_MEMORY_CHECK", "0")
    assert main(["summary", str(path)]) == 0


def test_memory_available_reads_cgroup_v1_and_v2(tmp_path, monkeypatch):
    from polyprof.ranks import fits

    (tmp_path / "limit").write_text("1073741824\n")
    (tmp_path / "usage").write_text(str(100 << 20))
    (tmp_path / "max").write_text("max\n")
    monkeypatch.setattr(fits, "_meminfo_available", lambda: 8 << 30)
    monkeypatch.setattr(fits, "_cgroup_files", lambda: [(str(tmp_path / "limit"), str(tmp_path / "usage"), "")])
    assert fits.available_bytes() == (1 << 30) - (100 << 20)
    monkeypatch.setattr(fits, "_cgroup_files", lambda: [(str(tmp_path / "max"), str(tmp_path / "usage"), "")])
    assert fits.available_bytes() == 8 << 30
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(b"x" * 100000))
    assert fits.json_text_bytes(gz) == 100000


def _assemble(rest, chunks) -> "polyprof.Trace":
    """The Trace the chunks make, events back in input order (as a store's rank is read)."""
    from polyprof.trace.core import Trace
    from polyprof.trace.stats import StatTable, merge_columns

    rows = np.concatenate([c.input_row for c in chunks]) if chunks else np.zeros(0, np.int64)
    back = np.empty(len(rows), np.int64)
    back[rows] = np.arange(len(rows))
    events = {k: (np.concatenate([c.events[k] for c in chunks]) if chunks else np.zeros(0, t))[back]
              for k, t in (("track", np.int32), ("name", np.int32), ("category", np.int32),
                           ("start_ns", np.int64), ("dur_ns", np.int64))}
    parts: dict[str, list] = {}
    for c in chunks:
        for key, col in c.stats.items():
            parts.setdefault(key, []).append((c.input_row[col.rows], col.values))
    stats = {key: merge_columns(ps) for key, ps in parts.items()}
    flows = {"src": rows[rest.flows["src"]], "dst": rows[rest.flows["dst"]], "id": rest.flows["id"],
             "category": rest.flows["category"]}
    t = rest.trace
    return Trace(t.strings, t.planes, t.tracks, events, StatTable(stats), flows, t.counters, t.metadata,
                 sources=t.sources)


def _golden_cases() -> list:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
    from test_kineto_golden import CASES

    return [c for c in CASES if c.query != "error"]


@pytest.mark.parametrize("case", _golden_cases(), ids=lambda c: c.name)
def test_golden_cases_read_in_chunks_of_one_slice(case, tmp_path, monkeypatch):
    """Every golden Kineto case (string pids, pseudo processes, flows bound either way,
    ids of every kind, args of every type) cut into slices of one event (the Python
    tokenizer, made to cut at the first event boundary), each its own chunk: every
    query of the golden runner gives the whole-file reader's table; or the file is one
    the chunked reader refuses (B/E, async, flows v2)."""
    from polyprof.formats.kineto import slicing, tokenized
    from runner import QUERIES

    path = tmp_path / (case.name + case.suffix)
    path.write_text(case.trace)
    whole = polyprof.load(path)

    def first_boundary(body: bytearray, end: int) -> tuple[int, int]:
        p = body.find(b"}")
        while 0 <= p < end:
            q = slicing._skip_ws(body, p + 1)
            if q < len(body) and body[q] == 0x2C:
                q = slicing._skip_ws(body, q + 1)
                if q < len(body) and body[q] == 0x7B:
                    return p + 1, q
            p = body.find(b"}", p + 1)
        return -1, -1

    monkeypatch.setattr(slicing, "_boundary_before", first_boundary)
    monkeypatch.setattr(slicing, "CHUNK_BYTES", 1)
    monkeypatch.setattr(tokenized, "tokenizer", lambda: None)
    chunks: list = []
    try:
        rest = read_chunks(path, chunks.append, chunk_events=1)
    except Unsupported:
        return
    assert len(chunks) >= min(whole.n_events, 2) or whole.n_events < 2
    got = _assemble(rest, chunks)
    for name, query in QUERIES.items():
        assert query(got) == query(whole), name


def test_a_rank_of_one_chunk_is_written_without_runs(tmp_path, monkeypatch):
    """A rank that fits in one chunk (the V100 trace, 45k events) goes straight into
    events.parquet, no run file written and read back (its peak memory, issue 27 item 5);
    in two chunks the first is held, then both go through runs: the same summary."""
    from polyprof.store.rankstream import RankStream

    v100 = next(p for p in KINETO if p.name.startswith("v100"))
    runs: list[int] = []
    write_run = RankStream._write_run
    monkeypatch.setattr(RankStream, "_write_run", lambda self, chunk: (runs.append(len(chunk.events["start_ns"])),
                                                                       write_run(self, chunk))[1])
    one = polyprof.load_ranks([v100]).convert(tmp_path / "one")
    assert runs == []
    two = polyprof.load_ranks([v100]).convert(tmp_path / "two", chunk_rows=30000)
    assert len(runs) == 2 and sum(runs) == 45422  # chunks end where slices of the file do
    assert [p.name for p in one.rglob("*.parquet")] and not list(one.rglob(".runs"))
    a, b = Store(one).load(0), Store(two).load(0)
    assert a.n_events == b.n_events == 45422
    assert to_json(build(a)) == to_json(build(b))


def test_convert_does_not_import_pandas(tmp_path):
    """``pyarrow.array`` imports pandas on its first call (about 45 MiB of RSS); a rank's
    files are built from buffers instead (issue 27 item 5: convert's peak), whole-file
    inputs (XSpace here) as well as streamed Kineto."""
    import subprocess
    import sys

    v100 = next(p for p in KINETO if p.name.startswith("v100"))
    xspace = next((Path(__file__).resolve().parent / "data/traces").rglob("*.xplane.pb"))
    code = ("import sys, polyprof; polyprof.load_ranks(sys.argv[1:3]).convert(sys.argv[3]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))")
    out = subprocess.run([sys.executable, "-c", code, str(v100), str(xspace), str(tmp_path / "s")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert len(Store(tmp_path / "s").ranks) == 2


#: files whose events' categories the reader sets (rpd2tracing's JSON writes none; torch's
#: legacy autograd profiler none on its ops): each chunk interns them
NO_CATEGORIES = [Path(__file__).parent / "data" / "rpd" / "matmul_result.json",
                 Path(__file__).parent / "data" / "peers" / "legacy_autograd" / "votenet_profiler_trace.json.gz"]


@pytest.mark.parametrize("path", NO_CATEGORIES, ids=[p.name for p in NO_CATEGORIES])
def test_chunks_of_files_without_categories_are_the_whole_file_trace(path):
    test_chunks_are_the_whole_file_trace(path)
