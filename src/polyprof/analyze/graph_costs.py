"""What the replays of a CUDA graph captured in the trace itself cost: the FLOPs and bytes
of the ops captured into it, counted at each replay.

A graph's launches are made once, while it is captured (``torch.compile(mode=
"reduce-overhead")`` captures in its first calls), by framework ops that then launched
nothing; each replay runs their kernels again under the graph launch's correlation id.
:func:`analyze.cuda_graphs.self_captured` maps each replayed kernel to the captured
launch it repeats and the op around that launch. Here:

- :func:`replayed_flops`: the model FLOPs of each replay (``efficiency.mfu``): per replay,
  once, each outermost costed op whose captured launches it replayed;
- :func:`kernel_ops`: per device activity, the op whose figures its kernel shares
  (``efficiency.kernel_costs``, ``kernel_efficiency``): the op that launched it, or for a
  replayed kernel the captured op, shared within its replay;
- :func:`replayed_calls`: each captured op's device time per replay
  (``efficiency.op_efficiency`` counts a call of it per replay);
- :func:`uncounted_share`: the share of device time in replays of graphs captured
  before the trace (their ops' FLOPs unknown), which MFU cannot count.
"""

from __future__ import annotations

import numpy as np

from typing import TYPE_CHECKING

from ..derive import cache
from ..derive.graph_recording import CAPTURE_BEGIN
from ..trace.categories import Kind
from ..derive.intervals import innermost
from ..trace.core import Trace
from ..trace.sorting import find, member, unique_rows
from . import inputs
from .common import device_view
from .nesting import outermost

if TYPE_CHECKING:
    from .cuda_graphs import ReplayedOps, Replays


def _mapped(trace: Trace) -> tuple[ReplayedOps, Replays] | None:
    """The replays of graphs ``trace`` captured itself, mapped to their captured launches
    (``cuda_graphs.self_captured``); None where it captured none."""
    if not len(trace.rows_named(*CAPTURE_BEGIN)):
        return None
    from . import cuda_graphs  # only for a trace that captured a graph: a summary without one skips it

    mapped = cuda_graphs.self_captured(trace)
    return None if mapped is None else (mapped, cuda_graphs.replays(trace))


def replayed_flops(trace: Trace, rows: np.ndarray, flops: np.ndarray, prec: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(graph launch rows, flops, precision): the FLOPs each replay in the analysed window
    ran, from the costed host ops ``rows`` (with their ``flops`` and ``prec``) the graph's
    launches were captured in: per replay, each outermost one whose captured launches it
    replayed, once. Empty where the trace captured no graph it replays."""
    empty = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, object))
    got = _mapped(trace) if len(rows) else None
    if got is None or not (got[0].launch >= 0).any():
        return empty
    mapped, r = got
    ok = mapped.launch >= 0
    outer = rows[outermost(trace, rows)]
    ev, th = trace.events, cache.threads(trace)
    s = np.asarray(ev["start_ns"], np.int64)
    e = s + np.asarray(ev["dur_ns"], np.int64)
    at = mapped.launch[ok]
    inner = innermost(th[ev["track"][outer]], s[outer], e[outer], th[ev["track"][at]], s[at])
    pairs = unique_rows(r.replay[ok][inner >= 0], inner[inner >= 0])[0]
    src = find(rows, outer[pairs[:, 1]])
    return r.launch[pairs[:, 0]], flops[src], prec[src]


def kernel_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(op, replay) per ``Correlation.device_rows`` (:func:`_kernel_ops`), once per trace
    and window."""
    return cache.memo(trace, "kernel_ops", _kernel_ops)


def _kernel_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(op, replay) per ``Correlation.device_rows``: the framework op whose FLOPs and bytes
    a kernel shares (``Correlation.op``: the innermost op that launched it; for a kernel a
    graph replayed, the op its captured launch was made in) and the replay it ran in (-1:
    none), so an op's figures are shared among its kernels of one replay."""
    corr = cache.correlation(trace)
    ops = corr.op.copy()
    replay = np.full(len(ops), -1, np.int64)
    got = _mapped(trace)
    if got is None:
        return ops, replay
    mapped, r = got
    ok = mapped.op >= 0
    pos = np.searchsorted(corr.device_rows, r.rows[ok])
    ops[pos], replay[pos] = mapped.op[ok], r.replay[ok]
    return ops, replay


def replayed_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(op row, device ns) per replay in the analysed window and op captured into its
    graph (the innermost op around a captured launch): the device time that op's
    replayed activities ran in that replay. Empty where the trace captured none."""
    got = _mapped(trace)
    if got is None:
        return np.zeros(0, np.int64), np.zeros(0)
    mapped, r = got
    ok = mapped.op >= 0
    if not ok.any():
        return np.zeros(0, np.int64), np.zeros(0)
    pairs, _, inv = unique_rows(r.replay[ok], mapped.op[ok])
    ns = np.bincount(inv, weights=trace.events["dur_ns"][r.rows[ok]].astype(np.float64), minlength=len(pairs))
    return pairs[:, 1], ns


def uncounted_share(trace: Trace, own: np.ndarray) -> float:
    """Percent of the analysed window's kernel time that graph replays ran without a
    captured op in the trace (a graph captured before the profile started, as
    ``torch.compile`` does in its first calls) nor FLOPs of their own (XLA's command
    buffers' kernels have theirs: ``own``, the device rows with their own FLOPs): their
    FLOPs are unknown to ``mfu`` (``efficiency.uncounted_replays``)."""
    if not inputs.graph_launches(trace):
        return 0.0
    blind, total = uncounted_ns(trace, own)
    return 100.0 * blind / total if total > 0 else 0.0


def uncounted_ns(trace: Trace, own: np.ndarray) -> tuple[float, float]:
    """The parts of :func:`uncounted_share`: (kernel ns in those replays, the window's
    kernel ns), which a rank read window by window adds up."""
    dv = device_view(trace)
    counted = dv.rows[dv.counted & (trace.kinds[dv.rows] == Kind.KERNEL)]
    dur = trace.events["dur_ns"]
    total = float(dur[counted].sum())
    if not inputs.graph_launches(trace):
        return 0.0, total
    from . import cuda_graphs  # only for a trace with graph launches (as _mapped)

    r = cuda_graphs.replays(trace)
    if not len(r.rows):
        return 0.0, total
    mapped = cuda_graphs.self_captured(trace)
    blind = r.rows if mapped is None else r.rows[mapped.launch < 0]
    blind = blind[~member(blind, own)] if len(own) else blind  # a kernel with its own FLOPs counts (XLA's)
    blind = blind[trace.kinds[blind] == Kind.KERNEL]
    return float(dur[blind].sum()), total
