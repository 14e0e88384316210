"""Host calls that record work into a CUDA (or HIP) graph instead of launching it.

A call made while a graph is being built puts its work into the graph, and that work
runs, with the graph launch's correlation id, only when the graph is launched: the call
itself has no device activity, and is no lost launch. Two ways a program builds one:

- stream capture: every launch on the capturing thread between ``cudaStreamBeginCapture``
  and ``cudaStreamEndCapture`` (``cuStreamBeginCapture`` ...: the driver's names;
  ``hipStreamBeginCapture`` ...: HIP's), as ``torch.cuda.graph`` does (vLLM's graph
  capture on an MI300, TraceLens's trace: 421 of 431 launch calls);
- XLA's command buffers (JAX on GPU), built and updated node by node inside its TraceMe
  scopes ``command_buffer::initialize`` and ``command_buffer::update`` (a ``Memset``
  there is a memset node; the kernels' names there are kernel nodes): on an H200 JAX
  transformer 3,600 of 4,000 launch-like calls, every ``Memset`` of every step.

:func:`recorded` says which of some host calls were made so; the correlation counts them
apart from the launch calls without device activity (``derive/correlate.py``).
"""

from __future__ import annotations

import numpy as np

from ..trace.core import Trace
from ..trace.sorting import lexsort
from .intervals import innermost
from .memo import threads

#: XLA's TraceMe scopes around building a command buffer's CUDA graph
RECORDING_SCOPES = ("command_buffer::initialize", "command_buffer::update")
#: the runtime's and the driver's names of the calls that begin and end a stream capture
CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cudaStreamBeginCapture_v2", "cudaStreamBeginCapture_ptsz",
                 "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture", "cuStreamBeginCapture_v2",
                 "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCaptureToGraph",
                 "cuStreamBeginCaptureToGraph_ptsz", "hipStreamBeginCapture", "hipStreamBeginCaptureToGraph")
CAPTURE_END = ("cudaStreamEndCapture", "cudaStreamEndCapture_ptsz", "cuStreamEndCapture", "cuStreamEndCapture_ptsz",
               "hipStreamEndCapture")


def _captures(trace: Trace, th: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thread, start, end) of each stream capture: a begin call to the next end call on
    its thread (a begin with no end: to the trace's end, the capture still open)."""
    ev = trace.events
    begin, end = trace.rows_named(*CAPTURE_BEGIN), trace.rows_named(*CAPTURE_END)
    if not len(begin):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.concatenate([begin, end])
    is_end = np.r_[np.zeros(len(begin), bool), np.ones(len(end), bool)]
    t = th[ev["track"][rows]]
    s = ev["start_ns"][rows].astype(np.int64)
    o = lexsort((s, t))
    rows, is_end, t, s = rows[o], is_end[o], t[o], s[o]
    starts = np.flatnonzero(~is_end)
    # the next row on the same thread closes a begin when it is an end
    nxt = np.minimum(starts + 1, len(rows) - 1)
    closed = (nxt != starts) & is_end[nxt] & (t[nxt] == t[starts])
    stop = np.where(closed, s[nxt] + ev["dur_ns"][rows[nxt]].astype(np.int64), np.iinfo(np.int64).max // 2)
    return t[starts], s[starts], stop


def recorded(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which host calls ``rows`` were made while their thread built a CUDA graph (see the
    module doc): their work is in the graph, not launched by them."""
    out = np.zeros(len(rows), bool)
    if not len(rows):
        return out
    ev = trace.events
    th = threads(trace)
    scopes = trace.rows_named(*RECORDING_SCOPES)
    if len(scopes):  # each kind of interval apart: a capture need not nest with a scope
        start = ev["start_ns"][scopes].astype(np.int64)
        out |= innermost(th[ev["track"][scopes]], start, start + ev["dur_ns"][scopes], th[ev["track"][rows]],
                         ev["start_ns"][rows].astype(np.int64)) >= 0
    return out | (stream_captures(trace, rows) >= 0)


def stream_captures(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each host call of ``rows``, the stream capture it was made in (numbered in
    order of the captures' starts; -1: none): the calls of one number are one graph's
    nodes, in the order they were made."""
    out = np.full(len(rows), -1, np.int64)
    th = threads(trace)
    ct, cs, ce = _captures(trace, th)
    if not len(rows) or not len(cs):
        return out
    ev = trace.events
    inner = innermost(ct, cs, ce, th[ev["track"][rows]], ev["start_ns"][rows].astype(np.int64))
    rank = np.empty(len(cs), np.int64)
    rank[np.argsort(cs, kind="stable")] = np.arange(len(cs))
    return np.where(inner >= 0, rank[np.maximum(inner, 0)], -1)
