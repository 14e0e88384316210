"""The compiled tokenizer (formats/kineto/_tokens.c) against the msgspec path it speeds up.

Both paths must give the same Trace, to the codes of its strings, pids and tids: every
Kineto / Chrome JSON file in tests/data (the shared traces, the peers' files, the fuzz
corpus, where both must fail with the same message), the lenient inputs the reader
accepts, generated events with every number shape and value type, and files where
odd events make single slices fall back to msgspec in the middle of the file.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from polyprof.formats import kineto
from polyprof.formats.kineto import slicing, tokenized

DATA = Path(__file__).resolve().parent / "data"
FILES = sorted(p for p in DATA.rglob("*.json*") if p.name.endswith((".json", ".json.gz")) and "rocprof" not in p.parts)

pytestmark = pytest.mark.skipif(tokenized.IMPLEMENTATION != "c", reason="the _tokens extension is not built")


def _load(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(tokenized, "_tokens", None)
        try:
            return kineto.load(path)
        except Exception as e:  # both paths must fail alike
            return f"{type(e).__name__}: {e}"


def assert_identical(a: object, b: object) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a.strings == b.strings
    for k in b.events:
        assert a.events[k].dtype == b.events[k].dtype and np.array_equal(a.events[k], b.events[k]), k
    assert repr(a.planes) == repr(b.planes)
    assert repr(a.tracks) == repr(b.tracks)
    assert list(a.stats) == list(b.stats)
    for k in b.stats:
        x, y = a.stats[k], b.stats[k]
        assert np.array_equal(x.rows, y.rows), k
        assert x.values.dtype == y.values.dtype and x.values.tolist() == y.values.tolist(), k
    for table in ("flows", "counters"):
        x, y = getattr(a, table), getattr(b, table)
        assert list(x) == list(y)
        for k in y:
            assert np.array_equal(x[k], y[k]), (table, k)
    assert a.metadata == b.metadata


def _slices_read_in_c(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(slices the tokenizer read, slices msgspec read) when loading ``path``."""
    counts = [0, 0]
    cut = slicing._cut

    def counting(body: bytearray, scan: object = None) -> object:
        got = cut(body, scan)
        if got is not None:
            counts[type(got[0]) is not tuple] += 1
        return got

    with monkeypatch.context() as m:
        m.setattr(slicing, "_cut", counting)
        kineto.load(path)
    return counts[0], counts[1]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_file_reads_the_same_in_c(path: Path, monkeypatch: pytest.MonkeyPatch):
    assert_identical(_load(path, True, monkeypatch), _load(path, False, monkeypatch))


@pytest.mark.parametrize("name", ["v100_ns_resolution_rank0", "a100_nccl_rank0", "mtia_inference_rank0",
                                  "sampled_rank0"])
def test_the_shared_traces_are_tokenized_in_c(name: str, monkeypatch: pytest.MonkeyPatch):
    c, python = _slices_read_in_c(DATA / "traces" / "kineto" / f"{name}.json.gz", monkeypatch)
    assert c >= 5 and python == 0


def _write(tmp_path: Path, events: list, top: dict | None = None, text: str | None = None) -> Path:
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as f:
        f.write(text if text is not None else json.dumps({"traceEvents": events, **(top or {})}))
    return p


def _number(rng: random.Random, odd: float) -> object:
    """A time in one of the shapes writers print: ints, 1-3 decimals, epoch µs, negatives;
    with probability ``odd`` one msgspec's path reads (more decimals, exponents, strings)."""
    whole = rng.choice([0, 1, 7, 999, 123456, 1712195495519689, 2 ** 43 + 5, 3999999999999999])
    if rng.random() < odd:
        return rng.choice([f"{whole}.{rng.randrange(10 ** 5):05d}", f"{whole}e-3", "\"12.5\"", "null"])
    r = rng.random()
    if r < 0.3:
        return whole
    if r < 0.9:
        return f"{whole}.{rng.randrange(10 ** (k := rng.randint(1, 3))):0{k}d}"
    return f"-{whole}.5"


