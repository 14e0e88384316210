"""Rule-based findings: what limits this run, the numbers that show it, what to try.

Each rule reads the analysis tables and fires only past a threshold (module
constants, so they are easy to see and tune). A finding carries its evidence: the
figures the rule used and the events that matter most.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ..derive import cache
from ..derive.intervals import clip_union, covered
from ..trace.core import Trace
from ..trace.vocabulary import INPUT_MARKERS
from .advice import suggestion
from .efficiency_findings import efficiency_findings
from .finding import Finding, _records  # noqa: F401 - Finding: analyze's API, as before
from .clocks import unsynchronised
from .compile_findings import compile_findings
from .copy_findings import copy_findings
from .common import COMMUNICATION, MEMCPY, analysed_stretches, device_view, qualified_names, stretches_ns
from .frames import column, frame, order_desc
from .grouping import group_stats
from .memory_findings import memory_findings
from .stall_findings import queued_stall_findings, stall_pct
from .registry import extension_findings, getter
from .sync import device_idle_by, overlapping, sync_by_thread, sync_rows, windows
from .window import WindowArg, selection, view
from ..trace.sorting import median, unique
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    from .table import Table

#: an event whose (lower-cased) name holds one of these belongs to the input pipeline
_INPUT = re.compile("|".join(re.escape(m) for m in INPUT_MARKERS))
IDLE_PCT = 30.0  # device idle share of the span that counts as "mostly waiting"
HOST_WAIT_SHARE = 50.0  # share of idle that is host-wait for "host-bound"
INPUT_SHARE = 10.0  # input pipeline share of the span for "input-bound"
SHORT_KERNEL_NS = 10_000  # kernels shorter than this are "short"
SHORT_KERNEL_SHARE = 50.0  # share of kernels that are short, for "launch-bound"
MIN_KERNELS = 100
LAUNCH_IDLE_PCT = 10.0  # a device this busy is not held back by launches
COPY_SHARE = 20.0  # copies as a share of busy device time, for "copy-bound"
COPY_SPAN_SHARE = 5.0  # ... and copies as a share of the device's analysed span
SYNC_SHARE = 5.0  # time one host thread spends in synchronising calls, share of step time (or the span)
#: below this share of step time, the most that removing a thread's syncs can gain (its
#: wait, and the device's idle time in and after the calls, whichever is less), the finding is low
SYNC_GAIN_LOW = 2.0
STEP_GAP_SHARE = 10.0  # device idle between steps, share of step time
EXPOSED_COMM_SHARE = 10.0  # non-overlapped communication, share of the span



def _rows(df: Table, cols: list[str], keep: np.ndarray | None = None) -> list[dict[str, Any]]:
    """The rows of ``df`` (``keep``: a mask) as dicts of ``cols``, without pandas per row."""
    values = [(column(df, c) if keep is None else column(df, c)[keep]).tolist() for c in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


def _sev(x: float, high: float) -> str:
    return "high" if x >= high else "medium"


def findings(trace: Trace, tables: dict[str, Table] | None = None,
             window: WindowArg = None) -> list[Finding]:
    """Every finding that fires on ``trace`` (``tables`` reuses already computed analyses,
    which must be of the same ``window``: the steps analysed, ``analyze/window.py``)."""
    trace = view(trace, window)
    t = getter(trace, tables)

    out: list[Finding] = []
    for rule in (_host_bound, _input_bound, _launch_bound, _copy_bound, _sync_stalls, queued_stall_findings,
                 _idle_between_steps, _exposed_comm, copy_findings, memory_findings, efficiency_findings,
                 compile_findings):
        out.extend(rule(trace, t))
    out.extend(extension_findings(trace, t))  # the rules of other packages (polyprof.findings)
    unsynced = unsynchronised(trace)
    if unsynced:  # its times are not the host's: no finding may set them against the host or a span
        out = [f for f in out if f.plane not in unsynced] + _unsynchronised(trace, unsynced)
    return _one_per_rule(by_severity(out))


#: findings are listed worst first
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def by_severity(findings: list[Finding]) -> list[Finding]:
    """``findings`` worst first (stable within a severity)."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 3))


