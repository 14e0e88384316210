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
  start inside a step, and on device activity *launched* inside a step — polyprof's
  step attribution, so XProf's step-time graph has polyprof's steps.

Only keys the trace does not already carry are added (an XSpace read from XProf keeps
its own), and the writer lists them as its additions, so polyprof's reader drops them
again: polyprof -> XSpace -> polyprof still round-trips.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..analyze.common import device_view
from ..analyze.devops import device_op_names
from ..derive import cache
from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from .xprof_costs import device_costs, stat_columns
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
        sel = np.flatnonzero(((kinds == Kind.KERNEL) | (kinds == Kind.COLLECTIVE)) & (ev["dur_ns"][v.rows] > 0))
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
    """group_id (the step number) on step markers, host events in steps, and device
    activity launched in a step; step_name on the markers."""
    v = device_view(trace)
    ev = trace.events
    host = np.array([p.kind == "host" for p in trace.planes], bool)[trace.track_plane[ev["track"]]]
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)[ev["track"]]
    group = np.full(trace.n_events, -1, np.int64)
    hrows = np.flatnonzero(host & ~derived)
    group[hrows] = steps.of(ev["start_ns"][hrows])
    if len(v.rows):
        lstart = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)
        group[v.rows] = steps.of(lstart)
    group[steps.rows] = np.arange(len(steps))
    rows = np.flatnonzero(group >= 0)
    names = [f"{trace.strings[ev['name'][r]]}" for r in steps.rows.tolist()]
    return {GROUP_ID: (rows, steps.number[group[rows]].tolist()),
            STEP_NAME: (np.asarray(steps.rows, np.int64)[np.argsort(steps.rows)],
                        [names[i] for i in np.argsort(steps.rows)])}


#: line id of XProf's derived "Steps" line on a device plane (tsl kThreadIdStepInfo);
#: XProf's step database reads its step markers from that line
STEP_LINE_ID = 0xDEADBEEF - (1 << 32)  # an int in C++: -559038737
STEP_LINE_NAME = "Steps"


def device_step_spans(trace: Trace) -> dict[int, list[tuple[int, str, int, int]]]:
    """Per device plane: (group id = step number, name, start, end) of the device activity
    launched in each step — the markers of XProf's device "Steps" line."""
    steps = cache.steps(trace)
    v = device_view(trace)
    if not len(steps) or not len(v.rows):
        return {}
    ev = trace.events
    lstart = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)
    g = steps.of(lstart)
    out: dict[int, list[tuple[int, str, int, int]]] = {}
    for plane in unique(v.plane[g >= 0]).tolist():
        sel = (v.plane == plane) & (g >= 0)
        gs = g[sel]
        first = np.full(len(steps), np.iinfo(np.int64).max)
        last = np.full(len(steps), np.iinfo(np.int64).min)
        np.minimum.at(first, gs, v.start[sel])
        np.maximum.at(last, gs, v.end[sel])
        out[int(plane)] = [(int(steps.number[i]), str(int(steps.number[i])), int(first[i]), int(last[i]))
                           for i in unique(gs).tolist()]
    return out
