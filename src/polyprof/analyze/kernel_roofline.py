"""Per-kernel efficiency: each kernel's FLOPs and bytes (its own figure, its XLA op's from
the file's HLO, or its launching op's shared among that op's kernels: :func:`kernel_costs`)
and ``kernel_efficiency``, their achieved rates against the device's roofline, per kernel
name (the ops' table and MFU: :mod:`analyze.efficiency`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np

from ..derive import cache
from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import find, unique, unique_inverse, unique_rows
from . import graph_costs
from .common import device_view, qualified_names
from .efficiency import _roof_share, _window_parts, resolve_peak
from .flops import hlo_costs, op_costs
from .frames import empty_frame, frame, order_desc
from .grouping import group_reduce, group_stats

if TYPE_CHECKING:
    from .table import Table


#: kernel-name marks of tensor-core (matrix-unit) code: NVIDIA's HMMA/WGMMA GEMMs and
#: convolutions (cuBLAS/cuDNN/CUTLASS names), AMD's MFMA (rocBLAS/hipBLASLt ``_MI`` tiles)
TENSOR_CORE_MARKS = ("tensorop", "xmma", "hmma", "wgmma", "wmma", "gmma", "_mma", "mfma", "16816", "1688",
                     "_mi16x16", "_mi32x32", "flash_fwd", "flash_bwd", "fmha", "nvjet")
#: marks of CUDA-core (SIMT) code that wins over those: cuBLAS's fp32 ``sm80_xmma_gemm_..._ffma``
#: runs on the xmma framework without tensor cores (an H200's fp32 products: 51 TFLOP/s)
SIMT_MARKS = ("ffma", "simt")


def kernel_costs(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device rows ascending, flops, bytes) of kernels: a kernel's own ``flops`` stat, else
    its launching framework op's (the innermost, ``Correlation.op``) figures shared among
    the kernels that op launched in proportion to their durations (one kernel: the lot);
    a kernel whose XLA op the file's HLO costs counts by that, in an op or not (XLA's
    runtime launches it on its own thread where it runs a program asynchronously)."""
    corr = cache.correlation(trace)
    kinds = trace.kinds[corr.device_rows] if len(corr.device_rows) else np.zeros(0, np.int8)
    kernel = kinds == Kind.KERNEL
    hc = hlo_costs(trace)  # a kernel's XLA op costed from the file's HLO (launched in an op or not)
    in_hlo = np.zeros(len(kernel), bool)
    if len(hc.rows):
        in_hlo[kernel] = find(hc.rows, corr.device_rows[kernel]) >= 0
    all_ops, all_replays = graph_costs.kernel_ops(trace)  # a replayed kernel: its captured op
    sel = np.flatnonzero(kernel & ((all_ops >= 0) | in_hlo))
    rows, ops, replay = corr.device_rows[sel], all_ops[sel], all_replays[sel]
    flops, nbytes = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    with_op = np.flatnonzero(ops >= 0)
    groups, first, inv = unique_rows(ops[with_op], replay[with_op])  # an op's kernels (of one replay)
    uops, of_op = unique_inverse(groups[:, 0]) if len(groups) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    c = op_costs(trace, uops)
    dur = trace.events["dur_ns"][rows[with_op]].astype(np.float64)
    total = np.bincount(inv, weights=dur, minlength=len(groups))
    count = np.bincount(inv, minlength=len(groups)).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total[inv] > 0, dur / total[inv], 1.0 / np.maximum(count[inv], 1))
    flops[with_op], nbytes[with_op] = c.flops[of_op][inv] * share, c.bytes[of_op][inv] * share
    if len(hc.rows):
        pos = find(hc.rows, rows)
        hit = pos >= 0
        flops[hit], nbytes[hit] = hc.flops[pos[hit]], hc.bytes[pos[hit]]
    own = trace.stats.get(keys.FLOPS)
    if own is not None and len(own):  # a kernel's own figure first
        has, vals = own.lookup(rows)
        flops[has] = np.asarray(vals, np.float64)
    keep = ~np.isnan(flops) | ~np.isnan(nbytes)
    return rows[keep], flops[keep], nbytes[keep]


