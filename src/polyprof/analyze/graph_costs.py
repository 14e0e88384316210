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
  (``kernel_roofline.kernel_costs``, ``kernel_efficiency``): the op that launched it, or for a
  replayed kernel the captured op, shared within its replay;
- :func:`replayed_calls`: each captured op's device time per replay
  (``efficiency.op_efficiency`` counts a call of it per replay);
- :func:`uncounted_share`: the share of device time in replays of graphs captured
  before the trace (their ops' FLOPs unknown), which MFU cannot count.

A window of a rank read window by window (``ranks/stepwise.py``) may replay graphs an
earlier window captured: their captures come by value (``cuda_graphs.Captures``, with
the costs :func:`carry_out` adds to them), and :func:`replayed_flops` and
:func:`uncounted_ns` count their replays as the rank read whole does;
:func:`carried_replays` gives the rest (the kernels' and ops' figures) to the merge.
"""

from __future__ import annotations

import numpy as np

from typing import TYPE_CHECKING

from ..derive import cache
from ..derive.graph_recording import CAPTURE_BEGIN
from ..trace.categories import Kind
from ..derive.intervals import innermost
from ..trace.core import Trace
from ..trace.sorting import first_and_inverse, member, unique_inverse, unique_rows
from . import inputs
from .common import device_view
from .flops import op_costs
from .nesting import outermost

if TYPE_CHECKING:
    from .cuda_graphs import Captures, ReplayedOps, Replays

#: ``cuda_graphs.CARRIED`` (not imported: a summary without graphs does not import that module)
_CARRIED = "carried_captures"


def _has_captures(trace: Trace) -> bool:
    """Whether ``trace`` captured a graph itself or was given the captures of earlier windows."""
    return bool(len(trace.rows_named(*CAPTURE_BEGIN))) or _CARRIED in trace.__dict__.get("_polyprof_memo", {})


def _mapped(trace: Trace) -> tuple[ReplayedOps, Replays] | None:
    """The replays of graphs ``trace`` captured itself (or an earlier window did), mapped
    to their captured launches (``cuda_graphs.self_captured``); None where it captured none."""
    if not _has_captures(trace):
        return None
    from . import cuda_graphs  # only for a trace that captured a graph: a summary without one skips it

    mapped = cuda_graphs.self_captured(trace)
    return None if mapped is None else (mapped, cuda_graphs.replays(trace))


def replayed_flops(trace: Trace, rows: np.ndarray, flops: np.ndarray, prec: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(graph launch rows, flops, precision): the FLOPs each replay in the analysed window
    ran, from the costed host ops ``rows`` (with their ``flops`` and ``prec``) the graph's
    launches were captured in: per replay, each outermost one whose captured launches it
    replayed, once (of a capture carried from an earlier window: its ``outer`` ops').
    Empty where the trace captured no graph it replays."""
    empty = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, object))
    got = _mapped(trace)
    if got is None:
        return empty
    mapped, r = got
    parts = [_carried_flops(trace, mapped, r)]
    ok = mapped.launch >= 0
    if len(rows) and ok.any():
        at = mapped.launch[ok]
        inner = _outer(trace, rows, at)
        pairs = unique_rows(r.replay[ok][inner >= 0], inner[inner >= 0])[0]
        parts.insert(0, (r.launch[pairs[:, 0]], flops[pairs[:, 1]], prec[pairs[:, 1]]))
    parts = [p for p in parts if len(p[0])]
    if len(parts) < 2:
        return parts[0] if parts else empty
    return tuple(np.concatenate(c) for c in zip(*parts))  # type: ignore[return-value]


def _outer(trace: Trace, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per launch ``at``, the outermost of the ops ``rows`` around it (a position in
    ``rows``; -1: none)."""
    outer = outermost(trace, rows)
    ev, th = trace.events, cache.threads(trace)
    s = np.asarray(ev["start_ns"], np.int64)
    e = s + np.asarray(ev["dur_ns"], np.int64)
    o = rows[outer]
    inner = innermost(th[ev["track"][o]], s[o], e[o], th[ev["track"][at]], s[at])
    return np.where(inner >= 0, np.flatnonzero(outer)[np.maximum(inner, 0)] if len(o) else -1, -1)


def _carried_flops(trace: Trace, mapped: ReplayedOps, r: Replays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`replayed_flops` of the replays mapped to captures carried from earlier windows."""
    c = mapped.carried >= 0
    if not c.any():
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, object)
    from .cuda_graphs import carried  # (as _mapped: only for a trace given captures)

    caps = carried(trace)
    assert caps is not None
    outer = caps.outer[mapped.carried[c]]
    has = outer >= 0
    pairs = unique_rows(r.replay[c][has], outer[has])[0]
    return r.launch[pairs[:, 0]], caps.outer_flops[pairs[:, 1]], caps.outer_precision[pairs[:, 1]]


