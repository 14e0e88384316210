"""Where JSON text goes wrong: the first fault of a piece of text, and its place in the file.

A slice of ``traceEvents`` is checked by msgspec's syntax check alone (into ``Raw``:
nothing is built, so a check costs no memory beyond the text); a fault that
``lenient.repair`` mends (a raw control character in a string, a trailing comma) is
mended in that piece of text only. A fault is reported at its byte in the file's JSON
text (decompressed), with its line and column counted by reading the file again up to
it: only when there is an error to say, never on the normal path.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import orjson

from ...errors import PolyprofError
from ..inflate import Decompressed
from . import lenient

_CHECK = msgspec.json.Decoder(msgspec.Raw)
_AT: re.Pattern[str] | None = None  # msgspec's " (byte N)" at the end of its message
_BLOCK = 1 << 20


class Broken(Exception):
    """JSON text that does not parse: what is wrong, at which byte of the text."""

    def __init__(self, what: str, at: int):
        super().__init__(what, at)
        self.what, self.at = what, at


def first_fault(text: bytes, err: orjson.JSONDecodeError | None = None, utf8: bool = True) -> Broken | None:
    """The first fault of JSON ``text`` (a text that ends early has one at its end, ``unexpected
    end of data``); None if it parses. ``err``: orjson's error for it, used when msgspec's
    check finds nothing (what only orjson refuses, as a lone surrogate escape)."""
    global _AT
    try:
        _CHECK.decode(text)
    except msgspec.DecodeError as e:
        msg = str(e)
        if _AT is None:
            _AT = re.compile(r" \(byte (\d+)\)$")
        m = _AT.search(msg)
        if m:
            return Broken(msg[:m.start()].removeprefix("JSON is malformed: "), int(m.group(1)))
        return Broken("unexpected end of data", len(text))  # "Input data was truncated"
    if utf8:
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as u:
            return Broken("invalid UTF-8", u.start)
    if err is not None:
        return Broken(err.msg, len(err.doc[:err.pos].encode("utf-8", "surrogatepass")))
    return None


def unmended(text: bytes) -> Broken | None:
    """The first fault of ``text`` that ``lenient.repair`` does not mend (at its byte in
    ``text``), None if there is none before its end: ``text`` is the start of JSON
    (a slice of the events array read so far), so its ending early is no fault."""
    got = first_fault(text, utf8=False)
    if got is None or got.at >= len(text):
        return None
    fixed, counts = lenient.repair(text)
    if not counts:
        return got
    again = first_fault(fixed, utf8=False)
    if again is None or again.at >= len(fixed):
        return None
    return Broken(again.what, lenient.original_offset(text, again.at))


def located(path: Path, what: str, at: int) -> str:
    """``invalid JSON (what: line L column C (byte B))`` for byte ``at`` of the file's text."""
    where = _line_column(path, at)
    return f"invalid JSON ({what}: {where}(byte {at:,}))"


def _line_column(path: Path, at: int) -> str:
    """``line L column C `` of byte ``at`` of the file's (decompressed) text, read again up
    to it; empty if it cannot be read again."""
    lines, line_start, seen = 0, 0, 0
    try:
        for blk in Decompressed(path, _BLOCK).blocks():
            part = blk[:max(0, at - seen)]
            lines += part.count(b"\n")
            k = part.rfind(b"\n")
            if k >= 0:
                line_start = seen + k + 1
            seen += len(blk)
            if seen >= at:
                break
    except (OSError, PolyprofError):  # the file changed or went: said without a line then
        return ""
    return f"line {lines + 1:,} column {at - line_start + 1:,} "
