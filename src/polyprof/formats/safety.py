"""What every reader promises about bad input, in one place: limits on what a file may
inflate to, and the guard that turns any failure while reading into one
:class:`~polyprof.errors.TraceFormatError` naming the file.

Limits (each also an environment variable, read when a file is opened):

- ``max_inflated_bytes`` (``POLYPROF_MAX_INFLATED_BYTES``, default 64 GiB): the most a
  compressed input (gzip, xz, a zip member) may inflate to.
- ``max_inflate_ratio`` (``POLYPROF_MAX_INFLATE_RATIO``, default 200): inflated / compressed
  size, checked once more than ``ratio_floor_bytes`` (64 MiB) came out. Real traces
  compress 7-20x; gzip's most is ~1030x, what a decompression bomb uses. A streamed
  input is measured against the compressed bytes *read so far*, not the file's size, so
  a bomb is refused after about ``ratio_floor_bytes`` of output, before the parser has
  spent time on more (a 4 MB bomb: ~1 GB inflated, refused at the first 64 MiB).
- ``max_events`` (``POLYPROF_MAX_EVENTS``, default 2**31 - 1): events in one trace.

``with safety.override(max_events=10**6): polyprof.load(path)`` changes them for a block.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple, TypeVar

if TYPE_CHECKING:
    import duckdb

from .. import envvars
from ..errors import PolyprofError, TraceFormatError, one_line
from ..trace import metadata_keys as mkeys

log = logging.getLogger("polyprof")


#: times beyond +-this (ns, about 146 years) are damage, not a clock (and an end minus a
#: start, or a sum of two, still fits in int64): what every reader refuses or drops
TIME_LIMIT_NS = 2**62


class Limits(NamedTuple):  # not a frozen dataclass: made at every start (docs/benchmarks.md, issue 35)
    """What a reader accepts before it stops with an error (``POLYPROF_MAX_*``)."""

    max_inflated_bytes: int = 64 << 30
    max_inflate_ratio: float = 200.0
    ratio_floor_bytes: int = 64 << 20
    max_events: int = 2**31 - 1


_ENV = {"max_inflated_bytes": ("POLYPROF_MAX_INFLATED_BYTES", "bytes"),
        "max_inflate_ratio": ("POLYPROF_MAX_INFLATE_RATIO", "a ratio"), "max_events": ("POLYPROF_MAX_EVENTS", "events")}
_override: Limits | None = None


def current() -> Limits:
    """The limits in force: an :func:`override`, else the environment, else the defaults."""
    if _override is not None:
        return _override
    lim = Limits()
    for name, (var, unit) in _ENV.items():
        default = getattr(lim, name)
        lim = lim._replace(**{name: type(default)(envvars.number(var, default, unit))})
    return lim


@contextlib.contextmanager
def override(**changes: Any) -> Iterator[Limits]:  # each of its Limits field's type
    """Use other limits inside a ``with`` block (names as in :class:`Limits`)."""
    global _override
    known = set(Limits._fields)
    bad = set(changes) - known
    if bad:
        raise PolyprofError(f"unknown limits {sorted(bad)}; known: {sorted(known)}")
    before = _override
    _override = current()._replace(**changes)
    try:
        yield _override
    finally:
        _override = before


#: how an xz file begins (its stream header's magic bytes): read streamed where its reader
#: can (``formats/inflate.py``), within the same limits as gzip
XZ_MAGIC = b"\xfd7zXZ\x00"
#: the UTF-8 byte-order mark some editors (a Windows one's) put before a file's text: not
#: the JSON's (detect.py looks past it, kineto/toplevel.py skips it)
BOM = b"\xef\xbb\xbf"
#: how a gzip file begins
GZIP_MAGIC = b"\x1f\x8b"


def packer(head: bytes) -> str:
    """"gzip" or "xz" for a file whose first bytes are ``head`` (at least 6), else ""."""
    return "gzip" if head[:2] == GZIP_MAGIC else "xz" if head[:len(XZ_MAGIC)] == XZ_MAGIC else ""


class Inflation:
    """Counts what a compressed input has inflated to so far; raises past a limit."""

    def __init__(self, path: str | Path, compressed_bytes: int, what: str = "gzip data"):
        self.path, self.compressed, self.what = path, max(int(compressed_bytes), 1), what
        self.limits = current()
        self.total = 0

    def add(self, n: int, consumed: int | None = None) -> None:
        """``n`` more bytes came out; ``consumed``: compressed bytes read so far, when the
        input is streamed (the ratio is then checked against them, not the whole file)."""
        self.total += n
        lim = self.limits
        basis = self.compressed if consumed is None else max(min(consumed, self.compressed), 1)
        if self.total > lim.max_inflated_bytes:
            raise TraceFormatError(self.path, f"{self.what} inflates to more than {lim.max_inflated_bytes:,} bytes "
                                              "(limit max_inflated_bytes / POLYPROF_MAX_INFLATED_BYTES)")
        if self.total > lim.ratio_floor_bytes and self.total > lim.max_inflate_ratio * basis:
            raise TraceFormatError(self.path, f"{self.what} inflates more than {lim.max_inflate_ratio:g}x "
                                              f"({basis:,} compressed bytes, {self.total:,} so far): "
                                              "a decompression bomb? (limit max_inflate_ratio / "
                                              "POLYPROF_MAX_INFLATE_RATIO)")


def check_events(path: str | Path, n: int, so_far: bool = False) -> None:
    """Refuse a trace of more than ``max_events`` events: ``n`` its count, or (``so_far``)
    the count a reader that stops at the limit had read by then, which the message says
    is not the file's."""
    lim = current().max_events
    if n > lim:
        count = f"stopped after reading {n:,}" if so_far else f"{n:,}"
        raise TraceFormatError(path, f"more than {lim:,} events ({count}; limit max_events / POLYPROF_MAX_EVENTS)")


