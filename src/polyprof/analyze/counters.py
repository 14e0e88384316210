"""Counter tracks summarised: what a program recorded with ``polyprof.counter`` (a loss,
a queue depth), the process samples and the memory counters of a source."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.core import Trace
from .common import frame
from .window import WindowArg, selection, view
from .window_counting import inside

if TYPE_CHECKING:
    from .table import Table


def counter_stats(trace: Trace, window: WindowArg = None) -> Table:
    """One row per counter (plane and name): ``plane``, ``name``, ``samples``,
    ``first_ns``, ``last_ns``, ``first``, ``last``, ``min``, ``max``, ``mean`` (of the
    samples). In the order the counters first appear. ``window``: the samples inside the
    steps it selects."""
    trace = view(trace, window)
    c = trace.counters
    sel = selection(trace)
    if sel is not None:
        keep = inside(sel, c["ts_ns"])  # (not between a schedule's cycles)
        c = {k: v[keep] for k, v in c.items()}
    n = len(c["ts_ns"])
    if not n:
        return frame({"plane": np.zeros(0, object), "name": np.zeros(0, object),
                      **{k: np.zeros(0, np.int64) for k in ("samples", "first_ns", "last_ns")},
                      **{k: np.zeros(0) for k in ("first", "last", "min", "max", "mean")}})
    key = c["plane"].astype(np.int64) * (len(trace.strings) + 1) + c["name"]
    order = np.lexsort((np.arange(n), c["ts_ns"], key))
    k, ts, v = key[order], c["ts_ns"][order], c["value"][order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    ends = np.r_[starts[1:], n] - 1
    show = np.argsort(np.minimum.reduceat(order, starts), kind="stable")  # by first appearance
    mins, maxs = np.minimum.reduceat(v, starts)[show], np.maximum.reduceat(v, starts)[show]
    counts = (ends - starts + 1)[show]
    means = np.add.reduceat(v, starts)[show] / counts
    starts, ends = starts[show], ends[show]
    planes = c["plane"][order][starts]
    return frame({
        "plane": np.array([trace.planes[p].name for p in planes.tolist()], dtype=object),
        "name": np.array([trace.strings[i] for i in c["name"][order][starts].tolist()], dtype=object),
        "samples": counts, "first_ns": ts[starts], "last_ns": ts[ends], "first": v[starts], "last": v[ends],
        "min": mins, "max": maxs, "mean": means,
    })
