"""Async slices (``b``/``e``/``n``), as Perfetto's JSON importer reads them.

An async event belongs to the track of its (category, id) pair: ``id`` and
``id2: {"global": ...}`` are global ids, ``id2: {"local": ...}`` is scoped to the event's
process; the track is named after the event (one track per name, as Perfetto's legacy
async tracks). On a track, ``b`` opens a slice and ``e`` closes the latest one open,
``n`` is an instant. A ``b`` never closed ends with the trace (stat ``incomplete``), an
``e`` with nothing open is dropped; an event with no id (or no pid) is dropped; all
counted in the reader's one warning line (``lenient.Dropped``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from ...trace import keys
from .events import _Event

if TYPE_CHECKING:
    from .collector import _Collector

_AB, _AE, _AN = "b", "e", "n"


def scope(e: _Event, pid_code: int) -> tuple | None:
    """The id part of an async event's track key: ("global", id text) or ("local", pid,
    id text); None when the event has none."""
    id2 = e.id2
    if isinstance(id2, dict) and id2:
        if "local" in id2:
            return ("local", pid_code, _text(id2["local"]))
        if "global" in id2:
            return ("global", _text(id2["global"]))
        return None
    if e.id is None:
        return None
    return ("global", _text(e.id))


def _text(v: Any) -> str:
    return v if isinstance(v, str) else msgspec.json.encode(v).decode()


def add(col: "_Collector", e: _Event, ph: str, pid: int, ts_ns: int, args: Any) -> None:
    """Keep one async event (few in a trace: one by one) and its args (a dict, or None)."""
    key = scope(e, pid)
    if key is None or e.pid is None:
        col.dropped.add(f"async {ph} events without an id or pid")
        return
    cat = e.cat if isinstance(e.cat, str) else _text(e.cat)
    name = e.name if isinstance(e.name, str) else _text(e.name)
    col.asyncs.append((pid, (cat, key, name), ph, ts_ns, name, cat, len(col.asyncs),
                       args if isinstance(args, dict) else None))


def pids(col: "_Collector") -> set[int]:
    """The pid codes that have async events (each needs a plane)."""
    return {a[0] for a in col.asyncs}


def build(col: "_Collector", planes: list[tuple[int, str]], base: int, last_ns: int) -> None:
    """Tracks and slices of the kept async events, after the other events."""
    if not col.asyncs:
        return
    b = col.b
    items = sorted(col.asyncs, key=lambda a: (a[3], a[6]))  # time, then file order
    tracks: dict[tuple, int] = {}
    open_: dict[int, list[int]] = {}
    starts: list[int] = []
    durs: list[int] = []
    names: list[str] = []
    cats: list[str] = []
    trk: list[int] = []
    incomplete: list[int] = []
    args: list[dict] = []
    for pid, key, ph, ts, name, cat, _, a in items:
        t = tracks.get(key)
        if t is None:
            plane = planes[pid][0]
            t = tracks[key] = b.track(plane, name, "async", -1_000_000 - len(tracks))
        if ph == _AE:
            stack = open_.get(t)
            if not stack:
                col.dropped.add("async e events with no b open")
                continue
            i = stack.pop()
            durs[i] = max(ts + base - starts[i], 0)
            for k, v in (a or {}).items():  # the end's args join the slice's
                args[i].setdefault(k, v)
            continue
        starts.append(ts + base)
        durs.append(0)
        names.append(name)
        cats.append(cat)
        trk.append(t)
        args.append(dict(a or {}))
        if ph == _AB:
            open_.setdefault(t, []).append(len(starts) - 1)
    last_ns = max(last_ns, max(starts, default=last_ns))
    for stack in open_.values():
        for i in stack:
            durs[i] = max(last_ns - starts[i], 0)
            incomplete.append(i)
    col.unended += len(incomplete)
    if not starts:
        return
    row0 = b.n_events
    b.events(np.asarray(trk, np.int32), b.intern_many(np.asarray(names, object)),
             np.asarray(starts, np.int64), np.asarray(durs, np.int64), b.intern_many(np.asarray(cats, object)))
    if incomplete:
        rows = row0 + np.asarray(sorted(incomplete), np.int64)
        b.add_stat(keys.INCOMPLETE, rows, np.ones(len(rows), np.int64))
    by_key: dict[str, tuple[list[int], list[Any]]] = {}
    for i, a in enumerate(args):
        for k, v in a.items():
            group = by_key.setdefault(k, ([], []))
            group[0].append(row0 + i)
            group[1].append(v)
    for k, (rows_k, vals) in by_key.items():  # typed as every other arg (deferred where not eager)
        col._add_stat(k, np.asarray(rows_k, np.int64), vals)
