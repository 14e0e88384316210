"""The orjson-based Kineto reader as it was before the msgspec reader (a test oracle; do not use).

Frozen copy of src/polyprof/formats/kineto.py at commit 38af787, imports made absolute.

Built for big traces: the file is decompressed as a stream and the ``traceEvents`` array
is cut into slices of whole events that orjson parses one at a time, so the parsed JSON
of the whole file never exists at once; each slice becomes NumPy columns straight away.
Anything the fast path cannot cut (odd layouts, broken files) is parsed in one piece,
which also yields orjson's exact error message.

Mapping to the Trace: host processes -> ``/host:CPU`` planes (thread tracks), devices ->
``/device:<KIND>:<N>`` planes (one track per stream), ``X``/``i``/``I``/``B``-``E`` ->
events, ``C`` -> counters, ``s``/``t``/``f`` -> flows bound to events, ``M`` -> names.
Times are Kineto's wall clock in ns (``baseTimeNanoseconds`` + ``ts`` µs, or absolute
µs); three-decimal µs values are converted from their text, so ns are exact.
"""

from __future__ import annotations

import gc
import logging
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import orjson

from polyprof.errors import TraceFormatError
from polyprof.trace import keys
from polyprof.trace.builder import TraceBuilder
from polyprof.trace.categories import Kind, kind_of
from polyprof.trace.core import Trace

log = logging.getLogger("polyprof")

#: Text handed to orjson at a time (whole events); bounds the parsed objects alive at once.
CHUNK_BYTES = 256 << 10
_READ_BYTES = 1 << 20
_SLURP_LIMIT = 64 << 20  # no event boundary found within this much text: parse in one piece

# phase codes
_X, _I, _B, _E, _C, _S, _T, _F, _M, _OTHER = range(10)
_PHASES = {"X": _X, "i": _I, "I": _I, "B": _B, "E": _E, "C": _C, "s": _S, "t": _T, "f": _F, "M": _M}

_TE_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_TS_RE = re.compile(rb'"ts":\s*(-?[\d.eE+-]+)')
_DEVICE_LABEL = re.compile(r"^\s*([A-Za-z][A-Za-z_]*)\s*:?\s*(\d+)\s*$")
_PLANE_NAME = re.compile(r"^/device:([^:/]+):(\d+)$")
_DEVICE_KINDS = {"GPU", "MTIA", "XPU", "HPU", "NPU", "TPU", "MPS", "IPU", "DEVICE"}
#: Categories that only occur on a device timeline (used when a pid has no labels).
_DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "mtia_ccp_events",
                      "cuda_sync", "collective_comm"}
#: Kineto arg names -> polyprof stat keys; other args keep their own names.
_ARG_KEYS = {"correlation": keys.CORRELATION_ID, "External id": keys.EXTERNAL_ID}
#: Stats that are ids: hex/decimal strings (ROCm writes "stream": "0x0") become integers.
_INT_KEYS = {keys.CORRELATION_ID, keys.EXTERNAL_ID, keys.STREAM, keys.DEVICE}
#: Beyond this many µs a float64 cannot hold three decimals exactly (ulp > 1 ns).
_EXACT_LIMIT_US = float(2 ** 43)


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
        d = zlib.decompressobj(wbits=31)
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
                        yield out
                    if d.eof:  # concatenated gzip members
                        raw = d.unused_data
                        d = zlib.decompressobj(wbits=31)
                        fed = False
                    else:
                        raw = d.unconsumed_tail
            out = d.flush()
            if out:
                yield out
        except zlib.error as e:
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


def _event_slices(path: Path, blocks: Iterator[bytes], top: dict[str, Any]
                  ) -> Iterator[tuple[list, bytes | None]]:
    """Yield (events, their JSON text) slices of ``traceEvents``; fill ``top`` with the rest."""
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
        events, text, nxt = cut
        del body[:nxt]
        yield events, text
    # the tail: last events, the closing bracket, then the rest of the top-level object
    tail = _tail(body, is_list)
    if tail is None:
        yield from _slurp(path, prefix + b"[" + bytes(body), iter(()), top)
        return
    events, text, suffix = tail
    if events:
        yield events, text
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


