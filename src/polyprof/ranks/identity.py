"""Which rank a file holds, before loading it: the ``distributedInfo`` it names (peeked
from the first megabyte of a Kineto JSON, or the sources of a ``.polyprof`` header), and
a number in its file name (``rank-3``, ``rank_3``, ``rank3``, ``worker3``...); and which
process recorded a Kineto JSON (its host and pid), so that several recordings of one
process are one rank. How these become ranks: ``sources.assign_ranks``."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Callable, TypeVar

import orjson

T = TypeVar("T")


PEEK_BYTES = 1 << 20
PEEK_STEP = 64 << 10
_DIST = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)(?=\D)')  # the whole number
_NAME = re.compile(r"(?:rank|worker|proc|process|node|gpu)[-_.]?(\d+)", re.IGNORECASE)
_TRAILING = re.compile(r"(\d+)(?:\D*)$")


#: Kineto's ``host_name`` (written before the events by recent torch), and a host op's
#: pid (torch writes ``ph``, ``cat``, ``name``, ``pid`` in this order, before ``args``)
_HOST = re.compile(rb'"host_name"\s*:\s*"([^"\\]*)"')
_HOST_PID = re.compile(rb'\{\s*"ph"\s*:\s*"X"\s*,\s*"cat"\s*:\s*"(?:cpu_op|user_annotation|python_function)"'
                       rb'[^{}]*?"pid"\s*:\s*(\d+)')


def _peek_rank(path: Path) -> int | None:
    """The ``distributedInfo`` rank in the first :data:`PEEK_BYTES` of the (inflated)
    text, read a step at a time: Kineto writes it before the events, so one 64 KiB
    step usually finds it."""
    def find(text: bytes, start: int) -> int | None:
        m = _DIST.search(text, start)
        return int(m.group(1)) if m else None

    return _peek(path, find)


#: what :func:`_process` gives for a header that names no host: nothing more to read
_NO_HOST = ("", -1)


def _process(text: bytes, start: int) -> tuple[str, int] | None:
    at = text.find(b'"traceEvents"')
    if at < 0:
        return None
    host = _HOST.search(text, 0, at)
    if host is None:  # (older torch: a megabyte read for nothing, in every file of a job)
        return _NO_HOST
    pid = _HOST_PID.search(text, max(start, at))
    return (host.group(1).decode("utf-8", "replace"), int(pid.group(1))) if pid else None


def _peek(path: Path, find: Callable[[bytes, int], T | None]) -> T | None:
    """``find(text, start)`` over the first :data:`PEEK_BYTES` of the (inflated) text,
    read a step at a time; ``start`` is where the new step's matches can begin."""
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
        got = find(text, max(0, len(text) - len(more) - 4096))  # a match may span two steps
        if got is not None:
            return got
    return None


def process_in_file(path: Path) -> tuple[str, int, int | None] | None:
    """(host, pid, distributedInfo rank or None) of the process a Kineto JSON recorded,
    peeked as the rank is; None when the file names no host (older torch) or no
    host op is in its first megabyte, or for any other format (never raises)."""
    try:
        if zipfile.is_zipfile(path):
            return None
        proc = _peek(path, _process)
        return None if proc is None or proc == _NO_HOST else (proc[0], proc[1], _peek_rank(path))
    except (OSError, ValueError):
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
