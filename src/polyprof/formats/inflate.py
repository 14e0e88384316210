"""A file as a stream of decompressed blocks (gzip and xz told by their magic, plain
files as they are), within the inflation limits of every compressed input
(``safety.Inflation``): the Kineto, Perfetto and rocprofv3 JSON readers stream them, an
xz XSpace and a compressed SQLite database are inflated whole through them."""

from __future__ import annotations

import lzma
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Generator, Iterator

from ..errors import TraceFormatError
from .safety import XZ_MAGIC, Inflation, packer

_READ_BYTES = 1 << 20
#: compressed bytes handed to the inflater at a time: a call that fills a block leaves the
#: rest of them as its unconsumed tail, a copy made at every such call, so the rest is
#: kept small (read 1 MiB at a time, a 30x-compressed trace copied its tail 120 times a MiB)
_FEED_BYTES = 64 << 10
#: compressed files from this size are inflated by ISA-L (faster than zlib, same
#: API and results); below it zlib, as importing ISA-L costs more than it saves
ISAL_FROM_BYTES = 64 << 10


def _ignore(n: int) -> None:
    pass


def _zeros_only(raw: bytes, path: Path) -> bool:
    """True for zeros after a gzip file's last member (padding, as gzip reads it); a
    TraceFormatError for anything else after them."""
    if raw.strip(b"\x00"):
        raise TraceFormatError(path, "corrupt gzip data (other bytes after the zeros that pad its last member)")
    return True


def inflater(size: int) -> ModuleType:
    """The zlib module for a gzip file of ``size`` bytes: ISA-L's when it pays and is installed."""
    if size >= ISAL_FROM_BYTES:
        try:
            from isal import isal_zlib
        except ImportError:  # pragma: no cover - isal has wheels for the usual platforms
            return zlib
        return isal_zlib
    return zlib


class Decompressed:
    """Decompressed bytes of a file in blocks of at most ``block`` bytes; ``advance`` is
    told how many of the file's own bytes each read took (a progress bar)."""

    def __init__(self, path: Path, block: int, advance: Callable[[int], None] | None = None):
        self.path, self.block = path, block
        self.size = path.stat().st_size
        self.advance = advance or _ignore
        #: the compressed stream's last block has been handed out: set before it is yielded
        #: (its end and the file's reached, nothing after), so a reader that stops there
        #: knows it holds all (``sqlite_db``: a database inflated within its sniff's head)
        self.ended = False

    def blocks(self) -> Generator[bytes, None, None]:
        with open(self.path, "rb") as f:
            kind = packer(f.read(len(XZ_MAGIC)))
            f.seek(0)
            if kind == "gzip":
                yield from self._gunzip(f)
                return
            if kind == "xz":
                yield from self._unxz(f)
                return
            while True:
                raw = f.read(_READ_BYTES)
                if not raw:
                    return
                self.advance(len(raw))
                yield raw

    def _feeds(self, f: Any) -> Iterator[bytes]:
        """The compressed file a feed at a time, each counted in the progress."""
        while raw := f.read(_FEED_BYTES):
            self.advance(len(raw))
            yield raw

    def _gunzip(self, f: Any) -> Iterator[bytes]:
        z = inflater(self.size)
        d = z.decompressobj(wbits=31)
        inflation = Inflation(self.path, self.size)
        fed = False  # the current member has had input
        members = 0  # members inflated whole
        padding = False  # zeros after the last member (gzip pads so, and gzip -t accepts them)
        consumed = 0  # compressed bytes inflated so far (the bomb check's basis)
        try:
            for raw in self._feeds(f):
                while raw:
                    if padding or (members and not fed and raw[:1] == b"\x00"):
                        padding = _zeros_only(raw, self.path)
                        break
                    fed = True
                    out = d.decompress(raw, self.block)
                    # at a member's end zlib leaves the rest as both unused_data and
                    # unconsumed_tail (ISA-L as unused_data only): count it once
                    consumed += len(raw) - len(d.unused_data if d.eof else d.unconsumed_tail)
                    if out:
                        inflation.add(len(out), consumed)
                        self.ended = d.eof and not d.unused_data.strip(b"\x00") and f.tell() >= self.size
                        yield out
                    if d.eof:  # concatenated gzip members
                        raw = d.unused_data
                        members += 1
                        d = z.decompressobj(wbits=31)
                        fed = False
                    else:
                        raw = d.unconsumed_tail
            out = d.flush()
            if out:
                yield out
        except (zlib.error, z.error) as e:
            raise TraceFormatError(self.path, f"corrupt gzip data ({e})") from None
        if fed and not d.eof:
            raise TraceFormatError(self.path, "truncated gzip data: the compressed stream ends early")

    def _unxz(self, f: Any) -> Iterator[bytes]:
        """An xz file's streams inflated a block at a time (stdlib ``lzma``). ``lzma``
        keeps the input a call did not use inside, so the bytes fed so far are the bomb
        check's basis (at most one feed more than what was inflated)."""
        d = lzma.LZMADecompressor(lzma.FORMAT_XZ)
        inflation = Inflation(self.path, self.size, "xz data")
        fed = 0  # compressed bytes handed to the decompressor so far
        started = False  # the current stream has had input
        try:
            for raw in self._feeds(f):
                fed += len(raw)
                while raw or not (d.needs_input or d.eof):
                    if not started:  # a stream's start: the zeros that pad the one before it left out
                        raw = raw.lstrip(b"\x00")
                        if not raw:
                            break
                    started = True
                    out = d.decompress(raw, self.block)
                    raw = b""
                    if out:
                        inflation.add(len(out), fed)
                        self.ended = d.eof and not d.unused_data.strip(b"\x00") and f.tell() >= self.size
                        yield out
                    if d.eof:  # concatenated streams (xz writes them; padding between them is zeros)
                        raw = d.unused_data.lstrip(b"\x00")
                        d = lzma.LZMADecompressor(lzma.FORMAT_XZ)
                        started = False
        except lzma.LZMAError as e:
            raise TraceFormatError(self.path, f"corrupt xz data ({e})") from None
        if started and not d.eof:
            raise TraceFormatError(self.path, "truncated xz data: the compressed stream ends early")
