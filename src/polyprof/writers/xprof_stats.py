"""The stats XProf's GPU tools read, made from polyprof's own analyses for the writer.

XProf's kernel_stats, framework_op_stats, op_profile and overview_page do not look at
event names or categories of a GPU trace; they read stats that CUPTI and XLA's grouping
put on the events (xprof ``gpu_event_stats``, tsl ``group_events``):

- ``kernel_details`` on a device event makes it a kernel (``regs:`` ``static_shared:``
  ``grid:x,y,z`` ``block:x,y,z`` ``occ_pct:`` tokens, parsed when present);
  ``memcpy_details`` (``kind:`` ``num_bytes:``) makes it a copy;
- ``tf_op`` on a device event is the framework op its time counts for: polyprof's
  ``analyze.devops.device_op_names`` (the op of the launching call, else the
  activity's own name), so XProf groups device time as ``device_op_breakdown`` does;
- ``group_id`` is the step number: on the step marker (with ``step_name``), on host events that
  start inside a step, on device activity *launched* inside a step — polyprof's step
  attribution — and on everything else of a device plane by time (``device_groups``:
  XProf gives an event without one the group of the event before it), so XProf's
  step-time graph has polyprof's steps (``device_step_spans``: the writer's Steps line).

Only keys the trace does not already carry are added (an XSpace read from XProf keeps
its own), and the writer lists them as its additions, so polyprof's reader drops them
again: polyprof -> XSpace -> polyprof still round-trips.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analyze.common import device_view
from ..analyze.devops import device_op_names
from ..derive import cache
from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..formats.xprof_memory import xspace_counters
from .xprof_costs import device_costs, stat_columns
from .xprof_names import TPU_PREFIX
from ..trace.sorting import unique

KERNEL_DETAILS = "kernel_details"
MEMCPY_DETAILS = "memcpy_details"
TF_OP = "tf_op"
GROUP_ID = "group_id"
STEP_NAME = "step_name"

#: kernel_details token -> stats that may hold it (Kineto arg names, then polyprof keys)
_KERNEL_TOKENS = (("regs", ("registers per thread",)), ("static_shared", ("shared memory",)),
                  ("grid", (keys.GRID,)), ("block", (keys.BLOCK,)), ("occ_pct", ("est. achieved occupancy %",)))
_NUMS = re.compile(r"\d+")


def _dims(v: Any) -> str | None:
    """'x,y,z' from a grid/block stat ("[864,1,1]", "864,1,1", 864, [8, 8])."""
    if isinstance(v, (int, np.integer)):
        nums = [int(v)]
    else:
        nums = [int(x) for x in _NUMS.findall(str(v))]
    if not nums or len(nums) > 3:
        return None
    return ",".join(str(x) for x in (nums + [1, 1])[:3])


def _token(name: str, v: Any) -> str | None:
    if name in ("grid", "block"):
        d = _dims(v)
        return f"{name}:{d}" if d else None
    if isinstance(v, (int, float, np.integer, np.floating)) and np.isfinite(v):
        return f"{name}:{float(v):g}" if name == "occ_pct" else f"{name}:{int(v)}"
    return None


def _kernel_details(trace: Trace, rows: np.ndarray) -> list[str]:
    parts: list[list[str]] = [[] for _ in rows]
    for token, stat_keys in _KERNEL_TOKENS:
        for key in stat_keys:
            col = trace.stats.get(key)
            if col is None:
                continue
            m, vals = col.lookup(rows)
            for i, v in zip(np.flatnonzero(m).tolist(), vals.tolist()):
                t = _token(token, v)
                if t:
                    parts[i].append(t)
            break
    # XProf counts an event as a kernel when the details are not empty; "kernel:1" is a
    # token it ignores, for kernels whose source recorded no launch parameters
    return [" ".join(p) if p else "kernel:1" for p in parts]


def _memcpy_details(trace: Trace, rows: np.ndarray) -> list[str]:
    names = trace.names(rows)
    col = trace.stats.get(keys.BYTES)
    size = np.zeros(len(rows), np.int64)
    if col is not None and col.kind in "iuf":
        m, vals = col.lookup(rows)
        size[m] = vals.astype(np.int64)
    out = []
    for n, b in zip(names.tolist(), size.tolist()):
        kind = next((k for k in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP") if k.lower() in n.lower()), "copy")
        out.append(f"kind:{kind} num_bytes:{b}")
    return out


def xprof_columns(trace: Trace) -> dict[str, tuple[np.ndarray, list[Any]]]:
    """Stat key -> (event rows ascending, values) for every XProf stat the trace lacks."""
    out: dict[str, tuple[np.ndarray, list[Any]]] = {}
    v = device_view(trace)
    ev = trace.events
    if len(v.rows):
        kinds = trace.kinds[v.rows]
        # kernel_stats is XProf's GPU tool: a TPU's XLA ops are no kernels
        tpu = np.array([p.name.startswith(TPU_PREFIX) for p in trace.planes], bool)[trace.track_plane[ev["track"][v.rows]]]
        sel = np.flatnonzero(((kinds == Kind.KERNEL) | (kinds == Kind.COLLECTIVE)) & (ev["dur_ns"][v.rows] > 0) & ~tpu)
        if KERNEL_DETAILS not in trace.stats and len(sel):
            out[KERNEL_DETAILS] = (v.rows[sel], _kernel_details(trace, v.rows[sel]))
        sel = np.flatnonzero(kinds == Kind.MEMCPY)
        if MEMCPY_DETAILS not in trace.stats and len(sel):
            out[MEMCPY_DETAILS] = (v.rows[sel], _memcpy_details(trace, v.rows[sel]))
        if TF_OP not in trace.stats:
            out[TF_OP] = (v.rows, device_op_names(trace).tolist())
    steps = cache.steps(trace)
    if len(steps) and GROUP_ID not in trace.stats:
        out.update(_groups(trace, steps))
    costs = device_costs(trace)
    if costs is not None:  # the framework ops' FLOPs as XLA ops (xprof_costs)
        out.update(stat_columns(trace, costs))
    return out


def _groups(trace: Trace, steps: Any) -> dict[str, tuple[np.ndarray, list[Any]]]:
    """group_id (the step number) on step markers, host events in steps, and every event
    of a device plane in a step (``device_groups``); step_name on the markers."""
    ev = trace.events
    host = np.array([p.kind == "host" for p in trace.planes], bool)[trace.track_plane[ev["track"]]]
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)[ev["track"]]
    group = np.full(trace.n_events, -1, np.int64)
    hrows = np.flatnonzero(host & ~derived)
    group[hrows] = steps.of(ev["start_ns"][hrows])
    dg = device_groups(trace)
    group[dg.rows] = dg.step
    group[steps.rows] = np.arange(len(steps))
    rows = np.flatnonzero(group >= 0)
    names = [f"{trace.strings[ev['name'][r]]}" for r in steps.rows.tolist()]
    return {GROUP_ID: (rows, steps.number[group[rows]].tolist()),
            STEP_NAME: (np.asarray(steps.rows, np.int64)[np.argsort(steps.rows)],
                        [names[i] for i in np.argsort(steps.rows)])}


#: XProf's derived "Steps" line on a device plane: its step database reads its step
#: markers from that line
STEP_LINE_ID, STEP_LINE_NAME = keys.LINE_STEPS_ID, keys.LINE_STEPS


@dataclass
class DeviceGroups:
    """The step (index into ``cache.steps``) of what the writer puts on device planes."""

    rows: np.ndarray  # event rows on device planes that belong to a step
    step: np.ndarray  # their step index
    counters: np.ndarray  # per sample of ``xspace_counters`` (in its order): step index, -1 = none
    spans: dict[int, list[tuple[int, int, int]]]  # device plane -> (step index, first, last) in time order


def device_groups(trace: Trace) -> DeviceGroups:
    """Which step every event and counter sample of a device plane belongs to, for
    XProf's ``group_id``.

    XProf (``derived_timeline``: ``ProcessUngroupedEvents``, ``DeriveStepEventsFromGroups``)
    sorts every event of a GPU plane by time, gives each event without a ``group_id`` the
    group of the event before it, and makes its device step markers from the runs of
    consecutive events of one group; its step time is the longest marker of the step.
    An event left ungrouped therefore stretches the step before it: a step's device
    annotation (``gpu_user_annotation``), which starts at the step's first kernel, ran
    the step before on to it. So every event is grouped here, as polyprof attributes it:

    - device activity by its launch: the step whose host span holds the launching call
      (polyprof's step attribution);
    - anything else on the plane (annotations, activity launched outside every step,
      counter samples) by time: the step whose device span (first to last activity
      launched in it) holds it; in a gap between two steps, the nearer one; after the
      last, the last (as XProf would); before the first, none (XProf leaves it so too).

    The spans (the markers of the writer's own Steps line) cover everything grouped, so
    they hold every marker XProf derives from these groups and are the step times XProf
    shows."""
    return cache.memo(trace, "xprof_device_groups", _device_groups)


def _device_groups(trace: Trace) -> DeviceGroups:
    steps = cache.steps(trace)
    c = xspace_counters(trace)  # (as the XSpace writer's counters, in its order)
    none = DeviceGroups(np.zeros(0, np.int64), np.zeros(0, np.int64), np.full(len(c["ts_ns"]), -1, np.int64), {})
    v = device_view(trace)
    if not len(steps) or not len(v.rows):
        return none
    ev = trace.events
    lstart = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)
    launched = steps.of(lstart)
    is_device = np.array([p.kind == "device" for p in trace.planes], bool)
    ev_plane = trace.track_plane[ev["track"]].astype(np.int64)
    on_device = np.flatnonzero(is_device[ev_plane])
    group = np.full(trace.n_events, -1, np.int64)
    group[v.rows] = launched
    c_plane, c_ts = np.asarray(c["plane"], np.int64), np.asarray(c["ts_ns"], np.int64)
    c_group = np.full(len(c_plane), -1, np.int64)
    spans: dict[int, list[tuple[int, int, int]]] = {}
    starts, ends = ev["start_ns"].astype(np.int64), (ev["start_ns"] + ev["dur_ns"]).astype(np.int64)
    for plane in unique(ev_plane[v.rows[launched >= 0]]).tolist():
        if not is_device[plane]:
            continue
        rows = on_device[ev_plane[on_device] == plane]
        act = rows[group[rows] >= 0]
        ids, first, last = _spans(group[act], starts[act], ends[act])
        rest = rows[group[rows] < 0]
        group[rest] = _by_time(starts[rest], ids, first, last)
        csel = np.flatnonzero(c_plane == plane)
        c_group[csel] = _by_time(c_ts[csel], ids, first, last)
        # the spans over everything grouped: the markers hold XProf's runs
        mine = rows[group[rows] >= 0]
        counted = csel[c_group[csel] >= 0]
        ids, first, last = _spans(np.concatenate([group[mine], c_group[counted]]),
                                  np.concatenate([starts[mine], c_ts[counted]]),
                                  np.concatenate([ends[mine], c_ts[counted]]))
        order = np.argsort(first, kind="stable")
        spans[int(plane)] = [(int(ids[i]), int(first[i]), int(last[i])) for i in order.tolist()]
    rows = on_device[group[on_device] >= 0]
    return DeviceGroups(rows, group[rows], c_group, spans)


def _spans(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, first start, last end) per group present."""
    ids, inv = np.unique(group, return_inverse=True)
    first = np.full(len(ids), np.iinfo(np.int64).max)
    last = np.full(len(ids), np.iinfo(np.int64).min)
    np.minimum.at(first, inv, start)
    np.maximum.at(last, inv, end)
    return ids, first, last


def _by_time(t: np.ndarray, ids: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The group of each time by the groups' spans: the latest-starting span that holds
    it; in a gap, the nearer neighbour (the later one on a tie); after every span, the
    last; before every span, -1."""
    if not len(t) or not len(ids):
        return np.full(len(t), -1, np.int64)
    order = np.argsort(first, kind="stable")
    ids, first, last = ids[order], first[order], last[order]
    reach = np.maximum.accumulate(last)  # spans may overlap (several streams)
    i = np.searchsorted(first, t, side="right") - 1  # the latest span starting at or before t
    out = np.full(len(t), -1, np.int64)
    ok = i >= 0
    j = np.maximum(i, 0)
    inside = ok & (t <= last[j])
    out[inside] = ids[j[inside]]
    # in no span: the span before (the one reaching furthest) or the next one, whichever is nearer
    gap = ok & ~inside
    nxt = np.minimum(j + 1, len(ids) - 1)
    has_next = gap & (j + 1 < len(ids))
    prev_gap = t - reach[j]
    next_gap = first[nxt] - t
    take_next = has_next & (next_gap <= prev_gap)
    out[take_next] = ids[nxt[take_next]]
    keep_prev = gap & ~take_next
    out[keep_prev] = ids[j[keep_prev]]
    return out


def device_step_spans(trace: Trace) -> dict[int, list[tuple[int, str, int, int]]]:
    """Per device plane: (group id = step number, name, start, end) of each step's marker
    on XProf's device "Steps" line, XProf's step time.

    The step's span as polyprof has it (``cache.steps``: the host step) where it holds
    everything of the step on the device (``device_groups``): a step the host waits for,
    the rule XProf's own ``StepDetails::StepTime`` has for a host step marker that holds
    the device's. Else (the device still runs the step after the host moved on) the
    device span, as XProf derives its GPU steps. Either way the marker holds every marker
    XProf derives from the ``group_id`` s written, so it is the one XProf's step time takes."""
    steps = cache.steps(trace)
    out: dict[int, list[tuple[int, str, int, int]]] = {}
    for plane, spans in device_groups(trace).spans.items():
        marks = []
        for i, first, last in spans:
            h0, h1 = int(steps.start[i]), int(steps.end[i])
            lo, hi = (h0, h1) if h0 <= first and last <= h1 else (first, last)
            marks.append((int(steps.number[i]), str(int(steps.number[i])), lo, hi))
        out[plane] = marks
    return out
