"""The memory findings: a peak held mostly by one section or op, memory that grows step
over step (a leak), running out of memory (a torch memory snapshot's ``oom``), and an
allocator cache that holds much more than was ever allocated at once. Thresholds are
module constants, as in ``findings.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from .advice import suggestion
from .units import fmt_size
from .finding import Finding, _records
from .frames import column, order_asc
from .inputs import memory_events
from .window import selection
from .window_counting import inside

MIB = 1 << 20
PEAK_HOLDER_SHARE = 50.0  # one section (or op) holds this share of what is live at the peak
PEAK_MIN_BYTES = 1 * MIB  # ... and the live memory is at least this much
PEAK_LIVE_SHARE = 10.0  # ... and at least this share of the peak (the rest was there before)
GROWTH_MIN_STEPS = 3  # steps needed to call growth a trend
GROWTH_RISING_SHARE = 80.0  # share of step-to-step changes that must be increases
GROWTH_MIN_BYTES = 1 * MIB  # growth from the first to the last step end
#: an allocation that failed: a torch memory snapshot's ``oom`` entry
#: (``formats/torch_memory_snapshot.py``), torch.profiler's ``[OutOfMemory]`` event (Kineto)
OOM_EVENTS = ("OutOfMemoryError", "[OutOfMemory]")
OOM_TOP = 5  # the largest live allocations listed with an out-of-memory finding
CACHED_SHARE = 30.0  # reserved but never allocated at once: share of the most reserved
CACHED_MIN_BYTES = 512 * MIB  # ... and at least this much
CACHED_HIGH_SHARE = 50.0
#: allocators whose reserved bytes are a cache of freed blocks (XProf's bytes_reserved is a stack)
CACHING_ALLOCATORS = ("torch",)


def memory_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    return [*_peak_dominated(trace, t), *_growth(trace), *_out_of_memory(trace), *_cached(trace)]


def _peak_dominated(trace: Trace, t: Callable[[str], Any], holders: Callable[[str], Any] | None = None
                    ) -> list[Finding]:
    """``holders(by)``: ``analyze.memory.peak_holders``'s table (a rank read window by
    window hands its own, ``ranks/window_memory.holder_table``); read from ``trace`` if None."""
    peaks = t("memory_peak")
    out: list[Finding] = []
    cols = ("device", "allocator", "live_at_peak_bytes", "peak_bytes", "start_bytes", "peak_ns")
    values = {c: column(peaks, c).tolist() for c in cols} if len(peaks) else {}
    held: dict[str, Any] = {}  # by "section" / "op": every series at once, computed once
    for i in range(len(peaks)):
        p = {c: v[i] for c, v in values.items()}
        live, peak = int(p["live_at_peak_bytes"]), int(p["peak_bytes"])
        if live < PEAK_MIN_BYTES or 100.0 * live / max(peak, 1) < PEAK_LIVE_SHARE:
            continue
        for by in ("section", "op"):
            if by not in held:
                from .memory import peak_holders  # only at a peak: without memory events the module is not imported

                held[by] = (holders or (lambda b: peak_holders(trace, b)))(by)
            h = held[by]
            at = np.flatnonzero((column(h, "device") == p["device"]) & (column(h, "allocator") == p["allocator"])
                                & (column(h, "holder") != ""))
            if not len(at) or column(h, "share_pct")[at[0]] < PEAK_HOLDER_SHARE:
                continue
            holder, share = column(h, "holder")[at[0]], float(column(h, "share_pct")[at[0]])
            out.append(Finding(
                "memory_peak_held_by_one", f"{p['device']}: {share:.0f}% of the {fmt_size(live)} allocated in the "
                f"analysed steps and live at the {fmt_size(peak)} peak was allocated in {by} {holder!r}",
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
            "memory_growth", f"{d}: memory held grows step over step (+{fmt_size(per_step)} per step, "
            f"{fmt_size(growth)} over {len(held)} steps)", "high" if rising == 100.0 else "medium", str(d),
            {"steps": len(held), "growth_bytes": growth, "per_step_bytes": int(per_step),
             "rising_pct": round(rising, 2), "first_step_bytes": int(held[0]), "last_step_bytes": int(held[-1]),
             "allocator": str(a)}, ev,
            suggestion(trace, "memory_growth")))
    return out


def _stat(trace: Trace, key: str, rows: np.ndarray) -> list[Any]:
    """Stat ``key`` at ``rows`` (None where absent)."""
    out: list[Any] = [None] * len(rows)
    col = trace.stats.get(key)
    if col is not None and len(rows):
        has, vals = col.lookup(rows)
        for i, v in zip(np.flatnonzero(has).tolist(), vals.tolist()):
            out[i] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return out


def _out_of_memory(trace: Trace) -> list[Finding]:
    """One finding per device that ran out of memory: its first failure, with what was
    allocated and reserved then and the largest allocations live at that moment."""
    rows = trace.rows_named(*OOM_EVENTS)
    start = trace.events["start_ns"][rows]
    sel = selection(trace)
    if sel is not None:  # a window's view: the failures inside its steps
        keep = inside(sel, start)  # (not between a schedule's cycles)
        rows, start = rows[keep], start[keep]
    rows = rows[np.argsort(start, kind="stable")]
    if not len(rows):
        return []
    from .memory import memory  # only with an out-of-memory event: the memory tables' module (as above)

    m = memory(trace)
    devices = list(dict.fromkeys(m.device))
    told = _stat(trace, keys.MEMORY_DEVICE, rows)
    asked, free, reserved = (_stat(trace, k, rows) for k in ("requested_bytes", "device_free", keys.TOTAL_RESERVED))
    asked = [a if a is not None else b for a, b in zip(asked, _stat(trace, "Bytes", rows))]  # Kineto's arg
    seen: dict[str, list[int]] = {}
    for i, d in enumerate(told):
        # the reader names no device on the event: the trace's only memory device, if it has one
        seen.setdefault(str(d) if d else devices[0] if len(devices) == 1 else "", []).append(i)
    out = []
    for dev, at in seen.items():
        i = at[0]
        ts = int(trace.events["start_ns"][rows[i]])
        allocated, live = _held_at(trace, dev, ts)
        res = reserved[i]
        ev: dict[str, Any] = {
            "requested_bytes": asked[i], "device_free_bytes": free[i], "allocated_bytes": allocated,
            "reserved_bytes": res, "reserved_unallocated_bytes": res - allocated
            if res is not None and allocated is not None else None,
            "at_ns": ts - trace.span_ns[0], "out_of_memory_events": len(at)}
        what = ", ".join(x for x in (f"{fmt_size(free[i])} free on the device" if free[i] is not None else "",
                                     f"{fmt_size(allocated)} allocated" if allocated is not None else "",
                                     f"{fmt_size(res)} reserved" if res is not None else "") if x)
        title = (f"{dev or 'a device'}: out of memory asking for "
                 + (fmt_size(asked[i]) if asked[i] is not None else "an allocation") + (f" ({what})" if what else ""))
        lead = ""
        gap = ev["reserved_unallocated_bytes"]
        if gap and res and 100.0 * gap / res >= CACHED_SHARE:
            fix = ("expandable_segments is already on. " if _expandable_on(trace) else
                   "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. ")
            lead = (f"{fmt_size(gap)} of the {fmt_size(res)} reserved was not allocated (the allocator's cache, which "
                    f"fragmentation kept from serving the request): {fix}")
        out.append(Finding("out_of_memory", title, "high", dev, ev, live, lead + suggestion(trace, "out_of_memory")))
    return out


def _expandable_on(trace: Trace) -> bool:
    """Whether the snapshot's allocator settings say expandable segments were on."""
    settings = (trace.metadata.get(mkeys.TORCH_MEMORY_SNAPSHOT) or {}).get("allocator_settings") or {}
    return settings.get("expandable_segments") is True


