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
from trace_rows import in_writer_order
from perfetto_text import pftrace, write_packets
from polyprof.errors import TraceFormatError
from polyprof.writers import perfetto
from polyprof.formats.detect import detect
from polyprof.formats.perfetto_read import load, trace_pb2
from polyprof.formats.perfetto_read.shape import looks_like_packets, varint
from polyprof.report.tables import build

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb"))


def _events(trace) -> Counter:
    paths = [(trace.planes[t.plane].name, t.name) for t in trace.tracks]
    return Counter(zip(trace.names().tolist(), trace.categories().tolist(), trace.events["start_ns"].tolist(),
                       trace.events["dur_ns"].tolist(), [paths[t] for t in trace.events["track"].tolist()]))


#: columns computed from trace-level metadata that a Perfetto file has no place for: the
#: job's rank and process groups (Kineto's distributedInfo: a transfer's own end, a peer's
#: rank in its group). docs/formats.md says so. (The devices' properties, which occupancy,
#: MFU and rooflines come from, are carried: Chrome metadata, writers/perfetto.py.)
NOT_CARRIED = {("critical_path", "rank"), ("transfers", "src"), ("transfers", "dst"), ("transfers", "peer_from")}


def _same_tables(a, b) -> None:
    """Two reports' tables, findings and overview equal (through the Table API), but for
    the columns of :data:`NOT_CARRIED`."""
    assert list(a.tables) == list(b.tables)
    for name, x in a.tables.items():
        y = b.tables[name]
        assert list(x.columns) == list(y.columns), name
        assert len(x) == len(y), name
        for c in x.columns:
            if (name, c) in NOT_CARRIED:
                continue
            u, v = np.asarray(x[c]), np.asarray(y[c])
            if u.dtype.kind == "f" and v.dtype.kind == "f":
                assert np.array_equal(u, v, equal_nan=True), (name, c)
            else:
                assert u.tolist() == v.tolist(), (name, c)
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]
    assert a.overview == b.overview


def _flow_categories(trace) -> list[tuple[str, int]]:
    cats = np.asarray(trace.flows["category"])
    return sorted((trace.strings[c], int((cats == c).sum())) for c in np.unique(cats).tolist())


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_own_export_of_every_real_trace_reads_back_the_same(path, tmp_path):
    trace = polyprof.load(path)
    out = perfetto.write(trace, tmp_path / "t.pftrace")
    assert detect(out) == "perfetto"
    back = polyprof.load(out)
    assert _events(back) == _events(trace)  # name, category, start, duration, (plane, track)
    assert [(p.name, p.kind) for p in back.planes] == [(p.name, p.kind) for p in trace.planes]
    assert len(back.flows["src"]) == len(trace.flows["src"])
    # the flows' categories (Perfetto's flows have none: numbered in the ids, named in metadata)
    assert _flow_categories(back) == _flow_categories(trace)
    for key in trace.stats:  # every stat of every event, under its own name
        col, got = trace.stats[key], back.stats[key]
        assert len(got) == len(col), key
    _same_tables(build(in_writer_order(trace)), build(back))


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
            # the same type, or an enum read as int32
            assert f.type == t.type or (f.type, t.type) == (F.TYPE_INT32, F.TYPE_ENUM), f"{mine.name}.{f.name}"
            seen += 1
            if f.message_type is not None:
                todo.append((f.message_type, t.message_type))
    assert seen > 100


# ----------------------------------------------------------------------------- Perfetto's own test traces
DATA = ROOT / "tests/data/perfetto"




def _csv(name: str) -> list[dict[str, str | None]]:
    import csv

    with open(DATA / name, newline="") as f:
        return [{k: (None if v == "[NULL]" else v) for k, v in row.items()} for row in csv.DictReader(f)]


def _where(row: dict) -> tuple[str, str]:
    """Trace processor's (track, process, thread, thread_process) -> polyprof's (plane, track)."""
    if row["thread"] is not None:
        return row["thread_process"] or "", row["track"] or row["thread"]
    if row["process"] is not None:
        return row["process"], row["track"] or row["process"]
    return "Global tracks", row["track"]