def counted_kernel_costs(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`kernel_costs` of the kernels the analysed window counts (launched in its
    steps; a time window's: running in it), each for its part inside where a time
    window's edges cut it (:func:`_counted`): what ``kernel_efficiency`` sums."""
    rows, flops, nbytes, _ = _counted(trace)
    return rows, flops, nbytes


def _counted(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, flops, bytes, device ns) of the costed kernels the analysed window counts.
    A kernel a time window's edges cut counts its part inside, as "Device time", "Top
    device activity", ``op_efficiency`` and ``mfu`` count it (``efficiency._window_parts``):
    its device time that part, its FLOPs and bytes in proportion, so its rates stay its
    own; every other kernel whole."""
    rows, flops, nbytes = kernel_costs(trace)
    keep = device_view(trace).counted[np.searchsorted(cache.correlation(trace).device_rows, rows)]
    rows, flops, nbytes = rows[keep], flops[keep], nbytes[keep]
    share, dur = _window_parts(trace, rows, np.ones(len(rows), bool), trace.events["dur_ns"][rows].astype(np.float64))
    return rows, flops * share, nbytes * share, dur


def launch_precisions(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per device row, the precision of the framework op that launched it ("" where none
    is known): what its roofline share is measured at."""
    corr = cache.correlation(trace)
    op_rows = graph_costs.kernel_ops(trace)[0][np.searchsorted(corr.device_rows, rows)]
    uops = unique(op_rows[op_rows >= 0])
    prec = np.full(len(rows), "", object)
    if len(uops):
        prec[op_rows >= 0] = op_costs(trace, uops).precision[np.searchsorted(uops, op_rows[op_rows >= 0])]
    return prec


def kernel_efficiency(trace: Trace, peak: str | Mapping[str, float] | None = None) -> Table:
    """One row per kernel name with a FLOP or byte figure (:func:`kernel_costs`), of the
    kernels the analysed window counts (launched in its steps; a time window's: running
    in it, each for its part inside where its edges cut it: :func:`_counted`).

    Columns: ``name`` (``module/kernel`` for a kernel of a known XLA module, as
    ``kernel_breakdown`` names it), ``module`` ("" for none), ``count``, ``flops``, ``bytes``,
    ``device_ns``, ``flops_per_s``, ``bytes_per_s``, ``intensity``, ``roofline_pct`` and ``bound_by`` (as
    ``op_efficiency``, at the precision of the launching op), ``op`` (the framework op
    of the first launch), ``tensor_core`` (the name is one of a tensor-core / matrix-unit
    kernel: :data:`TENSOR_CORE_MARKS`, none of :data:`SIMT_MARKS`). Sorted by ``device_ns``.
    """
    cols = ["name", "module", "count", "flops", "bytes", "device_ns", "flops_per_s", "bytes_per_s", "intensity",
            "roofline_pct", "bound_by", "op", "tensor_core"]
    rows, flops, nbytes, dur = _counted(trace)
    if not len(rows):
        return empty_frame(cols, ("name", "module", "bound_by", "op"), np.float64)
    corr = cache.correlation(trace)
    op_rows = graph_costs.kernel_ops(trace)[0][np.searchsorted(corr.device_rows, rows)]  # -1: XLA's, outside ops
    prec = launch_precisions(trace, rows)
    codes, labels, modules = qualified_names(trace, rows)  # an XLA kernel: a row of its module, as kernel_breakdown's
    g = group_stats(codes, dur)
    o, s = g["order"], g["starts"]
    first = o[s]
    f = group_reduce(o, s, np.nan_to_num(flops), np.add)
    b = group_reduce(o, s, np.nan_to_num(nbytes), np.add)
    f = np.where(group_reduce(o, s, (~np.isnan(flops)).astype(np.int64), np.add) > 0, f, np.nan)
    b = np.where(group_reduce(o, s, (~np.isnan(nbytes)).astype(np.int64), np.add) > 0, b, np.nan)
    t = g["total"].astype(np.float64)
    pk = resolve_peak(trace, peak)
    names = labels[g["key"]]
    with np.errstate(divide="ignore", invalid="ignore"):
        fps, bps, inten = f / t * 1e9, b / t * 1e9, f / b
        peak_f = pk.flops_each(prec[first]) if pk else np.zeros(len(first))
        bw = pk.bandwidth if pk else 0.0
        pct = _roof_share(fps, bps, inten, peak_f, bw, (peak_f > 0) & np.isfinite(fps))
        ridge = peak_f / bw if bw else np.full(len(peak_f), np.nan)
        bound = np.where(~np.isfinite(inten) | np.isnan(ridge) | (peak_f <= 0), "",
                         np.where(inten >= ridge, "compute", "memory")).astype(object)
    low = [n.lower() for n in trace.names(rows[first]).tolist()]  # (the kernel's own name, not its module's)
    return frame({
        "name": names, "module": modules[g["key"]], "count": g["count"], "flops": f, "bytes": b, "device_ns": t, "flops_per_s": fps,
        "bytes_per_s": bps, "intensity": inten, "roofline_pct": pct, "bound_by": bound,
        "op": np.where(op_rows[first] >= 0, trace.names(np.maximum(op_rows[first], 0)), "").astype(object)
        if len(first) else np.zeros(0, object),
        "tensor_core": np.array([any(m in n for m in TENSOR_CORE_MARKS) and not any(m in n for m in SIMT_MARKS)
                                 for n in low], bool)},
        order=order_desc(t))
