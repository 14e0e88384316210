"""Per-step, per-device times."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..derive.intervals import covered, union
from ..trace.core import Trace
from .common import COMPUTE, activity_planes, device_view
from .frames import empty_frame, frame
from .window import WindowArg, view
from ..trace.sorting import unique_rows

if TYPE_CHECKING:
    from .table import Table

COLUMNS = ["step", "plane", "host_start_ns", "host_end_ns", "host_ns", "device_start_ns", "device_end_ns",
           "busy_ns", "compute_ns", "non_compute_ns", "idle_ns", "activities", "launch_count",
           "launch_mean_ns", "launch_max_ns", "unlaunched_activities"]


def step_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per (step, device); one row per step with plane "" when there is no device.
    The devices are the planes with device activity anywhere in the trace, or, in a window
    of a rank read window by window, in the rank (``common.activity_planes``): a step
    without activity has a row of none for each.

    Columns: ``step`` (number), ``plane``, ``host_start_ns`` / ``host_end_ns`` /
    ``host_ns`` (the step on the host); ``device_start_ns`` / ``device_end_ns`` (first
    start and last end of the device activity launched in the step; -1 if none);
    ``busy_ns``, ``compute_ns``, ``non_compute_ns``, ``idle_ns`` (device time inside the
    host step window, as in ``temporal_breakdown``; they add up to ``host_ns``);
    ``activities`` (device activities launched in the step: their launch call is in the
    trace and started in it); ``launch_count``, ``launch_mean_ns``, ``launch_max_ns``
    (distinct launch calls of those activities and their CPU durations);
    ``unlaunched_activities`` (device activities whose launch is not in the trace that
    started in the step: counted apart, as in a sampled trace they were launched
    earlier; ``device_start_ns`` / ``device_end_ns`` include them). With a ``window``,
    its steps only.
    """
    trace = view(trace, window)
    steps = cache.steps(trace)
    if not len(steps):
        return empty_frame(COLUMNS, ("plane",))
    v = device_view(trace)
    planes = activity_planes(trace)
    n = len(steps)
    number = steps.number.astype(np.int64)
    a, b = steps.start.astype(np.int64), steps.end.astype(np.int64)
    if not len(planes):
        zeros = np.zeros(n, np.int64)
        return frame({"step": number, "plane": np.full(n, "", object), "host_start_ns": a, "host_end_ns": b,
                      "host_ns": b - a, "device_start_ns": zeros - 1, "device_end_ns": zeros - 1,
                      "busy_ns": zeros, "compute_ns": zeros, "non_compute_ns": zeros, "idle_ns": b - a,
                      "activities": zeros, "launch_count": zeros, "launch_mean_ns": np.zeros(n),
                      "launch_max_ns": zeros, "unlaunched_activities": zeros})
    ev = trace.events
    lstart = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)
    of = steps.of(lstart)
    cols: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    for plane in planes.tolist():  # every step at once per device: O(activities log activities)
        on = v.plane == plane
        busy = covered(*union(v.start[on], v.end[on]), a, b)
        comp = on & (v.cls == COMPUTE)
        compute = covered(*union(v.start[comp], v.end[comp]), a, b)
        mine = np.flatnonzero(on & (of >= 0))
        step = of[mine]
        ds = np.full(n, np.iinfo(np.int64).max)
        de = np.full(n, -1, np.int64)
        np.minimum.at(ds, step, v.start[mine])
        np.maximum.at(de, step, v.end[mine])
        ds[ds == np.iinfo(np.int64).max] = -1
        launched = v.launch[mine] >= 0
        # distinct launch calls per step, their CPU durations
        pairs, _, _ = unique_rows(step[launched], v.launch[mine][launched])
        p_step, p_dur = pairs[:, 0], ev["dur_ns"][pairs[:, 1]].astype(np.int64)
        calls = np.bincount(p_step, minlength=n)
        total = np.bincount(p_step, weights=p_dur, minlength=n)
        longest = np.zeros(n, np.int64)
        np.maximum.at(longest, p_step, p_dur)
        for c, col in (("step", number), ("host_start_ns", a), ("host_end_ns", b), ("host_ns", b - a),
                       ("device_start_ns", ds), ("device_end_ns", de), ("busy_ns", busy), ("compute_ns", compute),
                       ("non_compute_ns", busy - compute), ("idle_ns", (b - a) - busy),
                       ("activities", np.bincount(step[launched], minlength=n)), ("launch_count", calls),
                       ("launch_mean_ns", np.divide(total, calls, out=np.zeros(n), where=calls > 0)),
                       ("launch_max_ns", longest),
                       ("unlaunched_activities", np.bincount(step[~launched], minlength=n))):
            cols[c].append(np.asarray(col))
        cols["plane"].append(np.full(n, trace.planes[int(plane)].name, object))
    # rows step-major, then device, as the steps run
    order = np.arange(n * len(planes)).reshape(len(planes), n).T.ravel()
    return frame({c: np.concatenate(parts) for c, parts in cols.items()}, order)
