"""The XStats the writer puts on events, as columns: for every event row the stats it
carries, in order, each as a value kind (``decode``'s codes), a key and a value.

From the trace's stat columns (each written as the XStat value kind the source had, when
known), the XProf-named copies XProf's tools read (``xprof_stats``), polyprof's category
stat where an event's category is not its line's default, and the flow marks. Stats that
go back on event metadata instead (``metadata_level``) are left out per event.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace.core import Trace
from ..formats.export_ids import SourceIds
from .xprof_costs import device_costs, plane_columns
from .xprof_stats import xprof_columns
from .xspace_plane import json_text
from ..formats.xspace import names as N

_FIELD_KIND = {"double_value": 1, "uint64_value": 2, "int64_value": 3, "str_value": 4, "bytes_value": 5, "ref": 6}


def column_kinds(trace: Trace, meta_x: dict[str, Any]) -> tuple[dict[str, str], dict[str, str | None]]:
    """Per stat key: its value kind ('i', 'u', 'f', 'ref', or '' = by type), from the
    source's XSpace kinds when known, else the column's dtype; and the XStat field all
    its values go to, when one field fits them all (else None: value by value)."""
    src_kinds: dict[str, list[str]] = meta_x.get("stat_value_kinds", {}) or {}
    col_kind: dict[str, str] = {}
    field_of: dict[str, str | None] = {}
    for key, col in trace.stats.items():
        k = col.kind
        known = set(src_kinds.get(key, ()))
        if k == "O" and known == {"ref_value"}:
            k = "ref"
        elif k == "i" and known == {"uint64_value"}:
            k = "u"
        elif k == "O":
            k = ""
        col_kind[key] = k
        field: str | None = None
        if k == "f":
            field = "double_value"
        elif k == "i":
            field = "int64_value"
        elif k == "u":
            field = "uint64_value" if (not len(col.values) or col.values.min() >= 0) else "int64_value"
        elif k in ("ref", "") and len(col.values) and _all_of(col.values, str):
            field = "ref" if k == "ref" else "str_value"
        elif k == "" and len(col.values) and _all_of(col.values, bytes):
            field = "bytes_value"
        field_of[key] = field
    return col_kind, field_of


def _all_of(values: np.ndarray, t: type) -> bool:
    from pandas.api.types import infer_dtype

    if t is str:
        return infer_dtype(values, skipna=False) == "string"
    return infer_dtype(values, skipna=False) == "bytes"


def metadata_level(trace: Trace, md_keys: set[str], ids: SourceIds | None = None
                   ) -> tuple[np.ndarray, dict[int, dict[str, Any]]]:
    """Which stats can go back on event metadata: those every event of one
    (plane, name, long name) group carries with one value, as the source had them.

    Returns each event's group code and, per group, the stats that are metadata-level
    (an id column's values as ``ids`` writes them).
    """
    import pandas as pd

    n = trace.n_events
    keys_ = [k for k in md_keys if k in trace.stats]
    if not n or not keys_:
        return np.zeros(n, np.int64), {}
    long_col = trace.stats.get(N.STAT_LONG_NAME)
    long_ids = (pd.factorize(long_col.dense(n, ""))[0] if long_col is not None
                else np.zeros(n, np.int64)).astype(np.int64)
    names = trace.events["name"].astype(np.int64)
    key = (trace.event_planes().astype(np.int64) * (int(names.max()) + 1) + names) * (int(long_ids.max()) + 1) + long_ids
    _, groups = np.unique(key, return_inverse=True)
    groups = groups.reshape(-1).astype(np.int64)
    n_groups = int(groups.max()) + 1
    size = np.bincount(groups, minlength=n_groups)
    out: dict[int, dict[str, Any]] = {}
    for k in keys_:
        col = trace.stats[k]
        values = ids.values(k, col) if ids is not None else col.values
        codes = np.asarray(pd.factorize(values)[0], np.int64)  # missing values (NaN, None): -1
        valid = codes >= 0
        g = groups[col.rows[valid]]
        codes = codes[valid]
        count = np.bincount(g, minlength=n_groups)
        lo = np.full(n_groups, np.iinfo(np.int64).max)
        hi = np.full(n_groups, -1)
        np.minimum.at(lo, g, codes)
        np.maximum.at(hi, g, codes)
        ok = (count == size) & (lo == hi)  # every event of the group, one value
        if not ok.any():
            continue
        first_g, first_i = np.unique(g, return_index=True)
        sel = ok[first_g]
        vals = values[valid][first_i[sel]].tolist()
        for grp, v in zip(first_g[sel].tolist(), vals):
            out.setdefault(grp, {})[k] = v
    return groups, out


def value_parts(values: Any, kind: str, field: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kind code, int, double, object) columns of ``values`` written as ``field`` (or,
    for None, value by value as :func:`xspace_plane.set_value` would)."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    n = len(arr)
    ints, dbls = np.zeros(n, np.int64), np.zeros(n, np.float64)
    objs = np.full(n, None, object)
    if field is None and arr.dtype.kind in "iuf":
        field = "double_value" if arr.dtype.kind == "f" or kind == "f" else (
            "uint64_value" if arr.dtype.kind == "u" and kind == "u" else None)
        if field is None and arr.dtype.kind == "i":
            field = "uint64_value" if kind == "u" and (arr >= 0).all() else "int64_value"
    if field is None and arr.dtype == object and kind in ("", "ref"):
        from pandas.api.types import infer_dtype

        inferred = infer_dtype(arr, skipna=False)  # one pass in C: most columns hold one type
        if inferred == "string":
            field = "ref" if kind == "ref" else "str_value"
        elif inferred == "bytes" and kind == "":
            field = "bytes_value"
        elif inferred == "floating" and kind == "":
            arr, field = arr.astype(np.float64), "double_value"
    if field is None:
        return _by_value(arr.tolist(), kind)
    code = _FIELD_KIND[field]
    if code == 1:
        dbls = arr.astype(np.float64)
    elif code in (2, 3):
        if arr.dtype.kind == "u" and code == 3:  # int64 range only; larger values go as uint64
            big = arr >= 2**63
            return (np.where(big, 2, 3).astype(np.uint8), arr.astype(np.uint64).view(np.int64), dbls, objs)
        ints = arr.astype(np.uint64).view(np.int64) if arr.dtype.kind == "u" else arr.astype(np.int64)
    else:
        objs = arr.astype(object)
    return np.full(n, code, np.uint8), ints, dbls, objs


def _by_value(vals: list[Any], kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kind codes and values one by one: the rules of ``xspace_plane.set_value``."""
    n = len(vals)
    codes = np.zeros(n, np.uint8)
    ints, dbls = np.zeros(n, np.int64), np.zeros(n, np.float64)
    objs = np.full(n, None, object)
    for i, v in enumerate(vals):
        if kind == "ref" and isinstance(v, str):
            codes[i], objs[i] = 6, v
        elif kind in ("i", "u") and not isinstance(v, (str, bytes)):
            x = int(v)
            codes[i] = 2 if x >= 2**63 or (kind == "u" and x >= 0) else 3
            ints[i] = x - 2**64 if x >= 2**63 else x
        elif kind == "f":
            codes[i], dbls[i] = 1, float(v)
        elif isinstance(v, bool):
            codes[i], ints[i] = 3, int(v)
        elif isinstance(v, (int, np.integer)):
            x = int(v)
            if 2**63 <= x < 2**64:
                codes[i], ints[i] = 2, x - 2**64
            elif -2**63 <= x < 2**63:
                codes[i], ints[i] = 3, x
            else:  # an integer no XStat can hold
                codes[i], objs[i] = 4, str(x)
        elif isinstance(v, (float, np.floating)):
            codes[i], dbls[i] = 1, float(v)
        elif isinstance(v, (bytes, bytearray, memoryview)):
            codes[i], objs[i] = 5, bytes(v)
        elif isinstance(v, str):
            codes[i], objs[i] = 4, v
        else:
            codes[i], objs[i] = 4, json_text(v)
    return codes, ints, dbls, objs


class WrittenStats:
    """Every event's XStats, sorted by event row (in each row, the order they are written)."""

    def __init__(self, trace: Trace, meta_x: dict[str, Any], default_cats: np.ndarray):
        self.keys: list[str] = []
        self._code: dict[str, int] = {}
        parts: list[tuple[np.ndarray, ...]] = []
        aliases = {p: x for x, p in N.XPROF_ALIASES.items() if p in trace.stats and x not in trace.stats}
        self.col_kind, field_of = column_kinds(trace, meta_x)
        n = trace.n_events
        if n:  # polyprof's category, where it is not the line's default
            rows = np.flatnonzero(trace.events["category"] != default_cats)
            if len(rows):
                vals = trace._string_array[trace.events["category"][rows]]
                parts.append(self._part(N.STAT_CATEGORY, rows, value_parts(vals, "", "str_value")))
        skip = {N.STAT_LONG_NAME}
        skip.update(k for k in meta_x.get("alias_keys", []) or []
                    if any(x in trace.stats for x, p in N.XPROF_ALIASES.items() if p == k))
        ids = SourceIds(trace)  # correlation, external and flow ids unique per source (formats/export_ids.py)
        self.groups, self.md_level = metadata_level(trace, set(meta_x.get("metadata_stat_keys", []) or []), ids)
        for key, col in trace.stats.items():
            if key in skip:
                continue
            vp = value_parts(ids.values(key, col), self.col_kind[key], field_of[key])
            for out_key in [key] + ([aliases[key]] if key in aliases else []):
                parts.append(self._part(out_key, col.rows, vp))
        # the stats XProf's GPU tools read (kernel details, framework op, step groups)
        self.added = {k: c for k, c in xprof_columns(trace).items() if k not in aliases.values()}
        for key, (rows_, vals) in self.added.items():
            parts.append(self._part(key, np.asarray(rows_, np.int64), value_parts(vals, "", None)))
        self.aliases = sorted({*aliases.values(), *self.added})
        # and those added on the device planes alone (the key is the trace's on others)
        costs = device_costs(trace)
        self.plane_added = plane_columns(trace, costs) if costs is not None else {}
        for key, (rows_, vals) in self.plane_added.items():
            parts.append(self._part(key, np.asarray(rows_, np.int64), value_parts(vals, "", None)))
        fl = trace.flows
        if len(fl["src"]):
            k = np.arange(1, len(fl["src"]) + 1)
            cat = trace._string_array[fl["category"]]
            marks = [f"{i}:{f}:{c}" for i, f, c in zip(k.tolist(), ids.flow_ids.tolist(), cat.tolist())]
            parts.append(self._part(N.STAT_FLOW_OUT, fl["src"], value_parts(np.asarray(marks, object), "",
                                                                            "str_value")))
            parts.append(self._part(N.STAT_FLOW_IN, fl["dst"], value_parts(k, "", "int64_value")))
        self._sort(parts, n)

    def _part(self, key: str, rows: np.ndarray, vp: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """(rows, key codes, kind codes, values, the objects of those of kind 4-6 alone): a
        double kept as its bits in the int64 values (a stat holds one value), and no object
        array a stat (19 bytes a stat less, of the 6.7 stats an event; docs/reliability.md)."""
        code = self._code.get(key)
        if code is None:
            code = self._code[key] = len(self.keys)
            self.keys.append(key)
        rows = np.asarray(rows, np.int64)
        kind, ints, dbls, objs = vp
        vals = np.where(kind == 1, dbls.view(np.int64), ints) if (kind == 1).any() else ints
        return (rows, np.full(len(rows), code, np.int32), kind, vals, objs[kind >= 4])

    def _sort(self, parts: list[tuple[np.ndarray, ...]], n: int) -> None:
        """The stats in event row order, a column at a time (each concatenated, ordered
        and its parts dropped before the next): ``objs``, the objects of the stats of kind
        4-6 in that order, ``obj_at`` those stats' positions."""
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.uint8), np.zeros(0, np.int64),
                 np.zeros(0, object))
        cols = [list(c) for c in zip(*parts)] if parts else [[e] for e in empty]
        parts.clear()
        order = np.argsort(np.concatenate(cols[0]), kind="stable")
        self.rows, self.codes = (np.concatenate(cols.pop(0))[order] for _ in range(2))
        kind = np.concatenate(cols.pop(0))
        self.kind = kind[order]
        self.vals = np.concatenate(cols.pop(0))[order]
        self.obj_at = np.flatnonzero(self.kind >= 4)
        src = np.searchsorted(np.flatnonzero(kind >= 4), order[self.obj_at])  # each one's place before the sort
        self.objs = np.concatenate(cols.pop(0))[src]
        del kind, order, src
        self.start = np.concatenate([[0], np.cumsum(np.bincount(self.rows, minlength=n))]).astype(np.int64)
        self.md_skip = np.zeros(len(self.rows), bool)
        if self.md_level:  # stats written on the event metadata instead
            pairs = {(g, self._code[k]) for g, d in self.md_level.items() for k in d if k in self._code}
            gk = self.groups[self.rows] * len(self.keys) + self.codes
            self.md_skip = np.isin(gk, np.asarray([g * len(self.keys) + c for g, c in pairs], np.int64))
            self.md_skip &= self.codes != self._code.get(N.STAT_CATEGORY, -1)

    def of_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stats per event of ``rows``, the indices of those stats in order)."""
        counts = self.start[rows + 1] - self.start[rows]
        idx = np.repeat(self.start[rows] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        keep = ~self.md_skip[idx]
        if not keep.all():
            owner = np.repeat(np.arange(len(rows)), counts)
            counts = np.bincount(owner[keep], minlength=len(rows)).astype(np.int64)
            idx = idx[keep]
        return counts, idx
