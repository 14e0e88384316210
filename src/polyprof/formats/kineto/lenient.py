"""What the reader forgives, where the intent is clear, as Perfetto's JSON importer does:
trailing commas and raw control characters in strings (the document repaired, only after
it failed to parse), ``ph`` read by its first letter (``"XXX"`` is ``X``), numbers
written as strings (counter values; times already), and events whose ``ts`` is missing
or not a number (dropped, metadata kept). Whatever is dropped is counted by reason in
``Dropped`` and reported in one warning line.
"""

from __future__ import annotations

import re
from typing import Any

#: a JSON string, or a comma followed by a closing bracket (the string matched first, so
#: commas inside strings stay)
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|,(?=\s*[\]}])', re.S)
_CONTROL = re.compile(rb"[\x00-\x1f]")
#: Perfetto's reading of a number in a string: optional sign, digits with an optional
#: point (or a point and digits), an optional complete exponent
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


def _mended(tok: bytes) -> bytes:
    """A token of ``_TOKENS`` as ``repair`` writes it."""
    if tok == b",":
        return b""
    if _CONTROL.search(tok):
        return _CONTROL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
    return tok


def repair(data: bytes) -> tuple[bytes, dict[str, int]]:
    """The document with trailing commas removed and raw control characters in strings
    escaped; and how many of each (both 0: nothing to repair)."""
    counts = {"trailing commas": 0, "control characters in strings": 0}

    def fix(m: re.Match) -> bytes:
        tok = m.group(0)
        if tok == b",":
            counts["trailing commas"] += 1
        elif _CONTROL.search(tok):
            counts["control characters in strings"] += len(_CONTROL.findall(tok))
        return _mended(tok)

    out = _TOKENS.sub(fix, data)
    return out, {k: v for k, v in counts.items() if v}


def original_offset(data: bytes, at: int) -> int:
    """The byte of ``data`` that byte ``at`` of ``repair(data)``'s text came from (a byte
    inside a mended string: that string's start). For an error message: walks every token."""
    shift = 0  # bytes the mended text is ahead of ``data`` before the current token
    for m in _TOKENS.finditer(data):
        s, e = m.span()
        if s + shift > at:
            break
        tok = m.group(0)
        new = len(_mended(tok)) if tok == b"," or _CONTROL.search(tok) else e - s
        if at < s + shift + new:
            return s if new != e - s else at - shift
        shift += new - (e - s)
    return at - shift


def number(v: Any) -> float | None:
    """A counter value: a JSON number, or a string holding one (``".75"``, ``"246."``,
    ``"050"``, ``"+10.5"``); None for anything else (``"1.5e"``, ``"."``, ``"-"``, bools)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and _NUMBER.match(v.strip()):
        return float(v)
    return None


def phase(p: Any) -> Any:
    """``ph`` by its first letter, as Chrome's viewer and Perfetto read it."""
    return p[:1] if type(p) is str and len(p) > 1 else p


#: the reason events without a ``ts`` (or a null one) are dropped: damage (metadata
#: events need none); ``build.py`` also logs it as a warning naming the file
NO_TS = "events without a ts (a damaged file?)"


class Dropped:
    """Counts of what the reader left out, by reason (``build.py`` says them in the one
    "events not imported" warning line)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts[reason] = self.counts.get(reason, 0) + n
