"""The args the compiled tokenizer takes by name at load (formats/kineto/taken.py, _tokens.c).

A lookup of some rows of those args (an op's shapes, a kernel's launch configuration, a
collective's sizes) answered from the taken columns must give what the walk of the args
batches gives (``_args.select``, and the Python decode where the extension is not built):
on every Kineto file in tests/data, and on files made to hold what the tokenizer must
not take (escaped or repeated names, slices msgspec reads, E events' args).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from polyprof.formats import kineto
from polyprof.formats.kineto import deferred, tokenized
from polyprof.formats.kineto.args import BY_ROW

DATA = Path(__file__).resolve().parent / "data"
FILES = sorted(p for p in DATA.rglob("*.json*") if p.name.endswith((".json", ".json.gz")) and "rocprof" not in p.parts)
SHARED = ["v100_ns_resolution_rank0", "a100_nccl_rank0", "mtia_inference_rank0", "sampled_rank0", "a100_alexnet_small"]

pytestmark = pytest.mark.skipif(tokenized.IMPLEMENTATION != "c", reason="the _tokens extension is not built")


def _args(trace: object) -> deferred.DeferredArgs | None:
    parts = trace.stats._deferred  # type: ignore[attr-defined]
    return parts[0].decode_rows.__self__ if parts else None


def _columns(got: dict) -> dict:
    return {k: (c.rows.tolist(), c.values.dtype.str, c.values.tolist()) for k, c in got.items()}


def _walked(args: deferred.DeferredArgs, keys: list[str], rows: np.ndarray, compiled: bool,
            monkeypatch: pytest.MonkeyPatch) -> dict:
    """The same lookup by the walk of the batches: ``_args.select``, or the Python decode."""
    taken, args.taken = args.taken, None
    try:
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(deferred, "_args", None)
            return _columns(args.rows(keys, rows))
    finally:
        args.taken = taken


def _check(trace: object, monkeypatch: pytest.MonkeyPatch, rows_list: list[np.ndarray] | None = None) -> int:
    """Every taken key alone and all at once, for every row and some: as the walks give them.
    Returns how many lookups had a value."""
    args = _args(trace)
    assert args is not None and args.taken is not None
    n = trace.n_events  # type: ignore[attr-defined]
    rng = np.random.default_rng(7)
    if rows_list is None:
        rows_list = [np.arange(n), np.sort(rng.choice(n, min(n, 300), replace=False)), np.zeros(0, np.int64)]
    found = 0
    for rows in rows_list:
        for keys in [[k] for k in BY_ROW] + [list(BY_ROW[:7]), list(BY_ROW[7:])]:
            got = _columns(args.rows(keys, rows))
            assert got == _walked(args, keys, rows, True, monkeypatch), keys
            assert got == _walked(args, keys, rows, False, monkeypatch), keys
            found += len(got)
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_taken_args_are_what_the_batches_hold(path: Path, monkeypatch: pytest.MonkeyPatch):
    try:
        trace = kineto.load(path)
    except Exception:  # a file the reader refuses (the fuzz corpus): nothing to look up
        return
    args = _args(trace)
    if args is None or args.taken is None:
        return
    _check(trace, monkeypatch)


@pytest.mark.parametrize("name", SHARED)
def test_the_shared_traces_are_taken_and_their_lookups_read_no_batch(name: str, monkeypatch: pytest.MonkeyPatch):
    trace = kineto.load(DATA / "traces" / "kineto" / f"{name}.json.gz")
    args = _args(trace)
    assert args is not None and args.taken is not None
    assert _check(trace, monkeypatch) > 0
    read: list[int] = []
    batches = args.batches
    monkeypatch.setattr(type(batches), "__getitem__", lambda self, i: read.append(i))
    found = trace.stats.lookup_rows(list(BY_ROW), np.arange(trace.n_events))
    assert found and read == []


def _write(tmp_path: Path, events: list[str]) -> Path:
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as f:
        f.write('{"traceEvents": [' + ",\n".join(events) + "]}")
    return p


def _op(i: int, args: str) -> str:
    return (f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {10 * i}, "dur": 5, '
            f'"args": {{{args}}}}}')


def _many(args_of: list[str], n: int = 20000) -> list[str]:
    """``n`` ops (more than one slice and one args batch) cycling through ``args_of``."""
    return [_op(i, args_of[i % len(args_of)]) for i in range(n)]


PLAIN = ['"External id": 1, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]',
         '"Input Dims": [[ 2 , 3 ],[3,4]], "Input type": ["c10::Half", ""], "Concrete Inputs": ["", "1"]',
         '"Input Dims": null, "Seq": 7, "grid": [1, 2, 3]',
         '"Seq": 7.5, "Input Dims": [[1.5]], "Collective name": "all\\u0072educe", "dtype": "Float"',
         '"Call stack": "Input Dims", "Input type": [], "Src Rank": -1, "block": [128, 1, 1]',
         '']


def test_values_of_every_shape_are_taken_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Spaces inside values, nulls, ints mixed with floats, escapes in values, a taken
    name as another arg's value, events without args: over many slices and batches."""
    trace = kineto.load(_write(tmp_path, _many(PLAIN)))
    n = trace.n_events
    assert _check(trace, monkeypatch, [np.arange(n), np.arange(3, n, 977), np.array([n - 1])]) > 0


