"""Merge traces: plugin outputs into one session trace, ranks side by side, or derived
lines into a trace.

Sources are matched by identity (rank, host, pid, label; see ``Source.key``): the
plugins of one session give unnamed sources, which become one, while two ranks or two
files stay two sources. Planes are matched by (source, name) and tracks by (plane,
kind, tid, name), so nothing of one source lands on another's plane. Every id is
remapped with array indexing, so merging costs one pass over the columns.

Metadata: each input's metadata goes to its source (``Source.metadata``; an input of
several sources keeps theirs), and the merged ``Trace.metadata`` keeps the first value
of each key, lists concatenated and dicts merged, as a summary for single-source use.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .builder import TraceBuilder
from .core import Trace


def merge(traces: Sequence[Trace], metadata: dict[str, Any] | None = None) -> Trace:
    b = TraceBuilder()
    offset = 0
    for t in traces:
        single = len(t.sources) == 1
        srcmap = []
        for s in t.sources:
            i = b.source(s.rank, s.host, s.pid, s.label, s.clock, s.metadata)
            if single and s.key() != (None, "", 0, ""):
                merge_metadata(b.sources[i].metadata, t.metadata)
            srcmap.append(i)
        smap = np.fromiter((b.intern(s) for s in t.strings), np.int32, len(t.strings))
        pmap = np.array([b.plane(p.name, p.kind, p.vendor, p.index, p.pid, p.properties, srcmap[p.source])
                         for p in t.planes], dtype=np.int32)
        tmap = np.array([b.track(int(pmap[tr.plane]), tr.name, tr.kind, tr.tid, tr.sort_index,
                                 tr.properties) for tr in t.tracks], dtype=np.int32)
        n = t.n_events
        if n:
            ev = t.events
            b.events(tmap[ev["track"]], smap[ev["name"]], ev["start_ns"], ev["dur_ns"],
                     smap[ev["category"]])
        b.add_stats(t.stats, n, base=offset)  # deferred stats stay deferred
        fl = t.flows
        if len(fl["src"]):
            b._flows["src"].extend((fl["src"] + offset).tolist())
            b._flows["dst"].extend((fl["dst"] + offset).tolist())
            b._flows["id"].extend(fl["id"].tolist())
            b._flows["category"].extend(smap[fl["category"]].tolist())
        c = t.counters
        if len(c["ts_ns"]):
            b._counter_chunks.append({"plane": pmap[c["plane"]], "name": smap[c["name"]],
                                      "ts_ns": c["ts_ns"], "value": c["value"]})
        merge_metadata(b.metadata, t.metadata)
        offset += n
    if metadata:
        merge_metadata(b.metadata, metadata)
    return b.build()


def merge_metadata(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Lists concatenate, dicts merge recursively, other values: first one wins."""
    for k, v in other.items():
        if k not in into:
            into[k] = v if not isinstance(v, (list, dict)) else (list(v) if isinstance(v, list) else dict(v))
        elif isinstance(into[k], list) and isinstance(v, list):
            into[k] = into[k] + v
        elif isinstance(into[k], dict) and isinstance(v, dict):
            merge_metadata(into[k], v)
