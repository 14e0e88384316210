"""The XSpace reader's deferred stats (formats/xspace/deferred.py): a few keys typed at
load, every other column built when first looked up.

That the columns hold what the file holds is shown against protobuf's own reading in
tests/test_xspace.py (every plane, line, event and stat of the TPU sample) and with
and without the compiled walk in tests/test_xspace_decode.py; these tests show when
columns are built, that a key built alone equals the same key of a full build, and
that a summary builds only what it reads.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import polyprof
from polyprof.formats import xspace
from polyprof.writers import xspace as xspace_writer
from polyprof.formats.xspace.deferred import EAGER
from polyprof.report import tables, terminal
from polyprof.trace import keys
from polyprof.trace.stats import StatColumn

TPU = Path(__file__).resolve().parent / "data" / "traces" / "xspace" / "tpu_inference_2.xplane.pb"


def same_column(a: StatColumn, b: StatColumn) -> bool:
    return (np.array_equal(a.rows, b.rows) and a.values.dtype == b.values.dtype
            and a.values.tolist() == b.values.tolist())


@pytest.fixture(scope="module")
def full() -> dict[str, StatColumn]:
    """Every column of the TPU sample, built all at once (iteration builds them all)."""
    trace = polyprof.load(TPU)
    return dict(trace.stats.items())


#: the memory stats the reader types at the TPU runtime's MemoryAllocation events (formats/xprof_memory.py)
MEMORY = {keys.ALLOC_BYTES, keys.ALLOCATOR, keys.TOTAL_ALLOCATED, keys.TOTAL_RESERVED, keys.MEMORY_DEVICE}


def test_load_types_only_the_keys_analyses_read_without_a_lookup():
    trace = polyprof.load(TPU)
    assert trace.stats.pending == 1
    loaded = set(trace.stats.loaded())
    # the eager keys this file has; "flow": looked up by the reader itself (XProf's flows)
    assert loaded == {"tf_op", keys.OP, keys.HLO_OP, "hlo_category", "device_duration_ps", "flow"} | MEMORY
    assert loaded - {"flow"} - MEMORY <= set(EAGER)


def test_a_summary_builds_only_the_columns_it_reads():
    trace = polyprof.load(TPU)
    report = tables.build(trace)
    out = io.StringIO()
    terminal.render(report, console=Console(file=out, width=160))
    assert "Top device activity" in out.getvalue()
    assert trace.stats.pending == 1  # no iteration, len or copy built the rest
    # of the 51 keys the file has; the 9th: ``_p``, the TraceMe producer ids the critical
    # path reads where a trace has PjRt's ``D2H Dispatch`` (this one has 4; wait_links.read_links)
    assert len(set(trace.stats.loaded()) - MEMORY) <= 9


def test_each_key_alone_equals_the_full_build(full: dict[str, StatColumn]):
    assert len(full) == 51 + len(MEMORY)
    for key, want in full.items():
        trace = polyprof.load(TPU)
        assert key in trace.stats
        got = trace.stats[key]
        assert same_column(got, want), key
        assert trace.stats.pending == 1
        assert set(trace.stats.loaded()) <= set(EAGER) | {"flow", key} | MEMORY


def test_a_key_no_event_has_builds_nothing():
    trace = polyprof.load(TPU)
    assert "correlation_id" not in trace.stats and trace.stats.get("no such key") is None
    assert set(trace.stats.loaded()) == {"tf_op", keys.OP, keys.HLO_OP, "hlo_category", "device_duration_ps",
                                         "flow"} | MEMORY


def test_xprof_names_are_also_read_under_polyprof_keys():
    trace = polyprof.load(TPU)
    assert trace.metadata["xspace"]["alias_keys"] == [keys.OP]  # tf_op -> op; no step_num, stream_id...
    assert same_column(trace.stats[keys.OP], trace.stats["tf_op"])


def test_lookup_rows_agrees_with_the_full_build(full: dict[str, StatColumn]):
    trace = polyprof.load(TPU)
    rows = np.arange(0, trace.n_events, 7, dtype=np.int64)
    got = trace.stats.lookup_rows(["addr", "flops", "long_name", "no such key"], rows)
    assert set(got) == {"addr", "flops", "long_name"}
    for key, (mask, values) in got.items():
        want_mask, want_values = full[key].lookup(rows)
        assert np.array_equal(mask, want_mask) and values.tolist() == want_values.tolist(), key


def test_metadata_stats_apply_to_events_and_the_events_own_win():
    """An XEventMetadata stat reaches every event of that metadata; an event's own stat
    of the same key wins (XProf treats metadata stats as the event's own): built alone
    or all at once."""
    from polyprof.formats import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add()
    plane.name, plane.id = "/host:CPU", 1
    for i, name in ((1, "k"), (2, "m"), (3, "n")):
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    md = plane.event_metadata[7]
    md.id, md.name = 7, "op"
    st = md.stats.add()
    st.metadata_id, st.int64_value = 1, 1
    st = md.stats.add()
    st.metadata_id, st.str_value = 2, "a"
    line = plane.lines.add()
    line.id, line.name, line.timestamp_ns = 1, "main", 1000
    for off, own in ((0, None), (5000, 2), (9000, None)):
        e = line.events.add()
        e.metadata_id, e.offset_ps, e.duration_ps = 7, off, 1000
        if own is not None:
            st = e.stats.add()
            st.metadata_id, st.int64_value = 1, own
            st = e.stats.add()
            st.metadata_id, st.double_value = 3, 0.5
    data = space.SerializeToString()
    want = {"k": ([0, 1, 2], [1, 2, 1]), "m": ([0, 1, 2], ["a", "a", "a"]), "n": ([1], [0.5])}
    alone = {}
    for key in want:
        trace = xspace.from_bytes(data)
        alone[key] = trace.stats[key]
        assert trace.stats.pending == 1
    every = dict(xspace.from_bytes(data).stats.items())
    assert set(every) == set(want)
    for key, (rows, values) in want.items():
        for col in (alone[key], every[key]):
            assert col.rows.tolist() == rows and col.values.tolist() == values, key
    assert every["k"].values.dtype == np.int64 and every["n"].values.dtype == np.float64


def test_round_trip_keeps_every_column_and_the_writer_copies_are_dropped(full: dict[str, StatColumn]):
    trace = polyprof.load(TPU)
    back = xspace.from_bytes(xspace_writer.to_bytes(trace))
    assert back.stats.pending == 1
    got = dict(back.stats.items())
    assert set(got) == set(full)
    for key, want in full.items():
        assert same_column(got[key], want), key


@pytest.mark.parametrize("lo, hi", [(0, 7), (0, 300), (65530, 65540), (-5, 300), (-2 ** 62, 2 ** 62)])
def test_grouping_by_metadata_id_is_numpys_unique_and_a_stable_sort(lo: int, hi: int):
    """The reader groups events by metadata id with a 16-bit radix sort where the ids
    fit: the same distinct ids, inverse, grouped order and bounds as np.unique and a
    stable argsort of the inverse, for ids that fit and ids that do not."""
    from polyprof.formats.xspace.events import grouped

    rng = np.random.default_rng(lo & 0xFFFF)
    for n in (0, 1, 2000):
        v = rng.integers(lo, hi, n, dtype=np.int64)
        uniq, inv, order, bounds = grouped(v)
        want_uniq, want_inv = np.unique(v, return_inverse=True)
        want_order = np.argsort(want_inv, kind="stable")
        assert uniq.tolist() == want_uniq.tolist() and inv.tolist() == want_inv.tolist()
        assert order.tolist() == want_order.tolist()
        assert bounds.tolist() == np.searchsorted(want_inv[want_order], np.arange(len(want_uniq) + 1)).tolist()


def test_metadata_text_is_joined_as_codes_and_the_events_own_still_win():
    """Text values of metadata-level stats reach the builder and ``merge_columns`` as codes
    into the metadata's strings (``TextCodes``: no object per event until the column is
    made), eager keys (``hlo_category``) and deferred ones alike; an event's own value of
    that key wins its row, text or a number (which the column then holds as text)."""
    from polyprof.formats import xplane_pb2
    from polyprof.formats.xspace.deferred import _metadata_typed
    from polyprof.trace.stats import TextCodes

    space = xplane_pb2.XSpace()
    plane = space.planes.add()
    plane.name, plane.id = "/host:CPU", 1
    for i, name in ((1, "hlo_category"), (2, "m")):
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    for mid, cat in ((7, "convolution"), (8, "fusion"), (9, "convolution")):
        md = plane.event_metadata[mid]
        md.id, md.name = mid, f"op{mid}"
        for key in (1, 2):
            st = md.stats.add()
            st.metadata_id, st.str_value = key, cat
    line = plane.lines.add()
    line.id, line.name, line.timestamp_ns = 1, "main", 1000
    for off, mid, own in ((0, 7, None), (2000, 8, "own"), (4000, 9, None), (6000, 8, 5), (8000, 7, None)):
        e = line.events.add()
        e.metadata_id, e.offset_ps, e.duration_ps = mid, off, 1000
        if isinstance(own, str):
            for key in (1, 2):
                st = e.stats.add()
                st.metadata_id, st.str_value = key, own
        elif own is not None:
            st = e.stats.add()
            st.metadata_id, st.int64_value = 2, own
    data = space.SerializeToString()
    trace = xspace.from_bytes(data)
    assert "hlo_category" in trace.stats.loaded() and "m" not in trace.stats.loaded()
    cat, m = trace.stats["hlo_category"], trace.stats["m"]
    assert cat.rows.tolist() == m.rows.tolist() == [0, 1, 2, 3, 4]
    assert cat.values.tolist() == ["convolution", "own", "convolution", "fusion", "convolution"]
    assert m.values.tolist() == ["convolution", "own", "convolution", "5", "convolution"]
    assert cat.values.dtype == m.values.dtype == object
    every = dict(xspace.from_bytes(data).stats.items())
    assert every["m"].values.tolist() == m.values.tolist() and every["hlo_category"].values.tolist() == cat.values.tolist()
    rows = np.array([4, 0, 2], np.int64)
    one = (rows, np.array([2, 1], np.int64), np.array([4, 4], np.uint8), np.zeros(2, np.int64), np.zeros(2),
           np.array(["a", "b"], object))
    r, values = _metadata_typed([one])
    assert isinstance(values, TextCodes) and r.tolist() == [4, 0, 2] and values.text().tolist() == ["a", "a", "b"]


def test_spans_as_int32_where_they_fit_else_int64() -> None:
    """``decode.spans``: the positions the reader keeps with the trace are int32 only where
    every one fits; past 2**31 they stay int64 (the same values either way)."""
    from polyprof.formats.xspace.decode import spans

    starts, counts = np.array([5, 0, 9]), np.array([2, 3, 0])
    assert spans(starts, counts).tolist() == spans(starts, counts, np.int32).tolist() == [5, 6, 0, 1, 2]
    assert spans(starts, counts, np.int32).dtype == np.int32
    far = spans(np.array([2**31 - 2]), np.array([3]), np.int32)
    assert far.dtype == np.int64 and far.tolist() == [2**31 - 2, 2**31 - 1, 2**31]
    assert spans(np.array([1]), np.array([0]), np.int32).dtype == np.int32


def test_event_rows_found_from_first_stats_equal_rows_kept_per_stat() -> None:
    """The reader keeps no event row per stat (4 bytes a stat): a plane's part finds it
    from each event's first stat; events with no stats (which share the next one's first
    stat) own none. The same rows as a part given each stat's row, codes as uint16."""
    from polyprof.formats.xspace.deferred import EventPart

    n_stats = np.array([2, 0, 0, 3, 1, 0, 2])
    first = np.concatenate([[0], np.cumsum(n_stats)[:-1]]) + 10  # the plane's stats start at 10
    st_idx = np.arange(10, 10 + n_stats.sum(), dtype=np.int32)
    rows = np.repeat(np.arange(100, 107), n_stats)
    codes = np.arange(len(st_idx), dtype=np.int32) % 3
    found = EventPart(st_idx, first.astype(np.int32), None, 100, codes, {}, None, -1)
    kept = EventPart(st_idx, None, rows.astype(np.int32), 100, codes, {}, None, -1)
    sel = np.arange(len(st_idx))
    assert found.rows(sel).tolist() == kept.rows(sel).tolist() == [100, 100, 103, 103, 103, 104, 106, 106]
    assert found.rows(np.array([6, 2])).tolist() == [106, 103] and found.rows(sel).dtype == np.int64
    assert found.codes.dtype == np.uint16 and found.codes.tolist() == codes.tolist()