def _slices(trace) -> list[tuple]:
    paths = [(trace.planes[t.plane].name, t.name) for t in trace.tracks]
    return sorted(zip(trace.events["start_ns"].tolist(), trace.names().tolist(), trace.events["dur_ns"].tolist(),
                      trace.categories().tolist(), [paths[t] for t in trace.events["track"].tolist()]))


@pytest.mark.parametrize("name", ["track_event_tracks", "track_event_counters"])
def test_perfettos_track_event_traces_give_the_trace_processors_slices(name, tmp_path):
    trace = polyprof.load(pftrace(name, tmp_path))
    want = sorted((int(r["ts"]), r["name"], int(r["dur"]), r["category"], _where(r))
                  for r in _csv(f"{name}.slices.csv"))
    assert _slices(trace) == want
    assert "warnings" not in trace.metadata


def test_perfettos_counter_traces_give_the_trace_processors_counters(tmp_path):
    trace = polyprof.load(pftrace("track_event_counters", tmp_path))
    c = trace.counters
    got = sorted((int(t), trace.planes[p].name, trace.strings[n], v)
                 for p, n, t, v in zip(c["plane"].tolist(), c["name"].tolist(), c["ts_ns"].tolist(),
                                       c["value"].tolist()))
    want = sorted((int(r["ts"]), r["thread_process"] or r["process"] or "Global tracks",
                   r["counter_name"] + (f" ({r['thread']})" if r["thread"] else ""), float(r["value"]))
                  for r in _csv("track_event_counters.counters.csv"))
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert np.allclose([g[3] for g in got], [w[3] for w in want], rtol=1e-6, atol=1e-6)

    trace = polyprof.load(pftrace("incremental_counter_sequences", tmp_path))
    c = trace.counters
    assert {trace.strings[n] for n in c["name"].tolist()} == {"MyIncrementalCounter"}
    want_rows = _csv("incremental_counter_sequences.counters.csv")
    assert list(zip(c["ts_ns"].tolist(), c["value"].tolist())) == [(int(r["ts"]), float(r["value"]))
                                                                    for r in want_rows]


def test_perfettos_flow_trace_gives_the_trace_processors_flows(tmp_path):
    trace = polyprof.load(pftrace("flow_events_track_event", tmp_path))
    names = trace.names()
    got = sorted(zip(names[trace.flows["src"]].tolist(), names[trace.flows["dst"]].tolist()))
    assert got == sorted((r["slice_out"], r["slice_in"]) for r in _csv("flow_events_track_event.flows.csv"))


def test_perfettos_traces_read_the_same_gzipped_and_sniff_by_content(tmp_path):
    for name in ("track_event_tracks", "flow_events_track_event"):
        raw = pftrace(name, tmp_path)
        gz = tmp_path / f"{name}.bin"  # no telling name: sniffed by content
        gz.write_bytes(gzip.compress(raw.read_bytes()))
        assert detect(raw) == detect(gz) == "perfetto"
        assert _slices(polyprof.load(gz)) == _slices(polyprof.load(raw))


def test_a_trace_whose_first_packet_is_empty_is_perfetto():
    """Perfetto's synthetic test traces (``synth_common.py``) start with an empty packet
    (bytes 0a 00): sniffed as Perfetto (it was "unrecognised format"), read as Perfetto
    reads it: each slice from its begin to its end on its track."""
    path = ROOT / "tests/data/peers/perfetto/android_jank_cuj.pftrace"
    assert path.read_bytes()[:2] == b"\x0a\x00"
    assert detect(path) == "perfetto"
    trace = polyprof.load(path)
    got = sorted(zip(trace.names().tolist(), trace.events["start_ns"].tolist(), trace.events["dur_ns"].tolist()))
    assert len(got) == 12
    assert ("J<SHADE_ROW_EXPAND>", 10, 901_000_000) in got
    assert ("J<FIRST_CUJ>", 5, 99_999_995) in got
    assert ("J<CANCELED>", 100_100_000, 898_900_000) in got
    assert ("FT#cancel#0", 990_000_000, 0) in got
    # empty packets alone, or before an XSpace's planes, are not a Perfetto trace
    assert not looks_like_packets(b"\x0a\x00" * 8, 16)
    plane = b"\x0a\x06\x08\x01\x12\x02ab"  # XPlane: id 1, name "ab"
    assert not looks_like_packets(b"\x0a\x00" + plane, 10)


