"""Kineto's [memory] args read by the compiled pass (formats/_kineto_memory.c) against
msgspec's typed decode and the general path it falls back to.

Both must give the same stats: the real traces in tests/data that hold memory events
(whole Traces compared), and generated batches of args with every value shape the
pass must read or leave alone (integers at the int64 and uint64 edges, addresses in the
upper half beside negative and missing ones, floats, strings, null, nested values,
escaped and repeated keys, odd whitespace, elements that are not objects, broken JSON).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

from polyprof.formats import kineto, kineto_memory
from polyprof.trace.stats import TextCodes

DATA = Path(__file__).resolve().parent / "data"
FILES = sorted(DATA.glob("peers/tracelens_perf/*.json.gz"))

pytestmark = pytest.mark.skipif(kineto_memory.IMPLEMENTATION != "c", reason="the _kineto_memory extension is not built")


def _stats(text: bytes, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(kineto_memory, "_kineto_memory", None)
        try:
            got = kineto_memory.batch_stats(text, 100, msgspec.json.decode)
        except Exception as e:  # both paths must fail alike
            return f"{type(e).__name__}: {e}"
    return {k: (r.tolist(), *_values(v)) for k, (r, v) in got.items()}


def _values(v: np.ndarray | TextCodes) -> tuple[str, list]:
    """A column's dtype and values; text given as codes as the object column they make."""
    v = v.text() if isinstance(v, TextCodes) else v
    return v.dtype.str, v.tolist()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_real_traces_with_memory_events_read_the_same(path, monkeypatch):
    compiled = kineto.load(path)
    with monkeypatch.context() as m:
        m.setattr(kineto_memory, "_kineto_memory", None)
        plain = kineto.load(path)
    assert list(compiled.stats) == list(plain.stats)
    for key in kineto_memory.MEMORY_KEYS & set(plain.stats):
        x, y = compiled.stats[key], plain.stats[key]
        assert np.array_equal(x.rows, y.rows), key
        assert x.values.dtype == y.values.dtype and x.values.tolist() == y.values.tolist(), key
    assert len(compiled.stats["alloc_bytes"]) > 100


_EDGES = [0, 1, -1, 64, -(1 << 20), (1 << 63) - 1, -(1 << 63), -(1 << 63) + 1, 1 << 63, (1 << 64) - 1, 1 << 64,
          -(1 << 63) - 1, 10 ** 30]


def _value(rng: random.Random, odd: float) -> str:
    r = rng.random()
    if r > odd:
        return str(rng.choice([rng.randint(-(1 << 40), 1 << 40), rng.randint(0, 1 << 20)]))
    return rng.choice([str(rng.choice(_EDGES)), "1.0", "1e3", "-0", "0", '"12"', "null", "true", "[1, 2]",
                       '{"a": 1}', "-", "01", "1.", ".5", "2E-2"])


def _args(rng: random.Random, odd: float) -> str:
    if rng.random() < odd / 2:
        return rng.choice(["[]", "1", '"x"', "null", "{}"])
    fields = []
    names = ["Bytes", "Addr", "Total Allocated", "Total Reserved", "Device Type", "Device Id"]
    for name in names:
        if rng.random() < 0.85:
            fields.append((name, _value(rng, odd)))
    for _ in range(rng.randint(0, 3)):
        if rng.random() < odd:  # what the compiled pass leaves to msgspec: escaped or non-ASCII keys and text
            fields.append((rng.choice(["ü", 'a\\"b', "Byt\\u0065s"]), rng.choice(['"é"', '"x"'])))
        else:
            fields.append((rng.choice(["Input Dims", "name", "Ev Idx"]),
                           rng.choice(['"text"', '"a\\\\b"', '"\\u00e9"', '[[1], {"k": null}]', "3.5", "-7", "false",
                                       '"tab\\there"', "[]", "{}", '"\\/\\b\\f\\n\\r"'])))
        if rng.random() < odd:  # polyprof's own spelling, or text that only looks like it
            fields.append(rng.choice([("alloc_bytes", "12"), ("k", '"alloc_bytes"'), ("k", '"\\"alloc_bytes"'),
                                      ("k", '"\\\\alloc_bytes"'), ("k", '"xalloc_bytes"'), ("k", '["alloc_bytes "]')]))
    if rng.random() < odd:
        fields.append((rng.choice(names), _value(rng, 0)))  # a key twice
    rng.shuffle(fields)
    sep = rng.choice([", ", ",", " ,\n ", ",\t"])
    return "{" + sep.join(f'"{k}"{rng.choice([":", ": ", " : "])}{v}' for k, v in fields) + "}"


