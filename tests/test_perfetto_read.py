"""The Perfetto protobuf reader (formats/perfetto_read/): polyprof's own export of every
real trace reads back with the same events and the same summary; the features of the
format a producer uses (hand-built with the `perfetto` package's own protos, test-only);
sniffing by content; damaged and cut files give one line naming the file."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError
from polyprof.formats import perfetto
from polyprof.formats.detect import detect
from polyprof.formats.perfetto_read import load, trace_pb2
from polyprof.formats.perfetto_read.shape import varint
from polyprof.report.tables import build
from polyprof.trace.core import Trace
from polyprof.trace.stats import StatColumn, StatTable

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb"))


def _events(trace) -> Counter:
    paths = [(trace.planes[t.plane].name, t.name) for t in trace.tracks]
    return Counter(zip(trace.names().tolist(), trace.categories().tolist(), trace.events["start_ns"].tolist(),
                       trace.events["dur_ns"].tolist(), [paths[t] for t in trace.events["track"].tolist()]))


def _reordered(trace: Trace) -> Trace:
    """``trace`` with its events in the order the writer emits them (start, longest
    first), so row numbers in tables (launch_stats' rows) compare."""
    ev = trace.events
    order = np.lexsort((np.arange(trace.n_events), -ev["dur_ns"], ev["start_ns"]))
    new = np.empty(trace.n_events, np.int64)
    new[order] = np.arange(trace.n_events)
    stats = {}
    for key, col in trace.stats.items():
        rows = new[col.rows]
        o = np.argsort(rows, kind="stable")
        stats[key] = StatColumn(rows[o], col.values[o])
    fl = trace.flows
    flows = {"src": new[fl["src"]], "dst": new[fl["dst"]], "id": fl["id"], "category": fl["category"]}
    return Trace(list(trace.strings), trace.planes, trace.tracks, {k: v[order] for k, v in ev.items()},
                 StatTable(stats), flows, trace.counters, dict(trace.metadata), trace.sources).validate()


def _same_tables(a, b) -> None:
    """Two reports' tables, findings and overview equal (through the Table API)."""
    assert list(a.tables) == list(b.tables)
    for name, x in a.tables.items():
        y = b.tables[name]
        assert list(x.columns) == list(y.columns), name
        assert len(x) == len(y), name
        for c in x.columns:
            u, v = np.asarray(x[c]), np.asarray(y[c])
            if u.dtype.kind == "f" and v.dtype.kind == "f":
                assert np.array_equal(u, v, equal_nan=True), (name, c)
            else:
                assert u.tolist() == v.tolist(), (name, c)
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]
    assert a.overview == b.overview


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_own_export_of_every_real_trace_reads_back_the_same(path, tmp_path):
    trace = polyprof.load(path)
    out = perfetto.write(trace, tmp_path / "t.pftrace")
    assert detect(out) == "perfetto"
    back = polyprof.load(out)
    assert _events(back) == _events(trace)  # name, category, start, duration, (plane, track)
    assert [(p.name, p.kind) for p in back.planes] == [(p.name, p.kind) for p in trace.planes]
    assert len(back.flows["src"]) == len(trace.flows["src"])
    for key in trace.stats:  # every stat of every event, under its own name
        col, got = trace.stats[key], back.stats[key]
        assert len(got) == len(col), key
    _same_tables(build(_reordered(trace), columnar=True), build(back, columnar=True))


def test_gzipped_export_reads_the_same(tmp_path):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/a100_alexnet_small.json.gz")
    raw = perfetto.write(trace, tmp_path / "t.pftrace").read_bytes()
    gz = tmp_path / "t.pftrace.gz"
    gz.write_bytes(gzip.compress(raw))
    assert detect(gz) == "perfetto"
    assert _events(polyprof.load(gz)) == _events(trace)


def test_stats_keep_their_values_and_types(tmp_path):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/a100_nccl_rank0.json.gz")
    back = polyprof.load(perfetto.write(trace, tmp_path / "t.pftrace"))
    order = np.lexsort((np.arange(trace.n_events), -trace.dur_ns, trace.start_ns))
    new = np.empty(trace.n_events, np.int64)
    new[order] = np.arange(trace.n_events)
    for key in ("correlation_id", "external_id", "grid", "Collective name", "memory bandwidth (GB/s)"):
        col, got = trace.stats[key], back.stats[key]
        assert got.values.dtype.kind == col.values.dtype.kind, key
        o = np.argsort(new[col.rows])
        assert got.rows.tolist() == new[col.rows][o].tolist()
        assert got.values.tolist() == col.values[o].tolist(), key


