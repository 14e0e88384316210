"""A torch recording read from torch's results in memory, not from its JSON export.

torch (2.13 on) hands out the activities Kineto's JSON writer writes
(``kineto_results.trace_activities()``): their names, kinds, OS thread ids, ns times,
correlation and flow ids, and each one's args as the JSON text the writer puts in
``"args"``. Reading them (a C-level call per field and event) costs less than
torch writing its JSON and polyprof reading it back; the args (the costliest field:
torch formats them on each call) and the correlation ids (``external_id``, which only
device correlation asks for) are fetched only when a stat key is first asked for, so
until then the Trace keeps torch's results object alive. The columns go through the Kineto reader's own collector and
builder (``formats/kineto/collector.py``, ``build.py``), so the Trace has the layout, codes,
typed ids, memory stats and deferred args that reading the export gives.

What the export has and this does not: torch's three marks of its recording window
("PyTorch Profiler (0)", "Iteration Start: PyTorch Profiler", "Record Window End" on
the pseudo processes "Spans", "Traces" and ""), whose end torch keeps to itself, and
the export's ``trace_id``. Only recordings of host activities are read this way: one
with device activities (kernels, copies) is left to the export, whose layout for them
the real GPU traces in tests/data/traces pin and which cannot be recorded here.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np

from ...formats.kineto.collector import _Collector
from ...formats.kineto.events import _F, _S
from ...formats.kineto.flows import add_flow_columns
from ...formats.kineto.progress import _Progress
from ...formats.safety import clean_metadata
from ...trace import keys
from ...trace.core import Trace
from ...trace.stats import StatColumn
from ...trace.sorting import unique

#: the activity kinds of a host-only recording (what torch records on CPUs)
HOST_TYPES = frozenset({"cpu_op", "user_annotation", "python_function", "cpu_instant_event"})
#: Kineto's flow kinds, as its JSON writer names them
_FLOW_NAMES = {1: "fwdbwd", 2: "ac2g"}
_SOURCE = Path("torch.profiler results (in memory)")



def available(prof: Any) -> bool:
    """Whether this torch hands its activities out (``trace_activities``, torch 2.13 on)."""
    res = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    return callable(getattr(res, "trace_activities", None))


def read(prof: Any) -> Trace | None:
    """The Kineto Trace of a stopped ``torch.profiler.profile``, from memory; None when
    it must come from torch's export (older torch, device activities, another process)."""
    if not available(prof):
        return None
    res = prof.profiler.kineto_results
    acts = res.trace_activities()
    field = _Fields(acts)
    cats = field.values("type")
    kinds = set(cats)
    if not HOST_TYPES.issuperset(kinds):
        return None
    pid = os.getpid()
    # Kineto records host activities of this process only (device id = its pid): checked
    # on every 16th activity and the last (a full pass is not needed)
    sample = _Fields(field.acts[::16] + field.acts[-1:])
    if not (sample.ints("device_id") == pid).all():
        return None
    pids = np.full(len(acts), pid, np.int64)
    tids = field.ints("resource_id")
    tids = np.where(tids == np.iinfo(np.int64).min, 0, np.abs(tids))  # as the writer: |tid|, INT64_MIN -> 0
    start, dur = field.ints("timestamp"), field.ints("duration")
    memory = "cpu_instant_event" in kinds
    if memory:  # the writer's "i" events: no duration
        dur[np.array([c == "cpu_instant_event" for c in cats], bool)] = 0
    # the args are fetched from torch when first asked for (half the cost of reading
    # here), except in a recording of memory events, whose args are typed at load
    args: Any = _args_of(acts, res) if memory else (lambda: _args_of(acts, res))

    col = _Collector(_SOURCE)
    # (with stacks, a module's code run during the recording and freed before its stop
    # leaves its Python events' names undecodable: torch's export writes "unknown")
    col.add_columns(pids, tids, field.values("name", UNKNOWN), cats, start, dur, args)
    _flows(col, field, field.ints("flow_id"), pid, tids, start)
    col.process[pid] = {"process_name": "python", "process_labels": "CPU", "process_sort_index": pid}
    for t in unique(tids).tolist():
        col.threads[(pid, t)] = {"thread_name": f"thread {t} ({_thread_name(t)})", "thread_sort_index": t}
    trace = col.finish(_top(prof), _Progress(False, _SOURCE, 0))
    # the writer's "External id" (each activity's correlation id), read from torch when
    # first asked for, like the args: only device correlation asks for it
    trace.stats.defer(lambda: _external_ids(acts, res), may_hold=keys.EXTERNAL_ID.__eq__)
    clean_metadata(trace.metadata)
    return trace


