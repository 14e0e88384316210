"""Deferred stats: trace.stats.StatTable, and the Kineto reader's args typed on first use.

The Kineto reader types ``correlation`` and ``External id`` at load and leaves every other
arg as JSON text until a stat key they may hold is looked up. tests/test_kineto_differential.py
shows the columns equal the eager reader's (tests/kineto_reference.py) on every shared
trace; these tests show when decoding happens, that it happens once, that bad text still
fails at load, and that nothing the load accepted can fail later.
"""

from __future__ import annotations

import copy
import io
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import polyprof
from polyprof.errors import TraceFormatError, TraceSchemaError
from polyprof.formats import kineto
from polyprof.trace.core import Trace
from polyprof.trace.stats import StatColumn, StatTable

import kineto_reference as reference

KINETO_DIR = Path(__file__).resolve().parent / "data" / "traces" / "kineto"
V100 = KINETO_DIR / "v100_ns_resolution_rank0.json.gz"
EAGER = {"correlation_id", "external_id"}


def col(rows, values) -> StatColumn:
    return StatColumn(np.asarray(rows, np.int64), np.asarray(values))


def same_column(a: StatColumn, b: StatColumn) -> bool:
    return (np.array_equal(a.rows, b.rows) and a.values.dtype == b.values.dtype
            and a.values.tolist() == b.values.tolist())


@pytest.fixture(scope="module")
def old_v100() -> Trace:
    return reference.load(V100)


# ----------------------------------------------------------------------------- the Kineto reader
def test_summary_does_not_decode_the_deferred_args():
    from rich.console import Console

    from polyprof.report import tables, terminal

    trace = polyprof.load(V100)
    assert trace.stats.pending == 1
    assert set(trace.stats.loaded()) == EAGER
    report = tables.build(trace)
    terminal.render(report, console=Console(file=io.StringIO(), width=140))
    assert report.overview["correlation"]["device_activities"] > 0
    assert trace.stats.pending == 1  # the summary read only eager keys
    assert set(trace.stats.loaded()) == EAGER


def test_eager_keys_and_the_deferred_part_as_the_eager_reader(old_v100):
    trace = kineto.load(V100)
    for key in EAGER:  # typed at load, as before
        assert key in trace.stats and trace.stats.pending == 1
        assert same_column(trace.stats.loaded()[key], old_v100.stats[key])
    stream = trace.stats["stream"]  # not eager: decodes that arg alone
    assert trace.stats.pending == 1 and set(trace.stats.loaded()) == EAGER | {"stream"}
    assert same_column(stream, old_v100.stats["stream"])
    assert sorted(trace.stats) == sorted(old_v100.stats)  # iteration decodes the others
    assert trace.stats.pending == 0 and trace.stats["stream"] is stream
    for key in old_v100.stats:
        assert same_column(trace.stats[key], old_v100.stats[key]), key
    assert trace.event_stats(5) == old_v100.event_stats(5)


def test_a_key_no_event_has_decodes_nothing_and_is_absent():
    """The args' text is searched for the quoted name first: a stat no arg can hold
    (XProf's device_duration_ps on a Kineto trace) is absent without decoding."""
    trace = kineto.load(V100)
    assert trace.stats.get("no such arg") is None
    assert trace.stats.get("device_duration_ps") is None
    assert trace.stats.pending == 1
    assert "no such arg" not in trace.stats
    assert trace.stats["stream"] is not None and trace.stats.pending == 1  # a real one decodes, alone
    assert set(trace.stats.loaded()) == EAGER | {"stream"}


def test_a_key_written_with_escapes_is_still_found(tmp_path: Path):
    """JSON may spell a name with \\u escapes; the text search must not call it absent."""
    doc = ('{"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 2, '
           '"args": {"d\\u0065vice_duration_ps": 5, "other": 1}}]}')
    path = tmp_path / "esc.json"
    path.write_text(doc)
    trace = kineto.load(path)
    assert trace.stats.pending == 1
    col = trace.stats.get("device_duration_ps")
    assert col is not None and col.values.tolist() == [5]


def test_native_round_trip_keeps_every_stat(tmp_path: Path, old_v100):
    trace = kineto.load(V100)
    back = polyprof.load(trace.save(tmp_path / "v100.polyprof"))
    assert back.stats.pending == 0
    assert sorted(back.stats) == sorted(old_v100.stats)
    for key, c in old_v100.stats.items():
        assert np.array_equal(back.stats[key].rows, c.rows), key
        assert back.stats[key].values.tolist() == c.values.tolist(), key


