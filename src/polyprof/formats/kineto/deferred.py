"""Args not typed at load, kept as JSON text (one batch per 8192 events), typed on first use.

The reader hands a :class:`DeferredArgs` to the Trace's ``StatTable.defer``: it decodes
the columns of the keys asked for (a lookup of ``queue`` decodes that arg alone), of
every key (iteration, copies), or some keys for some rows; and it says cheaply whether
a key may be in the text at all. Each batch is decoded into one dict of raw JSON values
per event (msgspec builds no values), the raw values are grouped by arg name, and each
group is decoded as one JSON array: numbers and strings straight into a list, lists as
their compact text (what the eager reader made of them, without building them) unless
the text could differ from that (floats, escapes, objects), then the long way. The text
was checked at load (UTF-8, numbers in range), so nothing here can fail on it.
"""

from __future__ import annotations

import re
import threading
from itertools import chain, repeat
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any, Callable, Collection, Sequence, TypeVar

import msgspec
import numpy as np

from .. import kineto_memory
from ...lowlevel.heap import collector_paused
from ...trace.stats import StatColumn, merge_columns
from .args import _ARG_KEYS, _EAGER_NAMES, _typed_stat, arg_names
from .events import _DECODE_ANY
from .packed import bases
from .taken import TakenArgs
from ...trace.sorting import unique
from ...lowlevel.compiled import optional

_args = optional(__package__, "_args")  # the compiled grouping of a batch's args (_args.c); the Python one below otherwise (lowlevel/compiled.py)

#: which grouping of every arg is in use: "c" (``_args.c``) or "python"
IMPLEMENTATION = "c" if _args is not None else "python"

T = TypeVar("T")
#: (first row, ``[args, ...]`` text) of each batch of events
Batches = Sequence[tuple[int, bytes]]
#: typed (rows, values) parts of args that came from E events, by stat key
Late = dict[str, list[tuple[np.ndarray, np.ndarray]]]

_DECODE_RAWS = msgspec.json.Decoder(list[msgspec.Raw]).decode
_DECODE_ARG_RAWS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]]).decode
_DECODE_ARG_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
#: in compact JSON of lists, a number that orjson may print otherwise (1.50, 1e5, -0)
_NOT_VERBATIM = re.compile(rb"[\[,]-?[0-9]+[.eE]|[\[,]-0[,\]]")
#: digits and minus -> "0": a number in compact JSON of lists shows as "[0" or ",0"
_NUMBER_STARTS = bytes.maketrans(b"0123456789-", b"00000000000")
_SKIPPED = frozenset(_EAGER_NAMES) | kineto_memory.MEMORY_KEYS  # typed at load
_ABSENT = msgspec.Raw(b"null")  # an arg an event does not have (this very object)


