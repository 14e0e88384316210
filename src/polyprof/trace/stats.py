"""Sparse, typed stat columns: a value for some events under one key.

A stat column holds the rows (event indices, ascending) that carry the key and one
value per row. Value arrays are int64, uint64, float64, or object (str / bytes), so
every XSpace stat kind and every Kineto arg fits without a Python object per event
for numeric stats. A trace keeps its columns in a :class:`StatTable`, which can hold
some of them undecoded until they are first needed.
"""

from __future__ import annotations

import pickle
import sys
import threading
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping, MutableMapping, NamedTuple

import numpy as np

from ..errors import TraceSchemaError

_NUMERIC = {"i": np.int64, "u": np.uint64, "f": np.float64}
#: :meth:`Stats.lookup_rows` of at most this many rows decodes them rather than first
#: asking each deferred part whether it holds the key anywhere
FEW_ROWS = 1024


# StatColumn, RowMap and _Part are plain classes and a named tuple, not dataclasses:
# every `polyprof run` imports this module, and defining the three as dataclasses is
# slower (their generated __eq__ could not compare arrays anyway).
class StatColumn:
    """One stat key's values at some events: ``rows`` (int64, ascending, unique) and
    ``values`` (int64, uint64, float64 or object), one per row."""

    __slots__ = ("rows", "values")

    def __init__(self, rows: np.ndarray, values: np.ndarray):
        if len(rows) != len(values):
            raise TraceSchemaError(f"stat column has {len(rows)} rows but {len(values)} values")
        self.rows = rows
        self.values = values

    def __repr__(self) -> str:
        return f"StatColumn(rows={self.rows!r}, values={self.values!r})"

    @property
    def kind(self) -> str:
        """'i', 'u', 'f' or 'O' (str/bytes)."""
        return self.values.dtype.kind if self.values.dtype.kind in "iuf" else "O"

    def __len__(self) -> int:
        return len(self.rows)

    def dense(self, n: int, fill: Any = None) -> np.ndarray:
        """Values spread over ``n`` events; rows without the key get ``fill``."""
        if self.kind in "iuf" and fill is not None and not isinstance(fill, str):
            out = np.full(n, fill, dtype=np.result_type(self.values.dtype, np.asarray(fill).dtype))
        else:
            out = np.full(n, fill, dtype=object)
        out[self.rows] = self.values
        return out

    def lookup(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask, values) for ``rows``: which carry the key, and their values."""
        if not len(self.rows):
            return np.zeros(len(rows), bool), self.values[:0]
        pos = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
        mask = self.rows[pos] == rows
        return mask, self.values[pos[mask]]

def check_column(key: str, col: Any, n_rows: int | None) -> None:
    """Raise TraceSchemaError unless ``col`` is a StatColumn of ascending rows below ``n_rows``."""
    if not isinstance(col, StatColumn):
        raise TraceSchemaError(f"stat {key!r} is not a StatColumn")
    rows = col.rows
    if len(rows) and (rows.min() < 0 or (n_rows is not None and rows.max() >= n_rows)):
        raise TraceSchemaError(f"stat {key!r} refers to events that do not exist")
    if len(rows) > 1 and np.any(rows[1:] <= rows[:-1]):
        raise TraceSchemaError(f"stat {key!r} rows are not ascending and unique")


class RowMap(NamedTuple):
    """Where the events of one trace land in another (a trace built from it): the events
    ``kept`` (ascending rows; None: all ``n`` of them) go, in order, to ``base`` onwards.
    Deferred stats carried through re-homing and merging map their rows with it when
    they are decoded, so a copy of a trace's stats decodes nothing."""

    kept: np.ndarray | None
    base: int
    n: int  # how many events the map covers (len(kept), or the source trace's count)

    @classmethod
    def of(cls, n_events: int, kept: np.ndarray | None = None, base: int = 0) -> "RowMap":
        if kept is None:
            return cls(None, int(base), int(n_events))
        kept = np.asarray(kept, np.int64)
        return cls(kept, int(base), len(kept))

    def column(self, col: StatColumn) -> StatColumn:
        """``col`` (rows of the source) at its rows here; rows not kept are left out."""
        if self.kept is None:
            return StatColumn(col.rows + self.base, col.values)
        if not len(col.rows) or not len(self.kept):
            return StatColumn(col.rows[:0], col.values[:0])
        pos = np.minimum(np.searchsorted(self.kept, col.rows), len(self.kept) - 1)
        hit = self.kept[pos] == col.rows
        return StatColumn(pos[hit] + self.base, col.values[hit])

    def columns(self, cols: Mapping[str, StatColumn]) -> dict[str, StatColumn]:
        out = {}
        for key, col in cols.items():
            m = self.column(col)
            if len(m):
                out[key] = m
        return out

    def back(self, rows: np.ndarray) -> np.ndarray:
        """The source rows of ``rows`` here (ascending); rows outside the map are left out."""
        local = np.asarray(rows, np.int64) - self.base
        local = local[(local >= 0) & (local < self.n)]
        return local if self.kept is None else self.kept[local]


