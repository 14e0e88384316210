"""The aligned job as one trace for viewers, one process per rank.

``TraceSet.merged()`` keeps every rank's planes (each rank's ``/host:CPU`` and
``/device:GPU:0`` apart); a viewer shows each plane as a process, so a job of N ranks
with a host and a device each would be 2N processes with the same few names. Here each
rank becomes one process named ``rank N``: its host threads stay threads, its device
streams and derived lines become named tracks of that process, prefixed with their
device (``/device:GPU:0 stream 7``), as do the counters of its devices. Its warnings
say so, and the exports carry them: a read of the file back is no job's analysis (each
rank's process read as one device holding its host threads too; no launch matched, no
step found).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.model import Plane, Track


def one_process_per_rank(trace: Trace) -> Trace:
    """``trace`` (a merged job, its sources the ranks) with one plane per source."""
    first_host: dict[int, int] = {}
    for p in trace.planes:
        if p.kind == "host":
            first_host.setdefault(p.source, p.id)
    planes = []
    for s in trace.sources:
        pids = [p.pid for p in trace.planes if p.source == s.id and p.kind == "host" and p.pid]
        name = f"rank {s.rank}" if s.rank is not None else (s.label or f"source {s.id}")
        planes.append(Plane(id=s.id, name=name, kind="host", index=s.rank if s.rank is not None else s.id,
                            pid=pids[0] if pids else s.pid, source=s.id))
    # a track keeps its name on the rank's first host plane, else it is named after its plane
    own = [first_host.get(p.source) == p.id for p in trace.planes]
    tracks = []
    for t in trace.tracks:
        p = trace.planes[t.plane]
        name = t.name if own[p.id] else f"{p.name} {t.name}"
        kind = t.kind if own[p.id] or t.kind != "thread" else "stream"
        tracks.append(Track(id=t.id, plane=p.source, name=name, kind=kind, tid=t.tid,
                            sort_index=t.sort_index + (0 if own[p.id] else 1_000 * (p.id + 1)),
                            properties=t.properties))
    strings = list(trace.strings)
    counters = dict(trace.counters)
    c = trace.counters
    if len(c["ts_ns"]):
        names = c["name"].copy()
        index = {s: i for i, s in enumerate(strings)}
        for plane, sid in {(int(a), int(b)) for a, b in zip(c["plane"].tolist(), c["name"].tolist())}:
            if own[plane]:
                continue
            text = f"{trace.planes[plane].name} {strings[sid]}"
            if text not in index:
                index[text] = len(strings)
                strings.append(text)
            names[(c["plane"] == plane) & (c["name"] == sid)] = index[text]
        plane_source = np.array([p.source for p in trace.planes], np.int32)
        counters = {**c, "plane": plane_source[c["plane"]], "name": names}
    said = (f"a job's {len(trace.sources)} ranks merged for a viewer, one process per rank: each rank's device "
            "streams are tracks of its process, so an analysis of this file is not the job's: it reads each rank's "
            "process as one device, its host threads with it, and finds no launch and no step (summarise the job's "
            "store or rank files; export a rank with --rank N, or a file per rank with -f kineto or -f tensorboard)")
    metadata = {**trace.metadata, mkeys.WARNINGS: [*(trace.metadata.get(mkeys.WARNINGS) or []), said]}
    return dataclasses.replace(trace, strings=strings, planes=planes, tracks=tracks, counters=counters,
                               metadata=metadata)