# ----------------------------------------------------------------------------- features, hand-built


def _pkt(seq: int = 1, **fields) -> "P.TracePacket":
    p = P.TracePacket(trusted_packet_sequence_id=seq, **fields)
    return p


def test_interned_state_dropped_packets_annotations_and_open_slices(tmp_path):
    thread = P.TrackDescriptor(uuid=7, thread=P.ThreadDescriptor(pid=3, tid=4, thread_name="worker"))
    interned = P.InternedData(event_names=[P.EventName(iid=1, name="step")],
                              event_categories=[P.EventCategory(iid=1, name="train")],
                              debug_annotation_names=[P.DebugAnnotationName(iid=1, name="batch")],
                              debug_annotation_string_values=[P.InternedString(iid=1, str=b"big")])
    nested = P.DebugAnnotation(name="cfg", dict_entries=[P.DebugAnnotation(name="lr", double_value=0.5),
                                                         P.DebugAnnotation(name="tag", string_value_iid=1)])
    begin = P.TrackEvent(type=P.TrackEvent.TYPE_SLICE_BEGIN, track_uuid=7, name_iid=1, category_iids=[1],
                         debug_annotations=[P.DebugAnnotation(name_iid=1, int_value=32), nested])
    end = P.TrackEvent(type=P.TrackEvent.TYPE_SLICE_END, track_uuid=7)
    needs = P.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    packets = [
        _pkt(track_descriptor=thread),
        _pkt(timestamp=100, sequence_flags=P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED, interned_data=interned),
        _pkt(timestamp=100, sequence_flags=needs, track_event=begin),
        _pkt(timestamp=150, sequence_flags=needs, track_event=end),
        # a packet was lost: what needs the (now unknown) interned state is skipped
        _pkt(timestamp=200, sequence_flags=needs, previous_packet_dropped=1, track_event=begin),
        _pkt(timestamp=250, sequence_flags=needs, track_event=end),
        # state cleared again: events read again, one never ended
        _pkt(timestamp=300, sequence_flags=P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED, interned_data=interned),
        _pkt(timestamp=300, sequence_flags=needs, track_event=begin),
        _pkt(timestamp=400, track_event=P.TrackEvent(type=P.TrackEvent.TYPE_INSTANT, track_uuid=7, name="tick")),
    ]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert _slices(trace) == [(100, "step", 50, "train", ("pid 3", "worker")),
                              (300, "step", 100, "train", ("pid 3", "worker")),
                              (400, "tick", 0, "", ("pid 3", "worker"))]
    assert trace.stats["batch"].values.tolist() == [32, 32]
    assert trace.stats["cfg.lr"].values.tolist() == [0.5, 0.5]
    assert trace.stats["cfg.tag"].values.tolist() == ["big", "big"]
    assert trace.stats["incomplete"].rows.tolist() == [1]
    warnings = " ".join(trace.metadata["warnings"])
    assert "1 slices never ended" in warnings and "skipped 2 packets needing incremental state" in warnings


