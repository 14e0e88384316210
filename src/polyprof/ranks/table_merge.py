"""The tables of a rank from the tables of its windows (``ranks/stepwise.py``).

Each table has a merge rule (:data:`RULES`): the columns that name a row (its key),
how each other column combines across windows (``sum``, ``min``, ``max``, the value of
the first or last window holding the row, the value where another column is largest),
and the columns computed again from the merged ones (means from totals and counts,
shares from totals, idle time from the span, achieved rates and roofline shares from
summed FLOPs, bytes and time). Tables with a row per step are the windows' rows one
after the other; ``mfu``'s whole-rank row is made again from them (:func:`merge_mfu`).
``memory_at_peak`` is each series' table from the window holding its peak
(:func:`at_peaks`; the windows count allocations earlier ones left live,
``ranks/window_memory.py``); the breakdowns' rows keep the whole read's order (:func:`_by_stream`).
Quantiles, queue lengths, ``launch_summary``, ``cuda_graphs`` and the idle stretches
across windows' edges are made exact afterwards from what the windows kept
(``ranks/window_values.py``, ``analyze.cuda_graphs.merge_stats``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from ..analyze.efficiency import _roof_share, main_precision, mfu_frame
from ..analyze.frames import column, empty_frame, frame, labels
from ..analyze.peaks import Peak
from ..analyze.table import Table

Cols = dict[str, np.ndarray]


class Context(NamedTuple):
    """What a rule's derived columns may need besides the merged columns: the rank's
    analysed span, and the device's memory bandwidth (bytes/s, 0 unknown) that the
    roofline shares were measured against."""

    span: tuple[int, int]
    bandwidth: float = 0.0
    planes: tuple[str, ...] = ()  # the rank's planes, in the order of their ids


@dataclass(frozen=True)
class Rule:
    key: tuple[str, ...]
    ops: dict[str, str] = field(default_factory=dict)  # column -> sum|nsum|min|max|first|last|wmean|at:<col>
    then: Callable[[Cols, Context], None] | None = None  # derived columns, in place
    order: str | None = None  # sort by this column, largest first (stable)
    rows: Callable[[Cols, Context], np.ndarray] | None = None  # the rows' order, where not by ``order``


def _ratio(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, scale * a / np.where(b != 0, b, 1), np.nan)


def _mean(c: Cols, ctx: Context) -> None:
    c["mean_ns"] = c["total_ns"] / np.maximum(c["count"], 1)


def _temporal(c: Cols, ctx: Context) -> None:
    c["span_start_ns"] = np.full(len(c["span_ns"]), ctx.span[0], np.int64)
    c["span_ns"] = np.full(len(c["span_ns"]), ctx.span[1] - ctx.span[0], np.int64)
    c["idle_ns"] = c["span_ns"] - c["busy_ns"]
    for k in ("compute", "non_compute", "idle"):
        c[f"{k}_pct"] = _ratio(c[f"{k}_ns"], c["span_ns"], 100.0)


def _idle(c: Cols, ctx: Context) -> None:
    for k in ("host_wait", "kernel_wait", "other"):
        c[f"{k}_pct"] = _ratio(c[f"{k}_ns"], c["idle_ns"], 100.0)


def _by_stream(c: Cols, ctx: Context) -> np.ndarray:
    """The rows of a breakdown per device stream in the order read whole gives them
    (``analyze.breakdown._group_rows``): by plane id, then track id, each device's
    ``(all streams)`` row after its streams (planes the rank does not name: after, in
    their first window's order). Merged in the windows' order, a stream first active in
    a later window came after its device's row."""
    at = {p: i for i, p in reversed(list(enumerate(ctx.planes)))}
    plane = np.array([at.get(p, len(at)) for p in c["plane"].tolist()], np.int64)
    track = c["track_id"].astype(np.int64)
    return np.lexsort((track, track < 0, plane))


def _copies(c: Cols, ctx: Context) -> None:
    c["bandwidth_gbps"] = _ratio(c["total_bytes"], c["sized_ns"])


def _overlap(c: Cols, ctx: Context) -> None:
    c["overlap_pct"] = _ratio(c["overlap_ns"], c["communication_ns"], 100.0)


def _kernels(c: Cols, ctx: Context) -> None:
    _mean(c, ctx)
    total = c["total_ns"].sum()
    c["share_pct"] = 100.0 * c["total_ns"] / total if total else np.zeros(len(total))


def _per_plane_share(c: Cols, ctx: Context) -> None:
    _mean(c, ctx)
    planes, inv = np.unique(c["plane"].astype(str), return_inverse=True)
    per = np.bincount(inv, weights=c["total_ns"].astype(np.float64), minlength=len(planes))
    c["share_pct"] = 100.0 * c["total_ns"] / np.maximum(per[inv], 1)


def _sections(c: Cols, ctx: Context) -> None:
    _mean(c, ctx)
    c["device_util_pct"] = np.where(c["projected_ns"] > 0, 100.0 * c["_busy"] / np.maximum(c["projected_ns"], 1),
                                    np.nan)


def _states(c: Cols, ctx: Context) -> None:
    idle = c["state"] == "idle"
    planes, inv = np.unique(c["plane"].astype(str), return_inverse=True)
    busy = np.bincount(inv, weights=np.where(idle, 0, c["time_ns"]).astype(np.float64), minlength=len(planes))
    c["span_pct"] = _ratio(c["time_ns"], np.full(len(idle), ctx.span[1] - ctx.span[0]), 100.0)
    c["busy_pct"] = np.where(idle, np.nan, _ratio(c["time_ns"], busy[inv], 100.0))


def _counters(c: Cols, ctx: Context) -> None:
    c["mean"] = c["mean"].astype(np.float64)


def _rates(c: Cols, time: np.ndarray, peak_f: np.ndarray, ok: np.ndarray, bw: float) -> None:
    """Achieved FLOP/s and bytes/s over ``time``, intensity, roofline share and bound,
    as ``analyze.efficiency`` computes them (``peak_f``: per row, 0 where unknown)."""
    flops, nbytes = c["flops"].astype(np.float64), c["bytes"].astype(np.float64)
    time = time.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        fps, bps, inten = flops / time * 1e9, nbytes / time * 1e9, flops / nbytes
        c["roofline_pct"] = _roof_share(fps, bps, inten, peak_f, bw, ok & (peak_f > 0) & np.isfinite(fps))
        ridge = peak_f / bw if bw else np.full(len(peak_f), np.nan)
        c["bound_by"] = np.where(~np.isfinite(inten) | np.isnan(ridge) | (peak_f <= 0), "",
                                 np.where(inten >= ridge, "compute", "memory")).astype(object)
    c["flops_per_s"], c["bytes_per_s"], c["intensity"] = fps, bps, inten


def _op_rates(c: Cols, ctx: Context) -> None:
    c["time_ns"] = c["time_ns"].astype(np.float64)
    peak_f = np.nan_to_num(c["peak_flops_per_s"].astype(np.float64))
    if "intensity" in c:
        _rates(c, c["time_ns"], peak_f, c["where"] == "device", ctx.bandwidth)


def _kernel_rates(c: Cols, ctx: Context) -> None:
    c["device_ns"] = c["device_ns"].astype(np.float64)
    if "intensity" in c:
        _rates(c, c["device_ns"], c.get("_peak", np.zeros(len(c["device_ns"]))), np.ones(len(c["device_ns"]), bool),
               ctx.bandwidth)


_DUR = {"count": "sum", "total_ns": "sum", "min_ns": "min", "max_ns": "max", "median_ns": "wmean",
        "p99_ns": "wmean", "first_start_ns": "min", "last_end_ns": "max"}

RULES: dict[str, Rule] = {
    "temporal_breakdown": Rule(("plane", "stream", "track_id"),
                               {c: "sum" for c in ("compute_ns", "non_compute_ns", "busy_ns", "activities")},
                               _temporal, rows=_by_stream),
    "idle_time_breakdown": Rule(("plane", "stream", "track_id"),
                                {c: "sum" for c in ("idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "gaps")},
                                _idle, rows=_by_stream),
    "comm_comp_overlap": Rule(("plane",), {c: "sum" for c in ("communication_ns", "compute_ns", "overlap_ns")},
                              _overlap),
    "kernel_breakdown": Rule(("name", "kind"), {**_DUR, "devices": "max"}, _kernels, "total_ns"),
    "op_stats": Rule(("name",), {**{c: "sum" for c in ("count", "total_ns", "self_ns", "device_ns", "self_device_ns",
                                                      "launches")}, "max_ns": "max"}, _mean, "total_ns"),
    "section_stats": Rule(("name",), {**_DUR, "device_ops": "sum", "device_ns": "sum", "projected_ns": "sum",
                                      "_busy": "sum", "alloc_bytes": "sum", "mem_delta_bytes": "sum",
                                      "mem_min_bytes": "min", "mem_max_bytes": "max", "mem_mean_bytes": "wmean"},
                          _sections, "total_ns"),
    "event_stats": Rule(("category", "name"), _DUR, _mean, "total_ns"),
    "memory_peak": Rule(("device", "allocator"), {"start_bytes": "first", "end_bytes": "last", "peak_bytes": "max",
                                                  "peak_ns": "at:peak_bytes", "allocations": "sum", "frees": "sum",
                                                  "allocated_total_bytes": "sum", "live_at_peak": "at:peak_bytes",
                                                  "live_at_peak_bytes": "at:peak_bytes"}, None, "peak_bytes"),
    "counter_stats": Rule(("plane", "name"), {"samples": "sum", "first_ns": "min", "last_ns": "max", "first": "first",
                                              "last": "last", "min": "min", "max": "max", "mean": "wmean",
                                              "nan_samples": "sum"}, _counters),
    "device_op_breakdown": Rule(("plane", "op"), {"count": "sum", "total_ns": "sum"}, _per_plane_share, "total_ns"),
    "kernel_state_breakdown": Rule(("plane", "state"), {"time_ns": "sum", "segments": "sum"}, _states),
    "queue_length_summary": Rule(("plane", "stream"), {"changes": "sum", "min": "min", "max": "max",
                                                       **{c: "wmean" for c in ("mean", "std", "p25", "p50", "p75",
                                                                               "time_mean")}}),
    # (flops, bytes: NaN where no call had a figure; rates and roofline shares made again)
    "op_efficiency": Rule(("name", "where"), {**{c: "sum" for c in ("count", "device_ns", "host_ns", "time_ns")},
                                              "flops": "nsum", "bytes": "nsum"}, _op_rates, "time_ns"),
    # (_peak: the peak FLOP/s of each row's precision, added by the windows: ranks/window_values.py)
    "kernel_efficiency": Rule(("name",), {"count": "sum", "device_ns": "sum", "flops": "nsum", "bytes": "nsum"},
                              _kernel_rates, "device_ns"),
    # (median_gbps: made exact from the windows' spilled bandwidths, ranks/window_values.py)
    "copies": Rule(("device", "kind"), {**{c: "sum" for c in ("count", "total_bytes", "total_ns", "small", "pageable",
                                                             "unsized", "sized_ns")},
                                        "min_gbps": "min", "max_gbps": "max", "median_gbps": "wmean"},
                   _copies, "total_ns"),
}
#: tables whose rows are steps (or collectives): the windows' rows in order (``mfu``: its
#: steps' rows, its whole-rank row made again by :func:`merge_mfu`; ``cuda_graphs`` is
#: made from the windows' graphs, ``analyze.cuda_graphs.merge_stats``)
CONCAT = ("step_stats", "mfu", "collective_stats", "transfers")
_WEIGHT = {"queue_length_summary": "changes", "counter_stats": "samples", "section_stats": "count",
           "kernel_breakdown": "count", "event_stats": "count"}


def merge_tables(parts: list[dict[str, Table]], span: tuple[int, int], bandwidth: float = 0.0,
                 planes: tuple[str, ...] = ()) -> dict[str, Table]:
    """The rank's tables (those a job gathers) from its windows' tables, in window order
    (``bandwidth``: the device's, bytes/s, that roofline shares are measured against;
    ``planes``: the rank's plane names, in the order of their ids)."""
    out: dict[str, Table] = {}
    ctx = Context(span, bandwidth, tuple(planes))
    for name in parts[0]:
        tables = [p[name] for p in parts]
        if name in RULES:
            out[name] = _merge(tables, RULES[name], ctx, _WEIGHT.get(name, "count"))
        elif name == "memory_at_peak" and "memory_peak" in parts[0]:
            out[name] = at_peaks(tables, [p["memory_peak"] for p in parts])
        else:
            out[name] = Table.concat(tables) if name in CONCAT else tables[0]
    return out


def at_peaks(tables: list[Table], peaks: list[Table]) -> Table:
    """The rank's ``memory_at_peak``: each series' (device, allocator) rows from the
    window holding its peak (the first with its most ``peak_bytes``, as ``memory_peak``'s
    merge picks its ``peak_ns``), the series in ``analyze.memory``'s order (by device,
    then allocator). Each window's rows count the allocations earlier windows left live
    (``ranks/window_memory.py``). Before, the first window's table was the rank's."""
    best: dict[tuple[str, str], tuple[float, int]] = {}
    for i, t in enumerate(peaks):
        for d, a, b in zip(column(t, "device").tolist(), column(t, "allocator").tolist(),
                           column(t, "peak_bytes").astype(np.float64).tolist()):
            if (d, a) not in best or b > best[(d, a)][0]:
                best[(d, a)] = (b, i)
    picked = []
    for (d, a), (_, i) in sorted(best.items()):
        t = tables[i]
        picked.append(t.take(np.flatnonzero((column(t, "device") == d) & (column(t, "allocator") == a))))
    return Table.concat(picked) if picked else tables[0]


def _merge(tables: list[Table], rule: Rule, ctx: Context, weight: str) -> Table:
    cols = [c for c in labels(tables[0]) if not c.startswith("_")]  # (hidden: what a window added for the merge)
    nonempty = [t for t in tables if len(t)]
    if not nonempty:
        return tables[0].select(cols) if len(cols) < len(labels(tables[0])) else tables[0]
    if rule.then is _sections:  # the busy time behind device_util_pct, summed across windows
        nonempty = [t.with_columns(_busy=np.nan_to_num(column(t, "device_util_pct")) * column(t, "projected_ns") / 100)
                    for t in nonempty]
    allw = Table.concat(nonempty)
    keys = [tuple(r) for r in zip(*(column(allw, k).tolist() for k in rule.key))]
    index: dict[tuple, int] = {}
    group = np.array([index.setdefault(k, len(index)) for k in keys], np.int64)
    n = len(index)
    firsts = np.full(n, -1, np.int64)
    lasts = np.zeros(n, np.int64)
    for i, g in enumerate(group.tolist()):
        if firsts[g] < 0:
            firsts[g] = i
        lasts[g] = i
    w = column(allw, weight).astype(np.float64) if weight in labels(allw) else np.ones(len(group))
    merged: Cols = {}
    for c in labels(allw):
        v = column(allw, c)
        op = rule.ops.get(c, "first")
        merged[c] = _combine(op, v, group, n, firsts, lasts, w, allw)
    if rule.then is not None:
        rule.then(merged, ctx)
    order = None
    if rule.order is not None:
        order = np.argsort(-merged[rule.order].astype(np.float64), kind="stable")
    elif rule.rows is not None:
        order = rule.rows(merged, ctx)
    return frame({c: merged[c] for c in cols}, order=order)


def _combine(op: str, v: np.ndarray, group: np.ndarray, n: int, firsts: np.ndarray, lasts: np.ndarray,
             w: np.ndarray, allw: Table) -> np.ndarray:
    if op == "first":
        return v[firsts]
    if op == "last":
        return v[lasts]
    if op == "sum":
        out = np.zeros(n, v.dtype if v.dtype.kind in "iuf" else np.float64)
        np.add.at(out, group, v)
        return out
    if op == "nsum":  # NaN (no figure) counts as nothing, NaN where no window had one
        x = v.astype(np.float64)
        out = np.zeros(n)
        np.add.at(out, group, np.nan_to_num(x))
        has = np.bincount(group, weights=~np.isnan(x), minlength=n) > 0
        return np.where(has, out, np.nan)
    if op in ("min", "max"):
        f = np.fmin if op == "min" else np.fmax
        out = v[firsts].copy()
        f.at(out, group, v)
        return out
    if op == "wmean":
        x = v.astype(np.float64)
        ok = ~np.isnan(x)
        num = np.bincount(group, weights=np.where(ok, x * w, 0), minlength=n)
        den = np.bincount(group, weights=np.where(ok, w, 0), minlength=n)
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    if op.startswith("at:"):
        by = column(allw, op[3:]).astype(np.float64)
        best = firsts.copy()
        for i, g in enumerate(group.tolist()):
            if by[i] > by[best[g]]:
                best[g] = i
        return v[best]
    raise ValueError(op)


class MfuPart(NamedTuple):
    """What a window adds to the rank's ``mfu`` besides its steps' rows: its model FLOPs
    by precision, the device planes (ids) with activity in it, and its kernel ns in graph
    replays whose FLOPs are not counted and in all (``efficiency.uncounted_replay_ns``)."""

    flops: dict[str, float]
    devices: frozenset[int]
    uncounted_ns: float = 0.0
    kernel_ns: float = 0.0


def merge_mfu(tables: list[Table], parts: list[MfuPart], pk: Peak | None) -> Table:
    """The rank's ``mfu`` (as ``analyze.efficiency.mfu`` makes it): the windows' step rows
    under a whole-rank row (step -1) of their FLOPs and times summed, every row at the
    precision most of the rank's FLOPs were in, over the devices active in any window.
    A window without model FLOPs adds its steps with none (``ranks/window_values.py``);
    ``uncounted_replay_pct`` is the windows' uncounted replay time over their kernel time."""
    totals: dict[str, float] = {}
    for p in parts:
        for k, v in p.flops.items():
            totals[k] = totals.get(k, 0.0) + v
    steps = [t.take(np.flatnonzero(column(t, "step") != -1)) for t in tables if len(t)]
    kernel_ns = sum(p.kernel_ns for p in parts)
    uncounted = 100.0 * sum(p.uncounted_ns for p in parts) / kernel_ns if kernel_ns > 0 else 0.0
    if not steps or not (totals or uncounted > 0):  # no model FLOPs: the table the whole rank has
        return empty_frame(labels(tables[0]), ("precision", "device"), np.float64)
    precision = main_precision(totals)  # (as the whole's)
    t = Table.concat(steps)
    flops = np.r_[column(t, "flops").astype(np.float64).sum(), column(t, "flops").astype(np.float64)]
    time = np.r_[column(t, "time_ns").astype(np.float64).sum(), column(t, "time_ns").astype(np.float64)]
    devices = max(1, len(frozenset().union(*(p.devices for p in parts))))
    return mfu_frame(np.r_[-1, column(t, "step")], flops, time, precision, devices, pk if totals else None,
                     uncounted)


def concat_collectives(tables: list[Table]) -> Table:
    """The windows' collectives (``analyze.collectives.collective_table``) end to end, each
    key's ``seq`` as the rank's table numbers it: the recorded ``Seq`` where every row of
    the key has one and they increase, else the order within the key."""
    t = Table.concat([x for x in tables if len(x)] or tables[:1])
    if not len(t):
        return t
    keys = column(t, "key")
    seq = np.array(column(t, "seq"), np.int64)
    src = np.array(column(t, "seq_from"), object)
    for k in dict.fromkeys(keys.tolist()):
        mine = np.flatnonzero(keys == k)
        if (src[mine] == "Seq").all() and (np.diff(seq[mine]) > 0).all():
            continue
        seq[mine] = np.arange(len(mine))
        src[mine] = "order"
    return t.with_columns(seq=seq, seq_from=src)
