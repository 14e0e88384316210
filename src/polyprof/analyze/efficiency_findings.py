"""The efficiency findings: low model FLOPs utilisation (naming the ops that lose most
against their roofline), chains of memory-bound ops worth fusing, and kernels whose
occupancy registers or shared memory hold down. Thresholds are module constants, as in
``findings.py``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from ..derive import cache
from ..trace.categories import collective_names
from ..trace.core import Trace
from ..trace.sorting import unique
from .advice import suggestion
from .breakdown import busy_segments
from .common import device_view, op_of
from .efficiency import costed_rows, device_time, range_profiled, resolve_peak, uncounted_of
from .uncosted import uncosted_matrix_pct
from .nesting import outermost
from .finding import Finding, _records
from .frames import column, labels, order_desc
from .units import fmt_share
from .table import Table

LOW_MFU_PCT = 30.0  # overall MFU below this is "low"
VERY_LOW_MFU_PCT = 10.0  # ... below this, high severity
#: ... but not where this share of kernel time ran in CUDA graph replays whose FLOPs are
#: unknown (captured before the trace) and MFU plus it reach LOW_MFU_PCT: MFU is a floor
UNCOUNTED_MAX_PCT = 25.0
CHAIN_MIN_OPS = 3  # consecutive memory-bound ops that make a chain
CHAIN_MAX_INTENSITY = 4.0  # FLOPs per byte: elementwise, norms, softmax, copies (not small GEMMs)
CHAIN_SHARE = 5.0  # a chain's device time, share of the devices' busy time (high at 4x this)
OCCUPANCY_MAX = 0.25  # theoretical occupancy at or below this is "low"
OCCUPANCY_SHARE = 5.0  # ... for kernels with at least this share of device time
#: the low-MFU advice's lead where the finding lists ops (a torch CPU run's host ops have no
#: roofline share, so it lists none)
LOW_MFU_LEAD = "The ops listed lose the most time against their roofline (time x (1 - roofline share)). "


def efficiency_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    return [*_low_mfu(trace, t), *_fusable_chains(trace), *_low_occupancy(trace, t)]


def _low_mfu(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    m = t("mfu")
    if not len(m):
        return []
    pct = float(column(m, "mfu_pct")[0])
    if not np.isfinite(pct) or pct >= LOW_MFU_PCT or not float(column(m, "flops")[0]) > 0:
        return []  # (no FLOPs counted: the model's are unknown, not zero)
    oe = t("op_efficiency")
    if range_profiled(trace) or _counters_only(oe):
        return []  # timed under CUPTI's range profiler, which replays each range: no MFU of the program's time
    # much device time in graph replays, or matrix kernels of ops recorded without the arguments their
    # FLOPs need, whose FLOPs are unknown: MFU is a floor, maybe not low (a rank's shell has no events)
    blind = max(uncounted_of(m), uncosted_matrix_pct(trace) if trace.n_events else 0.0)
    if blind >= UNCOUNTED_MAX_PCT and pct + blind >= LOW_MFU_PCT:
        return []
    roof = column(oe, "roofline_pct") if len(oe) else np.zeros(0)
    ok = np.isfinite(roof) & ~collective_names(_bare(oe)) if len(oe) else np.zeros(0, bool)
    # (a collective's time is the network's and the other ranks', not lost against a roofline; nor is an
    # op of a few FLOPs per byte measured against the compute roof where no bandwidth tells its ridge)
    if len(oe):
        ok &= ~((column(oe, "bound_by") == "") & (column(oe, "intensity") < CHAIN_MAX_INTENSITY))  # (NaN: unknown)
        ok &= column(oe, "flops_source") != "counters"  # (a range profiler's replay windows: no kernel's time)
    events = _most_lost(oe, ok) if len(oe) else []
    names = ", ".join(dict.fromkeys(_title_name(e["name"]) for e in events[:3]))
    prec = str(column(m, "precision")[0])
    return [Finding(
        "low_mfu", f"Model FLOPs utilisation is {fmt_share(pct)}%"  # (as the MFU line gives it)
        + (f" ({prec})" if prec else "")
        + (f"; most lost in {names}" if names else ""),
        "high" if pct < VERY_LOW_MFU_PCT else "medium", "",
        {"mfu_pct": pct, "precision": prec, "flops": float(column(m, "flops")[0]),
         "time_ns": float(column(m, "time_ns")[0]), "peak_flops_per_s": float(column(m, "peak_flops_per_s")[0]),
         "devices": int(column(m, "devices")[0]), "device": str(column(m, "device")[0])},
        events, (LOW_MFU_LEAD if events else "") + suggestion(trace, "low_mfu"))]


def _most_lost(oe: Table, ok: np.ndarray, most: int = 5) -> list[dict[str, Any]]:
    """The ``most`` op names of ``op_efficiency`` (its rows ``ok``) that lose the most time
    against their roofline (time × (1 − roofline share)), one event each: ``count``,
    ``time_ns`` and ``lost_ns`` summed over the name's rows (the library kernels of one
    XLA command buffer are rows of one name that share its cost by time: listed thrice,
    alike, before), ``flops_per_s`` over their time, ``roofline_pct`` their time's share
    not lost, ``bound_by`` that of the row of most time."""
    roof = np.minimum(np.nan_to_num(column(oe, "roofline_pct")), 100.0)
    t = np.asarray(column(oe, "time_ns"), np.float64)
    lost = np.where(ok, t * (1.0 - roof / 100.0), 0.0)
    at = np.flatnonzero(ok & (lost > 0))
    if not len(at):
        return []
    names = [str(n) for n in column(oe, "name")[at]]
    codes, inv = np.unique(np.array(names, object), return_inverse=True)
    k = len(codes)
    lost_g = np.bincount(inv, weights=lost[at], minlength=k)
    time_g = np.bincount(inv, weights=t[at], minlength=k)
    f = np.asarray(column(oe, "flops"), np.float64)[at]
    flops_g = np.bincount(inv, weights=np.nan_to_num(f), minlength=k)
    flops_g[np.bincount(inv, weights=~np.isnan(f), minlength=k) == 0] = np.nan  # (a copy's: bytes alone)
    count_g = np.bincount(inv, weights=np.asarray(column(oe, "count"), np.float64)[at], minlength=k)
    lead = np.full(k, -1, np.int64)  # each name's row of most time (rows by time ascending: the last write wins)
    order = np.argsort(t[at], kind="stable")
    lead[inv[order]] = at[order]
    bound = column(oe, "bound_by")
    out = []
    for g in order_desc(lost_g)[:most].tolist():
        out.append({"name": str(codes[g]), "count": int(count_g[g]), "time_ns": float(time_g[g]),
                    "flops_per_s": float(f"{flops_g[g] / time_g[g] * 1e9:.4g}") if time_g[g] > 0 else np.nan,
                    "roofline_pct": round(100.0 * (1.0 - lost_g[g] / time_g[g]), 2) if time_g[g] > 0 else np.nan,
                    "bound_by": str(bound[lead[g]]), "lost_ns": float(lost_g[g])})
    return out


def _counters_only(oe: Table) -> bool:
    """Whether every op that ran FLOPs on a device has them from CUPTI's range-profiler
    counters: :func:`efficiency.range_profiled` read from the table alone (a rank of a
    store, whose findings read its merged tables without events)."""
    if not len(oe) or "flops_source" not in labels(oe):
        return False
    ran = (column(oe, "where") == "device") & (np.nan_to_num(column(oe, "flops")) > 0)
    counted = column(oe, "flops_source") == "counters"
    return bool((ran & counted).any()) and not (ran & ~counted).any()


def _bare(oe: Table) -> list[str]:
    """Each row's op name without its XLA module (``jit_allreduce_step/dot.1``: a matmul
    of a module whose name says all-reduce, no collective)."""
    names = [str(n) for n in column(oe, "name")]
    if "module" not in labels(oe):
        return names
    return [n if (o := op_of(n, m)) is None else o for n, m in zip(names, map(str, column(oe, "module")))]


def _title_name(name: str, most: int = 60) -> str:
    """A name short enough for a title: a kernel's C++ signature (``void at::native::
    vectorized_elementwise_kernel<4, ...>(int, ...)``, hundreds of characters) to its
    function's name; the events keep the whole name."""
    if len(name) <= most:
        return name
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    short = name[:cut].removeprefix("void ").strip()
    return short if len(short) <= most else short[:most - 1] + "…"


