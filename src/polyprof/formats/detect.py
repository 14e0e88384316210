"""Open any supported trace file, recognising the format from its first bytes."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Callable

from ..errors import TraceFormatError
from ..trace.core import Trace
from .safety import reading

#: (name, sniff(head bytes, path) -> bool, loader module:function). Order matters.
_FORMATS: list[tuple[str, Callable[[bytes, Path], bool], str]] = []


def register(name: str, sniff: Callable[[bytes, Path], bool], loader: str) -> None:
    """Make a reader known to :func:`load`; ``loader`` is ``"module:function"``."""
    _FORMATS.append((name, sniff, loader))


def _head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes (decompressed, after a ``GZ`` mark, for gzip files)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror or e})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as g:
                return b"GZ" + g.read(n)
        except EOFError:  # shorter than n once decompressed, and cut: the reader says so
            return b"GZ" + _partial_gunzip(raw)
        except (OSError, zlib.error) as e:  # BadGzipFile is an OSError
            raise TraceFormatError(path, f"corrupt gzip data ({e})") from None
    return raw


def _partial_gunzip(raw: bytes) -> bytes:
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)
    except zlib.error:
        return b""


def detect(path: str | Path) -> str:
    path = Path(path)
    if not path.exists():
        partial = Path(str(path) + ".partial")
        if partial.exists():
            raise TraceFormatError(path, f"no such file, but {partial} is there: the profiled program "
                                         "was killed before the trace was written; load that file instead")
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    head = _head(path)
    if _is_blank(path, head):
        raise TraceFormatError(path, "empty file")
    for name, sniff, _ in _FORMATS:
        if sniff(head, path):
            return name
    raise TraceFormatError(path, "unrecognised format (expected .polyprof, Kineto/Chrome JSON, XSpace or a .partial crash journal)")


def _is_blank(path: Path, head: bytes, n: int = 4096) -> bool:
    """The whole file (decompressed) is empty or whitespace."""
    gz = head.startswith(b"GZ")
    body = head[2:] if gz else head
    if body.strip():
        return False
    return len(body) < n if gz else path.stat().st_size == len(body)


def load(path: str | Path, **options) -> Trace:
    """Load a trace of any supported format."""
    import importlib

    path = Path(path)
    name = detect(path)
    loader = next(l for n, _, l in _FORMATS if n == name)
    mod, fn = loader.split(":")
    read = getattr(importlib.import_module(mod), fn)
    with reading(path):  # the readers guard themselves too; a plugin-registered one may not
        trace = read(path, **options)
        from ..trace.identity import identify

        return identify(trace, label=path.name)


def _is_json(head: bytes, path: Path) -> bool:
    body = head[2:] if head.startswith(b"GZ") else head
    return body.lstrip()[:1] in (b"{", b"[")


def _is_protobuf(head: bytes, path: Path) -> bool:
    """A walk over XSpace's fields (before JSON: a plane of 91 bytes starts ``\\n[``)."""
    from .xspace import is_protobuf_xspace

    if head.startswith(b"GZ"):
        return is_protobuf_xspace(head[2:], None)
    return is_protobuf_xspace(head, path.stat().st_size)


register("polyprof", lambda h, p: h[:4] == b"PK\x03\x04", "polyprof.formats.native:load")
register("xspace", _is_protobuf, "polyprof.formats.xspace:load")
register("chrome-json", _is_json, "polyprof.formats.kineto:load")
register("polyprof-journal", lambda h, p: h.startswith(b"POLYPROF-JOURNAL "), "polyprof.formats.journal:load")


def _is_xspace(head: bytes, path: Path) -> bool:
    from .xspace import sniff

    return sniff(head, path)


register("xspace", _is_xspace, "polyprof.formats.xspace:load")  # after native and JSON