def _one_per_rule(found: list[Finding]) -> list[Finding]:
    """Eight devices with the same problem are one finding, not eight: the worst is shown,
    the others are named in its evidence (``also_on``)."""
    first: dict[str, Finding] = {}
    out: list[Finding] = []
    for f in found:
        if f.id in first:
            first[f.id].evidence.setdefault("also_on", []).append(f.plane)
            continue
        first[f.id] = f
        out.append(f)
    for f in out:
        more = f.evidence.get("also_on")
        if more:
            more.sort()
            f.title += f" (alike on {len(more)} more)"
    return out


def _top_copies(trace: Trace, name: str, n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` copies and fills of the planes called ``name`` with the most device time
    (name, count, total_ns, mean_ns), ranked as ``kernel_breakdown(by_device=True)``
    ranks its rows: by total, ties in (name, kind, plane) order. Grouped here, for
    those planes' copies alone."""
    v = device_view(trace)
    names = np.array([p.name for p in trace.planes], object)
    sel = v.counted & (v.cls >= MEMCPY) & (names[v.plane] == name)
    if not sel.any():
        return []
    codes, labels, _ = qualified_names(trace, v.rows[sel])  # (named as kernel_breakdown's rows: module/op)
    base = (codes << 8) | v.cls[sel].astype(np.int64)
    g = group_stats((base << 20) | v.plane[sel].astype(np.int64), v.dur[sel])
    top = np.argsort(-g["total"], kind="stable")[:n]
    return [{"name": labels[int(g["key"][i]) >> 28], "count": g["count"][i].item(),
             "total_ns": g["total"][i].item(), "mean_ns": g["mean"][i].item()} for i in top.tolist()]


def _device_rows(trace: Trace, t) -> list[dict[str, Any]]:
    """The per-device rows of the temporal breakdown (plane, span, idle), of devices on
    the host's clock."""
    tb = t("temporal_breakdown")
    unsynced = unsynchronised(trace)
    rows = _rows(tb, ["plane", "span_ns", "idle_ns", "idle_pct"], column(tb, "track_id") == -1)
    return [r for r in rows if r["plane"] not in unsynced]


def _by_plane(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``rows`` by plane name, the first row of a name winning (a merged trace can have
    two planes of one name)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        out.setdefault(r["plane"], r)
    return out


def _unsynchronised(trace: Trace, unsynced: dict[str, str]) -> list[Finding]:
    return [Finding("unsynchronised_clock", f"{plane}: not synchronised with the host clock; its times "
                                            "are left out of the findings that compare it with the host",
                    "high", plane, {"why": why, "clock_sync": trace.metadata.get(mkeys.CLOCK_SYNC, {}).get(plane)},
                    [], suggestion(trace, "unsynchronised_clock"))
            for plane, why in sorted(unsynced.items())]


def _host_bound(trace: Trace, t) -> list[Finding]:
    out = []
    idle = t("idle_time_breakdown")
    waits = _by_plane(_rows(idle, ["plane", "host_wait_pct", "host_wait_ns"], column(idle, "track_id") == -1))
    for r in _device_rows(trace, t):
        if not r["span_ns"] or r["idle_pct"] < IDLE_PCT:
            continue
        ir = waits.get(r["plane"])
        if ir is None:
            continue
        hw = float(ir["host_wait_pct"])
        if not hw >= HOST_WAIT_SHARE:  # NaN: the idle table saw no idle time to share out
            continue
        ops = t("op_stats")
        by_self = order_desc(column(ops, "self_ns"), stable=False)  # as sort_values("self_ns", ascending=False)
        out.append(Finding(
            "host_bound", f"{r['plane']} idle {r['idle_pct']:.0f}% of the time, mostly waiting for the host",
            _sev(r["idle_pct"], 50), r["plane"],
            {"idle_pct": round(float(r["idle_pct"]), 2), "idle_ns": int(r["idle_ns"]),
             # the idle row's share of the device's idle time: under HTA's window that row
             # adds up every stream's idle, which can exceed the span
             "host_wait_ns": int(round(float(r["idle_ns"]) * hw / 100)), "host_wait_pct_of_idle": round(hw, 2),
             "span_ns": int(r["span_ns"])},
            _records(ops, ["name", "count", "self_ns"], at=by_self) if len(ops) else [],
            suggestion(trace, "host_bound")))
    return out


def _input_bound(trace: Trace, t) -> list[Finding]:
    ev = t("event_stats")
    if not len(ev):
        return []
    search = _INPUT.search
    names = column(ev, "name")
    sel = np.flatnonzero(np.fromiter((search(str(s).lower()) is not None for s in names.tolist()), bool, len(names)))
    if not len(sel):
        return []

    span = max(stretches_ns(trace), 1)  # (less what is between a schedule's cycles)
    # nested input events would double count: take the largest one as the lower bound
    top = float(column(ev, "total_ns")[sel].max())
    share = 100.0 * top / span
    if share < INPUT_SHARE:
        return []
    return [Finding("input_bound", f"input pipeline takes {share:.0f}% of the analysed span",
                    _sev(share, 30), "/host:CPU", {"input_ns": int(top), "span_ns": int(span),
                                                   "share_pct": round(share, 2)},
                    _records(ev, ["name", "count", "total_ns"], at=sel),
                    suggestion(trace, "input_bound"))]


def _launch_bound(trace: Trace, t) -> list[Finding]:
    kb = t("kernel_breakdown")
    if not len(kb):
        return []
    kind, count, mean = (column(kb, c) for c in ("kind", "count", "mean_ns"))
    kernels = np.flatnonzero((kind == "compute") | (kind == "communication"))
    n = int(count[kernels].sum())
    if n < MIN_KERNELS:
        return []
    v = device_view(trace)
    ker = v.cls <= COMMUNICATION
    durs = (v.end - v.start)[ker]
    short = float(100.0 * (durs < SHORT_KERNEL_NS).mean())
    kernel_median = median(durs)
    launch = v.launch[ker]
    launch = launch[launch >= 0]
    if not len(launch):  # no launch calls (e.g. ops inside one compiled program): nothing to amortise
        return []
    # each kernel's share of its launch call's CPU time: the whole call for cudaLaunchKernel,
    # 1/N of it for each of the N kernels of a CUDA/HIP graph's replay
    calls, inv, per_call = np.unique(launch, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    cpu_median = median(trace.events["dur_ns"][calls][inv] / per_call[inv])
    dev = _device_rows(trace, t)
    # a device idle with work queued (stall_findings.py) is not held back by launches
    stalled = stall_pct(trace)
    known = [r["idle_pct"] - stalled.get(r["plane"], 0.0) for r in dev if r["idle_pct"] == r["idle_pct"]]
    idle = float(max(known)) if known else float("nan") if dev else 0.0  # (NaN-skipping, as pandas' max)
    if idle < LAUNCH_IDLE_PCT or (short < SHORT_KERNEL_SHARE and cpu_median < kernel_median):
        return []
    shorts = kernels[mean[kernels] < SHORT_KERNEL_NS]
    shorts = shorts[order_desc(count[shorts], stable=False)]  # as sort_values("count", ascending=False)
    graphs = 2 * len(calls) <= len(launch)  # graph launches: two kernels or more per call on average
    medians = f"median {kernel_median / 1000:.1f} µs, launch call {'per kernel ' if graphs else ''}" \
              f"{cpu_median / 1000:.1f} µs"
    # the title says why it fired: short kernels, or launch calls that take longer than kernels
    title = (f"{short:.0f}% of {n} kernels run under {SHORT_KERNEL_NS // 1000} µs ({medians})"
             if short >= SHORT_KERNEL_SHARE else
             f"launch calls take longer than the {n} kernels they launch ({medians})")
    return [Finding(
        "launch_bound", f"{title}, device idle {idle:.0f}%{' outside queued stalls' if stalled else ''}",
        _sev(short, 75), "", {"kernels": n, "short_kernel_pct": round(short, 2), "median_kernel_ns": kernel_median,
                              "median_launch_cpu_ns": cpu_median, "device_idle_pct": round(idle, 2)},
        _records(kb, ["name", "count", "mean_ns", "total_ns"], at=shorts),
        suggestion(trace, "launch_bound_in_graphs" if graphs else "launch_bound"))]


def _copy_bound(trace: Trace, t) -> list[Finding]:
    v = device_view(trace)
    if not len(v.rows):
        return []
    spans = {p: r["span_ns"] for p, r in _by_plane(_device_rows(trace, t)).items()}
    ws, we = analysed_stretches(trace)
    n = len(trace.planes)
    # the activity the analysed steps count (as _top_copies and kernel_breakdown), summed over streams
    dur = np.where(v.counted, v.end - v.start, 0).astype(np.float64)
    total = np.bincount(v.plane, weights=dur, minlength=n)
    copy = v.counted & (v.cls >= MEMCPY)
    copies = np.bincount(v.plane[copy], weights=dur[copy], minlength=n)
    out = []
    for plane in unique(v.plane[v.counted]).tolist():
        name = trace.planes[plane].name
        cp = float(copies[plane])
        share = 100.0 * cp / total[plane] if total[plane] else 0.0
        span = float(spans.get(name, 0) or 0)
        # of the span: the time some copy runs (overlapping streams once), inside the
        # analysed stretches (the span's part the temporal breakdown counts)
        on = copy & (v.plane == plane)
        seg_s, seg_e = clip_union(v.start[on], v.end[on], int(ws[0]), int(we[-1]))
        busy = float(covered(seg_s, seg_e, ws, we).sum())
        of_span = 100.0 * busy / span if span else 0.0
        # copies must be a large part of the device's work *and* of its time: a few small
        # copies on an idle device are not what limits the run
        if share < COPY_SHARE or of_span < COPY_SPAN_SHARE:
            continue
        out.append(Finding("copy_bound", f"{name}: copies and fills are {share:.0f}% of device activity time "
                                         f"({of_span:.0f}% of the span)",
                           _sev(share, 40), name,
                           {"copy_ns": int(cp), "device_activity_ns": int(total[plane]), "share_pct": round(share, 2),
                            "copy_busy_ns": int(busy), "span_ns": int(span), "copy_pct_of_span": round(of_span, 2)},
                           _top_copies(trace, name), suggestion(trace, "copy_bound")))
    return sorted(out, key=lambda f: -f.evidence["share_pct"])  # the worst device first


def _sync_stalls(trace: Trace, t) -> list[Finding]:

    by_thread = sync_by_thread(trace)
    if not len(by_thread):
        return []
    worst = {c: column(by_thread, c)[0] for c in ("thread", "share_pct", "sync_ns", "window_ns", "calls")}
    share = float(worst["share_pct"])
    if share < SYNC_SHARE:
        return []
    # the calls behind it: sync calls of that thread overlapping the windows (those it
    # counts: one begun before a window and waiting on into it too), by name, each
    # with its time inside the windows
    ev = trace.events
    rows = sync_rows(trace)
    named = np.array([t.name == worst["thread"] for t in trace.tracks], bool)  # per track, not per row
    rows = rows[named[ev["track"][rows]]]
    ws, we = windows(trace)
    st = np.asarray(ev["start_ns"][rows], np.int64)
    en = st + ev["dur_ns"][rows]
    keep = overlapping(ws, we, st, en)
    rows = rows[keep]
    top = _by_category_and_name(trace, rows, covered(ws, we, st[keep], en[keep]))
    where = "of step time" if len(cache.steps(trace)) else "of the span"
    who = str(worst["thread"]) if str(worst["thread"]).startswith("thread") else f"thread {worst['thread']}"
    evidence = {"sync_ns": int(worst["sync_ns"]), "window_ns": int(worst["window_ns"]),
                "share_pct": round(share, 2), "calls": int(worst["calls"]), "thread": str(worst["thread"]),
                "threads_syncing": int((column(by_thread, "sync_ns") > 0).sum())}
    title = f"{who} spends {share:.0f}% {where} waiting in synchronising calls"
    severity, advice = _sev(share, 20), suggestion(trace, "sync_stalls")
    idle = device_idle_by(trace, st[keep], en[keep], ws, we)
    if idle is not None:
        # without the waits the host runs ahead and the device fills its idle time: they
        # cost at most the wait, and at most that idle time (a device-bound loop: little)
        idle_pct = 100.0 * idle / max(int(worst["window_ns"]), 1)
        gain = min(share, idle_pct)
        evidence |= {"device_idle_ns": idle, "device_idle_pct": round(idle_pct, 2)}
        severity = "low" if gain < SYNC_GAIN_LOW else _sev(gain, 20)
        if severity == "low":
            advice = (f"The device kept working while the host waited: the loop is device-bound, and removing "
                      f"these waits gains at most the {idle_pct:.1f}% the device sits idle in and after them. "
                      + advice)
    return [Finding("sync_stalls", title, severity, "/host:CPU", evidence,
                    _records(top, ["category", "name", "count", "total_ns"]), advice)]


def _by_category_and_name(trace: Trace, rows: np.ndarray, dur: np.ndarray | None = None) -> Table:
    """``rows`` per (category, name): ``count``, ``total_ns`` (of ``dur``, per row; their
    durations without it), most time first (a groupby in order of first occurrence, then
    sorted by pandas' default sort)."""
    ev = trace.events
    if not len(rows):
        return frame({"category": np.zeros(0, object), "name": np.zeros(0, object),
                      "count": np.zeros(0, np.int64), "total_ns": np.zeros(0, np.int64)})
    codes, labels, _ = qualified_names(trace, rows)  # (named as event_stats' rows)
    key = ev["category"][rows].astype(np.int64) * max(len(labels), 1) + codes
    o = np.argsort(key, kind="stable")
    k = key[o]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    count = np.diff(np.r_[starts, len(k)])
    total = np.add.reduceat((ev["dur_ns"][rows] if dur is None else dur)[o], starts)
    appear = np.argsort(o[starts], kind="stable")  # groups in order of first occurrence
    first = rows[o[starts]][appear]
    return frame({"category": labels[ev["category"][first]], "name": labels[k[starts][appear] % max(len(labels), 1)],
                  "count": count[appear], "total_ns": total[appear]},
                 order=order_desc(total[appear], stable=False))


def _idle_between_steps(trace: Trace, t) -> list[Finding]:
    ss = t("step_stats")
    if len(ss) < 2:
        return []
    out = []
    planes, step, start, end, host, hs = (column(ss, c) for c in ("plane", "step", "device_start_ns",
                                                                      "device_end_ns", "host_ns", "host_start_ns"))
    # the stretch each step was recorded in (a recording fact, whatever the span): a gap
    # between stretches (a schedule's cycles, unrecorded steps between them) is not
    # between adjacent steps
    sel = selection(trace)
    part = np.zeros(len(hs), np.int64) if sel is None or sel.stretches is None else \
        np.searchsorted(sel.stretches[:, 0], hs, side="right")
    for plane in dict.fromkeys(planes[planes != ""].tolist()):  # a groupby would build an Arrow index
        g = np.flatnonzero((planes == plane) & (start >= 0))
        g = g[np.argsort(step[g], kind="stable")]  # one row per step and plane: the order is the steps'
        if len(g) < 2:
            continue
        same = part[g][1:] == part[g][:-1]  # adjacent steps, in one stretch
        gaps = np.maximum(start[g][1:] - end[g][:-1], 0)[same]
        after = step[g][:-1][same]
        if not len(gaps):
            continue
        steps_ns = float(host[g].sum())
        share = 100.0 * gaps.sum() / steps_ns if steps_ns else 0.0
        if share < STEP_GAP_SHARE:
            continue
        worst = np.argsort(gaps)[::-1][:5]
        ev = [{"after_step": int(after[i]), "gap_ns": int(gaps[i])} for i in worst]
        out.append(Finding("idle_between_steps", f"{plane} sits idle {share:.0f}% of step time between steps",
                           _sev(share, 25), str(plane),
                           {"gap_total_ns": int(gaps.sum()), "gap_mean_ns": float(gaps.mean()),
                            "steps": int(len(g)), "share_pct": round(float(share), 2)}, ev,
                           "Work between steps (data loading, logging, checkpointing, optimizer host code, "
                           "a sync at the end of the step) leaves the device without work. Prefetch the next "
                           "batch, log asynchronously, and avoid a sync at step boundaries."))
    return out


def _exposed_comm(trace: Trace, t) -> list[Finding]:
    ov = t("comm_comp_overlap")
    spans = {p: r["span_ns"] for p, r in _by_plane(_device_rows(trace, t)).items()}
    out = []
    for r in _rows(ov, ["plane", "communication_ns", "compute_ns", "overlap_ns", "overlap_pct"]):
        span = float(spans.get(r["plane"], 0.0))
        exposed = float(r["communication_ns"] - r["overlap_ns"])
        if not span or 100.0 * exposed / span < EXPOSED_COMM_SHARE:
            continue
        share = 100.0 * exposed / span
        out.append(Finding("exposed_communication",
                           f"{r['plane']}: {share:.0f}% of the span is communication not hidden by compute",
                           _sev(share, 30), r["plane"],
                           {"communication_ns": int(r["communication_ns"]), "overlap_ns": int(r["overlap_ns"]),
                            "overlap_pct": float(r["overlap_pct"]), "span_ns": int(span)}, [],
                           "Overlap collectives with compute: DDP bucketing (bucket_cap_mb), FSDP prefetch, "
                           "communication on its own stream; check for stragglers among ranks."))
    return out
