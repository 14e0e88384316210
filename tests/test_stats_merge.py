"""A stat's parts joined into one column (trace/stats.py): text given as codes into a few
strings (``TextCodes``, what the Kineto reader gives for the memory stats' allocator and
device), and keys given at the very same rows arrays sharing one rows array.

Each is checked against the plain path: the same parts with their text as object
arrays, every key merged on its own, the columns compared by dtype and value; on
generated parts (every value kind, rows out of order and repeated) and on the real
Kineto traces in tests/data that hold memory events.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceSchemaError
from polyprof.formats import kineto_memory
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.stats import StatColumn, StatTable, TextCodes, merge_columns, merge_stat_parts

DATA = Path(__file__).resolve().parent / "data"
MEMORY_TRACES = sorted(DATA.glob("peers/tracelens_perf/*.json.gz"))


def _plain(parts: list) -> list:
    return [(r, v.text() if isinstance(v, TextCodes) else v) for r, v in parts]


def _same(a: StatColumn, b: StatColumn) -> None:
    assert a.rows.dtype == b.rows.dtype and a.rows.tolist() == b.rows.tolist()
    assert a.values.dtype == b.values.dtype
    assert [(type(x), x) for x in a.values.tolist()] == [(type(x), x) for x in b.values.tolist()]


def _values(rng: random.Random, n: int, kind: str) -> object:
    if kind == "codes":
        strings = rng.sample(["torch", "opencl", "/device:GPU:0", "/device:GPU:1", "é"], rng.randint(1, 4))
        if rng.random() < 0.3:  # one value for the whole part, as a broadcast view
            return TextCodes(np.broadcast_to(np.uint8(rng.randrange(len(strings))), (n,)), strings)
        return TextCodes(np.array([rng.randrange(len(strings)) for _ in range(n)], rng.choice([np.int64, np.uint8])),
                         strings)
    if kind == "text":
        return np.array([rng.choice(["torch", "x", "/device:GPU:0"]) for _ in range(n)], dtype=object)
    if kind == "f":
        return np.array([rng.random() for _ in range(n)])
    if kind == "u":
        return np.array([rng.randrange(1 << 64) for _ in range(n)], np.uint64)
    return np.array([rng.randint(-(1 << 40), 1 << 40) for _ in range(n)], np.int64)


@pytest.mark.parametrize("seed", range(60))
def test_parts_with_text_codes_merge_as_their_text_does(seed):
    rng = random.Random(seed)
    kinds = rng.choice([["codes"], ["codes", "text"], ["codes", "i"], ["codes", "f", "u"], ["i", "u"], ["text"]])
    parts = []
    for _ in range(rng.randint(1, 6)):
        n = rng.choice([0, 1, 3, 300])
        start = rng.randrange(0, 1000)
        rows = np.array(sorted(rng.sample(range(start, start + 2 * n + 1), n)), np.int64)
        if rng.random() < 0.2:
            rows = rows[::-1].copy()
        parts.append((rows, _values(rng, n, rng.choice(kinds))))
    _same(merge_columns(list(parts)), merge_columns(_plain(parts)))


def test_text_codes_of_other_strings_are_renumbered_into_one_column():
    a = TextCodes(np.array([0, 1, 0]), ("torch", "/device:GPU:0"))
    b = TextCodes(np.array([1, 0]), ("/device:GPU:1", "torch"))
    col = merge_columns([(np.array([0, 2, 4]), a), (np.array([1, 3]), b)])
    assert col.rows.tolist() == [0, 1, 2, 3, 4]
    assert col.values.dtype == object
    assert col.values.tolist() == ["torch", "torch", "/device:GPU:0", "/device:GPU:1", "torch"]


@pytest.mark.parametrize("codes, strings", [([0, 2], ("a", "b")), ([-1], ("a",)), ([0], (b"a",)),
                                            ([0.0], ("a",)), ([0], ("a", None))])
def test_bad_text_codes_are_one_schema_error(codes, strings):
    with pytest.raises(TraceSchemaError):
        TextCodes(np.array(codes), strings)


def test_keys_at_the_same_rows_share_one_rows_array():
    rng = np.random.default_rng(0)
    first, second = np.arange(0, 10, 2), np.array([13, 11, 12])  # the second part out of order
    other = np.array([1, 3])
    parts = {
        "bytes": [(first, rng.integers(0, 9, 5)), (second, rng.integers(0, 9, 3))],
        "total": [(first, rng.integers(0, 9, 5)), (second, rng.integers(0, 9, 3))],
        "allocator": [(first, TextCodes(np.zeros(5, np.uint8), ("torch",))),
                      (second, TextCodes(np.zeros(3, np.uint8), ("torch",)))],
        "alone": [(other, np.array([5, 6]))],
        "partly": [(first, np.arange(5)), (other, np.array([7, 8]))],
    }
    alone = {k: merge_columns(_plain(list(v))) for k, v in parts.items()}
    merged = merge_stat_parts(parts, consume=True)
    assert not parts  # consumed
    assert list(merged) == list(alone)
    for k in merged:
        _same(merged[k], alone[k])
    assert merged["bytes"].rows is merged["total"].rows is merged["allocator"].rows
    assert merged["bytes"].rows.tolist() == [0, 2, 4, 6, 8, 11, 12, 13]
    assert merged["partly"].rows is not merged["bytes"].rows


def test_a_builders_coded_text_and_shared_rows_reach_the_trace():
    b = TraceBuilder()
    track = b.track(b.plane("/host:CPU"), "thread 1")
    rows = np.array([b.event(track, "[memory]", t, 0) for t in range(4)], np.int64)
    b.add_stat("alloc_bytes", rows, np.array([4, -4, 8, -8]))
    b.add_stat("allocator", rows, TextCodes(np.broadcast_to(np.uint8(0), (4,)), ("torch",)))
    b.add_stat("memory_device", rows[1:], TextCodes(np.array([1, 0, 1]), ("/device:GPU:0", "/device:GPU:1")))
    t = b.build()
    assert t.stats["allocator"].values.tolist() == ["torch"] * 4
    assert t.stats["allocator"].rows is t.stats["alloc_bytes"].rows
    assert t.stats["memory_device"].values.tolist() == ["/device:GPU:1", "/device:GPU:0", "/device:GPU:1"]
    with pytest.raises(TraceSchemaError):
        b.add_stat("allocator", rows, TextCodes(np.zeros(3, np.uint8), ("torch",)))


@pytest.mark.parametrize("path", MEMORY_TRACES, ids=[p.name for p in MEMORY_TRACES])
def test_real_memory_traces_load_as_the_plain_object_path_makes_them(path, monkeypatch):
    """The reader's coded, row-sharing memory stats against its general path (one dict
    per event, object arrays), every stat column of the trace compared."""
    fast = polyprof.load(path)
    with monkeypatch.context() as m:
        m.setattr(kineto_memory, "batch_stats",
                  lambda text, base, decode_any: kineto_memory.memory_stats(msgspec.json.decode(text), base))
        plain = polyprof.load(path)
    assert sorted(fast.stats) == sorted(plain.stats)  # (the general path's keys come in a set's order)
    for key in fast.stats:
        _same(fast.stats[key], plain.stats[key])
    assert len(fast.stats["allocator"]) > 100
    assert fast.stats["allocator"].rows is fast.stats["alloc_bytes"].rows


def test_shared_rows_are_checked_once_and_still_checked():
    rows = np.array([0, 2, 1])  # not ascending
    t = StatTable({"a": StatColumn(np.arange(3), np.arange(3)), "b": StatColumn(rows, np.arange(3)),
                   "c": StatColumn(rows, np.arange(3))})
    with pytest.raises(TraceSchemaError, match="'b'"):
        t.check(5)
    ok = np.array([0, 1, 4])
    StatTable({"b": StatColumn(ok, np.arange(3)), "c": StatColumn(ok, np.arange(3.0))}).check(5)
    with pytest.raises(TraceSchemaError, match="do not exist"):
        StatTable({"b": StatColumn(ok, np.arange(3)), "c": StatColumn(ok, np.arange(3.0))}).check(4)
