"""The memory findings: a peak held mostly by one section or op, and memory that grows
step over step (a leak). Thresholds are module constants, as in ``findings.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..trace.core import Trace
from .advice import suggestion
from .finding import Finding, _records
from .frames import column, order_asc
from .inputs import memory_events

MIB = 1 << 20
PEAK_HOLDER_SHARE = 50.0  # one section (or op) holds this share of what is live at the peak
PEAK_MIN_BYTES = 1 * MIB  # ... and the live memory is at least this much
PEAK_LIVE_SHARE = 10.0  # ... and at least this share of the peak (the rest was there before)
GROWTH_MIN_STEPS = 3  # steps needed to call growth a trend
GROWTH_RISING_SHARE = 80.0  # share of step-to-step changes that must be increases
GROWTH_MIN_BYTES = 1 * MIB  # growth from the first to the last step end


def memory_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    return [*_peak_dominated(trace, t), *_growth(trace)]


def _fmt(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _peak_dominated(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    peaks = t("memory_peak")
    out: list[Finding] = []
    cols = ("device", "allocator", "live_at_peak_bytes", "peak_bytes", "start_bytes", "peak_ns")
    values = {c: column(peaks, c).tolist() for c in cols} if len(peaks) else {}
    holders: dict[str, Any] = {}  # by "section" / "op": every series at once, computed once
    for i in range(len(peaks)):
        p = {c: v[i] for c, v in values.items()}
        live, peak = int(p["live_at_peak_bytes"]), int(p["peak_bytes"])
        if live < PEAK_MIN_BYTES or 100.0 * live / max(peak, 1) < PEAK_LIVE_SHARE:
            continue
        for by in ("section", "op"):
            if by not in holders:
                from .memory import peak_holders  # only at a peak: without memory events the module is not imported

                holders[by] = peak_holders(trace, by)
            h = holders[by]
            at = np.flatnonzero((column(h, "device") == p["device"]) & (column(h, "allocator") == p["allocator"])
                                & (column(h, "holder") != ""))
            if not len(at) or column(h, "share_pct")[at[0]] < PEAK_HOLDER_SHARE:
                continue
            holder, share = column(h, "holder")[at[0]], float(column(h, "share_pct")[at[0]])
            out.append(Finding(
                "memory_peak_held_by_one", f"{p['device']}: {share:.0f}% of the {_fmt(live)} allocated in the "
                f"analysed steps and live at the {_fmt(peak)} peak was allocated in {by} {holder!r}",
                "high" if share >= 80 else "medium", str(p["device"]),
                {"by": by, "holder": str(holder), "held_bytes": int(column(h, "bytes")[at[0]]),
                 "share_pct": round(share, 2), "peak_bytes": peak, "start_bytes": int(p["start_bytes"]),
                 "live_at_peak_bytes": live, "peak_at_ns": int(p["peak_ns"]) - trace.span_ns[0],
                 "allocator": str(p["allocator"])},
                [{("name" if k == "holder" else k): v for k, v in r.items()}
                 for r in _records(h, ["holder", "bytes", "allocations", "share_pct"], at=at)],
                f"Lowering the peak starts with {holder!r}: " + suggestion(trace, "memory_peak_held_by_one")))
            break  # a section when one dominates, else an op
    return out


def _growth(trace: Trace) -> list[Finding]:
    if not memory_events(trace):  # no levels to grow (analyze/inputs.py: as the memory tables)
        return []
    from .memory import step_levels  # (as above)

    lv = step_levels(trace)
    out: list[Finding] = []
    if not len(lv):
        return out
    dev, alloc = column(lv, "device"), column(lv, "allocator")
    for d, a in dict.fromkeys(zip(dev.tolist(), alloc.tolist())):
        at = np.flatnonzero((dev == d) & (alloc == a))
        at = at[order_asc(column(lv, "step")[at], stable=False)]  # as sort_values("step")
        steps, held = column(lv, "step")[at], column(lv, "held_bytes")[at]
        if len(held) < GROWTH_MIN_STEPS:
            continue
        diffs = np.diff(held)
        rising = 100.0 * (diffs > 0).sum() / len(diffs)
        growth = int(held[-1] - held[0])
        if rising < GROWTH_RISING_SHARE or growth < GROWTH_MIN_BYTES:
            continue
        per_step = growth / (len(held) - 1)
        ev: list[dict[str, Any]] = [{"step": int(s), "held_bytes": int(h)}
                                    for s, h in zip(steps[-5:].tolist(), held[-5:].tolist())]
        out.append(Finding(
            "memory_growth", f"{d}: memory held grows step over step (+{_fmt(per_step)} per step, "
            f"{_fmt(growth)} over {len(held)} steps)", "high" if rising == 100.0 else "medium", str(d),
            {"steps": len(held), "growth_bytes": growth, "per_step_bytes": int(per_step),
             "rising_pct": round(rising, 2), "first_step_bytes": int(held[0]), "last_step_bytes": int(held[-1]),
             "allocator": str(a)}, ev,
            suggestion(trace, "memory_growth")))
    return out
