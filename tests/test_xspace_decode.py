"""The compiled XSpace decoder and encoder (formats/xspace/_wire.c) against their
pure-Python references (the same columns through protobuf's own message objects), on
every shared XSpace trace, polyprof's export of every shared Kineto trace, hand-made
wire oddities and hypothesis-generated XSpaces; and the whole reader / writer with the
extension against the same code without it."""

from __future__ import annotations

import os
import resource
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyprof.errors import TraceFormatError
from polyprof.formats import xplane_pb2, xspace
from polyprof.writers import xspace as xspace_writer
from polyprof.formats.detect import load
from polyprof.formats.xspace import decode, encode
from polyprof.writers import xspace as writer

pytestmark = pytest.mark.skipif(decode.IMPLEMENTATION != "c",
                                reason="the compiled XSpace decoder is not in use (no C compiler, or "
                                       "POLYPROF_PURE_PYTHON=1); only the pure-Python reader runs")

_FIELDS = ("plane_lines", "line_events", "ev_mid", "ev_off", "ev_dur", "ev_nocc", "ev_isnocc", "ev_stats",
           "st_mid", "st_kind", "st_int", "st_dbl")


def assert_same_columns(a: decode.EventColumns, b: decode.EventColumns) -> None:
    for f in _FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=f == "st_dbl"), f
    # the distinct text values, in the order first seen (st_int: each text stat's place there)
    assert a.st_text.tolist() == b.st_text.tolist()
    assert [type(v) for v in a.st_text.tolist()] == [type(v) for v in b.st_text.tolist()]
    assert len({(type(v), v) for v in a.st_text.tolist()}) == len(a.st_text)  # each value once
    objs = decode.stat_objects(a.st_kind, a.st_int, a.st_text).tolist()
    assert objs == decode.stat_objects(b.st_kind, b.st_int, b.st_text).tolist()
    assert [type(v) for v in objs] == [type(v) for v in decode.stat_objects(b.st_kind, b.st_int, b.st_text)]
    assert all(np.shares_memory(c.st_dbl, c.st_int) for c in (a, b) if len(c.st_int))  # one value column
    assert metadata_entries(a) == metadata_entries(b)
    assert a.lines == b.lines and a.texts == b.texts
    assert [(p[0], p[1], p[2]) for p in a.planes] == [(p[0], p[1], p[2]) for p in b.planes]
    assert [[(m, k, repr(v)) for m, k, v in p[3]] for p in a.planes] == \
        [[(m, k, repr(v)) for m, k, v in p[3]] for p in b.planes]


def metadata_entries(c: decode.EventColumns) -> dict[tuple[int, int], tuple]:
    """(plane, id) -> everything of that event metadata entry; for an id given twice the
    last entry, as protobuf's map keeps it (the map's order is protobuf's own)."""
    out: dict[tuple[int, int], tuple] = {}
    plane = np.repeat(np.arange(len(c.plane_mds)), c.plane_mds).tolist()
    s0 = np.concatenate([[0], np.cumsum(c.md_stats)]).tolist()
    c0 = np.concatenate([[0], np.cumsum(c.md_children)]).tolist()
    for i, key in enumerate(c.md_key.tolist()):
        st = slice(s0[i], s0[i + 1])
        dbl = [repr(x) for x in c.ms_dbl[st].tolist()]  # NaN equals NaN as text
        out[(plane[i], key)] = (c.md_name[i], c.md_display[i], c.md_meta[i], c.md_child[c0[i]:c0[i + 1]].tolist(),
                                c.ms_mid[st].tolist(), c.ms_kind[st].tolist(), c.ms_int[st].tolist(), dbl,
                                c.ms_obj[st].tolist())
    return out


def assert_identical(a, b) -> None:
    """Two readings of one file: the same trace, column by column, metadata included."""
    assert a.n_events == b.n_events
    for k in ("start_ns", "dur_ns", "track"):
        assert np.array_equal(a.events[k], b.events[k]), k
    for k in ("name", "category"):
        assert a.names().tolist() == b.names().tolist() if k == "name" else \
            a.categories().tolist() == b.categories().tolist(), k
    assert list(a.stats) == list(b.stats)
    for key, col in a.stats.items():
        other = b.stats[key]
        assert np.array_equal(col.rows, other.rows) and col.values.dtype == other.values.dtype, key
        if col.values.dtype.kind == "f":
            assert np.array_equal(col.values, other.values, equal_nan=True), key
        else:
            assert col.values.tolist() == other.values.tolist(), key
    assert a.planes == b.planes and a.tracks == b.tracks
    assert a.metadata == b.metadata
    def flows(t) -> list[tuple]:
        return sorted(zip(t.flows["src"].tolist(), t.flows["dst"].tolist(), t.flows["id"].tolist(),
                          [t.strings[c] for c in t.flows["category"].tolist()]))
    assert flows(a) == flows(b)
    assert np.array_equal(a.counters["ts_ns"], b.counters["ts_ns"])
    assert np.array_equal(a.counters["value"], b.counters["value"], equal_nan=True)


