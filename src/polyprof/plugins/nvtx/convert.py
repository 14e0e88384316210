"""One session's NVTX records (recorder.Capture) -> a Trace on the host plane.

- push/pop ranges (``nvtxRangePush*``/``nvtxDomainRangePushEx``, ``nvtx.annotate``,
  ``torch.cuda.nvtx.range_push``) become ``user_annotation`` ranges on the thread that
  pushed them: polyprof sections, so they project onto the device work their launches
  caused, as polyprof's own sections do. A pop closes the innermost open push of its
  thread and domain; pairs are found without a Python loop (by nesting level);
- start/end ranges (``nvtxRangeStart*``/``End``, may end on another thread and overlap)
  on one "NVTX (process)" track, paired by range id;
- marks as ``mark`` instants on their thread.

Each event's domain (when not the default), ARGB color, category and the category's name
(``nvtxNameCategory``, per domain) are stats; a thread the host plugin does not know
(a C++ thread) takes the name ``nvtxNameOsThread`` gave it. The timestamps are
CLOCK_MONOTONIC already: the session's clock.
"""

from __future__ import annotations

import os

import numpy as np

from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from .recorder import END, MARK, NAMED_CATEGORY, NAMED_THREAD, POP, PUSH, START, Capture

CAT_ANNOTATION = "user_annotation"
NVTX_DOMAIN = "nvtx_domain"  # the cupti plugin's stat of the same name
NVTX_COLOR = "nvtx_color"
NVTX_CATEGORY = "nvtx_category"
NVTX_CATEGORY_NAME = "nvtx_category_name"  # nvtxNameCategory / nvtxDomainNameCategory
PROCESS_TRACK = "NVTX (process)"


def texts(strings: bytes, ids: np.ndarray) -> np.ndarray:
    """The text of each string id (0: ""), decoded once per distinct id."""
    uniq, inv = np.unique(ids, return_inverse=True)
    out = np.empty(len(uniq), object)
    for i, sid in enumerate(uniq.tolist()):
        if sid == 0 or sid > len(strings):
            out[i] = ""
            continue
        end = strings.find(b"\0", sid - 1)
        out[i] = strings[sid - 1:end if end >= 0 else len(strings)].decode("utf-8", "replace")
    return out[inv.reshape(-1)]


