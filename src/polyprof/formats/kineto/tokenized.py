"""A slice of ``traceEvents`` tokenized in C (``_tokens.c``) -> the collector's columns.

The compiled tokenizer reads a slice's text once and writes the columns of its events
(``X``/``i``/``I``/``B``) and flow endpoints directly, with pid/tid/string codes through
its own tables; what it leaves (metadata, counters, ``E``, async events) comes back as
JSON text for the Python parser. :func:`add` hands all of it to the collector in the
order :meth:`_Collector.add` takes the same events decoded by msgspec: so values new to
a table get the same codes, args batches the same text, and the Trace is the same
(tests/test_kineto_tokens.py holds the two paths to that on every Kineto trace).

A slice the tokenizer does not read exactly (numbers it would have to round, odd value
types, escaped keys, broken JSON, ...) it leaves whole to msgspec (``scan`` gives None).
``POLYPROF_PURE_PYTHON=1`` or a build without the extension: msgspec reads every slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

import msgspec
import numpy as np

from . import gather, lenient
from .args import ArgsPiece
from .codes import _codes
from .collector import _ARG_FLUSH_EVENTS
from .events import _B, _DECODE_EVENTS, _OTHER, _PHASE_CODES, _PHASES
from .flows import add_flow_columns
from .numbers import NotANumber, _times
from ...lowlevel.compiled import optional

if TYPE_CHECKING:
    from .collector import _Collector

_tokens = optional(__package__, "_tokens")  # built by setup.py; msgspec reads every slice otherwise (lowlevel/compiled.py)
#: "c" (``_tokens.c``) or "python" (every slice decoded by msgspec): which one is in use
IMPLEMENTATION = "c" if _tokens is not None else "python"

#: what ``scan`` gives: (events, ph, pid, tid, name, cat, ts, dur, args text, correlation
#: and External id columns, flow cat, pid, tid, id, ph, ts, enclosing, other events'
#: indices, their text, new keys per table, (ids read, risky numbers, memory markers),
#: the names of the events' args or None)
Scanned = tuple
_PID, _TID, _STR = range(3)
_DECODE_KEY = msgspec.json.decode


class Tokenizer(Protocol):
    """``_tokens.Tokenizer``: the code tables and buffers of one file's tokenizing."""

    def scan(self, text: bytearray | bytes, stop: int) -> Scanned | None: ...

    def learn(self, table: int, codes: bytes) -> None: ...

    def take(self, names: tuple[str, ...]) -> None: ...

    def taken(self) -> tuple[tuple[str, ...], tuple[tuple[bytes, bytes, list[bytes]], ...]] | None: ...


def tokenizer() -> Tokenizer | None:
    """A tokenizer for one file (its code tables live as long as the reader), or None."""
    return _tokens.Tokenizer() if _tokens is not None else None


_NO_CODES = np.zeros(0, np.int64)


class _Codes:
    """The codes of one table's new keys in a slice, numbered column by column as
    :meth:`_Collector.field_codes` numbers them (first appearance, one column after the other)."""

    def __init__(self, keys: list[bytes], table: dict, make: Callable[[object], int]):
        self.keys, self.table, self.make = keys, table, make
        self.codes = np.full(len(keys), -1, np.int64) if keys else _NO_CODES  # most slices: no new key

    def column(self, col: np.ndarray) -> np.ndarray:
        if not self.keys:
            return col
        new = col < 0
        if not new.any():
            return col
        prov = -1 - col[new].astype(np.int64)
        _, first = np.unique(prov, return_index=True)
        order = prov[np.sort(first)]
        got = _codes([_DECODE_KEY(self.keys[k]) for k in order.tolist()], self.table, self.make)
        self.codes[order] = got
        col[new] = self.codes[prov]
        return col


