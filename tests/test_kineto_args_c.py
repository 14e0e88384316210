"""The compiled grouping of deferred Kineto args (formats/kineto/_args.c) against the
Python one it replaces (msgspec's per-event dicts grouped by arg-name shape): the same
typed columns on every shared trace and on generated args, the Python path taken for
what the walk does not handle, and no crash on cut or garbled text."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import polyprof
from polyprof.formats.kineto import deferred
from polyprof.trace.categories import Kind

pytestmark = pytest.mark.skipif(deferred.IMPLEMENTATION != "c",
                                reason="the _args extension is not built (python setup.py build_ext --inplace)")


def _python_groups(text: bytes, base: int) -> dict:
    """The Python path's groups, as (rows, joined, lens)."""
    out = {}
    for k, (rows, raws) in deferred._raw_groups(text, base, None).items():
        out[k] = (rows, b"".join((b"[", b",".join(raws), b"]")), np.fromiter(map(len, raws), np.int64, len(raws)))
    return out


def _compiled_groups(text: bytes, base: int) -> dict:
    got = deferred._args.groups(text, base, deferred._SKIPPED)
    return {k: (np.frombuffer(r, np.int64), j, np.frombuffer(n, np.int64)) for k, (r, j, n) in got.items()}


def _typed(groups: dict) -> dict:
    out = {}
    for name, (rows, joined, lens) in groups.items():
        key, r, arr = deferred._typed_joined(name, rows, joined, lens)
        out[name] = (key, r.tolist(), arr.tolist(), arr.dtype.kind)
    return out


def _same(text: bytes, base: int = 0) -> dict:
    want = _python_groups(text, base)
    got = _compiled_groups(text, base)
    assert list(got) == list(want)  # names in the same order
    for k in want:
        assert np.array_equal(np.sort(want[k][0]), got[k][0]), k  # rows ascending
    assert _typed(got) == _typed(want)
    return got


def test_every_shared_trace_batch_groups_and_types_as_the_python_path(kineto_files):
    for path in kineto_files:
        batches = _batches_of(polyprof.load(path))
        assert batches, path
        for base, text in batches:
            _same(text, base)


def _batches_of(trace) -> list:
    """The (first row, text) batches of the trace's deferred Kineto args."""
    for part in trace.stats._deferred:
        owner = getattr(part.decode, "__self__", None)
        if isinstance(owner, deferred.DeferredArgs):
            return owner.batches
    raise AssertionError("no deferred Kineto args on the trace")


def test_the_full_decode_is_the_same_with_and_without_the_extension(kineto_files, monkeypatch):
    for path in kineto_files:
        compiled = polyprof.load(path)
        cols_c = {k: compiled.stats[k] for k in compiled.stats}
        monkeypatch.setattr(deferred, "_args", None)
        python = polyprof.load(path)
        cols_p = {k: python.stats[k] for k in python.stats}
        monkeypatch.undo()
        assert list(cols_c) == list(cols_p), path
        for k in cols_p:
            assert np.array_equal(cols_c[k].rows, cols_p[k].rows), (path, k)
            assert cols_c[k].values.dtype == cols_p[k].values.dtype, (path, k)
            assert cols_c[k].values.tolist() == cols_p[k].values.tolist(), (path, k)


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randrange(-10 ** 6, 10 ** 6)
    if kind == 1:
        return rng.choice([0.5, -1.25, 1e-7, 3.0, 2 ** 63 - 1, -(2 ** 63), 2 ** 64 - 1])
    if kind == 2:
        return rng.choice(["", "x", "a \"quoted\" name", "back\\slash", "tab\there", "ünï", "0x1f", "[1,2]", "{}"])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.randrange(3)
    if kind == 5:
        return "s" * rng.randrange(4)
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        return [rng.randrange(100) for _ in range(rng.randrange(5))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randrange(3))}


def test_generated_args_group_and_type_as_the_python_path():
    rng = random.Random(11)
    names = ["a", "b", "Input Dims", "Input type", "stream", "correlation", "External id", "Addr", "ünicode", "sp ace",
             "args", "Concrete Inputs", "Total Allocated", "alloc_bytes"]
    compiled = 0
    for _ in range(300):
        events = []
        for _ in range(rng.randrange(1, 40)):
            keys = rng.sample(names, rng.randrange(0, 6))
            events.append({k: _value(rng) for k in keys})
        sep = rng.choice([(",", ":"), (", ", ": "), (" ,\n ", " :\t")])
        text = ("[" + sep[0].join(json.dumps(e, separators=sep, ensure_ascii=rng.random() < 0.25) for e in events)
                + "]").encode()
        base = rng.randrange(1000)
        if b'\\u00fcnicode"' in text:  # an escaped name: the Python path, through the same call
            with pytest.raises(ValueError):
                deferred._args.groups(text, base, deferred._SKIPPED)
            assert _typed(deferred._joined_groups(text, base, None)) == _typed(_python_groups(text, base))
            continue
        _same(text, base)
        compiled += 1
    assert compiled > 100  # most trials


