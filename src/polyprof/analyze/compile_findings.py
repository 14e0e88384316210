"""torch.compile compiling inside the analysed steps: a recompile.

The default window leaves out the first step, where a compiled program compiles; a
compilation in the steps analysed is one the program pays again: new input shapes (a
batch of another size with ``dynamic=False``), a guard that failed, or a graph break
reached for the first time. torch marks its compilations with ranges torch.profiler
records (``dynamo_timed``): a frame's (``entire_frame_compile``, ``_compile.compile_inner``)
and Inductor's (``compile_fx_inner``: a backward graph compiles at its first backward,
after its frame's). Their union in the window is the time the finding gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..derive import cache
from ..derive.intervals import union
from ..trace.core import Trace
from .advice import suggestion
from .common import analysed_span
from .finding import Finding
from .units import fmt_ns, number_ranges
from .window import host_mask

#: a frame's compilation (torch 2.5 and later, and before), then Inductor's own
FRAME_COMPILE = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)",
                 "_compile.<locals>.compile_inner (dynamo_timed)")
INDUCTOR_COMPILE = ("compile_fx_inner (dynamo_timed)", "inductor_compile")
RECOMPILE_MIN_PCT = 5.0  # compiling takes at least this share of the analysed span
RECOMPILE_HIGH_PCT = 25.0


def compile_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    rows = trace.rows_named(*FRAME_COMPILE, *INDUCTOR_COMPILE)
    if not len(rows):
        return []
    ev = trace.events
    rows = rows[host_mask(trace, ev["start_ns"][rows])]
    t0, t1 = analysed_span(trace)
    if not len(rows) or t1 <= t0:
        return []
    start = ev["start_ns"][rows].astype(np.int64)
    s, e = union(start, start + ev["dur_ns"][rows].astype(np.int64))
    took = int((e - s).sum())
    share = 100.0 * took / (t1 - t0)
    if share < RECOMPILE_MIN_PCT:
        return []
    names = [trace.strings[i] for i in ev["name"][rows].tolist()]
    frames = max(sum(n == f for n in names) for f in FRAME_COMPILE)  # (the names nest: one of them counts)
    steps = cache.steps(trace)
    idx = steps.of(start)
    where = sorted({int(steps.number[i]) for i in idx[idx >= 0].tolist()})
    in_steps = f" in step{'s' if len(where) > 1 else ''} {number_ranges(where)}" if where else ""
    return [Finding(
        "recompiles", f"torch.compile compiled inside the analysed steps{in_steps}: {fmt_ns(took)}, "
        f"{share:.0f}% of their time ({frames} frame{'s' if frames != 1 else ''})",
        "high" if share >= RECOMPILE_HIGH_PCT else "medium", "",
        {"compile_ns": took, "share_pct": round(share, 2), "frames": frames, "steps": where,
         "span_ns": int(t1 - t0)},
        [], suggestion(trace, "recompiles"))]