def _cut(body: bytearray) -> tuple[list, bytes, int] | None:
    """Parse the longest run of whole events at the start of ``body`` (None: no cut found)."""
    end = len(body)
    for _ in range(3):
        stop, nxt = _boundary_before(body, end)
        if stop < 0:
            return None
        text = b"[" + bytes(body[:stop]) + b"]"
        try:
            events = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            if getattr(e, "pos", 0) < len(text) - 65536:
                raise _Slurp() from None  # broken well before the cut: not a cutting problem
            end = stop - 1
            continue
        return events, text, nxt
    return None


_ARRAY_END = re.compile(rb"}\s*\]")


def _tail(body: bytearray, is_list: bool) -> tuple[list, bytes, bytes] | None:
    """Split the last events of the array from what follows its closing bracket.

    Candidates are ``}`` ``]`` pairs from the left; the first that parses is the end (a
    pair inside an event or a string leaves brackets or quotes open, so it cannot parse).
    """
    j = _skip_ws(body, 0)
    if j < len(body) and body[j] == 0x5D:  # empty array
        return [], b"[]", bytes(body[j + 1:])
    tries = 0
    for m in _ARRAY_END.finditer(body):
        r = m.end() - 1
        text = b"[" + bytes(body[:r]) + b"]"
        try:
            events = orjson.loads(text)
        except orjson.JSONDecodeError:
            tries += 1
            if tries > 64:
                return None
            continue
        suffix = bytes(body[r + 1:])
        if is_list and suffix.strip():
            return None
        return events, text, suffix
    if is_list:  # the Array Format may omit the closing bracket
        text = b"[" + bytes(body).rstrip().rstrip(b",") + b"]"
        try:
            return orjson.loads(text), text, b""
        except orjson.JSONDecodeError:
            return None
    return None


def _slurp(path: Path, head: bytes, it: Iterator[bytes], top: dict[str, Any]
           ) -> Iterator[tuple[list, bytes | None]]:
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
    del data
    if events:
        yield events, None


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


def _three_decimals(texts: list[bytes]) -> np.ndarray | None:
    """Kineto prints times with three decimals: drop the dots and parse all digits at once.

    Callers check the result against the floats (a text of another form is off by 10x)."""
    if not texts:
        return np.zeros(0, np.int64)
    joined = b" ".join(texts)
    if joined.count(b".") != len(texts):
        return None
    try:
        fast = np.fromstring(joined.replace(b".", b""), dtype=np.int64, sep=" ")
    except ValueError:
        return None
    return fast if len(fast) == len(texts) else None


def _exact_ns(texts: list[bytes], approx_us: np.ndarray) -> np.ndarray:
    """JSON number texts in µs -> exact integer ns.

    Texts with up to three decimals are parsed as digits; others (exponents, more
    decimals) go through :func:`_us_to_ns`, rounded to the ns.
    """
    fast = _three_decimals(texts)
    if fast is not None and np.all(np.abs(fast - approx_us * 1000.0) <= 1000.0):
        return fast
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


def _other_phase(p: Any) -> int:
    return _OTHER