def kernel_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(op, replay) per ``Correlation.device_rows`` (:func:`_kernel_ops`), once per trace
    and window."""
    return cache.memo(trace, "kernel_ops", _kernel_ops)


def _kernel_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(op, replay) per ``Correlation.device_rows``: the framework op whose FLOPs and bytes
    a kernel shares (``Correlation.op``: the innermost op that launched it; for a kernel a
    graph replayed, the op its captured launch was made in, -1 where an earlier window
    made it: :func:`carried_replays`) and the replay it ran in (-1: none), so an op's
    figures are shared among its kernels of one replay."""
    corr = cache.correlation(trace)
    ops = corr.op.copy()
    replay = np.full(len(ops), -1, np.int64)
    got = _mapped(trace)
    if got is None:
        return ops, replay
    mapped, r = got
    ok = (mapped.op >= 0) | (mapped.carried >= 0)  # an earlier window's capture: its figures come by value
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
    blind = r.rows if mapped is None else r.rows[(mapped.launch < 0) & (mapped.carried < 0)]
    blind = blind[~member(blind, own)] if len(own) else blind  # a kernel with its own FLOPs counts (XLA's)
    blind = blind[trace.kinds[blind] == Kind.KERNEL]
    return float(dur[blind].sum()), total


def carry_out(trace: Trace, rows: np.ndarray, flops: np.ndarray, prec: np.ndarray) -> Captures:
    """What the windows after ``trace`` (a window) need of the graphs captured so far
    (``cuda_graphs.captures_after``), with the costs of its own captures: each launch's
    op's figures (``flops.op_costs``) and the outermost of the costed host ops ``rows``
    around it with its ``flops`` and ``prec`` (as ``efficiency.model_rows`` gives them to
    :func:`replayed_flops`)."""
    from . import cuda_graphs  # (as _mapped: only for a rank read window by window)

    caps = cuda_graphs.captures_after(trace)
    m = cuda_graphs.matched(trace)
    k = len(m.rows)
    if not k:
        return caps
    n = len(caps.at) - k
    have = m.ops >= 0
    u, inv = unique_inverse(m.ops[have])
    c = op_costs(trace, u)
    figures = []
    for whole, nan in ((c.flops, np.nan), (c.bytes, np.nan), (c.precision, ""), (c.source, 0)):
        out = np.full(k, nan, whole.dtype)
        out[have] = whole[inv]
        figures.append(out)
    pos = _outer(trace, rows, m.rows) if len(rows) else np.full(k, -1, np.int64)
    first, at = first_and_inverse(pos)
    outer = np.where(pos >= 0, n + first[at], -1)
    own = (*figures, outer, np.where(pos >= 0, flops[np.maximum(pos, 0)] if len(rows) else np.nan, np.nan),
           np.where(pos >= 0, prec[np.maximum(pos, 0)] if len(rows) else "", "").astype(object))
    fields = ("flops", "bytes", "precision", "source", "outer", "outer_flops", "outer_precision")
    joined = {f: np.concatenate([getattr(caps, f)[:n], v]) for f, v in zip(fields, own)}
    return cuda_graphs.Captures._make([joined.get(f, getattr(caps, f)) for f in caps._fields])


def carried_replays(trace: Trace) -> tuple[Captures, np.ndarray, np.ndarray, np.ndarray] | None:
    """(captures, rows, replay, launch) of the replayed activities of the analysed window
    mapped to a capture carried from an earlier window (``launch``: its index in the
    captures), whose ops' figures ``kernel_ops`` and ``replayed_calls`` leave out (the
    ops are not rows of this trace); None where there are none."""
    got = _mapped(trace)
    if got is None:
        return None
    mapped, r = got
    c = mapped.carried >= 0
    if not c.any():
        return None
    from .cuda_graphs import carried  # (as _mapped)

    caps = carried(trace)
    assert caps is not None
    return caps, r.rows[c], r.replay[c], mapped.carried[c]