@pytest.mark.parametrize("text", [
    b'[{"a\\u0062": 1}]',  # an escaped name
    b'[{"a": 1, "a": 2}]',  # a name twice
    b'[{"a": 1}, [1, 2]]',  # an args value that is not an object
    b'[{"a": 1}, null]',
    b'[{"a": 1}',  # cut
    b'[{"a": }]',
    b'{"a": 1}',
    b'[{"a": 1}] x',
])
def test_what_the_walk_leaves_to_the_python_path(text: bytes):
    with pytest.raises(ValueError):
        deferred._args.groups(text, 0, deferred._SKIPPED)
    try:
        want = _python_groups(text, 0)
    except Exception:  # noqa: BLE001 - text the Python path refuses too
        return
    got = deferred._joined_groups(text, 0, None)  # the Python path's answer
    assert _typed(got) == _typed(want)


def test_cut_and_garbled_text_never_crashes():
    trace_text = b'[{"a": [1, "x,]}"], "b": {"c": [1, {"d": "}"}]}, "e": -1.5e3}, {}, {"f": "\\"q"}]'
    rng = random.Random(5)
    for end in range(len(trace_text) + 1):
        for text in (trace_text[:end], trace_text[:end] + b"]"):
            try:
                deferred._args.groups(text, 0, deferred._SKIPPED)
            except ValueError:
                pass
    for _ in range(500):
        b = bytearray(trace_text)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.choice(b'[]{}",:\\ 0a')
        try:
            deferred._args.groups(bytes(b), 0, deferred._SKIPPED)
        except ValueError:
            pass
    _same(trace_text)


def test_arg_names_of_every_batch_as_msgspec_decodes_them(kineto_files):
    """The names-only walk gives each batch's arg names exactly (what a lookup of an
    absent key is answered from), and may_hold says yes for every key some event has."""
    for path in kineto_files:
        trace = polyprof.load(path)
        args = next(p.decode.__self__ for p in trace.stats._deferred
                    if isinstance(getattr(p.decode, "__self__", None), deferred.DeferredArgs))
        for _, text in args.batches:
            want = set().union(*(d.keys() for d in deferred._DECODE_ARG_RAWS(text)))
            assert deferred._args.names(text) == want, path
        for key in trace.stats:
            assert args.may_hold(key) or key in ("correlation_id", "external_id") or not len(trace.stats[key]), key
        assert not args.may_hold("no such arg anywhere")


def test_may_hold_without_the_walk_says_yes_where_the_walk_does(kineto_files, monkeypatch):
    for path in kineto_files[:4]:
        trace = polyprof.load(path)
        args = next(p.decode.__self__ for p in trace.stats._deferred
                    if isinstance(getattr(p.decode, "__self__", None), deferred.DeferredArgs))
        keys = ["queue", "stream", "device_duration_ps", "Input Dims", "step", "nothing"]
        exact = [args._batches_with([k]) for k in keys]
        args._names = [None] * len(args.batches)  # as without the extension: the text scan
        scanned = [args._batches_with([k]) for k in keys]
        for e, sc in zip(exact, scanned):
            assert all(s or not x for x, s in zip(e, sc))  # the scan is conservative: a superset


# ---------------------------------------------------------------- some rows: _args.select
_ROW_KEYS = ["Input Dims", "Input type", "Concrete Inputs", "stream", "device", "Sequence number", "grid",
             "correlation_id", "External id", "no such arg"]


def _rows_both(args: deferred.DeferredArgs, keys: list, rows: np.ndarray, monkeypatch) -> tuple[dict, dict]:
    """DeferredArgs.rows through the compiled walk and through the Python path."""
    got = args.rows(keys, rows)
    with monkeypatch.context() as m:
        m.setattr(deferred, "_args", None)
        want = args.rows(keys, rows)
    return got, want


def _assert_same_columns(got: dict, want: dict, where: object) -> None:
    assert list(got) == list(want), where
    for k in want:
        assert np.array_equal(got[k].rows, want[k].rows), (where, k)
        assert got[k].values.dtype == want[k].values.dtype, (where, k)
        assert got[k].values.tolist() == want[k].values.tolist(), (where, k)


