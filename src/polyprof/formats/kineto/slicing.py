"""The ``traceEvents`` array cut into slices of whole events, each decoded by msgspec.

The tokenizer stage: text comes in as decompressed blocks; the array is cut at event
boundaries (a ``}`` followed by ``,`` and ``{``, checked by decoding), so the parsed
JSON of the whole file never exists at once. What follows the array is parsed as the
rest of the top-level object. Anything the fast path cannot cut (odd layouts, broken
files) is parsed in one piece, with orjson's exact error message for broken JSON.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import msgspec
import orjson

from . import lenient

from ...errors import TraceFormatError
from .events import _DECODE_DOC_EVENTS, _DECODE_EVENTS, _Event

#: Text handed to the decoder at a time (whole events); bounds the parsed objects alive at once.
CHUNK_BYTES = 256 << 10
_SLURP_LIMIT = 64 << 20  # no event boundary found within this much text: parse in one piece
_TE_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"


def _skip_ws(buf: bytearray | bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _boundary_before(body: bytearray, end: int) -> tuple[int, int]:
    """Last ``}`` before ``end`` followed by ``,`` and ``{`` -> (end of element, start of next)."""
    p = body.rfind(b"}", 0, end)
    while p >= 0:
        q = _skip_ws(body, p + 1)
        if q < len(body) and body[q] == 0x2C:  # ','
            q = _skip_ws(body, q + 1)
            if q < len(body) and body[q] == 0x7B:  # '{'
                return p + 1, q
        p = body.rfind(b"}", 0, p)
    return -1, -1


class _Slurp(Exception):
    """The fast splitter gives up; parse the whole document in one piece."""


class _NotAnEvent(Exception):
    """An element of the events array is not a JSON object (index within its slice)."""

    def __init__(self, index: int, what: str):
        self.index, self.what = index, what



def _not_an_event(text: bytes) -> _NotAnEvent:
    """The first element of a JSON array of (mostly) events that is not an object."""
    items = orjson.loads(text)
    bad = next(i for i, e in enumerate(items) if not isinstance(e, dict))
    return _NotAnEvent(bad, type(items[bad]).__name__)


def _decode_events(text: bytes) -> list[_Event]:
    """``[...]`` text -> events; orjson.JSONDecodeError (with its position) if not JSON."""
    try:
        return _DECODE_EVENTS(text)
    except msgspec.ValidationError:
        raise _not_an_event(text) from None
    except (msgspec.DecodeError, UnicodeDecodeError):
        orjson.loads(text)  # raises JSONDecodeError with a position and a clear message
        raise  # pragma: no cover - valid for orjson, not for msgspec


#: a slice as the compiled tokenizer's columns (tokenized.py), or its events decoded by msgspec
Slice = Union[list[_Event], tuple]


def _event_slices(path: Path, blocks: Iterator[bytes], top: dict[str, Any],
                  scan: Callable[[bytearray, int], tuple | None] | None = None) -> Iterator[Slice]:
    """Yield slices of ``traceEvents`` as events; fill ``top`` with the rest of the document.

    ``scan`` (``_tokens.Tokenizer.scan``): a slice it reads comes as its columns, the
    others as msgspec's structs."""
    seen = 0
    try:
        for events in _slices(path, blocks, top, scan):
            yield events
            seen += events[0] if type(events) is tuple else len(events)
    except _NotAnEvent as e:
        raise TraceFormatError(path, f"not a Chrome/Kineto trace: traceEvents[{seen + e.index}] "
                                     f"is a {e.what}, not an event object") from None


def _slices(path: Path, blocks: Iterator[bytes], top: dict[str, Any],
            scan: Callable[[bytearray, int], tuple | None] | None) -> Iterator[Slice]:
    buf = bytearray()
    prefix: bytes | None = None
    is_list = False
    start = 0
    it = iter(blocks)
    for blk in it:
        buf += blk
        j = _skip_ws(buf, 0)
        if j >= len(buf):
            continue
        if buf[j] == 0x5B:  # '[': the JSON Array Format
            prefix, is_list, start = b"", True, j + 1
            break
        if buf[j] != 0x7B:
            break
        m = _TE_RE.search(buf)
        if m:
            prefix, start = bytes(buf[:m.end() - 1]), m.end()
            break
        if len(buf) > _SLURP_LIMIT:
            break
    if prefix is None:  # no events array found: let the full parser judge the document
        yield from _slurp(path, bytes(buf), it, top)
        return
    body = buf[start:]
    del buf
    while True:
        while len(body) < CHUNK_BYTES:
            more = next(it, None)
            if more is None:
                break
            body += more
        if len(body) < CHUNK_BYTES:
            break  # end of input: the rest is handled by _tail
        try:
            cut = _cut(body, scan)
        except _Slurp:
            yield from _slurp(path, prefix + b"[" + bytes(body), it, top)
            return
        if cut is None:
            if len(body) > _SLURP_LIMIT:
                yield from _slurp(path, prefix + b"[" + bytes(body), it, top)
                return
            more = next(it, None)
            if more is None:
                break
            body += more
            continue
        events, nxt = cut
        del body[:nxt]
        yield events
        del events
    # the tail: last events, the closing bracket, then the rest of the top-level object
    tail = _tail(body, is_list, scan)
    if tail is None:
        yield from _slurp(path, prefix + b"[" + bytes(body), iter(()), top)
        return
    events, suffix = tail
    if events:
        yield events
    if is_list:
        top["__list__"] = True
        return
    try:
        rest = orjson.loads(prefix + b"[]" + suffix)
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"invalid JSON after the traceEvents array ({e})") from None
    if not isinstance(rest, dict):
        raise TraceFormatError(path, "invalid JSON around the traceEvents array")
    rest.pop("traceEvents", None)
    top.update(rest)


