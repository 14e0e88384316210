"""The members around ``traceEvents`` read in bounded memory (formats/kineto/toplevel.py, _skip.c).

Chrome's trace format puts ``systemTraceEvents`` (ftrace text: one string of hundreds of
MB) and other keys before ``traceEvents``, V8's traces put ``stackFrames`` and
``samples`` after it. Such a document was parsed in one piece where its events array
was not in its first 64 MiB (200 MB of ftrace text before it: 850 MB resident, 6 s), and
what followed the array always was (a 200 MB ``stackFrames``: 2.6 GB, 76 s). Now the top
level is walked member by member: a value over 16 MiB is scanned for its extent only,
checked as it goes, and named in a warning. The scanner (``_skip.c``) is held to its
Python path (msgspec's check of the whole text, with lenient.repair's mends) on random
values and faults.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyprof.errors import TraceFormatError
from polyprof.formats import kineto
from polyprof.formats.kineto import slicing, toplevel

from test_kineto_slice_faults import _kineto_text

compiled = pytest.mark.skipif(toplevel.IMPLEMENTATION != "c", reason="the _skip extension is not built")
both = pytest.mark.parametrize("skip", ["c", "python"])

_EVENTS = _kineto_text(2_000)  # 6,100 events and 2,000 flows (2,000 iterations: op, launch, kernel, flow)
_HEAD, _ARRAY = _EVENTS.split(b'"traceEvents":[', 1)
_ARRAY = b'"traceEvents":[' + _ARRAY[:_ARRAY.rindex(b"]") + 1]
_TAIL = b', "traceName": "rank0.pt.trace.json", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1000}\n'


def _doc(before: bytes = b"", after: bytes = b"") -> bytes:
    """A Kineto trace with members ``before`` and ``after`` its events (each ``"key": value,``
    and ``, "key": value``)."""
    return _HEAD + before + _ARRAY + after + _TAIL


def _ftrace(size: int) -> bytes:
    """A ``systemTraceEvents`` string of ``size`` bytes of ftrace text (its newlines escaped)."""
    line = ("  python-4242  [001] d..2  1234.567890: sched_switch: prev_comm=python prev_pid=4242 "
            "prev_state=R ==> next_comm=swapper/1 next_pid=0\n")
    return json.dumps(line * (size // len(line))).encode()


def _stack_frames(size: int) -> bytes:
    """A V8 ``stackFrames`` object of about ``size`` bytes (many small objects: the worst to parse)."""
    n = size // 80
    return b"{" + b",".join(b'"%d":{"category":"libtorch_cpu.so","name":"at::native::fn_%d","parent":"%d"}'
                            % (i, i % 977, max(i - 1, 0)) for i in range(n)) + b"}"


def _use(skip: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if skip == "c" and toplevel.IMPLEMENTATION != "c":
        pytest.skip("the _skip extension is not built")
    if skip == "python":
        monkeypatch.setattr(toplevel, "_skip", None)


def _write(tmp_path: Path, name: str, text: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text)
    return p


#: (VmHWM: this process's own peak; ru_maxrss starts at the parent's, pytest's, in a child)
_CHILD = """
import re, sys
import polyprof
t = polyprof.load(sys.argv[1])
print(t.n_events, re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
"""


def _peak(path: Path) -> tuple[int, int]:
    """Events and peak resident KiB of a fresh process that loads ``path``."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True)
    n, kib = out.stdout.split()
    return int(n), int(kib)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 6,100 events alone, after 80 MB of ftrace text (past the 64 MiB the events
    array was looked for in), and before a 80 MB ``stackFrames`` object."""
    d = tmp_path_factory.mktemp("big")
    size = 80 << 20
    return {"plain": _write(d, "plain.json", _doc()),
            "systrace": _write(d, "systrace.json", _doc(before=b'"systemTraceEvents": ' + _ftrace(size) + b", ")),
            "frames": _write(d, "frames.json", _doc(after=b', "stackFrames": ' + _stack_frames(size)))}


@compiled
@pytest.mark.parametrize("name", ["systrace", "frames"])
def test_a_long_value_around_the_events_costs_no_memory(big, name: str):
    """Before: 80 MB of ftrace text before the events took the whole file parsed at once
    (+390 MB resident over the events alone), an 80 MB stackFrames after them +1.5 GB (and
    38 s). Now each is scanned in blocks: +16 and +20 MB, the 16 MiB of a value held until
    it is known to be longer (toplevel.BOUND)."""
    n, plain = _peak(big["plain"])
    got, peak = _peak(big[name])
    assert got == n == 6_100
    assert peak < plain + (toplevel.BOUND >> 10) + 16 * 1024, (peak, plain)


@both
@pytest.mark.parametrize("name", ["systrace", "frames"])
def test_a_long_value_is_named_not_read_and_the_rest_is_read(big, monkeypatch, skip: str, name: str):
    _use(skip, monkeypatch)
    plain, t = kineto.load(big["plain"]), kineto.load(big[name])
    key = {"systrace": "systemTraceEvents", "frames": "stackFrames"}[name]
    size = big[name].stat().st_size - big["plain"].stat().st_size - len(f'"{key}": , ')
    assert t.metadata["warnings"] == [f"kineto: top-level key '{key}' ({size / 2 ** 20:.1f} MiB) not read: "
                                      "a top-level value is read up to 16 MiB (64 MiB in all)"]
    assert key not in t.metadata
    for k in ("deviceProperties", "schemaVersion", "traceName", "displayTimeUnit", "baseTimeNanoseconds"):
        assert t.metadata[k] == plain.metadata[k], k
    assert t.n_events == plain.n_events and (t.events["start_ns"] == plain.events["start_ns"]).all()
    assert len(t.flows["src"]) == len(plain.flows["src"]) == 2_000


@both
def test_values_within_the_bound_are_read_as_before(tmp_path, monkeypatch, skip: str):
    """Members of every type before and after the events, a key given twice (its last
    value, as a JSON parser takes it), and a trailing comma and a raw control character
    in the members (mended and counted, as in the events)."""
    _use(skip, monkeypatch)
    before = b'"a": [1, 2.5, {"x": null}], "b": "s\\u00e9", "c": true, "a": {"y": [1,]}, '
    after = b', "d": -1.5e3, "e": "tab\there", "f": {}, "g": []'
    text = _doc(before, after)
    t = kineto.load(_write(tmp_path, "t.json", text[:text.rindex(b"}")] + b",}\n"))
    m = t.metadata
    assert (m["a"], m["b"], m["c"], m["d"], m["e"], m["f"], m["g"]) == ({"y": [1]}, "s\u00e9", True, -1500.0,
                                                                     "tab\there", {}, [])
    assert m["warnings"] == ["kineto: JSON repaired: 1 control characters in strings, 2 trailing commas"]
    assert m["baseTimeNanoseconds"] == 1000 and t.n_events == 6_100


@both
def test_past_the_total_bound_only_small_values_are_read(tmp_path, monkeypatch, skip: str):
    _use(skip, monkeypatch)
    monkeypatch.setattr(toplevel, "KEPT", 10_000)
    monkeypatch.setattr(toplevel, "SMALL", 1_000)
    big = b'"%s"' % (b"x" * 6_000)
    t = kineto.load(_write(tmp_path, "t.json", _doc(b'"a": %s, "b": %s, "c": 5, ' % (big, big))))
    assert t.metadata["a"] == "x" * 6_000 and t.metadata["c"] == 5 and "b" not in t.metadata
    assert t.metadata["warnings"] == [toplevel.not_read("b", 6_002)]


def _refused(path: Path) -> str:
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(path)
    return str(ei.value)


def _where(text: bytes, at: int) -> str:
    line, column = text.count(b"\n", 0, at) + 1, at - text.rfind(b"\n", 0, at)
    return f"line {line:,} column {column:,} (byte {at:,})"


@both
def test_a_fault_in_a_value_not_read_is_said_at_its_byte(tmp_path, monkeypatch, skip: str):
    """A value over the bound (made 4 KiB here) is checked as it is scanned: a fault in it
    is refused at its byte and line of the file, before or after the events (a document
    over 64 MiB: one under it that breaks before its events is parsed whole, as ever)."""
    _use(skip, monkeypatch)
    monkeypatch.setattr(toplevel, "BOUND", 4096)
    monkeypatch.setattr(slicing, "_SLURP_LIMIT", 1 << 16)
    frames = _stack_frames(100_000)
    bad = frames[:50_000] + frames[50_000:].replace(b'"parent":', b'"parent" ', 1)  # a colon left out
    text = _doc(after=b',\n"stackFrames": ' + bad)
    at = text.index(b'"parent" "') + len(b'"parent" ')
    assert _refused(_write(tmp_path, "after.json", text)) == \
        f"{tmp_path / 'after.json'}: invalid JSON after the traceEvents array (expected ':': {_where(text, at)})"
    text = _doc(before=b'"otherData": {"env": ' + bad + b"},\n")
    at = text.index(b'"parent" "') + len(b'"parent" ')
    assert _refused(_write(tmp_path, "before.json", text)) == \
        f"{tmp_path / 'before.json'}: invalid JSON (expected ':': {_where(text, at)})"


@both
def test_what_lenient_mends_in_a_value_not_read_is_no_fault(tmp_path, monkeypatch, skip: str):
    _use(skip, monkeypatch)
    monkeypatch.setattr(toplevel, "BOUND", 4096)
    frames = _stack_frames(100_000)
    mended = frames[:-1] + b",\n}"  # a trailing comma
    mended = mended.replace(b"fn_5", b"fn\x01_5", 1)  # a raw control character
    t = kineto.load(_write(tmp_path, "t.json", _doc(before=b'"systemTraceEvents": "a\tb", ',
                                                    after=b', "stackFrames": ' + mended)))
    assert t.n_events == 6_100 and t.metadata["systemTraceEvents"] == "a\tb"
    assert t.metadata["warnings"] == ["kineto: JSON repaired: 1 control characters in strings",
                                      toplevel.not_read("stackFrames", len(mended))]


@both
def test_a_long_document_without_events_is_judged_from_its_walk(tmp_path, monkeypatch, skip: str):
    """Over 64 MiB (1 KiB here), a document with no events array is not parsed whole: its
    keys, in order, say what it is not (a value not read counts by its type), in the words
    a whole parse gives."""
    _use(skip, monkeypatch)
    monkeypatch.setattr(toplevel, "BOUND", 256)
    monkeypatch.setattr(slicing, "_SLURP_LIMIT", 1024)

    def whole(*args: object) -> None:
        raise AssertionError("parsed whole")

    monkeypatch.setattr(slicing, "_slurp", whole)
    big = b'"%s"' % (b"x" * 5_000)
    p = _write(tmp_path, "t.json", b'{"meta": {"interval": 1}, "x": %s, "threads": [%s]}' % (big, big))
    assert _refused(p) == (f"{p}: not a Chrome/Kineto trace: no 'traceEvents' list (top-level keys: meta, x, "
                           "threads); it is a Firefox Profiler profile (sampled stacks, as Firefox and samply write),"
                           " not a trace")
    p = _write(tmp_path, "t.json", b'{"x": %s, "traceEvents": {"a": %s}}' % (big, big))
    assert _refused(p) == f"{p}: not a Chrome/Kineto trace: 'traceEvents' is a dict, not a list (top-level keys: x)"
    p = _write(tmp_path, "t.json", b'{"x": %s, "y": 1 "z": 2}' % big)
    at = p.read_bytes().index(b'"z"')
    assert _refused(p) == f"{p}: invalid JSON (expected ',' or '}}': {_where(p.read_bytes(), at)})"


# the scanner against its Python path ----------------------------------------------------------------------------


def _value(rnd: random.Random, depth: int = 0) -> object:
    kind = rnd.randrange(8 if depth < 5 else 5)
    if kind == 0:
        return rnd.choice([None, True, False])
    if kind == 1:
        return rnd.choice([0, -1, 7, 12345678901234567890, -0.5, 1e-7, 3.25e21, 1.5])
    if kind in (2, 3, 4):
        return "".join(rnd.choice('ab é\u20ac\U0001f600"\\/\n\t,:[]{}') for _ in range(rnd.randrange(12)))
    if kind in (5, 6):
        return [_value(rnd, depth + 1) for _ in range(rnd.randrange(5))]
    return {"k%d" % rnd.randrange(99): _value(rnd, depth + 1) for _ in range(rnd.randrange(5))}


def _text(rnd: random.Random, mends: bool) -> bytes:
    """A JSON value; ``mends``: maybe with what lenient.repair mends (trailing commas, and
    raw newlines in strings, where the replacements fall in one)."""
    text = json.dumps(_value(rnd), ensure_ascii=rnd.random() < 0.3, indent=rnd.choice([None, 1]),
                      separators=rnd.choice([(",", ":"), (", ", ": ")]))
    if mends and rnd.random() < 0.5:
        text = text.replace("[]", "[ , ]").replace(", ]", ",\n]").replace("}", ",}", 1)
    return text.encode()


_BYTES = b'"\\,:[]{} \t\n\x01\x0b\x0c0-.eEtfnu'


def _mutate(rnd: random.Random, text: bytes) -> bytes:
    """One byte deleted, inserted or changed, in a value with nothing to mend. Two faults
    at one place are left out, where the two paths say the same fault a byte or two apart:
    a control character inside an escape (lenient.repair makes it an escape of its own),
    and a fault just before a trailing comma (msgspec reads the mended text, so a literal
    or number cut there ends at the bracket, not at the comma)."""
    i = rnd.randrange(len(text) + 1)
    c = bytes([rnd.choice(_BYTES)])
    if c[0] < 0x20 and b"\\" in text[max(0, i - 11):i + 12]:
        c = b"x"
    op = rnd.randrange(3)
    if op == 0:
        return text[:i] + text[i + 1:]
    if op == 1:
        return text[:i] + c + text[i:]
    return text[:i] + c + text[i + 1:]


def _outcome(sk: toplevel.Skipper, data: bytes, cuts: list[int], holds: bool) -> tuple:
    """Feed ``data`` cut at ``cuts`` as the walker does: the bytes read let go where the
    skipper does not hold them. (end in data | fault what, at | needs more)."""
    buf, base = bytearray(), 0
    for a, b in zip([0, *cuts], [*cuts, len(data)]):
        start = len(buf)
        buf += data[a:b]
        end = sk.feed(buf, start)
        if end == -2:
            return ("fault", sk.what, sk.at)
        if end >= 0:
            return ("end", base + end)
        if not holds:
            base += len(buf)
            buf = bytearray()
    end = sk.feed(buf, len(buf))
    if end == -1:
        end = {1: len(buf), 0: -1}.get(sk.finish(), -2)
    if end == -2:
        return ("fault", sk.what, sk.at)
    return ("end", base + end) if end >= 0 else ("more",)


@compiled
def test_the_scanner_finds_what_msgspec_and_lenient_find(monkeypatch):
    """Random values, valid and with one byte changed, each followed by more of a document
    or not, or cut short: the compiled scanner fed in random pieces gives the Python path's
    end or fault (its byte and msgspec's words) every time."""
    rnd = random.Random(35)
    kinds = {"end": 0, "fault": 0, "more": 0}
    for i in range(6_000):
        text = _text(rnd, mends=not i % 2)
        if i % 2:
            text = _mutate(rnd, text)
        data = text + rnd.choice([b"", b" ", b', "next": 1}', b"\n}\n", b"]x"])
        if rnd.random() < 0.15:  # a file cut short
            data = data[:rnd.randrange(len(data) + 1)]
        cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randrange(4)))) if len(data) > 1 else []
        want = _outcome(toplevel.PySkipper(), data, [], True)
        got = _outcome(toplevel._skip.Skipper(), data, cuts, False)
        assert got == want, (data, cuts)
        assert _outcome(toplevel.PySkipper(), data, cuts, True) == want, (data, cuts)
        kinds[want[0]] += 1
    assert min(kinds.values()) > 300, kinds  # each outcome well tried


@compiled
def test_the_scanner_reads_a_long_string_fast():
    """Not a loop per byte in Python (5 s and more for 100 MB): 100 MB of ftrace text in
    about 0.13 s here (and a 100 MB stackFrames object in 0.3 s)."""
    data = _ftrace(100 << 20) + b", "
    sk = toplevel._skip.Skipper()
    t0 = time.perf_counter()
    end = sk.feed(data, 0)
    took = time.perf_counter() - t0
    assert end == len(data) - 2
    assert took < 3.0, took
