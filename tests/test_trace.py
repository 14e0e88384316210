"""The trace schema: builder, stats, merge, validation, native file, tables."""

from __future__ import annotations

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError, TraceSchemaError
from polyprof.trace import Kind, TraceBuilder, merge


def sample_trace() -> polyprof.Trace:
    b = TraceBuilder(metadata={"source": {"format": "test"}, "rank": 3})
    host = b.plane("/host:CPU", "host", pid=42, properties={"hostname": "h"})
    dev = b.plane("/device:GPU:0", "device", vendor="acme", index=0, properties={"sm": 80})
    t = b.track(host, "main", "thread", tid=7)
    s = b.track(dev, "stream 7", "stream", tid=7)
    launch = b.event(t, "cudaLaunchKernel", 100, 10, "cuda_runtime", correlation_id=5)
    b.event(t, "forward", 50, 500, "section", layer=2, ratio=0.5, tag="x", blob=b"\x00\x01")
    rows = b.events(s, np.array(["gemm", "relu"], object), np.array([200, 300]), np.array([50, 20]),
                    "kernel", stats={"correlation_id": np.array([5, 6]), "grid": np.array(["1,1,1", "2,1,1"], object)})
    b.flow(launch, int(rows[0]), 5, "ac2g")
    b.counter(host, "rss", [0, 10, 20], [1.0, 2.0, 3.0])
    b.add_stat("big", [0], np.array([2**63 + 5], np.uint64))
    return b.build()


def test_builder_columns_and_stats():
    tr = sample_trace()
    assert tr.n_events == 4
    assert list(tr.names()) == ["cudaLaunchKernel", "forward", "gemm", "relu"]
    assert tr.stats["correlation_id"].rows.tolist() == [0, 2, 3]
    assert tr.stats["correlation_id"].values.tolist() == [5, 5, 6]
    assert tr.stats["ratio"].values.dtype == np.float64
    assert tr.stats["big"].values.dtype == np.uint64
    assert tr.event_stats(1) == {"layer": 2, "ratio": 0.5, "tag": "x", "blob": b"\x00\x01"}
    assert tr.kinds.tolist() == [Kind.RUNTIME, Kind.ANNOTATION, Kind.KERNEL, Kind.KERNEL]
    assert tr.stat_dense("correlation_id", -1).tolist() == [5, -1, 5, 6]


def test_native_roundtrip_is_lossless(tmp_path):
    tr = sample_trace()
    path = tr.save(tmp_path / "t.polyprof")
    back = polyprof.load(path)
    assert back.strings == tr.strings
    for col in tr.events:
        np.testing.assert_array_equal(back.events[col], tr.events[col])
        assert back.events[col].dtype == tr.events[col].dtype
    assert set(back.stats) == set(tr.stats)
    for k, col in tr.stats.items():
        np.testing.assert_array_equal(back.stats[k].rows, col.rows)
        assert back.stats[k].values.tolist() == col.values.tolist()
        assert back.stats[k].kind == col.kind
    for col in tr.flows:
        np.testing.assert_array_equal(back.flows[col], tr.flows[col])
    np.testing.assert_array_equal(back.counters["value"], tr.counters["value"])
    assert back.planes == tr.planes and back.tracks == tr.tracks
    assert back.metadata == tr.metadata


def test_merge_matches_planes_and_offsets_rows():
    a, b = sample_trace(), sample_trace()
    m = merge([a, b])
    assert m.n_events == 8
    assert len(m.planes) == 2 and len(m.tracks) == 2  # same names -> same planes/tracks
    assert m.flows["src"].tolist() == [0, 4] and m.flows["dst"].tolist() == [2, 6]
    assert m.stats["correlation_id"].rows.tolist() == [0, 2, 3, 4, 6, 7]
    assert len(m.counters["ts_ns"]) == 6


def test_merge_mixed_stat_kinds_widen():
    b1, b2 = TraceBuilder(), TraceBuilder()
    for b, v in ((b1, 3), (b2, "three")):
        t = b.track(b.plane("/host:CPU"), "main")
        b.event(t, "x", 0, 1, "section", k=v)
    m = merge([b1.build(), b2.build()])
    assert m.stats["k"].values.tolist() == ["3", "three"]


def test_arrow_and_pandas_views():
    tr = sample_trace()
    df = tr.to_pandas()
    assert len(df) == 4
    assert df.loc[2, "name"] == "gemm" and df.loc[2, "plane"] == "/device:GPU:0"
    assert df.loc[2, "end_ns"] == 250
    assert df["correlation_id"].isna().tolist() == [False, True, False, False]
    assert df["correlation_id"].iloc[0] == 5 and str(df["correlation_id"].dtype) == "Int64"
    tabs = tr.tables()
    assert set(tabs) == {"events", "flows", "counters", "planes", "tracks"}
    assert tabs["flows"].num_rows == 1


