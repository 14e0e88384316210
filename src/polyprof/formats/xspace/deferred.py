"""The stat columns of an XSpace, each built when first asked for.

The reader keeps, plane by plane, where the values of each key are: the
metadata-level stats of each metadata id with the events of that id, and the
positions of the events' own stats in the decoded columns. A key's column is built
only when it is looked up (``StatTable.defer``, key by key): a summary reads a handful
of the 50-odd keys of a TPU profile, and building every column at load was about 40%
of a cold read. The keys analyses read without decoding (``EAGER``) are built at load.

A column is built as an eager read built it: the metadata-level values of the key,
plane after plane, typed together; then the events' own (which win a row), typed
together; merged by ``trace.stats.merge_columns``. XProf names with a polyprof
meaning (``names.XPROF_ALIASES``) are also found under the polyprof key, unless the
file has that key; the copies a polyprof writer added (``drop``) are left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...trace import keys as K
from ...trace.sorting import unique
from ...trace.stats import StatColumn, TextCodes, as_values, merge_columns
from .decode import EventColumns, spans, stat_objects
from .names import XPROF_ALIASES
from .stats import column

#: built at load: analyses read them through ``StatTable.loaded()`` (no decode):
#: devops' framework op names, advice's framework test, XProf's per-op device time
EAGER = ("tf_op", K.OP, K.HLO_OP, K.HLO_MODULE, "hlo_category", "device_duration_ps")


class MetadataPart:
    """The metadata-level stats of one plane's events: the plane's table (id, key
    code, kind, int, double, object, order; sorted by id) and the events of each id
    (``uniq`` ids; ``order[bounds[j]:bounds[j+1]]`` the events of ``uniq[j]``, rows
    from ``row0``)."""

    def __init__(self, table: tuple[np.ndarray, ...], uniq: np.ndarray, order: np.ndarray, bounds: np.ndarray,
                 row0: int):
        mid = table[0]
        j = np.minimum(np.searchsorted(uniq, mid), max(len(uniq) - 1, 0))
        count = np.where(uniq[j] == mid, bounds[j + 1] - bounds[j], 0) if len(uniq) else np.zeros(len(mid), np.int64)
        hit = count > 0
        self.table = tuple(a[hit] for a in table[1:6])  # code, kind, int, double, object
        self.first, self.count = bounds[j[hit]], count[hit]
        self.order, self.row0 = order, row0

    def codes(self) -> np.ndarray:
        """The key codes with a value on some event."""
        return self.table[0]

    def values(self, code: int) -> tuple[np.ndarray, ...] | None:
        """(rows, count, kind, int, double, object) of key ``code``: the rows of the events it
        applies to, and per metadata entry that has it, how many of those rows (in order)
        and its value."""
        sel = np.flatnonzero(self.table[0] == code)
        if not len(sel):
            return None
        n = self.count[sel]
        rows = self.order[spans(self.first[sel], n)] + self.row0
        return (rows, n, *(a[sel] for a in self.table[1:]))


class EventPart:
    """The events' own stats of one plane: positions in the decoded stat columns and the
    key code of each (positions int32, or int64 past 2**31; codes uint16 where they fit).
    The event row of a stat is found from ``first``, the position of each event's first
    stat (rows from ``row0``; non-decreasing, as the lines and their events are read in
    file order), not kept per stat; else ``rows``, each stat's row. ``nocc``: (rows,
    values) of XEvent.data's num_occurrences (key ``nocc_code``), which precede the
    stats; ``present``: the distinct ``codes``, where the reader has them (a key the
    plane lacks is then answered without a pass over its stats)."""

    def __init__(self, st_idx: np.ndarray, first: np.ndarray | None, rows: np.ndarray | None, row0: int,
                 codes: np.ndarray, stat_names: dict[int, str], nocc: tuple[np.ndarray, np.ndarray] | None,
                 nocc_code: int, present: set[int] | None = None):
        self.st_idx, self.first, self.st_rows, self.row0 = st_idx, first, rows, row0
        self.codes = codes.astype(np.uint16) if len(codes) and 0 <= int(codes.min()) and int(codes.max()) < 1 << 16 \
            else codes
        self.stat_names, self.nocc, self.nocc_code = stat_names, nocc, nocc_code
        self.present = present

    def rows(self, sel: np.ndarray) -> np.ndarray:
        """The event row (int64) of the stats ``sel`` (places in ``st_idx``): an event's
        stats lie from its ``first`` up to the next event's."""
        if self.first is None:
            assert self.st_rows is not None
            return self.st_rows[sel].astype(np.int64)
        return np.searchsorted(self.first, self.st_idx[sel], side="right").astype(np.int64) - 1 + self.row0

    def values(self, cols: "StatValues", code: int) -> list[tuple[np.ndarray, ...]]:
        """(rows, kind, int, double, object) runs of key ``code``; refs as the names they refer to."""
        out: list[tuple[np.ndarray, ...]] = []
        if self.nocc is not None and code == self.nocc_code:
            rows, vals = self.nocc
            n = len(rows)
            out.append((rows, np.full(n, 7, np.uint8), vals, np.zeros(n), np.full(n, None, object)))
        if self.present is not None and code not in self.present:
            return out
        sel = np.flatnonzero(self.codes == code)
        if len(sel):
            idx = self.st_idx[sel]
            kind, ints = cols.st_kind[idx], cols.st_int[idx]
            objs = stat_objects(kind, ints, cols.st_text)
            refs = np.flatnonzero(kind == 6)
            if len(refs):
                names = self.stat_names
                objs[refs] = [names.get(v & ((1 << 64) - 1), "") for v in ints[refs].tolist()]
            out.append((self.rows(sel), kind, ints, cols.st_dbl[idx], objs))
        return out


