"""Which rank a file holds, before loading it: the ``distributedInfo`` it names (peeked
from the first megabyte of a Kineto JSON, or the sources of a ``.polyprof`` header), and
a number in its file name (``rank-3``, ``rank_3``, ``rank3``, ``worker3``...). How these
become ranks: ``sources.assign_ranks``."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import orjson


PEEK_BYTES = 1 << 20
PEEK_STEP = 64 << 10
_DIST = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)(?=\D)')  # the whole number
_NAME = re.compile(r"(?:rank|worker|proc|process|node|gpu)[-_.]?(\d+)", re.IGNORECASE)
_TRAILING = re.compile(r"(\d+)(?:\D*)$")


def _peek_rank(path: Path) -> int | None:
    """The ``distributedInfo`` rank in the first :data:`PEEK_BYTES` of the (inflated)
    text, read a step at a time: Kineto writes it before the events, so one 64 KiB
    step usually finds it."""
    import zlib

    with open(path, "rb") as f:
        raw = f.read(PEEK_BYTES)
    d = zlib.decompressobj(wbits=31) if raw[:2] == b"\x1f\x8b" else None
    text = b""
    while len(text) < PEEK_BYTES:
        if d is None:
            more = raw[len(text):len(text) + PEEK_STEP]
        else:
            try:
                more = d.decompress(raw, PEEK_STEP)
            except zlib.error:
                return None
            raw = d.unconsumed_tail
        if not more:
            break
        text += more
        m = _DIST.search(text, max(0, len(text) - len(more) - 4096))  # a match may span two steps
        if m:
            return int(m.group(1))
    return None


def rank_in_file(path: Path) -> int | None:
    """The rank the file itself names, or None (never raises for a bad file: the load
    that follows reports it)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                header = orjson.loads(zf.read("header.json"))
            for s in header.get("sources", []):
                if isinstance(s.get("rank"), int):
                    return int(s["rank"])
            info = header.get("metadata", {}).get("distributedInfo", {})
            return int(info["rank"]) if isinstance(info.get("rank"), int) else None
        return _peek_rank(path)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, orjson.JSONDecodeError):
        return None


def rank_in_name(path: Path) -> tuple[int, bool] | None:
    """(the number in the file name, whether a word names it a rank: ``rank3``,
    ``worker_3``), else the name's last number (``trace_3``, but also a host's: XProf
    names its files ``<host>.xplane.pb``), or None."""
    stem = path.name.split(".")[0]
    m = _NAME.search(stem)
    if m:
        return int(m.group(1)), True
    m = _TRAILING.search(stem)
    return (int(m.group(1)), False) if m else None