class ForeignError(TraceFormatError):
    """A reader failed in a way it does not check for by name: still a TraceFormatError
    naming the file, with the original exception kept as ``cause`` (the fuzzers count
    these separately: each is a check a reader should make itself)."""

    def __init__(self, path: str | Path, cause: BaseException):
        self.cause = cause
        super().__init__(path, f"damaged or unsupported content ({type(cause).__name__}: {one_line(cause)})")


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Whatever goes wrong inside leaves as a TraceFormatError naming ``path``."""
    try:
        yield
    except TraceFormatError:
        raise
    except PolyprofError as e:  # e.g. TraceSchemaError from the builder: say which file
        raise TraceFormatError(path, str(e)) from None
    except MemoryError:
        raise TraceFormatError(path, "not enough memory to read this trace") from None
    except RecursionError:
        raise TraceFormatError(path, "nested too deeply to read") from None
    except ImportError:  # the installation, not the file
        raise
    except Exception as e:  # noqa: BLE001 - the promise: bad input never leaks another exception
        log.debug("%s: reader failed on unchecked input", path, exc_info=True)
        raise ForeignError(path, e) from None


R = TypeVar("R")


def guarded(load: Callable[..., R]) -> Callable[..., R]:
    """Decorate a reader ``load(path, ...)`` with :func:`reading` on its path."""
    import functools

    @functools.wraps(load)
    def wrapper(path: str | Path, *args: object, **kwargs: object) -> R:
        with reading(path):
            return load(path, *args, **kwargs)

    return wrapper


def _int64(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -2**62 <= v <= 2**62


#: metadata keys that code reads back, and what each must be to be read
_KNOWN_METADATA = {
    mkeys.WALL_ANCHOR: lambda v: isinstance(v, dict) and all(_int64(x) for x in v.values()),
    mkeys.CLOCK_NAME: lambda v: isinstance(v, str),
    mkeys.TITLE: lambda v: isinstance(v, str),
    mkeys.WARNINGS: lambda v: isinstance(v, list) and all(isinstance(x, str) or isinstance(x, dict) and isinstance(
        x.get("message"), str) and isinstance(x.get("plugin", ""), str) for x in v),
    mkeys.PLUGIN_ERRORS: lambda v: isinstance(v, list),
    mkeys.XSPACE: lambda v: isinstance(v, dict),
    mkeys.SESSION: lambda v: isinstance(v, dict),
    mkeys.FILE_SOURCE: lambda v: isinstance(v, (dict, str)),
    mkeys.DEVICE_PROPERTIES: lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    mkeys.BASE_TIME_NS: _int64,
    mkeys.CLOCK_SYNC: lambda v: isinstance(v, dict),
}


def _portable(v: object) -> bool:
    import orjson

    try:
        orjson.dumps(v, default=str, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # ints beyond 64 bits, nesting beyond 254
        return False
    return True


def _text(v: object, n: int = 10_000) -> str:
    try:
        s = repr(v)
    except (RecursionError, ValueError):
        s = f"<{type(v).__name__} nested too deeply>"
    return s if len(s) <= n else s[:n] + "..."


def clean_metadata(metadata: dict[str, Any]) -> list[str]:
    """Drop well-known metadata entries of the wrong type and turn values JSON cannot
    hold into text (in place); the names changed."""
    props = metadata.get(mkeys.DEVICE_PROPERTIES)
    if isinstance(props, list):  # keep the devices described well enough to be matched by id
        metadata[mkeys.DEVICE_PROPERTIES] = [d for d in props if isinstance(d, dict) and _int64(d.get("id", 0))]
    session = metadata.get(mkeys.SESSION)
    if isinstance(session, dict):  # the fields code reads back (trace.identity, clocks)
        for k, ok in (("pid", _int64), ("rank", _int64), ("start_ns", _int64), ("stop_ns", _int64),
                      ("hostname", lambda v: isinstance(v, str))):
            if k in session and not ok(session[k]):
                del session[k]
    bad = [k for k, ok in _KNOWN_METADATA.items() if k in metadata and not ok(metadata[k])]
    for k in bad:
        del metadata[k]
    for k, v in list(metadata.items()):
        if not _portable(v):  # writers store metadata as JSON: keep what JSON cannot hold as text
            metadata[k] = _text(v)
            bad.append(k)
    if bad:
        metadata.setdefault(mkeys.WARNINGS, []).append(f"damaged metadata entries dropped or kept as text: {', '.join(bad)}")
    return bad


#: what a query may not do unless the user says so: files, ATTACH, extensions, network
SQL_SANDBOX = ["SET enable_external_access = false", "SET allow_community_extensions = false",
               "SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false",
               "SET lock_configuration = true"]


def duckdb_sandbox(con: duckdb.DuckDBPyConnection, paths: Iterable[str | Path] = (), directories: Iterable[str | Path] = ()) -> None:
    """Lock a DuckDB connection to the tables it has: no other files (but ``paths`` and
    ``directories``, e.g. a store's own Parquet files and spill space), no ATTACH, no
    extension installs or loads, no network; then lock the configuration so the query
    cannot undo it."""

    def lit(items: Iterable[str | Path]) -> str:
        return ", ".join("'" + str(p).replace("'", "''") + "'" for p in items)

    paths, directories = list(paths), [f"{str(d).rstrip('/')}/" for d in directories]
    if paths:
        con.execute(f"SET allowed_paths = [{lit(paths)}]")
    if directories:
        con.execute(f"SET allowed_directories = [{lit(directories)}]")
    for setting in SQL_SANDBOX:
        con.execute(setting)