def test_two_threads_decode_the_args_once():
    trace = kineto.load(V100)
    barrier = threading.Barrier(2)
    got: list = []

    def look() -> None:
        barrier.wait()
        got.append(trace.stats["grid"])

    threads = [threading.Thread(target=look) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 and got[0] is got[1]  # one decode of that key
    assert set(trace.stats.loaded()) == EAGER | {"grid"}


def _one_event(args: bytes) -> bytes:
    return (b'{"traceEvents": [{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
            b'"args": ' + args + b'}]}')


def _write(tmp_path: Path, name: str, doc: bytes, sliced: bool) -> Path:
    """The document, or with 20000 good events before the one given (the sliced path)."""
    if sliced:
        good = b'{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1.000, "dur": 1.000, "args": {"v": 1}},' * 20000
        head, tail = doc.split(b"[", 1)
        doc = head + b"[" + good + tail
    p = tmp_path / name
    p.write_bytes(doc)
    return p


BAD_ARGS = {
    "utf8_in_value": _one_event(b'{"External id": 1, "k": "a\xff"}'),
    "utf8_in_key": _one_event(b'{"k\xfe": 1}'),
    "infinite_number": _one_event(b'{"k": 1e400}'),
    "infinite_after_plus": _one_event(b'{"k": -2.5E+309}'),
    "long_float": _one_event(b'{"k": [1' + b"0" * 400 + b'.5]}'),
    "huge_int": _one_event(b'{"k": 1' + b"0" * 5000 + b'}'),
    "utf8_in_flow_args": b'{"traceEvents": [{"ph": "s", "id": 1, "cat": "c", "name": "c", "pid": 1, "tid": 1, '
                         b'"ts": 1, "args": {"k": "\xff"}}]}',
    "utf8_in_end_args": b'{"traceEvents": [{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 1}, '
                        b'{"ph": "E", "pid": 1, "tid": 1, "ts": 2, "args": {"k": "\xff"}}]}',
}


@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "sliced"])
@pytest.mark.parametrize("name", sorted(BAD_ARGS))
def test_bad_args_fail_at_load(tmp_path: Path, name: str, sliced: bool):
    p = _write(tmp_path, f"{name}.json", BAD_ARGS[name], sliced)
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(p)
    assert str(p) in str(ei.value)


ODD_BUT_FINE = {  # load accepts these (the old reader did too, or crashed after parsing)
    "tiny_float": (b'{"k": 1e-400}', 0.0),
    "largest_double": (b'{"k": 1.7e308}', 1.7e308),
    "long_int": (b'{"k": 1' + b"0" * 300 + b'}', "1" + "0" * 300),  # beyond 64 bits: text
    "int_beyond_64_bits_in_a_list": (b'{"k": [123456789012345678901234567890]}', "[123456789012345678901234567890]"),
    "e_in_text": (b'{"k": "see 1e999 and ' + b"7" * 300 + b'"}', "see 1e999 and " + "7" * 300),
    "nested_300": (b'{"k": ' + b"[" * 300 + b"]" * 300 + b'}', "[" * 300 + "]" * 300),
}


@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "sliced"])
@pytest.mark.parametrize("name", sorted(ODD_BUT_FINE))
def test_values_load_accepts_decode_later(tmp_path: Path, name: str, sliced: bool):
    text, value = ODD_BUT_FINE[name]
    p = _write(tmp_path, f"{name}.json", _one_event(text), sliced)
    trace = kineto.load(p)
    assert trace.stats.pending == 1
    assert trace.stats["k"].values.tolist() == [value]


def test_deferred_decode_from_a_deep_call_stack(tmp_path: Path):
    """Nesting that passed msgspec's recursion limit at load decodes from any depth later."""
    p = tmp_path / "deep.json"
    p.write_bytes(_one_event(b'{"External id": 3, "k": ' + b"[" * 900 + b"]" * 900 + b"}"))
    trace = kineto.load(p)

    def deep(n: int):
        return deep(n - 1) if n else trace.stats["k"]

    assert deep(150).values.tolist() == ["[" * 900 + "]" * 900]
    assert trace.stats["external_id"].values.tolist() == [3]