def _codes(values: list, table: dict, make: Callable[[Any], int]) -> list[int]:
    """Ids for values through ``table`` (filled by ``make`` for new values)."""
    try:
        return [table[v] for v in values]
    except KeyError:
        pass
    for v in values:
        if v not in table:
            table[v] = make(v)
    return [table[v] for v in values]


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
        return mask, np.array(vals, dtype=np.float64)
    out = np.empty(len(vals), dtype=object)
    if types == {str}:
        out[:] = vals
    else:
        dumps = orjson.dumps
        out[:] = [v if type(v) is str else (dumps(v).decode() if type(v) in (list, dict) else
                                            ("true" if v is True else "false" if v is False else str(v)))
                  for v in vals]
    return mask, out


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
        self.b_pos: list[np.ndarray] = []  # the B rows' places among the trace's events
        self.ends: list[tuple] = []  # E events: (pid, tid, ts, pos, args)
        self.flow_cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("cat", "id", "ph", "pid", "tid", "ts", "enclosing")}
        self.flow_names: dict[bytes, int] = {}  # flow ids that are not integers
        self.counters: list[tuple] = []  # (pid code, name, ts_ns, value)
        self.process: dict[Any, dict[str, Any]] = {}
        self.threads: dict[tuple, dict[str, Any]] = {}
        self.other_meta: list[dict] = []
        self.skipped: dict[str, int] = {}
        self.inexact_ts = 0
        self.exact_text = False  # times come from the "ts" texts (absolute µs with 3 decimals)

    def _sid(self, v: Any) -> int:
        return self.b.intern(v if isinstance(v, str) else ("" if v is None else str(v)))

    def _new_code(self, table: dict) -> Callable[[Any], int]:
        return lambda v: len(table)

    # ---------------------------------------------------------------- one slice
    def add(self, evs: list, text: bytes | None) -> None:
        n = len(evs)
        ts_ns = self._times_from_text(evs, text) if self.exact_text and text is not None else None
        try:
            if ts_ns is None:
                ph = [e.get("ph") for e in evs]
                ts_ns = self._times([e.get("ts") for e in evs], text)
            else:
                ph = [e.get("ph") for e in evs]
        except AttributeError:
            bad = next(i for i, e in enumerate(evs) if not isinstance(e, dict))
            raise TraceFormatError(self.path, f"not a Chrome/Kineto trace: traceEvents[{self.seen + bad}] "
                                              f"is a {type(evs[bad]).__name__}, not an event object") from None
        try:
            codes = np.array(_codes(ph, _PHASE_CODES, _other_phase), dtype=np.int8)
        except TypeError:  # an unhashable "ph"
            codes = np.array([_PHASES.get(p, _OTHER) if type(p) is str else _OTHER for p in ph], dtype=np.int8)

        ev_idx = np.flatnonzero(codes <= _B)
        b = ev_idx[codes[ev_idx] == _B]
        if len(b):
            self.b_pos.append(self.seen + b)
        if len(ev_idx):
            self._events(evs if len(ev_idx) == n else [evs[i] for i in ev_idx.tolist()],
                         codes[ev_idx], ts_ns[ev_idx])
        rare = np.flatnonzero(codes > _B)
        if len(rare):
            self._rare(evs, rare, codes, ts_ns)
        self.seen += n

    def _times(self, raw: list, text: bytes | None) -> np.ndarray:
        us = _floats(raw, self.path, "ts")
        big = np.abs(us) >= _EXACT_LIMIT_US
        if big.any() and np.any(us[big] != np.floor(us[big])):
            texts = _TS_RE.findall(text) if text is not None else []
            numeric = np.array([type(v) is float or type(v) is int for v in raw])
            if len(texts) == int(numeric.sum()):
                out = np.zeros(len(raw), np.int64)
                out[numeric] = _exact_ns(texts, us[numeric])
                self.exact_text = bool(numeric.all())
                return out
            self.inexact_ts += int(big.sum())
        return _us_to_ns(us)

    def _id_codes(self, values: list, table: dict) -> np.ndarray:
        """Codes of pid/tid values (ints or strings)."""
        return np.array(_codes(values, table, self._new_code(table)), np.int64)

    def _times_from_text(self, evs: list, text: bytes) -> np.ndarray | None:
        """Exact ns straight from the "ts" texts when every event has one; checked against
        the parsed floats of a sample of events and the range of the trace."""
        texts = _TS_RE.findall(text)
        if len(texts) != len(evs) or not texts:
            return None
        fast = _three_decimals(texts)
        if fast is None:
            return None
        probe = np.unique(np.linspace(0, len(evs) - 1, min(len(evs), 17)).astype(np.int64)).tolist()
        ref = []
        for i in probe:
            v = evs[i].get("ts") if type(evs[i]) is dict else None
            if type(v) not in (int, float) or abs(fast[i] - v * 1000.0) > 1000.0:
                return None
            ref.append(fast[i])
        span = 10 ** 15  # ±11 days around the sample: a text of another form is 10x off
        if fast.min() < min(ref) - span or fast.max() > max(ref) + span:
            return None
        return fast

    def _events(self, sel: list, ev_codes: np.ndarray, ts_ns: np.ndarray) -> None:
        c = self.cols
        # one comprehension per field, with literal keys: the fastest way through dicts
        pid = [e.get("pid") for e in sel]
        tid = [e.get("tid") for e in sel]
        name = [e.get("name", "") for e in sel]
        cat = [e.get("cat", "") for e in sel]
        dur = [e.get("dur", 0) for e in sel]
        args = [e.get("args") for e in sel]
        c["pid"].append(self._id_codes(pid, self.pids))
        c["tid"].append(self._id_codes(tid, self.tids))
        c["name"].append(np.array(_codes(name, self.strings, self._sid), np.int32))
        c["cat"].append(np.array(_codes(cat, self.strings, self._sid), np.int32))
        c["ts"].append(ts_ns)
        dur = _us_to_ns(_floats(dur, self.path, "dur"))
        dur[ev_codes != _X] = 0
        c["dur"].append(np.maximum(dur, 0))
        base = self.n
        if np.any(ev_codes == _B):
            self.b_rows.append(np.flatnonzero(ev_codes == _B) + base)
        self._args(args, base)
        self.n += len(sel)

    def _args(self, args: list, base: int) -> None:
        """Args -> one (rows, values) column per arg name."""
        cols: dict[str, tuple[list, list]] = {}
        get = cols.get
        for r, a in enumerate(args):
            if not a:
                continue
            if type(a) is not dict:
                a = {"args": a}
            for k, v in a.items():
                col = get(k)
                if col is None:
                    col = cols[k] = ([], [])
                col[0].append(r)
                col[1].append(v)
        for k, (rows, vals) in cols.items():
            self._add_stat(k, np.array(rows, np.int64) + base, vals)

    def _add_stat(self, key: str, rows: np.ndarray, vals: list) -> None:
        key = _ARG_KEYS.get(key, key)
        mask, arr = _stat_values(key, vals)
        if mask is not None:
            rows = rows[mask]
        if len(rows):
            self.b.add_stat(key, rows, arr)

    def _rare(self, evs: list, idx: np.ndarray, codes: np.ndarray, ts_ns: np.ndarray) -> None:
        """Flows (columns), then counters, metadata and E events (few; one by one)."""
        rc = codes[idx]
        fl = (rc >= _S) & (rc <= _F)
        if fl.any():
            self._flow_slice([evs[i] for i in idx[fl].tolist()], rc[fl], ts_ns[idx[fl]])
        for i, code in zip(idx[~fl].tolist(), rc[~fl].tolist()):
            e = evs[i]
            if code == _M:
                self._meta(e)
            elif code == _E:
                pid = _codes([e.get("pid")], self.pids, self._new_code(self.pids))[0]
                tid = _codes([e.get("tid")], self.tids, self._new_code(self.tids))[0]
                self.ends.append((pid, tid, int(ts_ns[i]), self.seen + i, e.get("args")))
            elif code == _C:
                args = e.get("args")
                if not isinstance(args, dict):
                    continue
                name = e.get("name", "")
                name = name if isinstance(name, str) else str(name)
                if e.get("id") is not None:
                    name = f"{name} {e['id']}"
                pid = _codes([e.get("pid")], self.pids, self._new_code(self.pids))[0]
                single = len(args) == 1
                for k, v in args.items():
                    if isinstance(v, str) and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", v.strip()):
                        v = float(v)  # a number written as a string, as Perfetto reads it
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        self.counters.append((pid, name if single else f"{name}.{k}", int(ts_ns[i]), float(v)))
                    else:
                        self.not_numbers = getattr(self, "not_numbers", 0) + 1
            else:
                p = e.get("ph")
                p = p if isinstance(p, str) else repr(p)
                self.skipped[p] = self.skipped.get(p, 0) + 1

    def _flow_slice(self, sel: list, ph: np.ndarray, ts_ns: np.ndarray) -> None:
        ids = [e.get("id") for e in sel]
        cats = [e.get("cat", "") for e in sel]
        pid = [e.get("pid") for e in sel]
        tid = [e.get("tid") for e in sel]
        bp = [e.get("bp") for e in sel]
        if None in ids:
            for j, e in enumerate(sel):
                if ids[j] is None:
                    id2 = e.get("id2")
                    ids[j] = next(iter(id2.values()), None) if isinstance(id2, dict) and id2 else e.get("bind_id")
        fid = None
        if set(map(type, ids)) == {int}:
            try:
                fid = np.array(ids, np.int64)
            except OverflowError:
                fid = None
        if fid is None or np.any(fid < 0):  # other ids: numbered by their text, below zero
            names = self.flow_names
            fid = np.array([i if type(i) is int and 0 <= i < 2 ** 63 else
                            -2 - names.setdefault(orjson.dumps(i), len(names)) for i in ids], np.int64)
        fc = self.flow_cols
        fc["cat"].append(np.array(_codes(cats, self.strings, self._sid), np.int64))
        fc["id"].append(fid)
        fc["ph"].append(ph)
        fc["pid"].append(self._id_codes(pid, self.pids))
        fc["tid"].append(self._id_codes(tid, self.tids))
        fc["ts"].append(ts_ns)
        bp_arr = np.empty(len(bp), dtype=object)
        bp_arr[:] = bp
        fc["enclosing"].append((ph != _F) | (bp_arr == "e"))

    def _meta(self, e: dict) -> None:
        name, args = e.get("name"), e.get("args") or {}
        if not isinstance(args, dict):
            return
        pid = e.get("pid")
        try:
            if name in ("process_name", "process_labels", "process_sort_index"):
                field = {"process_name": "name", "process_labels": "labels",
                         "process_sort_index": "sort_index"}[name]
                self.process.setdefault(pid, {})[name] = args.get(field)
            elif name in ("thread_name", "thread_sort_index"):
                field = "name" if name == "thread_name" else "sort_index"
                self.threads.setdefault((pid, e.get("tid")), {})[name] = args.get(field)
            elif len(self.other_meta) < 1000:
                self.other_meta.append(e)
        except TypeError:  # unhashable pid/tid
            if len(self.other_meta) < 1000:
                self.other_meta.append(e)

    # ---------------------------------------------------------------- the Trace
    def finish(self, top: dict[str, Any], progress: _Progress) -> Trace:
        b = self.b
        progress.stage("build", 5)
        cat = lambda k: np.concatenate(self.cols[k]) if self.cols[k] else np.zeros(0, np.int64)
        pid_c, tid_c, name_c, cat_c = cat("pid"), cat("tid"), cat("name"), cat("cat")
        ts, dur = cat("ts"), cat("dur")
        base = top.get("baseTimeNanoseconds")
        base = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
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
        uniq, inverse = np.unique(pair, return_inverse=True) if n else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        track_of_pair: dict[int, int] = {}
        pseudo = 0
        for u in uniq.tolist():
            p, t = divmod(u, ntid)
            plane, kind = planes[p]
            pv, tv = pid_vals[p], tid_vals[t]
            info = self._thread_info(pv, tv)
            tname = info.get("thread_name")
            if isinstance(tv, int) and not isinstance(tv, bool) and not isinstance(pv, str):
                tid = tv
                if not tname:
                    tname = f"stream {tv}" if kind == "device" else f"thread {tv}"
            elif kind == "device" and (stream := re.match(r"^\s*stream (\d{1,9})\s*$", str(tv))):
                tid, tname = int(stream.group(1)), tname or str(tv).strip()  # torch 1.8-1.9's tid "stream 7"
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
            z = np.zeros(0, np.int64)
            self._match_ends(np.concatenate(self.b_rows) if self.b_rows else z,
                             np.concatenate(self.b_pos) if self.b_pos else z, pair, ts, dur, ntid, base)
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
                for p in np.unique(cp[m]).tolist():
                    mm = m & (cp == p)
                    b.counter(planes[p][0], name, cts[mm], vals[mm])
        b.metadata.update(self._metadata(top, base, ts))
        progress.advance(1)
        return b.build()

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
        for d in top.get("deviceProperties") or []:
            if isinstance(d, dict) and isinstance(d.get("id"), int):
                devprops[d["id"]] = d
        counts = np.bincount(pid_c, minlength=len(pid_vals)) if len(pid_c) else np.zeros(len(pid_vals), int)
        # which pids show device-only categories
        dev_cat_ids = {b.intern(c) for c in _DEVICE_CATEGORIES}
        is_dev_cat = np.isin(cat_c, np.array(sorted(dev_cat_ids), np.int32))
        dev_pids = set(np.unique(pid_c[is_dev_cat]).tolist()) if len(pid_c) else set()
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
            if dev is None and code in dev_pids and isinstance(pv, int) and not isinstance(pv, bool) and pv >= 0:
                dev = ("GPU", pv)
            kinds.append(("device", dev[0], dev[1]) if dev else ("host", "", 0))

        host_codes = [c for c, k in enumerate(kinds) if k[0] == "host" and isinstance(pid_vals[c], int)
                      and not isinstance(pid_vals[c], bool)]
        main = max(host_codes, key=lambda c: (counts[c] if c < len(counts) else 0, -c)) if host_codes else None
        used = set(np.unique(pid_c).tolist()) | {c[0] for c in self.counters}
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
                pid = pv if isinstance(pv, int) else index
                out.append((b.plane(keys.device_plane(dkind, index), "device", vendor, index, pid, props), "device"))
            elif code == main or not isinstance(pv, int) or isinstance(pv, bool):
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

    def _match_ends(self, b_rows: np.ndarray, b_pos: np.ndarray, pair: np.ndarray, ts: np.ndarray,
                    dur: np.ndarray, ntid: int, base: int) -> None:
        """Close each B with the next E on its thread (a stack per thread, in time order;
        at the same time, in file order)."""
        items = [(int(pair[r]), int(ts[r]), p, 0, int(r), None) for r, p in zip(b_rows.tolist(), b_pos.tolist())]
        items += [(p * ntid + t, t_ns + base, pos, 1, pos, args) for p, t, t_ns, pos, args in self.ends]
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        stacks: dict[int, list[int]] = {}
        unmatched_e = 0
        extra: dict[str, tuple[list, list]] = {}
        for key, t, _, is_end, ref, args in items:
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
            self.unended = len(open_rows)
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
        _, first, key = np.unique(np.stack([fcat, fid], axis=1), axis=0, return_index=True, return_inverse=True)
        key = key.reshape(-1)
        ph = np.concatenate(fc["ph"])
        fts = np.concatenate(fc["ts"]) + base
        fpair = np.concatenate(fc["pid"]) * ntid + np.concatenate(fc["tid"])
        ftrack = np.array([track_of_pair.get(p, -1) for p in fpair.tolist()], np.int64)
        enclosing = np.concatenate(fc["enclosing"])
        rows = _bind(track, ts, dur, self._annotation_mask(cat_c), ftrack, fts, enclosing)
        # chain endpoints of one (cat, id): s -> t -> ... -> f in time order
        pos = np.arange(len(key))
        order = np.lexsort((pos, ph, fts, key))
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
        for c in np.unique(cats).tolist():
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
        left_out = [f"{n} x ph={p}" for p, n in sorted(self.skipped.items())]
        if getattr(self, "not_numbers", 0):
            left_out.append(f"{self.not_numbers} counter values that are not numbers")
        if left_out:
            warnings.append("kineto: events not imported: " + ", ".join(left_out))
        if getattr(self, "unbound_flows", 0):
            warnings.append(f"kineto: {self.unbound_flows} flow endpoints matched no event")
        if getattr(self, "unended", 0):
            warnings.append(f"kineto: {self.unended} slices never ended (B or b events without their E or e): "
                            f"they end at the trace's last timestamp (stat '{keys.INCOMPLETE}')")
        if self.inexact_ts:
            warnings.append(f"kineto: {self.inexact_ts} timestamps rounded by float parsing (up to ±128 ns)")
        if warnings:
            meta["warnings"] = warnings
            for w in warnings:
                log.info("%s: %s", self.path, w)
        if self.other_meta:
            meta["chrome_metadata_events"] = self.other_meta
        return meta


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
    order = np.lexsort((~annotation, -dur, start, track))
    t_sorted = track[order]
    end = start + dur
    for t in np.unique(qtrack[qtrack >= 0]).tolist():
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
        for events, text in _event_slices(path, _Source(path, bar).blocks(), top):
            col.add(events, text)
            del events, text
        return col.finish(top, bar)
    except MemoryError:
        raise TraceFormatError(path, "not enough memory to read this trace") from None
    except RecursionError:
        raise TraceFormatError(path, "invalid JSON: nested too deeply") from None
    finally:
        if gc_was_on:
            gc.enable()
        bar.stop()