class _Part:
    """One deferred part of a StatTable (see :meth:`StatTable.defer`)."""

    __slots__ = ("decode", "complete", "may_hold", "decode_rows", "decode_keys", "done")

    def __init__(self, decode: Callable[[], Mapping[str, StatColumn]], complete: frozenset[str],
                 may_hold: Callable[[str], bool] | None,
                 decode_rows: Callable[[list[str], np.ndarray], Mapping[str, StatColumn]] | None,
                 decode_keys: Callable[..., Mapping[str, StatColumn]] | None, done: frozenset[str] = frozenset()):
        self.decode = decode
        self.complete = complete
        self.may_hold = may_hold
        self.decode_rows = decode_rows
        self.decode_keys = decode_keys
        self.done = done  # keys decoded already (through decode_keys)

    def may(self, key: str) -> bool:
        """Whether this part may still give ``key``."""
        return key not in self.complete and key not in self.done and (self.may_hold is None or self.may_hold(key))

    def mapped(self, m: RowMap) -> "_Part":
        """This part as seen from a trace built from its trace (rows mapped by ``m``)."""
        dk, dr = self.decode_keys, self.decode_rows
        return _Part(lambda: m.columns(self.decode()), self.complete, self.may_hold,
                     None if dr is None else lambda keys, rows: m.columns(dr(keys, m.back(rows))),
                     None if dk is None else lambda keys, skip=(): m.columns(dk(keys, skip=skip)),
                     self.done)


