"""Per-step, per-device times."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..derive.intervals import clip_union
from ..trace.core import Trace
from .common import COMPUTE, device_view
from .frames import empty_frame, rows_frame
from .window import WindowArg, view
from ..trace.sorting import unique

if TYPE_CHECKING:
    from .table import Table

COLUMNS = ["step", "plane", "host_start_ns", "host_end_ns", "host_ns", "device_start_ns", "device_end_ns",
           "busy_ns", "compute_ns", "non_compute_ns", "idle_ns", "activities", "launch_count",
           "launch_mean_ns", "launch_max_ns", "unlaunched_activities"]


def step_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per (step, device); one row per step with plane "" when there is no device.

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
    ev = trace.events
    lstart = np.where(v.launch >= 0, ev["start_ns"][np.maximum(v.launch, 0)], v.start)
    of = steps.of(lstart)
    out = []
    planes = unique(v.plane)
    for i in range(len(steps)):
        a, b = int(steps.start[i]), int(steps.end[i])
        if not len(planes):
            out.append((int(steps.number[i]), "", a, b, b - a, -1, -1, 0, 0, 0, b - a, 0, 0, 0.0, 0, 0))
            continue
        for plane in planes:
            on = v.plane == plane
            bs, be = clip_union(v.start[on], v.end[on], a, b)
            comp = on & (v.cls == COMPUTE)
            cs, ce = clip_union(v.start[comp], v.end[comp], a, b)
            busy, compute = int((be - bs).sum()), int((ce - cs).sum())
            mine = on & (of == i)
            ds = int(v.start[mine].min()) if mine.any() else -1
            de = int(v.end[mine].max()) if mine.any() else -1
            launched = mine & (v.launch >= 0)
            lr = unique(v.launch[launched])
            ld = ev["dur_ns"][lr]
            out.append((int(steps.number[i]), trace.planes[int(plane)].name, a, b, b - a, ds, de, busy, compute,
                        busy - compute, (b - a) - busy, int(launched.sum()), len(lr),
                        float(ld.mean()) if len(ld) else 0.0, int(ld.max()) if len(ld) else 0,
                        int((mine & ~launched).sum())))
    return rows_frame(out, COLUMNS)
