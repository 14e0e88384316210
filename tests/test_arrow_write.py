"""trace/arrow_write.py writes Arrow IPC without pyarrow: real pyarrow and polyprof's
own readers read it, every column type the trace and journal schemas use, and it
holds what pyarrow's own writer writes from the same values."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polyprof
from polyprof.trace import arrow_columns as ac
from polyprof.formats import arrow_ipc, journal_layout, native
from polyprof.trace import arrow_write, native_write
from polyprof.formats.safety import Inflation

INTS = {f"{s}int{b}": (getattr(pa, f"{s}int{b}")(), b, s == "") for s in ("", "u") for b in (8, 16, 32, 64)}
FLOATS = {"float16": (pa.float16(), np.float16), "float32": (pa.float32(), np.float32),
          "float64": (pa.float64(), np.float64)}
PA = {**{k: v[0] for k, v in INTS.items()}, **{k: v[0] for k, v in FLOATS.items()}, "bool": pa.bool_(),
      "string": pa.string(), "binary": pa.binary(), "large_string": pa.large_string(),
      "large_binary": pa.large_binary()}


def _values(type: str, n: int, rng: np.random.Generator, nulls: bool) -> list:
    if type in INTS:
        _, bits, signed = INTS[type]
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        vals: list = [int(x) for x in rng.integers(lo, hi, n, dtype=np.int64 if bits < 64 or signed else np.uint64,
                                                   endpoint=True)]
    elif type in FLOATS:
        vals = [float(x) for x in rng.normal(size=n).astype(FLOATS[type][1])]
    elif type == "bool":
        vals = [bool(x) for x in rng.integers(0, 2, n)]
    elif "string" in type:
        vals = ["".join(rng.choice(list("ab é日\x00"), rng.integers(0, 6))) for _ in range(n)]
    else:
        vals = [bytes(rng.integers(0, 256, rng.integers(0, 6), dtype=np.uint8)) for _ in range(n)]
    if nulls:
        vals = [None if rng.random() < 0.3 else v for v in vals]
    return vals


def _read_with_pyarrow(data: bytes) -> pa.Table:
    t = ipc.open_file(pa.BufferReader(data)).read_all()
    t.validate(full=True)
    return t


def _pyarrow_file(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("n", [0, 1, 9, 100])
def test_every_type_reads_back_in_pyarrow_and_in_polyprof(n, nulls):
    rng = np.random.default_rng(n + 7 * nulls)
    values = {t: _values(t, n, rng, nulls) for t in PA}
    data = arrow_write.file_bytes({t: ac.column(v, t) for t, v in values.items()}, {"who": "polyprof"})
    want = pa.table({t: pa.array(v, PA[t]) for t, v in values.items()})
    got = _read_with_pyarrow(data)
    assert got.schema.equals(want.schema)
    assert got.schema.metadata == {b"who": b"polyprof"}
    assert got.equals(want)
    own = arrow_ipc.read_file(data, Path("x.arrow"), "x.arrow", Inflation(Path("x.arrow"), len(data) + 1, "test"))
    assert own.equals(want)
    # what pyarrow's writer writes from the same values reads back the same, and its
    # record batch body (every buffer, its offset and padding) is byte for byte ours
    theirs = _pyarrow_file(want)
    assert _read_with_pyarrow(theirs).equals(got)
    if n:  # (pyarrow writes no batch for a table of no rows; ours is one of length 0)
        assert _messages(data) == _messages(theirs)


def _messages(data: bytes) -> list[tuple[str, bytes | None]]:
    """(type, body) of each message of an IPC file."""
    reader = ipc.MessageReader.open_stream(pa.py_buffer(data)[8:])
    out = []
    while True:
        try:
            m = reader.read_next_message()
        except StopIteration:
            return out
        out.append((m.type, None if m.body is None else m.body.to_pybytes()))


def test_numpy_columns_keep_their_dtype():
    cols = {"i32": np.array([1, -2, 3], np.int32), "u64": np.array([0, 2**64 - 1, 5], np.uint64),
            "f": np.array([0.5, np.nan, -np.inf]), "b": np.array([True, False, True]),
            "strided": np.arange(12, dtype=np.int64)[::4]}
    got = _read_with_pyarrow(arrow_write.file_bytes({k: ac.column(v) for k, v in cols.items()}))
    for k, v in cols.items():
        out = got.column(k).to_numpy()
        assert out.dtype == v.dtype, k
        np.testing.assert_array_equal(out, v)


def test_all_null_columns():
    cols = {t: ac.nulls(5, t) for t in PA}
    got = _read_with_pyarrow(arrow_write.file_bytes(cols))
    for t in PA:
        assert got.column(t).type == PA[t]
        assert got.column(t).null_count == 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(PA)), min_size=1, max_size=6), st.integers(0, 40), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_random_tables_read_back_equal(types, n, nulls, seed):
    rng = np.random.default_rng(seed)
    values = {f"c{i}_{t}": (t, _values(t, n, rng, nulls)) for i, t in enumerate(types)}
    got = _read_with_pyarrow(arrow_write.file_bytes({k: ac.column(v, t) for k, (t, v) in values.items()}))
    assert got.equals(pa.table({k: pa.array(v, PA[t]) for k, (t, v) in values.items()}))


def test_stream_of_batches_with_metadata():
    sink = io.BytesIO()
    w = arrow_write.StreamWriter(sink, journal_layout.FIELDS, {b"polyprof": b'{"pid": 1}'})
    head = sink.getvalue()
    w.write_batch(journal_layout.columns(journal_layout.SECTION, 2, name=["a", "é"], start_ns=[1, 2], end_ns=[3, 4],
                                         ident=[7, 7], stats=[None, '{"k": 1}']))
    w.write_batch(journal_layout.columns(journal_layout.STEP, 1, start_ns=[9]))
    w.close()
    data = sink.getvalue()
    reader = ipc.open_stream(pa.BufferReader(data))
    assert reader.schema.equals(journal_layout.schema())
    assert reader.schema.metadata == {b"polyprof": b'{"pid": 1}'}
    t = reader.read_all()
    assert t.column("kind").to_pylist() == [journal_layout.SECTION] * 2 + [journal_layout.STEP]
    assert t.column("name").to_pylist() == ["a", "é", None]
    assert t.column("stats").to_pylist() == [None, '{"k": 1}', None]
    assert t.column("start_ns").to_pylist() == [1, 2, 9]
    # the schema alone (a program killed before its first flush) is a valid, empty stream
    assert ipc.open_stream(pa.BufferReader(head)).read_all().num_rows == 0
    # polyprof's bounded reader reads it too
    own = list(arrow_ipc.Stream(pa.py_buffer(data), Inflation(Path("j"), len(data), "test")))
    assert sum(b.num_rows for b in own) == 3


def test_a_column_of_the_wrong_type_or_length_is_refused():
    sink = io.BytesIO()
    w = arrow_write.StreamWriter(sink, [("a", "int64"), ("b", "string")])
    with pytest.raises(ValueError, match="column 'b'"):
        w.write_batch([ac.column(np.arange(2)), ac.column(np.arange(2))])
    with pytest.raises(ValueError, match="column 'b'"):
        w.write_batch([ac.column(np.arange(2)), ac.column(["x"], "string")])
    with pytest.raises(ac.ColumnTypeError):
        ac.column(np.array(["x"]))


def test_small_and_big_traces_load_the_same(tmp_path, monkeypatch, kineto_files):
    """A real trace (stats of every kind) written by the Python writer and by pyarrow's
    (with zstd): both load back equal to the trace saved."""
    trace = polyprof.load(kineto_files[0])
    monkeypatch.setattr(native_write, "SMALL_TRACE_BYTES", 1 << 62)
    small = native_write.save(trace, tmp_path / "small.polyprof")
    monkeypatch.setattr(native_write, "SMALL_TRACE_BYTES", 0)
    big = native_write.save(trace, tmp_path / "big.polyprof")
    a, b = native.load(small), native.load(big)
    for t in (a, b):
        assert t.strings == trace.strings
        for k, v in trace.events.items():
            np.testing.assert_array_equal(t.events[k], v)
        assert set(t.stats) == set(trace.stats)
    for k in trace.stats:
        np.testing.assert_array_equal(a.stats[k].rows, b.stats[k].rows)
        np.testing.assert_array_equal(a.stats[k].values, b.stats[k].values)
        assert a.stats[k].values.dtype == b.stats[k].values.dtype, k
    import zipfile

    with zipfile.ZipFile(big) as zb, zipfile.ZipFile(small) as zs:  # the big path compresses
        assert len(zb.read("events.arrow")) < len(zs.read("events.arrow"))
