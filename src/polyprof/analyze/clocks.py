"""Devices whose clock was not put on the host's: their times cannot be compared with it.

A plugin that maps a device clock onto the session clock records its fit in
``metadata["clock_sync"][plane name][plugin]`` (``trace/metadata_keys.record_fit``;
the OpenCL plugin: ``trace/clock.py``'s ``ClockFit.to_dict``). A fit without a finite
bound (from no samples, ``n == 0``, or a failed fit) is no fit: the device's events sit where an offset of 0 put them (226 ms early
on PoCL when sampling is off). Such a device is named at the top of every summary, in
the HTML overview and ``--json`` (``overview.unsynchronised``), gets its own finding,
and is kept out of the findings that set its times against the host's or its span
(``analyze/findings.py``). Its own tables (kernel times, per-stream breakdowns) are
still computed: durations on one clock hold.
"""

from __future__ import annotations

import math
from typing import Any

from ..derive import cache
from ..trace.core import Trace
from ..trace.metadata_keys import clock_fits


def unsynchronised(trace: Trace) -> dict[str, str]:
    """Plane name -> why its clock is not on the host's, for every such device plane."""
    return cache.memo(trace, "unsynchronised", _find)


def _find(trace: Trace) -> dict[str, str]:
    devices = {p.name for p in trace.planes if p.kind == "device"}
    out: dict[str, str] = {}
    for meta in [trace.metadata, *(s.metadata for s in trace.sources)]:
        if not isinstance(meta, dict):
            continue
        for plane, _plugin, fit in clock_fits(meta):
            if plane in devices and plane not in out:
                why = _why(fit)
                if why:
                    out[plane] = why
    return out


def _why(fit: dict[str, Any]) -> str:
    n = fit.get("n")
    bound = fit.get("bound_ns")
    try:
        finite = bound is not None and math.isfinite(float(bound))
    except (TypeError, ValueError):
        finite = False
    msg = str(fit.get("message") or "")
    if isinstance(n, int) and n == 0 and not finite:
        more = f" ({msg})" if msg and msg != "no clock samples" else ""
        return f"no clock samples{more}: its times are not on the host's clock"
    if not finite:
        return f"clock fit without a bound ({msg or 'unknown error'}): its times may be off the host's by any amount"
    return ""