def test_some_rows_of_every_shared_trace_as_the_python_path(kineto_files, monkeypatch):
    """The op-shape lookup (flops.py asks for ``Input Dims`` of some ops) gives the same
    typed columns through ``_args.select`` as through msgspec's per-event decode."""
    rng = np.random.default_rng(3)
    for path in kineto_files:
        trace = polyprof.load(path)
        args = next(p.decode.__self__ for p in trace.stats._deferred
                    if isinstance(getattr(p.decode, "__self__", None), deferred.DeferredArgs))
        n = trace.n_events
        ops = trace.rows_of_kind(Kind.CPU_OP)
        for rows in (np.arange(n), ops, np.sort(rng.choice(n, min(n, 500), replace=False)), np.array([n - 1]),
                     np.zeros(0, np.int64)):
            got, want = _rows_both(args, _ROW_KEYS, rows, monkeypatch)
            _assert_same_columns(got, want, (path.name, len(rows)))


def test_select_takes_only_the_rows_and_names_asked_for():
    text = (b'[{"a": [1, 2], "b": "x"}, {"b": 2}, {"a": [3], "c": {"d": "}"}}, {}, {"a": null}, '
            b'{"a": [1, 2], "c": {"d": "}"}}, {"a": [1,2]}]')
    got = deferred._args.select(text, 10, ("a", "c"), np.array([10, 12, 14, 15, 16], np.int64).tobytes())
    out = {k: (np.frombuffer(r, np.int64).tolist(), np.frombuffer(c, np.int64).tolist(), j,
               np.frombuffer(n, np.int64).tolist()) for k, (r, c, j, n) in got.items()}
    # each distinct value's text once (the same value written otherwise is another text)
    assert out == {"a": ([10, 12, 14, 15, 16], [0, 1, 2, 0, 3], b"[[1, 2],[3],null,[1,2]]", [6, 3, 4, 5]),
                   "c": ([12, 15], [0, 0], b'[{"d": "}"}]', [10])}
    # rows outside the batch, and a batch none of whose rows is asked for
    assert deferred._args.select(text, 10, ("a",), np.array([3, 99], np.int64).tobytes()) == {}
    assert deferred._args.select(b"[]", 0, ("a",), np.array([0], np.int64).tobytes()) == {}
    with pytest.raises(ValueError):
        deferred._args.select(text, 10, tuple("abcdefghijklmnopq"), np.array([10], np.int64).tobytes())


@pytest.mark.parametrize("text", [
    b'[{"a\\u0062": 1}]',  # an escaped name in an event asked for
    b'[{"a": 1, "a": 2}]',  # a name asked for twice
    b'[[1, 2]]',  # an args value that is not an object
    b'[null]',
    b'[{"a": }]',
    b'{"a": 1}',
])
def test_what_select_leaves_to_the_python_path(text: bytes, monkeypatch):
    with pytest.raises(ValueError):
        deferred._args.select(text, 0, ("a", "ab"), np.array([0], np.int64).tobytes())
    try:
        deferred._DECODE_RAWS(text)
    except Exception:  # noqa: BLE001 - not a batch the load would keep
        return
    args = deferred.DeferredArgs([(0, text)], {})
    got, want = _rows_both(args, ["a", "ab", "args"], np.array([0]), monkeypatch)
    _assert_same_columns(got, want, text)


def test_generated_args_some_rows_as_the_python_path(monkeypatch):
    rng = random.Random(12)
    names = ["a", "b", "Input Dims", "Input type", "stream", "Concrete Inputs", "sp ace", "ünicode"]
    for _ in range(150):
        batches, base = [], 0
        for _ in range(rng.randrange(1, 4)):
            events = [{k: _value(rng) for k in rng.sample(names, rng.randrange(0, 5))}
                      for _ in range(rng.randrange(1, 30))]
            sep = rng.choice([(",", ":"), (", ", ": ")])
            text = ("[" + sep[0].join(json.dumps(e, separators=sep, ensure_ascii=False) for e in events)
                    + "]").encode()
            batches.append((base, text))
            base += len(events)
        rows = np.sort(np.array(rng.sample(range(base), rng.randrange(1, base + 1)), np.int64))
        args = deferred.DeferredArgs(batches, {})
        got, want = _rows_both(args, ["a", "Input Dims", "Input type", "stream", "ünicode"], rows, monkeypatch)
        _assert_same_columns(got, want, batches)