@pytest.mark.parametrize("seed", range(100))
def test_generated_batches_read_the_same(seed, monkeypatch):
    rng = random.Random(seed)
    odd = rng.choice([0.0, 0.02, 0.1, 0.3])
    items = [_args(rng, odd) for _ in range(rng.choice([0, 1, 2, 5, 60]))]
    text = "[" + ",".join(items) + "]"
    if rng.random() < 0.1:  # broken JSON
        text = text[: rng.randrange(len(text) + 1)] + rng.choice(["", "x", "]", "}"])
    data = text.encode()
    assert _stats(data, True, monkeypatch) == _stats(data, False, monkeypatch)
    got = kineto_memory._kineto_memory.columns(data)
    if got is not None:  # its own search for polyprof's spelling, as `in` finds it
        assert got[10] == (b'"alloc_bytes"' in data)


def test_plain_kineto_batches_are_read_by_the_compiled_pass(monkeypatch):
    """A batch as torch writes it never reaches msgspec."""
    args = [{"Total Reserved": 2097152, "Total Allocated": 512 * i, "Bytes": 512, "Device Id": 0, "Device Type": 1,
             "Addr": 139_000_000_000_000 + i} for i in range(50)] + [{"Input Dims": [[1, 2]], "name": "op"}]
    text = json.dumps(args).encode()
    monkeypatch.setattr(kineto_memory, "_decode_fast", None)  # would raise if called
    got = kineto_memory.batch_stats(text, 0, msgspec.json.decode)
    assert got["alloc_bytes"][1].tolist() == [512] * 50
    assert _values(got["memory_device"][1]) == ("|O", ["/device:GPU:0"] * 50)
    top = json.dumps([{"Bytes": 1, "Total Allocated": 1, "Addr": (1 << 64) - 16}]).encode()
    assert kineto_memory.batch_stats(top, 0, msgspec.json.decode)["addr"][1].tolist() == [-16]


def test_an_upper_half_address_beside_a_negative_one_goes_to_the_general_path(monkeypatch):
    mixed = json.dumps([{"Bytes": 1, "Total Allocated": 1, "Addr": (1 << 64) - 16},
                        {"Bytes": 1, "Total Allocated": 2, "Addr": -5}]).encode()
    assert kineto_memory._compiled_columns(kineto_memory._kineto_memory.columns(mixed), 0) is None
    assert _stats(mixed, True, monkeypatch) == _stats(mixed, False, monkeypatch)


@pytest.mark.parametrize("inner", ['{"alloc_bytes": 1}', '{"k": "alloc_bytes"}', '{"k": "\\"alloc_bytes"}',
                                   '{"k": "\\\\alloc_bytes"}', '{"k": "xalloc_bytes"}', '{"k": ["alloc_bytes "]}',
                                   '{"k": "\\\\\\"alloc_bytes"}', '{"k": "alloc_bytes\\""}', '{"alloc_bytesx": 2}'])
def test_polyprofs_own_spelling_is_found_as_a_text_search_finds_it(inner, monkeypatch):
    text = f'[{{"Bytes": 4, "Total Allocated": 4}}, {inner}]'.encode()
    got = kineto_memory._kineto_memory.columns(text)
    assert got is not None and got[10] == (b'"alloc_bytes"' in text)
    assert _stats(text, True, monkeypatch) == _stats(text, False, monkeypatch)