def _split_sequences_trace(tmp_path) -> Path:
    """An async track as Chrome writes its ``gpu::Scheduler`` track: begins on one trusted
    packet sequence, ends on another, the ends' sequence written first, so in file order
    every end comes before every begin. Times tie where order matters: a zero-length
    slice (begin and end at 600, in file order), nested slices whose ends share a time
    (400), an end at 700 written before the begin at 700 (it closes nothing, as in
    Perfetto's sorter: by time, then file order), and a thread track in file order with
    the same ties."""
    track = P.TrackDescriptor(uuid=9, name="gpu::Scheduler", parent_uuid=5)
    thread = P.TrackDescriptor(uuid=7, thread=P.ThreadDescriptor(pid=3, tid=4, thread_name="main"))
    B, E = P.TrackEvent.TYPE_SLICE_BEGIN, P.TrackEvent.TYPE_SLICE_END

    def ev(seq, ts, kind, uuid=9, name=None):
        e = P.TrackEvent(type=kind, track_uuid=uuid)
        if name:
            e.name = name
        return _pkt(seq, timestamp=ts, track_event=e)

    return write_packets(tmp_path, [
        _pkt(1, track_descriptor=P.TrackDescriptor(uuid=5, process=P.ProcessDescriptor(pid=3, process_name="gpu"))),
        _pkt(1, track_descriptor=track), _pkt(1, track_descriptor=thread),
        ev(2, 150, E), ev(2, 400, E), ev(2, 400, E), ev(2, 700, E),  # the ends' sequence first
        ev(1, 100, B, name="a"), ev(1, 300, B, name="outer"), ev(1, 350, B, name="inner"),
        ev(1, 600, B, name="zero"), ev(1, 600, E), ev(1, 700, B, name="late"),
        # in file order on a thread: the same ties
        ev(1, 800, B, 7, "t_outer"), ev(1, 850, B, 7, "t_inner"), ev(1, 900, E, 7), ev(1, 900, E, 7),
        ev(1, 950, B, 7, "t_zero"), ev(1, 950, E, 7),
        ev(1, 1000, P.TrackEvent.TYPE_INSTANT, 7, "tick"),
    ])


def test_slices_pair_by_time_across_sequences(tmp_path, monkeypatch):
    """Begins and ends paired per track in time order (stable: file order where times
    tie), as Perfetto's trace processor sorts before it parses, not in file order; the
    compiled and the NumPy pairing agree."""
    from polyprof.formats.perfetto_read import walked

    path = _split_sequences_trace(tmp_path)
    sched, thread = ("gpu", "gpu::Scheduler"), ("gpu", "main")
    want = [(100, "a", 50, "", sched), (300, "outer", 100, "", sched), (350, "inner", 50, "", sched),
            (600, "zero", 0, "", sched), (700, "late", 300, "", sched),  # never ended: to the last time
            (800, "t_outer", 100, "", thread), (850, "t_inner", 50, "", thread), (950, "t_zero", 0, "", thread),
            (1000, "tick", 0, "", thread)]
    got = []
    for compiled in (True, False):
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(walked, "_walk", None)
                m.setattr(walked, "IMPLEMENTATION", "python")
            trace = polyprof.load(path)
        got.append(trace)
        assert _slices(trace) == want
        names = trace.names()
        assert names[trace.stats["incomplete"].rows].tolist() == ["late"]
        assert trace.metadata["warnings"] == [
            "1 slice ends closed no open slice on their track",
            "1 slices never ended: they end at the trace's last timestamp (stat 'incomplete')"]
    assert _events(got[0]) == _events(got[1])


def test_clock_snapshots_put_every_clock_on_monotonic(tmp_path):
    snap = P.ClockSnapshot(clocks=[P.ClockSnapshot.Clock(clock_id=3, timestamp=1000),  # MONOTONIC
                                   P.ClockSnapshot.Clock(clock_id=6, timestamp=11000),  # BOOTTIME
                                   P.ClockSnapshot.Clock(clock_id=1, timestamp=5_000_000)])  # REALTIME
    ev = dict(type=P.TrackEvent.TYPE_INSTANT, track_uuid=1)
    packets = [_pkt(timestamp=0, clock_snapshot=snap),
               _pkt(timestamp=1500, timestamp_clock_id=3, track_event=P.TrackEvent(name="on monotonic", **ev)),
               _pkt(timestamp=12000, timestamp_clock_id=6, track_event=P.TrackEvent(name="on boottime", **ev)),
               _pkt(timestamp=13000, track_event=P.TrackEvent(name="default clock", **ev)),
               _pkt(timestamp=5_000_100, timestamp_clock_id=1, track_event=P.TrackEvent(name="wall", **ev))]
    trace = polyprof.load(write_packets(tmp_path, packets))
    got = dict(zip(trace.names().tolist(), trace.events["start_ns"].tolist()))
    assert got == {"on monotonic": 1500, "on boottime": 2000, "default clock": 3000, "wall": 1100}
    assert trace.sources[0].clock["wall_anchor"] == {"mono_ns": 1000, "wall_ns": 5_000_000, "uncertainty_ns": 0}