@pytest.mark.parametrize("odd, value", [
    ('"Input\\u0020Dims": [[9]]', "[[9]]"),  # an escaped name that spells a taken one
    ('"Input Dims": [[1]], "Input Dims": [[2]]', "[[2]]"),  # twice: the last counts
])
def test_args_not_read_exactly_are_not_taken(odd: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    events = _many(PLAIN)
    events[15000] = _op(15000, odd)
    trace = kineto.load(_write(tmp_path, events))
    args = _args(trace)
    assert args is not None and args.taken is None
    rows = np.arange(trace.n_events)
    keys = [BY_ROW[0]]
    assert _columns(args.rows(keys, rows)) == _walked(args, keys, rows, False, monkeypatch)
    assert trace.stats.lookup_rows(keys, np.array([15000]))[keys[0]][1].tolist() == [value]


def test_a_slice_read_by_msgspec_leaves_nothing_taken(tmp_path: Path):
    events = _many(PLAIN)
    events[12000] = _op(12000, '"Input Dims": [[1]]').replace('"pid": 1', '"pid": 1.5')  # a float pid: msgspec's
    args = _args(kineto.load(_write(tmp_path, events)))
    assert args is not None and args.taken is None


def test_an_end_events_args_are_looked_up_in_the_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """B/E pairs: an E event's args join its B's (late args): such keys are not answered
    from the taken columns."""
    events = _many(PLAIN, 100)
    events += ['{"ph": "B", "name": "s", "pid": 1, "tid": 2, "ts": 5, "args": {"Seq": 1}}',
               '{"ph": "E", "pid": 1, "tid": 2, "ts": 9, "args": {"Input Dims": [[5]]}}']
    trace = kineto.load(_write(tmp_path, events))
    args = _args(trace)
    assert args is not None and args.taken is not None and BY_ROW[0] in args.late
    rows = np.arange(trace.n_events)
    keys = [BY_ROW[0]]
    got = _columns(args.rows(keys, rows))
    assert got == _walked(args, keys, rows, False, monkeypatch) and got[keys[0]][2][-1] == "[[5]]"


def test_take_is_asked_once_with_names():
    tok = tokenized.tokenizer()
    assert tok is not None
    assert tok.taken() is None  # nothing asked for
    with pytest.raises(ValueError):
        tok.take(tuple(f"n{i}" for i in range(33)))
    with pytest.raises(TypeError):
        tok.take((1,))  # type: ignore[arg-type]
    tok.take(("a",))
    with pytest.raises(ValueError):
        tok.take(("b",))
    text = b'{"ph": "X", "name": "x", "ts": 1, "args": {"a": [1, 2], "b": 3}}'
    assert tok.scan(text, len(text)) is not None
    names, per = tok.taken()  # type: ignore[misc]
    assert names == ("a",) and np.frombuffer(per[0][0], np.int32).tolist() == [0] and per[0][2] == [b"[1, 2]"]
    json.loads(per[0][2][0])
    assert tok.taken() is None  # given once, its buffers freed
    assert tok.scan(text, len(text)) is not None and tok.taken() is None


def test_a_pickled_or_subset_trace_looks_up_the_same(monkeypatch: pytest.MonkeyPatch):
    """The taken columns travel with the deferred args: through a pickle, and under a
    subset of the events (its rows mapped back), the same lookups as the batch walk."""
    import pickle

    from polyprof.trace import subset

    trace = kineto.load(DATA / "traces" / "kineto" / "mtia_inference_rank0.json.gz")
    copy = pickle.loads(pickle.dumps(trace))
    assert _args(copy).taken is not None  # type: ignore[union-attr]
    _check(copy, monkeypatch)
    keep = np.zeros(trace.n_events, bool)
    keep[::3] = True
    part = subset.take(trace, keep)
    rows = np.arange(part.n_events)
    got = part.stats.lookup_rows(list(BY_ROW), rows)
    _args(trace).taken = None  # type: ignore[union-attr]  # the same subset, its lookups by the walk
    walked = subset.take(trace, keep).stats.lookup_rows(list(BY_ROW), rows)
    assert got.keys() == walked.keys() and len(got) >= 3
    for k in got:
        assert np.array_equal(got[k][0], walked[k][0]) and got[k][1].tolist() == walked[k][1].tolist(), k
