"""A trace with its events in another row order, for tests that compare what two row
orders give (a reader's and the Perfetto writer's)."""

from __future__ import annotations

import numpy as np

from polyprof.trace.core import Trace
from polyprof.trace.stats import StatColumn, StatTable


def in_writer_order(trace: Trace) -> Trace:
    """``trace`` with its events in the order the Perfetto writer emits them (by start,
    longest first), stats and flows following their events."""
    ev = trace.events
    order = np.lexsort((np.arange(trace.n_events), -np.asarray(ev["dur_ns"]), np.asarray(ev["start_ns"])))
    new = np.empty(trace.n_events, np.int64)
    new[order] = np.arange(trace.n_events)
    stats = {}
    for key, col in trace.stats.items():
        rows = new[col.rows]
        o = np.argsort(rows, kind="stable")
        stats[key] = StatColumn(rows[o], col.values[o])
    fl = trace.flows
    flows = {"src": new[fl["src"]], "dst": new[fl["dst"]], "id": fl["id"], "category": fl["category"]}
    return Trace(list(trace.strings), trace.planes, trace.tracks, {k: v[order] for k, v in ev.items()},
                 StatTable(stats), flows, trace.counters, dict(trace.metadata), trace.sources).validate()