def _event(rng: random.Random, i: int, odd: float) -> str:
    """One event of any phase and value types; with probability ``odd`` (per field) one
    the tokenizer leaves to msgspec (a float pid, a number as name, a string flow id, ...)."""
    ph = rng.choice(["X"] * 8 + ["i", "I", "B", "E", "s", "f", "t", "C", "M", "b", "e", "n", "XX", "?"])
    pid = rng.choice(["1", "2", "\"1\"", "\"Spans\"", "null"] + ["3.0"] * (rng.random() < odd))
    tid = rng.choice(["7", "\"stream 7\"", "-1", "\"7\""])
    name = rng.choice(["\"aten::mm\"", "\"caf\\u00e9\"", "\"a\\\"b\"", "\"\u4e2d\u6587\"", "\"\"",
                       "\"process_name\""] + ["5"] * (rng.random() < odd))
    fields = [f"\"ph\": \"{ph}\"", f"\"pid\": {pid}", f"\"tid\": {tid}", f"\"name\": {name}",
              f"\"ts\": {_number(rng, odd)}"]
    if rng.random() < 0.9:
        fields.append('"cat": ' + rng.choice(['"kernel"', '"cpu_op"', '"ac2g"']))
    if rng.random() < 0.8:
        fields.append(f"\"dur\": {_number(rng, odd)}")
    if ph in "sft":
        fields.append('"id": ' + rng.choice(['5', '17'] + ['"x"', '-3'] * (rng.random() < odd)))
        if rng.random() < 0.5:
            fields.append("\"bp\": \"e\"")
    if rng.random() < (0.7 if ph not in "sft" else odd):  # flows with args: msgspec's path
        args = rng.choice(["{\"External id\": %d}" % i, "{\"correlation\": %d, \"External id\": 3}" % i,
                           "{\"name\": \"thread %d\"}" % i, "{\"value\": \"0.75\"}", "[1, 2]", "null",
                           "{\"Input Dims\": [[1, 2], []], \"big\": 12345678901234567890}"])
        fields.append(f"\"args\": {args}")
    if rng.random() < odd:
        fields.append("\"bind_id\": 3, \"flow_out\": true")
    rng.shuffle(fields)
    return "{" + ", ".join(fields) + "}"


@pytest.mark.parametrize("seed", range(6))
def test_generated_events_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int):
    rng = random.Random(seed)
    odd = [0.0, 0.0005, 0.002, 0.05][seed % 4]
    events = ",\n".join(_event(rng, i, odd) for i in range(3000))
    path = _write(tmp_path, [], text="{\"traceEvents\": [" + events + "], \"baseTimeNanoseconds\": 5}")
    monkeypatch.setattr(slicing, "CHUNK_BYTES", rng.choice([2048, 16384]))
    assert_identical(_load(path, True, monkeypatch), _load(path, False, monkeypatch))
    c, python = _slices_read_in_c(path, monkeypatch)
    assert c > 0 if odd < 0.01 else python > 0
    assert python > 0 or not odd


