"""torch's memory events at merge: kept inside their polyprof sections on the session
clock, and given torch's own categories where torch computed them.

Kineto times are mapped onto the session clock with an error bound of about a
microsecond, so a tensor freed just before a section ends can land just after it. But
torch's own copy of the section (the mirror the torch plugin opens and drops at merge)
was recorded on torch's clock: an allocation or free inside the copy happened inside
the section. Each such memory event is moved into its section's host span (to the
nearest end of it; nothing moves by more than the clock error, since the copy and the
section cover the same code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.stats import StatColumn


def snap_to_sections(t: Trace, start: np.ndarray, copies: np.ndarray, brackets: np.ndarray,
                     sections: Sequence[tuple], threads: dict[int, tuple[str, int]], track_tid: np.ndarray
                     ) -> np.ndarray:
    """``start`` (session times of ``t``'s events) with the memory events inside a
    section copy (rows ``copies``, entered within ``brackets``) clamped into the host
    span of that section. ``sections``: the recorder's (name, start, end, stats, ident);
    ``threads``: ident -> (name, native id)."""
    col = t.stats.get(keys.ALLOC_BYTES)
    if col is None or not len(col) or not len(copies) or not len(sections):
        return start
    mem = col.rows
    ev = t.events
    tr = ev["track"]
    from ...derive.intervals import innermost  # derive/ imports pandas: only when torch data is merged

    hit = innermost(tr[copies], ev["start_ns"][copies], ev["start_ns"][copies] + ev["dur_ns"][copies],
                    tr[mem], ev["start_ns"][mem])
    inside = hit >= 0
    if not inside.any():
        return start
    spans: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
    for name, s, e, _stats, ident in sections:
        tid = threads.get(ident, ("", ident))[1]
        starts, ends = spans.setdefault((tid, name), ([], []))
        starts.append(s)
        ends.append(e)
    sorted_spans = {}
    for key, (ss, es) in spans.items():
        o = np.argsort(ss, kind="stable")
        sorted_spans[key] = (np.asarray(ss, np.int64)[o], np.asarray(es, np.int64)[o])
    names = t.names(copies)
    out = start.copy()
    for m_row, c in zip(mem[inside].tolist(), hit[inside].tolist()):
        span = sorted_spans.get((int(track_tid[tr[copies[c]]]), str(names[c])))
        if span is None:
            continue
        # the listener opens the copy, then the section reads its start: the first one after
        i = int(np.searchsorted(span[0], brackets[c, 0], side="left"))
        if i >= len(span[0]) or span[1][i] <= span[0][i]:
            continue
        out[m_row] = min(max(out[m_row], span[0][i]), span[1][i] - 1)
    return out


def categories_of(prof: Any) -> dict[tuple[int, int], str] | None:
    """torch's own category of each allocation (parameter, activation, gradient, ...),
    keyed by (time ns, address), from its memory profile: only when the profiler ran
    with ``profile_memory``, ``record_shapes`` and ``with_stack`` (what torch's
    ``export_memory_timeline`` needs); None otherwise. torch's private API: any error
    is left to the caller to report."""
    if not all(getattr(prof, k, False) for k in ("profile_memory", "record_shapes", "with_stack")):
        return None
    from torch.profiler._memory_profiler import Action

    mp = prof._memory_profile()
    out: dict[tuple[int, int], str] = {}
    for t, action, (key, version), _size in mp.timeline:
        if action == Action.CREATE:
            cat = mp._categories.get(key, version)
            out[(int(t), int(key.storage.ptr))] = cat.name.lower() if cat is not None else "unknown"
    return out


def add_categories(t: Trace, cats: dict[tuple[int, int], str]) -> None:
    """Put ``memory_category`` on ``t``'s memory events (a Kineto trace as read, before
    alignment: its times are torch's): an allocation gets torch's category for its
    (time, address), a free the category of the last allocation of its address."""
    col, addr_col = t.stats.get(keys.ALLOC_BYTES), t.stats.get(keys.ADDR)
    if col is None or addr_col is None or not len(col):
        return
    has, addr = addr_col.lookup(col.rows)
    rows, delta = col.rows[has], col.values[has].astype(np.int64)
    addr = addr.astype(np.int64)
    ts = t.events["start_ns"][rows]
    order = np.lexsort((ts, addr))
    labels = np.full(len(rows), "", dtype=object)
    last: dict[int, str] = {}
    for i in order.tolist():
        a = int(addr[i])
        if delta[i] > 0:
            last[a] = labels[i] = cats.get((int(ts[i]), a), "unknown")
        else:
            labels[i] = last.pop(a, "unknown")
    t.stats[keys.MEMORY_CATEGORY] = StatColumn(rows, labels)
