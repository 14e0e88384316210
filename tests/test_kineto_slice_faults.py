"""A Kineto JSON file with a fault in the middle: memory bounded by a slice, the fault said
at its byte (and line) of the file (formats/kineto/slicing.py, faults.py).

A slice that does not parse used to send the whole rest of the file to one orjson parse
(and ``lenient.repair``'s copy of it): one raw control character in a 3.6M-event trace
took 20 GB. Now the slice is mended on its own, and a fault it cannot mend is refused at
once, at its byte of the whole text (it was given relative to the last slice). Both the
compiled tokenizer and the msgspec path read each file (tests/test_kineto_tokens.py's
differential).
"""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import pytest

from polyprof.errors import TraceFormatError
from polyprof.formats import kineto
from polyprof.formats.kineto import lenient, slicing, tokenized

from test_kineto_tokens import assert_identical

#: the events of the generator the audit used (tmp/s34/audR/gen_kineto.py): per iteration
#: an op, its launch, its kernel and a flow, 100 steps
_HEAD = ('{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"FakeGPU","totalGlobalMem":85899345920}],'
         '"traceEvents":[\n')


def _kineto_text(iters: int, op0: str = "aten::op0") -> bytes:
    out = [_HEAD]
    t, kt, per_step = 1_000_000.0, 1_000_000.0, max(1, iters // 100)
    for c in range(iters):
        if c % per_step == 0:
            out.append('{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,"tid":1,"ts":%.3f,'
                       '"dur":%.3f},\n' % (c // per_step, t, per_step * 20.0))
        name = op0 if c % 50 == 0 else "aten::op%d" % (c % 50)
        kt = max(kt, t + 8)
        out.append('{"ph":"X","cat":"cpu_op","name":"%s","pid":1,"tid":1,"ts":%.3f,"dur":10.0,'
                   '"args":{"External id":%d}},\n' % (name, t + 1, c))
        out.append('{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%.3f,'
                   '"dur":4.0,"args":{"correlation":%d,"External id":%d}},\n' % (t + 3, c, c))
        out.append('{"ph":"X","cat":"kernel","name":"kernel_%d","pid":0,"tid":7,"ts":%.3f,"dur":6.0,'
                   '"args":{"correlation":%d,"External id":%d,"device":0,"stream":7}},\n' % (c % 20, kt, c, c))
        out.append('{"ph":"s","id":%d,"pid":1,"tid":1,"ts":%.3f,"cat":"ac2g","name":"ac2g"},\n' % (c, t + 3))
        out.append('{"ph":"f","id":%d,"pid":0,"tid":7,"ts":%.3f,"cat":"ac2g","name":"ac2g","bp":"e"},\n' % (c, kt))
        kt += 6
        t += 20
    out.append('{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"python"}}\n]}\n')
    return "".join(out).encode()


def _load(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(tokenized, "_tokens", None)
        return kineto.load(path)


def _refused(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(tokenized, "_tokens", None)
        with pytest.raises(TraceFormatError) as ei:
            kineto.load(path)
    return str(ei.value)


def _peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """30,000 iterations (90,100 events and 30,000 flows, 10 MB of JSON, ~40 of the reader's
    256 KiB slices, gzipped): clean, and with one raw
    0x01 byte in the first op's name (a slice in the middle of the file: the 2,000th op)."""
    d = tmp_path_factory.mktemp("big")
    clean = _kineto_text(30_000)
    i = clean.index(b"aten::op0", len(clean) // 3)
    dirty = clean[:i + 4] + b"\x01" + clean[i + 4:]
    out = {}
    for name, text in (("clean", clean), ("ctrl", dirty)):
        out[name] = d / f"{name}.json.gz"
        out[name].write_bytes(gzip.compress(text, 1))
    return out


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "msgspec"])
def test_a_control_character_in_a_big_trace_is_mended_in_its_slice(big, monkeypatch, compiled: bool):
    if compiled and tokenized.IMPLEMENTATION != "c":
        pytest.skip("the _tokens extension is not built")
    got: list = []  # each file loaded once, under tracemalloc: the clean one, then the mended one
    clean_mib = _peak_mib(lambda: got.append(_load(big["clean"], compiled, monkeypatch)))
    ctrl_mib = _peak_mib(lambda: got.append(_load(big["ctrl"], compiled, monkeypatch)))
    clean, t = got
    # the whole rest of the file parsed at once took 10x the memory (Python objects of 24 MB of text)
    assert ctrl_mib < clean_mib * 1.3 + 8, (ctrl_mib, clean_mib)
    assert t.metadata["warnings"] == ["kineto: JSON repaired: 1 control characters in strings"]
    names, clean_names = t.names().tolist(), clean.names().tolist()
    changed = [i for i, (a, b) in enumerate(zip(names, clean_names)) if a != b]
    assert len(changed) == 1 and names[changed[0]] == "aten\x01::op0" and clean_names[changed[0]] == "aten::op0"
    assert t.n_events == clean.n_events == 90_100
    for k in ("track", "start_ns", "dur_ns"):
        assert (t.events[k] == clean.events[k]).all(), k
    assert len(t.flows["src"]) == len(clean.flows["src"]) == 30_000


def test_the_compiled_and_msgspec_paths_mend_alike(big, monkeypatch):
    if tokenized.IMPLEMENTATION != "c":
        pytest.skip("the _tokens extension is not built")
    assert_identical(_load(big["ctrl"], True, monkeypatch), _load(big["ctrl"], False, monkeypatch))


def _write(tmp_path: Path, name: str, text: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text)
    return p


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "msgspec"])
def test_garbage_after_the_array_start_is_refused_at_its_byte_in_bounded_memory(tmp_path, monkeypatch,
                                                                               compiled: bool):
    """The audit's ``{"traceEvents":[`` then zeros: 2 GB took 8.4 GB and said 'Not enough
    memory ... char 0'; the fault is the NUL at byte 16."""
    p = tmp_path / "zeros.json"
    p.write_bytes(b'{"traceEvents":[')
    with open(p, "r+b") as f:
        f.truncate(200 << 20)  # sparse: 200 MB of zeros
    got: list = []
    mib = _peak_mib(lambda: got.append(_refused(p, compiled, monkeypatch)))
    assert got[0] == f"{p}: invalid JSON (invalid character: line 1 column 17 (byte 16))"
    assert mib < 40, mib


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "msgspec"])
def test_a_cut_file_is_refused_at_its_end_not_at_the_last_slices_byte(tmp_path, monkeypatch, compiled: bool):
    text = _kineto_text(10_000)
    cut = len(text) * 2 // 3
    p = _write(tmp_path, "cut.json", text[:cut])
    lines = text[:cut].count(b"\n")
    column = cut - text.rfind(b"\n", 0, cut)
    assert _refused(p, compiled, monkeypatch) == \
        f"{p}: invalid JSON (unexpected end of data: line {lines + 1:,} column {column:,} (byte {cut:,}))"


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "msgspec"])
def test_a_fault_repair_does_not_mend_is_said_at_its_byte_not_the_mended_ones(tmp_path, monkeypatch,
                                                                              compiled: bool):
    """A slice with a raw control character (mended) and, later in it, a missing value:
    the missing value's byte and line, counted in the file as written."""
    text = _kineto_text(10_000)
    i = text.index(b"aten::op0", len(text) // 2)
    text = text[:i] + b"\t\x01" + text[i:]  # two raw control characters, then later...
    j = text.index(b'"dur":4.0', i) + len(b'"dur":')
    text = text[:j] + b"," + text[j + 3:]  # ..."dur":,} : no value
    p = _write(tmp_path, "bad.json", text)
    lines = text[:j].count(b"\n") + 1
    column = j - text.rfind(b"\n", 0, j)
    assert _refused(p, compiled, monkeypatch) == \
        f"{p}: invalid JSON (invalid character: line {lines:,} column {column:,} (byte {j:,}))"


def test_after_the_array_a_fault_is_said_at_its_byte(tmp_path, monkeypatch):
    text = _kineto_text(2_000)[:-3] + b'], "baseTimeNanoseconds": 5, "x": [1, 2,, 3]}\n'
    at = text.index(b",, 3") + 1
    p = _write(tmp_path, "after.json", text)
    line, column = text.count(b"\n", 0, at) + 1, at - text.rfind(b"\n", 0, at)
    assert _refused(p, True, monkeypatch) == (f"{p}: invalid JSON after the traceEvents array (invalid character: "
                                               f"line {line:,} column {column:,} (byte {at:,}))")


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "msgspec"])
def test_a_long_value_after_the_array_is_read_not_refused(tmp_path, monkeypatch, compiled: bool):
    """Events, then (after the array) a top-level value of many objects, longer than a
    slice: its '},{' are no event boundaries, and the array's end is no fault."""
    monkeypatch.setattr(slicing, "CHUNK_BYTES", 4096)
    after = ', "deviceProperties": [' + ", ".join('{"id": %d, "name": "GPU %d"}' % (i, i) for i in range(3000)) + "]}"
    text = _kineto_text(500)[:-3] + b"]" + after.encode() + b"\n"
    t = _load(_write(tmp_path, "after.json", text), compiled, monkeypatch)
    assert t.n_events == 1_600 and "warnings" not in t.metadata


def test_original_offset_walks_back_through_the_mended_text():
    data = b'[{"a": "x\x01y", "b": [1,], "c": "\x02\x03"}, x]'
    fixed, counts = lenient.repair(data)
    assert counts == {"control characters in strings": 3, "trailing commas": 1}
    for at, want in ((0, 0), (fixed.index(b"[1]"), data.index(b"[1,")), (fixed.index(b'"c"'), data.index(b'"c"')),
                     (fixed.index(b"x]"), data.index(b"x]")), (fixed.index(b"x\\u0001") + 3, data.index(b'"x'))):
        assert lenient.original_offset(data, at) == want, at