def both_ways(data: bytes) -> None:
    """The compiled walk of ``data`` equals protobuf's reading of it."""
    space = xplane_pb2.XSpace.FromString(data)
    assert_same_columns(decode.columns_from_bytes(data), decode.columns_from_messages(space))


def without_extension(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(decode, "_wire", None)


@pytest.fixture(scope="module")
def shared_xspaces(traces_dir: Path) -> dict[str, bytes]:
    """The shared XSpace traces, and polyprof's XSpace export of every shared Kineto trace."""
    out = {p.name: p.read_bytes() for p in sorted((traces_dir / "xspace").glob("*.xplane.pb"))}
    for p in sorted((traces_dir / "kineto").glob("*.json.gz")):
        out[p.name] = xspace_writer.to_bytes(load(p))
    assert len(out) >= 12
    return out


def test_compiled_decode_equals_protobuf_on_every_shared_trace(shared_xspaces: dict[str, bytes]) -> None:
    for name, data in shared_xspaces.items():
        cols = decode.columns_from_bytes(data)
        assert cols.n_events > 0, name
        both_ways(data)


def test_reader_with_and_without_the_extension_agree(shared_xspaces: dict[str, bytes],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fast = {name: xspace.from_bytes(data) for name, data in shared_xspaces.items()}
    without_extension(monkeypatch)
    for name, data in shared_xspaces.items():
        assert_identical(fast[name], xspace.from_bytes(data))


def test_writer_with_and_without_the_extension_agree(shared_xspaces: dict[str, bytes]) -> None:
    for name, data in shared_xspaces.items():
        trace = xspace.from_bytes(data)
        fast, slow = writer.to_space(trace), writer.to_space(trace, compiled=False)
        assert fast == slow, name
        assert fast.SerializeToString() == slow.SerializeToString(), name


def _tag(field: int, wt: int) -> bytes:
    return _varint(field << 3 | wt)


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(field: int, body: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(body)) + body


def test_kinds_a_file_lacks_hold_no_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile whose event stats are integers only (a JAX CPU profile's) and with no
    num_occurrences: its num_occurrences column is one value repeated (stride 0), which
    reads and indexes as the full column does, it has no text values, its doubles are the
    int column's memory, and the reader keeps its stats' positions, rows and key codes as
    int32; the Trace is the same without the extension."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.stat_metadata[1].name = "hlo_op"
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[70000].name = "far_key"  # an id past the lookup table: sorted instead
    plane.stat_metadata[70000].id = 70000
    plane.event_metadata[5].id = 5
    plane.event_metadata[5].name = "fusion"
    line = plane.lines.add(id=1, name="XLA Ops", timestamp_ns=1000)
    for i in range(20):
        ev = line.events.add(metadata_id=5, offset_ps=i * 2000 + 1, duration_ps=999)
        ev.stats.add(metadata_id=1, int64_value=i)
        ev.stats.add(metadata_id=70000 if i % 2 else 1, uint64_value=i + 1)
    data = space.SerializeToString()
    both_ways(data)
    cols = decode.columns_from_bytes(data)
    col = cols.ev_nocc
    assert col.strides == (0,) and len(col) == 20
    assert col[np.array([0, 3])].tolist() == [col[0]] * 2 and col.flags.owndata is False
    assert len(cols.st_text) == 0 and len(cols.st_dbl) == 40 and np.shares_memory(cols.st_dbl, cols.st_int)
    assert decode.stat_objects(cols.st_kind, cols.st_int, cols.st_text).tolist() == [None] * 40
    trace = xspace.from_bytes(data)
    assert trace.stats["hlo_op"].values.tolist()[:3] == [1, 1, 3]  # the last of the key counts
    assert trace.stats["far_key"].values.tolist()[:2] == [2, 4]
    assert trace.start_ns.tolist()[:2] == [1000, 1002] and trace.dur_ns.tolist()[:2] == [1, 1]
    without_extension(monkeypatch)
    assert_identical(trace, xspace.from_bytes(data))


def test_wire_oddities_read_as_protobuf_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown fields of every wire type (a group too), a known field with another wire
    type, repeated scalars (the last wins), both oneof members (the last wins), a
    10-byte negative varint, empty stats and events."""
    stat_a = (_tag(1, 0) + _varint(7) + _tag(4, 0) + _varint(-5) + _tag(2, 1) + struct.pack("<d", 2.5)
              + _tag(9, 5) + b"\x01\x02\x03\x04")
    stat_b = _tag(1, 0) + _varint(8) + _ld(5, "héllo".encode()) + _ld(6, b"\x00\xff")
    stat_c = _tag(1, 0) + _varint(9) + _tag(3, 0) + _varint(2**64 - 1) + _tag(7, 0) + _varint(3)
    group = _tag(12, 3) + _tag(1, 0) + _varint(1) + _ld(2, b"x") + _tag(12, 4)
    ev1 = (_tag(1, 0) + _varint(3) + _tag(5, 0) + _varint(4) + _tag(2, 0) + _varint(-100) + _tag(3, 0)
           + _varint(10) + _tag(3, 0) + _varint(11) + _ld(4, stat_a) + group + _ld(4, stat_b) + _ld(4, b""))
    ev2 = _tag(2, 0) + _varint(5) + _tag(5, 0) + _varint(6) + _ld(4, stat_c) + _tag(1, 2) + _varint(0)
    line = _tag(1, 0) + _varint(1) + _ld(2, b"L") + _ld(4, ev1) + _ld(4, b"") + _ld(4, ev2) + _tag(3, 1) + b"\0" * 8
    # event metadata: packed and unpacked child ids, a stat, a key given twice, no value
    md1 = (_tag(1, 0) + _varint(3) + _ld(2, b"op") + _ld(4, b"shown") + _ld(3, b"\x01proto") + _ld(6, _varint(5)
           + _varint(-1)) + _tag(6, 0) + _varint(9) + _ld(5, stat_b) + _tag(9, 0) + _varint(1))
    entries = (_ld(4, _tag(1, 0) + _varint(3) + _ld(2, _ld(2, b"first"))) + _ld(4, _tag(1, 0) + _varint(3)
               + _ld(2, md1)) + _ld(4, _tag(1, 0) + _varint(8)) + _ld(4, _ld(2, _ld(2, b"keyless"))))
    plane = _ld(2, b"/device:TPU:0") + _ld(3, line) + entries + _ld(3, b"") + _tag(15, 5) + b"\0" * 4
    data = _ld(1, plane) + _ld(4, b"host") + _ld(1, _ld(2, b"/host:CPU"))
    both_ways(data)
    cols = decode.columns_from_bytes(data)
    assert cols.line_events.tolist() == [3, 0] and cols.plane_lines.tolist() == [2, 0]
    assert cols.ev_off.tolist() == [-100, 0, 0] and cols.ev_isnocc.tolist() == [False, False, True]
    assert cols.st_kind.tolist() == [1, 5, 0, 6] and cols.st_dbl[0] == 2.5
    assert decode.stat_objects(cols.st_kind, cols.st_int, cols.st_text).tolist() == [None, b"\x00\xff", None, None]
    md = metadata_entries(cols)
    assert md[(0, 3)][:4] == ("op", "shown", b"\x01proto", [5, -1, 9]) and md[(0, 3)][5] == [5]
    assert md[(0, 8)][:3] == ("", "", b"") and md[(0, 0)][0] == "keyless"
    fast = xspace.from_bytes(data)
    assert fast.names().tolist()[:1] == ["shown"]  # the second entry of id 3 counts
    without_extension(monkeypatch)
    assert_identical(fast, xspace.from_bytes(data))


@pytest.mark.parametrize("cut", [1, 2, 5, 17, 40])
def test_malformed_wire_data_raises_value_error(cut: int) -> None:
    space = xplane_pb2.XSpace()
    p = space.planes.add()
    p.name = "/host:CPU"
    e = p.lines.add().events.add()
    e.offset_ps = 12345
    s = e.stats.add()
    s.str_value = "a string long enough to cut"
    data = space.SerializeToString()
    with pytest.raises(ValueError):
        decode.columns_from_bytes(data[:-cut])
    with pytest.raises(ValueError):
        decode.columns_from_bytes(b"\x0a\x05" + _tag(0, 0) + b"\x01\x02\x03")  # field number 0


@pytest.mark.parametrize("item", [b"\x0a\x00",  # an empty plane
                                  b"\x1a\x00",  # an empty line of the plane
                                  b"\x22\x00"])  # an empty event metadata entry of the plane
def test_a_file_of_empty_messages_is_refused_before_its_objects_are_built(tmp_path: Path, item: bytes) -> None:
    """Two bytes of wire data an item, each a Python object of a hundred bytes or more: 5M
    empty planes (a 10 MB file) took 1.2 GB before "planes have no names", 5M empty lines
    700 MB and 7.8 s read as an empty trace. Now refused at 65,536 items and one per 16
    bytes, with a TraceFormatError naming the file (never protobuf's reading after it)."""
    body = item * 5_000_000
    if item != b"\x0a\x00":  # inside one plane named /host:CPU
        plane = b"\x12\x09/host:CPU" + body
        body = b"\x0a" + _varint(len(plane)) + plane
    path = tmp_path / "hostile.xplane.pb"
    path.write_bytes(body)
    with pytest.raises(OverflowError, match="more planes, lines and metadata entries"):
        decode.columns_from_bytes(body)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TraceFormatError, match=r"hostile\.xplane\.pb: not an XSpace profile: it holds more planes"):
        decode.columns(body, str(path))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300_000  # KiB: not the 1.2 GB


def test_real_profiles_hold_far_fewer_items_than_the_bound(shared_xspaces: dict[str, bytes]) -> None:
    for name, data in shared_xspaces.items():
        c = decode.columns_from_bytes(data)
        items = len(c.planes) + len(c.lines) + len(c.md_key)
        assert items <= 65_536 + len(data) // 64, name  # a fourth of the bound at most


def _repeated_text_xspace(n: int) -> bytes:
    """``n`` events of one op, each with four stats: two str values of a few distinct
    (a Kineto export's input shapes and types), a bytes value, a double."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    for sid, name in ((1, "Input Dims"), (2, "Input type"), (3, "blob"), (4, "scale")):
        plane.stat_metadata[sid].id = sid
        plane.stat_metadata[sid].name = name
    plane.event_metadata[5].id = 5
    plane.event_metadata[5].name = "aten::add"
    line = plane.lines.add(id=1, name="python", timestamp_ns=1000)
    dims, types = ["[[1, 1, 1], [1]]", "[[8, 8]]", "[]"], ["float", "int"]
    for i in range(n):
        ev = line.events.add(metadata_id=5, offset_ps=i * 2000, duration_ps=1000)
        ev.stats.add(metadata_id=1, str_value=dims[i % 3])
        ev.stats.add(metadata_id=2, str_value=types[i % 2])
        ev.stats.add(metadata_id=3, bytes_value=b"[]")  # the same bytes as a str value: never shared with it
        ev.stats.add(metadata_id=4, double_value=i / 4)
    return space.SerializeToString()


def test_repeated_text_values_are_one_object_each() -> None:
    """A text value a thousand stats hold is decoded once: the columns hold the distinct
    values (dictionary-coded, both ways), every stat of one value gets that one object,
    and a bytes value never stands for the str of the same bytes."""
    data = _repeated_text_xspace(1000)
    for cols in (decode.columns_from_bytes(data), decode.columns_from_messages(xplane_pb2.XSpace.FromString(data))):
        assert cols.st_text.tolist() == ["[[1, 1, 1], [1]]", "float", b"[]", "[[8, 8]]", "int", "[]"]
        objs = decode.stat_objects(cols.st_kind, cols.st_int, cols.st_text)
        assert len({id(v) for v in objs.tolist() if v is not None}) == 6
        assert objs[0] is objs[12] and objs[2] is objs[3998] and objs[8].__class__ is str
        assert objs[4 * 999 + 3] is None and cols.st_dbl[4 * 999 + 3] == 999 / 4
    trace = xspace.from_bytes(data)
    assert trace.stats["Input Dims"].values.tolist()[:4] == ["[[1, 1, 1], [1]]", "[[8, 8]]", "[]", "[[1, 1, 1], [1]]"]
    assert trace.stats["blob"].values.tolist()[:2] == [b"[]", b"[]"]
    assert trace.stats["scale"].values.tolist()[:3] == [0.0, 0.25, 0.5]


def test_memory_of_a_read_does_not_grow_with_repeated_text() -> None:
    """The sweep's 3M-event XSpace took 590 B an event: one Python object per text stat
    (1.6M at 1M events), a double column for 3% of doubles, each stat's event row kept.
    Decoded, 20k events of four stats keep about 25 bytes a stat (78 with an object per
    value); read into a Trace, about 95 B an event (324 before), at a peak of about 250
    (470 before). tracemalloc counts Python's and NumPy's allocations, the same on every
    run."""
    import gc
    import tracemalloc

    data = _repeated_text_xspace(20_000)
    gc.collect()
    tracemalloc.start()
    try:
        cols = decode.columns_from_bytes(data)
        kept = tracemalloc.get_traced_memory()[0] / len(cols.st_kind)
        del cols
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        trace = xspace.from_bytes(data)
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert trace.n_events == 20_000
    assert kept < 40, f"{kept:.0f} B kept a decoded stat"
    assert (now - base) / 20_000 < 160 and (peak - base) / 20_000 < 360, (now - base, peak - base)


def test_reader_falls_back_to_protobuf_where_the_walk_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file protobuf accepts but the compiled walk does not (simulated: the walk
    raises) is read through protobuf, with the same result."""
    data = xspace_writer.to_bytes(_small_trace())
    expected = xspace.from_bytes(data)

    class Refusing:
        @staticmethod
        def columns(data: bytes) -> tuple:
            raise ValueError("refused")

        encode = None

    monkeypatch.setattr(decode, "_wire", Refusing)
    assert_identical(expected, xspace.from_bytes(data))


def _small_trace():
    from polyprof.trace.builder import TraceBuilder

    b = TraceBuilder()
    p = b.plane("/host:CPU", "host", pid=1)
    t = b.track(p, "main", "thread", tid=1)
    b.events(t, np.asarray(["a", "b"], object), np.asarray([10, 20]), np.asarray([5, 5]), "cpu_op",
             stats={"x": np.asarray([1, 2]), "s": np.asarray(["u", "v"], object)})
    return b.build()


# ----------------------------------------------------------------------------- hypothesis
_i64 = st.integers(min_value=-2**63, max_value=2**63 - 1)
_u64 = st.integers(min_value=0, max_value=2**64 - 1)
_small = st.integers(min_value=-3, max_value=3)
_SETTINGS = settings(max_examples=int(os.environ.get("POLYPROF_FUZZ_EXAMPLES", "60")), deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                     derandomize=True)


def _stat(draw, st_msg, ids: list[int]) -> None:
    st_msg.metadata_id = draw(st.sampled_from(ids) if ids and draw(st.booleans()) else _small)
    which = draw(st.sampled_from(["double", "uint64", "int64", "str", "bytes", "ref", "none"]))
    if which == "double":
        st_msg.double_value = draw(st.floats(allow_nan=True))
    elif which == "uint64":
        st_msg.uint64_value = draw(_u64)
    elif which == "int64":
        st_msg.int64_value = draw(_i64)
    elif which == "str":  # often a value given before (shared), or another stat's bytes value as text
        st_msg.str_value = draw(st.sampled_from(["", "1,1,1", "é"]) if draw(st.booleans()) else st.text(max_size=6))
    elif which == "bytes":
        st_msg.bytes_value = draw(st.sampled_from([b"", b"1,1,1", "é".encode()]) if draw(st.booleans())
                                  else st.binary(max_size=6))
    elif which == "ref":
        st_msg.ref_value = draw(st.sampled_from(ids) if ids and draw(st.booleans()) else _u64) % (1 << 64)


@st.composite
def xspaces(draw) -> bytes:
    """XSpaces with every event and stat field, both oneofs, huge and negative values."""
    space = xplane_pb2.XSpace()
    for _ in range(draw(st.integers(1, 3))):
        plane = space.planes.add()
        plane.id = draw(_small)
        plane.name = draw(st.sampled_from(["/host:CPU", "/device:GPU:0", "/device:TPU:1", "/host:metadata", "x"]))
        ids = draw(st.lists(st.integers(0, 6), max_size=4, unique=True))
        for sid in ids:
            plane.stat_metadata[sid].id = sid
            plane.stat_metadata[sid].name = draw(st.sampled_from(["a", "b", "flow", "step_num", "correlation_id",
                                                                  "hlo_op", "kernel_details"]))
        mids = draw(st.lists(st.integers(0, 5), max_size=4, unique=True))
        for mid in mids:
            md = plane.event_metadata[mid]
            md.id, md.name = mid, draw(st.text(max_size=5))
            md.display_name = draw(st.sampled_from(["", "shown"]))
            for _ in range(draw(st.integers(0, 2))):
                _stat(draw, md.stats.add(), ids)
        for _ in range(draw(st.integers(0, 3))):
            line = plane.lines.add()
            line.id, line.timestamp_ns = draw(_small), draw(st.integers(-10**12, 10**12))
            line.name = draw(st.sampled_from(["Steps", "XLA Ops", "Stream #1", "", "t"]))
            for _ in range(draw(st.integers(0, 4))):
                e = line.events.add()
                e.metadata_id = draw(st.sampled_from(mids) if mids and draw(st.booleans()) else _small)
                if draw(st.booleans()):
                    e.offset_ps = draw(st.integers(-10**15, 10**15))
                else:
                    e.num_occurrences = draw(st.integers(0, 5))
                e.duration_ps = draw(st.integers(0, 10**15))
                for _ in range(draw(st.integers(0, 3))):
                    _stat(draw, e.stats.add(), ids)
    return space.SerializeToString()


@_SETTINGS
@given(data=xspaces())
def test_hypothesis_compiled_decode_equals_protobuf(data: bytes) -> None:
    both_ways(data)


@_SETTINGS
@given(data=xspaces())
def test_hypothesis_reader_with_and_without_the_extension(data: bytes) -> None:
    from polyprof.errors import TraceFormatError

    try:
        fast = xspace.from_bytes(data)
    except TraceFormatError as e:
        fast_error = str(e)
    else:
        fast_error = ""
    saved = decode._wire
    decode._wire = None
    try:
        slow = xspace.from_bytes(data)
    except TraceFormatError as e:
        assert str(e) == fast_error
        return
    finally:
        decode._wire = saved
    assert not fast_error
    assert_identical(fast, slow)


@_SETTINGS
@given(data=xspaces(), cut=st.integers(1, 64), flip=st.integers(0, 10**6))
def test_hypothesis_damaged_bytes_never_disagree(data: bytes, cut: int, flip: int) -> None:
    """Damaged XSpaces: where protobuf accepts the bytes, the compiled walk gives what
    protobuf gives; where protobuf refuses them, so does the walk (ValueError), so the
    reader (which uses the walk alone) reports what protobuf would."""
    damaged = bytearray(data[:max(1, len(data) - cut)] if flip % 2 else data)
    if damaged:
        damaged[flip % len(damaged)] ^= 1 << (flip % 8)
    damaged_b = bytes(damaged)
    try:
        space = xplane_pb2.XSpace.FromString(damaged_b)
    except Exception:
        space = None
    try:
        cols = decode.columns_from_bytes(damaged_b)
    except (ValueError, UnicodeDecodeError):
        cols = None
    if space is None:
        assert cols is None, "the walk reads bytes protobuf refuses"
    elif cols is not None:  # the walk may refuse a map entry with two values; else the same columns
        assert_same_columns(cols, decode.columns_from_messages(space))


@st.composite
def event_columns(draw) -> tuple:
    n = draw(st.integers(0, 6))
    nst = [draw(st.integers(0, 3)) for _ in range(n)]
    kinds = [draw(st.integers(0, 6)) for _ in range(sum(nst))]
    ints = [draw(_i64) for _ in kinds]
    objs = [draw(st.text(max_size=5) if k == 4 else st.binary(max_size=5)) for k in kinds if k in (4, 5)]
    return (np.asarray([draw(_i64) for _ in range(n)], np.int64), np.asarray([draw(_i64) for _ in range(n)]),
            np.asarray([draw(_i64) for _ in range(n)]), np.asarray(nst, np.int64),
            np.asarray([draw(_i64) for _ in kinds], np.int64), np.asarray(kinds, np.uint8),
            np.asarray(ints, np.int64), np.asarray([draw(st.floats()) for _ in kinds], np.float64), objs)


@_SETTINGS
@given(cols=event_columns())
def test_hypothesis_compiled_encode_equals_protobuf(cols: tuple) -> None:
    fast = encode.encode_events(*cols)
    slow = encode.encode_events(*cols, compiled=False)
    assert xplane_pb2.XLine.FromString(fast) == xplane_pb2.XLine.FromString(slow) or _nan_in(cols)
    assert fast == slow


def _nan_in(cols: tuple) -> bool:
    return bool(np.isnan(cols[7]).any())