#: the name torch's export gives an activity whose name is not UTF-8
UNKNOWN = "unknown"


class _Fields:
    """One field of every activity: a C-level call each, through the class's own method
    (a fifth faster than looking the method up on each object)."""

    def __init__(self, acts: list):
        self.acts, self.cls = acts, type(acts[0]) if acts else None

    def values(self, name: str, undecodable: str | None = None) -> list:
        """The field of every activity; with ``undecodable``, that for a text that is not
        UTF-8 (else the error is raised)."""
        if not self.acts:
            return []
        get = getattr(self.cls, name)
        try:
            return list(map(get, self.acts))
        except UnicodeDecodeError:
            if undecodable is None:
                raise
        out = []
        for a in self.acts:
            try:
                out.append(get(a))
            except UnicodeDecodeError:
                out.append(undecodable)
        return out

    def ints(self, name: str) -> np.ndarray:
        if not self.acts:
            return np.zeros(0, np.int64)
        return np.fromiter(map(getattr(self.cls, name), self.acts), np.int64, len(self.acts))


def _flows(col: _Collector, field: "_Fields", ids: np.ndarray, pid: int, tids: np.ndarray,
           start: np.ndarray) -> None:
    """Each activity's flow endpoint (``s``, or ``f`` bound to its enclosing slice, as
    the writer writes them after the activity), as the reader's flow columns."""
    rows = np.flatnonzero(ids > 0)
    if not len(rows):
        return
    sub = _Fields([field.acts[r] for r in rows.tolist()])
    kinds = sub.ints("flow_type")
    cats = [_FLOW_NAMES.get(k, "ac2g") for k in kinds.tolist()]
    is_start = np.fromiter(map(bool, sub.values("flow_start")), bool, len(rows))
    distinct = list(dict.fromkeys(cats))
    code = dict(zip(distinct, (col._sid(c) for c in distinct)))
    add_flow_columns(col, np.fromiter(map(code.__getitem__, cats), np.int64, len(cats)), ids[rows],
                     np.where(is_start, _S, _F).astype(np.int8),
                     np.full(len(rows), col._id_codes([pid], col.pids)[0], np.int64),
                     col._id_codes(tids[rows].tolist(), col.tids), start[rows], np.ones(len(rows), bool))


def _external_ids(acts: list, res: Any) -> dict[str, StatColumn]:
    """The ``external_id`` stat: each activity's correlation id, where set. ``res``,
    torch's results object, owns the activities: it is kept alive until this runs."""
    corr = _Fields(acts).ints("correlation_id")
    has = np.flatnonzero(corr)
    return {keys.EXTERNAL_ID: StatColumn(has, corr[has])} if len(has) else {}


def _args_of(acts: list, res: Any) -> list[str]:
    """Each activity's args as the text the writer puts inside ``"args": {}``. ``res``,
    torch's results object, owns the activities: it is kept alive until this runs."""
    try:
        return _Fields(acts).values("metadata_json")
    except Exception:  # e.g. text that is not UTF-8: that activity's args are left out
        out = []
        for a in acts:
            try:
                out.append(a.metadata_json())
            except Exception:
                out.append("")
        return out


def _top(prof: Any) -> dict[str, Any]:
    """The export's top-level fields that polyprof keeps (times are absolute ns here:
    no ``baseTimeNanoseconds``)."""
    top: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms",
                           "host_name": socket.gethostname()}
    for k in ("with_stack", "profile_memory", "record_shapes"):
        if getattr(prof, k, False):
            top[k] = 1
    info = getattr(prof, "_get_distributed_info", None)
    if info is not None:
        try:
            d = info()
        except Exception:  # torch's own helper; without it the trace has no rank
            d = None
        if d:
            top["distributedInfo"] = d
    return top


def _thread_name(tid: int) -> str:
    """The OS name of a thread of this process (the writer's name for it), if it still runs."""
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "python"