def test_eager_names_in_odd_forms_as_the_eager_reader(tmp_path: Path):
    """Both names of one key in one event, strings, nulls, huge ints: the general path."""
    events = [
        b'{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1, "correlation_id": 2}}',
        b'{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"correlation_id": 3, "correlation": 4}}',
        b'{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": {"External id": "0x10"}}',
        b'{"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {"External id": null, "x": 1}}',
        b'{"ph": "X", "name": "e", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"correlation": 18446744073709551615}}',
        b'{"ph": "X", "name": "f", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": {"correlation": -9223372036854775808}}',
        b'{"ph": "X", "name": "g", "pid": 1, "tid": 1, "ts": 7, "dur": 1, "args": {"external\\u005fid": 9}}',
        b'{"ph": "X", "name": "h", "pid": 1, "tid": 1, "ts": 8, "dur": 1, "args": null}',
        b'{"ph": "X", "name": "i", "pid": 1, "tid": 1, "ts": 9, "dur": 1, "args": 5}',
    ]
    for i, e in enumerate(events):  # each alone (its own path) and all together
        for group in ([e], events[:i + 1]):
            p = tmp_path / "odd.json"
            p.write_bytes(b'{"traceEvents": [' + b",".join(group) + b"]}")
            new, old = kineto.load(p), reference.load(p)
            assert sorted(new.stats) == sorted(old.stats)
            for key in old.stats:
                assert same_column(new.stats[key], old.stats[key]), (i, key)


# ----------------------------------------------------------------------------- StatTable
class Counting:
    """A deferred part: its columns, made (slowly) on call; counts the calls."""

    def __init__(self, columns: dict[str, StatColumn], delay: float = 0.0):
        self.columns, self.delay, self.calls = columns, delay, 0

    def __call__(self) -> dict[str, StatColumn]:
        self.calls += 1
        time.sleep(self.delay)
        return dict(self.columns)


def table() -> tuple[StatTable, Counting]:
    t = StatTable({"a": col([0, 2], [1, 2])})
    part = Counting({"b": col([1], ["x"])})
    t.defer(part, complete={"c"})
    return t, part


def test_lookups_that_need_no_decode():
    t, part = table()
    assert t["a"].values.tolist() == [1, 2] and "a" in t and t.get("a") is not None
    assert "c" not in t and t.get("c") is None  # complete: never in the deferred part
    with pytest.raises(KeyError):
        t["c"]
    assert part.calls == 0 and t.pending == 1
    assert dict(t.loaded()) == {"a": t["a"]}


@pytest.mark.parametrize("use", [
    lambda t: t["b"], lambda t: "zz" in t, lambda t: t.get("zz"), lambda t: list(t), lambda t: len(t),
    lambda t: list(t.items()), lambda t: list(t.keys()), lambda t: t.copy(), lambda t: repr(t),
    lambda t: t.__setitem__("d", col([0], [1])), lambda t: t.pop("a"), lambda t: t.update({"e": col([0], [1])}),
], ids=["get-deferred", "in-unknown", "get-unknown", "iter", "len", "items", "keys", "copy", "repr", "set", "pop",
        "update"])
def test_everything_else_decodes_first_and_once(use):
    t, part = table()
    use(t)
    assert part.calls == 1 and t.pending == 0
    assert t["b"].values.tolist() == ["x"]
    len(t), list(t)
    assert part.calls == 1


def test_copies_and_pickles_hold_every_column():
    t, _ = table()
    for other in (t.copy(), pickle.loads(pickle.dumps(t)), copy.copy(t), copy.deepcopy(t)):
        assert isinstance(other, StatTable)
        assert sorted(other) == ["a", "b"] and other["b"].values.tolist() == ["x"]


@pytest.mark.parametrize("dup", [lambda t: pickle.loads(pickle.dumps(t)), copy.deepcopy, copy.copy],
                         ids=["pickle", "deepcopy", "copy"])
def test_a_part_that_pickles_travels_undecoded(dup):
    """A pickled (or copied) table takes a deferred part that pickles along as it is: the
    copy decodes it on first use, the original is left undecoded."""
    t, part = table()
    other = dup(t)
    assert part.calls == 0 and t.pending == 1 and other.pending == 1
    assert "c" not in other  # what the part declared complete still decodes nothing
    assert other.pending == 1
    assert other["b"].values.tolist() == ["x"] and other["a"].values.tolist() == [1, 2]
    assert part.calls == 0 and other.pending == 0


def test_a_part_that_cannot_pickle_is_decoded_first():
    t = StatTable({"a": col([0], [1])})
    calls = []
    t.defer(lambda: calls.append(1) or {"b": col([1], ["x"])})  # a lambda does not pickle
    other = pickle.loads(pickle.dumps(t))
    assert calls == [1] and t.pending == 0 and other.pending == 0
    assert sorted(other) == ["a", "b"] and other["b"].values.tolist() == ["x"]