def _fusable_chains(trace: Trace) -> list[Finding]:
    """Runs of top-level ops, one after another on a thread, each below the device's ridge
    point and of low intensity (elementwise, norms, softmax, copies: not a small GEMM,
    which is memory-bound too but not fused away) and running device work: each pays a
    trip to memory a fused kernel would not."""
    pk = resolve_peak(trace, None)
    if pk is None or not pk.bandwidth:
        return []
    rows, on_device, c = costed_rows(trace)
    host = ~on_device & ~np.isnan(c.bytes) & (c.bytes > 0)
    rows, flops, nbytes, prec = rows[host], c.flops[host], c.bytes[host], c.precision[host]
    if len(rows) < CHAIN_MIN_OPS:
        return []
    top = outermost(trace, rows)
    rows, flops, nbytes, prec = rows[top], flops[top], nbytes[top], prec[top]
    dev = device_time(trace, rows, np.zeros(len(rows), bool))
    ridge = pk.flops_each(prec) / pk.bandwidth
    intensity = np.nan_to_num(flops) / nbytes
    mem = (intensity < ridge) & (intensity < CHAIN_MAX_INTENSITY) & (dev > 0)
    ev = trace.events
    th = cache.threads(trace)[ev["track"][rows]]
    order = np.lexsort((ev["start_ns"][rows], th))
    m, t_o = mem[order], th[order]
    # runs of memory-bound ops on one thread: starts where the flag or the thread changes,
    # at a step's start, and after other device work launched between two of them
    brk = np.r_[True, (m[1:] != m[:-1]) | (t_o[1:] != t_o[:-1]) | _apart(trace, rows[order], t_o)]
    starts = np.flatnonzero(brk)
    ends = np.r_[starts[1:], len(m)]
    chains: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0, 0.0, -1])  # count, ns, first op
    names = trace.names(rows[order])
    dev_o = dev[order]
    for a, b in zip(starts.tolist(), ends.tolist()):
        if m[a] and b - a >= CHAIN_MIN_OPS:
            key = tuple(names[a:b].tolist())
            chains[key][0] += 1
            chains[key][1] += float(dev_o[a:b].sum())
            if chains[key][2] < 0:
                chains[key][2] = a
    total = _busy_ns(trace)
    if not chains or not total:
        return []
    ranked = sorted(chains.items(), key=lambda kv: -kv[1][1])
    sig, (count, ns, first) = ranked[0]
    share = 100.0 * ns / total
    if share < CHAIN_SHARE:
        return []
    events = [{"chain": " → ".join(k), "ops": len(k), "count": int(n), "device_ns": float(d),
               "share_pct": round(100.0 * d / total, 2)} for k, (n, d, _) in ranked[:5]]
    return [Finding(
        "fusable_chain", f"{len(sig)} memory-bound ops in a row take {share:.1f}% of the device's busy time "
        f"({sig[0]} → … → {sig[-1]}, {int(count)}×)",
        "high" if share >= 4 * CHAIN_SHARE else "medium", "",
        {"chain_ops": len(sig), "occurrences": int(count), "device_ns": ns, "share_pct": share, "busy_ns": total,
         "ridge_flops_per_byte": float(ridge[order][int(first)]), "device_model": pk.model},  # at the chain's precision
        events, suggestion(trace, "fusable_chain"))]


