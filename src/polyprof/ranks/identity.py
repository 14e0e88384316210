"""Which rank a file holds, before loading it: ``distributedInfo`` (peeked from the
first megabyte of a Kineto JSON, or the sources of a ``.polyprof`` header), else a
number in the file name (``rank-3``, ``rank_3``, ``rank3``, ``worker3``...), else the
order given. A job whose files claim one rank twice falls back to the order given."""

from __future__ import annotations

import logging
import re
import zipfile
from pathlib import Path

import orjson

log = logging.getLogger("polyprof")

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


def rank_in_name(path: Path) -> int | None:
    stem = path.name.split(".")[0]
    m = _NAME.search(stem) or _TRAILING.search(stem)
    return int(m.group(1)) if m else None


def assign_ranks(paths: list[Path]) -> list[tuple[int, str]]:
    """(rank, how) for each path, in the order given; ``how`` is ``distributedInfo``,
    ``file name`` or ``order``."""
    for how, get in (("distributedInfo", rank_in_file), ("file name", rank_in_name)):
        found = [get(p) for p in paths]
        if all(r is not None for r in found) and len(set(found)) == len(found):
            return [(int(r), how) for r in found]  # type: ignore[arg-type]
        if how == "distributedInfo" and any(r is not None for r in found):
            dup = len({r for r in found if r is not None}) < sum(r is not None for r in found)
            if dup:
                log.warning("several files name the same rank in distributedInfo; ranks by file name or order")
            elif any(r is None for r in found):
                # some files name their rank: keep those, number the rest after them
                known = {r for r in found if r is not None}
                nxt = (r for r in range(len(paths) + max(known) + 1) if r not in known)
                return [(int(r), "distributedInfo") if r is not None else (next(nxt), "order") for r in found]
    return [(i, "order") for i in range(len(paths))]
