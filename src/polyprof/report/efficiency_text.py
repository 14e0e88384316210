"""The terminal summary's line on model FLOPs utilisation (the ``mfu`` table's overall
row): the FLOPs, time and rate, and the share of the peak; where no peak is known (a
CPU, an unrecognised device, a precision without a figure) it says so and how to give
one (``--peak``), rather than leave the utilisation out without a word."""

from __future__ import annotations

import numpy as np

from ..analyze.efficiency import range_profiled, uncounted_of
from ..analyze.common import matrix_kernel_pct, on_device
from ..analyze.frames import column
from ..analyze.peaks import BY_HAND, UNRECOGNISED
from ..analyze.uncosted import uncosted_matrix_pct
from ..analyze.units import fmt_ns, fmt_share, fmt_si
from ..trace import keys
from ..trace.core import Trace
from .tables import Report
from .textout import Para


def mfu_line(report: Report) -> Para | None:
    """``MFU 0.88% (tf32): 4.72 GFLOP in 1.08 ms, 4.37 TFLOP/s of 495 TFLOP/s peak``; None
    for a trace without FLOPs. Without a peak: ``MFU unknown (fp32): ...; no fp32 peak
    known for this CPU: give one with --peak fp32=<FLOP/s>``, naming the device and why
    where its name is in no entry of the peaks table or fits several alike. Past 100%
    it says that the peak or the FLOPs cannot be right."""
    m = report.tables.get("mfu")
    flops = float(column(m, "flops")[0]) if m is not None and len(m) else 0.0
    if not flops > 0:
        return _no_shapes(report.trace) or _all_replays(uncounted_of(m)) or _matrix_uncounted(report.trace)
    pct, prec = float(column(m, "mfu_pct")[0]), str(column(m, "precision")[0])
    t_ns, rate = float(column(m, "time_ns")[0]), float(column(m, "flops_per_s")[0])
    peak, devices = float(column(m, "peak_flops_per_s")[0]), int(column(m, "devices")[0])
    done = f"{fmt_si(flops, 'FLOP')} in {fmt_ns(t_ns)}, {fmt_si(rate, 'FLOP/s')}"
    p = f" ({prec})" if prec else ""
    words = uncounted_words(flops, uncounted_of(m), uncosted(report.trace))
    unknown = f"; {words}" if words else ""
    if report.trace.n_events and range_profiled(report.trace):
        unknown += ("; timed under CUPTI's range profiler, which replays each kernel range to read its counters: "
                    "the time is the profiler's, not the program's")
    model, _, source = str(column(m, "device")[0]).partition(" (")
    if np.isfinite(pct):
        per = f" x {devices} devices" if devices > 1 else ""
        if pct > 100:
            whose = "given" if model == BY_HAND else f"({model}'s)"
            unknown += (f"; past 100%: the peaks {whose} or the FLOPs counted cannot be right (a device the "
                        "trace names wrongly? give its peaks with --peak)")
        return Para((("MFU", "bold"), (f" {fmt_share(pct)}%{p}: {done} of {fmt_si(peak, 'FLOP/s')} peak{per}{unknown}",
                                       None)))
    key = prec or "fp32"
    source = source[:-1] if source.endswith(")") else source
    if model == BY_HAND:  # --peak named other precisions only
        what = f"(--peak gave {source.split('given: ', 1)[-1]} only)"
    elif source.startswith(UNRECOGNISED):
        what = f"for {model} ({source[len(UNRECOGNISED):]})"
    elif model:
        what = f"for {model}"
    else:
        what = f"for this {'device' if on_device(report.trace) else 'CPU'}"
    return Para((("MFU", "bold"), (f" unknown{p}: {done}; no {key} peak known {what}: give one with "
                                   f"--peak {key}=<FLOP/s>", None)))


#: torch ops whose FLOPs come from their input shapes (``analyze/flops.py``)
_SHAPED = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm",
           "aten::convolution", "aten::_convolution", "aten::conv2d", "aten::scaled_dot_product_attention")


def uncosted(trace: Trace) -> float:
    """``uncosted.uncosted_matrix_pct`` of a trace with events (0 for a rank's merged report)."""
    return uncosted_matrix_pct(trace) if trace.n_events else 0.0


def uncounted_words(flops: float, pct: float, matrix_pct: float = 0.0) -> str | None:
    """What the MFU line says of the ``pct`` of kernel time in graph replays whose FLOPs
    are not counted (``mfu``'s ``uncounted_replay_pct``), the HTML report's overview too:
    with FLOPs counted, from 1% (the MFU is then a floor); without, from 50% (why the
    MFU is unknown); else None. With FLOPs counted and no such replays, the
    ``matrix_pct`` of compute time in matrix kernels whose ops' FLOPs are unknown
    (``analyze/uncosted.py``), from 5%, makes the MFU a floor too."""
    if flops > 0 and not pct >= 1 and matrix_pct >= 5:
        return (f"{matrix_pct:.0f}% of compute time ran in matrix kernels (GEMM, convolution) whose FLOPs it "
                "cannot count (their ops were recorded without the arguments the FLOPs need, as torch before 2.0 "
                "recorded a convolution's): the MFU is a floor")
    if not pct >= (1 if flops > 0 else 50):
        return None
    said = (f"{pct:.0f}% of kernel time ran in CUDA/HIP graph replays captured before the trace, "
            "whose FLOPs it cannot count")
    return said if flops > 0 else (said + " (a profile that records the first calls, where the graphs are "
                                   "captured, counts them)")


def _all_replays(pct: float) -> Para | None:
    """``MFU unknown: N% of kernel time ran in ... graph replays ...`` for a trace that
    counts no FLOPs while most (``pct``) of its kernel time is in replays of graphs
    captured before it (torch.compile's reduce-overhead mode profiled after its first
    calls); else None."""
    words = uncounted_words(0.0, pct)
    return Para((("MFU", "bold"), (f" unknown: {words}", None))) if words else None


def _no_shapes(trace: Trace) -> Para | None:
    """``MFU unknown: ...`` for a torch trace whose matrix ops carry no input shapes (the
    FLOPs need them), saying how to record them; None otherwise."""
    if not trace.n_events or trace.stats.may_have(keys.INPUT_DIMS) or all(trace.string_id(s) < 0 for s in _SHAPED):
        return None
    return Para((("MFU", "bold"), (" unknown: the ops carry no input shapes, which their FLOPs are counted from "
                                   "(torch.profiler's record_shapes=True; under polyprof run: --plugin-options "
                                   "'{\"torch\": {\"record_shapes\": true}}')", None)))


def _matrix_uncounted(trace: Trace) -> Para | None:
    """``MFU unknown: N% of kernel time ran in matrix kernels ...`` for a device trace
    that counts no FLOPs while at least 5% of its compute kernel time is in GEMM or
    convolution kernels (a kernel-only trace: Nsight Systems, rocprofv3; a torch trace
    whose matrix ops polyprof counts no FLOPs for); None otherwise."""
    if not trace.n_events or not on_device(trace):
        return None
    pct = matrix_kernel_pct(trace)
    if not pct >= 5:
        return None
    return Para((("MFU", "bold"), (f" unknown: {pct:.0f}% of kernel time ran in matrix kernels (GEMM, "
                                   "convolution), but the trace counts no FLOPs for them: no framework op with "
                                   "input shapes polyprof counts, no XLA cost analysis, no FLOP counters", None)))