class StatTable(MutableMapping[str, StatColumn]):
    """Stat columns by key, some of them decoded from their source only when first needed.

    Why: a summary reads a few well-known keys (``correlation_id``, ``external_id``); the
    other args of a 100 MB Kineto trace need not become Python objects for it. A reader
    hands such stats over undecoded with :meth:`defer`. Looking up a materialised key, or
    a key that every deferred part declares complete (never in that part), answers at
    once; looking up another key decodes that key alone where the parts can
    (``decode_keys``), else everything; any iteration, ``len``, change, ``copy()`` or
    repr first decodes every deferred part, once, under a lock (threads wait for one
    decode). A pickle (or ``copy.copy``/``deepcopy``) takes the deferred parts along
    undecoded where they pickle (a Kineto trace's args: their text), else decodes first.
    Decoded columns are checked like materialised ones (:func:`check_column`).

    A trace built from others (re-homed, subset, merged) takes their deferred parts
    along undecoded (:meth:`carried`, :meth:`adopt`, through a :class:`RowMap`); a key
    may then be in several parts and decoded already for some events: its column joins
    them (an event given a value twice is a TraceSchemaError).
    """

    def __init__(self, columns: Mapping[str, StatColumn] | Iterable[tuple[str, StatColumn]] = ()):
        self._columns: dict[str, StatColumn] = dict(columns)
        self._deferred: list[_Part] = []
        self._lock = threading.Lock()
        self._n_rows: int | None = None

    def defer(self, decode: Callable[[], Mapping[str, StatColumn]], complete: Iterable[str] = (),
              may_hold: Callable[[str], bool] | None = None,
              decode_rows: Callable[[list[str], np.ndarray], Mapping[str, StatColumn]] | None = None,
              decode_keys: Callable[..., Mapping[str, StatColumn]] | None = None) -> None:
        """Add columns that ``decode()`` makes on first use; it never returns a key in
        ``complete``, nor one already in the table, nor one for which ``may_hold(key)``
        is False (a cheap, conservative test: a lookup of such a key decodes nothing).
        ``decode_rows(keys, rows)``, if given, decodes some keys for some rows only (for
        :meth:`lookup_rows`); ``decode_keys(keys, skip=())`` some keys only (a lookup),
        or, with ``keys`` None, every key not in ``skip`` (instead of ``decode()``)."""
        with self._lock:
            # the keys in the table now are never in the part: their lookups decode nothing
            done = frozenset(complete) | frozenset(self._columns)
            self._deferred = [*self._deferred, _Part(decode, done, may_hold, decode_rows, decode_keys)]

    def lookup_rows(self, keys: Iterable[str], rows: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """(mask, values) of each of ``keys`` that some event has, for ``rows``
        (ascending). Deferred parts that can decode rows decode only these, for all the
        keys at once (their values typed from these rows alone); others decode
        everything, as a lookup does."""
        rows = np.asarray(rows, np.int64)
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        need: list[str] = []
        # a few rows' args decode cheaper than a first may() (which may walk every arg
        # name of the trace); decoding them answers which keys they have just as well
        few = len(rows) <= FEW_ROWS and all(p.decode_rows is not None for p in self._deferred)
        for key in keys:
            col = self._columns.get(key)
            if col is None and few:
                if any(key not in p.complete and key not in p.done for p in self._deferred):
                    need.append(key)
                continue
            maybe = any(p.may(key) for p in self._deferred)
            if col is not None and maybe:  # in a merged table: some rows decoded, others not
                out[key] = self[key].lookup(rows)
            elif col is not None:
                out[key] = col.lookup(rows)
            elif maybe:
                need.append(key)
        if not need:
            return out
        deferred = list(self._deferred)
        if any(p.decode_rows is None for p in deferred):
            cols = self._all()
            found = {k: cols[k] for k in need if k in cols}
        else:
            parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
            for p in deferred:
                for k, col in p.decode_rows(need, rows).items():  # type: ignore[misc]
                    parts.setdefault(k, []).append((col.rows, col.values))
            found = {k: merge_columns(p) for k, p in parts.items()}
        for k, col in found.items():
            out[k] = col.lookup(rows)
        return out

    def may_have(self, key: str) -> bool:
        """Whether some event may have ``key``: a materialised column, or a deferred part
        that may give it (a conservative test that decodes nothing)."""
        return key in self._columns or any(p.may(key) for p in self._deferred)

    @property
    def pending(self) -> int:
        """How many deferred parts are not decoded yet."""
        return len(self._deferred)

    def loaded(self) -> Mapping[str, StatColumn]:
        """The materialised columns (read-only), without decoding anything."""
        return MappingProxyType(self._columns)

    def check(self, n_rows: int) -> None:
        """Check the materialised columns against ``n_rows`` events (deferred ones: when
        decoded); rows shared by several columns (:func:`merge_stat_parts`) once."""
        self._n_rows = n_rows
        checked: set[int] = set()
        for key, col in self._columns.items():
            if isinstance(col, StatColumn) and id(col.rows) in checked:
                continue
            check_column(key, col, n_rows)
            checked.add(id(col.rows))

    def _all(self) -> dict[str, StatColumn]:
        """Every column: deferred parts decoded first (once)."""
        if self._deferred:
            with self._lock:
                if self._deferred:
                    new: dict[str, list[StatColumn]] = {}
                    for p in self._deferred:
                        cols = p.decode() if p.decode_keys is None else p.decode_keys(None, skip=p.done)
                        for key, col in cols.items():
                            if key in p.complete or key in p.done:
                                raise TraceSchemaError(f"deferred stat {key!r} is already in the table")
                            new.setdefault(key, []).append(col)
                    self._columns.update({key: self._joined(key, cols) for key, cols in new.items()})
                    self._deferred = []
        return self._columns

    def _one(self, key: str) -> StatColumn:
        """``key`` from the deferred parts that may hold it: that key alone where they can."""
        with self._lock:
            parts = [(p, p.decode_keys) for p in self._deferred if p.may(key)]
            if not parts and key in self._columns:  # another thread decoded it meanwhile
                return self._columns[key]
            if parts and all(dk is not None for _, dk in parts):
                found = []
                for p, dk in parts:
                    found += [c for k, c in dk([key]).items() if k == key]  # type: ignore[misc]
                    p.done = p.done | {key}
                if found:
                    self._columns[key] = self._joined(key, found)
                return self._columns[key]  # KeyError: no part has it after all
        return self._all()[key]  # a part that can only decode everything

    def _joined(self, key: str, found: list[StatColumn]) -> StatColumn:
        """The column of ``key``: what is materialised and what deferred parts gave, which
        (in a merged trace) hold other events' values; checked, never two values for an event."""
        have = self._columns.get(key)
        cols = found if have is None else [have, *found]
        if len(cols) == 1:
            col = cols[0]
        else:
            n = sum(len(c) for c in cols)
            col = merge_columns([(c.rows, c.values) for c in cols])
            if len(col) != n:
                raise TraceSchemaError(f"deferred stat {key!r} is already in the table")
        check_column(key, col, self._n_rows)
        return col

    def carried(self, m: RowMap) -> tuple[dict[str, StatColumn], list[_Part]]:
        """This table's columns as seen from a trace built from this one (rows mapped by
        ``m``): the materialised columns mapped now, the deferred parts to decode later
        (:meth:`adopt` them there); nothing is decoded."""
        with self._lock:
            return m.columns(self._columns), [p.mapped(m) for p in self._deferred]

    def adopt(self, parts: Iterable[_Part]) -> None:
        """Deferred parts :meth:`carried` from other tables (their rows mapped into this one)."""
        parts = list(parts)
        if parts:
            with self._lock:
                self._deferred = [*self._deferred, *parts]

    def __getitem__(self, key: str) -> StatColumn:
        if self._deferred and any(p.may(key) for p in self._deferred):
            return self._one(key)
        return self._columns[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __setitem__(self, key: str, col: StatColumn) -> None:
        self._all()[key] = col

    def put(self, key: str, col: StatColumn) -> None:
        """Set ``key``'s column, decoding no deferred part but those that may hold ``key``
        (that key alone where they can), whose values ``col`` then replaces."""
        if self._deferred and any(p.may(key) for p in self._deferred):
            try:
                self._one(key)
            except KeyError:
                pass
        with self._lock:
            self._columns[key] = col

    def __delitem__(self, key: str) -> None:
        del self._all()[key]

    def copy(self) -> "StatTable":
        return StatTable(self._all())

    def __reduce__(self) -> tuple:
        """Deferred parts stay deferred where they pickle (a Kineto trace's args: its
        undecoded text), so a pickled trace costs no decode; others are decoded first."""
        with self._lock:
            columns, parts = dict(self._columns), list(self._deferred)
        if parts:
            try:
                return (_unpickled, (columns, pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL), self._n_rows))
            except (pickle.PicklingError, TypeError, AttributeError):  # a lambda, a lock...
                pass
        return (StatTable, (self._all(),))

    def __repr__(self) -> str:
        return f"StatTable({self._all()!r})"


def _unpickled(columns: dict[str, StatColumn], parts: bytes, n_rows: int | None) -> StatTable:
    table = StatTable(columns)
    table._deferred = pickle.loads(parts)
    table._n_rows = n_rows
    return table


def as_values(values: Any) -> np.ndarray:
    """Normalise a sequence of stat values to one of the supported dtypes (one value per
    row: lists and dicts, even of one length, are their JSON text)."""
    try:
        arr = np.asarray(values)
    except ValueError:  # lists of several lengths: each as its text, below
        arr = np.empty(len(values), dtype=object)
    if arr.ndim == 1 and arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.ndim == 1 and arr.dtype.kind == "i":
        return arr.astype(np.int64, copy=False)
    if arr.ndim == 1 and arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False)
    if arr.ndim == 1 and arr.dtype.kind == "f":
        return arr.astype(np.float64, copy=False)
    if arr.dtype == object and arr.ndim == 1 and len(arr) > 256 and _all_text(arr):
        return arr
    out = np.empty(len(arr), dtype=object)
    out[:] = [v if isinstance(v, (str, bytes)) else _to_text(v) for v in values]
    return out