def test_gpu_render_stages_and_counters_are_a_device(tmp_path):
    specs = P.InternedData(gpu_specifications=[
        P.InternedGpuRenderStageSpecification(iid=1, name="compute queue"),
        P.InternedGpuRenderStageSpecification(iid=2, name="dispatch", category=2)])  # COMPUTE
    stage = P.GpuRenderStageEvent(event_id=1, duration=700, hw_queue_iid=1, stage_iid=2, gpu_id=0, submission_id=9,
                                  name="matmul")
    forwards = P.GpuCounterDescriptor.GpuCounterSpec.VALUE_DIRECTION_FORWARDS_LOOKING  # one sample, kept as it is
    desc = P.GpuCounterDescriptor(specs=[P.GpuCounterDescriptor.GpuCounterSpec(counter_id=5, name="busy %",
                                                                                value_direction=forwards)])
    counters = P.GpuCounterEvent(gpu_id=0, counter_descriptor=desc,
                                 counters=[P.GpuCounterEvent.GpuCounter(counter_id=5, double_value=87.5)])
    packets = [_pkt(timestamp=0, sequence_flags=P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED, interned_data=specs),
               _pkt(timestamp=1000, gpu_render_stage_event=stage),
               _pkt(timestamp=1200, gpu_counter_event=counters)]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert [(p.name, p.kind) for p in trace.planes] == [("/device:GPU:0", "device")]
    assert _slices(trace) == [(1000, "matmul", 700, "kernel", ("/device:GPU:0", "compute queue"))]
    assert trace.stats["stage"].values.tolist() == ["dispatch"]
    assert trace.stats["submission_id"].values.tolist() == [9]
    assert [trace.strings[n] for n in trace.counters["name"].tolist()] == ["busy %"]
    assert trace.counters["value"].tolist() == [87.5]
    # the kernel is seen by the analyses as device work
    assert "kernel_breakdown" in build(trace).tables


def test_render_stage_specifications_name_and_are_no_slices(tmp_path):
    """Perfetto's own ``gpu_render_stages.py`` trace: two packets carry only the
    (deprecated, still written) ``specifications``; Perfetto's expected table
    (``parser/graphics/tests_gpu_trace.py``) has 20 slices, each 5 ns, at 0 (two), 10,
    20, ..., 180. polyprof read the specification packets as two more slices at 0."""
    trace = polyprof.load(ROOT / "tests/data/peers/perfetto/gpu_render_stages.pftrace")
    expected = sorted([(0, 5), (0, 5)] + [(t, 5) for t in range(10, 190, 10)])
    assert sorted(zip(trace.events["start_ns"].tolist(), trace.events["dur_ns"].tolist())) == expected
    # a queue and a stage given by number are named by the specifications, by position
    spec = P.GpuRenderStageEvent.Specifications(
        hw_queue=[P.GpuRenderStageEvent.Specifications.Description(name="graphics"),
                  P.GpuRenderStageEvent.Specifications.Description(name="transfer")],
        stage=[P.GpuRenderStageEvent.Specifications.Description(name="vertex"),
               P.GpuRenderStageEvent.Specifications.Description(name="fragment")])
    packets = [_pkt(timestamp=0, gpu_render_stage_event=P.GpuRenderStageEvent(specifications=spec)),
               _pkt(timestamp=100, gpu_render_stage_event=P.GpuRenderStageEvent(
                   event_id=1, duration=40, hw_queue_id=1, stage_id=1)),
               _pkt(timestamp=200, gpu_render_stage_event=P.GpuRenderStageEvent(
                   event_id=2, duration=30, hw_queue_id=2, stage_id=5))]
    got = _slices(polyprof.load(write_packets(tmp_path, packets)))
    assert got == [(100, "fragment", 40, "gpu_render_stage", ("/device:GPU:0", "transfer")),
                   (200, "render stage(5)", 30, "gpu_render_stage", ("/device:GPU:0", "Unknown GPU Queue 2"))]
    # a later specifications message names its queues by position from 0 again (as
    # Perfetto's GpuEventParser): here queue 0, where appending would have named a queue 2
    D = P.GpuRenderStageEvent.Specifications.Description
    again = P.GpuRenderStageEvent.Specifications(hw_queue=[D(name="compute")])
    packets[2:2] = [_pkt(timestamp=150, gpu_render_stage_event=P.GpuRenderStageEvent(specifications=again)),
                    _pkt(timestamp=160, gpu_render_stage_event=P.GpuRenderStageEvent(
                        event_id=3, duration=10, hw_queue_id=0, stage_id=0))]
    got = _slices(polyprof.load(write_packets(tmp_path, packets)))
    assert [(g[0], g[1], g[4][1]) for g in got] == [(100, "fragment", "transfer"), (160, "vertex", "compute"),
                                                     (200, "render stage(5)", "Unknown GPU Queue 2")]