def _busy_ns(trace: Trace) -> float:
    """The devices' busy time (ns): per device, the union of its activity, summed over
    devices. The share a chain's fusion can save: the device time of the costed host ops
    alone (ops without shapes and graph replays left out) made a 14 µs chain of a 9.8 ms
    decode 49% and "high"."""
    planes = unique(device_view(trace).plane)
    return float(sum(int((e - s).sum()) for s, e in (busy_segments(trace, int(p)) for p in planes.tolist())))


def _apart(trace: Trace, rows: np.ndarray, th: np.ndarray) -> np.ndarray:
    """Per pair of ops one after another (``rows`` by thread ``th``, then start): whether a
    step starts between them, or a launch call none of them holds is made between them on
    their thread (a compiled region's graph replay, an uncosted op's kernels): no chain
    fuses across those."""
    ev = trace.events
    start = ev["start_ns"][rows].astype(np.int64)
    end = start + ev["dur_ns"][rows].astype(np.int64)
    steps = cache.steps(trace)
    out = np.zeros(max(len(rows) - 1, 0), bool)
    if len(steps):
        idx = steps.of(start)
        out |= idx[1:] != idx[:-1]
    launches = cache.correlation(trace).launch_rows
    if not len(launches) or not len(out):
        return out
    l_th = cache.threads(trace)[ev["track"][launches]]
    l_st = ev["start_ns"][launches].astype(np.int64)
    for t in unique(th).tolist():  # one search per thread
        mine = np.sort(l_st[l_th == t])
        pair = np.flatnonzero(th[:-1] == t)
        between = np.searchsorted(mine, start[pair + 1]) - np.searchsorted(mine, end[pair])
        out[pair] |= between > 0
    return out


def _low_occupancy(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    kb = t("kernel_breakdown")
    if not len(kb) or "occupancy" not in kb.columns:
        return []
    occ, lim = column(kb, "occupancy"), column(kb, "occupancy_limit")
    # of the device time the rows hold, none below 0 (HTA's rounding, --window hta, takes a
    # sub-µs copy to -1 µs, and the table's shares, as HTA's, sum the rows as they are: a
    # 37 µs kernel read 105.7% of 35 µs)
    total = np.clip(np.asarray(column(kb, "total_ns"), np.float64), 0, None)
    share = 100.0 * total / total.sum() if total.sum() > 0 else np.asarray(column(kb, "share_pct"), np.float64)
    sel = np.flatnonzero(np.isfinite(occ) & (occ <= OCCUPANCY_MAX) & np.isin(lim, ["registers", "shared_mem"])
                         & (share >= OCCUPANCY_SHARE))
    if not len(sel):
        return []
    sel = sel[order_desc(share[sel])]
    events = _records(kb, ["name", "count", "total_ns", "share_pct", "block", "registers", "shared_mem", "occupancy",
                           "occupancy_limit"], 5, sel)
    for e, i in zip(events, sel.tolist()):
        e["share_pct"] = round(float(share[i]), 2)
        e["occupancy"] = round(float(e["occupancy"]), 4)
    worst = events[0]
    return [Finding(
        "low_occupancy", f"{len(sel)} kernel(s) with {float(share[sel].sum()):.1f}% of device time run at "
        f"≤{OCCUPANCY_MAX:.0%} theoretical occupancy, held by {worst['occupancy_limit'].replace('_', ' ')}",
        "medium", "", {"kernels": int(len(sel)), "share_pct": float(share[sel].sum()),
                       "threshold": OCCUPANCY_MAX}, events,
        suggestion(trace, "low_occupancy"))]
