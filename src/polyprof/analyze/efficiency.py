"""How far from the hardware: achieved FLOP/s and bandwidth of each op against the
device's roofline (``op_efficiency``), and model FLOPs utilisation (``mfu``); per kernel
name, ``analyze/kernel_roofline.py``.

FLOPs and bytes come from :mod:`analyze.flops` (the trace's own figures, else estimated
from shapes), peaks from :mod:`analyze.peaks` (overridden with ``peak=`` here, or for
every table computed inside :func:`peaks.using`, as ``--peak`` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np

from ..derive import cache
from ..derive.graph_recording import stream_captures
from ..derive.projection import LaunchIndex
from ..trace.categories import DEVICE_ACTIVITY, Kind
from ..trace.core import Trace
from ..trace.sorting import find, member, row_of_key, union, unique, unique_inverse, unique_rows
from ..trace import keys
from . import graph_costs
from .common import op_durations, qualified_names, ran_on_device, stretches_ns
from .flops import HLO, SOURCE_NAMES, Costs, counter_rows, hlo_costs, op_costs, ran_precision
from .frames import column, empty_frame, frame, order_desc
from .grouping import group_reduce, group_stats
from .nesting import outermost, same_name_wrappers
from .peaks import Peak, device_peak, given
from .window import selection
from .window_counting import counted_ns, device_mask, host_mask, part_ns

if TYPE_CHECKING:
    from ..derive.steps import Steps
    from .table import Table

def resolve_peak(trace: Trace, peak: str | Mapping[str, float] | None) -> Peak | None:
    return device_peak(trace, peak if peak is not None else given())


def costed_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, Costs]:
    """(rows, on_device, costs): the framework ops with a FLOP or byte figure, then the
    device events (XLA ops, kernels) that carry their own ``flops`` stat or whose XLA op
    the file's HLO costs (:func:`flops.hlo_costs`). Computed once
    per trace (``derive/cache.memo``): op_efficiency, mfu and the findings share it."""
    return cache.memo(trace, "costed_rows", _costed_rows)


def _costed_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, Costs]:
    ops = trace.rows_of_kind(Kind.CPU_OP)
    col = trace.stats.get(keys.FLOPS)
    dev = np.zeros(0, np.int64)
    if col is not None and len(col):  # sort-based set operations: np.unique's first call imports numpy.ma
        dev = unique(col.rows[~member(col.rows, ops)])
        # device activity alone, as the device tables count it (correlate.device_activity_rows):
        # not XLA's "Async XLA Ops" spans, copy-start to copy-done over the ops that hold the time
        dev = dev[member(trace.kinds[dev], np.asarray(DEVICE_ACTIVITY, trace.kinds.dtype))] if len(dev) else dev
    counted = counter_rows(trace)  # CUPTI FLOP counters of kernel ranges
    if len(counted):
        dev = union(dev, counted[~member(counted, ops)])
    hlo = hlo_costs(trace).rows  # XLA ops costed from the file's HLO (a JAX GPU XSpace)
    if len(hlo):
        dev = union(dev, hlo[~member(hlo, ops)])
    rows = np.concatenate([ops, dev])
    on_device = np.concatenate([np.zeros(len(ops), bool), np.ones(len(dev), bool)])
    order = np.argsort(rows, kind="stable")
    rows, on_device = rows[order], on_device[order]
    c = op_costs(trace, rows)
    c = c._replace(precision=ran_precision(trace, rows, on_device, c.flops, c.precision))  # (autocast's bf16)
    _per_execution(trace, rows, on_device, c)
    keep = ~(np.isnan(c.flops) & np.isnan(c.bytes))
    return rows[keep], on_device[keep], Costs(c.flops[keep], c.bytes[keep], c.precision[keep], c.source[keep])


def _per_execution(trace: Trace, rows: np.ndarray, on_device: np.ndarray, c: Costs) -> None:
    """The figures of the device rows costed from the HLO, in place: an op run as several
    kernels per execution (a convolution as an im2col kernel and a gemm) has its whole
    figures on the first kernel of each execution and 0 on the others, so that its
    executions count them once each (``hlo_costs`` shares them among its kernel names)."""
    op, first = hlo_ops(trace, rows, on_device)
    at = np.flatnonzero((op >= 0) & (c.source == HLO))
    if not len(at):
        return
    hc = hlo_costs(trace)
    for whole, out in ((hc.op_flops[op[at]], c.flops), (hc.op_bytes[op[at]], c.bytes)):
        out[at] = np.where(first[at] | np.isnan(whole), whole, 0.0)


def hlo_ops(trace: Trace, rows: np.ndarray, on_device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(op, first) of each of ``rows`` (ascending): its HLO op (a position in the
    ``op_*`` arrays of :func:`flops.hlo_costs`; -1 for a row not costed from the HLO,
    or not on a device) and whether it starts an execution of it (:func:`_executions`)."""
    hc = hlo_costs(trace)
    op, first = np.full(len(rows), -1, np.int64), np.ones(len(rows), bool)
    if len(hc.rows) and len(rows):
        pos = find(hc.rows, rows)
        at = np.flatnonzero((pos >= 0) & on_device)
        op[at], first[at] = hc.op[pos[at]], _executions(trace)[pos[at]]
    return op, first


