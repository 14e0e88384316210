"""The tables of a rank from the tables of its windows (``ranks/stepwise.py``).

Each table has a merge rule (:data:`RULES`): the columns that name a row (its key),
how each other column combines across windows (``sum``, ``min``, ``max``, the value of
the first or last window holding the row, the value where another column is largest),
and the columns computed again from the merged ones (means from totals and counts,
shares from totals, idle time from the span). Tables with a row per step are the
windows' rows one after the other. Quantiles, queue lengths, ``launch_summary`` and the
idle stretches across windows' edges are made exact afterwards from what the windows
kept on disk (``ranks/window_values.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..analyze.frames import column, frame, labels
from ..analyze.table import Table

Cols = dict[str, np.ndarray]


@dataclass(frozen=True)
class Rule:
    key: tuple[str, ...]
    ops: dict[str, str] = field(default_factory=dict)  # column -> sum|min|max|first|last|wmean|at:<col>
    then: Callable[[Cols, tuple[int, int]], None] | None = None  # derived columns, in place
    order: str | None = None  # sort by this column, largest first (stable)


def _ratio(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, scale * a / np.where(b != 0, b, 1), np.nan)


def _mean(c: Cols, span: tuple[int, int]) -> None:
    c["mean_ns"] = c["total_ns"] / np.maximum(c["count"], 1)


def _temporal(c: Cols, span: tuple[int, int]) -> None:
    c["span_start_ns"] = np.full(len(c["span_ns"]), span[0], np.int64)
    c["span_ns"] = np.full(len(c["span_ns"]), span[1] - span[0], np.int64)
    c["idle_ns"] = c["span_ns"] - c["busy_ns"]
    for k in ("compute", "non_compute", "idle"):
        c[f"{k}_pct"] = _ratio(c[f"{k}_ns"], c["span_ns"], 100.0)


def _idle(c: Cols, span: tuple[int, int]) -> None:
    for k in ("host_wait", "kernel_wait", "other"):
        c[f"{k}_pct"] = _ratio(c[f"{k}_ns"], c["idle_ns"], 100.0)


def _copies(c: Cols, span: tuple[int, int]) -> None:
    c["bandwidth_gbps"] = _ratio(c["total_bytes"], c["sized_ns"])


def _overlap(c: Cols, span: tuple[int, int]) -> None:
    c["overlap_pct"] = _ratio(c["overlap_ns"], c["communication_ns"], 100.0)


def _kernels(c: Cols, span: tuple[int, int]) -> None:
    _mean(c, span)
    total = c["total_ns"].sum()
    c["share_pct"] = 100.0 * c["total_ns"] / total if total else np.zeros(len(total))


def _per_plane_share(c: Cols, span: tuple[int, int]) -> None:
    _mean(c, span)
    planes, inv = np.unique(c["plane"].astype(str), return_inverse=True)
    per = np.bincount(inv, weights=c["total_ns"].astype(np.float64), minlength=len(planes))
    c["share_pct"] = 100.0 * c["total_ns"] / np.maximum(per[inv], 1)


def _sections(c: Cols, span: tuple[int, int]) -> None:
    _mean(c, span)
    c["device_util_pct"] = np.where(c["projected_ns"] > 0, 100.0 * c["_busy"] / np.maximum(c["projected_ns"], 1),
                                    np.nan)


def _states(c: Cols, span: tuple[int, int]) -> None:
    idle = c["state"] == "idle"
    planes, inv = np.unique(c["plane"].astype(str), return_inverse=True)
    busy = np.bincount(inv, weights=np.where(idle, 0, c["time_ns"]).astype(np.float64), minlength=len(planes))
    c["span_pct"] = _ratio(c["time_ns"], np.full(len(idle), span[1] - span[0]), 100.0)
    c["busy_pct"] = np.where(idle, np.nan, _ratio(c["time_ns"], busy[inv], 100.0))


def _counters(c: Cols, span: tuple[int, int]) -> None:
    c["mean"] = c["mean"].astype(np.float64)


_DUR = {"count": "sum", "total_ns": "sum", "min_ns": "min", "max_ns": "max", "median_ns": "wmean",
        "p99_ns": "wmean", "first_start_ns": "min", "last_end_ns": "max"}

RULES: dict[str, Rule] = {
    "temporal_breakdown": Rule(("plane", "stream", "track_id"),
                               {c: "sum" for c in ("compute_ns", "non_compute_ns", "busy_ns", "activities")},
                               _temporal),
    "idle_time_breakdown": Rule(("plane", "stream", "track_id"),
                                {c: "sum" for c in ("idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "gaps")},
                                _idle),
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
                                              "last": "last", "min": "min", "max": "max", "mean": "wmean"}, _counters),
    "device_op_breakdown": Rule(("plane", "op"), {"count": "sum", "total_ns": "sum"}, _per_plane_share, "total_ns"),
    "kernel_state_breakdown": Rule(("plane", "state"), {"time_ns": "sum", "segments": "sum"}, _states),
    "queue_length_summary": Rule(("plane", "stream"), {"changes": "sum", "min": "min", "max": "max",
                                                       **{c: "wmean" for c in ("mean", "std", "p25", "p50", "p75",
                                                                               "time_mean")}}),
    "op_efficiency": Rule(("name", "where"), {c: "sum" for c in ("count", "flops", "bytes", "device_ns", "host_ns",
                                                         "time_ns")}, None, "time_ns"),
    "kernel_efficiency": Rule(("name",), {c: "sum" for c in ("count", "flops", "bytes", "device_ns")}, None,
                              "device_ns"),
    "cuda_graphs": Rule(("graph",), {"replays": "sum", "device_ns": "sum"}),
    # (median_gbps: made exact from the windows' spilled bandwidths, ranks/window_values.py)
    "copies": Rule(("device", "kind"), {**{c: "sum" for c in ("count", "total_bytes", "total_ns", "small", "pageable",
                                                             "unsized", "sized_ns")},
                                        "min_gbps": "min", "max_gbps": "max", "median_gbps": "wmean"},
                   _copies, "total_ns"),
}
#: tables whose rows are steps (or collectives): the windows' rows in order
CONCAT = ("step_stats", "mfu", "collective_stats", "transfers")
_WEIGHT = {"queue_length_summary": "changes", "counter_stats": "samples", "section_stats": "count",
           "kernel_breakdown": "count", "event_stats": "count"}


def merge_tables(parts: list[dict[str, Table]], span: tuple[int, int]) -> dict[str, Table]:
    """The rank's tables (those a job gathers) from its windows' tables, in window order."""
    out: dict[str, Table] = {}
    for name in parts[0]:
        tables = [p[name] for p in parts]
        if name in RULES:
            out[name] = _merge(tables, RULES[name], span, _WEIGHT.get(name, "count"))
        else:
            out[name] = Table.concat(tables) if name in CONCAT else tables[0]
    return out


def _merge(tables: list[Table], rule: Rule, span: tuple[int, int], weight: str) -> Table:
    cols = labels(tables[0])
    nonempty = [t for t in tables if len(t)]
    if not nonempty:
        return tables[0]
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
        rule.then(merged, span)
    merged.pop("_busy", None)
    order = None
    if rule.order is not None:
        order = np.argsort(-merged[rule.order].astype(np.float64), kind="stable")
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
