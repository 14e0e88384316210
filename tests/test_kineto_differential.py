"""The msgspec Kineto reader against the orjson reader it replaced (tests/kineto_reference.py).

Every shared Kineto trace, and synthetic files for the odd layouts and value types the
reader accepts, must give the same Trace: events (names, categories, tracks, times to
the ns), planes, tracks, stats (rows, values, types), flows, counters and metadata.
Known, intended differences are listed where they are allowed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from polyprof.formats import kineto

import kineto_reference as reference

KINETO_DIR = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
FILES = sorted(KINETO_DIR.glob("*.json*"))


def _vendor(new: str, old: str) -> str:
    """The old reader named every device NVIDIA's when nothing else said whose it was (its
    own category list held "cuda_sync", taken for a CUDA call); the new one names none."""
    return old if (new, old) == ("", "NVIDIA") else new


def assert_same_trace(new, old, allow_metadata: set[str] = frozenset()) -> None:
    assert new.n_events == old.n_events
    assert new.names().tolist() == old.names().tolist()
    assert new.categories().tolist() == old.categories().tolist()
    for k in ("track", "start_ns", "dur_ns"):
        assert new.events[k].dtype == old.events[k].dtype, k
        assert np.array_equal(new.events[k], old.events[k]), k
    assert len(new.planes) == len(old.planes)
    assert [(p.name, p.kind, _vendor(p.vendor, q.vendor), p.index, p.pid, p.properties)
            for p, q in zip(new.planes, old.planes)] == \
        [(p.name, p.kind, p.vendor, p.index, p.pid, p.properties) for p in old.planes]
    assert [(t.plane, t.name, t.kind, t.tid, t.sort_index) for t in new.tracks] == \
        [(t.plane, t.name, t.kind, t.tid, t.sort_index) for t in old.tracks]
    assert sorted(new.stats) == sorted(old.stats)
    for k in old.stats:
        assert np.array_equal(new.stats[k].rows, old.stats[k].rows), k
        assert new.stats[k].values.dtype == old.stats[k].values.dtype, k
        assert new.stats[k].values.tolist() == old.stats[k].values.tolist(), k
    for table in ("flows", "counters"):
        a, b = getattr(new, table), getattr(old, table)
        assert sorted(a) == sorted(b)
        for k in b:
            if k in ("name", "category"):  # string ids: compare the strings
                assert [new.strings[i] for i in a[k]] == [old.strings[i] for i in b[k]], (table, k)
            else:
                assert np.array_equal(a[k], b[k]), (table, k)
    ma = {k: v for k, v in new.metadata.items() if k not in allow_metadata}
    mb = {k: v for k, v in old.metadata.items() if k not in allow_metadata}
    # intended: an event of negative dur (the odd events hold one) is said now, not only made 0 ns long
    said = [w for w in ma.get("warnings", []) if " events end before they start (a negative dur" not in w]
    if "warnings" in ma:
        ma["warnings"] = said
        if not said:
            del ma["warnings"]
    assert ma == mb


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shared_trace_same_as_reference(path: Path):
    assert_same_trace(kineto.load(path), reference.load(path))


@pytest.mark.parametrize("chunk", [700, 4096])
def test_shared_trace_in_small_slices_same_as_reference(monkeypatch, chunk: int):
    path = KINETO_DIR / "a100_nccl_rank0.json.gz"  # flows, collectives, several streams
    old = reference.load(path)
    monkeypatch.setattr(kineto.slicing, "CHUNK_BYTES", chunk)
    assert_same_trace(kineto.load(path), old)


def _events() -> list[dict]:
    """Odd but accepted events: every phase, value types, ids, missing fields."""
    return [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "demo"}},
        {"ph": "M", "name": "process_labels", "pid": 9, "args": {"labels": "GPU 2"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 7, "tid": 1, "args": {"sort_index": 3}},
        {"ph": "M", "name": "something_else", "pid": 7, "tid": 1, "args": {"v": [1, 2]}},
        {"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 7, "tid": 1, "ts": 10, "args": {"a": 1}},
        {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 7, "tid": 1, "ts": 12, "dur": 3.5,
         "args": {"External id": 5, "shape": [[1, 2]], "flag": True, "none": None, "f": 1.25}},
        {"ph": "X", "name": "op2", "cat": "cpu_op", "pid": 7, "tid": 1, "ts": "13.25", "dur": "2",
         "args": {"External id": "6", "mixed": "x"}},
        {"ph": "X", "name": "k", "cat": "kernel", "pid": 9, "tid": "stream 7", "ts": 14.0005, "dur": 1e-3,
         "args": {"stream": "0x7", "correlation": 11, "device": 2, "mixed": 3}},
        {"ph": "X", "name": 42, "cat": None, "pid": 7, "tid": 2, "ts": 15, "dur": None},
        {"ph": "X", "name": "no dur", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": 17},  # no ts: test_kineto_no_ts.py
        {"ph": "X", "name": "neg", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": -1.5, "dur": -2},
        {"ph": "X", "name": "big int arg", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": 16, "dur": 1,
         "args": {"u": 2 ** 63 + 5, "list": [1, "a"]}},
        {"ph": "s", "id": "0x1", "cat": "link", "name": "link", "pid": 7, "tid": 1, "ts": 13},
        {"ph": "t", "id": "0x1", "cat": "link", "name": "link", "pid": 7, "tid": 2, "ts": 21},
        {"ph": "f", "id": "0x1", "cat": "link", "name": "link", "pid": 7, "tid": 2, "ts": 30, "bp": "e"},
        {"ph": "s", "id": 11, "cat": "ac2g", "name": "ac2g", "pid": 7, "tid": 1, "ts": 12.5},
        {"ph": "f", "id": 11, "cat": "ac2g", "name": "ac2g", "pid": 9, "tid": "stream 7", "ts": 14.0005,
         "bp": "e"},
        {"ph": "s", "id2": {"local": "0x9"}, "cat": "x", "name": "x", "pid": 7, "tid": 1, "ts": 12},
        {"ph": "f", "id2": {"local": "0x9"}, "cat": "x", "name": "x", "pid": 7, "tid": 2, "ts": 20},
        {"ph": "s", "bind_id": 77, "cat": "y", "name": "y", "pid": 7, "tid": 1, "ts": 12},
        {"ph": "f", "bind_id": 77, "cat": "y", "name": "y", "pid": 7, "tid": 2, "ts": 29},
        {"ph": "E", "pid": 7, "tid": 1, "ts": 20, "args": {"b": "x"}},
        {"ph": "E", "pid": 7, "tid": 5, "ts": 20},
        {"ph": "X", "name": "a", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": 20, "dur": 5},
        {"ph": "X", "name": "b", "cat": "cpu_op", "pid": 7, "tid": 2, "ts": 29, "dur": 5},
        {"ph": "B", "name": "never closed", "pid": 7, "tid": 2, "ts": 40},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 15, "args": {"used": 100}},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 25, "args": {"used": 50, "free": 7.5}},
        {"ph": "C", "name": "q", "id": 3, "pid": 7, "ts": 26, "args": {"depth": True}},
        {"ph": "i", "name": "tick", "pid": 7, "tid": 1, "ts": 11, "s": "t"},
        {"ph": "I", "name": "tock", "pid": 7, "tid": 1, "ts": 11.001},
        {"ph": "P", "name": "sample", "pid": 7, "tid": 1, "ts": 11},
        {"ph": 5, "name": "odd phase", "pid": 7, "tid": 1, "ts": 11},
        {"name": "no phase", "pid": 7, "tid": 1, "ts": 11},
        {"ph": "X", "name": "extra keys", "cat": "cpu_op", "pid": 7, "tid": 1, "ts": 33, "dur": 1,
         "tts": 5, "cname": "good", "sf": 3, "args": "not a dict"},
    ]


def _write(path: Path, doc) -> Path:
    text = json.dumps(doc, indent=1)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("layout", ["object", "array", "array-open", "events-last", "gzip"])
def test_odd_events_same_as_reference(tmp_path: Path, layout: str):
    evs = _events()
    if layout == "object":
        p = _write(tmp_path / "t.json", {"traceEvents": evs, "displayTimeUnit": "ns"})
    elif layout == "array":
        p = _write(tmp_path / "t.json", evs)
    elif layout == "array-open":  # the Array Format without its closing bracket
        p = tmp_path / "t.json"
        p.write_text(json.dumps(evs)[:-1] + ",\n")
    elif layout == "events-last":
        p = _write(tmp_path / "t.json", {"deviceProperties": [{"id": 2, "name": "AMD Instinct"}],
                                         "distributedInfo": {"rank": 1, "world_size": 2},
                                         "traceEvents": evs, "baseTimeNanoseconds": 10 ** 18})
    else:
        p = _write(tmp_path / "t.json.gz", {"traceEvents": evs})
    new, old = kineto.load(p), reference.load(p)
    assert new.n_events > 10
    assert_same_trace(new, old)


@pytest.mark.parametrize("chunk", [200, 1000])
def test_odd_events_in_slices_same_as_reference(tmp_path: Path, monkeypatch, chunk: int):
    evs = _events() * 20
    p = _write(tmp_path / "t.json", {"traceEvents": evs, "after": {"k": "]}"}})
    old = reference.load(p)
    monkeypatch.setattr(kineto.slicing, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(reference, "CHUNK_BYTES", chunk)
    assert_same_trace(kineto.load(p), old)


def test_big_absolute_times_in_every_form(tmp_path: Path):
    """Epoch µs in the forms seen in the wild; mixed in one slice they take the slow path."""
    forms = ["1712195495519689.047", "1712195495519689.8", "1712195495519690", "1712195495519691.25",
             "1712195495519692.001", "1.712195495519693e15", "1712195495519694.0005"]
    body = ",".join(f'{{"ph": "X", "name": "e{i}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": {t}, "dur": 1}}'
                    for i, t in enumerate(forms))
    p = tmp_path / "abs.json"
    p.write_text('{"traceEvents": [' + body + ']}')
    new = kineto.load(p)
    assert new.start_ns.tolist() == [1712195495519689047, 1712195495519689800, 1712195495519690000,
                                     1712195495519691250, 1712195495519692001, 1712195495519693000,
                                     1712195495519694000]
    assert new.dur_ns.tolist() == [1000] * len(forms)


@pytest.mark.parametrize("texts,expected", [
    (["1.500", "2.250", "-3.125"], [1500, 2250, -3125]),  # three decimals: digits
    (["1", "2", "-3"], [1000, 2000, -3000]),  # integers
    (["0.5", "0.25", "0.125"], [500, 250, 125]),  # one dot each but not three places
    (["0.0001", "0.0006"], [0, 1]),  # more places: rounded to the ns
    (["1.5e3", "2.000"], [1_500_000, 2000]),  # exponent
    (["null", "\"2.5\"", "true"], [0, 2500, 1000]),  # like the reader before: numbers in strings, bools
])
def test_ns_of_forms(texts, expected):
    import msgspec

    raws = [msgspec.Raw(t.encode()) for t in texts]
    assert kineto.numbers._ns_of(raws, Path("x.json"), "ts").tolist() == expected


def test_concatenated_gzip_members_same_as_reference(tmp_path: Path):
    """gzip allows several members back to back (e.g. files appended with cat)."""
    text = json.dumps({"traceEvents": _events() * 50}).encode()
    half = len(text) // 2
    p = tmp_path / "two.json.gz"
    p.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    new, old = kineto.load(p), reference.load(p)
    assert new.n_events == 50 * 14  # X, i, I and B events of _events()
    assert_same_trace(new, old)


@pytest.mark.parametrize("codes", [[], [3], [5, 1, 5, 0, 1], [10 ** 9, 7, 10 ** 9]])
def test_distinct_codes_like_np_unique(codes):
    a = np.array(codes, np.int64)
    uniq, inverse = kineto.codes._distinct(a, inverse=True)
    ref_u, ref_i = np.unique(a, return_inverse=True)
    assert uniq.tolist() == ref_u.tolist() and inverse.tolist() == ref_i.reshape(-1).tolist()
    assert kineto.codes._distinct(a).tolist() == ref_u.tolist()


BAD_VALUES = {
    "bad_utf8.json": b'{"traceEvents": [{"ph": "X", "name": "a\xff", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}',
    "infinite_ts.json": b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e400, "dur": 1}]}',
    "lone_surrogate.json": b'{"traceEvents": [{"ph": "X", "name": "a\\ud800", "pid": 1, "tid": 1, "ts": 1}]}',
    "nan_ts.json": b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": NaN}]}',
}
# (a ts that is a string of letters or an object drops that event, counted, as Perfetto:
# tests/test_peers_perfetto_json.py)


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_bad_values_give_a_trace_format_error_like_the_reference(tmp_path: Path, name: str):
    from polyprof.errors import TraceFormatError

    p = tmp_path / name
    p.write_bytes(BAD_VALUES[name])
    for reader in (reference, kineto):
        with pytest.raises(TraceFormatError) as ei:
            reader.load(p)
        assert str(p) in str(ei.value)
    # also when the bad event is in the middle of a long file (the sliced path)
    good = b'{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1.000, "dur": 1.000},' * 20000
    head, tail = BAD_VALUES[name].split(b"[", 1)
    p.write_bytes(head + b"[" + good + tail)
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(p)
    assert str(p) in str(ei.value)
