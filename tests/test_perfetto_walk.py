"""The compiled packet walk (formats/perfetto_read/_walk.c) against the protobuf path it speeds up.

Both paths must give the same Trace, to the codes of its strings and tracks: polyprof's
own export of every real trace in tests/data, Perfetto's own test traces, hand-built
files where packets the walk leaves to Python (descriptors, clock snapshots, GPU
messages, legacy events, nested annotations, scoped clocks, thread counters) come
between the ones it reads, packets in odd wire shapes (packed and unpacked repeated
fields, unknown fields, oneofs set twice), and damaged files, where both must fail with
the same message.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.formats.perfetto_read import load, walked
from polyprof.writers import perfetto

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted(p for p in (ROOT / "tests/data/traces").glob("*/*") if p.suffix in (".gz", ".pb")) + \
    sorted(p for p in (ROOT / "tests/data/h200").iterdir() if p.suffix in (".gz", ".pb", ".polyprof"))

pytestmark = pytest.mark.skipif(walked.IMPLEMENTATION != "c", reason="the _walk extension is not built")


def _load(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(walked, "_walk", None)
            m.setattr(walked, "IMPLEMENTATION", "python")
        try:
            return load(path)
        except Exception as e:  # both paths must fail alike
            return f"{type(e).__name__}: {e}"


def assert_identical(a: object, b: object) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a.strings == b.strings
    assert list(a.events) == list(b.events)
    for k in b.events:
        assert a.events[k].dtype == b.events[k].dtype and np.array_equal(a.events[k], b.events[k]), k
    assert repr(a.planes) == repr(b.planes)
    assert repr(a.tracks) == repr(b.tracks)
    assert list(a.stats) == list(b.stats)
    for k in b.stats:
        x, y = a.stats[k], b.stats[k]
        assert np.array_equal(x.rows, y.rows), k
        assert x.values.dtype == y.values.dtype, k
        if x.values.dtype.kind == "f":  # (NaN where XLA wrote one: jax_copies_h200's fragmentation)
            assert np.array_equal(x.values, y.values, equal_nan=True), k
        else:
            assert x.values.tolist() == y.values.tolist(), k
    for table in ("flows", "counters"):
        x, y = getattr(a, table), getattr(b, table)
        assert list(x) == list(y)
        for k in y:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), (table, k)
    assert a.metadata == b.metadata


def _same(path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    c = _load(path, True, monkeypatch)
    assert_identical(c, _load(path, False, monkeypatch))
    return c


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_own_export_of_every_real_trace_reads_the_same(path, tmp_path, monkeypatch):
    out = perfetto.write(polyprof.load(path), tmp_path / "t.pftrace")
    got = _same(out, monkeypatch)
    assert not isinstance(got, str) and got.n_events


def test_the_walk_reads_the_own_export_in_c(tmp_path, monkeypatch):
    """Of polyprof's export, only the header's descriptors (and the devices' Chrome
    metadata) go to protobuf."""
    out = perfetto.write(polyprof.load(ROOT / "tests/data/traces/kineto/a100_nccl_rank0.json.gz"),
                         tmp_path / "t.pftrace")
    from polyprof.formats.perfetto_read import collector

    seen = []
    real = collector.Collector.packet
    monkeypatch.setattr(collector.Collector, "packet", lambda self, p: (seen.append(p), real(self, p))[1])
    trace = load(out)
    assert trace.n_events > 1000
    assert 0 < len(seen) < 200 and all(p.HasField("track_descriptor") or p.HasField("chrome_events") for p in seen)


# ----------------------------------------------------------------------------- Perfetto's own traces
P = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
DATA = ROOT / "tests/data/perfetto"


PROTOS = sorted(DATA.glob("*.textproto")) + sorted((ROOT / "tests/data/peers/perfetto").glob("*.textproto"))


@pytest.mark.parametrize("path", PROTOS, ids=[p.stem for p in PROTOS])
def test_perfettos_test_traces_read_the_same(path, tmp_path, monkeypatch):
    from google.protobuf import text_format

    msg = P.Trace()
    text_format.Parse(path.read_text(), msg)
    out = tmp_path / f"{path.stem}.pftrace"
    out.write_bytes(msg.SerializeToString())
    _same(out, monkeypatch)


# ----------------------------------------------------------------------------- generated mixes
def _mix(rng: random.Random) -> list:
    """Packets of every kind the reader takes, on three sequences, in a random order that
    keeps each sequence's own order (interned data before its use, a clear first)."""
    TE = P.TrackEvent
    seqs = []
    for seq in (1, 2, 3):
        out = []
        names = [P.EventName(iid=i, name=f"n{seq}.{i}") for i in range(1, 6)]
        cats = [P.EventCategory(iid=i, name=f"c{i}") for i in range(1, 4)]
        anames = [P.DebugAnnotationName(iid=i, name=f"a{i}") for i in range(1, 4)]
        values = [P.InternedString(iid=i, str=f"v{i}".encode()) for i in range(1, 3)] + \
                 [P.InternedString(iid=9, str=b"\xff bad utf-8")]
        out.append(P.TracePacket(trusted_packet_sequence_id=seq, timestamp=0,
                                 sequence_flags=P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
                                 interned_data=P.InternedData(event_names=names, event_categories=cats,
                                                              debug_annotation_names=anames,
                                                              debug_annotation_string_values=values)))
        if seq == 1:  # an incremental counter (its sums made per sequence, by Python)
            out.append(P.TracePacket(trusted_packet_sequence_id=seq, track_descriptor=P.TrackDescriptor(
                uuid=901, name="incremental", counter=P.CounterDescriptor(is_incremental=True))))
        if seq == 2:
            out.append(P.TracePacket(trusted_packet_sequence_id=seq, trace_packet_defaults=P.TracePacketDefaults(
                track_event_defaults=P.TrackEventDefaults(track_uuid=200))))
        depth, ts = 0, 0
        for i in range(rng.randint(30, 80)):
            ts += rng.randint(0, 50)
            r = rng.random()
            p = P.TracePacket(trusted_packet_sequence_id=seq, timestamp=ts,
                              sequence_flags=P.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
            e = p.track_event
            if seq != 2 or rng.random() < 0.3:
                e.track_uuid = rng.choice([100 + seq, 500, 7, 0])
            if r < 0.35 or (r < 0.5 and depth == 0):
                e.type = TE.TYPE_SLICE_BEGIN
                depth += 1
            elif r < 0.6:
                e.type = TE.TYPE_SLICE_END
                depth -= 1
            elif r < 0.7:
                e.type = TE.TYPE_INSTANT
            elif r < 0.8:
                e.type = TE.TYPE_COUNTER
                e.track_uuid = rng.choice([900, 901])
                if rng.random() < 0.5:
                    e.counter_value = rng.randint(-5, 100)
                else:
                    e.double_counter_value = rng.random()
            elif r < 0.85:  # legacy: Python
                e.legacy_event.phase = ord(rng.choice("BEXiI"))
                e.legacy_event.name_iid = rng.randint(1, 5)
                e.legacy_event.duration_us = 3
            elif r < 0.88:
                p.ClearField("track_event")
                p.track_descriptor.uuid = rng.choice([100 + seq, 500, 7])
                p.track_descriptor.name = f"track {i}"
                if rng.random() < 0.5:
                    p.track_descriptor.thread.pid, p.track_descriptor.thread.tid = 10, 10 + seq
            elif r < 0.9:
                p.ClearField("track_event")
                p.clock_snapshot.clocks.add(clock_id=6, timestamp=ts)
                p.clock_snapshot.clocks.add(clock_id=3, timestamp=ts + 1000)
            elif r < 0.93:
                p.ClearField("sequence_flags")
                p.ClearField("track_event")
                p.interned_data.event_names.add(iid=rng.randint(1, 7), name=f"re{i}")
            else:
                e.type = TE.TYPE_INSTANT
                e.thread_time_delta_us = 5  # Python
            if e.type in (TE.TYPE_SLICE_BEGIN, TE.TYPE_INSTANT) and not e.HasField("legacy_event"):
                k = rng.random()
                if k < 0.6:
                    e.name_iid = rng.randint(1, 7)  # 6 and 7: never interned
                elif k < 0.9:
                    e.name = rng.choice(["inline", "ünïcode", ""])
                if rng.random() < 0.5:
                    e.category_iids.extend(rng.sample(range(1, 5), rng.randint(1, 2)))
                elif rng.random() < 0.5:
                    e.categories.extend(rng.sample(["x", "y", "z"], rng.randint(1, 2)))
                for _ in range(rng.randint(0, 3)):
                    a = e.debug_annotations.add()
                    if rng.random() < 0.6:
                        a.name_iid = rng.randint(1, 4)
                    else:
                        a.name = rng.choice(["k", "a1", "ß"])
                    v = rng.randrange(9)
                    if v == 0:
                        a.int_value = rng.randint(-(1 << 62), 1 << 62)
                    elif v == 1:
                        a.uint_value = rng.randint(0, (1 << 64) - 1)
                    elif v == 2:
                        a.double_value = rng.random()
                    elif v == 3:
                        a.bool_value = rng.random() < 0.5
                    elif v == 4:
                        a.string_value = rng.choice(["s", "t", "ü"])
                    elif v == 5:
                        a.string_value_iid = rng.choice([1, 2, 9, 4])
                    elif v == 6:
                        a.pointer_value = rng.randint(0, 1 << 40)
                    elif v == 7:
                        a.dict_entries.add(name="inner", int_value=3)  # nested: Python
                    # v == 8: no value at all
            if e.type in (TE.TYPE_SLICE_BEGIN, TE.TYPE_SLICE_END, TE.TYPE_INSTANT) and rng.random() < 0.3:
                e.flow_ids.append(rng.randint(1, 6))
                if rng.random() < 0.4:
                    e.terminating_flow_ids.append(rng.randint(1, 6))
                if rng.random() < 0.3:
                    e.flow_ids_old.append(rng.randint(1, 6))
            if rng.random() < 0.01:
                p.previous_packet_dropped = 1
            if rng.random() < 0.05:
                p.sequence_flags = P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            if rng.random() < 0.05:
                p.timestamp_clock_id = rng.choice([3, 6, 64])
            out.append(p)
        seqs.append(out)
    merged = []
    while any(seqs):
        s = rng.choice([q for q in seqs if q])
        merged.append(s.pop(0))
    return merged


@pytest.mark.parametrize("seed", range(12))
def test_generated_mixes_read_the_same(seed, tmp_path, monkeypatch):
    rng = random.Random(seed)
    msg = P.Trace()
    msg.packet.extend(_mix(rng))
    out = tmp_path / "mix.pftrace"
    out.write_bytes(msg.SerializeToString())
    got = _same(out, monkeypatch)
    assert not isinstance(got, str) and got.n_events


def _raw(fields: bytes, seq: int = 1) -> bytes:
    body = b"\x50" + bytes([seq]) + fields  # trusted_packet_sequence_id
    return b"\x0a" + bytes([len(body)]) + body


def test_odd_wire_shapes_read_as_protobuf_reads_them(tmp_path, monkeypatch):
    """Packed category iids and flow ids, unknown fields (varint, fixed, bytes), a oneof
    (the name) set twice, a scalar set twice, a track event twice in one packet."""
    interned = P.TracePacket(trusted_packet_sequence_id=1, sequence_flags=1, interned_data=P.InternedData(
        event_names=[P.EventName(iid=1, name="one"), P.EventName(iid=2, name="two")],
        event_categories=[P.EventCategory(iid=1, name="c1"), P.EventCategory(iid=2, name="c2")])).SerializeToString()
    te_packed = (b"\x48\x03"            # type INSTANT
                 b"\x58\x05"            # track_uuid 5
                 b"\x50\x01"            # name_iid 1
                 b"\xba\x01\x03abc"     # name "abc" (field 23): the oneof's last member wins
                 b"\x1a\x02\x01\x02"    # category_iids packed [1, 2]
                 b"\xfa\x02\x08" + (7).to_bytes(8, "little") +  # flow_ids packed (47)
                 b"\xa8\x1f\x07"        # unknown field 501, varint
                 b"\xb5\x1f\x01\x02\x03\x04")  # unknown field 502, fixed32
    te_twice = b"\x48\x03\x58\x05\x50\x02"
    packets = [
        b"\x0a" + bytes([len(interned)]) + interned,
        _raw(b"\x40\x0a" + b"\x5a" + bytes([len(te_packed)]) + te_packed + b"\xc2\x3e\x02hi"),  # unknown bytes
        _raw(b"\x40\x0b\x40\x0c" + b"\x5a" + bytes([len(te_twice)]) + te_twice),  # timestamp twice: 12
        _raw(b"\x40\x0d" + b"\x5a\x02\x48\x03" + b"\x5a\x02\x50\x02" + b"\x5a\x02\x58\x06"),  # merged track event
    ]
    out = tmp_path / "odd.pftrace"
    out.write_bytes(b"".join(packets))
    trace = _same(out, monkeypatch)
    assert trace.names().tolist() == ["abc", "two", "two"]
    assert trace.categories().tolist() == ["c1,c2", "", ""]
    assert trace.events["start_ns"].tolist() == [10, 12, 13]


def test_damaged_files_fail_alike(tmp_path, monkeypatch):
    trace = polyprof.load(ROOT / "tests/data/traces/kineto/cuda_event_sync_multistream.json.gz")
    seed = perfetto.write(trace, tmp_path / "s.pftrace").read_bytes()
    rng = random.Random(27)
    outcomes = set()
    for i in range(60):
        b = bytearray(seed)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(b))
            if rng.random() < 0.7:
                b[pos] = rng.randrange(256)
            else:
                del b[pos:pos + rng.randint(1, 9)]
        path = tmp_path / f"m{i}.pftrace"
        path.write_bytes(bytes(b))
        got = _same(path, monkeypatch)
        outcomes.add(isinstance(got, str))
    assert outcomes == {True, False}