def _all_text(arr: np.ndarray) -> bool:
    """Whether an object array holds only str, or only bytes (a reader's long text columns).

    pandas' ``infer_dtype`` checks in one pass in C, but importing pandas for it costs
    more than the check in a process that has not (a full decode of Kineto args right after a load):
    it is used only once pandas is imported; otherwise the set of the values' types."""
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        return pandas.api.types.infer_dtype(arr, skipna=False) in ("string", "bytes")
    types = set(map(type, arr))
    return types == {str} or types == {bytes}


def _to_text(v: Any) -> str:
    """A value's text: a list's or dict's JSON (orjson's; where orjson refuses it, an int
    beyond 64 bits, a key that is no string, an object inside, the standard library's with
    ``str`` for what it cannot write, as collect/journal.py's ``_text``), else ``str``:
    one odd value never fails the column it is in (a plugin's whole data with it)."""
    try:
        if isinstance(v, (list, tuple, dict)):
            import orjson  # only for a container value: most columns hold none

            try:
                return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
            except TypeError:
                import json  # only for the rare value orjson refuses

                return json.dumps(v, default=str)
        return str(v)
    except Exception:  # a key json refuses too (a tuple), deep nesting, a cycle: Python's text
        try:
            return str(v)
        except Exception:  # a __str__ that fails: its type alone
            return f"<{type(v).__name__}>"