def add(col: "_Collector", res: Scanned) -> None:
    """One tokenized slice into the collector, as :meth:`_Collector.add` adds it decoded."""
    (n, ph, pid, tid, name, cat, ts, dur, args, corr, ext, fcat, fpid, ftid, fid, fph, fts, fenc, ridx, rtext,
     pending, (ids_ok, risky, memory), arg_names) = res
    tables = (_Codes(pending[_PID], col.pids, col._new_code(col.pids)),
              _Codes(pending[_TID], col.tids, col._new_code(col.tids)),
              _Codes(pending[_STR], col.strings, col._sid))
    ph = np.frombuffer(ph, np.int8)
    if len(ph):
        ids = (np.frombuffer(corr, np.int64), np.frombuffer(ext, np.int64)) if ids_ok else None
        names = None if arg_names is None else frozenset(n.decode() for n in arg_names)
        _events(col, tables, ph, pid, tid, name, cat, ts, dur, ArgsPiece(args, bool(risky), bool(memory), ids, names))
        is_b = ph == _B
        if is_b.any():  # their places in the slice: the events are the items the others are not
            pos = np.delete(np.arange(n), np.frombuffer(ridx, np.int64))
            col.b_pos.append(col.seen + (pos[is_b] if len(pos) == len(ph) else np.flatnonzero(is_b)))
    if len(fcat):
        f_cat = tables[_STR].column(np.frombuffer(fcat, np.int64))
        f_pid = tables[_PID].column(np.frombuffer(fpid, np.int64))
        f_tid = tables[_TID].column(np.frombuffer(ftid, np.int64))
        add_flow_columns(col, f_cat, np.frombuffer(fid, np.int64), np.frombuffer(fph, np.int8), f_pid, f_tid,
                         np.frombuffer(fts, np.int64), np.frombuffer(fenc, np.int8).astype(bool))
    for t, codes in zip(range(3), tables):
        if codes.keys:
            assert col.tok is not None
            col.tok.learn(t, codes.codes.tobytes())
    if rtext:
        _others(col, n, np.frombuffer(ridx, np.int64), rtext)
    col.seen += n


def _events(col: "_Collector", tables: tuple[_Codes, ...], ph: np.ndarray, pid: bytearray, tid: bytearray,
            name: bytearray, cat: bytearray, ts: bytearray, dur: bytearray, args: ArgsPiece) -> None:
    """The events' columns, as :meth:`_Collector._events` appends them."""
    c = col.cols
    c["pid"].append(tables[_PID].column(np.frombuffer(pid, np.int64)))
    c["tid"].append(tables[_TID].column(np.frombuffer(tid, np.int64)))
    c["name"].append(tables[_STR].column(np.frombuffer(name, np.int32)))
    c["cat"].append(tables[_STR].column(np.frombuffer(cat, np.int32)))
    c["ts"].append(np.frombuffer(ts, np.int64))
    c["dur"].append(col.forward(np.frombuffer(dur, np.int64)))  # negative ones 0, counted
    base = col.n
    is_b = ph == _B
    if is_b.any():
        col.b_rows.append(np.flatnonzero(is_b) + base)
    col.arg_raws.append(args)  # the args of len(ph) events
    col.n += len(ph)
    if col.n - col.arg_base >= _ARG_FLUSH_EVENTS:
        col._flush_args()


def _others(col: "_Collector", n: int, idx: np.ndarray, text: bytes) -> None:
    """Metadata, counters, E and async events (decoded by msgspec), at their places in the slice."""
    evs = _DECODE_EVENTS(text)
    codes = gather.codes(evs, "ph", _PHASE_CODES, np.int8)
    if codes is None:
        codes = np.array([_PHASES.get(lenient.phase(p), _OTHER) if type(p) is str else _OTHER
                          for p in (e.ph for e in evs)], dtype=np.int8)
    keep_evs = evs
    try:
        ts, unset = _times(gather.values(evs, "ts"), col.path, "ts")
        if unset is not None:  # as the Python path: metadata kept (ts 0), the others dropped and counted
            keep_evs, codes, ts = col.timed(evs, codes, ts, unset)
    except NotANumber:  # as the Python path: metadata kept (ts 0), the others dropped and counted
        keep_evs, codes, ts = col._valid_times(evs, codes)
    if keep_evs is not evs:
        keep = {id(e) for e in keep_evs}
        idx = np.array([i for i, e in zip(idx.tolist(), evs) if id(e) in keep], np.int64)
        evs = keep_evs
    full: list = [None] * n
    for i, e in zip(idx.tolist(), evs):
        full[i] = e
    all_codes = np.full(n, _OTHER, np.int8)
    all_codes[idx] = codes
    all_ts = np.zeros(n, np.int64)
    all_ts[idx] = ts
    col._rare(full, idx, all_codes, all_ts)
