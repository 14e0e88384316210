"""The allocations live at a memory peak when a rank is summarised window by window
(``ranks/stepwise.py``, docs/store.md).

Read whole, ``memory_at_peak`` lists the allocations made in the analysed steps and not
freed at each series' peak (``analyze.memory``), and ``memory_peak`` counts them: an
allocation made in an early window and freed after a peak in a later one is among them,
which the later window alone does not see. So each window hands the next, by value, the
allocations still live at its end (:func:`carry`: per series, their address, bytes, time
and the op, section, stack and thread around them, found in the window that made them),
and a window's allocations live at its peak are found among its own events after those
carried ones, as one series' events read whole are (``analyze.memory._live_at``: an
allocation is freed by the next event at its address, where that is a free). The merge
takes each series' table from the window holding its peak (``ranks/table_merge.py``).

The carry is bounded: at most :data:`CARRY` allocations per series, the largest (a rank
that leaks an allocation a step would carry them all). Beyond, the smallest are left
out (said in the log), and a later peak's table and live counts leave them out too.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import logs
from ..analyze.frames import column, frame
from ..analyze.memory import TOP_LIVE, _around, _live_at, _peaks, context, holder_rows, memory, ops_around
from ..derive.projection import section_rows
from ..analyze.table import Table
from ..trace.core import Trace
from ..trace.memory import Memory

log = logs.kept(__name__)

#: live allocations carried from one window to the next, per series, at most
CARRY = 1 << 12
#: the columns of ``memory_at_peak`` (``analyze.memory``)
COLUMNS = ("device", "allocator", "bytes", "ts_ns", "addr", "thread", "op", "section", "stack")


class Carried(NamedTuple):
    """One series' allocations live at a window's end, in the order they were made.
    ``match``: the address a later free must name to close it (a negative number, which
    nothing names, where the next event at its address was another allocation, as read
    whole); ``addr``: the address shown (-1: none)."""

    match: np.ndarray
    has_addr: np.ndarray
    nbytes: np.ndarray
    ts: np.ndarray
    addr: np.ndarray
    text: np.ndarray  # (n, 4): thread, op, section, stack


Live = dict[tuple[str, str], Carried]
#: per series, from the window holding its peak (the first with its most bytes): the peak's
#: bytes and its live allocations' bytes, ops and sections (``memory_peak_held_by_one``)
Holders = dict[tuple[str, str], tuple[int, np.ndarray, np.ndarray, np.ndarray]]

_NONE = Carried(np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int64),
                np.zeros(0, np.int64), np.zeros((0, 4), object))


def carry(view: Trace, tables: dict[str, Table], live: Live, holders: Holders | None = None) -> Live:
    """Window ``view``'s ``memory_at_peak`` and ``memory_peak``'s live columns with the
    allocations ``live`` carried from the windows before (in ``tables``, in place); the
    allocations live at its end, for the next window. ``holders`` (in place): each series'
    allocations live at its peak, where this window's peak is the highest so far."""
    if "memory_at_peak" not in tables and "memory_peak" not in tables:
        return live
    m = memory(view)
    out = dict(live)
    rows: list[tuple[Carried, str, str]] = []
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for s, lo, hi, p, _ in _peaks(view):
        key = (str(m.device[s]), str(m.allocator[s]))
        mine = _joined(m, lo, hi, live.get(key, _NONE))
        first = len(live.get(key, _NONE).nbytes)
        events = _events(mine)
        n = len(mine.nbytes)
        at_peak = _live_at(events, 0, n, first + p - lo)
        counts[key] = (len(at_peak), int(mine.nbytes[at_peak].sum()))
        top = at_peak[np.argsort(-mine.nbytes[at_peak], kind="stable")][:TOP_LIVE]
        rows.append((_take(view, m, lo, mine, top, first), key[0], key[1]))
        if holders is not None:
            _hold(view, m, lo, mine, at_peak, first, int(max(m.level[p], m.start[s])), holders, key)
        at_end = _kept(mine, _live_at(events, 0, n, n - 1), key)
        out[key] = _take(view, m, lo, mine, at_end, first)._replace(match=_closing(mine, at_end))
    if "memory_at_peak" in tables:
        tables["memory_at_peak"] = _table(rows)
    if "memory_peak" in tables and counts:
        tables["memory_peak"] = _with_counts(tables["memory_peak"], counts)
    return out


def _events(mine: Carried) -> Memory:
    """``mine`` as the event columns ``analyze.memory._live_at`` reads (the others empty)."""
    z = np.zeros(0, np.int64)
    return Memory(z, z, z, mine.nbytes, mine.match, mine.has_addr, z, np.zeros(0), [], z, [], z, np.zeros(0, bool))


def _joined(m: Memory, lo: int, hi: int, c: Carried) -> Carried:
    """The carried allocations ``c``, then the window's events ``lo:hi`` of the series (their
    text found when asked: :func:`_take`)."""
    return Carried(np.concatenate([c.match, m.addr[lo:hi]]), np.concatenate([c.has_addr, m.has_addr[lo:hi]]),
                   np.concatenate([c.nbytes, m.delta[lo:hi]]), np.concatenate([c.ts, m.ts[lo:hi]]),
                   np.concatenate([c.addr, np.where(m.has_addr[lo:hi], m.addr[lo:hi], -1)]),
                   np.concatenate([c.text, np.full((hi - lo, 4), None, object)]))