class StatValues:
    """The event stats' value columns of the decoded XSpace: all a deferred column needs
    of it (the events' times and ids are not kept alive with the trace)."""

    __slots__ = ("st_kind", "st_int", "st_dbl", "st_text")

    def __init__(self, cols: EventColumns):
        self.st_kind, self.st_int, self.st_dbl, self.st_text = cols.st_kind, cols.st_int, cols.st_dbl, cols.st_text


class DeferredStats:
    """Every stat column of one XSpace read, by key, built on request; those in
    ``built`` (given to the trace at load) are not offered again."""

    def __init__(self, cols: EventColumns, keys: list[str], md: list[MetadataPart], ev: list[EventPart],
                 drop: set[str]):
        self.cols, self.md, self.ev = StatValues(cols), md, ev
        self.built: set[str] = set()
        present = unique(np.concatenate([np.zeros(0, np.int64), *(p.codes() for p in md),
                                            *(p.codes if p.present is None else np.fromiter(p.present, np.int64) for p in ev),
                                            *([p.nocc_code] for p in ev if p.nocc is not None)]))
        #: key -> code, of every key some event has (without the writer's copies)
        self.code = {keys[c]: c for c in present.tolist() if keys[c] not in drop}
        #: polyprof key -> the XProf name it is read from
        self.alias = {p: x for x, p in XPROF_ALIASES.items() if x in self.code and p not in self.code}

    def keys(self) -> list[str]:
        return [k for k in (*self.code, *self.alias) if k not in self.built]

    def has(self, key: str) -> bool:
        return (key in self.code or key in self.alias) and key not in self.built

    def eager(self) -> dict[str, list[tuple[np.ndarray, np.ndarray | TextCodes]]]:
        """The parts (:meth:`parts`) of the columns of :data:`EAGER` the file has, for the
        builder to join (a key and its alias share theirs), from now on :attr:`built`."""
        out: dict[str, list[tuple[np.ndarray, np.ndarray | TextCodes]]] = {}
        made: dict[int, list[tuple[np.ndarray, np.ndarray | TextCodes]]] = {}
        for k in EAGER:
            if self.has(k):
                code = self.code[self.alias.get(k, k)]
                out[k] = made[code] if code in made else made.setdefault(code, self.parts(code))
        self.built.update(out)
        return out

    def column(self, key: str) -> StatColumn:
        """The column of ``key`` (one of :meth:`keys`)."""
        return self._build(self.code[self.alias.get(key, key)])

    def parts(self, code: int) -> list[tuple[np.ndarray, np.ndarray | TextCodes]]:
        """The (rows, values) parts of key ``code``, for ``merge_columns``: the metadata-level
        values, plane after plane, typed together (text as codes into the metadata's values:
        no object per event), then the events' own, typed together (which win a row)."""
        md = [v for p in self.md if (v := p.values(code)) is not None]
        ev = [v for p in self.ev for v in p.values(self.cols, code)]
        return ([_metadata_typed(md)] if md else []) + ([_typed(ev)] if ev else [])

    def _build(self, code: int) -> StatColumn:
        return merge_columns(self.parts(code))

    def columns(self, keys: list[str] | None = None, skip: Any = ()) -> dict[str, StatColumn]:
        """``keys`` (those the file has), or with None every key not in ``skip``; a key
        and its alias asked for together share one column, as an alias always did."""
        want = self.keys() if keys is None else keys
        built: dict[int, StatColumn] = {}
        out = {}
        for k in want:
            if self.has(k) and k not in skip:
                code = self.code[self.alias.get(k, k)]
                out[k] = built[code] if code in built else built.setdefault(code, self._build(code))
        return out

    def rows(self, keys: list[str], rows: np.ndarray) -> dict[str, StatColumn]:
        """For ``StatTable.lookup_rows``: the whole columns (typed from all their rows)."""
        return self.columns(keys)


def _typed(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray]:
    rows, kind, ints, dbls, objs = (np.concatenate(a) for a in zip(*parts))
    return rows, as_values(column(kind, ints, dbls, objs))


def _metadata_typed(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray | TextCodes]:
    """The metadata-level part: text values as codes into the entries' strings (the
    column's object array is made once, by one take, when the parts are joined), other
    values spread over their events and typed as :func:`_typed` types them."""
    rows, n, kind, ints, dbls, objs = (np.concatenate(a) for a in zip(*parts))
    if bool((kind == 4).all()):  # str values only (the category, the op names of XLA ops)
        return rows, TextCodes(np.repeat(np.arange(len(kind)), n), objs.tolist())
    return rows, as_values(column(*(np.repeat(a, n) for a in (kind, ints, dbls, objs))))
