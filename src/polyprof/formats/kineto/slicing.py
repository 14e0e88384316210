"""The ``traceEvents`` array cut into slices of whole events, each decoded by msgspec.

The tokenizer stage: text comes in as decompressed blocks; the array is cut at event
boundaries (a ``}`` followed by ``,`` and ``{``, checked by decoding), so the parsed
JSON of the whole file never exists at once. What follows the array is parsed as the
rest of the top-level object. A slice that does not parse is mended on its own where
``lenient.repair`` can (a raw control character in a string, a trailing comma) and is
otherwise refused at its fault's byte of the file (``faults.py``): memory stays bounded by
a slice (by the largest event), whatever the file holds. Only a document whose events
array is not found in its first 64 MiB, and the end of the array with what follows it,
are parsed in one piece, as orjson parses them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import msgspec
import orjson

from . import lenient

from ...errors import TraceFormatError
from .faults import Broken, first_fault, located, unmended
from .events import _DECODE_DOC_EVENTS, _DECODE_EVENTS, _Event

#: Text handed to the decoder at a time (whole events); bounds the parsed objects alive at once.
CHUNK_BYTES = 256 << 10
_SLURP_LIMIT = 64 << 20  # no events array found within this much text: parse in one piece
_NEAR_END = 65536  # a slice broken this near its cut: the cut is wrong (inside an event), not the text
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
    base = start  # the byte of the file's text that body starts at
    need = CHUNK_BYTES  # body's length before the next cut (doubled after a cut not found)
    repaired: dict[str, int] = {}
    try:
        while True:
            while len(body) < need:
                more = next(it, None)
                if more is None:
                    break
                body += more
            if len(body) < need:
                break  # end of input: the rest is handled by _tail
            cut = _cut(body, scan)
            if cut is None:  # no whole events found: a fault (refused here), or a long event
                _check(body, prefix, is_list)
                need = 2 * len(body)  # each byte checked a bounded number of times
                continue
            events, nxt = cut[0], cut[1]
            for k, v in (cut[2] if len(cut) > 2 else {}).items():
                repaired[k] = repaired.get(k, 0) + v
            del body[:nxt]
            base += nxt
            need = CHUNK_BYTES
            yield events
            del events, cut
    except Broken as e:
        raise TraceFormatError(path, located(path, e.what, base + e.at)) from None
    if repaired:
        top["__repaired__"] = repaired
    yield from _end(path, body, (prefix, is_list, base), top, scan)


def _end(path: Path, body: bytearray, where: tuple[bytes, bool, int], top: dict[str, Any],
         scan: Callable[[bytearray, int], tuple | None] | None) -> Iterator[Slice]:
    """The tail: the last events, the closing bracket, then the rest of the top-level
    object (``where``: the text before the array, whether it is the Array Format, and the
    byte of the file's text that ``body`` starts at)."""
    prefix, is_list, base = where
    tail = _tail(body, is_list, scan)
    if tail is None:
        yield from _slurp(path, prefix + b"[" + bytes(body), iter(()), top, (len(prefix) + 1, base))
        return
    events, suffix = tail
    if events:
        yield events
    if is_list:
        top["__list__"] = True
        return
    data = prefix + b"[]" + suffix
    try:
        rest = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        bad = first_fault(data, e) or Broken(e.msg, 0)
        at = bad.at if bad.at < len(prefix) else base + len(body) - len(suffix) + bad.at - len(prefix) - 2
        raise TraceFormatError(path, located(path, bad.what, at).replace(
            "invalid JSON", "invalid JSON after the traceEvents array", 1)) from None
    if not isinstance(rest, dict):
        raise TraceFormatError(path, "invalid JSON around the traceEvents array")
    rest.pop("traceEvents", None)
    top.update(rest)


def _check(body: bytearray, prefix: bytes, is_list: bool) -> None:
    """Raise :class:`Broken` (at its byte of ``body``) for a fault in the events read so
    far that ``lenient.repair`` does not mend. An array that ends in ``body`` is no fault
    when what follows it continues the document (read on, to the end: ``_tail``)."""
    text = b"[" + bytes(body)
    bad = unmended(text)
    if bad is None:
        return
    if bad.what == "trailing characters" and not is_list:  # the array ended: the rest must continue the object
        after, end = prefix + b"[]", text.rfind(b"]", 0, bad.at) + 1  # (msgspec's byte: past the next comma)
        more = unmended(after + text[end:])
        if more is None:
            return
        if more.at >= len(after):
            raise Broken(more.what, more.at - len(after) + end - 1)
    raise Broken(bad.what, bad.at - 1)


def _cut(body: bytearray, scan: Callable[[bytearray, int], tuple | None] | None = None) -> tuple | None:
    """Parse the longest run of whole events at the start of ``body``: (events, where the
    next starts, what was mended: ``lenient.repair``'s counts); None: no cut found.
    Raises :class:`Broken` (at its byte of ``body``) for a fault that cannot be mended."""
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
            return _decode_events(text), nxt
        except orjson.JSONDecodeError as e:
            bad = first_fault(text, e) or Broken(e.msg, 0)
        if bad.at < len(text) - _NEAR_END and bad.what != "trailing characters":
            fixed, counts = lenient.repair(text)
            if counts:  # mended in this slice alone (a raw control character, a trailing comma)
                try:
                    return _decode_events(fixed), nxt, counts
                except orjson.JSONDecodeError as e:
                    bad = first_fault(fixed, e) or Broken(e.msg, 0)
                    bad = Broken(bad.what, lenient.original_offset(text, bad.at))
            if bad.at < len(text) - _NEAR_END and bad.what != "trailing characters":
                raise Broken(bad.what, bad.at - 1)
        if bad.what == "trailing characters":
            return None  # the array ends before the cut: read on (_check, _tail)
        end = stop - 1  # broken near the cut: a '},{' inside an event; try an earlier one
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


def _slurp(path: Path, head: bytes, it: Iterator[bytes], top: dict[str, Any],
           origin: tuple[int, int] = (0, 0)) -> Iterator[list[_Event]]:
    """Parse the whole document (odd layouts, broken files: orjson says what is wrong).
    ``origin`` (n, b): bytes of ``head`` from the n-th on are those of the file's text from
    byte b on (the bytes before, the file's first)."""
    more = next(it, None)
    if more is not None:  # more than the head: refuse a head that is broken before it is joined to the rest
        fault = unmended(head)
        if fault is not None:
            raise TraceFormatError(path, located(path, fault.what, fault.at) + _json_lines(head))
        head += more
    data = head + b"".join(it)
    if not data.strip():
        raise TraceFormatError(path, "empty file")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        fault = None
        fixed, repaired = lenient.repair(data)
        try:
            doc = orjson.loads(fixed) if repaired else None
        except orjson.JSONDecodeError as again:  # the fault repair does not mend, where it is in data
            got = first_fault(fixed, again) or Broken(again.msg, 0)
            doc, fault = None, Broken(got.what, lenient.original_offset(data, got.at))
        if doc is None:
            fault = fault or first_fault(data, e) or Broken(e.msg, 0)
            at = fault.at if fault.at < origin[0] else origin[1] + fault.at - origin[0]
            raise TraceFormatError(path, located(path, fault.what, at) + _json_lines(data)) from None
        data = fixed
        before = top.get("__repaired__", {})
        top["__repaired__"] = {k: before.get(k, 0) + repaired.get(k, 0) for k in {*before, *repaired}}  # (build.py)
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
