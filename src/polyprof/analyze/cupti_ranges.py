"""CUPTI's range-profiler counters, each range attributed to the framework ops that
launched its kernel (the ``cupti_counters`` table).

Kineto's CUPTI profiler mode writes one ``cuda_profiler_range`` event per profiled
kernel, named after the kernel, its counters (``smsp__sass_thread_inst_executed_op_
ffma_pred_on.sum``...) as args, on a timeline of its own (one range after another): a
range carries no correlation id. Holistic Trace Analysis (``CuptiCounterAnalysis``)
pairs them with the kernel launches in order, and polyprof follows its rule:

- the k-th range by start is the k-th ``cudaLaunchKernel...`` call by start (names
  that start with it, as HTA's ``str.match``), per source (rank); where the two counts
  differ no range is attributed (HTA gives no table for that rank) and a warning says so;
- its op stack is the framework ops (``Kind.CPU_OP``) around that call on its thread,
  outermost first; ``top_op`` the outermost, ``bottom_op`` the innermost ("" where the
  call runs outside every op, where HTA raises).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import logs
from ..derive import cache
from ..derive.intervals import TimeKeys, nesting_depth
from ..trace import vocabulary
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import member, unique
from .flops import COUNTER_FLOPS
from .frames import frame
from .window import OPEN_START, WindowArg, selection, view
from .window_counting import inside

if TYPE_CHECKING:
    from .table import Table

log = logs.kept(__name__)

#: the columns before the counters
COLUMNS = ["range", "name", "start_ns", "launch_ns", "top_op", "bottom_op", "op_stack", "flops"]
#: what joins the op stack's names in ``op_stack``
STACK_SEP = " > "


def range_rows(trace: Trace) -> np.ndarray:
    """The ``cuda_profiler_range`` events, ascending."""
    cats = np.flatnonzero(np.asarray(trace.strings, dtype=object) == vocabulary.PROFILER_RANGE_CATEGORY)
    return np.flatnonzero(member(trace.events["category"], cats)) if len(cats) else np.zeros(0, np.int64)


def _launch_rows(trace: Trace) -> np.ndarray:
    """Host runtime calls whose name starts with a range launch name (HTA's ``str.match``)."""
    strings = trace.strings
    names = [i for i, s in enumerate(strings) if s.startswith(vocabulary.RANGE_LAUNCHES)]
    runtime = trace.rows_of_kind(Kind.RUNTIME)
    if not names or not len(runtime):
        return np.zeros(0, np.int64)
    return runtime[member(trace.events["name"][runtime], np.array(names, np.int64))]


def _paired(trace: Trace, ranges: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """The launch row of each range (-1 where its source's counts differ): k-th with
    k-th by start, per source."""
    ev = trace.events
    src = trace.event_sources()
    out = np.full(len(ranges), -1, np.int64)
    for s in unique(src[ranges]).tolist():
        r = np.flatnonzero(src[ranges] == s)
        r = r[np.argsort(ev["start_ns"][ranges[r]], kind="stable")]
        lau = launches[src[launches] == s]
        lau = lau[np.argsort(ev["start_ns"][lau], kind="stable")]
        if len(lau) != len(r):
            log.warning("cupti_counters: %d CUPTI profiler ranges but %d kernel launch calls in source %d: the "
                        "ranges are not attributed to ops (they pair in order)", len(r), len(lau), s)
            continue
        out[r] = lau
    return out


def op_stacks(trace: Trace, calls: np.ndarray) -> np.ndarray:
    """(len(calls), depth) framework op rows around each host call on its thread,
    outermost first, -1 past the innermost."""
    ev = trace.events
    ops = trace.rows_of_kind(Kind.CPU_OP)
    m = len(calls)
    if not len(ops) or not m:
        return np.full((m, 0), -1, np.int64)
    th = cache.threads(trace)
    o_tr, o_s = th[ev["track"][ops]], ev["start_ns"][ops].astype(np.int64)
    o_e = o_s + ev["dur_ns"][ops].astype(np.int64)
    order, _, depth = nesting_depth(o_tr, o_s, o_e)
    q_tr, q_t = th[ev["track"][calls]], ev["start_ns"][calls].astype(np.int64)
    out = np.full((m, int(depth.max()) + 1 if len(depth) else 0), -1, np.int64)
    if not len(order):
        return out
    tr, s, e = o_tr[order], o_s[order], o_e[order]
    key = TimeKeys([s, q_t], max(int(tr.max()), int(q_tr.max())))
    ks, kq = key(tr, s), key(q_tr, q_t)
    for d in range(out.shape[1]):
        idx = np.flatnonzero(depth == d)
        p = np.searchsorted(ks[idx], kq, side="right") - 1
        cand = idx[np.maximum(p, 0)]
        ok = (p >= 0) & (tr[cand] == q_tr) & (e[cand] > q_t)
        out[ok, d] = ops[order[cand[ok]]]
    # a deeper op whose parent does not hold the call is another branch: cut the stack there
    held = np.cumprod(out >= 0, axis=1).astype(bool)
    return np.where(held, out, -1)


def _counters(trace: Trace, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Each numeric stat the ranges carry, as a column: int64 where every range has an
    integer, else float64 with NaN where absent. In the stats' order."""
    out: dict[str, np.ndarray] = {}
    if not len(rows):
        return out
    for key in trace.stats:  # a trace with ranges: their args are what CUPTI counted
        col = trace.stats[key]
        has, vals = col.lookup(rows)
        if not has.any() or np.asarray(vals).dtype.kind not in "iuf":
            continue
        if has.all() and vals.dtype.kind in "iu":
            out[key] = vals.astype(np.int64)
        else:
            v = np.full(len(rows), np.nan)
            v[has] = vals
            out[key] = v
    return out


def cupti_counters(trace: Trace, window: WindowArg = None) -> Table:
    """One row per CUPTI profiler range (kernel), in order of start.

    Columns: ``range`` (its position, 0 first), ``name`` (the kernel), ``start_ns`` (the
    range's own start: CUPTI's timeline, not the kernel's), ``launch_ns`` (start of the
    launch call it is paired with, -1 when none), ``top_op`` and ``bottom_op`` (outermost
    and innermost framework op around that call), ``op_stack`` (the ops outermost first,
    joined by ``" > "``), ``flops`` (from the instruction counters where it has them:
    add and mul one, fma two; NaN else), then one column per counter, named as CUPTI
    names it. ``window``: the ranges whose launch starts in the selected steps.
    """
    trace = view(trace, window)
    rows = range_rows(trace)
    ev = trace.events
    rows = rows[np.argsort(ev["start_ns"][rows], kind="stable")]
    launch = _paired(trace, rows, _launch_rows(trace)) if len(rows) else np.zeros(0, np.int64)
    sel = selection(trace)
    if sel is not None and sel.restricted and len(rows):
        # a range paired with no launch: in a window with an open start (every step), kept
        ls = np.where(launch >= 0, ev["start_ns"][np.maximum(launch, 0)], sel.lo if sel.lo <= OPEN_START else sel.lo - 1)
        keep = inside(sel, ls)  # (not between a schedule's stretches)
        rows, launch = rows[keep], launch[keep]
    has = launch >= 0
    stacks = op_stacks(trace, launch[has])
    strings = np.asarray(trace.strings, dtype=object)
    n = len(rows)
    top = np.full(n, "", object)
    bottom = np.full(n, "", object)
    stack = np.full(n, "", object)
    names = strings[ev["name"][np.maximum(stacks, 0)]]  # past each depth: not read
    depth = (stacks >= 0).sum(axis=1)
    at = np.flatnonzero(has)
    for i, k, row in zip(at.tolist(), depth.tolist(), names.tolist()):
        if k:
            top[i], bottom[i], stack[i] = row[0], row[k - 1], STACK_SEP.join(row[:k])
    counters = _counters(trace, rows)
    flops = np.zeros(n)
    seen = np.zeros(n, bool)
    for k in (k for k in COUNTER_FLOPS if k in counters):
        v = counters[k].astype(np.float64)
        flops += COUNTER_FLOPS[k][0] * np.nan_to_num(v)
        seen |= ~np.isnan(v)
    flops[~seen] = np.nan
    return frame({"range": np.arange(n, dtype=np.int64), "name": strings[ev["name"][rows]],
                  "start_ns": ev["start_ns"][rows].astype(np.int64),
                  "launch_ns": np.where(has, ev["start_ns"][np.maximum(launch, 0)], -1).astype(np.int64),
                  "top_op": top, "bottom_op": bottom, "op_stack": stack, "flops": flops,
                  **counters})
