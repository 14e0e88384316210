"""The members of a Chrome/Kineto JSON object around ``traceEvents``, walked one at a time.

slicing.py reads the ``traceEvents`` array in slices; what comes before and after it is
read here, member by member, from the text as it comes in, so no top-level value is held
whole when it is long: a value of at most :data:`BOUND` bytes (16 MiB) is parsed (orjson,
mended by ``lenient.repair`` where that is enough) and kept in ``top``, as long as the
values kept stay within :data:`KEPT` bytes in all (64 MiB; a value under 64 KiB is always
kept); a longer one is scanned for its extent only, checked as it is scanned, and named in
``top["__not_read__"]`` (build.py warns of it): Chrome's ``systemTraceEvents`` (a string
of ftrace text, hundreds of MB, before the events), a V8 trace's ``stackFrames`` and
``samples`` (after them). A fault anywhere is a fault at its byte of the file, as in the
events (``faults.py``).

The scan is ``_skip.c``'s state machine: each block read once, nothing kept but its stack
of open brackets, checked as msgspec checks a value it skips, with what ``lenient.py``
mends accepted. Where it is not built (``POLYPROF_PURE_PYTHON=1``), :class:`PySkipper`
checks the value's whole text with msgspec instead, each time the text has doubled: the
same extent and faults (tests/test_kineto_toplevel.py holds the two to that), but the
text of a long value is held while it is read.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Protocol, cast

import orjson

from . import lenient
from .faults import Broken, first_fault
from ...lowlevel.compiled import optional
from ..safety import BOM

_skip = optional(__package__, "_skip")  # built by setup.py; PySkipper otherwise (lowlevel/compiled.py)
#: "c" (``_skip.c``) or "python" (msgspec's check of a long value's whole text): which one is in use
IMPLEMENTATION = "c" if _skip is not None else "python"

#: a top-level value longer than this (other than ``traceEvents``) is not read: scanned for its extent only
BOUND = 16 << 20
#: the values read and kept, in all; past it, values of SMALL bytes or more are not read either
KEPT = 64 << 20
SMALL = 64 << 10
_DROP = 1 << 20  # the bytes read are let go once there are this many (each let-go moves what follows)
_WS = b" \t\r\n"
_NONWS: re.Pattern[bytes] | None = None
#: a value's type by its first byte, as a message names it (Python's names, as orjson would make it)
_TYPES = {0x7B: "dict", 0x5B: "list", 0x22: "str", 0x74: "bool", 0x66: "bool", 0x6E: "NoneType"}
#: a stand-in for a value not read, of its type (the checks of what a document is look at types only)
_STAND_INS: dict[str, Any] = {"dict": {}, "list": [], "str": "", "bool": False, "NoneType": None, "int": 0}


def not_read(key: str, size: int) -> str:
    """The warning for a top-level value not read (build.py)."""
    return (f"kineto: top-level key '{key}' ({size / 2 ** 20:.1f} MiB) not read: a top-level value is read "
            f"up to {BOUND >> 20} MiB ({KEPT >> 20} MiB in all)")


class Skipper(Protocol):
    """``_skip.Skipper``, or :class:`PySkipper`: the extent of one value read in pieces."""

    holds: bool  # whether the value's text must stay in the buffer while it is read

    @property
    def what(self) -> str: ...

    @property
    def at(self) -> int: ...

    def feed(self, buf: bytearray, start: int) -> int: ...

    def finish(self) -> int: ...


class PySkipper:
    """The Python path of ``_skip.Skipper``: msgspec's check of the value's text so far
    (and ``lenient.repair``'s, where msgspec finds a fault), again each time the text has
    doubled; a feed that brings no new bytes (the end of the input) checks at once. The
    buffer must hold the value's text from its first byte while it is read (``holds``)."""

    holds = True

    def __init__(self) -> None:
        self.first = -1  # the value's first byte in the buffer
        self.checked = 0  # the bytes of it checked last time
        self.whole = False  # the last check read the text as a whole number (that more digits may continue)
        self.what, self.at = "", -1

    def feed(self, buf: bytearray, start: int) -> int:
        if self.first < 0:
            self.first = start
        n = len(buf) - self.first
        if start < len(buf) and n < 2 * self.checked:
            return -1
        self.checked = n
        with memoryview(buf) as whole, whole[self.first:] as view:  # (no copy: the check builds nothing)
            got = first_fault(cast(bytes, view), utf8=False)  # (msgspec's check reads any buffer)
        if got is not None and got.what == "trailing characters":  # the value's end, in the text as it is
            end = self.first + got.at - 1
            while buf[end - 1] in _WS:
                end -= 1
            return end
        if got is not None and ends_early(got, n) and start < len(buf):
            return -1
        return self._check(bytes(buf[self.first:]), start == len(buf))  # a fault, or the text is all the value

    def finish(self) -> int:
        return int(self.whole)  # (its last feed, at the end of the input, found any fault)

    def _check(self, text: bytes, last: bool) -> int:
        kind, at, what = extent(text, last)
        self.whole = kind == "number"
        if kind == "fault":
            self.what, self.at = what, at
            return -2
        return self.first + at if kind == "end" else -1


def ends_early(got: Broken, n: int) -> bool:
    """Whether msgspec's fault ``got`` of a text of ``n`` bytes is its ending inside a
    value (where more text may follow): the end of data, or a number cut after its ``-``,
    ``.`` or exponent (said at the byte past the end). Its other faults at ``n`` are of
    the last byte (msgspec gives some at the byte past theirs)."""
    return got.what == "unexpected end of data" or (got.at >= n and got.what in ("invalid character", "invalid number"))


def extent(text: bytes, last: bool) -> tuple[str, int, str]:
    """The JSON value at the start of ``text`` as msgspec checks it, with what
    ``lenient.repair`` mends accepted: ("end", the byte past it, ""), ("more", 0, ""): the
    text ends inside it, ("number", 0, ""): the text is a number that more digits may go
    on, or ("fault", its byte, what is wrong). A fault is checked again with a string
    that the text's end cut closed (lenient.repair mends a string's control characters
    only once it is closed, and pairs the quotes after it wrong): unless ``last`` (the text
    is all there is), it is one only where both readings find it, and a comma that a
    closing bracket may follow is none; at the end, a fault in a string never closed is
    said where the closed reading finds it, as _skip.c does."""
    got = _extent(text, text)
    if got[0] != "fault":
        return got
    closed = text + (b'n"' if (len(text) - len(text.rstrip(b"\\"))) % 2 else b'"')  # (a cut escape completed)
    other = _extent(text, closed)
    if other == got:
        return got
    if not last:
        return "more", 0, ""
    return other if other[0] == "fault" else got  # (lenient.repair reads a string never closed as no string)


def _extent(text: bytes, probe: bytes) -> tuple[str, int, str]:
    """:func:`extent` of ``text``, its faults mended as ``lenient.repair`` mends ``probe``
    (``text``, or ``text`` with more after it)."""
    got = first_fault(text, utf8=False)
    fixed = text
    if got is not None and got.what != "trailing characters" and not ends_early(got, len(text)):
        fixed, counts = lenient.repair(probe)
        if counts:
            got = first_fault(fixed, utf8=False)
        else:
            fixed = probe
        if got is not None and got.what != "trailing characters" and not ends_early(got, len(fixed)):
            at = got.at if fixed is probe else original_at(probe, got.at)
            if probe is not text and (at >= len(text) or text[at] == 0x2C and not text[at + 1:].strip(b" \t\r\n\f\v")):
                return "more", 0, ""  # (a fault of what the probe adds, or a comma a closing bracket may follow)
            return "fault", at, got.what
    if got is None:  # the text is the value, and white space (or, closed by the probe, in a string)
        if probe is not text:
            return "more", 0, ""
        if text[-1:] not in (b" ", b"\t", b"\r", b"\n") and text.lstrip(_WS)[:1] in b"-0123456789":
            return "number", 0, ""
        return "end", len(text.rstrip(_WS)), ""
    if got.what != "trailing characters":
        return "more", 0, ""
    end = len(fixed[:got.at - 1].rstrip(_WS))  # the value's end in the mended text (msgspec: the byte past)
    if fixed is not probe:
        end = original_at(probe, end - 1) + 1  # (its last byte's)
    return ("end", end, "") if end <= len(text) else ("more", 0, "")


def original_at(data: bytes, at: int) -> int:
    """The byte of ``data`` that byte ``at`` of ``lenient.repair(data)`` came from, also
    inside a mended string (a control character's escape: that character), where
    ``lenient.original_offset`` names the string's start. For a fault's byte: walks the tokens."""
    shift = 0  # bytes the mended text is ahead of data before the current token
    for m in lenient._TOKENS.finditer(data):  # (lenient.repair's tokens: strings, and commas before a bracket)
        s, e = m.span()
        if s + shift > at:
            break
        tok = m.group(0)
        new = len(lenient._mended(tok))
        if at < s + shift + new:  # in this token, mended: each control character became 6 bytes
            k, i = at - s - shift, 0
            while k >= (6 if tok[i] < 0x20 else 1):
                k -= 6 if tok[i] < 0x20 else 1
                i += 1
            return s + i
        shift += new - (e - s)
    return at - shift


def skipper() -> Skipper:
    """A skipper for one value: the compiled one where it is built."""
    return _skip.Skipper() if _skip is not None else PySkipper()


def non_ws(buf: bytes | bytearray, pos: int) -> int:
    """Where the first byte at or after ``pos`` that is not JSON white space is (``len(buf)``:
    none), at C speed (a run of white space may be gigabytes long)."""
    global _NONWS
    if _NONWS is None:
        _NONWS = re.compile(rb"[^ \t\r\n]")
    m = _NONWS.search(buf, pos)
    return m.start() if m else len(buf)


class Text:
    """The document's text as it comes in: ``buf`` holds the file's text from its byte
    ``base`` on, read up to ``pos``; the rest of the blocks in ``it``."""

    def __init__(self, blocks: Iterable[bytes]):
        self.it = iter(blocks)
        self.buf = bytearray()
        self.base = self.pos = 0

    def more(self) -> bool:
        """The next block onto ``buf``; False at the end of the input."""
        blk = next(self.it, None)
        if blk is None:
            return False
        first = not self.base and not self.buf
        self.buf += blk
        if first and self.buf[:3] == BOM:  # a UTF-8 byte-order mark (a Windows editor's): not the JSON's
            self.pos = 3
        return True

    def drop(self, over: int = 0) -> None:
        """Let go of the bytes read (once there are more than ``over``)."""
        if self.pos > over:
            del self.buf[:self.pos]
            self.base += self.pos
            self.pos = 0

    def peek(self) -> int | None:
        """The next byte that is not white space (``pos`` moved to it); None at the end."""
        while True:
            self.pos = non_ws(self.buf, self.pos)
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            self.drop()
            if not self.more():
                return None

    def end(self) -> int:
        """The file's byte just past the text read so far."""
        return self.base + len(self.buf)

    def within(self, limit: int) -> bool:
        """Whether the whole text is at most ``limit`` bytes (read to its end, or past the limit, and let go)."""
        while self.end() <= limit:
            self.pos = len(self.buf)
            self.drop()
            if not self.more():
                return True
        return False


class TopLevel:
    """The members of the top-level object, walked from ``text`` into ``top``."""

    def __init__(self, text: Text, top: dict[str, Any]):
        self.text, self.top = text, top
        self.keys: dict[str, None] = {}  # the members' keys in order (but traceEvents)
        self.skipped: dict[str, int] = {}  # key -> bytes of a value not read
        self.kinds: dict[str, str] = {}  # key -> the type of a value not read
        self.kept = 0
        self.events = False  # the traceEvents array was reached
        self.events_type: str | None = None  # traceEvents' type, where it is no array
        self.repaired: dict[str, int] = {}

    def members(self, first: bool) -> bool:
        """Read members up to the ``traceEvents`` array (True: ``pos`` is just past its
        ``[``) or the end of the object (False). ``first``: at the object's start.
        Raises :class:`Broken` (at its byte of the file) for a fault."""
        t = self.text
        while True:
            key = self._key(first)
            if key is None:
                if t.peek() is not None:
                    raise Broken("trailing characters", t.base + t.pos)
                return False
            first = False
            c = self._peek()
            if key == "traceEvents" and not self.events and c == 0x5B:
                t.pos += 1
                self.events = True
                return True
            self._value(key, c)

    def finish(self) -> None:
        """What was not read, and what was mended, into ``top`` (build.py says both)."""
        if self.skipped:
            self.top["__not_read__"] = dict(self.skipped)
        if self.repaired:
            add_counts(self.top.setdefault("__repaired__", {}), self.repaired)

    def document(self) -> dict[str, Any]:
        """The members as a document (a value not read stands in by an empty one of its type):
        what a message about a document that is no trace looks at."""
        return {k: self.top[k] if k in self.top else _STAND_INS.get(self.kinds.get(k, ""), 0) for k in self.keys}

    def _peek(self) -> int:
        c = self.text.peek()
        if c is None:
            raise Broken("unexpected end of data", self.text.end())
        return c

    def _key(self, first: bool) -> str | None:
        """The next member's key (its colon read), None at the object's end."""
        t = self.text
        c = self._peek()
        if c == 0x2C:  # a comma: a member follows, or (a trailing comma, mended) the object ends
            comma = t.base + t.pos
            t.pos += 1
            c = self._peek()
            if c == 0x7D:
                add_counts(self.repaired, {"trailing commas": 1})
            elif first:
                raise Broken("expected '\"'", comma)
        elif c != 0x7D and not first:
            raise Broken("expected ',' or '}'", t.base + t.pos)
        if c == 0x7D:
            t.pos += 1
            return None
        if c != 0x22:
            raise Broken("expected '\"'", t.base + t.pos)
        at = t.base + t.pos
        data, size = self._extent()
        key = self._parse(data, at) if data is not None else f"({size:,} bytes of a key)"
        if self._peek() != 0x3A:
            raise Broken("expected ':'", t.base + t.pos)
        t.pos += 1
        return key

    def _value(self, key: str, c: int) -> None:
        at = self.text.base + self.text.pos
        data, size = self._extent()
        if key == "traceEvents":  # no array (or one after the events'): not read
            if not self.events and self.events_type is None:
                self.events_type = _TYPES.get(c) or ("float" if data is not None and any(
                    x in data for x in b".eE") else "int")
            return
        self.keys[key] = None
        if data is not None and (size < SMALL or self.kept + size <= KEPT):
            self.kept += size
            self.top[key] = self._parse(data, at)
            self.skipped.pop(key, None)
            return
        self.top.pop(key, None)  # (a key given twice: its last value, as a JSON parser takes it)
        self.skipped[key] = size
        self.kinds[key] = _TYPES.get(c, "int")

    def _extent(self) -> tuple[bytes | None, int]:
        """Scan the value at ``pos``: its text (None where it is over :data:`BOUND` bytes)
        and its length; ``pos`` moved past it."""
        t = self.text
        sk = skipper()
        start, at = t.pos, t.base + t.pos
        resume, held = start, True  # held: the value's text is still in buf from start
        while True:
            end = sk.feed(t.buf, resume)
            if end == -1 and held and not sk.holds and t.end() - at > BOUND:
                held = False  # too long to read: scanned on, its text let go
            if end == -1 and not held:
                t.pos = len(t.buf)
                t.drop()
            if end == -1:
                resume = len(t.buf)
                if not t.more():  # the end of the input (the Python path checks what it had not)
                    end = sk.feed(t.buf, resume)
                    ended = sk.finish() if end == -1 else 0  # (1: a number ends there, -2: a fault)
                    if end == -1 and ended == 0:
                        raise Broken("unexpected end of data", t.end())
                    end = len(t.buf) if ended == 1 else ended if end == -1 else end
            if end == -2:
                raise Broken(sk.what, at + sk.at)
            if end >= 0:
                break
        size = t.base + end - at
        data = bytes(t.buf[start:end]) if held and size <= BOUND else None
        t.pos = end
        t.drop(_DROP)
        return data, size

    def _parse(self, data: bytes, at: int) -> Any:
        """A value's text (at byte ``at`` of the file), parsed; mended where ``lenient.repair`` can."""
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            fixed, counts = lenient.repair(data)
            if not counts:
                got = first_fault(data, e) or Broken(e.msg, 0)
                raise Broken(got.what, at + got.at) from None
            try:
                value = orjson.loads(fixed)
            except orjson.JSONDecodeError as again:
                got = first_fault(fixed, again) or Broken(again.msg, 0)
                raise Broken(got.what, at + lenient.original_offset(data, got.at)) from None
            add_counts(self.repaired, counts)
            return value


def add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    """``counts`` (what ``lenient.repair`` mended, by kind) added to ``into``."""
    for k, n in counts.items():
        into[k] = into.get(k, 0) + n
