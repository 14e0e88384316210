"""Memory over time: allocated bytes per device and allocator, the peak and what is live
at it, and the memory columns of ``section_stats``.

Reads the memory events of ``trace/memory.py`` (any event with an ``alloc_bytes``
stat); the process RSS counter (``process.rss_bytes``) stands in where a trace has no
allocator events. See docs/analysis.md, "Memory".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..derive.intervals import RangeMinMax, innermost
from ..derive.projection import section_rows
from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.memory import Memory, memory_events
from .frames import factorize, frame, order_desc
from ..trace.sorting import member, unique, union
from .window import Selection, WindowArg, selection, view
from .window_counting import inside

if TYPE_CHECKING:
    from .table import Table

#: live allocations listed per series in ``memory_at_peak``
TOP_LIVE = 20


def memory(trace: Trace) -> Memory:
    """The trace's memory events, computed once per trace (of a windowed view: the events
    inside the selected steps, each series starting from what it held when they began)."""
    m = cache.memo(trace, "memory_events", memory_events)
    sel = selection(trace)
    if sel is None or not len(m.rows):
        return m
    return cache.memo(trace, "memory_events_window", lambda _t: _inside(m, sel))


def _inside(m: Memory, sel: Selection) -> Memory:
    """``m`` with the events ``sel`` analyses (``window_counting.inside``: in ``[lo, hi)``, not
    between a schedule's stretches); a series' start is its level just before ``lo``."""
    keep = inside(sel, m.ts)
    start = m.start.copy()
    for s in range(m.n_series):
        a, b = m.bounds(s)
        before = np.flatnonzero(~keep[a:b] & (m.ts[a:b] < sel.lo))
        if len(before):
            start[s] = m.level[a + before[-1]]
    k = np.flatnonzero(keep)
    return Memory(m.rows[k], m.ts[k], m.series[k], m.delta[k], m.addr[k], m.has_addr[k], m.level[k],
                  m.reserved[k], m.device, m.plane, m.allocator, start, m.from_totals)


def memory_timeline(trace: Trace, window: WindowArg = None) -> Table:
    """One row per allocation or free, per series (device the memory is on, allocator),
    in time order. Columns: ``device`` (plane name), ``allocator``, ``ts_ns``,
    ``bytes`` (allocated > 0, freed < 0), ``allocated_bytes`` (the series' bytes just
    after the event: the allocator's total where it reports one, else the sum since the
    profile began), ``reserved_bytes`` (NaN if unknown), ``category`` (what the block
    holds, where the source says; else empty), ``category_bytes`` (bytes held in that
    category after the event). ``window``: the events inside the steps it selects."""
    trace = view(trace, window)
    m = memory(trace)
    cat = _text(trace, keys.MEMORY_CATEGORY, m.rows)
    cat_bytes = np.zeros(len(m.rows), np.int64)
    if len(m.rows):
        codes, _ = factorize(np.asarray(cat, dtype=object))
        key = m.series * (codes.max() + 1) + codes
        order = np.argsort(key, kind="stable")
        cs = np.cumsum(m.delta[order])
        first = np.r_[True, key[order][1:] != key[order][:-1]]
        starts = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
        cat_bytes[order] = cs - np.r_[0, cs][starts]
    return frame({
        "device": np.array(m.device, dtype=object)[m.series] if len(m.rows) else np.zeros(0, object),
        "allocator": np.array(m.allocator, dtype=object)[m.series] if len(m.rows) else np.zeros(0, object),
        "ts_ns": m.ts, "bytes": m.delta, "allocated_bytes": m.level, "reserved_bytes": m.reserved,
        "category": cat, "category_bytes": cat_bytes,
    })


def memory_peak(trace: Trace, window: WindowArg = None) -> Table:
    """One row per series: ``device`` (plane name) and ``allocator``; ``start_bytes``
    (held before the first event), ``peak_bytes`` and ``peak_ns`` (the first time it was
    reached), ``end_bytes``,
    ``allocations`` and ``frees`` (counts), ``allocated_total_bytes`` (summed over every
    allocation), ``live_at_peak`` and ``live_at_peak_bytes`` (allocations made during
    the profile and not freed at the peak), ``from_allocator`` (True when the levels
    are the allocator's own totals). Sorted by peak, largest first. ``window``: over the
    steps it selects (``start_bytes``: held when the first of them began; live: allocated
    in them)."""
    trace = view(trace, window)
    m = memory(trace)
    out: dict[str, list] = {k: [] for k in ("device", "allocator", "start_bytes", "peak_bytes", "peak_ns",
                                            "end_bytes", "allocations", "frees", "allocated_total_bytes",
                                            "live_at_peak", "live_at_peak_bytes", "from_allocator")}
    for s, lo, hi, p, live in _peaks(trace):
        d = m.delta[lo:hi]
        vals = (m.device[s], m.allocator[s], int(m.start[s]), int(max(m.level[p], m.start[s])), int(m.ts[p]),
                int(m.level[hi - 1]), int((d > 0).sum()), int((d < 0).sum()), int(d[d > 0].sum()),
                len(live), int(m.delta[live].sum()), bool(m.from_totals[s]))
        for k, v in zip(out, vals):
            out[k].append(v)
    cols = {k: np.array(v, dtype=object if k in ("device", "allocator") else None) if v else
            np.zeros(0, object if k in ("device", "allocator") else np.int64) for k, v in out.items()}
    return frame(cols, order=order_desc(cols["peak_bytes"]))


def _peaks(trace: Trace) -> list[tuple[int, int, int, int, np.ndarray]]:
    """Per series with events (in the window): (series, its first and past-last event,
    its peak's event: the first at the highest level, the allocations live there:
    :func:`_live_at`). Computed once per trace: ``memory_peak``, ``memory_at_peak`` and
    both of the findings' ``peak_holders`` read the same peaks."""
    def compute(t: Trace) -> list[tuple[int, int, int, int, np.ndarray]]:
        m = memory(t)
        out = []
        for s in range(m.n_series):
            lo, hi = m.bounds(s)
            if lo == hi:  # no event of this series in the window
                continue
            p = lo + int(np.argmax(m.level[lo:hi]))
            out.append((s, lo, hi, p, _live_at(m, lo, hi, p)))
        return out

    return cache.memo(trace, "memory_peaks", compute)


def _live_at(m: Memory, lo: int, hi: int, p: int) -> np.ndarray:
    """Indices (into the event columns) of allocations of one series made at or before
    event ``p`` and not freed by then: an allocation is freed by the next event of the
    same address when that is a free."""
    idx = np.arange(lo, p + 1)
    alloc = idx[m.delta[idx] > 0]
    addr_idx = idx[m.has_addr[idx]]
    if not len(addr_idx):
        return _live_by_size(m, idx) if (m.delta[idx] < 0).any() else alloc
    order = addr_idx[np.lexsort((addr_idx, m.addr[addr_idx]))]
    nxt = np.full(len(order), -1, np.int64)
    same = m.addr[order][1:] == m.addr[order][:-1]
    nxt[:-1] = np.where(same, order[1:], -1)
    freed = np.zeros(hi, bool)
    closes = (nxt >= 0) & (m.delta[order] > 0)
    closes[closes] &= m.delta[nxt[closes]] < 0
    freed[order[closes]] = True
    return alloc[~freed[alloc]]


def _live_by_size(m: Memory, idx: np.ndarray) -> np.ndarray:
    """:func:`_live_at` where no event has an address (torch 1.8's [memory] events): a
    free closes the latest still open allocation of its size, so the live bytes add up
    to the bytes held whenever each free's allocation is in the profile; which of the
    blocks of one size is live is a guess."""
    open_: dict[int, list[int]] = {}
    for i, d in zip(idx.tolist(), m.delta[idx].tolist()):
        if d > 0:
            open_.setdefault(d, []).append(i)
        elif d < 0 and open_.get(-d):
            open_[-d].pop()
    return np.array(sorted(i for v in open_.values() for i in v), np.int64)


def memory_at_peak(trace: Trace, top: int = TOP_LIVE, window: WindowArg = None) -> Table:
    """The allocations live at each series' peak (``memory_peak``), largest first, at
    most ``top`` per series: ``device``, ``allocator``, ``bytes``, ``ts_ns`` (when it was
    allocated), ``addr``, ``thread``, ``op`` (innermost framework op around the
    allocation on its thread), ``section`` (innermost section), ``stack`` (the spans
    around it on its thread, outermost first: Python functions where the trace has
    them, else sections and ops). ``window``: at the peak inside the steps it selects."""
    trace = view(trace, window)
    m = memory(trace)
    picks = [live[np.argsort(-m.delta[live], kind="stable")][:top] for _, _, _, _, live in _peaks(trace)]
    idx = np.concatenate(picks) if picks else np.zeros(0, np.int64)
    rows = m.rows[idx]
    op, section, stack = context(trace, rows)
    thread = np.array([trace.tracks[t].name for t in trace.events["track"][rows].tolist()], dtype=object)
    return frame({
        "device": np.array(m.device, dtype=object)[m.series[idx]] if len(idx) else np.zeros(0, object),
        "allocator": np.array(m.allocator, dtype=object)[m.series[idx]] if len(idx) else np.zeros(0, object),
        "bytes": m.delta[idx], "ts_ns": m.ts[idx],
        "addr": np.where(m.has_addr[idx], m.addr[idx], -1), "thread": thread,
        "op": op, "section": section, "stack": stack,
    })


def context(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op, section, stack) around each event row, on its own thread ("" where none);
    an event's own ``op`` and ``stack`` stats (a memory snapshot's frames) where it has them."""
    if not len(rows):  # (a trace without memory events: no need to look at its spans)
        return np.zeros(0, object), np.zeros(0, object), np.zeros(0, object)
    ev = trace.events
    th = cache.threads(trace)
    q_thread, q_ts = th[ev["track"][rows]], ev["start_ns"][rows]
    ops = trace.rows_of_kind(Kind.CPU_OP)
    secs = section_rows(trace)
    py = trace.rows_of_kind(Kind.PYTHON)
    frames = py if len(py) else union(secs, ops)
    op, stack = ops_around(trace, rows), _stacks(trace, frames, q_thread, q_ts)
    col = trace.stats.get(keys.STACK)
    if col is not None:
        has, vals = col.lookup(rows)
        stack[has] = [str(v) for v in vals]
    return op, _around(trace, rows, secs), stack


#: torch's tensor factories: an allocation inside one is told by the op that called it
#: (``aten::linear``, ``aten::_to_copy``...), which is what holds the memory, where one does
ALLOCATING = frozenset(f"aten::{n}" for n in (
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "resize_"))


def ops_around(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The framework op around each event row on its own thread (the innermost, but for a
    tensor factory of :data:`ALLOCATING` inside another op: that op), or the event's own
    ``op`` stat where it has one (a memory snapshot's); "" where none."""
    ops = trace.rows_of_kind(Kind.CPU_OP)
    op = _around(trace, rows, ops)
    factory = np.fromiter((x in ALLOCATING for x in op.tolist()), bool, len(op))
    if factory.any():
        ids = np.array([i for i in map(trace.string_id, ALLOCATING) if i >= 0], np.int64)
        caller = _around(trace, rows[factory], ops[~member(trace.events["name"][ops], ids)])
        op[np.flatnonzero(factory)[caller != ""]] = caller[caller != ""]
    col = trace.stats.get(keys.OP)
    if col is not None and len(rows):
        has, vals = col.lookup(rows)
        op[has] = [str(v) for v in vals]
    return op


def _around(trace: Trace, rows: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """The name of the innermost of ``cands`` (spans) around each event row on its own
    thread; "" where none."""
    out = np.full(len(rows), "", dtype=object)
    if len(cands) and len(rows):
        ev = trace.events
        th = cache.threads(trace)
        hit = innermost(th[ev["track"][cands]], ev["start_ns"][cands], ev["start_ns"][cands] + ev["dur_ns"][cands],
                        th[ev["track"][rows]], ev["start_ns"][rows])
        out[hit >= 0] = trace.names()[cands[hit[hit >= 0]]]
    return out


def _stacks(trace: Trace, frames: np.ndarray, q_thread: np.ndarray, q_ts: np.ndarray, depth: int = 12
            ) -> np.ndarray:
    """Names of the spans containing each point on its thread, outermost first, joined
    by " > " (the innermost ``depth``)."""
    out = np.full(len(q_ts), "", dtype=object)
    if not len(frames) or not len(q_ts):
        return out
    ev = trace.events
    th = cache.threads(trace)
    names = trace.names(frames)
    f_thread, f_s = th[ev["track"][frames]], ev["start_ns"][frames]
    f_e = f_s + ev["dur_ns"][frames]
    for i in range(len(q_ts)):  # only the few allocations live at a peak
        inside = np.flatnonzero((f_thread == q_thread[i]) & (f_s <= q_ts[i]) & (f_e > q_ts[i]))
        inside = inside[np.lexsort((-(f_e - f_s)[inside], f_s[inside]))][-depth:]
        out[i] = " > ".join(names[inside].tolist())
    return out


def _text(trace: Trace, key: str, rows: np.ndarray) -> np.ndarray:
    out = np.full(len(rows), "", dtype=object)
    col = trace.stats.get(key) if len(rows) else None
    if col is not None:
        has, vals = col.lookup(rows)
        out[has] = [str(v) for v in vals]
    return out


# ------------------------------------------------------------------ per section
def value_at(ts: np.ndarray, values: np.ndarray, base: float, t: np.ndarray) -> np.ndarray:
    """A step function at the times ``t``: the value just after the last change at or
    before each (``values[i]`` from ``ts[i]`` on, ascending), ``base`` before the first
    change or where there is none."""
    if not len(ts):
        return np.full(np.shape(t), base)
    i = np.searchsorted(ts, t, side="right") - 1
    return np.where(i >= 0, values[np.maximum(i, 0)], base)


class Level:
    """Bytes held over time as a step function (every series added up; else the process
    RSS): the value at any time, its min / max / time-weighted mean over spans."""

    def __init__(self, ts: np.ndarray, values: np.ndarray, base: float, source: str):
        self.ts, self.values, self.base, self.source = ts, values.astype(np.float64), float(base), source
        dt = np.diff(ts).astype(np.float64)
        self._integral = np.r_[0.0, np.cumsum(self.values[:-1] * dt)] if len(ts) else np.zeros(0)
        v = self.values.astype(np.int64)
        self._rmq = RangeMinMax(v, v) if len(v) else None

    @classmethod
    def of(cls, trace: Trace) -> Level | None:
        m = memory(trace)
        if len(m.rows):
            ts, vals, base = m.combined()
            return cls(ts, vals, base, "allocator")
        sid = trace.string_id(keys.COUNTER_RSS)
        c = trace.counters
        sel = c["name"] == sid if sid >= 0 else np.zeros(len(c["name"]), bool)
        if not sel.any():
            return None
        order = np.argsort(c["ts_ns"][sel], kind="stable")
        ts, vals = c["ts_ns"][sel][order], c["value"][sel][order]
        return cls(ts, vals, np.nan, "rss")

    def at(self, t: np.ndarray) -> np.ndarray:
        """Value just after every event at or before ``t`` (``base`` before the first)."""
        return value_at(self.ts, self.values, self.base, t)

    def _area(self, t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.ts, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = self._integral[j] + self.values[j] * (t - self.ts[j])
        return np.where(i >= 0, inside, self.base * (t - self.ts[0]))

    def over(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(min, max, time-weighted mean) over each span [a, b)."""
        entry = self.at(a)
        lo = np.searchsorted(self.ts, a, side="right")
        hi = np.searchsorted(self.ts, b, side="left")
        mn, mx = entry.copy(), entry.copy()
        if self._rmq is not None:
            valid, qmn, qmx = self._rmq.query(lo, hi)
            mn[valid] = np.fmin(entry[valid], qmn[valid])
            mx[valid] = np.fmax(entry[valid], qmx[valid])
        span = (b - a).astype(np.float64)
        mean = np.where(span > 0, (self._area(b) - self._area(a)) / np.maximum(span, 1), entry)
        return mn, mx, mean


def allocated_inside(trace: Trace, thread: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bytes allocated (frees not subtracted) by memory events on ``thread`` in [a, b)."""
    m = memory(trace)
    out = np.zeros(len(a), np.int64)
    alloc = m.delta > 0
    if not alloc.any() or not len(a):
        return out
    ev_thread = cache.threads(trace)[trace.events["track"][m.rows[alloc]]]
    ts, d = m.ts[alloc], m.delta[alloc]
    for t in unique(thread):
        on = ev_thread == t
        if not on.any():
            continue
        order = np.argsort(ts[on], kind="stable")
        tts, cs = ts[on][order], np.r_[0, np.cumsum(d[on][order])]
        q = thread == t
        out[q] = cs[np.searchsorted(tts, b[q], side="left")] - cs[np.searchsorted(tts, a[q], side="left")]
    return out


# ------------------------------------------------------------------ for the findings
def peak_holders(trace: Trace, by: str = "section") -> Table:
    """Bytes live at each series' peak, grouped by the ``section`` or ``op`` (``by``)
    that allocated them: ``device``, ``allocator``, ``holder`` ("" = none), ``bytes``,
    ``allocations``, ``share_pct`` (of the bytes live at the peak that were allocated
    during the profile). Largest first within each series."""
    m = memory(trace)
    names = ("device", "allocator", "holder", "bytes", "allocations", "share_pct")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in names}
    lives = [(s, live) for s, _, _, _, live in _peaks(trace) if len(live)]
    at = np.concatenate([live for _, live in lives]) if lives else np.zeros(0, np.int64)
    # every series' live allocations looked up at once (one interval search, not one a series)
    rows = m.rows[at]
    labels = _around(trace, rows, section_rows(trace)) if by == "section" else ops_around(trace, rows)
    cut = np.cumsum([0] + [len(live) for _, live in lives])
    for (s, live), a, b_ in zip(lives, cut[:-1], cut[1:]):
        for c, v in holder_rows(m.device[s], m.allocator[s], labels[a:b_], m.delta[live]).items():
            parts[c].append(v)
    empty = (np.zeros(0, object),) * 3 + (np.zeros(0, np.int64),) * 2 + (np.zeros(0),)
    return frame({c: np.concatenate(parts[c]) if parts[c] else e for c, e in zip(names, empty)})


def holder_rows(device: str, allocator: str, labels: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
    """One series' :func:`peak_holders` rows from its allocations live at the peak (their
    ``labels`` and ``nbytes``, in the order they were made)."""
    codes, uniq = factorize(np.asarray(labels, dtype=object))
    b = np.bincount(codes, weights=nbytes).astype(np.int64)
    n = np.bincount(codes)
    total = max(int(nbytes.sum()), 1)
    order = np.argsort(-b, kind="stable")
    return {"device": np.full(len(order), device, object), "allocator": np.full(len(order), allocator, object),
            "holder": np.asarray(uniq, dtype=object)[order], "bytes": b[order], "allocations": n[order],
            "share_pct": 100.0 * b[order] / total}


def step_levels(trace: Trace) -> Table:
    """Bytes held by each series at the end of every step: ``device``, ``allocator``,
    ``step``, ``end_ns``, ``held_bytes``. Empty without steps or memory events."""
    m = memory(trace)
    steps = cache.steps(trace)
    cols: dict[str, list] = {"device": [], "allocator": [], "step": [], "end_ns": [], "held_bytes": []}
    ends = np.asarray(steps.end, np.int64)
    order = np.argsort(ends, kind="stable")
    for s in range(m.n_series if len(ends) else 0):
        lo, hi = m.bounds(s)
        # (a series with no event in a window holds, all along it, what it held before)
        held = value_at(m.ts[lo:hi], m.level[lo:hi], m.start[s], ends[order])
        cols["device"] += [m.device[s]] * len(order)
        cols["allocator"] += [m.allocator[s]] * len(order)
        cols["step"] += np.asarray(steps.number)[order].tolist()
        cols["end_ns"] += ends[order].tolist()
        cols["held_bytes"] += held.tolist()
    return frame({k: np.array(v, dtype=object if k in ("device", "allocator") else np.int64) for k, v in cols.items()})