class TextCodes:
    """A text stat's values as codes into a few strings: row ``i`` holds ``strings[codes[i]]``.

    What a reader hands the builder for a text column of few distinct values (an
    allocator's name, a memory's device plane), so that no Python object is made or
    checked per event: the builder joins the parts' codes and makes the column's object
    array once, by one take (:func:`merge_columns`). ``codes`` may be a broadcast view
    (one value for a whole batch)."""

    __slots__ = ("codes", "strings")

    def __init__(self, codes: np.ndarray, strings: Iterable[str]):
        self.strings = tuple(strings)
        self.codes = np.asarray(codes)
        if not all(type(s) is str for s in self.strings):
            raise TraceSchemaError(f"text codes' strings are not all str: {self.strings!r}")
        if self.codes.ndim != 1 or (self.codes.dtype.kind not in "iu" and len(self.codes)):
            raise TraceSchemaError(f"text codes are not integers: {self.codes.dtype}")
        if len(self.codes) and (int(self.codes.min()) < 0 or int(self.codes.max()) >= len(self.strings)):
            raise TraceSchemaError(f"text codes outside their {len(self.strings)} strings")

    def __len__(self) -> int:
        return len(self.codes)

    def text(self) -> np.ndarray:
        """The values as an object array of str."""
        return _strings_array(self.strings)[self.codes]


#: (rows, values) parts of one stat, as readers and builders gather them
_Parts = list[tuple[np.ndarray, np.ndarray]] | list[tuple[np.ndarray, np.ndarray | TextCodes]]


def _strings_array(strings: tuple[str, ...]) -> np.ndarray:
    out = np.empty(len(strings), dtype=object)
    out[:] = list(strings)
    return out


def _joined_codes(parts: list[TextCodes]) -> np.ndarray:
    """The object array of coded parts, made by one take over their joined codes (one
    string: one copy of it, broadcast)."""
    if all(p.strings == parts[0].strings for p in parts):
        table, codes = parts[0].strings, [p.codes for p in parts]
        if len(table) == 1:
            return np.broadcast_to(_strings_array(table), (sum(map(len, codes)),)).copy()
    else:  # each part's codes renumbered into the strings of all of them
        index: dict[str, int] = {}
        codes = [np.asarray([index.setdefault(s, len(index)) for s in p.strings], np.int64)[p.codes] for p in parts]
        table = tuple(index)
    return _strings_array(table)[np.concatenate(codes)]