def _cut(body: bytearray, scan: Callable[[bytearray, int], tuple | None] | None = None) -> tuple[Slice, int] | None:
    """Parse the longest run of whole events at the start of ``body`` (None: no cut found)."""
    end = len(body)
    for _ in range(3):
        stop, nxt = _boundary_before(body, end)
        if stop < 0:
            return None
        columns = scan(body, stop) if scan is not None else None
        if columns is not None:
            return columns, nxt
        text = b"".join((b"[", memoryview(body)[:stop], b"]"))
        try:
            events = _decode_events(text)
        except orjson.JSONDecodeError as e:
            if getattr(e, "pos", 0) < len(text) - 65536:
                raise _Slurp() from None  # broken well before the cut: not a cutting problem
            end = stop - 1
            continue
        return events, nxt
    return None


_ARRAY_END = re.compile(rb"}\s*\]")


def _tail(body: bytearray, is_list: bool,
          scan: Callable[[bytearray, int], tuple | None] | None = None) -> tuple[Slice, bytes] | None:
    """Split the last events of the array from what follows its closing bracket.

    Candidates are ``}`` ``]`` pairs from the left; the first that parses is the end (a
    pair inside an event or a string leaves brackets or quotes open, so it cannot parse).
    The tokenizer tries each first: what it reads, msgspec would (it is the stricter).
    """
    j = _skip_ws(body, 0)
    if j < len(body) and body[j] == 0x5D:  # empty array
        return [], bytes(body[j + 1:])
    tries = 0
    for m in _ARRAY_END.finditer(body):
        r = m.end() - 1
        columns = scan(body, r) if scan is not None else None
        if columns is not None:
            suffix = bytes(body[r + 1:])
            if is_list and suffix.strip():
                return None
            return columns, suffix
        try:
            events: Slice = _DECODE_EVENTS(b"[" + bytes(body[:r]) + b"]")
        except (msgspec.DecodeError, UnicodeDecodeError):  # incl. ValidationError: the full parse names it
            tries += 1
            if tries > 64:
                return None
            continue
        suffix = bytes(body[r + 1:])
        if is_list and suffix.strip():
            return None
        return events, suffix
    if is_list:  # the Array Format may omit the closing bracket
        try:
            return _DECODE_EVENTS(b"[" + bytes(body).rstrip().rstrip(b",") + b"]"), b""
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
    return None


