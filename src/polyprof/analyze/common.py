"""What the device analyses share: the analysed span and activity classes.

**Analysed span.** With steps (see ``derive/steps.py``; ``analyze/window.py`` for
choosing which) the span runs from the first
step's host start to the later of the last step's host end and the end of the last
device activity launched inside a step — so the device work of the last step counts.
Without steps it is the whole trace: first start to last end over every event on
host and device tracks (derived lines excluded, and the profiler's own ``overhead``
rows where there are others: an RPD or rocpd tracer's writes at its end, which the
window's label then names). The same span is used for every
device and stream, so their idle times compare.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..derive import cache
from ..derive.intervals import child_time
from ..trace.categories import MATRIX_KERNEL, Kind, blit_kind, collective_names, is_copy_name
from ..trace.core import Trace
from ..trace.factorize import factorize
from ..trace.keys import MODULE_STATS  # (not derive.lines: a summary need not import it)
from .frames import empty_frame, frame, rows_frame  # noqa: F401  (where the analyses have long found them)
from ..trace.sorting import unique, unique_inverse
from .window import round_like_hta, selection, view
from .window_counting import counted_ns, device_extents, device_mask, host_mask

COMPUTE, COMMUNICATION, MEMCPY, MEMSET = 0, 1, 2, 3
CLASS_NAMES = np.array(["compute", "communication", "memcpy", "memset"], dtype=object)


class DeviceView:  # a plain class: a NamedTuple's fields are type-checked at every start (docs/benchmarks.md)
    """Device activity rows with their plane, track, class, times and launch."""

    __slots__ = ("rows", "plane", "track", "cls", "start", "end", "launch", "span", "counted", "dur")
    rows: np.ndarray
    plane: np.ndarray
    track: np.ndarray
    cls: np.ndarray
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray  # launch row or -1
    span: tuple[int, int]
    counted: np.ndarray  # bool: in the analysed window (launched in a selected step; a time window:
    # running in it, window_counting.device_mask); all without one
    dur: np.ndarray  # per-op device time: XProf's device_duration_ps where present, else end - start;
    # in a time window, the part inside where it cuts the activity (window_counting.counted_ns)

    def __init__(self, rows: np.ndarray, plane: np.ndarray, track: np.ndarray, cls: np.ndarray, start: np.ndarray,
                 end: np.ndarray, launch: np.ndarray, span: tuple[int, int], counted: np.ndarray, dur: np.ndarray):
        self.rows, self.plane, self.track, self.cls, self.start, self.end = rows, plane, track, cls, start, end
        self.launch, self.span, self.counted, self.dur = launch, span, counted, dur


def activity_class(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """compute / communication / memcpy / memset code for each device activity row."""
    k = trace.kinds[rows]
    out = np.full(len(rows), COMPUTE, np.int8)
    out[k == Kind.MEMCPY] = MEMCPY
    out[k == Kind.MEMSET] = MEMSET
    out[k == Kind.COLLECTIVE] = COMMUNICATION
    ker = np.flatnonzero(k == Kind.KERNEL)
    if len(ker):
        ids = trace.events["name"][rows[ker]]
        uniq, inv = unique_inverse(ids)
        names = [trace.strings[i] for i in uniq.tolist()]
        coll = collective_names(names)
        blit = [blit_kind(n) for n in names]  # (a runtime's fill and copy kernels)
        copy = np.fromiter((b is Kind.MEMCPY or is_copy_name(n) for n, b in zip(names, blit)), bool, len(names))
        fill = np.fromiter((b is Kind.MEMSET for b in blit), bool, len(names))
        out[ker[coll[inv]]] = COMMUNICATION
        out[ker[copy[inv]]] = MEMCPY
        out[ker[fill[inv]]] = MEMSET
    return out


def analysed_span(trace: Trace, window: Any = None) -> tuple[int, int]:
    """(t0, t1) of the analysed span (of the steps ``window`` selects); see the module doc."""
    return cache.memo(view(trace, window), "analysed_span", _span)


def analysed_stretches(trace: Trace, window: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the stretches the analysed span is made of: the span itself,
    or, where the window's steps were recorded in separate stretches (a schedule's
    cycles; ``Selection.stretches``), each stretch from its first step's start to the
    later of its last step's end and the end of the device work launched in it (short of
    the next stretch), the last one ending at the span's end. What is between them was
    not recorded: the time-share analyses leave it out. Under ``--span device`` each
    stretch runs from the first to the last device activity counted in it (HTA's
    convention, stretch by stretch); a stretch without any is left out."""
    return cache.memo(view(trace, window), "analysed_stretches", _stretches)