class DeferredArgs:
    """The deferred args of one trace (the ``StatTable.defer`` protocol)."""

    def __init__(self, batches: Batches | Callable[[], Batches], late: Late, taken: TakenArgs | None = None):
        """``batches`` may be a function that makes them, called on first use (once);
        ``taken``: the args the tokenizer took by name at load (taken.py), if it did."""
        self._batches, self.late, self.taken = batches, late, taken
        self._make_lock = threading.Lock()
        self._escaped: list[bool] | None = None  # which batches hold a \\u escape, once asked
        self._names: list[frozenset[str] | None] | None = None  # each batch's arg names, once asked
        self._may: dict[str, bool] = {}  # may_hold's answers

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self), _batches=self.batches)  # made now if made on first use
        del state["_make_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._make_lock = threading.Lock()

    @property
    def batches(self) -> Batches:
        b = self._batches
        if callable(b):
            with self._make_lock:
                if callable(self._batches):
                    self._batches = self._batches()
                b = self._batches
        return b  # type: ignore[return-value]

    def _batches_with(self, names: Collection[str]) -> list[bool]:
        """Which batches may hold an arg called one of ``names``: exactly, from each
        batch's arg names found once by the compiled walk (``_args.names``, once
        for every key to come); else its JSON name, quoted, occurs in the text
        (a scan per key; decoding the names of every arg instead
        allocated a value per arg). The scan is conservative: a
        batch with a \\u escape, or a name a writer could escape otherwise, counts as a yes."""
        if self._names is None:  # the tokenizer or the compiled walk knows each batch's names exactly (None: neither)
            self._names = _known_names(self.batches)
        if all(n is not None for n in self._names):
            return [not got.isdisjoint(names) for got in self._names]  # type: ignore[union-attr]
        if self._escaped is None:
            self._escaped = [b"\\u" in text for _, text in self.batches]
        if any(c in n for n in names for c in '"\\/') or any(ord(c) < 0x20 or ord(c) > 0x7E for n in names for c in n):
            return [True if got is None else not got.isdisjoint(names) for got in self._names]
        needles = [b'"' + n.encode() + b'"' for n in names]
        return [(esc or any(nd in text for nd in needles)) if got is None else not got.isdisjoint(names)
                for (_, text), esc, got in zip(self.batches, self._escaped, self._names)]

    def decode(self) -> dict[str, StatColumn]:
        """Every column."""
        return self.columns(None)

    def columns(self, keys: Collection[str] | None, skip: Collection[str] = ()) -> dict[str, StatColumn]:
        """The columns of ``keys`` (None: every key but those in ``skip``), typed as the
        eager reader typed them (one part per batch and arg name, then E events' parts)."""
        with collector_paused():  # the decoded values make no reference cycles (as in the load)
            return _fresh_stack(lambda: self._columns(keys, skip))

    def _columns(self, keys: Collection[str] | None, skip: Collection[str]) -> dict[str, StatColumn]:
        names = None if keys is None else {n for k in keys for n in arg_names(k)}
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        batches = self.batches
        held = self._batches_with(names) if names is not None else [True] * len(batches)
        for i in [i for i, have in enumerate(held) if have]:  # only these inflated (packed.py)
            base, text = batches[i]
            for name, (rows, joined, lens) in _joined_groups(text, base, names).items():
                key, r, arr = _typed_joined(name, rows, joined, lens)
                if len(r) and key not in skip:
                    parts.setdefault(key, []).append((r, arr))
        for key, p in self.late.items():
            if (keys is None or key in keys) and key not in skip:
                parts.setdefault(key, []).extend(p)
        return {key: merge_columns(p) for key, p in parts.items()}

    def may_hold(self, key: str) -> bool:
        """Whether any deferred arg may be called ``key`` (or the Kineto name of ``key``);
        answered once per key. Looking up a stat the args do not have (e.g. XProf's
        ``device_duration_ps`` on a Kineto trace) then decodes nothing."""
        if key in self.late:
            return True
        if key not in self._may:
            self._may[key] = any(self._batches_with(arg_names(key)))
        return self._may[key]

    def rows(self, keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
        """Some deferred args for some rows only: the args the tokenizer took at load
        (taken.py) from their columns, no batch read; others from each batch holding one
        of the rows, split into its events' JSON texts (no values built), just those
        decoded. Values are typed from these rows as the full decode types a column."""
        names = {k: arg_names(k) for k in keys}
        rows = unique(np.asarray(rows, np.int64))
        if not any(k in self.late for k in keys) and self.taken is not None and \
                all(len(n) == 1 and n[0] in self.taken.names for n in names.values()):
            return self._taken_rows({k: n[0] for k, n in names.items()}, rows)
        if _args is not None and all(len(n) == 1 for n in names.values()) and not any(k in self.late for k in keys):
            try:
                return self._selected(keys, rows)
            except ValueError:  # escaped names, an args value that is not an object...: the Python path
                pass
        batches = self.batches
        starts = bases(batches) + [np.iinfo(np.int64).max]
        skip = _lacking(batches, {n for k in keys for n in names[k]})
        got: dict[str, tuple[list[int], list[Any]]] = {k: ([], []) for k in keys}
        for i, base in enumerate(starts[:-1]):
            sel = rows[(rows >= base) & (rows < starts[i + 1])]
            if not len(sel) or skip[i]:
                continue
            text = batches[i][1]
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
            for lr, lv in self.late.get(k, []):
                m = np.isin(lr, rows)
                r_list.extend(lr[m].tolist())
                vals.extend(list(lv[m]))
            if r_list:
                _, r_arr, arr = _typed_stat(names[k][0], np.asarray(r_list, np.int64), vals)
                if len(r_arr):
                    out[k] = StatColumn(r_arr, arr)
        return out

    def _selected(self, keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
        """:meth:`rows` by the compiled walk (``_args.select``): each batch holding some of
        the rows gives the raw values of just those events' args asked for, each distinct
        value once with a code per row. The distinct values are typed as one column per
        key across the batches (as :meth:`rows` types them: the typing of a column
        depends only on which values it holds), then spread back over the rows."""
        assert _args is not None  # the caller's choice of the compiled walk
        wanted = tuple(arg_names(k)[0] for k in keys)
        batches = self.batches
        starts = bases(batches) + [np.iinfo(np.int64).max]
        bounds = np.searchsorted(rows, starts)
        skip = _lacking(batches, set(wanted))
        got: dict[str, list[tuple[bytes, bytes, bytes, bytes]]] = {}
        for i in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
            if skip[i]:
                continue
            sel = rows[bounds[i]:bounds[i + 1]]
            for name, part in _args.select(batches[i][1], starts[i], wanted, sel.tobytes()).items():
                got.setdefault(name, []).append(part)
        out: dict[str, StatColumn] = {}
        for k, name in zip(keys, wanted):
            parts = got.get(name)
            if parts:
                _spread(out, k, name, *_distinct_parts(parts))
        return out

    def _taken_rows(self, names: dict[str, str], rows: np.ndarray) -> dict[str, StatColumn]:
        """:meth:`rows` of args the tokenizer took at load (taken.py; ``names``: stat key ->
        arg name): each key's distinct values among the rows typed once, as
        :meth:`_selected` types them; no batch read."""
        assert self.taken is not None  # the caller's choice
        out: dict[str, StatColumn] = {}
        for k, name in names.items():
            got = self.taken.select(name, rows)
            if got is not None:
                _spread(out, k, name, *got)
        return out


def _spread(out: dict[str, StatColumn], key: str, name: str, rows: np.ndarray, codes: np.ndarray, joined: bytes,
            lens: np.ndarray) -> None:
    """Arg ``name``'s distinct values (``joined``, of lengths ``lens``) typed as one column,
    then spread over the ``rows`` by their ``codes`` into ``out[key]``; rows whose value is
    null left out (none left: no column)."""
    _, kept, arr = _typed_joined(name, np.arange(len(lens), dtype=np.int64), joined, lens)
    at = np.full(len(lens), -1, np.int64)  # distinct value -> its place among the typed ones (-1: null)
    at[kept] = np.arange(len(kept))
    pos = at[codes]
    has = pos >= 0
    if has.any():
        out[key] = StatColumn(rows[has], arr[pos[has]])


def _distinct_parts(parts: list[tuple[bytes, bytes, bytes, bytes]]) -> tuple[np.ndarray, np.ndarray, bytes, np.ndarray]:
    """(rows, codes, joined distinct values, their lengths) of one name over the batches'
    ``_args.select`` parts, each batch's codes moved past the values of those before."""
    if len(parts) == 1:
        r, c, joined, n = parts[0]
        return np.frombuffer(r, np.int64), np.frombuffer(c, np.int64), joined, np.frombuffer(n, np.int64)
    lens = [np.frombuffer(p[3], np.int64) for p in parts]
    shift = np.cumsum([0] + [len(x) for x in lens[:-1]])
    codes = np.concatenate([np.frombuffer(p[1], np.int64) + s for p, s in zip(parts, shift.tolist())])
    rows = np.frombuffer(b"".join(p[0] for p in parts), np.int64)
    return rows, codes, b"[" + b",".join(p[2][1:-1] for p in parts) + b"]", np.concatenate(lens)


def _fresh_stack(work: Callable[[], T]) -> T:
    """``work()``; if a deep call stack makes msgspec's decode hit the recursion limit
    (the text passed it at load), again on a thread of its own (a fresh stack)."""
    try:
        return work()
    except RecursionError:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="polyprof-args") as pool:
            return pool.submit(work).result()


def _lacking(batches: Batches, names: set[str]) -> list[bool]:
    """Which batches the tokenizer found to hold none of ``names`` (``PackedBatches.names``;
    False where it did not tell): a lookup of a few rows' args skips them rather than
    inflate and walk a batch of megabytes for an arg it does not have (torch 1.x's ops
    have no ``Input Strides``)."""
    found: Sequence[frozenset[str] | None] = getattr(batches, "names", None) or [None] * len(batches)
    return [got is not None and got.isdisjoint(names) for got in found]


def _known_names(batches: Batches) -> list[frozenset[str] | None]:
    """Each batch's arg names: as the tokenizer found them at load (``PackedBatches.names``),
    else by the compiled walk of its text (inflating only those batches)."""
    found: Sequence[frozenset[str] | None] = getattr(batches, "names", None) or [None] * len(batches)
    if _args is None:  # no walk: what the tokenizer found (None where nothing: the text scan)
        return list(found)
    return [got if got is not None else _batch_names(batches[i][1]) for i, got in enumerate(found)]


def _batch_names(text: bytes) -> frozenset[str] | None:
    """The names of every arg of one batch (compiled walk), or None where the walk
    cannot tell (no extension, escaped names, args that are not an object...)."""
    if _args is None:
        return None
    try:
        return frozenset(_args.names(text))
    except ValueError:
        return None


def _joined_groups(text: bytes, base: int, names: Collection[str] | None
                   ) -> dict[str, tuple[np.ndarray, bytes, np.ndarray]]:
    """(rows, ``[v,v,...]`` text of the values, each value's length) per arg name of one
    batch, as :func:`_raw_groups` groups them: by the compiled walk of the text when
    every key is asked for and the batch is plain (``_args.c``), else from the raw values."""
    if names is None and _args is not None:
        try:
            got = _args.groups(text, base, _SKIPPED)
        except ValueError:  # escaped names, an args value that is not an object...: the Python path
            pass
        else:
            return {k: (np.frombuffer(r, np.int64), j, np.frombuffer(n, np.int64)) for k, (r, j, n) in got.items()}
    return {k: (rows, b"".join((b"[", b",".join(raws), b"]")), np.fromiter(map(len, raws), np.int64, len(raws)))
            for k, (rows, raws) in _raw_groups(text, base, names).items()}


def _raw_groups(text: bytes, base: int, names: Collection[str] | None
                ) -> dict[str, tuple[np.ndarray, list[msgspec.Raw]]]:
    """(rows, raw JSON values) per arg name of one batch (only ``names`` if given); the
    args typed at load left out. A value that is not an object counts as the arg
    ``args``; empty ones (null, {}, 0, "", [], false) are no args.

    Events of one kind have the same arg names in the same order (a "shape"): events are
    grouped by shape and each shape's values transposed into columns by C-level
    ``itemgetter`` and ``zip``, not one Python step per value. Rows may come out of
    order (several shapes): the typing sorts them."""
    if names is not None:
        wanted = tuple(sorted(n for n in names if n not in _SKIPPED))
        try:
            return _named_groups(text, base, wanted)
        except msgspec.ValidationError:  # an args value that is not an object: the general path
            pass
    try:
        per_event: list[dict[str, msgspec.Raw]] = _DECODE_ARG_RAWS(text)
    except msgspec.ValidationError:  # an args value that is not an object
        per_event = [_as_arg_dict(r) for r in _DECODE_RAWS(text)]
    shapes: dict[tuple[str, ...], list[int]] = {}
    for i, shape in enumerate(map(tuple, per_event)):
        try:
            shapes[shape].append(i)
        except KeyError:
            shapes[shape] = [i]
    parts: dict[str, list[tuple[list[int], Any]]] = {}
    for shape, idx in shapes.items():
        want = [k for k in shape if k not in _SKIPPED and (names is None or k in names)]
        if not want:
            continue
        events = [per_event[i] for i in idx]
        columns = zip(*map(itemgetter(*want), events)) if len(want) > 1 else [[e[want[0]] for e in events]]
        for k, col in zip(want, columns):
            parts.setdefault(k, []).append((idx, col))
    groups = {}
    for k, p in parts.items():
        rows = np.fromiter(chain.from_iterable(i for i, _ in p), np.int64) + base if len(p) > 1 else \
            np.array(p[0][0], np.int64) + base
        groups[k] = (rows, list(chain.from_iterable(c for _, c in p)))
    return groups


@lru_cache(maxsize=64)
def _names_decoder(names: tuple[str, ...]) -> Callable[[bytes], list[Any]]:
    """A decoder of ``[args, ...]`` that keeps only the args called ``names`` (raw)."""
    fields = [(f"f{i}", msgspec.Raw, _ABSENT) for i in range(len(names))]
    struct = msgspec.defstruct("Args", fields, rename={f"f{i}": n for i, n in enumerate(names)}, gc=False)
    return msgspec.json.Decoder(list[struct]).decode  # type: ignore[valid-type]


def _named_groups(text: bytes, base: int, names: tuple[str, ...]) -> dict[str, tuple[np.ndarray, list[msgspec.Raw]]]:
    """(rows, raw values) of the args called ``names`` in one batch: a decode that skips
    every other arg; ValidationError if an args value is not an object."""
    items = _names_decoder(names)(text)
    groups = {}
    for i, name in enumerate(names):
        values = list(map(attrgetter(f"f{i}"), items))
        rows = [r for r, v in enumerate(values) if v is not _ABSENT]
        if rows:
            groups[name] = (np.array(rows, np.int64) + base, [values[r] for r in rows])
    return groups


def _as_arg_dict(raw: msgspec.Raw) -> dict[str, msgspec.Raw]:
    if memoryview(raw)[:1] == b"{":
        return _DECODE_ARG_RAW(raw)
    return {"args": raw} if _DECODE_ANY(raw) else {}


def _all_lists(joined: bytes, lens: np.ndarray) -> bool:
    """Whether every value of ``joined`` (``[raw,raw,...]``, values of lengths ``lens``)
    is a list: a look at the first byte of each."""
    starts = np.cumsum(lens + 1) - lens
    return bool((np.frombuffer(joined, np.uint8)[starts] == 0x5B).all())


def _not_verbatim(compact: bytes) -> bool:
    """Whether compact JSON of lists may hold a number orjson prints otherwise."""
    if b"." not in compact and b"e" not in compact and b"E" not in compact and b"-0" not in compact:
        return False  # ints only (most lists of sizes and ids)
    shapes = compact.translate(_NUMBER_STARTS)
    if b"[0" not in shapes and b",0" not in shapes:
        return False  # no value starts as a number (lists of strings): no regex scan
    return _NOT_VERBATIM.search(compact) is not None


def _typed_joined(name: str, rows: np.ndarray, joined: bytes, lens: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
    """(stat key, rows, typed values) of one arg's values (``joined``: ``[v,v,...]``, the
    values' texts of lengths ``lens``), as ``_typed_stat`` types the decoded values: lists
    become their compact JSON text, taken from the raw text when orjson would print it the
    same (no floats, escapes or objects in it)."""
    if joined[1:2] == b"[" and _all_lists(joined, lens):
        compact = msgspec.json.format(joined, indent=-1)
        if b"\\" not in compact and b"{" not in compact and not _not_verbatim(compact):
            out = np.empty(len(lens), object)
            out[:] = list(map(str, _DECODE_RAWS(compact), repeat("utf-8")))
            if len(rows) > 1 and np.any(rows[1:] < rows[:-1]):  # from several shapes
                order = np.argsort(rows, kind="stable")
                rows, out = rows[order], out[order]
            return _ARG_KEYS.get(name, name), rows, out
    return _typed_stat(name, rows, _DECODE_ANY(joined))

