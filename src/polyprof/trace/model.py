"""Planes (devices/processes) and tracks (threads, streams, derived lines).

These are few per trace, so they are plain dataclasses; events are columnar.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