def _pairs_one_by_one(kind: np.ndarray, track: np.ndarray, ts: np.ndarray) -> tuple[dict, int]:
    """The pairing as the trace processor does it, event by event: every row sorted by
    (time, file order), a stack per track. {begin row: end row or -1}, orphan ends."""
    stacks: dict[int, list[int]] = {}
    ends, orphans = {}, 0
    for i in sorted(range(len(kind)), key=lambda i: (int(ts[i]), i)):
        st = stacks.setdefault(int(track[i]), [])
        if kind[i] == 1:
            st.append(i)
            ends[i] = -1
        elif kind[i] == 2:
            if st:
                ends[st.pop()] = i
            else:
                orphans += 1
    return ends, orphans


@pytest.mark.parametrize("seed", range(40))
def test_compiled_match_pairs_as_the_numpy_reference(seed):
    """``slices.match`` (a stack per track in C) against ``match_columns`` (sorts in NumPy)
    and a walk event by event in (time, file order): nested, interleaved and unclosed
    slices, ends that close nothing, instants and complete events between them, on up to
    eight tracks; times in file order on some tracks and not on others (as a track
    written from two sequences), with many ties; track codes the C walk does not take
    (negative, far apart) go to the reference and give the same."""
    from polyprof.formats.perfetto_read import slices

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 2000))
    kind = rng.choice(np.array([1, 2, 3, 5], np.int8), n, p=[0.42, 0.4, 0.1, 0.08]).astype(np.int8)
    n_tracks = int(rng.integers(1, 9))
    track = rng.integers(0, n_tracks, n).astype(np.int64)
    ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)  # in file order, with ties
    shuffled = rng.integers(0, n_tracks, int(rng.integers(0, 3)))  # these tracks' times out of order
    late = np.isin(track, shuffled)
    ts[late] = rng.integers(0, max(n // 4, 1), int(late.sum()))
    if seed % 5 == 4:
        track = track * 2**40 - 7  # not small non-negative codes: the reference
    got, want = slices.match(kind, track, ts), slices.match_columns(kind, track, ts)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist() and got[2] == want[2]
    assert got[0].dtype == got[1].dtype == np.int64
    begins = np.flatnonzero(kind == 1)
    assert got[0].tolist() == begins.tolist()  # every begin, in file order
    closed = got[1] >= 0
    assert (kind[got[1][closed]] == 2).all() and (track[got[1][closed]] == track[got[0][closed]]).all()
    assert (ts[got[1][closed]] >= ts[got[0][closed]]).all()
    ends, orphans = _pairs_one_by_one(kind, track, ts)
    assert dict(zip(got[0].tolist(), got[1].tolist())) == ends and got[2] == orphans
