"""The ``traceEvents`` array cut into slices of whole events, each decoded by msgspec.

The tokenizer stage: text comes in as decompressed blocks; the array is cut at event
boundaries (a ``}`` followed by ``,`` and ``{``, checked by decoding), so the parsed
JSON of the whole file never exists at once. A slice that does not parse is mended on
its own where ``lenient.repair`` can (a raw control character in a string, a trailing
comma) and is otherwise refused at its fault's byte of the file (``faults.py``). The
array's end is found by msgspec's check of the text read (what follows the array is
"trailing characters"), so the last slice is cut there. The members of the top-level
object before and after the array are walked one at a time (``toplevel.py``): a value of
up to 16 MiB is parsed, a longer one (Chrome's ``systemTraceEvents``, V8's
``stackFrames``) only scanned for its extent, checked as it goes, and named in a warning.
So memory stays bounded by a slice (by the largest event) and 16 MiB of a top-level
value, whatever the file holds. Only a document with no events array (or broken before
one), of at most 64 MiB, is parsed in one piece, for orjson's and lenient.repair's word on
what it is; a longer one is judged from its walk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Union

import msgspec
import orjson

from . import lenient

from ...errors import TraceFormatError
from ..inflate import Decompressed
from .faults import Broken, first_fault, located, unmended
from .events import _DECODE_DOC_EVENTS, _DECODE_EVENTS, _Event
from .toplevel import Text, TopLevel, add_counts, extent, non_ws

#: Text handed to the decoder at a time (whole events); bounds the parsed objects alive at once.
CHUNK_BYTES = 256 << 10
_SLURP_LIMIT = 64 << 20  # a document with no events array, of at most this much text: parsed in one piece
_NEAR_END = 65536  # a slice broken this near its cut: the cut is wrong (inside an event), not the text
_WS = b" \t\r\n"
_skip_ws = non_ws  # where white space ends: a search, at C speed (tests/test_bigrank.py cuts slices with it)


class _Gap:
    """White space between the array's values, read past in bounded memory and linear
    time: a slice whose whole events are followed by nothing but white space to its end
    is cut there (its events decoded first: white space inside a string is kept), and the
    white space after a cut is dropped as it comes in, its bytes counted in the file's
    offsets. Before, such a slice was doubled until a whole event followed: a run of
    1.5 GB of spaces between two events was held whole, at 3.4 times its size.

    ``expect`` says what the dropped white space lies before: ``"value"`` (after a comma,
    or the array's ``[``), ``"comma"`` (after an event: a ``,`` or the array's ``]`` must
    come), None (no gap: the slice is read as it is)."""

    def __init__(self) -> None:
        self.expect: str | None = "value"
        self.after_comma = False  # the gap follows a comma (not the array's start): a ']' next is a trailing comma

    def strip(self, body: bytearray, repaired: dict[str, int]) -> int:
        """Drop the white space at ``body``'s start (and the comma a gap waits for);
        how many bytes were dropped. :class:`Broken` where a comma is missing."""
        dropped = 0
        while self.expect is not None:
            if body and body[0] in _WS:  # (lstrip copies the block: most gaps are empty)
                k = len(body) - len(body.lstrip(_WS))
                del body[:k]
                dropped += k
            if not body:
                return dropped
            if self.expect == "comma" and body[0] == 0x2C:  # ','
                del body[:1]
                dropped += 1
                self.expect = "value"
                continue
            if self.expect == "comma" and body[0] != 0x5D:  # not ']' (at body[0]: the offset's base is not moved yet)
                raise Broken("expected ',' or ']'", dropped)
            if self.expect == "value" and body[0] == 0x5D and self.after_comma:
                add_counts(repaired, {"trailing commas": 1})  # as lenient.repair counts one
            self.expect = None
        return dropped

    def cut(self, body: bytearray, scan: Callable[[bytearray, int], tuple | None] | None) -> Slice | None:
        """The whole events of a ``body`` that ends in white space after an event (and
        maybe its comma), once decoded; None where it does not, or they do not decode
        (the white space is inside a string). ``body`` is then all taken: the gap waits."""
        if not body or body[-1] not in _WS:  # (most: a long event read on)
            return None
        stop, expect = _ws_before(body, len(body)), "comma"
        if stop and body[stop - 1] == 0x2C:  # ','
            stop, expect = _ws_before(body, stop - 1), "value"
        if not stop or body[stop - 1] != 0x7D:  # '}'
            return None
        events: Slice | None = scan(body, stop) if scan is not None else None
        if events is None:
            try:
                events = _decode_events(b"".join((b"[", memoryview(body)[:stop], b"]")))
            except orjson.JSONDecodeError:
                return None
        self.expect, self.after_comma = expect, expect == "value"
        return events


def _ws_before(body: bytearray, end: int) -> int:
    """Where the white space that ends at ``end`` in ``body`` starts (a window at a time:
    no copy of the whole body)."""
    while end > 0:
        window = body[max(0, end - _NEAR_END):end]
        kept = len(window.rstrip(_WS))
        if kept:
            return end - len(window) + kept
        end -= len(window)
    return 0


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
        where = f"item {seen + e.index} of its JSON array" if top.get("__list__") else f"traceEvents[{seen + e.index}]"
        article = "an" if e.what[:1] in "aeiou" else "a"
        raise TraceFormatError(path, f"not a Chrome/Kineto trace: {where} is {article} {e.what}, not an event "
                                     "object") from None


def _slices(path: Path, blocks: Iterator[bytes], top: dict[str, Any],
            scan: Callable[[bytearray, int], tuple | None] | None) -> Iterator[Slice]:
    text = Text(blocks)
    c = text.peek()
    if c is None:
        raise TraceFormatError(path, "empty file")
    walk = None
    if c == 0x7B:  # '{': the JSON Object Format, its members walked up to the events array
        text.pos += 1
        walk = TopLevel(text, top)
        try:
            found, fault = walk.members(first=True), None
        except Broken as e:
            found, fault = False, e
        if not found:
            yield from _no_events(path, walk, fault)
            return
    elif c == 0x5B:  # '[': the JSON Array Format
        text.pos += 1
        top["__list__"] = True
    else:  # no JSON object or array: let the full parser judge the document
        yield from _reread(path, top)
        return
    body, base = text.buf[text.pos:], text.base + text.pos  # base: the byte of the file's text that body starts at
    text.buf = bytearray()
    need = CHUNK_BYTES  # body's length before the next cut (doubled after a cut not found)
    repaired: dict[str, int] = {}
    end = None  # the array's closing bracket in body, once found
    gap = _Gap()  # white space between values, dropped as it comes
    try:
        while end is None:
            base += gap.strip(body, repaired)
            while len(body) < need:
                more = next(text.it, None)
                if more is None:
                    break
                body += more
                base += gap.strip(body, repaired)
            if len(body) < need:  # the end of the input
                end = _array_end(body, last=True)
                if end is None and walk is None:  # the Array Format may omit its closing bracket
                    body = bytearray(bytes(body).rstrip().rstrip(b","))
                    end = len(body)
                elif end is None:
                    raise Broken("unexpected end of data", len(body))
                break
            cut = _cut(body, scan)
            if cut is None:  # no whole events found: the array's end, a fault (refused here) or a long event
                end = _array_end(body, last=False)
                gapped = gap.cut(body, scan) if end is None else None
                if gapped is not None:  # whole events, then white space (maybe gigabytes of it)
                    base += len(body)
                    del body[:]
                    need = CHUNK_BYTES
                    yield gapped
                    continue
                need = 2 * len(body)  # each byte checked a bounded number of times
                continue
            events, nxt = cut[0], cut[1]
            add_counts(repaired, cut[2] if len(cut) > 2 else {})
            del body[:nxt]
            base += nxt
            need = CHUNK_BYTES
            yield events
            del events, cut
        events, counts = _last(body, end, scan)
        add_counts(repaired, counts)
    except Broken as e:
        raise TraceFormatError(path, located(path, e.what, base + e.at)) from None
    if repaired:
        add_counts(top.setdefault("__repaired__", {}), repaired)
    if events:
        yield events
    del events
    text.buf, text.base, text.pos = body[end + 1:], base + end + 1, 0  # what follows the array
    del body
    try:
        if walk is not None:
            walk.members(first=False)
            walk.finish()
        elif text.peek() is not None:
            raise Broken("trailing characters", text.base + text.pos)
    except Broken as e:
        said = located(path, e.what, e.at)
        raise TraceFormatError(path, said if walk is None else
                               said.replace("invalid JSON", "invalid JSON after the traceEvents array", 1)) from None


def _no_events(path: Path, walk: TopLevel, fault: Broken | None) -> Iterator[list[_Event]]:
    """A JSON object whose members end (or break) before a ``traceEvents`` array: a
    document of at most 64 MiB is parsed whole, as orjson and ``lenient.repair`` judge
    it (what it is, or its fault); a longer one is judged from its walk."""
    top = walk.top
    if walk.text.within(_SLURP_LIMIT):
        top.clear()
        yield from _reread(path, top)
        return
    if fault is not None:
        raise TraceFormatError(path, located(path, fault.what, fault.at))
    raise _not_a_trace(path, walk.document(), walk.events_type)


def _reread(path: Path, top: dict[str, Any]) -> Iterator[list[_Event]]:
    """The document read again and parsed whole (:func:`_slurp`)."""
    blocks = Decompressed(path, CHUNK_BYTES).blocks()
    yield from _slurp(path, next(blocks, b""), blocks, top)


def _array_end(body: bytearray, last: bool) -> int | None:
    """The closing bracket of the events array in ``body`` (its text from after the ``[``
    or a cut; ``last``: up to the end of the input), or None where the array goes on past
    ``body``. Raises :class:`Broken` (at its byte of ``body``) for a fault that
    ``lenient.repair`` does not mend."""
    kind, at, what = extent(b"[" + bytes(body), last)
    if kind == "fault":
        raise Broken(what, at - 1)
    return at - 2 if kind == "end" else None


def _last(body: bytearray, end: int, scan: Callable[[bytearray, int], tuple | None] | None
          ) -> tuple[Slice, dict[str, int]]:
    """The events of ``body`` up to the array's end (its closing bracket, or where it is
    left out: ``end``), and what was mended in them."""
    if not body[:end].strip():
        return [], {}
    columns = scan(body, end) if scan is not None else None
    if columns is not None:
        return columns, {}
    text = b"".join((b"[", memoryview(body)[:end], b"]"))
    try:
        return _decode_events(text), {}
    except orjson.JSONDecodeError as e:
        fixed, counts = lenient.repair(text)
        if not counts:
            bad = first_fault(text, e) or Broken(e.msg, 0)
            raise Broken(bad.what, bad.at - 1) from None
        try:
            return _decode_events(fixed), counts
        except orjson.JSONDecodeError as again:
            bad = first_fault(fixed, again) or Broken(again.msg, 0)
            raise Broken(bad.what, lenient.original_offset(text, bad.at) - 1) from None


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


def _slurp(path: Path, head: bytes, it: Iterator[bytes], top: dict[str, Any]) -> Iterator[list[_Event]]:
    """Parse the whole document (odd layouts, broken files: orjson says what is wrong)."""
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
            raise TraceFormatError(path, located(path, fault.what, fault.at) + _json_lines(data)) from None
        data = fixed
        add_counts(top.setdefault("__repaired__", {}), repaired)  # (build.py)
    if isinstance(doc, list):
        top["__list__"] = True
        events = doc
    elif isinstance(doc, dict):
        events = doc.pop("traceEvents", None)
        if not isinstance(events, list):
            raise _not_a_trace(path, doc, None if events is None else type(events).__name__)
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


def _not_a_trace(path: Path, doc: dict[str, Any], events: str | None) -> TraceFormatError:
    """The refusal of a JSON object with no ``traceEvents`` list (``events``: the type of
    its ``traceEvents``, None where it has none): what it is, where its keys say."""
    from ..rocprof_compute import thread_trace_json  # (a JSON object that is no trace: whose it is)

    if events is None and (att := thread_trace_json(path, doc)):
        return TraceFormatError(path, att)
    what = "no 'traceEvents' list" if events is None else f"'traceEvents' is a {events}, not a list"
    shown = ", ".join(list(doc)[:8])
    return TraceFormatError(path, f"not a Chrome/Kineto trace: {what} (top-level keys: {shown or 'none'})"
                            + _known_other(doc))


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