def _slurp(path: Path, head: bytes, it: Iterator[bytes], top: dict[str, Any]) -> Iterator[list[_Event]]:
    """Parse the whole document (odd layouts, broken files: orjson says what is wrong)."""
    data = head + b"".join(it)
    if not data.strip():
        raise TraceFormatError(path, "empty file")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        fixed, repaired = lenient.repair(data)
        try:
            doc = orjson.loads(fixed) if repaired else None
        except orjson.JSONDecodeError:
            doc = None
        if doc is None:
            raise TraceFormatError(path, f"invalid JSON ({e})" + _json_lines(data)) from None
        data = fixed
        top["__repaired__"] = repaired  # said in the reader's warning (build.py)
    if isinstance(doc, list):
        top["__list__"] = True
        events = doc
    elif isinstance(doc, dict):
        events = doc.pop("traceEvents", None)
        if not isinstance(events, list):
            from ..rocprof_compute import thread_trace_json  # (a JSON object that is no trace: whose it is)

            if events is None and (att := thread_trace_json(path, doc)):
                raise TraceFormatError(path, att)
            what = "no 'traceEvents' list" if events is None else \
                f"'traceEvents' is a {type(events).__name__}, not a list"
            shown = ", ".join(list(doc)[:8])
            raise TraceFormatError(path, f"not a Chrome/Kineto trace: {what} (top-level keys: {shown or 'none'})"
                                   + _known_other(doc))
        top.update(doc)
    else:
        raise TraceFormatError(path, f"not a Chrome/Kineto trace: the JSON is a {type(doc).__name__}, "
                                     "not an object with 'traceEvents' or a list of events")
    bad = next((i for i, e in enumerate(events) if not isinstance(e, dict)), None)
    if bad is not None:
        raise _NotAnEvent(bad, type(events[bad]).__name__)
    del doc, events
    # the events again, typed, from the text (their times keep every digit)
    parsed = _DECODE_EVENTS(data) if top.get("__list__") else _DECODE_DOC_EVENTS(data).traceEvents
    del data
    if parsed:
        yield parsed


def _known_other(doc: dict[str, Any]) -> str:
    """What a JSON object without ``traceEvents`` is, where its keys say: a speedscope
    profile (py-spy's, pyinstrument's ``--format speedscope``) holds sampled or evented
    stacks per thread, not timed events on one clock."""
    schema = doc.get("$schema")
    if isinstance(schema, str) and "speedscope" in schema:
        return ("; it is a speedscope profile (stacks), not a trace: write a Chrome trace instead "
                "(py-spy: --format chrometrace)")
    meta = doc.get("meta")
    if isinstance(meta, dict) and "interval" in meta and isinstance(doc.get("threads"), list):
        # the Gecko profile format (Firefox's profiler, samply): stacks sampled every interval
        return "; it is a Firefox Profiler profile (sampled stacks, as Firefox and samply write), not a trace"
    return ""


def _json_lines(data: bytes) -> str:
    """What a document with more after it is, when its first two lines are each a JSON
    value: JSON Lines (a record per line), which no trace format polyprof reads is."""
    lines: list[bytes] = []
    start = 0
    for _ in range(8):  # the first two lines that are not blank (no copy of the rest)
        end = data.find(b"\n", start)
        line = data[start:] if end < 0 else data[start:end]
        if line.strip():
            lines.append(line)
        if end < 0 or len(lines) == 2:
            break
        start = end + 1
    try:
        if len(lines) == 2 and all(isinstance(orjson.loads(ln), dict) for ln in lines):
            return ("; it is JSON Lines (an object per line), not a Chrome/Kineto trace (one JSON document "
                    "with a 'traceEvents' list)")
    except orjson.JSONDecodeError:
        pass
    return ""
