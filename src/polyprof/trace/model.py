"""Sources (where data came from), planes (devices/processes) and tracks (threads,
streams, derived lines).

These are few per trace, so they are plain dataclasses; events are columnar.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from reprlib import recursive_repr
from typing import Any, ClassVar

import numpy as np

#: the columns of a Trace's events, flows and counters, and their types
EVENT_COLUMNS = {"track": np.int32, "name": np.int32, "category": np.int32,
                 "start_ns": np.int64, "dur_ns": np.int64}
FLOW_COLUMNS = {"src": np.int64, "dst": np.int64, "id": np.int64, "category": np.int32}
COUNTER_COLUMNS = {"plane": np.int32, "name": np.int32, "ts_ns": np.int64, "value": np.float64}

#: free-form properties and metadata of a record (JSON-like values), as the fields
#: declare them (their text, which formats/native.py checks, is written out there)
Props = dict[str, Any]


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


#: the default of a field its factory makes, in the records' own ``__init__`` (as
#: @dataclass's sentinel: an argument given, even None, is kept)
FACTORY: Any = _Factory()

class Record:
    """The ``__repr__`` and ``__eq__`` @dataclass would generate for a record, read from
    its fields when called: the schema's records are dataclasses (fields(), asdict(),
    replace() work on them) declared with ``init=False, repr=False, eq=False``, whose
    generated methods @dataclass would compile by exec at every start of every process
    (about 0.3 ms a class; docs/benchmarks.md, issue 35). Each writes its ``__init__``
    (the signature is the API); tests/test_schema_records.py holds each to the methods
    @dataclass generates."""

    __dataclass_fields__: ClassVar[dict[str, Field[object]]]

    @recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = [f.name for f in fields(self) if f.compare]
        return [getattr(self, n) for n in names] == [getattr(other, n) for n in names]


@dataclass(init=False, repr=False, eq=False)
class Source(Record):
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

    def __init__(self, id: int, rank: int | None = None, host: str = "", pid: int = 0, label: str = "",
                 clock: Props = FACTORY, metadata: Props = FACTORY) -> None:
        self.id, self.rank, self.host, self.pid, self.label = id, rank, host, pid, label
        self.clock = {} if clock is FACTORY else clock
        self.metadata = {} if metadata is FACTORY else metadata

    def key(self) -> tuple:
        """Identity used to match sources when traces merge: an unnamed source (a
        plugin's output in a live session) matches every other unnamed one."""
        return (self.rank, self.host, self.pid, self.label)

    def describe(self) -> str:
        parts = [f"rank {self.rank}" if self.rank is not None else "",
                 self.host, f"pid {self.pid}" if self.pid else "", self.label]
        return ", ".join(p for p in parts if p) or f"source {self.id}"


@dataclass(init=False, repr=False, eq=False)
class Plane(Record):
    """A host process or an accelerator, e.g. ``/host:CPU`` or ``/device:GPU:0``."""

    id: int
    name: str
    kind: str = "host"  # "host" or "device"
    vendor: str = ""
    index: int = 0
    pid: int = 0  # process id (host) or a stable display id (device)
    properties: dict[str, Any] = field(default_factory=dict)
    source: int = 0  # index into Trace.sources

    def __init__(self, id: int, name: str, kind: str = "host", vendor: str = "", index: int = 0, pid: int = 0,
                 properties: Props = FACTORY, source: int = 0) -> None:
        self.id, self.name, self.kind, self.vendor, self.index, self.pid = id, name, kind, vendor, index, pid
        self.properties = {} if properties is FACTORY else properties
        self.source = source


@dataclass(init=False, repr=False, eq=False)
class Track(Record):
    """A line of events on a plane: a thread, a stream/queue, or a derived line."""

    id: int
    plane: int
    name: str
    kind: str = "thread"  # "thread" | "stream" | "queue" | "derived" | "steps"
    tid: int = 0  # OS thread id, stream number, or display id
    sort_index: int = 0
    properties: dict[str, Any] = field(default_factory=dict)

    def __init__(self, id: int, plane: int, name: str, kind: str = "thread", tid: int = 0, sort_index: int = 0,
                 properties: Props = FACTORY) -> None:
        self.id, self.plane, self.name, self.kind, self.tid, self.sort_index = id, plane, name, kind, tid, sort_index
        self.properties = {} if properties is FACTORY else properties