def pair_push_pop(kind: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(push rows, pop rows) of the ranges closed, in record order per group. A push at
    nesting level L pairs with the next pop of its group back to level L; pops with no
    push (opened before the session) and pushes with no pop (open at stop) pair with none."""
    rows = np.flatnonzero((kind == PUSH) | (kind == POP))
    if not len(rows):
        return rows, rows
    order = np.lexsort((rows, group[rows]))
    r, g = rows[order], group[rows][order]
    step = np.where(kind[r] == PUSH, 1, -1)
    depth = np.cumsum(step)
    first = np.r_[True, g[1:] != g[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(len(r)), 0))
    depth = depth - (depth[base] - step[base])  # depth after each record, within its group
    level = np.where(step > 0, depth, depth + 1)  # a push's level after it, a pop's before it
    o2 = np.lexsort((r, level, g))
    r2, g2, l2, push = r[o2], g[o2], level[o2], step[o2] > 0
    hit = np.flatnonzero(push[:-1] & ~push[1:] & (g2[:-1] == g2[1:]) & (l2[:-1] == l2[1:]))
    return r2[hit], r2[hit + 1]


def pair_start_end(kind: np.ndarray, range_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start rows, end rows) that share a range id."""
    s, e = np.flatnonzero(kind == START), np.flatnonzero(kind == END)
    if not len(s) or not len(e):
        return s[:0], e[:0]
    order = np.argsort(range_id[e], kind="stable")
    ids = range_id[e][order]
    pos = np.minimum(np.searchsorted(ids, range_id[s]), len(ids) - 1)
    ok = ids[pos] == range_id[s]
    return s[ok], e[order][pos[ok]]


def build(cap: Capture, threads: dict[int, str] | None = None,
          pid: int | None = None) -> tuple[Trace, dict[str, int]]:
    """The Trace of ``cap`` and what it holds (ranges, marks, what stayed open at stop);
    ``threads``: native thread id -> name (the host plugin's)."""
    ev = cap.events
    b = TraceBuilder()
    host = b.plane(keys.HOST_PLANE, "host", pid=os.getpid() if pid is None else pid)
    kind = ev["kind"].astype(np.int64)
    tid = ev["tid"].astype(np.int64)
    domain = ev["domain"].astype(np.int64)
    names = texts(cap.strings, ev["name"])
    uniq, inv = np.unique(tid, return_inverse=True)
    names_of = dict(threads or {})
    nm = cap.namings
    for row in np.flatnonzero(nm["what"] == NAMED_THREAD).tolist():  # nvtxNameOsThread, where the host has none
        names_of.setdefault(int(nm["key"][row]), str(texts(cap.strings, nm["name"][row:row + 1])[0]))
    thread_track = np.array([b.track(host, names_of.get(t, f"Thread {t}"), "thread", tid=t) for t in uniq.tolist()],
                            np.int32)[inv.reshape(-1)] if len(uniq) else np.zeros(0, np.int32)
    counts: dict[str, int] = {}
    push, pop = pair_push_pop(kind, (tid << 32) | domain)
    counts["ranges"] = len(push)
    counts["ranges_open_at_stop"] = int((kind == PUSH).sum()) - len(push)
    start, end = pair_start_end(kind, ev["range"].astype(np.int64))
    counts["start_end_ranges"] = len(start)
    counts["start_end_open_at_stop"] = int((kind == START).sum()) - len(start)
    marks = np.flatnonzero(kind == MARK)
    counts["marks"] = len(marks)
    t = ev["t"]
    parts = []
    if len(push):
        parts.append((push, thread_track[push], t[pop] - t[push], CAT_ANNOTATION))
    if len(start):
        tr = b.track(host, PROCESS_TRACK, "annotation", tid=0)
        parts.append((start, np.full(len(start), tr, np.int32), np.maximum(t[end] - t[start], 0), CAT_ANNOTATION))
    if len(marks):
        parts.append((marks, thread_track[marks], np.zeros(len(marks), np.int64), keys.CAT_MARK))
    for rows, tracks, dur, cat in parts:
        out = b.events(tracks, names[rows], t[rows], dur, cat)
        for key, col in ((NVTX_COLOR, ev["color"]), (NVTX_CATEGORY, ev["category"])):
            has = np.flatnonzero(col[rows] != 0)
            if len(has):
                b.add_stat(key, out[has], col[rows][has].astype(np.int64))
        has = np.flatnonzero(domain[rows] != 0)
        if len(has):
            b.add_stat(NVTX_DOMAIN, out[has], texts(cap.strings, ev["domain"][rows][has]))
        _category_names(b, cap, rows, out)
    return b.build(), counts


def _category_names(b: TraceBuilder, cap: Capture, rows: np.ndarray, out: np.ndarray) -> None:
    """The ``nvtx_category_name`` stat of the events ``rows`` (builder rows ``out``) whose
    (domain, category) was named."""
    nm = cap.namings[cap.namings["what"] == NAMED_CATEGORY]
    cat = cap.events["category"][rows].astype(np.int64)
    if not len(nm) or not cat.any():
        return
    key = (cap.events["domain"][rows].astype(np.int64) << 32) | cat
    known = (nm["domain"].astype(np.int64) << 32) | nm["key"].astype(np.int64)
    order = np.argsort(known, kind="stable")
    known, ids = known[order], nm["name"][order]
    pos = np.minimum(np.searchsorted(known, key), len(known) - 1)
    hit = np.flatnonzero((known[pos] == key) & (cat != 0))
    if len(hit):
        b.add_stat(NVTX_CATEGORY_NAME, out[hit], texts(cap.strings, ids[pos[hit]]))