def test_gpu_counters_look_backwards_as_perfetto_reads_them():
    """Perfetto's own ``gpu_counters.py`` trace: a GPU counter's sample is its value over
    the interval that ends at the sample (unless its descriptor says forwards), and a
    counter id is its first descriptor's, on that descriptor's GPU. Perfetto's expected
    table (``test_gpu_counters``, ``parser/graphics/tests_gpu_trace.py``); polyprof had
    every value one sample late and "Triangle Acceleration" as "gpu counter 34" on GPU 0.
    Counter 33 has no descriptor: Perfetto drops its samples (polyprof kept them as
    "gpu counter 33"), and so does polyprof now, saying so once."""
    trace = polyprof.load(ROOT / "tests/data/peers/perfetto/gpu_counters.pftrace")
    got: dict[tuple[str, str], list] = {}
    for plane, name, ts, v in zip(trace.counters["plane"].tolist(), trace.counters["name"].tolist(),
                                  trace.counters["ts_ns"].tolist(), trace.counters["value"].tolist()):
        got.setdefault((trace.planes[plane].name, trace.strings[name]), []).append((ts, v))
    assert got == {
        ("/device:GPU:0", "Vertex / Second"): [(11, 10.0), (21, 15.5), (31, 0.0)],
        ("/device:GPU:0", "Fragment / Second"): [(12, 14.0), (22, 21.0), (32, 0.0)],
        ("/device:GPU:1", "Triangle Acceleration"): [(14, 9.0), (24, 7.0), (34, 0.0)],
        ("/device:GPU:0", "Bytes Only"): [(15, 0.0), (25, 0.0)],
        ("/device:GPU:0", "Frequency"): [(16, 0.0), (26, 0.0)]}
    assert trace.metadata["warnings"] == ["skipped 3 GPU counter samples whose counter id no GpuCounterDescriptor "
                                          "describes (33), as Perfetto drops them"]
    # a trace of counters alone spans their samples (the summary said "trace span 0 ns")
    assert trace.n_events == 0 and trace.extent_ns == (11, 34)
    assert build(trace).overview["trace_span_ns"] == 23


def test_mutated_traces_give_a_trace_or_one_checked_error(tmp_path):
    """Seeded byte flips, cuts and insertions in polyprof's export and Perfetto's traces:
    each reads, or fails with a TraceFormatError the reader raised itself (not the
    guard's ForeignError for an unchecked exception)."""
    import random

    from polyprof.formats.safety import ForeignError

    trace = polyprof.load(ROOT / "tests/data/traces/kineto/cuda_event_sync_multistream.json.gz")
    seeds = [perfetto.write(trace, tmp_path / "s.pftrace").read_bytes(),
             pftrace("track_event_tracks", tmp_path).read_bytes(),
             pftrace("track_event_counters", tmp_path).read_bytes()]
    rng = random.Random(20261128)
    outcomes = Counter()
    for i in range(150):
        b = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(b))
            k = rng.random()
            if k < 0.6:
                b[pos] = rng.randrange(256)
            elif k < 0.8:
                del b[pos:pos + rng.randint(1, 20)]
            else:
                b[pos:pos] = rng.randbytes(rng.randint(1, 8))
        path = tmp_path / f"m{i}.pftrace"
        path.write_bytes(bytes(b))
        try:
            load(path)
            outcomes["ok"] += 1
        except ForeignError as e:  # pragma: no cover - what this test is for
            raise AssertionError(f"unchecked {type(e.cause).__name__} on mutation {i}: {e}") from None
        except TraceFormatError as e:
            assert str(path) in str(e) and "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["ok"] and outcomes["error"]


