"""Sources (where data came from), planes (devices/processes) and tracks (threads,
streams, derived lines).

These are few per trace, so they are plain dataclasses; events are columnar.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the columns of a Trace's events, flows and counters, and their types
EVENT_COLUMNS = {"track": np.int32, "name": np.int32, "category": np.int32,
                 "start_ns": np.int64, "dur_ns": np.int64}
FLOW_COLUMNS = {"src": np.int64, "dst": np.int64, "id": np.int64, "category": np.int32}
COUNTER_COLUMNS = {"plane": np.int32, "name": np.int32, "ts_ns": np.int64, "value": np.float64}


@dataclass
class Source:
    """Where a plane's data came from: one process of one host, one rank of a job.

    A trace read from one file, or recorded by one session, has one source. Traces of
    several sources merge side by side: planes are keyed by (source, name), so two ranks'
    ``/device:GPU:0`` stay two planes. ``metadata`` is that source's own (its file's
    ``distributedInfo``, ``deviceProperties``...); ``clock`` its wall anchor
    (``mono_ns``, ``wall_ns``, ``uncertainty_ns``) and, once aligned to other sources,
    the alignment applied (``offset_ns``, ``bound_ns``, ``method``).
    """

    id: int
    rank: int | None = None  # rank in the job (distributedInfo), None when unknown
    host: str = ""
    pid: int = 0
    label: str = ""  # e.g. the file it was read from
    clock: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple:
        """Identity used to match sources when traces merge: an unnamed source (a
        plugin's output in a live session) matches every other unnamed one."""
        return (self.rank, self.host, self.pid, self.label)

    def describe(self) -> str:
        parts = [f"rank {self.rank}" if self.rank is not None else "",
                 self.host, f"pid {self.pid}" if self.pid else "", self.label]
        return ", ".join(p for p in parts if p) or f"source {self.id}"


@dataclass
class Plane:
    """A host process or an accelerator, e.g. ``/host:CPU`` or ``/device:GPU:0``."""

    id: int
    name: str
    kind: str = "host"  # "host" or "device"
    vendor: str = ""
    index: int = 0
    pid: int = 0  # process id (host) or a stable display id (device)
    properties: dict[str, Any] = field(default_factory=dict)
    source: int = 0  # index into Trace.sources


@dataclass
class Track:
    """A line of events on a plane: a thread, a stream/queue, or a derived line."""

    id: int
    plane: int
    name: str
    kind: str = "thread"  # "thread" | "stream" | "queue" | "derived" | "steps"
    tid: int = 0  # OS thread id, stream number, or display id
    sort_index: int = 0
    properties: dict[str, Any] = field(default_factory=dict)
