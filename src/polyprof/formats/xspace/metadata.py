"""A plane's event metadata, from decoded columns: display names, long names, and the
stats that apply to every event of a metadata id (XEventMetadata's stats, its
``metadata`` bytes, its child ids, the long name), as one table sorted by id."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...trace.sorting import member, unique, unique_inverse
from . import names as N
from .decode import EventColumns, spans
from .stats import python_values

# order of a metadata id's stats when written into its events (a later one wins a key)
_SEQ_STATS, _SEQ_META, _SEQ_CHILDREN, _SEQ_LONG = range(4)


class PlaneMetadata:
    """The event metadata of one plane."""

    __slots__ = ("name", "long", "table", "entries", "keys")  # a plain class: a dataclass is slower to make
    name: dict[int, str]  # id -> display name, else name
    long: dict[int, str]  # id -> name, where a different display name is shown
    # the metadata-level stats: id, key code, kind, int, double, object, order (_SEQ_*), sorted by id
    table: tuple[np.ndarray, ...]
    entries: dict[int, tuple[str, str, bool]]  # id -> (name, display name, carries stats)
    keys: list[str]  # key code -> key (shared with the event stats)

    def __init__(self, name: dict[int, str], long: dict[int, str], table: tuple[np.ndarray, ...],
                 entries: dict[int, tuple[str, str, bool]], keys: list[str]):
        self.name, self.long, self.table, self.entries, self.keys = name, long, table, entries, keys

    def unreferenced(self, used_mids: np.ndarray) -> list[dict[str, Any]]:
        """Event metadata that no event uses but that carries stats, as plain dicts
        (e.g. the HLO protos on /host:metadata: no events, but XProf's tools use them)."""
        carrying = [m for m, (_, _, with_stats) in self.entries.items() if with_stats]
        if not carrying:  # most planes: no event's metadata carries stats
            return []
        used = set(unique(used_mids).tolist())
        unused = sorted(m for m in carrying if m not in used)
        if not unused:
            return []
        mid, code, kind, ints, dbls, objs, seq = self.table
        sel = np.flatnonzero(member(mid, np.asarray(unused, np.int64)) & (seq != _SEQ_LONG))
        vals = python_values(kind[sel], ints[sel], dbls[sel], objs[sel])
        stats: dict[int, dict[str, Any]] = {m: {} for m in unused}
        for m, c, v in zip(mid[sel].tolist(), code[sel].tolist(), vals):
            stats[m][self.keys[c]] = v
        return [{"id": m, "name": self.entries[m][0], "display_name": self.entries[m][1], "stats": stats[m]}
                for m in unused]


def read_metadata(cols: EventColumns, m0: int, m1: int, stat_names: dict[int, str], code: Callable[[str], int],
                  keys: list[str], value_kinds: dict[str, set[str]], md_keys: set[str],
                  ms_start: np.ndarray) -> PlaneMetadata:
    """The metadata entries ``m0:m1`` of the columns (one plane's map, in file order)."""
    key = cols.md_key[m0:m1]
    idx = np.arange(m0, m1)
    ids = key.tolist()
    if len(set(ids)) != len(ids):  # a key given twice: the last entry counts, as in protobuf
        _, last = np.unique(key[::-1], return_index=True)
        idx = np.sort(m1 - 1 - last)
        key = cols.md_key[idx]
        ids = key.tolist()
    names, shown = cols.md_name[idx].tolist(), cols.md_display[idx].tolist()
    meta_bytes = cols.md_meta[idx]
    n_st, n_ch = cols.md_stats[idx], cols.md_children[idx]
    meta_nonempty = np.fromiter(map(len, meta_bytes), np.int64, len(idx)) > 0
    with_stats = ((n_st > 0) | (n_ch > 0) | meta_nonempty).tolist()
    entries = {m: (n, d, w) for m, n, d, w in zip(ids, names, shown, with_stats)}
    name = {m: d or n for m, n, d in zip(ids, names, shown)}
    long = {m: n for m, n, d in zip(ids, names, shown) if d and n and d != n}
    parts = [_stats(cols, idx, key, n_st, stat_names, code, keys, value_kinds, md_keys, ms_start) if n_st.any()
             else _fixed(key[:0], 0, 0, np.zeros(0, object), _SEQ_STATS)]  # no XStat on this plane's metadata
    has_meta = np.flatnonzero(meta_nonempty)
    if len(has_meta):
        parts.append(_fixed(key[has_meta], code("xevent_metadata"), 5, meta_bytes[has_meta], _SEQ_META))
    has_children = np.flatnonzero(n_ch > 0)
    if len(has_children):
        child_start = np.concatenate([[0], np.cumsum(cols.md_children)])
        text = [",".join(map(str, cols.md_child[child_start[i]:child_start[i] + cols.md_children[i]].tolist()))
                for i in idx[has_children].tolist()]
        parts.append(_fixed(key[has_children], code("child_ids"), 4, np.asarray(text, object), _SEQ_CHILDREN))
    if long:
        lk = np.asarray(list(long), np.int64)
        parts.append(_fixed(lk, code(N.STAT_LONG_NAME), 4, np.asarray(list(long.values()), object), _SEQ_LONG))
    table = tuple(np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((table[6], table[0]))  # by id, then stats / metadata / children / long name
    return PlaneMetadata(name, long, tuple(a[order] for a in table), entries, keys)


def _stats(cols: EventColumns, idx: np.ndarray, key: np.ndarray, n_st: np.ndarray, stat_names: dict[int, str],
           code: Callable[[str], int], keys: list[str], value_kinds: dict[str, set[str]], md_keys: set[str],
           ms_start: np.ndarray) -> tuple[np.ndarray, ...]:
    """The XStats of the entries ``idx``: (id, key code, kind, int, double, object, order)."""
    sidx = spans(ms_start[idx], n_st)
    mid = np.repeat(key, n_st)
    kind = cols.ms_kind[sidx]
    keep = kind != 0
    sidx, mid, kind = sidx[keep], mid[keep], kind[keep]
    smid = cols.ms_mid[sidx]
    umid, inv = unique_inverse(smid)
    codes = np.asarray([code(stat_names.get(m, str(m))) for m in umid.tolist()], np.int64)[inv.reshape(-1)]
    ints, dbls, objs = cols.ms_int[sidx], cols.ms_dbl[sidx], cols.ms_obj[sidx]
    refs = np.flatnonzero(kind == 6)
    if len(refs):
        objs = objs.copy()
        objs[refs] = [stat_names.get(v & ((1 << 64) - 1), "") for v in ints[refs].tolist()]
    pairs = unique(codes * 8 + kind)
    for c, k in zip((pairs // 8).tolist(), (pairs % 8).tolist()):
        value_kinds.setdefault(keys[c], set()).add(N.VALUE_KINDS[k])
        md_keys.add(keys[c])
    return mid, codes, kind, ints, dbls, objs, np.full(len(mid), _SEQ_STATS, np.int64)


def _fixed(mid: np.ndarray, code: int, kind: int, objs: np.ndarray, seq: int) -> tuple[np.ndarray, ...]:
    n = len(mid)
    return (np.asarray(mid, np.int64), np.full(n, code, np.int64), np.full(n, kind, np.uint8), np.zeros(n, np.int64),
            np.zeros(n), objs, np.full(n, seq, np.int64))