def _stretches(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    t0, t1 = analysed_span(trace)
    sel = selection(trace)
    if sel is None or sel.stretches is None:
        return np.array([t0], np.int64), np.array([t1], np.int64)
    s, e = sel.stretches[:, 0].copy(), sel.stretches[:, 1].copy()
    if sel.span == "device":
        got = _device_stretches(trace, s)
        if got is not None:
            return got
    if not sel.timed:  # each stretch to the end of the device work launched in it
        ev = trace.events
        corr = cache.correlation(trace)
        d = corr.device_rows[corr.launch >= 0]
        ls = ev["start_ns"][corr.launch[corr.launch >= 0]]
        pos = np.searchsorted(s, ls, side="right") - 1
        ok = (pos >= 0) & (ls < e[np.maximum(pos, 0)])
        reach = np.full(len(s), np.iinfo(np.int64).min)
        np.maximum.at(reach, pos[ok], (ev["start_ns"][d] + ev["dur_ns"][d])[ok].astype(np.int64))
        e = np.maximum(e, np.minimum(reach, np.r_[s[1:], t1]))
    s[0], e[-1] = max(s[0], t0), t1
    return s, e


def _device_stretches(trace: Trace, s: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The recorded stretches (their starts ``s``) under ``--span device``: each from the
    first to the last device activity counted in it (by its launch's start, as
    ``window_counting.device_mask`` counts it), each rounded as the window asks, short of
    the next stretch's first; in a time window the device activity running in each, cut
    to it (:func:`_timed_extents`). Those without any left out; None where no device
    activity is counted."""
    sel = selection(trace)
    if sel is not None and sel.timed:  # each stretch of a time window: the device's part of it
        first, last = _timed_extents(trace)
        return (first, last) if len(first) else None
    ev = trace.events
    corr = cache.correlation(trace)
    d = corr.device_rows
    start = ev["start_ns"][d]
    counted = device_mask(trace, corr.launch, start)
    if not counted.any():
        return None
    at = np.where(corr.launch >= 0, ev["start_ns"][np.maximum(corr.launch, 0)], start)
    ds, de = round_like_hta(trace, start[counted], start[counted] + ev["dur_ns"][d][counted])
    pos = np.searchsorted(s, at[counted], side="right") - 1  # (counted: inside a stretch)
    first = np.full(len(s), np.iinfo(np.int64).max)
    last = np.full(len(s), np.iinfo(np.int64).min)
    np.minimum.at(first, pos, ds.astype(np.int64))
    np.maximum.at(last, pos, de.astype(np.int64))
    has = last >= first
    first, last = first[has], last[has]
    return first, np.maximum(np.minimum(last, np.r_[first[1:], last[-1]]), first)


def _timed_extents(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """A time window's stretches under ``--span device``: the device activity running in
    each (rounded as the window asks), cut to it (``window_counting.device_extents``)."""
    ev = trace.events
    d = cache.correlation(trace).device_rows
    start = ev["start_ns"][d]
    s, e = round_like_hta(trace, start, start + ev["dur_ns"][d])
    sel = selection(trace)
    assert sel is not None  # (a time window's view)
    return device_extents(sel, s.astype(np.int64), e.astype(np.int64))


def in_stretches(trace: Trace, t: np.ndarray) -> np.ndarray:
    """Which times ``t`` lie in one of the analysed stretches (:func:`analysed_stretches`);
    all where there is one (what the span's callers clip to it themselves)."""
    ws, we = analysed_stretches(trace)
    if len(ws) < 2:
        return np.ones(len(t), bool)
    pos = np.searchsorted(ws, t, side="right") - 1
    return (pos >= 0) & (t < we[np.maximum(pos, 0)])


def stretches_ns(trace: Trace) -> int:
    """The analysed stretches' total length: the analysed span's, less what is between
    them (:func:`analysed_stretches`)."""
    ws, we = analysed_stretches(trace)
    return int((we - ws).sum())


def recorded_in_span(recorded_ns: int, span_ns: int) -> dict[str, int]:
    """The overview's ``recorded_in_span_ns``: how much of the analysed span its stretches
    hold (:func:`stretches_ns`), where that is less than the span (a schedule's cycles
    left unrecorded steps in it), else nothing. One rule for a summary read whole
    (report/tables.py) and a store's rank read window by window (ranks/stepwise.py: the
    windows' stretches added up)."""
    return {"recorded_in_span_ns": int(recorded_ns)} if recorded_ns < span_ns else {}


def _span(trace: Trace) -> tuple[int, int]:
    ev = trace.events
    steps = cache.steps(trace)
    sel = selection(trace)
    if sel is not None and sel.timed:  # a time window: exactly it; --span device: its device activity's part
        first, last = _timed_extents(trace) if sel.span == "device" else (np.zeros(0), np.zeros(0))
        return (int(first[0]), int(last[-1])) if len(first) else (sel.lo, sel.hi)
    if sel is not None and sel.span == "device":  # HTA's convention: first to last device activity
        corr = cache.correlation(trace)
        d = corr.device_rows[device_mask(trace, corr.launch, ev["start_ns"][corr.device_rows])]
        if len(d):
            s, e = round_like_hta(trace, ev["start_ns"][d], ev["start_ns"][d] + ev["dur_ns"][d])
            return int(s.min()), int(e.max())
    if len(steps):
        t0, t1 = int(steps.start.min()), int(steps.end.max())
        corr = cache.correlation(trace)
        has = corr.launch >= 0
        if has.any():
            ls = ev["start_ns"][corr.launch[has]]
            inside = steps.of(ls) >= 0
            d = corr.device_rows[has][inside]
            if len(d):
                t1 = max(t1, int((ev["start_ns"][d] + ev["dur_ns"][d]).max()))
        return t0, t1
    if not trace.n_events:  # counters alone (a Perfetto trace of counter tracks): their samples' span
        return trace.extent_ns
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)
    keep = ~derived[ev["track"]]
    overhead = trace.string_id("overhead")  # (the profiler's own: rocpd's flush and table writes at its end)
    if overhead >= 0 and bool((keep & (ev["category"] != overhead)).any()):
        keep &= ev["category"] != overhead
    if not keep.any():
        return trace.span_ns
    return int(ev["start_ns"][keep].min()), int((ev["start_ns"] + ev["dur_ns"])[keep].max())


def device_view(trace: Trace, window: Any = None) -> DeviceView:
    """Every device activity of the trace, with the span and the rows ``window`` counts.

    Where the window rounds to whole µs as HTA (``round_us``), the times and durations are
    the rounded ones (an activity inside one µs with its end before its start, a negative
    duration, as HTA sums it). Under HTA's window (``--window hta``) the rows counted are
    those HTA's temporal breakdown counts (``hta_compat.hta_activity``: its iteration
    filter, which drops device activity whose launch is not in the file), so that every
    table of device activity (kernels, launches, overlap, ...) counts HTA's rows."""
    return cache.memo(view(trace, window), "device_view", _view)


def _view(trace: Trace) -> DeviceView:
    corr = cache.correlation(trace)
    ev = trace.events
    rows = corr.device_rows
    tr = ev["track"][rows]
    st = ev["start_ns"][rows]
    st, en = round_like_hta(trace, st, st + ev["dur_ns"][rows])
    du = en - st  # (the file's duration, or the rounded one under round_us)
    sel = selection(trace)
    if sel is not None and sel.hta:
        from .hta_compat import hta_activity  # HTA's own computations: only for its window (--window hta)

        counted = np.isin(rows, hta_activity(trace).rows)
    else:
        counted = device_mask(trace, corr.launch, st, en)
    return DeviceView(rows, trace.track_plane[tr] if len(rows) else np.zeros(0, np.int32), tr,
                      activity_class(trace, rows), st, en, corr.launch,
                      analysed_span(trace), counted, counted_ns(trace, st, en, op_durations(trace, rows, du)))


#: XProf's per-op device time stat (TPU XLA ops): the op's own time, which for async
#: ops such as ``copy-done`` differs from the event's span on the XLA Ops line
DEVICE_DURATION_PS = "device_duration_ps"


#: the memo key under which a part of a rank (a window, ``ranks/stepwise.py``) holds the
#: planes its whole rank has device activity on
RANK_DEVICES = "rank_devices"


def carry_devices(trace: Trace, planes: np.ndarray) -> None:
    """Give ``trace`` (a window of a rank, before it is analysed) the planes (ids) its whole
    rank has device activity on (``store/window.Plan.devices``), as the analyses that ask
    whether a trace ran on a device, and on which planes, are to answer for the rank read
    whole: a window of host work alone, or of captures whose replays come later, is not a
    CPU trace (:func:`activity_planes`, :func:`ran_on_device`)."""
    trace.__dict__.setdefault("_polyprof_memo", {})[RANK_DEVICES] = np.asarray(planes, np.int64)


def _rank_devices(trace: Trace) -> np.ndarray | None:
    got: np.ndarray | None = trace.__dict__.get("_polyprof_memo", {}).get(RANK_DEVICES)
    return got


def activity_planes(trace: Trace) -> np.ndarray:
    """The ids (ascending) of the planes with device activity (:func:`device_view`'s): of
    the rank a window was cut from where it was told them (:func:`carry_devices`), else of
    ``trace``."""
    got = _rank_devices(trace)
    return got if got is not None else unique(device_view(trace).plane)


def ran_on_device(trace: Trace) -> bool:
    """Whether ``trace`` has device activity (``Correlation.device_rows``), or the rank a
    window was cut from has (:func:`carry_devices`)."""
    got = _rank_devices(trace)
    return bool(len(got)) if got is not None else bool(len(cache.correlation(trace).device_rows))


def op_durations(trace: Trace, rows: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per-op device time of each row: ``device_duration_ps`` where the event carries it,
    as XProf's op statistics use it, else the event's duration. ns; float64 when the
    trace has the stat (a TPU op can take a few ps: rounding each to ns would lose them)."""
    # XSpace readers type this stat at load; looking it up must not decode a Kineto
    # trace's deferred args (docs/architecture.md, deferred stats)
    col = trace.stats.loaded().get(DEVICE_DURATION_PS)
    if col is None or col.kind not in "iuf" or not len(rows):
        return dur
    has, ps = col.lookup(rows)
    if not has.any():
        return dur
    out = dur.astype(np.float64)
    out[has] = np.asarray(ps, np.float64) / 1000.0
    return out


def names_in(trace: Trace, names: tuple[str, ...]) -> np.ndarray:
    """Bool per string id: the string is one of ``names`` (exact)."""
    out = np.zeros(len(trace.strings), bool)
    ids = [i for i in map(trace.string_id, names) if i >= 0]
    out[ids] = True
    return out


def on_device(trace: Trace) -> bool:
    """Whether a device plane of ``trace`` has events (a GPU's), not a CPU run's alone
    (memoised: a rank merged from its windows, read without events, is given it)."""
    return cache.memo(trace, "on_device", _on_device)


def _on_device(trace: Trace) -> bool:
    busy = set(unique(trace.event_planes()).tolist()) if trace.n_events else set()  # (np.unique imports numpy.ma)
    return any(p.kind == "device" and p.id in busy for p in trace.planes)


def counted_kernels(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(name id, duration, step index, activity class) of the device activity the window
    counts (by its launch's start, or its own where none is known), then of the kernels a
    host plane holds in the window's steps (XLA's CPU ops run on ``/host:CPU`` threads:
    a JAX CPU program's compiled work), as ``diff`` compares them. A host kernel that
    encloses others on its thread (a ``while``, ``call`` or ``conditional`` around its
    computations' ops) counts its own time only (:func:`self_times`)."""
    rows, dur, step, cls = counted_kernel_rows(trace)
    return trace.events["name"][rows], dur, step, cls


def matrix_kernel_pct(trace: Trace) -> float:
    """The share (percent) of the window's device compute time in kernels whose names are
    a matrix library's (:data:`~polyprof.trace.categories.MATRIX_KERNEL`: GEMMs and
    convolutions); 0 without compute kernels."""
    names, dur, _, cls = counted_kernels(trace)
    names, dur = names[cls == COMPUTE], dur[cls == COMPUTE]
    total = float(dur.sum())
    if not total > 0:
        return 0.0
    return 100.0 * float(dur[matrix_names(trace, names)].sum()) / total


def matrix_names(trace: Trace, names: np.ndarray) -> np.ndarray:
    """Which of the string ids ``names`` name a matrix library's kernel
    (:data:`~polyprof.trace.categories.MATRIX_KERNEL`), each distinct name looked at once."""
    uniq, inv = unique_inverse(names)
    lib = np.fromiter((MATRIX_KERNEL.search(trace.strings[i]) is not None for i in uniq.tolist()), bool, len(uniq))
    return lib[inv]


def counted_kernel_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`counted_kernels` with the event rows in place of the name ids (computed
    once per trace: ``diff`` reads the rows' modules beside their names)."""
    return cache.memo(trace, "counted_kernel_rows", _counted_kernel_rows)


def _counted_kernel_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ev = trace.events
    steps = cache.steps(trace)
    v = device_view(trace)
    c = v.counted
    launch_start = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)[c]
    rows, dur, start, cls = v.rows[c], (v.end - v.start)[c], launch_start, v.cls[c]
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    xla = trace.rows_of_kind(Kind.KERNEL)
    xla = xla[host[trace.track_plane[ev["track"][xla]]]] if len(xla) else xla
    own = self_times(trace, xla)
    keep = host_mask(trace, ev["start_ns"][xla]) if len(xla) else np.zeros(0, bool)
    xla, own = xla[keep], own[keep]
    if len(xla):
        rows, dur = np.concatenate([rows, xla]), np.concatenate([dur, own.astype(dur.dtype)])
        start = np.concatenate([start, ev["start_ns"][xla]])
        cls = np.concatenate([cls, activity_class(trace, xla)])
    return rows, dur, steps.of(start), cls


def module_codes(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(per row a code, -1 for none; the module of each code) of the compiled module
    the events ``rows`` belong to: the first of ``MODULE_STATS`` (``hlo_module``, then
    ``module``, ``kernel_module``) the event carries, as the derived XLA Modules line
    reads it. XLA names ops uniquely within a module only (``fusion.1`` of two jitted
    functions are two ops): XProf keys its op statistics by (program, name)."""
    codes = np.full(len(rows), -1, np.int64)
    index: dict[str, int] = {}
    for key in MODULE_STATS:
        # the XSpace reader types these at load; a Kineto trace's deferred args are not decoded for them
        col = trace.stats.loaded().get(key)
        if col is None or not len(rows) or col.kind != "O":
            continue
        m, vals = col.lookup(rows)
        at = np.flatnonzero(m)
        free = codes[at] < 0
        if not free.any():
            continue
        vcodes, distinct = factorize(np.asarray(vals, object)[free])
        # a code per distinct value (a few modules): -1 for a value that names none
        to = np.array([index.setdefault(x, len(index)) if x else -1 for x in map(_text, distinct.tolist())]
                      + [-1], np.int64)
        codes[at[free]] = to[vcodes]  # (vcodes -1, a missing value: the last entry, -1)
    return codes, list(index)


def qualified_names(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event of ``rows`` a name code, and per code its name and its module ("" none):
    an event of a known module (:func:`module_codes`) is named ``module/op`` (XLA names
    ops uniquely within a module only), the others by their name. Codes below
    ``len(trace.strings)`` are name ids; one of a ``module/op`` is ``len(trace.strings)``
    plus its index among the (module, name) pairs of ``rows``, by module then name id.
    The trace's code of every event is found once (:func:`_event_names`): a summary asks
    for five tables' rows."""
    strings = trace._string_array  # (made once per trace)
    names = _event_names(trace)
    if names is None:  # (no event of a known module)
        codes = trace.events["name"][rows].astype(np.int64)
        return codes, strings.copy(), np.full(len(strings), "", object)
    ev_code, text, of = names
    codes = ev_code[rows].astype(np.int64)
    at = np.flatnonzero(codes >= len(strings))
    pair = codes[at] - len(strings)
    used = np.zeros(len(text), bool)  # the pairs of ``rows``, in the trace's order (by module, then name id)
    used[pair] = True
    codes[at] = len(strings) + (np.cumsum(used) - 1)[pair]
    return (codes, np.concatenate([strings, text[used]]),
            np.concatenate([np.full(len(strings), "", object), of[used]]))


def _event_names(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(per event its :func:`qualified_names` code among every (module, name) pair of the
    trace, each pair's ``module/op`` and module); None where no event has a module. Once
    per trace, its strings and its module stats (a string interned later moves the codes)."""
    mrows, mcodes, modules = module_rows(trace)
    if not len(mrows):
        return None

    def build(t: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        strings = t._string_array
        n = max(len(strings), 1)
        all_names = t.events["name"]
        key = mcodes * n + all_names[mrows].astype(np.int64)
        if len(modules) * n <= _DENSE_PAIRS:  # (a few modules: the pairs by a mask, not a sort)
            seen = np.zeros(len(modules) * n, bool)
            seen[key] = True
            pairs = np.flatnonzero(seen)
            inv = np.searchsorted(pairs, key)
        else:
            pairs, inv = unique_inverse(key)
        wide = len(strings) + len(pairs) >= 2**31
        ev_code = all_names.astype(np.int64 if wide else np.int32)  # (a copy: 4 bytes an event)
        ev_code[mrows] = len(strings) + inv
        pm, pn = np.divmod(pairs, n)
        text = np.empty(len(pairs), object)
        text[:] = [f"{modules[m]}/{x}" for m, x in zip(pm.tolist(), strings[pn].tolist())]  # (per pair: a few)
        of = np.empty(len(pairs), object)
        of[:] = [modules[m] for m in pm.tolist()]
        return ev_code, text, of

    return cache.memo(trace, f"event_names:{_module_key(trace)}:{len(trace.strings)}", build)


def op_of(name: str, module: str) -> str | None:
    """The op of a name :func:`qualified_names` made (``module/op``) of ``module``; None
    for a name not of that form (no module, or another's)."""
    return name[len(module) + 1:] if module and name.startswith(module + "/") else None


#: (module, name) pairs found with a mask of this many cells at most (else by a sort)
_DENSE_PAIRS = 1 << 24


def module_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The events that carry a module (ascending rows), their :func:`module_codes` and
    the modules: found once per trace and its loaded module stats, for the tables that
    name ops by module (``event_stats`` and ``kernel_breakdown`` read them for most rows)."""
    def build(t: Trace) -> tuple[np.ndarray, np.ndarray, list[str]]:
        cols = _module_columns(t)
        rows = unique(np.concatenate([c.rows for c in cols])) if cols else np.zeros(0, np.int64)
        codes, modules = module_codes(t, rows)
        keep = codes >= 0
        return rows[keep], codes[keep], modules

    return cache.memo(trace, "module_rows:" + _module_key(trace), build)


def _module_columns(trace: Trace) -> list[Any]:
    """The loaded text columns of :data:`MODULE_STATS` (no deferred stat decoded)."""
    loaded = trace.stats.loaded()
    return [loaded[k] for k in MODULE_STATS if k in loaded and loaded[k].kind == "O"]


def _module_key(trace: Trace) -> str:
    """What :func:`module_rows` is memoised by: the sizes of the module columns loaded."""
    return ",".join(str(len(c)) for c in _module_columns(trace))


def _text(value: object) -> str:
    """A module stat's value as text ("" for one that names no module)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def self_times(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Each event's duration less those of the events of ``rows`` directly inside it on
    its thread: its self time. XLA's CPU runtime runs a ``while``'s body (a ``call``'s,
    a ``conditional``'s branch) inside the control-flow op's own event, so the nesting,
    not the op's name, tells what would be counted twice; ops that enclose nothing keep
    their duration (docs/analysis.md, "Diff of two runs")."""
    ev = trace.events
    start = np.asarray(ev["start_ns"][rows], np.int64)
    dur = np.asarray(ev["dur_ns"][rows], np.int64)
    if not len(rows):
        return dur
    inner = child_time(cache.threads(trace)[ev["track"][rows]], start, start + dur)
    return np.maximum(dur - inner, 0)  # (never below 0, should spans on a thread overlap)