def _kineto_like(n: int, odd: dict[int, str]) -> str:
    out = []
    for i in range(n):
        if i in odd:
            out.append(odd[i])
        elif i % 3 == 2:
            out.append('{"ph": "f", "id": %d, "pid": 1, "tid": 2, "ts": %d.500, "cat": "ac2g", "name": "x", '
                       '"bp": "e"}' % (i, 1000 + i))
        else:
            out.append('{"ph": "X", "cat": "kernel", "name": "k%d", "pid": %d, "tid": "stream %d", '
                       '"ts": %d.250, "dur": 3.125, "args": {"correlation": %d, "External id": %d}}'
                       % (i % 17, i % 3, i % 5, 1000 + i, i, i // 2))
    return "{\"traceEvents\": [\n" + ",\n".join(out) + "\n]}"


@pytest.mark.parametrize("odd", [
    '{"ph": "X", "name": "numeric strings", "pid": 1, "tid": 2, "ts": "1234.5", "dur": "2"}',
    '{"ph": "X", "name": "more decimals", "pid": 1, "tid": 2, "ts": 1234.56789, "dur": 1e1}',
    '{"ph": "X", "name": "ts not a number", "pid": 1, "tid": 2, "ts": "soon", "dur": 2}',
    '{"ph": "B", "name": "nested", "pid": "7", "tid": 2, "ts": 1500}, {"ph": "E", "pid": 7, "tid": 2, "ts": 1600}',
    '{"ph": "b", "name": "async", "cat": "c", "id": "0x1", "pid": 1, "tid": 2, "ts": 1500}, '
    '{"ph": "n", "name": "step", "cat": "c", "id": "0x1", "pid": 1, "tid": 2, "ts": 1550}, '
    '{"ph": "e", "name": "async", "cat": "c", "id": "0x1", "pid": 1, "tid": 2, "ts": 1700}',
    '{"ph": "C", "name": "mem", "pid": 1, "ts": 1500, "args": {"used": "0.75", "free": 3}}',
    '{"ph": "s", "id": "flow-a", "pid": 1, "tid": 2, "ts": 1500, "cat": "fwd", "name": "x"}',
    '{"ph": "X", "name": "v2", "pid": 1, "tid": 2, "ts": 1500, "dur": 5, "bind_id": 9, "flow_out": true}',
    '{"ph": "X", "na\\u006de": "escaped key", "pid": 1, "tid": 2, "ts": 1500, "dur": 5}',
    '{"ph": "X", "name": "dup", "name": "twice", "pid": 1, "tid": 2, "ts": 1500, "dur": 5}',
    '{"ph": "X", "name": "\\ud83d\\ude00 pair", "pid": 1, "tid": 2, "ts": 1500, "dur": 5}',
    '{"ph": "M", "name": "thread_name", "pid": 1, "tid": "stream 3", "args": {"name": "my stream"}}',
])
def test_odd_events_in_the_middle_of_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str):
    path = _write(tmp_path, [], text=_kineto_like(4000, {2000: odd}))
    monkeypatch.setattr(slicing, "CHUNK_BYTES", 8192)
    assert_identical(_load(path, True, monkeypatch), _load(path, False, monkeypatch))
    c, python = _slices_read_in_c(path, monkeypatch)
    assert c > 10  # the other slices stay compiled


@pytest.mark.parametrize("text", [
    '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},]}',  # trailing comma
    '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}, {"ph": "i", "s": "t", "ts": 2, "pid": 1, '
    '"tid": 1, "name": "b"}',  # the array format, no closing bracket
    '{"traceEvents": [{"ph": "XXX", "name": "first letter", "pid": 1, "tid": "1", "ts": 1, "dur": 2}]}',
])
def test_lenient_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str):
    path = _write(tmp_path, [], text=text * 1)
    assert_identical(_load(path, True, monkeypatch), _load(path, False, monkeypatch))