@pytest.mark.parametrize("name", ["v100_ns_resolution_rank0", "cpu_only_rank34"])
def test_a_pickled_kineto_trace_keeps_its_args_as_text(name):
    """What the ranks' reader ahead (ranks/executor.py) hands over: the args stay
    undecoded through pickle, and decode to the same columns as the original's."""
    path = Path(__file__).resolve().parent / "data" / "traces" / "kineto" / f"{name}.json.gz"
    trace = kineto.load(path)
    copy_ = pickle.loads(pickle.dumps(trace, protocol=pickle.HIGHEST_PROTOCOL))
    assert trace.stats.pending == 1 and copy_.stats.pending == 1
    want, got = dict(trace.stats), dict(copy_.stats)
    assert sorted(want) == sorted(got) and len(want) > 5
    for key, c in want.items():
        assert same_column(c, got[key]), key


def test_concurrent_lookups_decode_once():
    t = StatTable()
    part = Counting({"k": col([0, 1], [5, 6])}, delay=0.2)
    t.defer(part)
    barrier = threading.Barrier(4)
    got: list = []

    def look() -> None:
        barrier.wait()
        got.append(t["k"])

    threads = [threading.Thread(target=look) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert part.calls == 1 and len(got) == 4 and all(g is got[0] for g in got)


@pytest.mark.parametrize("bad", [
    {"b": col([3], [1])},  # a row beyond the trace's 3 events
    {"b": col([1, 0], [1, 2])},  # rows not ascending
    {"b": "not a column"},
    {"a": col([0], [1])},  # already materialised
    {"c": col([0], [1])},  # declared complete
])
def test_decoded_columns_are_checked(bad):
    t = StatTable({"a": col([0], [1])})
    t.check(3)
    t.defer(lambda: bad, complete={"c"})
    with pytest.raises(TraceSchemaError):
        len(t)


def test_trace_wraps_a_dict_and_validate_does_not_decode():
    events = {"track": [0, 0], "name": [0, 0], "category": [0, 0], "start_ns": [0, 5], "dur_ns": [1, 1]}
    from polyprof.trace.model import Plane, Track

    trace = Trace(["x"], [Plane(0, "/host:CPU", "host")], [Track(0, 0, "t")],
                  {k: np.asarray(v) for k, v in events.items()}, {"a": col([1], [7])})
    assert isinstance(trace.stats, StatTable)
    part = Counting({"b": col([0], [1.5])})
    trace.stats.defer(part)
    trace.validate()
    assert part.calls == 0
    assert trace.event_stats(0) == {"b": 1.5} and part.calls == 1
    trace.stats = {"a": col([1], [7])}  # a dict assigned later is wrapped by validate
    assert isinstance(trace.validate().stats, StatTable)


@pytest.mark.parametrize("n", [300, 3000])
def test_lookup_rows_decodes_only_those_rows_and_agrees_with_the_full_decode(old_v100, n):
    """A few rows (at most FEW_ROWS) are decoded without first walking every arg name of
    the trace to see whether a key is there at all; more rows ask first. Both agree
    with the eager reader."""
    from polyprof.trace.stats import FEW_ROWS

    trace = kineto.load(V100)
    rng = np.random.default_rng(3)
    rows = np.unique(rng.integers(0, trace.n_events, n))
    keys = ["stream", "device", "Input Dims", "grid", "correlation_id", "no such arg"]
    got = trace.stats.lookup_rows(keys, rows)
    assert trace.stats.pending == 1  # nothing decoded whole
    args = trace.stats._deferred[0].may_hold.__self__
    assert (args._names is None) == (len(rows) <= FEW_ROWS)
    assert "no such arg" not in got
    assert {"stream", "correlation_id"} <= set(got)
    for key in keys[:-1]:
        ref = old_v100.stats.get(key)
        if ref is None:  # no event of the trace has it
            assert key not in got, key
            continue
        m_ref, v_ref = ref.lookup(rows)
        if key not in got:  # none of these rows has it
            assert not m_ref.any(), key
            continue
        m, v = got[key]
        assert np.array_equal(m, m_ref), key
        assert [str(x) for x in v] == [str(x) for x in v_ref], key


# ----------------------------------------------------------------------------- one key at a time
@pytest.mark.parametrize("path", sorted(KINETO_DIR.glob("*.json.gz")), ids=lambda p: p.name)
def test_each_key_alone_then_the_rest_as_the_eager_reader(path: Path):
    """A lookup decodes that key alone (the MTIA summary's ``queue`` lookup decoded every
    arg); each key so decoded, and then everything else, equals the eager reader's."""
    old = reference.load(path)
    trace = kineto.load(path)
    lazy = sorted(set(old.stats) - set(trace.stats.loaded()))
    for key in lazy[::2]:  # half the keys one by one, the rest by the full decode
        assert same_column(trace.stats[key], old.stats[key]), key
        assert trace.stats.pending == 1, key
    assert set(trace.stats.loaded()) == set(old.stats) - set(lazy[1::2])
    assert trace.stats.get("queue") is None and trace.stats.pending == 1  # no such arg: nothing more
    assert sorted(trace.stats) == sorted(old.stats) and trace.stats.pending == 0
    for key in old.stats:
        assert same_column(trace.stats[key], old.stats[key]), key


LIST_ARGS = [  # values that must not be taken verbatim from the text, and ones that may
    '{"a": [1, 2], "b": [1.50, 2], "c": [["x", "y z"]], "d": [1e5], "e": [-0], "f": [-0.0]}',
    '{"a": [3], "b": [2.5e-3], "c": [["caf\\u00e9"]], "d": [{"k": 1, "k": 2}], "e": [0, -1], "f": ["1.5"]}',
    '{"a": [9223372036854775807, 18446744073709551615, -9223372036854775808], "g": [[], [[1]]], "h": ["a\\\\b", "\\/"], "i": [true, null]}',
    '{"a": "not a list", "g": [ 1 ,2 ], "h": ["é"], "j": [1], "k": [0.1, 0.2]}',
    '[1, 2]', '"text"', '0', 'null', '{}', '{"j": [[1, 2], ",1.5,"], "k": []}',
]


@pytest.mark.parametrize("keyed", [False, True], ids=["all", "each-key"])
def test_list_args_as_the_eager_reader(tmp_path: Path, keyed: bool):
    events = [f'{{"ph": "X", "name": "e{i}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": {i}, "dur": 1, "args": {a}}}'
              for i, a in enumerate(LIST_ARGS * 3)]
    p = tmp_path / "lists.json"
    p.write_text('{"traceEvents": [' + ",\n".join(events) + "]}")
    old, trace = reference.load(p), kineto.load(p)
    keys = sorted(old.stats)
    assert {"a", "b", "c", "d", "g", "h", "args"} <= set(keys)
    if keyed:
        for key in keys:
            assert same_column(trace.stats[key], old.stats[key]), key
    assert sorted(trace.stats) == keys
    for key in keys:
        assert same_column(trace.stats[key], old.stats[key]), key


def test_a_deferred_part_that_decodes_keys_is_asked_only_for_those():
    calls: list = []

    def decode_keys(keys, skip=()):
        calls.append((None if keys is None else sorted(keys), sorted(skip)))
        cols = {"b": col([1], ["x"]), "c": col([0, 2], [1.5, 2.5])}
        return {k: v for k, v in cols.items() if (keys is None or k in keys) and k not in skip}

    t = StatTable({"a": col([0], [1])})
    t.defer(lambda: pytest.fail("decode() of a part with decode_keys"), {"a"}, lambda k: k != "zz", None,
            decode_keys)
    assert t["b"].values.tolist() == ["x"] and calls == [(["b"], [])]
    assert t.pending == 1 and set(t.loaded()) == {"a", "b"}
    with pytest.raises(KeyError):
        t["nope"]  # may be there (may_hold says yes), is not: asked once, then known absent
    with pytest.raises(KeyError):
        t["nope"]
    assert t.get("zz") is None  # may_hold says no: not asked
    assert calls == [(["b"], []), (["nope"], [])]
    assert sorted(t) == ["a", "b", "c"] and t.pending == 0
    assert calls[-1] == (None, ["b", "nope"])  # the full decode skips what was decoded


def test_full_decode_in_a_fresh_process_does_not_import_pandas():
    """Checking that a long column is all text imported pandas (0.4 s) in a process that
    had not: the "+all stats" ingest figure of bench/ingest.py."""
    import subprocess
    import sys

    code = ("import sys; from polyprof.formats import kineto; "
            f"t = kineto.load({str(KINETO_DIR / 'mtia_inference_rank0.json.gz')!r}); "
            "n = len(t.stats); assert t.stats.pending == 0 and n > 20, n; "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
