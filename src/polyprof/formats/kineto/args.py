"""Event args -> typed stat columns: names, value typing, grouping by name.

Kineto's ``correlation`` and ``External id`` become polyprof's ``correlation_id`` and
``external_id``; other args keep their names. Values of one name become one column:
int64 (uint64 past it), float64 when mixed with floats, else text (lists and objects
as their JSON text).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import orjson

from ...trace import keys
from .events import _DECODE_ANY

#: Kineto arg names -> polyprof stat keys; other args keep their own names.
_ARG_KEYS = {"correlation": keys.CORRELATION_ID, "External id": keys.EXTERNAL_ID}
#: Args typed at load, the ones analyses read (other args are typed on first use: the
#: Trace's StatTable); also under the stat keys they become (polyprof's Chrome writer).
_EAGER_NAMES = ("correlation", "External id", keys.CORRELATION_ID, keys.EXTERNAL_ID)
_EAGER_KEYS = frozenset(_ARG_KEYS.get(k, k) for k in _EAGER_NAMES)
#: Args analyses look up for some events only (an op's input shapes for its FLOPs, a
#: kernel's launch configuration for its occupancy, a collective's sizes and sequence):
#: taken by the compiled tokenizer at load (``taken.py``), so these lookups read no batch.
BY_ROW = (keys.INPUT_DIMS, keys.INPUT_TYPE, keys.CONCRETE_INPUTS, keys.GRID, keys.BLOCK, keys.REGISTERS,
          keys.SHARED_MEMORY, "Collective name", "Process Group Name", "In msg nelems", "Out msg nelems", "dtype",
          "Group size", "Seq", "Src Rank", "Dst Rank")
#: Stats that are ids: hex/decimal strings (ROCm writes "stream": "0x0") become integers.
_INT_KEYS = {keys.CORRELATION_ID, keys.EXTERNAL_ID, keys.STREAM, keys.DEVICE}


class ArgsPiece:
    """The args of many events as the compiled tokenizer joins them (``text``: their JSON
    texts joined by commas), with what it found in them: ``risky``, a number msgspec may
    find out of range; ``memory``, a memory event's marker (kineto_memory.MARKERS);
    ``ids``, the ``correlation`` and ``External id`` integers of each event (``ids.ABSENT``:
    none), or None where ids.py must read them. ``risky`` and ``memory`` may say yes where
    nothing is there (the check then decides), never no where something is. ``names``:
    the names of the args (exactly), or None where the tokenizer could not tell."""

    __slots__ = ("text", "risky", "memory", "ids", "names")

    def __init__(self, text: bytes, risky: bool, memory: bool, ids: tuple[np.ndarray, np.ndarray] | None,
                 names: frozenset[str] | None = None):
        self.text, self.risky, self.memory, self.ids, self.names = text, risky, memory, ids, names


def arg_names(key: str) -> list[str]:
    """The arg names that become stat ``key``."""
    return [n for n, k in _ARG_KEYS.items() if k == key] or [key]


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


#: Args are turned into typed stat columns every this many events (bounds the values kept).
_ARG_FLUSH_EVENTS = 8192
#: the syntax of a batch of args, without building their values
_CHECK_ARGS = msgspec.json.Decoder(list[msgspec.Raw]).decode


def arg_batches(args: list[str], first: int = 0) -> tuple[list[tuple[int, bytes]], int]:
    """Events' args texts (inside their JSON objects, from row ``first``) as ``[args, ...]``
    batches the deferred decode cannot fail on; an event whose args are not valid JSON
    (or hold a number beyond 64 bits) loses them. (batches, how many events lost theirs)"""
    out, lost = [], 0
    for i in range(0, len(args), _ARG_FLUSH_EVENTS):
        chunk = args[i:i + _ARG_FLUSH_EVENTS]
        text = _joined(chunk)
        if not _valid_args(text):
            good = [a if _valid_args(_joined([a])) else "" for a in chunk]
            lost += sum(a != g for a, g in zip(chunk, good))
            text = _joined(good)
        out.append((first + i, text))
    return out, lost


def _joined(args: list[str]) -> bytes:
    return ("[{" + "},{".join(args) + "}]").encode("utf-8", "replace")


def _valid_args(text: bytes) -> bool:
    try:
        _CHECK_ARGS(text)  # the syntax, as parsing the events as JSON checks it
        if _big_numbers(text):
            _DECODE_ANY(text)  # numbers in range
        return True
    except msgspec.DecodeError:
        return False
