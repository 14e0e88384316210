"""Arrow views of a Trace, for pandas, DuckDB, Parquet and the native file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa

from ..errors import TraceSchemaError
from .arrow_arrays import array as _array

if TYPE_CHECKING:
    from .core import Trace


def _dict_column(ids: np.ndarray, strings: list[str]) -> pa.Array:
    """``strings[ids]`` dictionary-encoded, the dictionary holding only the strings used,
    each once (pandas makes it the column's categories: a category column whose
    dictionary were the whole string table would list every name as a category)."""
    used, codes = _used(np.asarray(ids), len(strings))
    words = strings if used is None else [strings[i] for i in used.tolist()]
    if len(set(words)) != len(words):  # e.g. "XLA Ops" on every TPU: pandas wants unique categories
        first: dict[str, int] = {}
        remap = np.fromiter((first.setdefault(s, len(first)) for s in words), np.int32, len(words))
        codes, words = remap[codes], list(first)
    return pa.DictionaryArray.from_arrays(_array(codes.astype(np.int32, copy=False), pa.int32()),
                                          _array(words, pa.string()))  # no pandas


def _used(ids: np.ndarray, n: int) -> tuple[np.ndarray | None, np.ndarray]:
    """The distinct ids (ascending; None: all ``n``) and each id's position among them.
    Columnar: a mask over the ``n`` strings, or where that is the dearer, a sort of the ids."""
    if not len(ids) or len(ids) * 8 < n:
        used, codes = np.unique(ids, return_inverse=True)
        return used, codes.reshape(-1)
    seen = np.zeros(n, bool)
    seen[ids] = True
    if seen.all():
        return None, ids
    position = np.cumsum(seen, dtype=np.int32) - 1
    return np.flatnonzero(seen), position[ids]


def stat_array(trace: "Trace", key: str) -> pa.Array:
    """One stat spread over all events, null where absent."""
    col = trace.stats[key]
    n = trace.n_events
    mask = np.ones(n, bool)
    mask[col.rows] = False
    if col.kind in "iuf":
        dense = np.zeros(n, col.values.dtype)
        dense[col.rows] = col.values
        return pa.array(dense, mask=mask)
    dense = np.full(n, None, object)
    dense[col.rows] = col.values
    is_bytes = any(isinstance(v, bytes) for v in col.values[:100])
    if is_bytes:
        dense[col.rows] = [v if isinstance(v, bytes) else str(v).encode() for v in col.values]
    return pa.array(dense, pa.binary() if is_bytes else pa.string())


def events_to_arrow(trace: "Trace", stats: Iterable[str] | None = None) -> pa.Table:
    ev = trace.events
    track_names = [t.name for t in trace.tracks]
    plane_names = [p.name for p in trace.planes]
    tp = trace.track_plane if trace.tracks else np.zeros(0, np.int32)
    planes = tp[ev["track"]] if trace.n_events else np.zeros(0, np.int32)
    cols = {
        "plane": _dict_column(planes, plane_names),
        "track_id": pa.array(ev["track"]),
        "track": _dict_column(ev["track"], track_names),
        "name": _dict_column(ev["name"], trace.strings),
        "category": _dict_column(ev["category"], trace.strings),
        "start_ns": pa.array(ev["start_ns"]),
        "dur_ns": pa.array(ev["dur_ns"]),
        "end_ns": pa.array(ev["start_ns"] + ev["dur_ns"]),
    }
    keys = list(trace.stats) if stats is None else _asked(trace, stats)
    for key, name in stat_columns(keys, cols).items():
        cols[name] = stat_array(trace, key)
    return pa.table(cols)


def _asked(trace: "Trace", stats: Iterable[str]) -> list[str]:
    """The stat keys asked for (one name or several), each a stat of ``trace``."""
    keys = [stats] if isinstance(stats, str) else list(stats)
    missing = [k for k in keys if k not in trace.stats]
    if missing:
        have = sorted(trace.stats)
        shown = ", ".join(have[:30]) + (f", ... ({len(have)} in all)" if len(have) > 30 else "")
        raise TraceSchemaError(f"no stat {', '.join(map(repr, missing))} in this trace; its stats: "
                               f"{shown or 'none'}")
    return keys


def stat_columns(keys: Iterable[str], base: Iterable[str]) -> dict[str, str]:
    """The column of each stat key (in ``keys``' order): the key, or ``stat.<key>`` (again,
    until unique) where a ``base`` column or another key's column has that name, case
    aside: SQL folds case, and DuckDB read torch's ``Bytes`` (a memory event's) beside
    ``bytes`` (a copy's) as ``Bytes`` and ``bytes_1``. Of keys alike but for case, the
    one in lower case keeps its name (the one a query types)."""
    keys = list(keys)
    taken = {b.lower() for b in base}
    out: dict[str, str] = {}
    for key in sorted(keys, key=lambda k: k != k.lower()):  # (stable: first come, first named)
        name = key
        while name.lower() in taken:
            name = f"stat.{name}"
        out[key] = name
        taken.add(name.lower())
    return {k: out[k] for k in keys}


def all_tables(trace: "Trace") -> dict[str, pa.Table]:
    fl, c = trace.flows, trace.counters
    return {
        "events": events_to_arrow(trace),
        "flows": pa.table({"src": fl["src"], "dst": fl["dst"], "id": fl["id"],
                           "category": _dict_column(fl["category"], trace.strings)}),
        "counters": pa.table({"plane": c["plane"], "name": _dict_column(c["name"], trace.strings),
                              "ts_ns": c["ts_ns"], "value": c["value"]}),
        "planes": pa.table({"id": [p.id for p in trace.planes], "name": [p.name for p in trace.planes],
                            "kind": [p.kind for p in trace.planes], "vendor": [p.vendor for p in trace.planes],
                            "index": [p.index for p in trace.planes]}),
        "tracks": pa.table({"id": [t.id for t in trace.tracks], "plane": [t.plane for t in trace.tracks],
                            "name": [t.name for t in trace.tracks], "kind": [t.kind for t in trace.tracks],
                            "tid": [t.tid for t in trace.tracks]}),
    }