def _take(view: Trace, m: Memory, lo: int, mine: Carried, idx: np.ndarray, first: int) -> Carried:
    """The events ``idx`` of ``mine`` with their thread, op, section and stack: carried ones
    as carried, the window's (``first`` on: its events from ``lo``) found around them."""
    text = mine.text[idx].copy()
    new = idx >= first
    if new.any():
        rows = m.rows[lo + idx[new] - first]
        op, section, stack = context(view, rows)
        thread = np.array([view.tracks[t].name for t in view.events["track"][rows].tolist()], dtype=object)
        text[new] = np.stack([thread, op, section, stack], axis=1)
    return Carried(mine.match[idx], mine.has_addr[idx], mine.nbytes[idx], mine.ts[idx], mine.addr[idx], text)


def _hold(view: Trace, m: Memory, lo: int, mine: Carried, at_peak: np.ndarray, first: int, peak: int,
          holders: Holders, key: tuple[str, str]) -> None:
    """``holders[key]``: the allocations ``at_peak`` of ``mine`` with their op and section
    (carried ones as carried), when ``peak`` is the series' highest so far."""
    if key in holders and holders[key][0] >= peak:
        return
    op, section = mine.text[at_peak, 1].copy(), mine.text[at_peak, 2].copy()
    new = at_peak >= first
    if new.any():  # the window's own: looked up as analyze.memory.peak_holders does
        rows = m.rows[lo + at_peak[new] - first]
        op[new], section[new] = ops_around(view, rows), _around(view, rows, section_rows(view))
    holders[key] = (peak, mine.nbytes[at_peak], op, section)


def holder_table(holders: Holders, by: str) -> Table:
    """The rank's ``analyze.memory.peak_holders(trace, by)`` from the windows' ``holders``."""
    parts = [holder_rows(d, a, op if by == "op" else section, nbytes)
             for (d, a), (_, nbytes, op, section) in sorted(holders.items())]
    names = ("device", "allocator", "holder", "bytes", "allocations", "share_pct")
    empty = (np.zeros(0, object),) * 3 + (np.zeros(0, np.int64),) * 2 + (np.zeros(0),)
    return frame({c: np.concatenate([p[c] for p in parts]) if parts else e for c, e in zip(names, empty)})


def _kept(mine: Carried, at_end: np.ndarray, key: tuple[str, str]) -> np.ndarray:
    """The allocations live at the window's end that are carried: at most :data:`CARRY`,
    the largest (ties: the earliest), in the order they were made."""
    if len(at_end) <= CARRY:
        return at_end
    log.info("%s %s: %d allocations live across windows; the %d largest are carried (memory_at_peak and its live "
             "counts at a later peak leave the others out)", *key, len(at_end), CARRY)
    return np.sort(at_end[np.argsort(-mine.nbytes[at_end], kind="stable")][:CARRY])


def _closing(mine: Carried, idx: np.ndarray) -> np.ndarray:
    """The address that closes each allocation ``idx`` of ``mine`` in a later window: its
    own where it was the last event at that address, else one nothing names (a negative
    number: read whole, the next event at its address was an allocation, so it stays live)."""
    last = np.ones(len(mine.match), bool)
    with_addr = np.flatnonzero(mine.has_addr)
    if len(with_addr):
        order = with_addr[np.lexsort((with_addr, mine.match[with_addr]))]
        last[order[:-1][mine.match[order][1:] == mine.match[order][:-1]]] = False
    return np.where(last[idx], mine.match[idx], -(1 << 62) - idx.astype(np.int64))


def _table(rows: list[tuple[Carried, str, str]]) -> Table:
    """``memory_at_peak``'s rows: per series (in the window's series order), its top live
    allocations at the peak."""
    cols: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    for got, device, allocator in rows:
        cols["device"].append(np.full(len(got.nbytes), device, object))
        cols["allocator"].append(np.full(len(got.nbytes), allocator, object))
        cols["bytes"].append(got.nbytes)
        cols["ts_ns"].append(got.ts)
        cols["addr"].append(got.addr)
        for k, c in enumerate(("thread", "op", "section", "stack")):
            cols[c].append(got.text[:, k])
    text = ("device", "allocator", "thread", "op", "section", "stack")
    return frame({c: np.concatenate(v) if v else np.zeros(0, object if c in text else np.int64)
                  for c, v in cols.items()})


def _with_counts(t: Table, counts: dict[tuple[str, str], tuple[int, int]]) -> Table:
    """``memory_peak`` with each series' allocations live at its peak counted with the
    carried ones."""
    n = np.asarray(column(t, "live_at_peak"), np.int64).copy()
    b = np.asarray(column(t, "live_at_peak_bytes"), np.int64).copy()
    for i, key in enumerate(zip(column(t, "device").tolist(), column(t, "allocator").tolist())):
        if key in counts:
            n[i], b[i] = counts[key]
    return t.with_columns(live_at_peak=n, live_at_peak_bytes=b)
