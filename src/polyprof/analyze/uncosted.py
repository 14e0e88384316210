"""Matrix kernels whose FLOPs the model FLOPs leave out.

The MFU counts the FLOPs of the framework ops it can cost (``efficiency.costed_rows``).
An op a rule covers but whose arguments the trace lacks has none: torch before 2.0
recorded a convolution's input shapes but not its stride and padding, so tb_plugin's
2021 ResNet-50 samples count their elementwise ops alone (7.35 GFLOP in 873 ms: "MFU
0.0536%") while most of their compute time is in cuDNN's convolution kernels. The share
of compute time in such kernels tells that the MFU is a floor there, not a measure.
"""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..derive.intervals import innermost
from ..trace.core import Trace
from ..trace.sorting import member
from .common import COMPUTE, device_view, matrix_names
from .efficiency import model_rows


def uncosted_matrix_pct(trace: Trace) -> float:
    """The share (percent) of the window's device compute time in matrix-library kernels
    (:data:`~polyprof.trace.categories.MATRIX_KERNEL`: GEMMs, convolutions) that carry no
    FLOPs of their own and whose launch is in no framework op (or graph launch) with FLOPs
    counted (``efficiency.model_rows``); 0 without compute kernels. Computed once per
    trace."""
    return float(cache.memo(trace, "uncosted_matrix_pct", _pct))


def _pct(trace: Trace) -> float:
    v = device_view(trace)
    c = v.counted & (v.cls == COMPUTE)
    rows, dur, launch = v.rows[c], (v.end - v.start)[c], v.launch[c]
    total = float(dur.sum())
    if not total > 0:
        return 0.0
    ev = trace.events
    lib = matrix_names(trace, ev["name"][rows])
    if not lib.any():
        return 0.0
    model, flops, _ = model_rows(trace)  # the framework ops, graph replays or device ops the MFU counts
    model = model[flops > 0]
    host = np.array([p.kind == "host" for p in trace.planes], bool)[trace.track_plane[ev["track"][model]]]
    lib &= ~member(rows, model[~host])  # a device op with its own FLOPs (XLA's)
    ops = model[host]
    at = np.flatnonzero(lib & (launch >= 0))
    if len(ops) and len(at):  # a launch inside a counted op, on the op's thread: its FLOPs hold the kernel's
        th = cache.threads(trace)
        st = ev["start_ns"][ops]
        hit = innermost(th[ev["track"][ops]], st, st + np.maximum(ev["dur_ns"][ops], 1),
                        th[ev["track"][launch[at]]], ev["start_ns"][launch[at]])
        lib[at[hit >= 0]] = False
    return 100.0 * float(dur[lib].sum()) / total
