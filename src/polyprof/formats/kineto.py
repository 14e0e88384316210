"""Kineto / Chrome trace JSON reader (what ``torch.profiler`` writes), ``.json`` or ``.json.gz``.

Built for big traces: the file is decompressed as a stream and the ``traceEvents`` array
is cut into slices of whole events; msgspec decodes each slice straight into small typed
structs (only the fields the reader uses; ``ts`` and ``dur`` kept as their JSON text), and
each slice becomes NumPy columns straight away, so the parsed JSON of the whole file never
exists at once. Anything the fast path cannot cut (odd layouts, broken files) is parsed in
one piece, with orjson's exact error message for broken JSON.

Mapping to the Trace: host processes -> ``/host:CPU`` planes (thread tracks), devices ->
``/device:<KIND>:<N>`` planes (one track per stream), ``X``/``i``/``I``/``B``-``E`` ->
events, ``C`` -> counters, ``s``/``t``/``f`` -> flows bound to events, ``M`` -> names.
Times are Kineto's wall clock in ns (``baseTimeNanoseconds`` + ``ts`` µs, or absolute
µs), read from the digits of their text, so ns are exact.
"""

from __future__ import annotations

import gc
import logging
import re
import warnings
import zlib
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import numpy as np
import orjson

try:  # ISA-L's inflate is about 3x faster than zlib's; same API and results
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal has wheels for the usual platforms
    _zlib = zlib

from ..errors import TraceFormatError
from .safety import Inflation, check_events, clean_metadata, guarded
from ..trace import keys
from ..trace.builder import TraceBuilder
from . import kineto_memory
from ..trace.categories import Kind, kind_of
from ..trace.core import Trace
from ..trace.sorting import lexsort
from ..trace.stats import StatColumn, merge_columns

log = logging.getLogger("polyprof")

#: Text handed to orjson at a time (whole events); bounds the parsed objects alive at once.
CHUNK_BYTES = 256 << 10
_READ_BYTES = 1 << 20
_SLURP_LIMIT = 64 << 20  # no event boundary found within this much text: parse in one piece

# phase codes
_X, _I, _B, _E, _C, _S, _T, _F, _M, _OTHER = range(10)
_PHASES = {"X": _X, "i": _I, "I": _I, "B": _B, "E": _E, "C": _C, "s": _S, "t": _T, "f": _F, "M": _M}

_TE_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_DEVICE_LABEL = re.compile(r"^\s*([A-Za-z][A-Za-z_]*)\s*:?\s*(\d{1,9})\s*$")
_PLANE_NAME = re.compile(r"^/device:([^:/]+):(\d{1,9})$")
_DEVICE_KINDS = {"GPU", "MTIA", "XPU", "HPU", "NPU", "TPU", "MPS", "IPU", "DEVICE"}
#: Categories that only occur on a device timeline (used when a pid has no labels).
_DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "mtia_ccp_events",
                      "cuda_sync", "collective_comm"}
#: Kineto arg names -> polyprof stat keys; other args keep their own names.
_ARG_KEYS = {"correlation": keys.CORRELATION_ID, "External id": keys.EXTERNAL_ID}
#: Args typed at load, the ones analyses read (other args are typed on first use: the
#: Trace's StatTable); also under the stat keys they become (polyprof's Chrome writer).
_EAGER_NAMES = ("correlation", "External id", keys.CORRELATION_ID, keys.EXTERNAL_ID)
_EAGER_KEYS = frozenset(_ARG_KEYS.get(k, k) for k in _EAGER_NAMES)
#: Stats that are ids: hex/decimal strings (ROCm writes "stream": "0x0") become integers.
_INT_KEYS = {keys.CORRELATION_ID, keys.EXTERNAL_ID, keys.STREAM, keys.DEVICE}
#: Args are turned into typed stat columns every this many events (bounds the values kept).
_ARG_FLUSH_EVENTS = 8192
#: Beyond this many µs a float64 cannot hold three decimals exactly (ulp > 1 ns).
_EXACT_LIMIT_US = float(2 ** 43)
#: Times beyond +-2**62 ns are damage, not a clock (and sums of two must fit in int64).
_RANGE_US = float(2 ** 62) / 1000