@pytest.mark.parametrize("breakage, message", [
    (lambda t: t.events.__setitem__("dur_ns", np.array([-1, 0, 0, 0])), "negative"),
    (lambda t: t.events.__setitem__("track", np.array([0, 0, 9, 0])), "track"),
    (lambda t: t.events.__setitem__("start_ns", np.array([1, 2])), "length"),
    (lambda t: t.flows.__setitem__("dst", np.array([99])), "flow"),
])
def test_validate_rejects_malformed(breakage, message):
    tr = sample_trace()
    breakage(tr)
    with pytest.raises(TraceSchemaError, match=message):
        tr.validate()


def test_load_errors_name_file_and_problem(tmp_path):
    bad = tmp_path / "junk.polyprof"
    bad.write_bytes(b"PK\x03\x04 definitely not a zip")
    with pytest.raises(TraceFormatError, match="junk.polyprof"):
        polyprof.load(bad)
    with pytest.raises(TraceFormatError, match="no such file"):
        polyprof.load(tmp_path / "missing.polyprof")
    rnd = tmp_path / "random.bin"
    rnd.write_bytes(np.random.default_rng(0).bytes(1000))
    with pytest.raises(polyprof.PolyprofError, match="random.bin"):
        polyprof.load(rnd)


def test_parquet_export_is_the_event_table(tmp_path):
    import duckdb

    from polyprof.formats.parquet import write

    tr = sample_trace()
    path = write(tr, tmp_path / "t.parquet")
    rows = duckdb.sql(f"SELECT name, dur_ns, correlation_id FROM '{path}' ORDER BY start_ns").fetchall()
    assert rows == [("forward", 500, None), ("cudaLaunchKernel", 10, 5), ("gemm", 50, 5), ("relu", 20, 6)]
    import pyarrow.parquet as pq

    assert b"polyprof" in pq.read_schema(path).metadata


def test_collective_names_in_one_search_as_one_by_one():
    """The joined search for communication kernels names what the per-name test names,
    with names whose lower case is longer (İ), NULs, and several markers in one name."""
    import random

    from polyprof.trace.categories import collective_names, is_collective_name

    pool = ["ncclKernel_AllReduce_RING", "void gemm<float>", "İİnccl", "ncc\0l", "x\0nccl", "all-gather.3",
            "AllToAll", "broadcast_fusion", "", "RCCL_sendrecv", "reduce_scatter_İ", "copy-start", "İ" * 5 + "rccl"]
    rng = random.Random(3)
    for _ in range(200):
        names = [rng.choice(pool) + rng.choice(["", "İ", "a", "\0"]) for _ in range(rng.randrange(0, 12))]
        assert collective_names(names).tolist() == [is_collective_name(n) for n in names], names
    assert collective_names(["x", "nccl"]).tolist() == [False, True]


def test_rows_of_kind_is_isin_of_the_kinds(kineto_files):
    """The byte-table lookup of rows_of_kind against np.isin it stands in for."""
    import itertools

    for path in kineto_files[:4]:
        t = polyprof.load(path)
        for r in (1, 2, 3):
            for kinds in itertools.islice(itertools.combinations(list(Kind), r), 40):
                want = np.flatnonzero(np.isin(t.kinds, np.asarray(kinds, np.int8)))
                assert np.array_equal(t.rows_of_kind(*kinds), want), (path.name, kinds)
        assert len(t.rows_of_kind()) == 0


def test_builder_events_copied_once_or_kept_as_given():
    """``events()`` owns a copy of each column by default (the caller may change its
    arrays after); ``copy=False`` keeps the arrays already of their type as the Trace's
    columns (a big Kineto load's), converting only the others; one chunk of events
    becomes the Trace's columns without another copy."""
    def columns():
        return (np.array([0, 0, 0], np.int32), np.array([1, 1, 2], np.int64),
                np.array([10, 20, 30], np.int64), np.array([5, 5, 5], np.int64))

    for copy in (True, False):
        b = TraceBuilder()
        plane = b.plane("/host:CPU", "host")
        b.track(plane, "main", "thread", 1)
        b.intern("a")
        b.intern("b")
        b.intern("c")
        track, name, start, dur = columns()
        b.events(track, name, start, dur, "cpu_op", copy=copy)
        t = b.build()
        assert (t.events["start_ns"] is start) is (not copy) and (t.events["dur_ns"] is dur) is (not copy)
        assert (t.events["track"] is track) is (not copy)
        assert t.events["name"] is not name and t.events["name"].dtype == np.int32  # converted: int64 given
        start[0] = 99
        assert int(t.start_ns[0]) == (10 if copy else 99)
        assert t.names().tolist() == ["b", "b", "c"] and t.categories().tolist() == ["cpu_op"] * 3
        assert b.build().events["start_ns"] is t.events["start_ns"]  # building again: the same parts