def _held_at(trace: Trace, device: str, ts: int) -> tuple[int | None, list[dict[str, Any]]]:
    """(bytes allocated on ``device`` just after every event at or before ``ts``, every
    allocator added up; the largest allocations live then, with their stacks). An
    ``[OutOfMemory]`` event is no allocation (``trace/memory.py`` leaves it out)."""
    from .memory import _live_at, context, memory  # (as above)

    m = memory(trace)
    total: int | None = None
    picks: list[np.ndarray] = []
    for s in range(m.n_series):
        if m.device[s] != device:
            continue
        lo, hi = m.bounds(s)
        p = lo + int(np.searchsorted(m.ts[lo:hi], ts, side="right")) - 1
        total = (total or 0) + int(m.level[p] if p >= lo else m.start[s])
        if p >= lo:
            picks.append(_live_at(m, lo, hi, p))
    live = np.concatenate(picks) if picks else np.zeros(0, np.int64)
    live = live[np.argsort(-m.delta[live], kind="stable")][:OOM_TOP]
    op, section, stack = context(trace, m.rows[live])
    return total, [{"bytes": int(m.delta[j]), "allocator": m.allocator[int(m.series[j])],
                    "allocated_at_ns": int(m.ts[j]) - trace.span_ns[0],
                    **{k: str(v) for k, v in (("op", o), ("section", sec), ("stack", st)) if v}}
                   for j, o, sec, st in zip(live.tolist(), op.tolist(), section.tolist(), stack.tolist())]


def _cached(trace: Trace) -> list[Finding]:
    """Per series of a caching allocator with reserved bytes on its events: the most it
    reserved against the most it had allocated at once."""
    if not memory_events(trace):
        return []
    from .memory import memory  # (as above)

    m = memory(trace)
    out = []
    for s in range(m.n_series):
        lo, hi = m.bounds(s)
        res = m.reserved[lo:hi]
        if (m.allocator[s] not in CACHING_ALLOCATORS or not m.from_totals[s] or not np.isfinite(res).any()
                or m.device[s] == keys.HOST_PLANE):  # (torch's CPU allocator caches nothing)
            continue
        p = int(np.argmax(m.level[lo:hi]))
        peak, most = int(m.level[lo + p]), int(np.nanmax(res))
        gap = most - peak
        share = 100.0 * gap / most if most > 0 else 0.0
        if gap < CACHED_MIN_BYTES or share < CACHED_SHARE:
            continue
        at_peak = res[p]
        out.append(Finding(
            "memory_cached", f"{m.device[s]}: the allocator reserved up to {fmt_size(most)} but never had more than "
            f"{fmt_size(peak)} allocated at once: {fmt_size(gap)} ({share:.0f}%) held as cache or fragments",
            "high" if share >= CACHED_HIGH_SHARE else "medium",
            m.device[s],
            {"reserved_peak_bytes": most, "allocated_peak_bytes": peak, "unallocated_bytes": gap,
             "share_pct": round(share, 2), "reserved_at_allocated_peak_bytes": int(at_peak)
             if np.isfinite(at_peak) else None, "allocated_peak_at_ns": int(m.ts[lo + p]) - trace.span_ns[0],
             "allocator": m.allocator[s]}, [],
            ("expandable_segments is already on (the snapshot's allocator settings): what stays reserved is "
             "cached blocks. " if _expandable_on(trace) else "") + suggestion(trace, "memory_cached")))
    return out