@pytest.mark.parametrize("special", ['"', "\\\\", '\\"', "\\u00e9", "\\n", "\x01", "\x1f", "\x7f", "é", " ", "\t",
                                     "alloc_bytes", '\\"alloc_bytes'])
def test_strings_are_read_alike_wherever_their_special_bytes_fall(special, monkeypatch):
    """The pass reads strings eight bytes at a time: every odd byte at every offset of a
    word, in keys and in values, and keys cut short by the end of the text."""
    for off in range(18):
        for tail in (0, 1, 7, 8, 9):
            inner = "k" * off + special + "v" * tail
            for element in (f'{{"Bytes": 8, "Total Allocated": 8, "{inner}": 1}}',
                            f'{{"Bytes": 8, "{inner}": "{inner}", "Total Allocated": 8}}',
                            f'{{"Total Allocated": 8, "Bytes": {off}}}'):
                text = f"[{element}]".encode()
                assert _stats(text, True, monkeypatch) == _stats(text, False, monkeypatch), text
                got = kineto_memory._kineto_memory.columns(text)
                if got is not None:
                    assert got[10] == (b'"alloc_bytes"' in text), text


def test_the_pass_says_which_columns_are_absent_and_whether_one_device():
    text = json.dumps([{"Bytes": 1, "Total Allocated": 1, "Device Type": 1, "Device Id": 0},
                       {"Input Dims": [[2]]},
                       {"Bytes": -1, "Total Allocated": 0, "Addr": 5, "Device Type": 1, "Device Id": 0}]).encode()
    index, nbytes, addr, total, reserved, dtype, did, absent, mixed, one, alloc = \
        kineto_memory._kineto_memory.columns(text)
    assert np.frombuffer(index, np.int64).tolist() == [0, 2]
    assert np.frombuffer(nbytes, np.int64).tolist() == [1, -1]
    assert absent == 0b001010 and not mixed and one and not alloc  # Addr and Total Reserved absent somewhere
    text = text.replace(b'"Device Id": 0}]', b'"Device Id": 1}]')
    assert not kineto_memory._kineto_memory.columns(text)[9]


def test_torch_18_memory_events_without_totals_are_read_by_the_compiled_pass(monkeypatch):
    """Torch 1.8's Kineto wrote [memory] args with Bytes, Device Type and Device Id alone
    (tb_plugin's resnet50 samples): memory events all the same, read whole by the pass."""
    args = [{"Device Type": 0, "Device Id": -1, "Bytes": 4}, {"Device Type": 1, "Device Id": 0, "Bytes": 512},
            {"Input Dims": [[1, 2]], "name": "op"}, {"Device Type": 1, "Device Id": 0, "Bytes": -512},
            {"Device Id": 0, "Bytes": 8}, {"Device Type": 1, "Device Id": 0}]  # neither is a memory event
    text = json.dumps(args).encode()
    with monkeypatch.context() as m:
        m.setattr(kineto_memory, "_decode_fast", None)  # would raise if called
        got = _stats(text, True, monkeypatch)
    assert got == _stats(text, False, monkeypatch)
    assert got["alloc_bytes"] == ([100, 101, 103], "<i8", [4, 512, -512])
    assert got["memory_device"] == ([101, 103], "|O", ["/device:GPU:0"] * 2)  # CPU: the event's own plane
    assert "total_allocated" not in got and "addr" not in got


def test_tb_plugin_sample_memory_events_read_the_same(tmp_path, monkeypatch):
    """A torch 1.8 trace with 12,838 [memory] events, none with totals (tb_plugin's sample)."""
    import lzma

    src = DATA / "peers" / "tb_plugin" / "resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.xz"
    path = tmp_path / src.name[:-3]
    path.write_bytes(lzma.decompress(src.read_bytes()))
    test_real_traces_with_memory_events_read_the_same(path, monkeypatch)
    assert len(kineto.load(path).stats["alloc_bytes"]) == 12838
