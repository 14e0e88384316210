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
    samples), ``nan_samples``. In the order the counters first appear. ``window``: the
    samples inside the steps it selects.

    A NaN sample (a loss that diverged) counts in ``samples`` and in ``nan_samples``, and
    is ``first`` or ``last`` where it is, but is left out of ``min``, ``max`` and ``mean``
    (NaN only when every sample is NaN); an infinite one is a value like any other."""
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
                      **{k: np.zeros(0) for k in ("first", "last", "min", "max", "mean")},
                      "nan_samples": np.zeros(0, np.int64)})
    key = c["plane"].astype(np.int64) * (len(trace.strings) + 1) + c["name"]
    order = np.lexsort((np.arange(n), c["ts_ns"], key))
    k, ts, v = key[order], c["ts_ns"][order], c["value"][order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    ends = np.r_[starts[1:], n] - 1
    show = np.argsort(np.minimum.reduceat(order, starts), kind="stable")  # by first appearance
    mins, maxs = np.fmin.reduceat(v, starts)[show], np.fmax.reduceat(v, starts)[show]  # (NaN left out)
    counts = (ends - starts + 1)[show]
    nan = np.isnan(v)
    nans = np.add.reduceat(nan.astype(np.int64), starts)[show]
    with np.errstate(invalid="ignore", divide="ignore"):  # every sample NaN: a NaN mean
        means = np.add.reduceat(np.where(nan, 0.0, v), starts)[show] / (counts - nans)
    means[counts == nans] = np.nan
    starts, ends = starts[show], ends[show]
    planes = c["plane"][order][starts]
    return frame({
        "plane": np.array([trace.planes[p].name for p in planes.tolist()], dtype=object),
        "name": np.array([trace.strings[i] for i in c["name"][order][starts].tolist()], dtype=object),
        "samples": counts, "first_ns": ts[starts], "last_ns": ts[ends], "first": v[starts], "last": v[ends],
        "min": mins, "max": maxs, "mean": means, "nan_samples": nans,
    })