# ----------------------------------------------------------------------------- input
class _Source:
    """Decompressed bytes of a file in blocks; gzip detected by magic, streamed."""

    def __init__(self, path: Path, progress: "_Progress"):
        self.path = path
        self.size = path.stat().st_size
        self.progress = progress

    def blocks(self) -> Iterator[bytes]:
        with open(self.path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                yield from self._gunzip(f)
                return
            while True:
                raw = f.read(_READ_BYTES)
                if not raw:
                    return
                self.progress.advance(len(raw))
                yield raw

    def _gunzip(self, f: Any) -> Iterator[bytes]:
        d = _zlib.decompressobj(wbits=31)
        inflation = Inflation(self.path, self.size)
        fed = False  # the current member has had input
        try:
            while True:
                raw = f.read(_READ_BYTES)
                if not raw:
                    break
                self.progress.advance(len(raw))
                while raw:
                    fed = True
                    out = d.decompress(raw, CHUNK_BYTES)
                    if out:
                        inflation.add(len(out))
                        yield out
                    if d.eof:  # concatenated gzip members
                        raw = d.unused_data
                        d = _zlib.decompressobj(wbits=31)
                        fed = False
                    else:
                        raw = d.unconsumed_tail
            out = d.flush()
            if out:
                yield out
        except (zlib.error, _zlib.error) as e:
            raise TraceFormatError(self.path, f"corrupt gzip data ({e})") from None
        if fed and not d.eof:
            raise TraceFormatError(self.path, "truncated gzip data: the compressed stream ends early")


class _Progress:
    """A rich progress bar on stderr (parse by compressed bytes, then build steps)."""

    def __init__(self, enabled: bool, path: Path, total: int):
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(f"decompress+parse {path.name}", total=total)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def stage(self, name: str, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=name, completed=0, total=total)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


# ----------------------------------------------------------------------------- splitting
_WS = b" \t\r\n"


def _skip_ws(buf: bytearray | bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _boundary_before(body: bytearray, end: int) -> tuple[int, int]:
    """Last ``}`` before ``end`` followed by ``,`` and ``{`` -> (end of element, start of next)."""
    p = body.rfind(b"}", 0, end)
    while p >= 0:
        q = _skip_ws(body, p + 1)
        if q < len(body) and body[q] == 0x2C:  # ','
            q = _skip_ws(body, q + 1)
            if q < len(body) and body[q] == 0x7B:  # '{'
                return p + 1, q
        p = body.rfind(b"}", 0, p)
    return -1, -1


class _Slurp(Exception):
    """The fast splitter gives up; parse the whole document in one piece."""


class _NotAnEvent(Exception):
    """An element of the events array is not a JSON object (index within its slice)."""

    def __init__(self, index: int, what: str):
        self.index, self.what = index, what


_NULL = msgspec.Raw(b"null")
_NO_ARGS = msgspec.Raw(b"{}")  # an event without "args" (this very object)


class _Event(msgspec.Struct, gc=False, omit_defaults=True):
    """The fields of a trace event the reader uses; other keys are skipped while parsing.

    ``ts`` and ``dur`` stay JSON text (exact ns from the digits, one NumPy parse per slice);
    so do ``args``, decoded in batches (:meth:`_Collector._flush_args`).
    """

    ph: Any = None
    name: Any = ""
    cat: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = _NULL
    dur: msgspec.Raw = _NULL
    args: msgspec.Raw = _NO_ARGS
    id: Any = None
    id2: Any = None
    bind_id: Any = None
    bp: Any = None


class _Document(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []


_ABSENT = -2 ** 63  # an eager arg an event does not have (JSON holding this very number: not the fast path)
_ABSENT_TEXT = str(_ABSENT).encode()


class _KinetoIds(msgspec.Struct, gc=False):
    """The args of an event typed at load (``_EAGER_NAMES``) when they are integers, as
    Kineto writes them; other args are skipped. Other values: the general path."""

    correlation: int = _ABSENT
    external: int = msgspec.field(default=_ABSENT, name="External id")


class _EagerInts(_KinetoIds, gc=False):
    correlation_id: int = _ABSENT
    external_id: int = _ABSENT


_EAGER_FIELDS = tuple(zip(_EAGER_NAMES, map(attrgetter, ("correlation", "external", "correlation_id",
                                                         "external_id"))))
_DECODE_EVENTS = msgspec.json.Decoder(list[_Event]).decode
_DECODE_DOC_EVENTS = msgspec.json.Decoder(_Document).decode
_DECODE_EAGER = (msgspec.json.Decoder(list[_KinetoIds]).decode, msgspec.json.Decoder(list[_EagerInts]).decode)
_DECODE_ANY = msgspec.json.Decoder().decode


def _not_an_event(text: bytes) -> _NotAnEvent:
    """The first element of a JSON array of (mostly) events that is not an object."""
    items = orjson.loads(text)
    bad = next(i for i, e in enumerate(items) if not isinstance(e, dict))
    return _NotAnEvent(bad, type(items[bad]).__name__)


def _decode_events(text: bytes) -> list[_Event]:
    """``[...]`` text -> events; orjson.JSONDecodeError (with its position) if not JSON."""
    try:
        return _DECODE_EVENTS(text)
    except msgspec.ValidationError:
        raise _not_an_event(text) from None
    except (msgspec.DecodeError, UnicodeDecodeError):
        orjson.loads(text)  # raises JSONDecodeError with a position and a clear message
        raise  # pragma: no cover - valid for orjson, not for msgspec


def _event_slices(path: Path, blocks: Iterator[bytes], top: dict[str, Any]) -> Iterator[list[_Event]]:
    """Yield slices of ``traceEvents`` as events; fill ``top`` with the rest of the document."""
    seen = 0
    try:
        for events in _slices(path, blocks, top):
            yield events
            seen += len(events)
    except _NotAnEvent as e:
        raise TraceFormatError(path, f"not a Chrome/Kineto trace: traceEvents[{seen + e.index}] "
                                     f"is a {e.what}, not an event object") from None


def _slices(path: Path, blocks: Iterator[bytes], top: dict[str, Any]) -> Iterator[list[_Event]]:
    buf = bytearray()
    prefix: bytes | None = None
    is_list = False
    start = 0
    it = iter(blocks)
    for blk in it:
        buf += blk
        j = _skip_ws(buf, 0)
        if j >= len(buf):
            continue
        if buf[j] == 0x5B:  # '[': the JSON Array Format
            prefix, is_list, start = b"", True, j + 1
            break
        if buf[j] != 0x7B:
            break
        m = _TE_RE.search(buf)
        if m:
            prefix, start = bytes(buf[:m.end() - 1]), m.end()
            break
        if len(buf) > _SLURP_LIMIT:
            break
    if prefix is None:  # no events array found: let the full parser judge the document
        yield from _slurp(path, bytes(buf), it, top)
        return
    body = buf[start:]
    del buf
    while True:
        while len(body) < CHUNK_BYTES:
            blk = next(it, None)
            if blk is None:
                break
            body += blk
        if len(body) < CHUNK_BYTES:
            break  # end of input: the rest is handled by _tail
        try:
            cut = _cut(body)
        except _Slurp:
            yield from _slurp(path, prefix + b"[" + bytes(body), it, top)
            return
        if cut is None:
            if len(body) > _SLURP_LIMIT:
                yield from _slurp(path, prefix + b"[" + bytes(body), it, top)
                return
            blk = next(it, None)
            if blk is None:
                break
            body += blk
            continue
        events, nxt = cut
        del body[:nxt]
        yield events
        del events
    # the tail: last events, the closing bracket, then the rest of the top-level object
    tail = _tail(body, is_list)
    if tail is None:
        yield from _slurp(path, prefix + b"[" + bytes(body), iter(()), top)
        return
    events, suffix = tail
    if events:
        yield events
    if is_list:
        top["__list__"] = True
        return
    try:
        rest = orjson.loads(prefix + b"[]" + suffix)
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"invalid JSON after the traceEvents array ({e})") from None
    if not isinstance(rest, dict):
        raise TraceFormatError(path, "invalid JSON around the traceEvents array")
    rest.pop("traceEvents", None)
    top.update(rest)


def _cut(body: bytearray) -> tuple[list[_Event], int] | None:
    """Parse the longest run of whole events at the start of ``body`` (None: no cut found)."""
    end = len(body)
    for _ in range(3):
        stop, nxt = _boundary_before(body, end)
        if stop < 0:
            return None
        text = b"".join((b"[", memoryview(body)[:stop], b"]"))
        try:
            events = _decode_events(text)
        except orjson.JSONDecodeError as e:
            if getattr(e, "pos", 0) < len(text) - 65536:
                raise _Slurp() from None  # broken well before the cut: not a cutting problem
            end = stop - 1
            continue
        return events, nxt
    return None


_ARRAY_END = re.compile(rb"}\s*\]")


def _tail(body: bytearray, is_list: bool) -> tuple[list[_Event], bytes] | None:
    """Split the last events of the array from what follows its closing bracket.

    Candidates are ``}`` ``]`` pairs from the left; the first that parses is the end (a
    pair inside an event or a string leaves brackets or quotes open, so it cannot parse).
    """
    j = _skip_ws(body, 0)
    if j < len(body) and body[j] == 0x5D:  # empty array
        return [], bytes(body[j + 1:])
    tries = 0
    for m in _ARRAY_END.finditer(body):
        r = m.end() - 1
        try:
            events = _DECODE_EVENTS(b"[" + bytes(body[:r]) + b"]")
        except (msgspec.DecodeError, UnicodeDecodeError):  # incl. ValidationError: the full parse names it
            tries += 1
            if tries > 64:
                return None
            continue
        suffix = bytes(body[r + 1:])
        if is_list and suffix.strip():
            return None
        return events, suffix
    if is_list:  # the Array Format may omit the closing bracket
        try:
            return _DECODE_EVENTS(b"[" + bytes(body).rstrip().rstrip(b",") + b"]"), b""
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
    return None


def _slurp(path: Path, head: bytes, it: Iterator[bytes], top: dict[str, Any]) -> Iterator[list[_Event]]:
    """Parse the whole document (odd layouts, broken files: orjson says what is wrong)."""
    data = head + b"".join(it)
    if not data.strip():
        raise TraceFormatError(path, "empty file")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(path, f"invalid JSON ({e})") from None
    if isinstance(doc, list):
        top["__list__"] = True
        events = doc
    elif isinstance(doc, dict):
        events = doc.pop("traceEvents", None)
        if not isinstance(events, list):
            what = "no 'traceEvents' list" if events is None else \
                f"'traceEvents' is a {type(events).__name__}, not a list"
            shown = ", ".join(list(doc)[:8])
            raise TraceFormatError(path, f"not a Chrome/Kineto trace: {what} (top-level keys: {shown or 'none'})")
        top.update(doc)
    else:
        raise TraceFormatError(path, f"not a Chrome/Kineto trace: the JSON is a {type(doc).__name__}, "
                                     "not an object with 'traceEvents' or a list of events")
    bad = next((i for i, e in enumerate(events) if not isinstance(e, dict)), None)
    if bad is not None:
        raise _NotAnEvent(bad, type(events[bad]).__name__)
    del doc, events
    # the events again, typed, from the text (their times keep every digit)
    parsed = _DECODE_EVENTS(data) if top.get("__list__") else _DECODE_DOC_EVENTS(data).traceEvents
    del data
    if parsed:
        yield parsed


# ----------------------------------------------------------------------------- numbers
def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """µs (float64) -> int64 ns, taking the shortest decimal (<= 3 places) the float stands for.

    A double cannot hold e.g. 1712195495519689.8 exactly; the shortest decimal within
    half an ulp is what the writer printed, so short decimals come back exact.
    """
    us = np.where(np.isfinite(us), us, 0.0)
    whole = np.floor(us)
    f3 = (us - whole) * 1000.0
    half = np.spacing(np.abs(us)) * 500.0 + 1e-9
    best = np.rint(f3)
    for step in (10.0, 100.0, 1000.0):
        cand = np.rint(f3 / step) * step
        best = np.where(np.abs(cand - f3) <= half, cand, best)
    return whole.astype(np.int64) * 1000 + best.astype(np.int64)


def _parse_numbers(text: bytes, dtype: type) -> np.ndarray | None:
    """Whitespace-separated numbers -> array (None if a token is not a number)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy warns when it stops before the end
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except ValueError:
            return None


def _ns_of(raws: list, path: Path, what: str) -> np.ndarray:
    """JSON texts of times in µs (``msgspec.Raw``) -> int64 ns, exact to the digit.

    Kineto prints three decimals (ns) or none: those texts are parsed as integers by
    NumPy (``12.047`` is read as the pair ``12 1047``: the leading 1 keeps the zeros
    and shows that there are exactly three digits). Other texts go through floats:
    :func:`_us_to_ns` takes the shortest decimal, and values too big for a double to
    hold their ns are read from their text. ``null`` or a missing value is 0; strings
    holding numbers are read as numbers, as before.
    """
    n = len(raws)
    if not n:
        return np.zeros(0, np.int64)
    joined = b" ".join(raws)
    dots = joined.count(b".")
    if (dots == n or dots == 0) and b"e" not in joined and b"E" not in joined and b"-" not in joined:
        if dots:
            pairs = _parse_numbers(joined.replace(b".", b" 1"), np.int64)
            if pairs is not None and len(pairs) == 2 * n:
                whole, frac = pairs[0::2], pairs[1::2]
                if frac.min() >= 1000 and frac.max() <= 1999 and whole.max() < 9 * 10 ** 15:
                    return whole * 1000 + (frac - 1000)
        else:
            ints = _parse_numbers(joined, np.int64)
            if ints is not None and len(ints) == n and ints.max() < 9 * 10 ** 15:  # ns fit in int64
                return ints * 1000
    try:
        values = orjson.loads(b"[" + b",".join(raws) + b"]")
    except orjson.JSONDecodeError as e:  # e.g. 1e400: a number that is not a finite double
        raise TraceFormatError(path, f"invalid JSON: an event {what} ({e})") from None
    us = _floats(values, path, what)
    far = np.flatnonzero(np.abs(us) > _RANGE_US)
    if len(far):
        raise TraceFormatError(path, f"an event {what} of {values[far[0]]!r} µs is beyond the range of "
                                     "int64 ns (+-2**62 ns, about 146 years)")
    out = _us_to_ns(us)
    big = np.abs(us) >= _EXACT_LIMIT_US  # a double's ulp here is more than 1 ns
    if big.any():
        rows = [i for i in np.flatnonzero(big).tolist() if type(values[i]) in (int, float)]
        if rows:
            out[rows] = _exact_ns([bytes(raws[i]) for i in rows], us[rows])
    return out


def _exact_ns(texts: list[bytes], approx_us: np.ndarray) -> np.ndarray:
    """JSON number texts in µs -> exact integer ns.

    Texts with up to three decimals are parsed as digits; others (exponents, more
    decimals) go through :func:`_us_to_ns`, rounded to the ns.
    """
    out = _us_to_ns(approx_us)
    arr = np.array(texts, dtype=bytes)
    plain = (np.char.find(arr, b"e") < 0) & (np.char.find(arr, b"E") < 0)
    dot = np.char.find(arr, b".")
    decimals = np.where(dot >= 0, np.char.str_len(arr) - dot - 1, 0)
    for k in range(4):
        m = plain & (decimals == k)
        if m.any():
            out[m] = np.char.replace(arr[m], b".", b"").astype(np.int64) * 10 ** (3 - k)
    return out


def _floats(values: list, path: Path, what: str) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        pass
    out = np.empty(len(values), np.float64)
    for i, v in enumerate(values):
        try:
            out[i] = float(v) if v is not None else np.nan
        except (TypeError, ValueError):
            raise TraceFormatError(path, f"event {what} {v!r} is not a number") from None
    return out


_PHASE_CODES: dict[Any, int] = dict(_PHASES)


def _codes(values: list, table: dict, make: Callable[[Any], int]) -> list[int]:
    """Ids for values through ``table`` (filled by ``make`` for new values)."""
    try:
        return [table[v] for v in values]
    except (KeyError, TypeError):
        pass
    out = []
    for v in values:
        try:
            code = table.get(v)
        except TypeError:  # a list or an object where a name or an id belongs: keyed by its JSON text
            v = msgspec.json.encode(v).decode()
            code = table.get(v)
        if code is None:
            code = table[v] = make(v)
        out.append(code)
    return out


# ----------------------------------------------------------------------------- stats
def _stat_values(key: str, vals: list) -> tuple[np.ndarray | None, np.ndarray]:
    """(mask of kept values or None for all, typed array) for one arg's values."""
    types = set(map(type, vals))
    mask = None
    if type(None) in types:
        mask = np.array([v is not None for v in vals])
        vals = [v for v in vals if v is not None]
        types.discard(type(None))
    if key in _INT_KEYS and str in types:
        try:
            vals = [int(v, 0) if type(v) is str else v for v in vals]
            types = set(map(type, vals))
        except ValueError:
            pass
    if types <= {int, bool}:
        try:
            return mask, np.array(vals, dtype=np.int64)
        except OverflowError:
            try:
                return mask, np.array(vals, dtype=np.uint64)
            except OverflowError:
                pass
    elif types <= {int, float, bool}:
        try:
            return mask, np.array(vals, dtype=np.float64)
        except OverflowError:  # an int beyond any double: text, like other mixed values
            pass
    out = np.empty(len(vals), dtype=object)
    if types == {str}:
        out[:] = vals
    else:
        out[:] = [v if type(v) is str else (_json_text(v) if type(v) in (list, dict) else
                                            ("true" if v is True else "false" if v is False else str(v)))
                  for v in vals]
    return mask, out


def _json_text(v: list | dict) -> str:
    try:
        return orjson.dumps(v).decode()
    except orjson.JSONEncodeError:  # ints beyond 64 bits, nesting beyond 254: msgspec writes them
        return msgspec.json.encode(v).decode()


def _group_args(args: list, base: int) -> dict[str, tuple[list[int], list[Any]]]:
    """(rows, values) per arg name, in order of first appearance; a value that is not an
    object counts as the arg ``args``; empty ones (null, {}, 0, "") are no args."""
    groups: dict[str, tuple[list[int], list[Any]]] = {}
    for r, a in enumerate(args, base):
        if not a:
            continue
        if type(a) is not dict:
            a = {"args": a}
        for k, v in a.items():
            try:
                g = groups[k]
            except KeyError:
                g = groups[k] = ([], [])
            g[0].append(r)
            g[1].append(v)
    return groups


def _typed_stat(name: str, rows: np.ndarray, vals: list) -> tuple[str, np.ndarray, np.ndarray]:
    """(stat key, rows, typed values) of one arg; rows without a value (null) dropped."""
    key = _ARG_KEYS.get(name, name)
    mask, arr = _stat_values(key, vals)
    if mask is not None:
        rows = rows[mask]
    if len(rows) > 1 and np.any(rows[1:] < rows[:-1]):  # from several arg-name groups
        order = np.argsort(rows, kind="stable")
        rows, arr = rows[order], arr[order]
    return key, rows, arr


#: Digits -> "0", exponent marks -> "\x01" (and "+" dropped): text in which a number that
#: msgspec may find out of range (a double beyond 1.8e308, an int of more than 4300
#: digits) shows as "\x01000" or 200 zeros; rare, and such text is decoded to know.
_NUMBER_SHAPES = bytes.maketrans(b"0123456789eE", b"0000000000\x01\x01")


def _big_numbers(text: bytes) -> bool:
    shapes = text.translate(_NUMBER_SHAPES, b"+")
    return shapes.rfind(b"\x01000") >= 0 or b"0" * 200 in shapes  # rfind: skips on the rare first byte


def _decode_deferred_args(batches: list[tuple[int, bytes]], late: dict[str, list[tuple[np.ndarray, np.ndarray]]]
                          ) -> dict[str, StatColumn]:
    """The stat columns of every arg not typed at load, as the reader types them (one
    part per batch and arg name, then the parts of E events; see TraceBuilder.build).

    The text was checked at load, so this cannot fail: its nesting passed msgspec's
    recursion limit then; if a deeper call stack now makes it fail, it runs again on a
    thread of its own (a fresh stack).
    """
    try:
        return _deferred_columns(batches, late)
    except RecursionError:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="polyprof-args") as pool:
            return pool.submit(_deferred_columns, batches, late).result()


def _args_may_hold(batches: list[tuple[int, bytes]], late: dict[str, Any], key: str) -> bool:
    """Whether any deferred arg may be called ``key``: its JSON name, quoted, occurs in
    the text. Conservative: a batch with a \\u escape, or a name a writer could escape
    otherwise, counts as a yes. Looking up a stat the args do not have (e.g. XProf's
    ``device_duration_ps`` on a Kineto trace) then decodes nothing."""
    if key in late:
        return True
    names = [n for n, k in _ARG_KEYS.items() if k == key] or [key]
    if any(c in n for n in names for c in '"\\/') or any(ord(c) < 0x20 or ord(c) > 0x7E for n in names for c in n):
        return True
    needles = [b'"' + n.encode() + b'"' for n in names]
    return any(b"\\u" in text or any(nd in text for nd in needles) for _, text in batches)


_DECODE_RAWS = msgspec.json.Decoder(list[msgspec.Raw]).decode


def _decode_arg_rows(batches: list[tuple[int, bytes]], late: dict[str, list[tuple[np.ndarray, np.ndarray]]],
                     keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
    """Some deferred args for some rows only: each batch holding one of the rows is split
    into its events' JSON texts (no values built) and just those are decoded. Values are
    typed from these rows as the full decode types a column."""
    names = {k: [n for n, kk in _ARG_KEYS.items() if kk == k] or [k] for k in keys}
    rows = np.unique(np.asarray(rows, np.int64))
    starts = [b for b, _ in batches] + [np.iinfo(np.int64).max]
    got: dict[str, tuple[list[int], list[Any]]] = {k: ([], []) for k in keys}
    for i, (base, text) in enumerate(batches):
        sel = rows[(rows >= base) & (rows < starts[i + 1])]
        if not len(sel):
            continue
        raws = _DECODE_RAWS(text)
        for r in sel.tolist():
            a = _DECODE_ANY(raws[r - base]) if r - base < len(raws) else None
            if not a:
                continue
            if type(a) is not dict:
                a = {"args": a}
            for k in keys:
                for n in names[k]:
                    if a.get(n) is not None:
                        got[k][0].append(r)
                        got[k][1].append(a[n])
                        break
    out = {}
    for k in keys:
        r_list, vals = got[k]
        for lr, lv in late.get(k, []):
            m = np.isin(lr, rows)
            r_list.extend(lr[m].tolist())
            vals.extend(list(lv[m]))
        if r_list:
            _, r_arr, arr = _typed_stat(names[k][0], np.asarray(r_list, np.int64), vals)
            if len(r_arr):
                out[k] = StatColumn(r_arr, arr)
    return out


def _deferred_columns(batches: list[tuple[int, bytes]], late: dict[str, list[tuple[np.ndarray, np.ndarray]]]
                      ) -> dict[str, StatColumn]:
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for base, text in batches:
        groups = _group_args(_DECODE_ANY(text), base)
        for name in _EAGER_NAMES:
            groups.pop(name, None)
        for name in kineto_memory.MEMORY_KEYS:
            groups.pop(name, None)
        for name, (rows, vals) in groups.items():
            key, r, arr = _typed_stat(name, np.array(rows, np.int64), vals)
            if len(r):
                parts.setdefault(key, []).append((r, arr))
    for key, p in late.items():
        parts.setdefault(key, []).extend(p)
    return {key: merge_columns(p) for key, p in parts.items()}


# ----------------------------------------------------------------------------- collector
class _Collector:
    """Turns slices of parsed events into columns; builds the Trace at the end."""

    def __init__(self, path: Path):
        self.path = path
        self.b = TraceBuilder()
        self.strings: dict[Any, int] = {}
        self.pids: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        self.n = 0  # event rows so far
        self.seen = 0  # trace events so far (all phases)
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("pid", "tid", "name", "cat", "ts", "dur")}
        self.b_rows: list[np.ndarray] = []
        self.ends: list[tuple] = []  # E events: (pid, tid, ts, pos, args)
        self.flow_cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("cat", "id", "ph", "pid", "tid", "ts", "enclosing")}
        self.flow_names: dict[bytes, int] = {}  # flow ids that are not integers
        self.counters: list[tuple] = []  # (pid code, name, ts_ns, value)
        self.arg_raws: list[msgspec.Raw] = []  # args (JSON text) of the last events, from row arg_base
        self.arg_base = 0
        self.arg_batches: list[tuple[int, bytes]] = []  # (first row, "[args, ...]"): typed on first use
        self.late_args: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # of E events, idem
        self.process: dict[Any, dict[str, Any]] = {}
        self.threads: dict[tuple, dict[str, Any]] = {}
        self.other_meta: list[dict] = []
        self.skipped: dict[str, int] = {}

    def _sid(self, v: Any) -> int:
        return self.b.intern(v if isinstance(v, str) else ("" if v is None else str(v)))

    def _new_code(self, table: dict) -> Callable[[Any], int]:
        return lambda v: len(table)

    # ---------------------------------------------------------------- one slice
    def add(self, evs: list[_Event]) -> None:
        n = len(evs)
        ts_ns = _ns_of([e.ts for e in evs], self.path, "ts")
        try:
            codes = np.array([_PHASE_CODES[e.ph] for e in evs], dtype=np.int8)
        except (KeyError, TypeError):  # other or unhashable "ph" values
            codes = np.array([_PHASES.get(p, _OTHER) if type(p) is str else _OTHER for p in (e.ph for e in evs)],
                             dtype=np.int8)

        ev_idx = np.flatnonzero(codes <= _B)
        if len(ev_idx):
            self._events(evs if len(ev_idx) == n else [evs[i] for i in ev_idx.tolist()],
                         codes[ev_idx], ts_ns[ev_idx])
        rare = np.flatnonzero(codes > _B)
        if len(rare):
            self._rare(evs, rare, codes, ts_ns)
        self.seen += n

    def _id_codes(self, values: list, table: dict) -> np.ndarray:
        """Codes of pid/tid values (ints or strings)."""
        return np.array(_codes(values, table, self._new_code(table)), np.int64)

    def _events(self, sel: list[_Event], ev_codes: np.ndarray, ts_ns: np.ndarray) -> None:
        c = self.cols
        # one comprehension per field: attribute reads of the parsed structs
        # known values (nearly all after the first slice) are looked up in the same pass
        pids, tids, strings = self.pids, self.tids, self.strings
        try:
            pid = np.array([pids[e.pid] for e in sel], np.int64)
        except (KeyError, TypeError):
            pid = self._id_codes([e.pid for e in sel], pids)
        try:
            tid = np.array([tids[e.tid] for e in sel], np.int64)
        except (KeyError, TypeError):
            tid = self._id_codes([e.tid for e in sel], tids)
        try:
            name = np.array([strings[e.name] for e in sel], np.int32)
        except (KeyError, TypeError):
            name = np.array(_codes([e.name for e in sel], strings, self._sid), np.int32)
        try:
            cat = np.array([strings[e.cat] for e in sel], np.int32)
        except (KeyError, TypeError):
            cat = np.array(_codes([e.cat for e in sel], strings, self._sid), np.int32)
        c["pid"].append(pid)
        c["tid"].append(tid)
        c["name"].append(name)
        c["cat"].append(cat)
        c["ts"].append(ts_ns)
        x = ev_codes == _X
        if x.all():
            dur = _ns_of([e.dur for e in sel], self.path, "dur")
        else:  # only X events have a duration (B: from its E)
            dur = np.zeros(len(sel), np.int64)
            rows = np.flatnonzero(x)
            dur[rows] = _ns_of([sel[i].dur for i in rows.tolist()], self.path, "dur")
        c["dur"].append(np.maximum(dur, 0))
        base = self.n
        if np.any(ev_codes == _B):
            self.b_rows.append(np.flatnonzero(ev_codes == _B) + base)
        self.arg_raws += [e.args for e in sel]
        self.n += len(sel)
        if len(self.arg_raws) >= _ARG_FLUSH_EVENTS:
            self._flush_args()

    def _flush_args(self) -> None:
        """The buffered args as one JSON text: checked, the eager args typed, the rest kept.

        Msgspec skipped over the args unchecked for UTF-8 and number range, which decoding
        them checks: so that their decode on first use cannot fail, such text fails here.
        """
        raws, base = self.arg_raws, self.arg_base
        self.arg_raws, self.arg_base = [], self.n
        if not raws:
            return
        raws[0] = b"[" + raws[0]
        raws[-1] = bytes(raws[-1]) + b"]"
        text = b",".join(raws)
        del raws
        if not text.isascii():
            try:
                text.decode()
            except UnicodeDecodeError:
                self._decode_args(text)  # raises, naming the file
        if _big_numbers(text):
            self._decode_args(text)
        self._eager_args(text, base)
        if kineto_memory.has_memory(text):
            for key, (rows, vals) in kineto_memory.batch_stats(text, base, _DECODE_ANY).items():
                self.b.add_stat(key, rows, vals)
        self.arg_batches.append((base, text))

    def _eager_args(self, text: bytes, base: int) -> None:
        """Type the args in ``_EAGER_NAMES`` of one batch (``[args, ...]`` from row ``base``).

        Fast path: they are int64 (or absent) and no event has two names of one stat key;
        the columns are then what the general path (below, the lazy path's) makes of them.
        """
        # the stat-key spellings (files polyprof wrote) need a "_" (or an escape): else skipped
        all_names = b"_" in text or b"\\" in text
        fields = _EAGER_FIELDS if all_names else _EAGER_FIELDS[:2]
        try:
            if _ABSENT_TEXT in text:
                raise ValueError
            items = _DECODE_EAGER[all_names](text)
            cols = [(name, np.fromiter(map(get, items), np.int64, len(items))) for name, get in fields]
        except (msgspec.ValidationError, OverflowError, ValueError):  # other values (or not an object)
            cols = []
        found = [(_ARG_KEYS.get(name, name), col, col != _ABSENT) for name, col in cols]
        found = [f for f in found if f[2].any()]
        if cols and len({key for key, _, _ in found}) == len(found):
            for key, col, has in found:
                self.b.add_stat(key, np.flatnonzero(has) + base, col[has])
            return
        for name, (rows, vals) in _group_args(_DECODE_ANY(text), base).items():
            if name in _EAGER_NAMES:
                self._add_stat(name, np.array(rows, np.int64), vals)

    def _add_stat(self, name: str, rows: np.ndarray, vals: list) -> None:
        key, rows, arr = _typed_stat(name, rows, vals)
        if not len(rows):
            return
        if key in _EAGER_KEYS or key in kineto_memory.MEMORY_KEYS:
            self.b.add_stat(key, rows, arr)
        else:
            self.late_args.setdefault(key, []).append((rows, arr))

    def _rare(self, evs: list[_Event], idx: np.ndarray, codes: np.ndarray, ts_ns: np.ndarray) -> None:
        """Flows (columns), then counters, metadata and E events (few; one by one)."""
        rc = codes[idx]
        with_args = [i for i in idx.tolist() if evs[i].args is not _NO_ARGS]
        args_of = dict(zip(with_args, self._decode_args(b"[" + b",".join([evs[i].args for i in with_args]) + b"]")))
        fl = (rc >= _S) & (rc <= _F)
        if fl.any():
            self._flow_slice([evs[i] for i in idx[fl].tolist()], rc[fl], ts_ns[idx[fl]])
        for i, code in zip(idx[~fl].tolist(), rc[~fl].tolist()):
            e = evs[i]
            if code == _M:
                self._meta(e, args_of.get(i))
            elif code == _E:
                pid = _codes([e.pid], self.pids, self._new_code(self.pids))[0]
                tid = _codes([e.tid], self.tids, self._new_code(self.tids))[0]
                self.ends.append((pid, tid, int(ts_ns[i]), self.seen + i, args_of.get(i)))
            elif code == _C:
                args = args_of.get(i)
                if not isinstance(args, dict):
                    continue
                name = e.name
                name = name if isinstance(name, str) else str(name)
                if e.id is not None:
                    name = f"{name} {e.id}"
                pid = _codes([e.pid], self.pids, self._new_code(self.pids))[0]
                single = len(args) == 1
                for k, v in args.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        self.counters.append((pid, name if single else f"{name}.{k}", int(ts_ns[i]), float(v)))
            else:
                p = e.ph
                p = p if isinstance(p, str) else repr(p)
                self.skipped[p] = self.skipped.get(p, 0) + 1

    def _flow_slice(self, sel: list[_Event], ph: np.ndarray, ts_ns: np.ndarray) -> None:
        ids = [e.id for e in sel]
        cats = [e.cat for e in sel]
        pid = [e.pid for e in sel]
        tid = [e.tid for e in sel]
        if None in ids:
            for j, e in enumerate(sel):
                if ids[j] is None:
                    id2 = e.id2
                    ids[j] = next(iter(id2.values()), None) if isinstance(id2, dict) and id2 else e.bind_id
        fid = None
        if set(map(type, ids)) == {int}:
            try:
                fid = np.array(ids, np.int64)
            except OverflowError:
                fid = None
        if fid is None or np.any(fid < 0):  # other ids: numbered by their text, below zero
            names = self.flow_names
            fid = np.array([i if type(i) is int and 0 <= i < 2 ** 63 else
                            -2 - names.setdefault(msgspec.json.encode(i), len(names)) for i in ids], np.int64)
        fc = self.flow_cols
        fc["cat"].append(np.array(_codes(cats, self.strings, self._sid), np.int64))
        fc["id"].append(fid)
        fc["ph"].append(ph)
        fc["pid"].append(self._id_codes(pid, self.pids))
        fc["tid"].append(self._id_codes(tid, self.tids))
        fc["ts"].append(ts_ns)
        enclosing = ph != _F
        f_rows = np.flatnonzero(~enclosing)
        enclosing[f_rows] = [sel[i].bp == "e" for i in f_rows.tolist()]
        fc["enclosing"].append(enclosing)

    def _decode_args(self, text: bytes) -> Any:
        """JSON text of args -> Python values; TraceFormatError (naming the file) if bad."""
        try:
            return _DECODE_ANY(text)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:  # incl. ValidationError: out of range
            raise TraceFormatError(self.path, f"invalid JSON in event args ({e})") from None

    def _meta(self, e: _Event, args: Any) -> None:
        name, args_ = e.name, args or {}
        if not isinstance(args_, dict):
            return
        pid = e.pid
        try:
            if name in ("process_name", "process_labels", "process_sort_index"):
                field = {"process_name": "name", "process_labels": "labels",
                         "process_sort_index": "sort_index"}[name]
                self.process.setdefault(pid, {})[name] = args_.get(field)
                return
            if name in ("thread_name", "thread_sort_index"):
                field = "name" if name == "thread_name" else "sort_index"
                self.threads.setdefault((pid, e.tid), {})[name] = args_.get(field)
                return
        except TypeError:  # unhashable pid/tid
            pass
        if len(self.other_meta) < 1000:  # as written, but args as read (null: none)
            try:
                rec = orjson.loads(msgspec.json.encode(e))
            except orjson.JSONDecodeError:  # a number beyond a double: not kept
                return
            rec.pop("args", None)
            if args is not None:
                rec["args"] = args
            self.other_meta.append(rec)

    # ---------------------------------------------------------------- the Trace
    def finish(self, top: dict[str, Any], progress: _Progress) -> Trace:
        b = self.b
        self._flush_args()
        progress.stage("build", 5)
        cat = lambda k: np.concatenate(self.cols[k]) if self.cols[k] else np.zeros(0, np.int64)
        pid_c, tid_c, name_c, cat_c = cat("pid"), cat("tid"), cat("name"), cat("cat")
        ts, dur = cat("ts"), cat("dur")
        base = top.get("baseTimeNanoseconds")
        base = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) and abs(base) < 2**62 \
            else 0
        ts = ts + base
        n = len(ts)
        self.cols = {}

        pid_vals = list(self.pids)
        tid_vals = list(self.tids)
        progress.advance(1)
        planes = self._planes(top, pid_vals, pid_c, cat_c)
        # tracks: one per (pid, tid) pair that has events or flow endpoints
        ntid = max(len(tid_vals), 1)
        pair = pid_c * ntid + tid_c
        uniq, inverse = _distinct(pair, inverse=True)
        track_of_pair: dict[int, int] = {}
        pseudo = 0
        for u in uniq.tolist():
            p, t = divmod(u, ntid)
            plane, kind = planes[p]
            pv, tv = pid_vals[p], tid_vals[t]
            info = self._thread_info(pv, tv)
            tname = info.get("thread_name")
            if _is_id(tv) and not isinstance(pv, str):
                tid = tv
                if not tname:
                    tname = f"stream {tv}" if kind == "device" else f"thread {tv}"
            else:  # Kineto's pseudo processes ("Spans", "Traces", "") and string tids
                pseudo += 1
                tid = -pseudo
                tname = tname or "/".join(str(x) for x in (pv, tv) if x not in ("", None)) or "global"
            sort = info.get("thread_sort_index")
            track_of_pair[u] = b.track(plane, str(tname).strip(), "stream" if kind == "device" else "thread",
                                       tid, sort if isinstance(sort, int) else None)
        track = (np.array([track_of_pair[u] for u in uniq.tolist()], np.int32)[inverse] if n
                 else np.zeros(0, np.int32))
        progress.advance(1)

        # B/E pairs
        if self.b_rows or self.ends:
            self._match_ends(np.concatenate(self.b_rows) if self.b_rows else np.zeros(0, np.int64),
                             pair, ts, dur, ntid, base)
        b.events(track, name_c, ts, dur, cat_c)
        progress.advance(1)

        self._flows(track, ts, dur, cat_c, track_of_pair, ntid, base)
        progress.advance(1)
        if self.counters:
            cp = np.array([c[0] for c in self.counters])
            names = [c[1] for c in self.counters]
            cts = np.array([c[2] for c in self.counters], np.int64) + base
            vals = np.array([c[3] for c in self.counters], np.float64)
            for name in dict.fromkeys(names):
                m = np.array([x == name for x in names])
                for p in _distinct(cp[m]).tolist():
                    mm = m & (cp == p)
                    b.counter(planes[p][0], name, cts[mm], vals[mm])
        b.metadata.update(self._metadata(top, base, ts))
        progress.advance(1)
        trace = b.build()
        if self.arg_batches or self.late_args:
            trace.stats.defer(partial(_decode_deferred_args, self.arg_batches, self.late_args),
                              _EAGER_KEYS | kineto_memory.MEMORY_KEYS,
                              partial(_args_may_hold, self.arg_batches, self.late_args),
                              partial(_decode_arg_rows, self.arg_batches, self.late_args))
        return trace

    def _thread_info(self, pid: Any, tid: Any) -> dict[str, Any]:
        try:
            return self.threads.get((pid, tid), {})
        except TypeError:
            return {}

    def _planes(self, top: dict[str, Any], pid_vals: list, pid_c: np.ndarray, cat_c: np.ndarray
                ) -> list[tuple[int, str]]:
        """(plane id, "host"|"device") for every pid code."""
        b = self.b
        devprops = {}
        props = top.get("deviceProperties")
        for d in props if isinstance(props, list) else []:
            if isinstance(d, dict) and isinstance(d.get("id"), int):
                devprops[d["id"]] = d
        counts = np.bincount(pid_c, minlength=len(pid_vals)) if len(pid_c) else np.zeros(len(pid_vals), int)
        # which pids show device-only categories
        dev_cat_ids = {b.intern(c) for c in _DEVICE_CATEGORIES}
        is_dev_cat = np.isin(cat_c, np.array(sorted(dev_cat_ids), np.int32))
        dev_pids = set(_distinct(pid_c[is_dev_cat]).tolist())
        vendor_hint = self._vendor_hint(top)

        kinds: list[tuple[str, str, int]] = []  # (kind, device kind, index)
        for code, pv in enumerate(pid_vals):
            info = self.process.get(pv, {}) if _hashable(pv) else {}
            labels, pname = info.get("process_labels"), info.get("process_name")
            dev = None
            m = _PLANE_NAME.match(pname) if isinstance(pname, str) else None
            if m:  # a Chrome trace polyprof wrote: processes are named after planes
                kinds.append(("device", m.group(1), int(m.group(2))))
                continue
            for text, strict in ((labels, False), (pname, True)):
                if isinstance(text, str):
                    m = _DEVICE_LABEL.match(text)
                    if m and m.group(1).upper() != "CPU" and (not strict or m.group(1).upper() in _DEVICE_KINDS):
                        dev = (m.group(1).upper(), int(m.group(2)))
                        break
                    if text.strip().upper() == "CPU" and not strict:
                        break
            if dev is None and code in dev_pids and _is_id(pv) and pv >= 0:
                dev = ("GPU", pv)
            kinds.append(("device", dev[0], dev[1]) if dev else ("host", "", 0))

        host_codes = [c for c, k in enumerate(kinds) if k[0] == "host" and _is_id(pid_vals[c])]
        main = max(host_codes, key=lambda c: (counts[c] if c < len(counts) else 0, -c)) if host_codes else None
        used = set(_distinct(pid_c).tolist()) | {c[0] for c in self.counters}
        out: list[tuple[int, str]] = []
        for code, pv in enumerate(pid_vals):
            kind, dkind, index = kinds[code]
            if code not in used:  # only flow endpoints or E events: no plane of its own
                out.append((-1, kind))
                continue
            info = self.process.get(pv, {}) if _hashable(pv) else {}
            props = {k: v for k, v in info.items() if v is not None}
            if kind == "device":
                dp = devprops.get(index, {})
                props = {**dp, **props}
                vendor = _vendor(dkind, str(dp.get("name", "")), vendor_hint)
                pid = pv if _is_id(pv) else index
                out.append((b.plane(keys.device_plane(dkind, index), "device", vendor, index, pid, props), "device"))
            elif code == main or not _is_id(pv):
                # the main process, and Kineto's pseudo processes ("Spans", "Traces") on it
                pid = pid_vals[main] if main is not None else 0
                mprops = {k: v for k, v in (self.process.get(pid_vals[main], {}) if main is not None else {}).items()
                          if v is not None}
                out.append((b.plane(keys.HOST_PLANE, "host", "", 0, pid, mprops), "host"))
            else:
                out.append((b.plane(f"{keys.HOST_PLANE}:{pv}", "host", "", 0, pv, props), "host"))
        return out

    def _vendor_hint(self, top: dict[str, Any]) -> str:
        if any(k in top for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version")):
            return "NVIDIA"
        if any(k in top for k in ("roctracer_version", "hip_runtime_version", "rocm_version")):
            return "AMD"
        names = [s for s in self.b.strings[:50000]]
        if any(s.startswith("hip") for s in names):
            return "AMD"
        if any(s.startswith(("cuda", "cuLaunch", "cuMem")) for s in names):
            return "NVIDIA"
        if any(s.startswith(("ze", "sycl", "urEnqueue")) for s in names):
            return "Intel"
        return ""

    def _match_ends(self, b_rows: np.ndarray, pair: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                    ntid: int, base: int) -> None:
        """Close each B with the next E on its thread (a stack per thread, in time order)."""
        items = [(int(pair[r]), int(ts[r]), 0, int(r), None) for r in b_rows.tolist()]
        items += [(p * ntid + t, t_ns + base, 1, pos, args) for p, t, t_ns, pos, args in self.ends]
        items.sort(key=lambda x: (x[0], x[1]))
        stacks: dict[int, list[int]] = {}
        unmatched_e = 0
        extra: dict[str, tuple[list, list]] = {}
        for key, t, is_end, ref, args in items:
            st = stacks.setdefault(key, [])
            if not is_end:
                st.append(ref)
            elif st:
                row = st.pop()
                dur[row] = max(t - int(ts[row]), 0)
                if isinstance(args, dict):
                    for k, v in args.items():
                        col = extra.setdefault(k, ([], []))
                        col[0].append(row)
                        col[1].append(v)
            else:
                unmatched_e += 1
        open_rows = [r for st in stacks.values() for r in st]
        if open_rows:
            last = int((ts + dur).max())
            rows = np.array(open_rows, np.int64)
            dur[rows] = np.maximum(last - ts[rows], 0)
            self.b.add_stat(keys.INCOMPLETE, rows, np.ones(len(rows), np.int64))
        for k, (rows, vals) in extra.items():
            self._add_stat(k, np.array(rows, np.int64), vals)
        if unmatched_e:
            self.skipped["E (no open B)"] = unmatched_e

    def _flows(self, track: np.ndarray, ts: np.ndarray, dur: np.ndarray, cat_c: np.ndarray,
               track_of_pair: dict[int, int], ntid: int, base: int) -> None:
        fc = self.flow_cols
        if not fc["id"] or not len(ts):
            self.unbound_flows = sum(len(x) for x in fc["id"])
            return
        fcat, fid = np.concatenate(fc["cat"]), np.concatenate(fc["id"])
        # number the distinct (cat, id) pairs in sorted order; first: a pair's first endpoint
        by_pair = lexsort((fid, fcat))  # stable
        new = np.ones(len(by_pair), bool)
        new[1:] = (fcat[by_pair][1:] != fcat[by_pair][:-1]) | (fid[by_pair][1:] != fid[by_pair][:-1])
        key = np.empty(len(by_pair), np.int64)
        key[by_pair] = np.cumsum(new) - 1
        first = by_pair[new]
        ph = np.concatenate(fc["ph"])
        fts = np.concatenate(fc["ts"]) + base
        fpair = np.concatenate(fc["pid"]) * ntid + np.concatenate(fc["tid"])
        pairs = np.fromiter(track_of_pair, np.int64, len(track_of_pair))  # ascending (_distinct)
        tracks = np.fromiter(track_of_pair.values(), np.int64, len(track_of_pair))
        at = np.minimum(np.searchsorted(pairs, fpair), len(pairs) - 1)
        ftrack = np.where(pairs[at] == fpair, tracks[at], -1)
        enclosing = np.concatenate(fc["enclosing"])
        rows = _bind(track, ts, dur, self._annotation_mask(cat_c), ftrack, fts, enclosing)
        # chain endpoints of one (cat, id): s -> t -> ... -> f in time order
        pos = np.arange(len(key))
        order = lexsort((pos, ph, fts, key))
        k_s, ph_s, row_s = key[order], ph[order], rows[order]
        same = k_s[1:] == k_s[:-1]
        link = same & (ph_s[:-1] != _F) & (ph_s[1:] != _S)
        src, dst = row_s[:-1][link], row_s[1:][link]
        # a lone s/f pair whose f is earlier (skewed clocks) still belongs together
        sizes = np.bincount(key)
        swap = same & (ph_s[:-1] == _F) & (ph_s[1:] == _S) & (sizes[k_s[:-1]] == 2)
        src = np.concatenate([src, row_s[1:][swap]])
        dst = np.concatenate([dst, row_s[:-1][swap]])
        fkey = np.concatenate([k_s[1:][link], k_s[1:][swap]])
        ok = (src >= 0) & (dst >= 0) & (src != dst)
        self.unbound_flows = int(np.count_nonzero(~ok))
        src, dst, fkey = src[ok], dst[ok], fkey[ok]
        ids = fid[first][fkey]
        ids = np.where(ids >= 0, ids, fkey + 1)
        cats = fcat[first][fkey]
        for c in _distinct(cats).tolist():
            m = cats == c
            self.b.flows(src[m], dst[m], ids[m], self.b.strings[c])

    def _annotation_mask(self, cat_c: np.ndarray) -> np.ndarray:
        ann = [i for i, s in enumerate(self.b.strings)
               if kind_of(s) in (Kind.ANNOTATION, Kind.DEVICE_ANNOTATION, Kind.STEP)]
        return np.isin(cat_c, np.array(ann, np.int32)) if ann else np.zeros(len(cat_c), bool)

    def _metadata(self, top: dict[str, Any], base: int, ts: np.ndarray) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        for k, v in top.items():
            if k not in ("traceEvents", "__list__"):
                meta[k] = v
        epoch_like = bool(base) or (len(ts) and int(np.median(ts)) > 10 ** 17)
        meta["clock"] = "wall" if epoch_like or not len(ts) else "unknown"
        meta["source"] = {"format": "kineto" if not top.get("__list__") else "chrome-json",
                          "path": str(self.path)}
        di = top.get("distributedInfo")
        if isinstance(di, dict):
            for k in ("rank", "world_size", "backend"):
                if k in di:
                    meta[k] = di[k]
        warnings = []
        if self.skipped:
            warnings.append("kineto: events not imported: " +
                            ", ".join(f"{n} x ph={p}" for p, n in sorted(self.skipped.items())))
        if getattr(self, "unbound_flows", 0):
            warnings.append(f"kineto: {self.unbound_flows} flow endpoints matched no event")
        if warnings:
            meta["warnings"] = warnings
            for w in warnings:
                log.info("%s: %s", self.path, w)
        if self.other_meta:
            meta["chrome_metadata_events"] = self.other_meta
        return meta


def _distinct(codes: np.ndarray, inverse: bool = False) -> Any:
    """Sorted distinct values of small non-negative integer codes (and each one's index).

    A counting pass instead of np.unique, which sorts, and whose first call imports
    numpy.ma (12 ms) just to check for masked arrays."""
    codes = np.asarray(codes, np.int64)
    if len(codes) and codes.max() > 4 * len(codes) + 4096:  # sparse: counting would waste memory
        return np.unique(codes, return_inverse=inverse)
    present = np.bincount(codes) > 0 if len(codes) else np.zeros(0, bool)
    uniq = np.flatnonzero(present)
    if not inverse:
        return uniq
    index = np.cumsum(present) - 1
    return uniq, index[codes]


def _is_id(v: Any) -> bool:
    """An integer pid/tid that fits the trace's int64 ids (bool is not one)."""
    return type(v) is int and -2**63 <= v < 2**63


def _hashable(v: Any) -> bool:
    return isinstance(v, (int, str, float, type(None)))


def _vendor(dkind: str, name: str, hint: str) -> str:
    low = name.lower()
    if dkind == "MTIA":
        return "Meta"
    if dkind == "XPU" or "intel" in low:
        return "Intel"
    if any(s in low for s in ("nvidia", "tesla", "geforce", "quadro", "rtx")):
        return "NVIDIA"
    if any(s in low for s in ("amd", "radeon", "instinct")):
        return "AMD"
    return hint


def _bind(track: np.ndarray, start: np.ndarray, dur: np.ndarray, annotation: np.ndarray,
          qtrack: np.ndarray, qts: np.ndarray, enclosing: np.ndarray) -> np.ndarray:
    """Event row each flow endpoint binds to (-1 if none).

    Enclosing binding (``s``, ``t``, ``f`` with ``bp: e``): the innermost slice on the
    endpoint's thread that contains its time; at equal start and duration a real op
    wins over an annotation. Otherwise (``f`` without ``bp``): the next slice to start.
    """
    out = np.full(len(qts), -1, np.int64)
    order = lexsort((~annotation, -dur, start, track))
    t_sorted = track[order]
    end = start + dur
    for t in _distinct(qtrack[qtrack >= 0]).tolist():
        lo, hi = np.searchsorted(t_sorted, t, "left"), np.searchsorted(t_sorted, t, "right")
        if lo == hi:
            continue
        seg = order[lo:hi]
        s_seg = start[seg]
        q = np.flatnonzero(qtrack == t)
        enc = enclosing[q]
        # enclosing: last slice starting at or before ts, walked back until one contains ts
        qe = q[enc]
        pos = np.searchsorted(s_seg, qts[qe], "right") - 1
        cand = np.where(pos >= 0, seg[np.maximum(pos, 0)], -1)
        good = (pos >= 0) & (end[np.maximum(cand, 0)] >= qts[qe])
        out[qe[good]] = cand[good]
        for i in np.flatnonzero(~good & (pos >= 0)).tolist():
            t_q = qts[qe[i]]
            for j in range(pos[i] - 1, max(pos[i] - 4096, -1), -1):
                if end[seg[j]] >= t_q:
                    out[qe[i]] = seg[j]
                    break
        # next slice
        qn = q[~enc]
        if len(qn):
            pos = np.searchsorted(s_seg, qts[qn], "left")
            ok = pos < len(seg)
            out[qn[ok]] = seg[pos[ok]]
    return out


# ----------------------------------------------------------------------------- entry point
@guarded
def load(path: str | Path, progress: bool = False) -> Trace:
    """Read a Kineto / Chrome trace JSON file (``.json`` or ``.json.gz``) into a Trace."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a directory, not a trace file")
    src_size = path.stat().st_size
    if src_size == 0:
        raise TraceFormatError(path, "empty file")
    bar = _Progress(progress, path, src_size)
    # parsed JSON makes no reference cycles: the cyclic GC would only re-scan the many
    # short-lived dicts of every slice, which costs a good share of the load time
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        top: dict[str, Any] = {}
        col = _Collector(path)
        seen = 0
        for events in _event_slices(path, _Source(path, bar).blocks(), top):
            seen += len(events)
            check_events(path, seen)
            col.add(events)
            del events
        trace = col.finish(top, bar)
        clean_metadata(trace.metadata)
        return trace
    except MemoryError:
        raise TraceFormatError(path, "not enough memory to read this trace") from None
    except RecursionError:
        raise TraceFormatError(path, "invalid JSON: nested too deeply") from None
    finally:
        if gc_was_on:
            gc.enable()
        bar.stop()