def _executions(trace: Trace) -> np.ndarray:
    """Per row of :func:`flops.hlo_costs`: whether it starts an execution of its op. Each
    row does, but for an op that ran as several kernel names, whose execution is each
    run of its kernels one after another on a stream (or thread) with no other op's
    between them, split again at each further occurrence of its lead kernel (the one
    with the most time: the gemm of an im2col and a gemm), so calls of one jitted op
    with nothing costed between them stay apart: a kernel left out of the trace (the
    first im2col of TraceLens's jax_conv_minimal_08) loses no execution, and one run
    twice (a buffer filled twice before an attention kernel) counts no more."""
    def compute(t: Trace) -> np.ndarray:
        hc = hlo_costs(t)
        ev = t.events
        name, track = ev["name"][hc.rows].astype(np.int64), ev["track"][hc.rows]
        pairs, _, inv = unique_rows(hc.op, name)
        several = np.bincount(pairs[:, 0], minlength=len(hc.op_name)) > 1 if len(pairs) else np.zeros(0, bool)
        if not len(hc.rows):
            return np.zeros(0, bool)
        lead = _lead_kernels(pairs, np.bincount(inv, weights=ev["dur_ns"][hc.rows], minlength=len(pairs)),
                             len(hc.op_name))
        order = np.lexsort((ev["start_ns"][hc.rows], track))
        tr, op, is_lead = track[order], hc.op[order], name[order] == lead[hc.op[order]]
        run = np.r_[True, (tr[1:] != tr[:-1]) | (op[1:] != op[:-1])]
        # a run of one op's kernels holds as many executions as its lead kernel's occurrences
        # (nothing else costed ran between two calls of a jitted convolution)
        before = np.cumsum(is_lead) - is_lead  # lead kernels before each row...
        first = np.flatnonzero(run)
        in_run = before - before[first][np.cumsum(run) - 1]  # ...within its run
        starts = np.empty(len(order), bool)
        starts[order] = run | (is_lead & (in_run >= 1))
        return starts | ~several[hc.op]

    return cache.memo(trace, "hlo_executions", compute)


def _lead_kernels(pairs: np.ndarray, time: np.ndarray, n_ops: int) -> np.ndarray:
    """Per HLO op, the name (string id) of its kernel with the most time (the gemm of an
    im2col and a gemm): one per execution; -1 for an op with no row."""
    lead = np.full(n_ops, -1, np.int64)
    if len(pairs):
        order = np.lexsort((time, pairs[:, 0]))  # by op, the longest last
        lead[pairs[order, 0]] = pairs[order, 1]  # (the last write of each op wins)
    return lead


def costed_device_time(trace: Trace) -> np.ndarray:
    """:func:`device_time` of :func:`costed_rows`, aligned with them; computed once per
    trace (op_efficiency's rates, mfu's choice of the ops that ran on a device)."""
    def compute(t: Trace) -> np.ndarray:
        rows, on_device, _ = costed_rows(t)
        return device_time(t, rows, on_device)

    return cache.memo(trace, "costed_device_time", compute)


def device_time(trace: Trace, rows: np.ndarray, on_device: np.ndarray) -> np.ndarray:
    """ns of device time of each row (float64): a device op's own time as XProf counts it
    (``device_duration_ps`` where it has it), a host op's the device time of what it
    launched (nested ops included)."""
    ev = trace.events
    st, du = ev["start_ns"][rows], ev["dur_ns"][rows]
    out = np.where(on_device, op_durations(trace, rows, du), 0).astype(np.float64)
    host = ~on_device
    if host.any():
        proj = LaunchIndex(trace, cache.correlation(trace)).project(
            cache.threads(trace)[ev["track"][rows[host]]], st[host], st[host] + du[host])
        out[host] = proj.busy_ns
    return out