def test_scan_never_crashes_on_cut_or_garbled_text():
    """Every prefix and random damage of real events: a tuple or None, never a crash."""
    rng = random.Random(1)
    text = _kineto_like(60, {}).encode()
    body = text[text.index(b"[") + 1:text.rindex(b"]")]
    for _ in range(3000):
        b = bytearray(body)
        for _ in range(rng.randint(0, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        stop = rng.randint(0, len(b))
        tok = tokenized.tokenizer()
        got = tok.scan(b, stop)  # type: ignore[union-attr]
        assert got is None or (type(got) is tuple and got[0] >= 1)
    with pytest.raises(ValueError):
        tokenized.tokenizer().scan(b"{}", 5)  # type: ignore[union-attr]


@pytest.mark.parametrize("args", [
    '{"correlation": 5, "External id": 5, "correlation": 6}',  # twice: ids.py reads them
    '{"correlation": "7", "External id": 5}',  # a string id
    '{"correlation": 1.0}',
    '{"correlation_id": 4, "external_id": 9}',  # polyprof's own spellings
    '{"corr\\u0065lation": 4}',
    '{"correlation": -9223372036854775808}',  # ids.py's "absent"
    '{"note": "x -9223372036854775808 y"}',
    '{"huge": 1e400}',  # msgspec finds it out of range: the file is refused alike
    '{"small": 1e-5, "long": 0.1234567890123456789012}',
    '{"Bytes": 512, "Addr": 1234, "Total Allocated": 4096, "Total Reserved": 8192, "Device Type": 1, '
    '"Device Id": 0}',  # a memory event
    '{"Device Type": 0, "Device Id": -1, "Bytes": 4}',  # torch 1.8's memory event: no totals
    '{"k": "Device Type", "Bytes": 4}',  # the marker as a value: no memory event
    '{"nested": {"Total Allocated": 1}, "s": "a \\"Total Allocated"}',
    '{"alloc_bytes": 64}',
    '[1, 2]',
    '{"name": "caf\\u00e9 \u4e2d"}',
])
def test_args_found_by_the_tokenizer_are_typed_as_msgspec_types_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      args: str):
    """More than one batch of args (8192 events), the first all tokenized in C: its checks,
    ids and memory stats as the Python path makes them from the same text."""
    odd = '{"ph": "X", "cat": "cpu_op", "name": "odd args", "pid": 1, "tid": 2, "ts": 1500, "dur": 1, "args": %s}'
    path = _write(tmp_path, [], text=_kineto_like(20000, {3000: odd % args}))
    compiled = _load(path, True, monkeypatch)
    assert_identical(compiled, _load(path, False, monkeypatch))
    if isinstance(compiled, str):
        assert "1e400" in args and "out of range" in compiled
        return
    c, python = _slices_read_in_c(path, monkeypatch)
    assert c >= 3 and python == 0


def test_ids_of_a_compiled_batch_come_from_the_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from polyprof.formats.kineto import collector

    calls = {"id_columns": 0, "fast_ids": 0, "_big_numbers": 0}
    for name in calls:
        def counted(*a: object, _f: object = getattr(collector, name), _n: str = name) -> object:
            calls[_n] += 1
            return _f(*a)  # type: ignore[operator]
        monkeypatch.setattr(collector, name, counted)
    kineto.load(_write(tmp_path, [], text=_kineto_like(20000, {})))
    assert calls == {"id_columns": 2, "fast_ids": 0, "_big_numbers": 0}  # both batches, the array's tail too


@pytest.mark.parametrize("pieces", [True, False])
def test_args_kept_deflated_decode_as_plain_text(monkeypatch: pytest.MonkeyPatch, pieces: bool):
    """packed.py: the batches kept deflated (deflated from the tokenizer's pieces as they
    are, or from their text joined first) read back as the list of texts they were
    (items, slices, first rows), and every stat, a lookup and some rows decode the same."""
    from polyprof.formats.kineto import collector, packed

    path = DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz"
    with monkeypatch.context() as m:
        if not pieces:
            m.setattr(packed.PackedBatches, "append_parts", lambda self, base, parts, names=None: self.append(
                (base, b"[" + b",".join(parts) + b"]"), names))
        packed_trace = kineto.load(path)

    class Plain(list):  # the batches as plain texts (the arg names the tokenizer found left out)
        def append(self, batch: object, names: object = None) -> None:
            super().append(batch)

        def append_parts(self, base: int, parts: list, names: object = None) -> None:
            super().append((base, b"[" + b",".join(parts) + b"]"))

    with monkeypatch.context() as m:
        m.setattr(collector, "PackedBatches", Plain)
        plain_trace = kineto.load(path)
    batches = plain_trace.stats._deferred[0].decode.__self__.batches
    held = packed_trace.stats._deferred[0].decode.__self__.batches
    assert isinstance(held, packed.PackedBatches) and type(batches) is Plain and len(batches) > 2
    assert list(held) == batches and held[1:3] == batches[1:3] and packed.bases(held) == packed.bases(batches)
    if packed.DEFLATED:
        assert held.nbytes() < sum(len(t) for _, t in batches) / 4
    rows = np.arange(0, plain_trace.n_events, 97)
    a, b = (t.stats.lookup_rows(["stream", "grid"], rows) for t in (packed_trace, plain_trace))
    assert a.keys() == b.keys() == {"stream", "grid"}
    assert all(np.array_equal(a[k][0], b[k][0]) and list(a[k][1]) == list(b[k][1]) for k in a)
    assert_identical(packed_trace, plain_trace)


@pytest.mark.parametrize("name", ["triton_example", "cuda_event_sync_multistream", "a100_alexnet_small"])
def test_a_small_trace_is_all_tokenized_array_tail_included(name: str, monkeypatch: pytest.MonkeyPatch):
    from polyprof.formats.kineto import collector

    decoded: list[int] = []
    add = collector._Collector.add
    monkeypatch.setattr(collector._Collector, "add", lambda self, evs: (decoded.append(len(evs)), add(self, evs)))
    trace = kineto.load(DATA / "traces" / "kineto" / f"{name}.json.gz")
    assert trace.n_events and decoded == []


# ---------------------------------------------------------------- the args' names
def _deferred_args(trace: object) -> object:
    from polyprof.formats.kineto import deferred

    return next(p.decode.__self__ for p in trace.stats._deferred  # type: ignore[attr-defined]
                if isinstance(getattr(p.decode, "__self__", None), deferred.DeferredArgs))


def _names_in(text: bytes) -> set:
    """The names of a batch's args as msgspec decodes them (args not an object: no names)."""
    return set().union(*(d.keys() for d in json.loads(text) if isinstance(d, dict)))


@pytest.mark.parametrize("name", ["a100_nccl_rank0", "v100_ns_resolution_rank0", "mtia_inference_rank0",
                                  "sampled_rank0", "mi250_rocm_minitoy", "cpu_only_rank34"])
def test_the_args_names_the_tokenizer_finds_are_every_batchs_names(name: str):
    """What a lookup of an absent key is answered from (deferred.py) without inflating or
    walking a batch: each batch's arg names, found at load, exactly as msgspec decodes them."""
    args = _deferred_args(kineto.load(DATA / "traces" / "kineto" / f"{name}.json.gz"))
    batches = args.batches  # type: ignore[attr-defined]
    assert batches.names and all(n is not None for n in batches.names)
    for (_, text), names in zip(batches, batches.names):
        assert names == _names_in(text)


@pytest.mark.parametrize("key", ["Input Strides", "blocks per SM"])
def test_a_few_rows_lookup_inflates_no_batch_without_the_arg(key: str, monkeypatch: pytest.MonkeyPatch):
    """A lookup of a few rows' args not taken at load (FLOPs read one call's ``Input
    Strides``; torch 1.x's ops have none) inflates and walks no batch the tokenizer found
    to lack the arg (tb_plugin's 2021 resnet50: a 7 MB batch, 6-28 ms of its summary),
    and still finds the arg in the batches that have it (``blocks per SM``: not the first)."""
    from polyprof.formats.kineto import packed

    trace = kineto.load(DATA / "traces" / "kineto" / "a100_nccl_rank0.json.gz")
    batches = _deferred_args(trace).batches  # type: ignore[attr-defined]
    assert all(n is not None for n in batches.names)
    inflated: list[int] = []
    get = packed.PackedBatches.__getitem__
    monkeypatch.setattr(packed.PackedBatches, "__getitem__", lambda self, i: (inflated.append(i), get(self, i))[1])
    holding = [i for i, n in enumerate(batches.names) if key in n]
    rows = np.arange(0, trace.n_events, max(1, trace.n_events // 200))
    found = trace.stats.lookup_rows([key], rows)
    assert (key in found) == bool(holding)
    assert set(inflated) <= set(holding)
    if holding:
        assert 0 not in holding and found[key][0].sum() > 0 and set(inflated) == set(holding)


@pytest.mark.parametrize("args, known", [
    ('{"Input Dims": [[1]], "Input Dims": [[2]]}', True),  # a name twice: still its names
    ('{"caf\\u00e9": 1}', False),  # an escaped name
    ('[1, 2]', False),  # args that are not an object
    ('null', False),
    ('{}', True),
    (json.dumps({f"a{i}": i for i in range(80)}), False),  # 80 names: past the tokenizer's 64
])
def test_a_batch_whose_names_the_tokenizer_cannot_tell(tmp_path: Path, args: str, known: bool):
    odd = '{"ph": "X", "cat": "cpu_op", "name": "odd args", "pid": 1, "tid": 2, "ts": 1500, "dur": 1, "args": %s}'
    trace = kineto.load(_write(tmp_path, [], text=_kineto_like(20000, {3000: odd % args})))
    args_ = _deferred_args(trace)
    batches = args_.batches  # type: ignore[attr-defined]
    assert (batches.names[0] is not None) == known and batches.names[1] == _names_in(batches[1][1])
    if known:
        assert batches.names[0] == _names_in(batches[0][1])
    for key in ("correlation", "External id", "Input Dims", "a7", "café", "nothing"):
        want = any(key in _names_in(text) for _, text in batches)
        assert args_.may_hold(key) == want or (not known and args_.may_hold(key)), key