def test_rocprofv3_layout_gpu_tracks_become_a_device(tmp_path):
    """The track layout rocprofv3 writes (rocprofiler-sdk's generatePerfetto.cpp: GPU
    agent streams and extra host threads as tracks with no process, API calls linked to
    their kernels and copies by flow ids). Built by hand: no public rocprofv3 .pftrace
    exists to copy."""
    def td(uuid, **kw):
        return _pkt(timestamp=0, track_descriptor=P.TrackDescriptor(uuid=uuid, **kw))

    def ev(ts, uuid, kind, name=None, cat=None, flow=None, **ann):
        e = P.TrackEvent(type=kind, track_uuid=uuid)
        if name:
            e.name, e.categories[:] = name, [cat]
        if flow:
            e.flow_ids.append(flow)
        for k, v in ann.items():
            e.debug_annotations.add(name=k, uint_value=v)
        return _pkt(timestamp=ts, track_event=e)

    B, E = P.TrackEvent.TYPE_SLICE_BEGIN, P.TrackEvent.TYPE_SLICE_END
    packets = [
        td(10, process=P.ProcessDescriptor(pid=4242, process_name="python3")),
        td(11, parent_uuid=10, thread=P.ThreadDescriptor(pid=4242, tid=4242, thread_name="python3")),
        td(20, name="THREAD 1 (4250)"),
        td(30, name="COMPUTE AGENT [4] STREAM [0] (GPU)"),
        td(31, name="COPY to AGENT [4] STREAM [0] (GPU)"),
        ev(1000, 11, B, "hipLaunchKernel", "hip_api", flow=0xABC7, corr_id=7), ev(1200, 11, E),
        ev(1300, 20, B, "hipMemcpyAsync", "hip_api", flow=0xABC8, corr_id=8), ev(1400, 20, E),
        ev(1500, 30, B, "gemm_kernel", "kernel_dispatch", flow=0xABC7, corr_id=7), ev(2500, 30, E),
        ev(2600, 31, B, "MEMORY_COPY_HOST_TO_DEVICE", "memory_copy", flow=0xABC8, corr_id=8, copy_bytes=4096),
        ev(2800, 31, E),
    ]
    trace = polyprof.load(write_packets(tmp_path, packets))
    assert [(p.name, p.kind, p.vendor) for p in trace.planes] == [("python3", "host", ""),
                                                                  ("/device:GPU:4", "device", "AMD")]
    assert sorted((trace.planes[t.plane].name, t.name, t.kind, t.tid) for t in trace.tracks) == [
        ("/device:GPU:4", "COMPUTE AGENT [4] STREAM [0] (GPU)", "stream", 0),
        ("/device:GPU:4", "COPY to AGENT [4] STREAM [0] (GPU)", "stream", 0),
        ("python3", "THREAD 1 (4250)", "thread", 4250), ("python3", "python3", "thread", 4242)]
    names = trace.names()
    assert sorted(zip(names[trace.flows["src"]].tolist(), names[trace.flows["dst"]].tolist())) == [
        ("hipLaunchKernel", "gemm_kernel"), ("hipMemcpyAsync", "MEMORY_COPY_HOST_TO_DEVICE")]
    report = build(trace)
    assert report.overview["correlation"]["matched_by_flow"] == 2
    kb = report.tables["kernel_breakdown"]
    rows = {n: (k, t) for n, k, t in zip(kb["name"], kb["kind"], kb["total_ns"])}
    assert rows == {"gemm_kernel": ("compute", 1000), "MEMORY_COPY_HOST_TO_DEVICE": ("memcpy", 200)}
