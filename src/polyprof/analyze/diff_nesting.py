"""Which of a diff's changed rows are one change: rows nested in one another (a torch op,
the autograd wrapper around it, the op it calls) whose per-step changes agree.

The ops and sections tables have a row per name, and host ops nest: one change of an op
moves every row around it and often the row of the op it calls, each tested and called
on its own (a CI A/A failure listed ``autograd::engine::evaluate_function:
ReluBackward0``, ``ReluBackward0`` and ``aten::threshold_backward`` as three faster
rows). The tables keep every row; the list of changes groups them:

* the nesting comes from the traces: per trace, each counted op and host section gets
  the op or section that directly encloses it on its OS thread (``nesting.parents``
  over both, after ``ops.merged_into`` merged an op into its namesake); per row, its
  time is summed by the row that encloses it, on each side;
* a row is called in several places (``aten::linear`` once in a section and once at
  the top: half its calls in each), and the change may be in one: a row's per-step
  change is split by those shares (the enclosing row's share of the row's time on side
  B times its mean per step in B, less the same in A), and its *enclosing row* is the
  one that holds at least :data:`AGREE` (80%) of its change (none where the change is
  at the top of its thread or spread out);
* a changed row and its enclosing row are one change where that row is changed too, the
  same way, and the change inside it, the inner row's own change and the outer row's are
  each at least :data:`AGREE` of the other, and every row of a change is within
  :data:`AGREE` of its lead's (along a chain of wrappers, each within 80% of the next): the inner row accounts for most of the outer's change and nothing else in the
  outer took a comparable part (an op whose two children moved opposite ways, or by
  comparable amounts, stays apart from each);
* the group's *lead*, the row the verdict names, is its innermost row (the op that did
  the work, not its wrappers), the one with the largest change where several are.

Each changed row (``Diff.changes``) says ``group`` (the number of its change, in the
list's order), ``lead`` and, on the lead, ``nested``: the other rows of its group
(table, name, per-step change, and ``relation`` to the lead: around, inside or beside).
The verdict's other lists of rows (those that moved within the noise, B's other work)
are grouped the same way (:func:`items`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..derive import cache
from ..derive.projection import section_rows
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import unique, unique_inverse
from .common import counted_kernel_rows
from .frames import column
from .inputs import CPU_PREFIXES
from .nesting import parents
from .ops import merged_into
from .window_counting import host_mask

#: the tables whose rows nest (host spans on OS threads)
NESTED = ("ops", "sections")
#: rows nested in one another are one change where each one's per-step change is at least this share of
#: the other's, and the inner row's change is at least this share inside the outer (torch's autograd wrapper
#: and its op moved by 342.6 and 342.1 µs: the rest of a wrapper's time is dispatch, a few µs a call; a
#: share a step below 1 leaves room for the noise of each row's mean, a few % here)
AGREE = 0.8


@dataclass
class Events:
    """One table's events in one trace: name ids, durations, step index (-1 outside);
    for ops and sections, the table (index in :data:`NESTED`, -1 none) and name id of the
    span directly around each."""

    name: np.ndarray
    dur: np.ndarray
    step: np.ndarray
    kind: np.ndarray | None = None  # activity class (kernels only)
    parent_table: np.ndarray | None = None
    parent_name: np.ndarray | None = None


@dataclass
class NestPairs:
    """One trace's nesting of one table: per (row, enclosing table, enclosing row) the
    row's time there, rows as indexes into the trace's names of that table (-1, -1: at
    the top)."""

    child: np.ndarray
    ptable: np.ndarray
    parent: np.ndarray
    total: np.ndarray


def table_events(trace: Trace) -> dict[str, Events]:
    """Kernels, ops and sections of one trace (those its window counts) with the step
    each belongs to, and for ops and sections the span around each."""
    ev = trace.events
    steps = cache.steps(trace)
    krows, kdur, kstep, kcls = counted_kernel_rows(trace)  # (XLA's CPU ops on host threads too)
    # (device collectives stay summed over devices, as every kernel row is: one process's
    # devices are one source, and a union over them hid all but one device's all-reduce)
    out = {"kernels": Events(ev["name"][krows], kdur, kstep, kcls)}
    ops = trace.rows_of_kind(Kind.CPU_OP)  # a step recorded as an op (2021 Kineto's ProfilerStep#N) is no op
    ops = ops[~np.isin(ops, steps.rows)]
    kept = {}
    for table, rows in (("ops", ops), ("sections", section_rows(trace))):
        rows = rows[host_mask(trace, ev["start_ns"][rows])]
        if table == "ops" and len(rows):  # an op that is the only child of its namesake is one call (op_stats)
            st = ev["start_ns"][rows]
            into = merged_into(cache.threads(trace)[ev["track"][rows]], st, st + ev["dur_ns"][rows],
                               ev["name"][rows])
            rows = rows[into == np.arange(len(rows))]
        kept[table] = rows
    around = _around(trace, [kept[t] for t in NESTED])
    for table, rows, (ptable, pname) in zip(NESTED, (kept[t] for t in NESTED), around):
        dur = _collective_union(trace, table, rows, ev["dur_ns"][rows])
        out[table] = Events(ev["name"][rows], dur, steps.of(ev["start_ns"][rows]), None, ptable, pname)
    return out


#: XLA's asynchronous collectives' halves (``all-reduce-start.1``, ``all-gather-done``; a
#: pattern: re's cache compiles it on first use)
_ASYNC_HALF = r"-(?:start|done)(?:\.\d+)*$"


def collective_run(table: str, name: str, kind: str) -> bool:
    """Whether a row's time is a collective's own run on its rank (a communication kernel
    that is no XLA async half; a CPU backend's work range, ``gloo:*``, ``mpi:*``):
    ``diff_apart.measures_wait`` says why; its time in a trace is the union of its
    events (:func:`_collective_union`)."""
    if table == "kernels":
        return kind == "communication" and re.search(_ASYNC_HALF, name) is None
    return name.lower().startswith(CPU_PREFIXES)


def _collective_union(trace: Trace, table: str, rows: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``dur`` with each host-side collective run's event (:func:`collective_run`: a CPU
    backend's ``gloo:*``, ``mpi:*`` range; ops and sections, not kernels) cut to the time
    no earlier event of its name and its source (its rank: a merged trace holds several)
    covered: a rank's time in a collective is the union of its ranges, not their sum
    (DDP's two bucket all-reduces run at once on two gloo threads: summed, rank 0 was "in"
    it 50.3 ms of a 32.1 ms step). Each event keeps its step and its call; an event wholly
    inside another counts 0."""
    names = np.asarray(trace.events["name"][rows], np.int64)
    ids = unique(names)
    pick = np.array([collective_run(table, trace.strings[i], "communication") for i in ids.tolist()], bool)
    sel = pick[np.searchsorted(ids, names)] if len(ids) else np.zeros(0, bool)
    if not sel.any():
        return dur
    at = np.flatnonzero(sel)
    start = np.asarray(trace.events["start_ns"][rows[at]], np.int64)
    end = start + np.asarray(dur, np.int64)[at]
    src = trace.plane_source[trace.track_plane[trace.events["track"][rows[at]]]].astype(np.int64)
    key = names[at] * len(trace.sources) + src
    order = np.lexsort((start, key))
    k, s, e = key[order], start[order], end[order]
    group = np.concatenate(([0], np.cumsum(k[1:] != k[:-1]))).astype(np.int64)
    base, span = int(s.min()), int(e.max() - s.min()) + 1
    shifted = (e - base) + group * span  # ends, each name's above the one before: one running max for all
    covered = np.maximum.accumulate(shifted)
    before = np.concatenate(([-1], covered[:-1])) - group * span + base  # the end covered so far (< s: none)
    cut = np.maximum(e - np.maximum(s, before), 0)
    out = np.array(dur, np.int64, copy=True)
    out[at[order]] = cut
    return out


def _around(trace: Trace, kept: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per list of rows, each row's directly enclosing span among all of them on its OS
    thread: its list's index and its name id (-1, -1 for none)."""
    ev = trace.events
    rows = np.concatenate(kept).astype(np.int64)
    code = np.repeat(np.arange(len(kept)), [len(r) for r in kept])
    start = np.asarray(ev["start_ns"][rows], np.int64)
    order, _, parent = parents(cache.threads(trace)[ev["track"][rows]], start,
                               start + np.asarray(ev["dur_ns"][rows], np.int64))
    up = np.full(len(rows), -1, np.int64)
    has = parent >= 0
    up[order[has]] = order[parent[has]]
    safe = np.maximum(up, 0)
    ptable = np.where(up >= 0, code[safe] if len(rows) else up, -1)
    pname = np.where(up >= 0, ev["name"][rows][safe] if len(rows) else up, -1).astype(np.int64)
    bounds = np.cumsum([0] + [len(r) for r in kept])
    return [(ptable[a:b], pname[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def nest_pairs(events: dict[str, Events]) -> dict[str, NestPairs]:
    """Per nested table, its time summed by (row, enclosing row), rows as indexes into
    the sorted distinct name ids of their table (as ``diff_sums.summarize`` names them)."""
    ids = {t: unique(events[t].name) for t in NESTED}
    offset = {t: o for t, o in zip(NESTED, np.cumsum([1] + [len(ids[t]) for t in NESTED]).tolist())}
    width = 1 + sum(len(ids[t]) for t in NESTED)  # an enclosing row as one number: 0 none, else offset + index
    out = {}
    for t in NESTED:
        e = events[t]
        assert e.parent_table is not None and e.parent_name is not None
        enc = np.zeros(len(e.name), np.int64)
        for k, pt in enumerate(NESTED):
            m = e.parent_table == k
            enc[m] = offset[pt] + np.searchsorted(ids[pt], e.parent_name[m])
        keys, inv = unique_inverse(np.searchsorted(ids[t], e.name).astype(np.int64) * width + enc)
        total = np.bincount(inv, e.dur.astype(np.float64), len(keys))
        enc_of = keys % width
        ptable = np.searchsorted(np.array([offset[p] for p in NESTED]), enc_of, "right") - 1
        parent = enc_of - np.array([offset[p] for p in NESTED])[np.maximum(ptable, 0)]
        out[t] = NestPairs(keys // width, np.where(enc_of > 0, ptable, -1), np.where(enc_of > 0, parent, -1),
                           np.round(total).astype(np.int64))
    return out


class NestCounts:
    """Both sides' time of each row of the nested tables by enclosing row, added trace by
    trace (rows as keys of the collector's vocabularies, ``index``)."""

    def __init__(self, index: dict[str, dict[str, int]]):
        self.index = index
        self.parts: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}

    def add(self, side: str, nest: dict[str, NestPairs] | None, keys: dict[str, np.ndarray]) -> None:
        """One trace's pairs, its names mapped to the vocabularies by ``keys`` (per table)."""
        for t, p in (nest or {}).items():
            pk = np.full(len(p.child), -1, np.int64)
            for k, pt in enumerate(NESTED):
                m = p.ptable == k
                pk[m] = keys[pt][p.parent[m]]
            self.parts.setdefault((side, t), []).append((keys[t][p.child], p.ptable, pk, p.total))

    def enclosing(self, table: str, key: int, mean_a: float, mean_b: float) -> tuple[str, int, float] | None:
        """The row (table, key) directly around row ``key`` that holds at least
        :data:`AGREE` of its per-step change (``mean_b - mean_a``: each side's mean
        split by the shares of its time around it), and that row's part of the change;
        else None."""
        delta = mean_b - mean_a
        part: dict[tuple[int, int], float] = {}
        for side, mean in (("a", -mean_a), ("b", mean_b)):
            time: dict[tuple[int, int], int] = {}
            for child, ptable, pk, total in self.parts.get((side, table), []):
                m = child == key
                for pt, p, ns in zip(ptable[m].tolist(), pk[m].tolist(), total[m].tolist()):
                    time[(pt, p)] = time.get((pt, p), 0) + ns
            whole = sum(time.values())
            for where, ns in time.items() if whole > 0 else ():
                part[where] = part.get(where, 0.0) + mean * ns / whole
        around = [(d * np.sign(delta), where) for where, d in part.items() if where[0] >= 0]
        if not around or not delta == delta or not delta:
            return None
        share, (pt, p) = max(around)
        return (NESTED[pt], p, share * float(np.sign(delta))) if share >= AGREE * abs(delta) else None


def agree(inner: float, outer: float) -> bool:
    """Whether two per-step changes are one: the same way, each at least :data:`AGREE`
    of the other."""
    a, b = abs(inner), abs(outer)
    return inner * outer > 0 and min(a, b) >= AGREE * max(a, b)


def changes_of(tables: dict[str, Any], nest: NestCounts | None = None) -> list[dict[str, Any]]:
    """Significant rows of every table, largest change of the per-step mean first, each
    with its group (:func:`group`)."""
    fields = ("name", "change", "count_a", "count_b", "total_ns_a", "total_ns_b", "delta_total_ns",
              "step_mean_ns_a", "step_mean_ns_b", "step_delta_ns", "rel_change", "p_value", "p_adjusted",
              "rank_decided", "rank_step_mean_ns_a", "rank_step_mean_ns_b")
    out = []
    for t, df in tables.items():
        idx = np.flatnonzero(column(df, "change") != "")
        cols = {c: column(df, c)[idx].tolist() for c in fields}
        kinds = [str(k) for k in column(df, "kind")[idx].tolist()] if t == "kernels" else [""] * len(idx)
        for i in range(len(idx)):
            out.append({"table": t, "kind": kinds[i], **{c: v[i] for c, v in cols.items()}})
    out.sort(key=lambda c: (-abs(c["step_delta_ns"]), c["table"], c["name"]))
    group(out, nest)
    return out


def group(changes: list[dict[str, Any]], nest: NestCounts | None) -> None:
    """Mark which changed rows are one change (the module doc): ``group``, ``lead`` and
    ``nested`` on each."""
    at = {(c["table"], c["name"]): i for i, c in enumerate(changes)}
    names = {t: list(nest.index[t]) for t in NESTED} if nest is not None else {}
    up: dict[int, int] = {}  # a row's enclosing changed row of its group
    for i, c in enumerate(changes):
        if nest is None or c["table"] not in NESTED:
            continue
        enc = nest.enclosing(c["table"], nest.index[c["table"]][c["name"]], c["step_mean_ns_a"], c["step_mean_ns_b"])
        j = at.get((enc[0], names[enc[0]][enc[1]])) if enc is not None else None
        if enc is not None and j is not None and j != i and changes[j]["change"] == c["change"] and \
                agree(enc[2], changes[j]["step_delta_ns"]) and agree(c["step_delta_ns"], changes[j]["step_delta_ns"]):
            up[i] = j  # (its own change too: a new wrapper around a slightly slower op is not the op's change)
    root = list(range(len(changes)))
    for i, j in up.items():  # union of each row with its enclosing row
        ri, rj = _find(root, i), _find(root, j)
        root[max(ri, rj)] = min(ri, rj)
    members: dict[int, list[int]] = {}
    for i in range(len(changes)):
        members.setdefault(_find(root, i), []).append(i)
    groups: list[list[int]] = []
    for rows in sorted(members.values()):
        inner = [i for i in rows if i not in set(up.values())]
        lead = inner[0] if inner else rows[0]  # the innermost, the largest change first
        # every member agrees with the lead, not only with its neighbour: along a chain of wrappers the
        # outermost could move 1/0.8^2 = 1.56x the lead's change, its own time hidden in "one change"
        far = [i for i in rows if i != lead and not agree(changes[i]["step_delta_ns"], changes[lead]["step_delta_ns"])]
        groups += [[i for i in rows if i not in far]] + [[i] for i in far]
    for g, rows in enumerate(sorted(groups)):
        inner = [i for i in rows if i not in set(up.values())]
        lead = inner[0] if inner else rows[0]
        for i in rows:
            changes[i].update({"group": g, "lead": i == lead, "nested": []})
        near = sorted((_relation(up, lead, i), i) for i in rows if i != lead)  # (around it: the nearest first)
        changes[lead]["nested"] = [{"table": changes[i]["table"], "name": changes[i]["name"],
                                    "step_delta_ns": changes[i]["step_delta_ns"], "relation": how[1]}
                                   for how, i in near]


def items(rows: list[dict[str, Any]], nest: NestCounts | None) -> list[dict[str, Any]]:
    """Another list of the verdict as its items, grouped as the changes are (:func:`group`,
    the same tests): ``rows`` (largest per-step change first, each with ``table``,
    ``name``, ``change``, its per-step means and ``step_delta_ns``; members of one item
    share ``change``) get ``group``, ``lead`` and ``nested``; the leads, in order."""
    group(rows, nest)
    return [r for r in rows if r["lead"]]


def _find(root: list[int], i: int) -> int:
    while root[i] != i:
        root[i] = root[root[i]]
        i = root[i]
    return i


def _relation(up: dict[int, int], lead: int, i: int) -> tuple[int, str]:
    """Row ``i`` against the lead: "around" it (encloses it), "inside" it, or "beside" it,
    with the levels between them (0 beside)."""
    for a, b, word in ((lead, i, "around"), (i, lead, "inside")):
        for level in range(1, len(up) + 1):  # (names can nest both ways: a bounded walk)
            if a not in up:
                break
            a = up[a]
            if a == b:
                return level, word
    return len(up) + 1, "beside"
