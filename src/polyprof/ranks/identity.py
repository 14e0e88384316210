"""Which rank a file holds, before loading it: the ``distributedInfo`` it names (peeked
from the first megabyte of a Kineto JSON, or the sources of a ``.polyprof`` header), and
a number in its file name (``rank-3``, ``rank_3``, ``rank3``, ``worker3``...); and which
process recorded a Kineto JSON (its host and pid), so that several recordings of one
process are one rank. How these become ranks: ``sources.assign_ranks``."""

from __future__ import annotations

import re
import stat
import zipfile
from pathlib import Path
from typing import Callable, TypeVar

import orjson

T = TypeVar("T")


PEEK_BYTES = 1 << 20
PEEK_STEP = 64 << 10
_DIST = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)(?=\D)')  # the whole number
#: a number a word names a rank in a file name (``rank3``, ``worker_3``): group 1
NAMED_RANK = re.compile(r"(?:rank|worker|proc|process|node|gpu)[-_.]?(\d+)", re.IGNORECASE)
_TRAILING = re.compile(r"(\d+)(?:\D*)$")


#: Kineto's ``host_name`` (written before the events by recent torch), and a host op's
#: pid (torch writes ``ph``, ``cat``, ``name``, ``pid`` in this order, before ``args``;
#: torch 1.8-1.9 named its ops' category ``Operator``)
_HOST = re.compile(rb'"host_name"\s*:\s*"([^"\\]*)"')
_HOST_PID = re.compile(rb'\{\s*"ph"\s*:\s*"X"\s*,\s*"cat"\s*:\s*"(?:cpu_op|Operator|user_annotation|python_function)"'
                       rb'[^{}]*?"pid"\s*:\s*(\d+)')


def _peek_rank(path: Path) -> int | None:
    """The ``distributedInfo`` rank in the first :data:`PEEK_BYTES` of the (inflated)
    text, read a step at a time: Kineto writes it before the events, so one 64 KiB
    step usually finds it."""
    def find(text: bytes, start: int) -> int | None:
        m = _DIST.search(text, start)
        return int(m.group(1)) if m else None

    return _peek(path, find)


#: ``tensorboard_trace_handler``'s file name: ``<host>_<pid>.<time>.pt.trace.json[.gz]`` (its
#: default worker name), the host and pid of a file whose header names no host (older torch)
_HANDLER_NAME = re.compile(r"^(.+)_(\d+)\.\d+\.pt\.trace\.json(?:\.gz|\.xz)?$")


def _process_finder(name_host: str | None) -> Callable[[bytes, int], tuple[str, int, bool] | None]:
    """The finder of (host, pid, whether the host is ``name_host``) for :func:`_peek`:
    the host the header names, else ``name_host`` (from the file name), and the pid of
    the first host op. ("", -1, False) for a header that names no host and no
    ``name_host``: nothing more to read."""
    def find(text: bytes, start: int) -> tuple[str, int, bool] | None:
        at = text.find(b'"traceEvents"')
        if at < 0:
            return None
        host = _HOST.search(text, 0, at)
        if host is None and name_host is None:  # (older torch: stop where the events begin)
            return "", -1, False
        pid = _HOST_PID.search(text, max(start, at))
        if pid is None:
            return None
        if host is None:
            return str(name_host), int(pid.group(1)), True
        return host.group(1).decode("utf-8", "replace"), int(pid.group(1)), False

    return find


def _peek(path: Path, find: Callable[[bytes, int], T | None]) -> T | None:
    """``find(text, start)`` over the first :data:`PEEK_BYTES` of the text (gzip or xz inflated),
    read a step at a time; ``start`` is where the new step's matches can begin."""
    import lzma
    import zlib

    with open(path, "rb") as f:
        raw = f.read(PEEK_BYTES)
    d = zlib.decompressobj(wbits=31) if raw[:2] == b"\x1f\x8b" else None
    x = lzma.LZMADecompressor(lzma.FORMAT_XZ) if raw[:6] == b"\xfd7zXZ\x00" else None
    text = b""
    while len(text) < PEEK_BYTES:
        try:
            if x is not None:  # (lzma keeps the input it did not use)
                more = b"" if x.eof else x.decompress(raw, PEEK_STEP)
                raw = b""
            elif d is not None:
                more = d.decompress(raw, PEEK_STEP)
                raw = d.unconsumed_tail
            else:
                more = raw[len(text):len(text) + PEEK_STEP]
        except (zlib.error, lzma.LZMAError):
            return None
        if not more:
            break
        text += more
        got = find(text, max(0, len(text) - len(more) - 4096))  # a match may span two steps
        if got is not None:
            return got
    return None


def process_in_file(path: Path) -> tuple[str, int, int | None] | None:
    """(host, pid, distributedInfo rank or None) of the process a Kineto JSON recorded,
    peeked as the rank is: the host its header names, or, for a header that names none
    (older torch), the one ``tensorboard_trace_handler``'s file name gives where that
    name's pid is the file's; None when neither names a host or no host op is in the
    first megabyte, or for any other format (never raises)."""
    try:
        if not _regular(path) or zipfile.is_zipfile(path):
            return None
        named = _HANDLER_NAME.match(path.name)
        proc = _peek(path, _process_finder(named.group(1) if named else None))
        if proc is None or proc[1] < 0:
            return None
        host, pid, from_name = proc
        if from_name and named is not None and pid != int(named.group(2)):
            return None  # the name's pid is not the file's: not the handler's name
        return host, pid, _peek_rank(path)
    except (OSError, ValueError):
        return None


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file: a FIFO is never opened here (with no writer
    its open waits forever; the load that follows refuses it, formats/detect.py)."""
    return stat.S_ISREG(path.stat().st_mode)


def rank_in_file(path: Path) -> int | None:
    """The rank the file itself names, or None (never raises for a bad file: the load
    that follows reports it)."""
    try:
        if not _regular(path):
            return None
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
    m = NAMED_RANK.search(stem)
    if m:
        return int(m.group(1)), True
    m = _TRAILING.search(stem)
    return (int(m.group(1)), False) if m else None