def _kind(v: np.ndarray | TextCodes) -> str:
    return "O" if isinstance(v, TextCodes) or v.dtype.kind not in "iuf" else v.dtype.kind


def merge_columns(parts: _Parts, consume: bool = False,
                  shared: dict[tuple[int, ...], list] | None = None) -> StatColumn:
    """One column from (rows, values) parts; numeric kinds widen, anything else -> str.
    Values may be :class:`TextCodes` (joined as codes, one take at the end).
    ``consume``: ``parts`` is emptied, so each part is freed once copied (a builder's
    parts, never used again: its peak is then about one column, not two). ``shared``
    (:func:`merge_stat_parts`): rows joined and ordered once for keys whose parts are
    at the very same rows arrays."""
    given = parts
    parts = [(np.asarray(r, dtype=np.int64), v if isinstance(v, TextCodes) else as_values(v))
             for r, v in parts if len(r)]
    if consume:
        given.clear()
    if not parts:
        return StatColumn(np.zeros(0, np.int64), np.zeros(0, np.int64))
    kinds = {_kind(v) for _, v in parts}
    if "O" in kinds and len(kinds) > 1:
        parts = [(r, v if isinstance(v, TextCodes) or _kind(v) == "O" else as_values([str(x) for x in v]))
                 for r, v in parts]
    elif kinds == {"i", "u"}:
        parts = [(r, v if isinstance(v, TextCodes) else v.astype(np.int64)) for r, v in parts]
    elif "f" in kinds:
        parts = [(r, v if isinstance(v, TextCodes) else v.astype(np.float64)) for r, v in parts]
    ident = tuple(id(r) for r, _ in parts)
    done = shared.get(ident) if shared is not None else None
    if done and all(a is b for a, (b, _) in zip(done[0], parts)):
        _, rows, order, keep = done
    else:
        rows, order, keep = _joined_rows([r for r, _ in parts])
        if shared is not None and ident in shared:
            shared[ident] = [[r for r, _ in parts], rows, order, keep]
    vals = [v for _, v in parts]
    del parts  # the parts' rows are freed here (when consumed), before the values are joined
    coded = [v for v in vals if isinstance(v, TextCodes)]
    if not coded:
        values = np.concatenate([v for v in vals if not isinstance(v, TextCodes)])
    elif len(coded) == len(vals):
        values = _joined_codes(coded)
    else:
        values = np.concatenate([v.text() if isinstance(v, TextCodes) else v for v in vals])
    del vals
    if order is not None:
        values = values[order][keep]
    return StatColumn(rows, values)


def _joined_rows(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Rows of the parts joined, ascending and unique; the order and the rows kept that
    make them so (None: already so), for the values (the last value for a row wins)."""
    rows = np.concatenate(parts)
    if len(rows) > 1 and bool((rows[1:] <= rows[:-1]).any()):
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        keep = np.ones(len(rows), bool)
        keep[:-1] = rows[1:] != rows[:-1]
        return rows[keep], order, keep
    return rows, None, None


def merge_stat_parts(parts: dict[str, list[tuple[np.ndarray, np.ndarray | TextCodes]]],
                     consume: bool = False) -> dict[str, StatColumn]:
    """Each key's column from its parts (:func:`merge_columns`), in the keys' order. Keys
    whose parts are at the very same rows arrays (a reader's stats of one batch of
    events, e.g. the memory stats) get one rows array, joined and ordered once."""
    seen: dict[tuple[int, ...], int] = {}
    for ps in parts.values():
        ident = tuple(id(r) for r, _ in ps if len(r))
        seen[ident] = seen.get(ident, 0) + 1
    shared: dict[tuple[int, ...], list] = {ident: [] for ident, n in seen.items() if n > 1 and ident}
    out = {}
    for key in list(parts):
        out[key] = merge_columns(parts.pop(key) if consume else parts[key], consume=consume, shared=shared)
    return out
