"""torch.compile compiling inside the analysed steps: a recompile.

The default window leaves out the first step, where a compiled program compiles; a
compilation in the steps analysed is one the program pays again: new input shapes (a
batch of another size with ``dynamic=False``), a guard that failed, or a graph break
reached for the first time. torch marks its compilations with ranges torch.profiler
records (``dynamo_timed``): a frame's (``entire_frame_compile``, ``_compile.compile_inner``)
and Inductor's (``compile_fx_inner``: a backward graph compiles at its first backward,
after its frame's). Which compilation is a recompile torch says itself: each call of a compiled frame enters
``Torch-Compiled Region: F/G``, G the frame's compilation it runs (0: its first), so a
frame's compilation followed by the region of a G above 0 is a recompile (and Inductor's
ranges after it, up to the next frame's, are its). Where a trace has no such regions
(only the CUDA activity and compile ranges), a compilation counts only in a step after
the first. Their union in the analysed span is the time the finding gives.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..derive import cache
from ..derive.intervals import union
from ..trace.core import Trace
from .advice import suggestion
from .common import analysed_span, stretches_ns
from .finding import Finding
from .units import fmt_ns, number_ranges
from .window_counting import host_mask

#: a frame's compilation (torch 2.5 and later, and before), then Inductor's own
FRAME_COMPILE = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)",
                 "_compile.<locals>.compile_inner (dynamo_timed)")
INDUCTOR_COMPILE = ("compile_fx_inner (dynamo_timed)", "inductor_compile", "entire_backward_compile")
#: the range each call of a compiled frame enters: frame F, its compilation G
_REGION = r"^Torch-Compiled Region: (\d+)/(\d+)$"  # compiled on first use (re's cache)
_REGION_PREFIX = "Torch-Compiled Region: "
RECOMPILE_MIN_PCT = 5.0  # compiling takes at least this share of the analysed span
RECOMPILE_HIGH_PCT = 25.0


def compile_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    rows = trace.rows_named(*FRAME_COMPILE, *INDUCTOR_COMPILE)
    if not len(rows):
        return []
    ev = trace.events
    rows = _recompiling(trace, rows)
    rows = rows[host_mask(trace, ev["start_ns"][rows])] if len(rows) else rows
    t0, t1 = analysed_span(trace)
    if not len(rows) or t1 <= t0:
        return []
    start = ev["start_ns"][rows].astype(np.int64)
    s, e = union(np.clip(start, t0, t1), np.clip(start + ev["dur_ns"][rows].astype(np.int64), t0, t1))
    took = int((e - s).sum())
    share = 100.0 * took / max(stretches_ns(trace), 1)  # (less what is between a schedule's cycles)
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
         "span_ns": stretches_ns(trace)},
        [], suggestion(trace, "recompiles"))]


def _recompiling(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Of the compile ranges ``rows``, those of a recompilation (see the module doc), in
    time order: each frame compilation's carry (the region after it runs a G above 0)
    spread forward to the ranges up to the next one (none before the first)."""
    ev = trace.events
    rows = rows[np.argsort(ev["start_ns"][rows], kind="stable")]
    which = _region_strings(trace.strings)
    if not which:  # no regions to tell: a compilation in a step after the first
        steps = cache.steps(trace)
        return rows[steps.of(ev["start_ns"][rows]) >= 1] if len(steps) else rows[:0]
    regions = trace.rows_named(*(trace.strings[i] for i in which))
    regions = regions[np.argsort(ev["start_ns"][regions], kind="stable")]
    ids = np.fromiter(which, np.int64, len(which))  # ascending: found in string order
    again = np.append(np.fromiter(which.values(), np.int64, len(which))[
        np.searchsorted(ids, ev["name"][regions])] > 0, False)  # per region (then past the last: no)
    frame = np.flatnonzero(np.isin(ev["name"][rows], [trace.string_id(f) for f in FRAME_COMPILE]))
    end = ev["start_ns"][rows[frame]].astype(np.int64) + ev["dur_ns"][rows[frame]].astype(np.int64)
    carry = again[np.searchsorted(ev["start_ns"][regions].astype(np.int64), end)]  # the next region's
    latest = np.full(len(rows), -1, np.int64)
    latest[frame] = np.arange(len(frame))
    latest = np.maximum.accumulate(latest) if len(rows) else latest  # the latest frame compilation's
    return rows[(latest >= 0) & carry[np.maximum(latest, 0)]] if len(frame) else rows[:0]


def _region_strings(strings: list[str]) -> dict[int, int]:
    """``Torch-Compiled Region: F/G`` strings of the table: id -> G, ids ascending (one
    pass over the distinct strings, not the events: a search of the joined table in C
    measured no faster, 34.6 against 34.4 ms on 500k strings)."""
    which: dict[int, int] = {}
    for i, text in enumerate(strings):
        if text.startswith(_REGION_PREFIX):
            m = re.match(_REGION, text)
            if m:
                which[i] = int(m.group(2))
    return which