# ----------------------------------------------------------------------------- bad files
def _one_line(e: pytest.ExceptionInfo, path: Path) -> str:
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_a_file_cut_mid_packet_says_so(tmp_path):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/a100_alexnet_small.json.gz")
    data = perfetto.write(trace, tmp_path / "t.pftrace").read_bytes()
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[: len(data) * 2 // 3])
    assert detect(cut) == "perfetto"
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(cut)
    assert "truncated Perfetto trace" in _one_line(e, cut) and "cut mid-packet" in str(e.value)
    gz = tmp_path / "cut.pftrace.gz"  # a whole gzip stream of a cut trace
    gz.write_bytes(gzip.compress(data[:-3]))
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(gz)
    assert "truncated Perfetto trace" in _one_line(e, gz)


def test_damaged_packets_and_foreign_bytes_give_one_line(tmp_path):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/a100_alexnet_small.json.gz")
    data = bytearray(perfetto.write(trace, tmp_path / "t.pftrace").read_bytes())
    junk = tmp_path / "junk.pftrace"  # whole packets, then bytes where no packet starts
    end = 0
    while end < 2000:  # whole packets
        length, start = varint(data, end + 1)
        end = start + length
    junk.write_bytes(bytes(data[:end]) + b"PK\x03\x04 not a packet at all" * 10)
    with pytest.raises(TraceFormatError) as e:
        load(junk)
    assert "not a Perfetto trace at byte" in _one_line(e, junk)
    bad = tmp_path / "bad.pftrace"  # a packet whose inside is not protobuf
    body = b"\x50\x01" + b"\xff" * 20
    bad.write_bytes(b"\x0a" + bytes([len(body)]) + body)
    with pytest.raises(TraceFormatError) as e:
        load(bad)
    assert "do not decode" in _one_line(e, bad)
    foreign = tmp_path / "foreign.pftrace"  # named .pftrace, but a zip: not sniffed as Perfetto
    foreign.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    with pytest.raises(TraceFormatError) as e:
        polyprof.load(foreign)
    assert "unrecognised format" in _one_line(e, foreign)
    with pytest.raises(TraceFormatError) as e:  # the reader itself, asked directly
        load(foreign)
    assert "not a Perfetto trace at byte 0" in _one_line(e, foreign)


def test_sniffing_is_by_content_not_by_name(tmp_path):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/cpu_only_rank34.json.gz")
    data = perfetto.write(trace, tmp_path / "t.pftrace").read_bytes()
    plain = tmp_path / "trace.bin"
    plain.write_bytes(data)
    assert detect(plain) == "perfetto"
    assert detect(ROOT / "tests/data/traces/xspace/tpu_inference_2.xplane.pb") == "xspace"
    for p in TRACES:
        assert detect(p) != "perfetto", p


# ----------------------------------------------------------------------------- the protos
P = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def test_every_field_of_the_reader_proto_is_perfettos():
    """trace.proto's field numbers and wire types are those of Perfetto's own protos."""
    from google.protobuf.descriptor import FieldDescriptor as F

    wire = {F.TYPE_INT32: 0, F.TYPE_INT64: 0, F.TYPE_UINT32: 0, F.TYPE_UINT64: 0, F.TYPE_BOOL: 0, F.TYPE_ENUM: 0,
            F.TYPE_DOUBLE: 1, F.TYPE_FIXED64: 1, F.TYPE_STRING: 2, F.TYPE_BYTES: 2, F.TYPE_MESSAGE: 2}
    seen = 0
    todo = [(trace_pb2.Trace.DESCRIPTOR, P.Trace.DESCRIPTOR)]
    done = set()
    while todo:
        mine, theirs = todo.pop()
        if mine.full_name in done:
            continue
        done.add(mine.full_name)
        for f in mine.fields:
            t = theirs.fields_by_name.get(f.name)
            assert t is not None, f"{mine.name}.{f.name} is not in Perfetto's {theirs.full_name}"
            assert (f.number, wire[f.type], f.is_repeated) == (t.number, wire[t.type], t.is_repeated), \
                f"{mine.name}.{f.name}"
            seen += 1
            if f.message_type is not None:
                todo.append((f.message_type, t.message_type))
    assert seen > 100