def _share_of_roof(pct: np.ndarray) -> np.ndarray:
    """Achieved ÷ roofline in %, NaN where past 100: a rate over the device's peak FLOP/s
    or over its memory bandwidth is no share of the roof. The FLOPs or bytes are then
    over-counted (an input torch expanded, read once per distinct element, recorded
    without its strides, as torch before 2.x records it) or came from a cache the
    roofline does not model (an elementwise op on a tensor its producer left in L2
    moves it faster than DRAM can); the achieved rates stay in their columns."""
    return np.where(pct > 100.0, np.nan, pct)


def _roof_share(fps: np.ndarray, bps: np.ndarray, intensity: np.ndarray, peak_f: np.ndarray, bw: float,
                ok: np.ndarray) -> np.ndarray:
    """``roofline_pct`` where ``ok``: achieved FLOP/s ÷ min(peak, intensity × bandwidth);
    an op that moves bytes and computes nothing (a copy, a transpose) has a roof of 0
    FLOP/s, and its share is that of the memory bandwidth it reached, as XProf's
    roofline_efficiency gives it (the same share a memory-bound op's FLOPs give)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        roof = np.where(np.isnan(intensity), peak_f, np.minimum(peak_f, intensity * bw if bw else np.inf))
        pct = np.where(ok & (roof > 0), 100.0 * fps / roof, np.nan)
        if bw:
            pct = np.where(ok & (intensity == 0) & (bps > 0), 100.0 * bps / bw, pct)
    return _share_of_roof(pct)


def op_efficiency(trace: Trace, peak: str | Mapping[str, float] | None = None) -> Table:
    """One row per op name and where its calls ran with a FLOP or byte figure: framework
    ops (``aten::mm``...) and device ops that carry XLA's cost figures. An op called both
    on the host alone (a data loader's ``aten::div``) and with device work has two rows,
    so the device row's rates are of the calls that ran there.

    Columns: ``name`` (an XLA op: ``module/op``), ``module`` ("" for none), ``category``
    (an HLO op's opcode; a TPU's XLA op's ``hlo_category``), ``count``, ``flops`` and ``bytes`` (summed over calls; an op
    nested in another keeps its own figure, so do not sum the column over names: ``mfu``
    counts each FLOP once), ``flops_source`` (trace / shapes), ``precision`` (the first
    call's, as it ran: ``flops.ran_precision``), ``device_ns`` (device time the op's calls
    launched, nested ops included; for a device op its duration), ``host_ns`` (the calls'
    host duration),
    ``time_ns`` (``device_ns`` where the op ran work on a device, else ``host_ns``: a
    CPU op), ``where`` (device / host), ``flops_per_s`` and ``bytes_per_s`` (achieved,
    over ``time_ns``), ``intensity`` (FLOPs per byte), ``peak_flops_per_s`` (the
    device's peak at that precision), ``roofline_pct`` (achieved FLOP/s as a share of
    the roofline at that intensity, min(peak, intensity × bandwidth); of an op with bytes
    and no FLOPs, the achieved bandwidth's share of the device's; NaN on the host,
    without peaks, or past the roof: :func:`_share_of_roof`), ``bound_by`` (compute /
    memory: which side of the ridge point the intensity lies; "" where unknown). Sorted
    by ``time_ns``. In a time window a device op its edges cut counts for its part
    inside: that part's time, its FLOPs and bytes in proportion (:func:`_window_parts`).
    """
    cols = ["name", "module", "category", "count", "flops", "bytes", "flops_source", "precision", "device_ns", "host_ns",
            "time_ns", "where", "flops_per_s", "bytes_per_s", "intensity", "peak_flops_per_s", "roofline_pct",
            "bound_by", "kernels"]
    rows, on_device, c = costed_rows(trace)
    dev_ns = costed_device_time(trace)
    inside = _in_window(trace, rows, on_device)
    if not inside.all():
        rows, on_device, dev_ns = rows[inside], on_device[inside], dev_ns[inside]
        c = Costs(*(col[inside] for col in c))
    wraps = ~on_device  # a call around one of its own name: that one is the call (before: both counted)
    wraps[wraps] = same_name_wrappers(trace, rows[wraps])
    rows, on_device, dev_ns, c = rows[~wraps], on_device[~wraps], dev_ns[~wraps], Costs(*(x[~wraps] for x in c))
    share, dev_ns = _window_parts(trace, rows, on_device, dev_ns)
    if (share < 1).any():  # device ops cut by a time window's edges: their part inside
        c = Costs(c.flops * share, c.bytes * share, c.precision, c.source)
    ev = trace.events
    du = ev["dur_ns"][rows]
    op, execs = hlo_ops(trace, rows, on_device)  # a device op costed from the HLO: grouped by its HLO op
    # (the replays first: a window whose costed ops were all captured before it still replays them)
    rows, on_device, dev_ns, c, du, op, execs = _with_replays(trace, rows, on_device, dev_ns, c, du, op, execs)
    if not len(rows):
        return empty_frame(cols, ("name", "module", "category", "flops_source", "precision", "where", "bound_by",
                                  "kernels"),
                           np.float64)
    ran = on_device | (dev_ns > 0)  # a call that ran work on a device; the others ran on the host
    codes, labels, modules = qualified_names(trace, rows)  # a device op of a known XLA module: module/op
    g = group_stats(np.where(op >= 0, (len(labels) + op) * 2 + 1, codes * 2 + ran), du)
    o, s = g["order"], g["starts"]
    first = o[s]  # a group's first row (in row order): its precision and source
    flops = group_reduce(o, s, np.nan_to_num(c.flops), np.add)
    nbytes = group_reduce(o, s, np.nan_to_num(c.bytes), np.add)
    has_f = group_reduce(o, s, (~np.isnan(c.flops)).astype(np.int64), np.add) > 0
    has_b = group_reduce(o, s, (~np.isnan(c.bytes)).astype(np.int64), np.add) > 0
    flops, nbytes = np.where(has_f, flops, np.nan), np.where(has_b, nbytes, np.nan)
    device_ns = group_reduce(o, s, dev_ns.astype(np.float64), np.add)
    host_ns = group_reduce(o, s, np.where(on_device, 0, du), np.add)
    on_dev = (g["key"] & 1).astype(bool)
    time_ns = np.where(on_dev, device_ns, host_ns).astype(np.float64)
    prec = c.precision[first]
    pk = resolve_peak(trace, peak)
    with np.errstate(divide="ignore", invalid="ignore"):
        fps = flops / time_ns * 1e9
        bps = nbytes / time_ns * 1e9
        intensity = flops / nbytes
        peak_f = pk.flops_each(prec) if pk else np.zeros(len(prec))
        bw = pk.bandwidth if pk else 0.0
        roofline_pct = _roof_share(fps, bps, intensity, peak_f, bw, on_dev & (peak_f > 0) & np.isfinite(fps))
        ridge = peak_f / bw if bw else np.full(len(peak_f), np.nan)
        bound = np.where(~np.isfinite(intensity) | np.isnan(ridge) | (peak_f <= 0), "",
                         np.where(intensity >= ridge, "compute", "memory")).astype(object)
    names, module, category, kernels = _op_names(trace, rows, g["key"] >> 1, o, s, (codes, labels, modules))
    count = np.where(op[first] >= 0, group_reduce(o, s, execs.astype(np.int64), np.add), g["count"])
    return frame({
        "name": names, "module": module, "category": category, "count": count, "flops": flops,
        "bytes": nbytes, "flops_source": SOURCE_NAMES[c.source[first]], "precision": prec,
        "device_ns": device_ns, "host_ns": host_ns, "time_ns": time_ns,
        "where": np.where(on_dev, "device", "host").astype(object), "flops_per_s": fps, "bytes_per_s": bps,
        "intensity": intensity, "peak_flops_per_s": np.where(peak_f > 0, peak_f, np.nan),
        "roofline_pct": roofline_pct, "bound_by": bound, "kernels": kernels}, order=order_desc(time_ns))


def _with_replays(trace: Trace, rows: np.ndarray, on_device: np.ndarray, dev_ns: np.ndarray, c: Costs,
                  du: np.ndarray, op: np.ndarray, execs: np.ndarray) -> tuple:
    """op_efficiency's calls and a call of each costed op captured into a CUDA graph per
    replay of it in the window (``graph_costs.replayed_calls``): its figures, the device
    time its kernels ran in the replay, no host time."""
    extra, extra_ns = graph_costs.replayed_calls(trace)
    if not len(extra):
        return rows, on_device, dev_ns, c, du, op, execs
    every, _, every_c = costed_rows(trace)
    pos = find(every, extra)
    keep = pos >= 0
    extra, extra_ns, pos = extra[keep], extra_ns[keep], pos[keep]
    n = len(extra)
    return (np.concatenate([rows, extra]), np.concatenate([on_device, np.zeros(n, bool)]),
            np.concatenate([dev_ns, extra_ns]), Costs(*(np.concatenate([a, b[pos]]) for a, b in zip(c, every_c))),
            np.concatenate([du, np.zeros(n, du.dtype)]), np.concatenate([op, np.full(n, -1, op.dtype)]),
            np.concatenate([execs, np.ones(n, execs.dtype)]))


def _op_names(trace: Trace, rows: np.ndarray, key: np.ndarray, o: np.ndarray, s: np.ndarray,
              qualified: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(name, module, category, kernels) of op_efficiency's groups, ``qualified`` the rows'
    ``common.qualified_names``: of a group of a name (``key`` a code of its labels), that
    name (``module/op`` for an op of a known module), its module, its first row's
    ``hlo_category`` (XProf's category of a TPU's XLA op: ``loop fusion``, ``copy-done``;
    "" where none), ""; of an HLO op
    (``key`` past the labels: :func:`hlo_ops`), ``module/instruction``, its module, its
    opcode, and the kernels it ran as, named as ``kernel_breakdown`` names them ("; "
    between them, the longest first; "" where they are the op's own name: XLA's CPU runtime)."""
    codes, labels, modules = qualified
    hlo = key >= len(labels)
    at = np.where(hlo, 0, key)
    names, module, category, kernels = labels[at], modules[at], np.full(len(key), "", object), \
        np.full(len(key), "", object)
    given = trace.stats.lookup_rows([keys.HLO_CATEGORY], rows[o[s]]).get(keys.HLO_CATEGORY)  # a TPU's XLA ops' own
    if given is not None:
        category[given[0]] = given[1]
    if not hlo.any():
        return names, module, category, kernels
    hc = hlo_costs(trace)
    op = key[hlo] - len(labels)
    raw = names.copy()
    raw[hlo], module[hlo] = hc.op_name[op], hc.op_module[op]
    names[hlo] = [f"{m}/{n}" if m else n for n, m in zip(hc.op_name[op].tolist(), hc.op_module[op].tolist())]
    category[hlo] = hc.op_opcode[op]
    group = np.repeat(np.arange(len(key)), np.diff(np.r_[s, len(o)]))  # each sorted row's group
    sel = hlo[group]
    ev = trace.events
    r = o[sel]
    pairs, first, inv = unique_rows(group[sel], codes[r])
    dur = np.bincount(inv, weights=ev["dur_ns"][rows[r]].astype(np.float64), minlength=len(pairs))
    own = trace.names(rows[r[first]]) if len(first) else np.zeros(0, object)  # (the kernels' names alone)
    listed: dict[int, list[tuple[float, str, str]]] = {}
    for (gi, c), d, k in zip(pairs.tolist(), dur.tolist(), own.tolist()):
        listed.setdefault(gi, []).append((-d, str(labels[c]), k))
    for gi, ks in listed.items():
        if any(k != raw[gi] for _, _, k in ks):
            kernels[gi] = "; ".join(q for _, q, _ in sorted(ks))
    return names, module, category, kernels


def _in_window(trace: Trace, rows: np.ndarray, on_device: np.ndarray) -> np.ndarray:
    """Which costed rows the analysed steps hold, as ``op_stats`` counts them: a framework
    op by its start, a device op by its launch (by its start where none is known); in a
    time window, a device op with any part inside it, as the device-time tables count it
    (``window_counting.device_mask``; its share: :func:`_window_parts`)."""
    ev = trace.events
    start = ev["start_ns"][rows]
    keep = host_mask(trace, start)
    if selection(trace) is None or not on_device.any():
        return keep
    corr = cache.correlation(trace)
    launch = row_of_key(corr.device_rows, corr.launch, rows[on_device])  # -1: none known
    dev = rows[on_device]
    keep[on_device] = device_mask(trace, launch, start[on_device], start[on_device] + ev["dur_ns"][dev])
    return keep


def _window_parts(trace: Trace, rows: np.ndarray, on_device: np.ndarray,
                  dev_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(share, device ns) of each costed row a view counts: in a time window, a device op
    its edges cut counts its part inside (``window_counting.part_ns``), its device time
    that part (``counted_ns``, as "Device time" and "Top device activity" count it) and
    its FLOPs and bytes in proportion (``share``: part ÷ its whole span), so its rates
    stay its own; every other row whole (share 1, ``dev_ns``)."""
    share = np.ones(len(rows))
    sel = selection(trace)
    if sel is None or not sel.timed or not on_device.any():
        return share, dev_ns
    ev = trace.events
    at = np.flatnonzero(on_device)
    start = ev["start_ns"][rows[at]].astype(np.int64)
    end = start + ev["dur_ns"][rows[at]]
    whole = end - start
    part = part_ns(sel, start, end)
    cut = (whole > 0) & (part < whole)
    share[at[cut]] = part[cut] / whole[cut]
    dev_ns = np.asarray(dev_ns, np.float64).copy()
    dev_ns[at] = counted_ns(trace, start, end, dev_ns[at])
    return share, dev_ns


def _model_in_window(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which of :func:`model_rows`' ``rows`` a view without steps counts, as the tables
    that count host events and device activity do (:func:`_in_window`: a framework op by
    its start, a device op by its launch): a time window's, the framework ops that start
    in it (the recording keeps what overlaps it) and the device ops that run in it (for
    their part inside: :func:`_window_parts`); all of them for a trace analysed whole."""
    if selection(trace) is None or not len(rows):
        return np.ones(len(rows), bool)
    return _in_window(trace, rows, ~member(rows, trace.rows_of_kind(Kind.CPU_OP)))


def model_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, flops, precision) of the model's FLOPs, each counted once: the ops with a
    FLOP figure not nested in another such op on the same thread (``aten::linear``, not
    also its ``aten::addmm``); device ops with their own figures where no framework op
    has one. In a trace with device activity, or a window of a rank with some
    (``ranks/stepwise.py``, ``common.ran_on_device``), only the framework ops that launched
    some (a data loader's ops on the host ran none of the model's device work); and in any
    trace, none made in a CUDA graph's stream capture that launched nothing (their work
    runs, and counts, at the graph's replays), as in the rank read whole."""
    rows, on_device, c = costed_rows(trace)
    f = ~np.isnan(c.flops)
    host = f & ~on_device
    replayed = graph_costs.replayed_flops(trace, rows[host], c.flops[host], c.precision[host])
    if host.any() and ran_on_device(trace):
        host &= costed_device_time(trace) > 0
    elif host.any():  # (no op launched any: those outside a capture count, as a CPU trace's)
        host &= stream_captures(trace, rows) < 0
    pick = host if host.any() or len(replayed[0]) else f & on_device
    rows, flops, prec = rows[pick], c.flops[pick], c.precision[pick]
    if host.any() and len(rows):
        outer = outermost(trace, rows)
        rows, flops, prec = rows[outer], flops[outer], prec[outer]
    if not len(replayed[0]):
        return rows, flops, prec
    return tuple(np.concatenate([a, b]) for a, b in zip((rows, flops, prec), replayed))  # type: ignore[return-value]


def range_profiled(trace: Trace) -> bool:
    """Whether the model FLOPs :func:`mfu` counts are CUPTI's range-profiler counters
    (``flops.counter_rows``): the profiler replays each kernel range to read them (HTA's
    cupti_profiler trace: 77 ranges of 121 ms each, kernels of microseconds), so the
    trace's time is the profiler's, not the program's, and the ranges' durations are no
    kernel's run time."""
    def compute(t: Trace) -> bool:
        ranges = counter_rows(t)
        return bool(len(ranges)) and bool(member(model_rows(t)[0], ranges).any())

    return bool(cache.memo(trace, "range_profiled", compute))


def uncounted_replays(trace: Trace) -> float:
    """Percent of the window's kernel time in graph replays whose FLOPs MFU cannot count
    (``graph_costs.uncounted_share``, less the kernels with their own FLOPs)."""
    return graph_costs.uncounted_share(trace, _own_flops(trace))


def _own_flops(trace: Trace) -> np.ndarray:
    """The device rows with FLOPs of their own (XLA's kernels)."""
    rows, on_device, c = costed_rows(trace)
    return rows[on_device & ~np.isnan(c.flops)]


def uncounted_of(m: Table | None) -> float:
    """The ``uncounted_replay_pct`` of an ``mfu`` table (its whole window's row, the
    first), 0 for an empty one (no FLOPs and no such replays): what the MFU line and the
    low-MFU finding read, also of a rank merged from its windows, which has no events."""
    return float(column(m, "uncounted_replay_pct")[0]) if m is not None and len(m) else 0.0


def uncounted_replay_ns(trace: Trace) -> tuple[float, float]:
    """(kernel ns in those replays, the window's kernel ns): the parts of
    :func:`uncounted_replays`, which a job's rank summed from its windows adds up."""
    return graph_costs.uncounted_ns(trace, _own_flops(trace))


def _step_of(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The analysed step (a position in ``cache.steps``) each of ``rows`` starts in, -1 for
    none (every row of a trace without steps)."""
    steps = cache.steps(trace)
    return steps.of(trace.events["start_ns"][rows]) if len(steps) and len(rows) else np.full(len(rows), -1)


def flops_by_precision(flops: np.ndarray, prec: np.ndarray, counted: np.ndarray | None = None,
                       fallback: bool = True) -> dict[str, float]:
    """FLOPs per precision of the model rows ``counted`` selects (those the MFU counts:
    in the analysed steps; ``None``: all of them, a trace without steps), or, with
    ``fallback``, of all the rows where the counted ones hold no FLOPs (a window of a
    rank adds none then: its other windows count)."""
    if counted is not None and (np.nansum(flops[counted]) > 0 or not fallback):
        flops, prec = flops[counted], prec[counted]
    kinds, inv = unique_inverse(prec.astype(str))
    weights = np.bincount(inv, weights=np.nan_to_num(flops), minlength=len(kinds))
    return dict(zip(kinds.tolist(), weights.tolist()))


def model_precisions(trace: Trace, fallback: bool = True) -> dict[str, float]:
    """The model FLOPs :func:`mfu` counts, per precision (:func:`flops_by_precision` of
    :func:`model_rows` in the analysed steps): what it, a rank merged from its windows
    (each without ``fallback``) and the XProf export choose the precision by
    (:func:`main_precision`)."""
    rows, flops, prec = model_rows(trace)
    counted = _step_of(trace, rows) >= 0 if len(cache.steps(trace)) else _model_in_window(trace, rows)
    return flops_by_precision(flops, prec, counted, fallback)


def main_precision(by_precision: Mapping[str, float]) -> str:
    """The precision most of these FLOPs were in, of those known: "" (none known) only
    where no known one holds any, a tie to the first in sorted order. Weighed by the
    FLOPs the MFU counts (:func:`model_precisions`), not every costed op of the file:
    ``jax.random`` draws before a JAX program's steps (uint32 threefry ops, which XLA
    counts as 66.6 MFLOP of no precision) outweighed its steps' 21.6 MFLOP of fp32
    products, and its MFU was of precision "" (held to the device's main peak, not
    named on the MFU line); integer ops say nothing of the model's precision, in the
    steps either."""
    known = sorted(k for k, v in by_precision.items() if k and v > 0)
    kinds = known or sorted(by_precision)
    return kinds[int(np.argmax([by_precision[k] for k in kinds]))] if kinds else ""


def mfu(trace: Trace, peak: str | Mapping[str, float] | None = None, precision: str | None = None) -> Table:
    """Model FLOPs utilisation per step and overall: model FLOPs (each counted once,
    :func:`model_rows`) ÷ (time × peak FLOP/s of the precision assumed × devices).

    Columns: ``step`` (-1: the whole trace, first), ``flops``, ``time_ns`` (the step's
    time, :func:`step_times`; overall: the steps' times summed, or without steps the
    analysed stretches' time, ``common.stretches_ns``: the trace's span, its device
    activity's with ``--span device``, a time window's recorded time, with the FLOPs of
    the framework ops that start in it and of the device ops that run in it, a device op
    cut by its edges for the share of it inside, as "Device time" counts its time),
    ``flops_per_s`` (achieved), ``precision`` (assumed: ``precision`` if given, else the
    one most of the FLOPs it counts were in: :func:`main_precision`), ``devices`` (device planes with activity, at least 1),
    ``peak_flops_per_s`` (per device), ``mfu_pct`` (NaN without a peak: a CPU run, an
    unknown device), ``device`` (the peaks' model and their source; a device not recognised, its name and why),
    ``uncounted_replay_pct`` (the whole window's row; NaN in the steps'): the percent of
    kernel time in replays of CUDA/HIP graphs captured before the trace, whose FLOPs are
    not counted (:func:`uncounted_replays`), so that ``mfu_pct`` is a floor where it is
    large; 0 without such replays. Empty without model FLOPs, unless such replays ran:
    then rows of no FLOPs, ``mfu_pct`` NaN (unknown, not 0), and their share.
    """
    rows, flops, prec = model_rows(trace)
    uncounted = uncounted_replays(trace)
    cols = ["step", "flops", "time_ns", "flops_per_s", "precision", "devices", "peak_flops_per_s", "mfu_pct",
            "device", "uncounted_replay_pct"]
    if not len(rows) and not uncounted > 0:
        return empty_frame(cols, ("precision", "device"), np.float64)
    steps = cache.steps(trace)
    step_idx = _step_of(trace, rows)
    if not len(rows):  # only replays whose FLOPs are unknown: no precision, no peak to hold them to
        precision = ""
    elif precision is None:
        precision = main_precision(flops_by_precision(flops, prec, step_idx >= 0 if len(steps) else
                                                      _model_in_window(trace, rows)))
    pk = resolve_peak(trace, peak) if len(rows) else None
    busy = unique(trace.event_planes()[trace.rows_of_kind(*DEVICE_ACTIVITY)])  # (not a plane of host
    devices = max(1, sum(1 for p in trace.planes if p.kind == "device" and p.id in busy))  # events alone)
    if len(steps):
        per = np.bincount(step_idx[step_idx >= 0], weights=flops[step_idx >= 0], minlength=len(steps))
        span = step_times(trace, steps)
        step_no = np.r_[-1, steps.number]
        f_all = np.r_[per.sum(), per]
        t_all = np.r_[span.sum(), span]
    else:  # the analysed span: the trace's, or with --span device its first to last device activity;
        # a time window's: the framework ops that start in it, the device ops running in it (cut
        # by its edges: their FLOPs' share inside), over its stretches' time (not what is between
        # them: not recorded)
        inside = _model_in_window(trace, rows)
        share, _ = _window_parts(trace, rows, ~member(rows, trace.rows_of_kind(Kind.CPU_OP)), np.zeros(len(rows)))
        step_no, f_all = np.array([-1]), np.array([(flops * share)[inside].sum()])
        t_all = np.array([float(stretches_ns(trace))])
    return mfu_frame(step_no, f_all, t_all, precision, devices, pk, uncounted)


def mfu_frame(step: np.ndarray, flops: np.ndarray, time_ns: np.ndarray, precision: str, devices: int,
              pk: Peak | None, uncounted_pct: float = np.nan) -> Table:
    """The ``mfu`` table of these steps' FLOPs and times (step -1: the whole, which alone
    gets ``uncounted_pct``, the percent of kernel time in uncounted graph replays)."""
    peak_f = pk.flops(precision) if pk else 0.0
    flops = np.asarray(flops, np.float64)  # (bincount's sum of no rows is an integer 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        fps = flops / time_ns * 1e9
        pct = 100.0 * fps / (peak_f * devices) if peak_f else np.full(len(fps), np.nan)
    n = len(step)
    return frame({
        "step": np.asarray(step).astype(np.int64), "flops": flops, "time_ns": time_ns, "flops_per_s": fps,
        "precision": np.full(n, precision, object), "devices": np.full(n, devices, np.int64),
        "peak_flops_per_s": np.full(n, peak_f if peak_f else np.nan), "mfu_pct": pct,
        "device": np.full(n, f"{pk.model} ({pk.source})" if pk else "", object),
        "uncounted_replay_pct": np.where(np.asarray(step) == -1, float(uncounted_pct), np.nan)})


def step_times(trace: Trace, steps: "Steps") -> np.ndarray:
    """Each step's time (ns, float): its span, or, where longer, the span of the device
    activity launched in it (activity without a launch: that started in it), from the
    first's start to the last's end. A host that runs ahead of its device, as in a short
    profile without a sync, marks its steps in a fraction of the time their device work
    takes (an MI300X trace: 841 µs of steps, 30 ms of convolutions after them), and
    timing the FLOPs by the marks alone made the MFU 36 times too high. In a steady state
    the device's work of a step takes the step's period or less, so the span holds."""
    span = (steps.end - steps.start).astype(np.float64)
    corr = cache.correlation(trace)
    dev = corr.device_rows
    if not len(dev):
        return span
    start, end = trace.start_ns, trace.end_ns
    at = np.where(corr.launch >= 0, start[np.maximum(corr.launch, 0)], start[dev])
    k = steps.of(at)
    ok = k >= 0
    first = np.full(len(steps), np.iinfo(np.int64).max, np.int64)
    last = np.full(len(steps), np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, k[ok], start[dev[ok]])
    np.maximum.at(last, k[ok], end[dev[ok]])
    # (a step's device work counts up to the next step's first: overlapping work is the later step's)
    later = np.r_[np.minimum.accumulate(first[::-1])[::-1][1:], np.iinfo(np.int64).max]  # later steps' first
    last = np.minimum(last, np.maximum(later, steps.end))
    device = np.where(last > first, last - first, 0).astype(np.float64)
    return np.maximum(span, device)

