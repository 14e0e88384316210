"""Huawei Ascend timelines in Chrome JSON: msprof's ``msprof_*.json``, and the parts
MindInsight / MindSpore write apart (``task_time_*.json``, ``hccl_*.json``,
``step_trace_*.json``), read as an NPU device.

msprof labels its device processes ``NPU`` with no index (``devices.py`` makes them one
``/device:NPU:0`` plane, vendor Huawei): ``Ascend Hardware`` (a line per stream: the
tasks, each with its ``Task Type``, and a ``Step Trace(Model ID:N)`` line), ``HCCL`` (the
collective library's view of the same tasks, a line per plane, and the collective ops on
``Communication Kernel``) and ``Overlap Analysis`` (msprof's own computing / communication
/ free lines). The API (``CANN``, ``AscendCL``) is a host process labelled ``CPU``.

After the Trace is built, :func:`classify` gives every such event the category that says
what it is (``trace.categories``):

- a hardware task by its ``Task Type``: AI Core / AI Vector Core / AI CPU (and the MIX
  and FFTS kinds) run kernels, ``kernel``; every task on a stream HCCL uses (its tasks'
  ``stream id``, and the streams of notify tasks, HCCL's signals between devices) is
  communication, ``collective_comm``, waits included (msprof counts the collective's
  whole span as communication); copies (``MEMCPY...``, ``SDMA``) are
  ``memcpy``; the rest (event/notify record, wait and reset, ...) ``npu_sync``: not
  device activity;
- HCCL's per-plane tasks repeat hardware tasks (same start, duration and stream): with
  the hardware tasks there, they are a derived view (category and line ``derived``);
  alone (``hccl_*.json``) they are the communication, ``collective_comm``. The
  ``Communication Kernel`` op spans its tasks: derived;
- ``Overlap Analysis``: derived lines;
- the step trace's ``Iteration Time`` events are steps (category ``step``, stat ``step``
  their ``Iteration ID``: ``derive/steps.py`` takes them), its other spans (FP/BP,
  refresh, reduce) derived;
- the API process's events: runtime calls (``runtime``).

MindSpore's older timeline display (``ascend_timeline_display_<n>.json``, MindSpore's
``BaseTimelineGenerator`` before it wrote process labels) has X events only, no metadata:
the device's ops on the pid that is the device id (a line per stream), the AI CPU's ops
on pid 9000, the communication spans (``stream_<n>_parallel_<m>``, from the step trace)
on pid 10000, host CPU ops on 11000, its overlap lines on 12000. :func:`mindspore_device`
tells such a file by those pids; ``devices.py`` makes the first three the NPU
``/device:NPU:<device id>`` (lines ``stream <n>``, ``AI CPU``, ``communication <n>``)
and :func:`classify` makes the communication spans ``collective_comm``, the overlap lines
derived (the ops, with no category on a device, are kernels).
"""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ...trace import keys
from ...trace.core import Trace
from ...trace.stats import StatColumn
from .numbers import int_values

if TYPE_CHECKING:
    from .collector import _Collector

VENDOR = "Huawei"
HARDWARE, HCCL, OVERLAP, STEP_TRACE = "Ascend Hardware", "HCCL", "Overlap Analysis", "Step Trace"
#: host processes of the Ascend software stack (msprof's API levels)
API_PROCESSES = ("CANN", "AscendCL")
#: task types that run kernels (msprof's AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC...)
_COMPUTE = r"(?i)AI_?CORE|AI_?VECTOR|AI_?CPU|AIV|AIC|MIX|FFTS|KERNEL"  # (patterns: compiled on first use)
_COPY = r"(?i)MEMCPY|SDMA|COPY"
_ITERATION = r"^Iteration (\d+)$"
CAT_SYNC = "npu_sync"  # an NPU stream's event/notify record, wait or reset: not activity
#: MindSpore's timeline display: its fixed pids (the device's ops are on pid = device id)
MS_AI_CPU, MS_COMM, MS_HOST, MS_OVERLAP = 9000, 10000, 11000, 12000
#: MindSpore's op names (its graph's ``<type>-op<n>``), which its timeline display's device ops have
_MS_OP = re.compile(r"-op\d+$")


def _process_names(col: "_Collector") -> set[str]:
    return {str(info.get("process_name")) for info in col.process.values() if info.get("process_name")}


def is_ascend(col: "_Collector") -> bool:
    """Whether the trace is msprof's / MindInsight's (by its process names; cheap), or
    MindSpore's timeline display (:func:`mindspore_device`)."""
    names = _process_names(col)
    if HARDWARE in names or STEP_TRACE in names:
        return True
    if HCCL in names and any(str(i.get("process_labels", "")).strip().upper() == "NPU" for i in col.process.values()):
        return True
    return mindspore_device(col) is not None


def mindspore_device(col: "_Collector") -> int | None:
    """The device id of MindSpore's older timeline display (module doc), None for any
    other trace: no metadata at all, integer pids, the AI CPU's or the communication's
    among them, and one other below them (the device's). Told once per file (the names
    :func:`mindspore_planes` gives its lines are metadata)."""
    if col not in _MS_SEEN:
        _MS_SEEN[col] = _mindspore_device(col)
    return _MS_SEEN[col]


#: what :func:`mindspore_device` told of each file being read
_MS_SEEN: "weakref.WeakKeyDictionary[_Collector, int | None]" = weakref.WeakKeyDictionary()


def _mindspore_device(col: "_Collector") -> int | None:
    if col.process or col.threads or col.other_meta:
        return None
    pids = col.id_values[id(col.pids)]
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
        return None
    fixed = {MS_AI_CPU, MS_COMM, MS_HOST, MS_OVERLAP}
    own = set(pids) - fixed
    if not (set(pids) & {MS_AI_CPU, MS_COMM}) or len(own) != 1:
        return None
    dev = next(iter(own))
    if not 0 <= dev < MS_AI_CPU:
        return None
    # (and MindSpore's op names, ``AssignAdd-op142``: a Chrome JSON of pids 1234 and 9000 is not it)
    return dev if any(_MS_OP.search(s) for s in col.b.strings) else None


def mindspore_planes(col: "_Collector", pid_vals: list, kinds: list[tuple[str, str, int]]) -> None:
    """In MindSpore's timeline display, the device's, AI CPU's and communication's pids
    are the NPU (one plane: ``devices.py`` names them alike); the AI CPU's and the
    communication's lines are named apart from the device's streams."""
    dev = mindspore_device(col)
    if dev is None:
        return
    tids = col.id_values[id(col.tids)]
    for code, pv in enumerate(pid_vals):
        if pv in (dev, MS_AI_CPU, MS_COMM):
            kinds[code] = ("device", "NPU", dev)
    for pv, label in ((dev, "stream"), (MS_AI_CPU, "AI CPU"), (MS_COMM, "communication")):
        if pv in pid_vals:  # (the tids are texts in some files: named here, not "1/519")
            for tv in tids:
                col.threads[(pv, tv)] = {"thread_name": label if pv == MS_AI_CPU else f"{label} {tv}"}


def _role(process: str, thread: str) -> str:
    if process == HARDWARE:
        return "steps" if thread.startswith(STEP_TRACE) else "hardware"
    if process == HCCL:
        return "hccl_op" if thread == "Communication Kernel" else "hccl_task"
    if process == OVERLAP:
        return "overlap"
    if process == STEP_TRACE:
        return "steps"
    return "api" if process in API_PROCESSES else ""


def track_roles(col: "_Collector", track_of_pair: dict[int, int], ntid: int) -> dict[int, str]:
    """The role (``_role``) of each track of the trace, from its process and thread names
    (in MindSpore's timeline display, from its pid)."""
    pid_vals = col.id_values[id(col.pids)]
    tid_vals = col.id_values[id(col.tids)]
    out: dict[int, str] = {}
    ms = mindspore_device(col) is not None
    for pair, track in track_of_pair.items():
        p, t = divmod(pair, ntid)
        pv, tv = pid_vals[p], tid_vals[t]
        if ms:
            if (r := {MS_COMM: "communication", MS_OVERLAP: "overlap"}.get(pv, "")):
                out[track] = r
            continue
        try:
            process = col.process.get(pv, {}).get("process_name")
            thread = col.threads.get((pv, tv), {}).get("thread_name")
        except TypeError:  # an unhashable id
            continue
        role = _role(str(process or ""), str(thread or ""))
        if role:
            out[track] = role
    return out


def _text(values: np.ndarray) -> list[str]:
    return [v if isinstance(v, str) else str(v) for v in values.tolist()]


def _task_categories(types: list[str], streams: list[int], hccl_streams: set[int]) -> list[str]:
    out = []
    for ty, st in zip(types, streams):
        if re.search(_COMPUTE, ty):
            out.append(keys.CAT_KERNEL)
        elif st in hccl_streams:
            out.append("collective_comm")
        elif re.search(_COPY, ty):
            out.append("memcpy")
        else:
            out.append(CAT_SYNC)
    return out


def _lookup(trace: Trace, key: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask, values) of stat ``key`` at ``rows`` (ascending)."""
    got = trace.stats.lookup_rows([key], rows).get(key)
    if got is None:
        return np.zeros(len(rows), bool), np.zeros(0, object)
    return got


def _hardware(trace: Trace, hw: np.ndarray, hccl_streams: set[int], cats: dict[str, list[int]]) -> None:
    """The hardware tasks' categories, by their ``Task Type`` and stream."""
    has, types = _lookup(trace, "Task Type", hw)
    rows = hw[has]
    hs, sv = _lookup(trace, "Stream Id", rows)
    stream = np.full(len(rows), -1, np.int64)
    stream[hs] = int_values(sv)
    names = _text(types)
    # notify tasks are HCCL's signals between devices: their streams are HCCL's (where no
    # HCCL process names them: task_time_*.json)
    hccl_streams = hccl_streams | {s for s, ty in zip(stream.tolist(), names) if ty.upper().startswith("NOTIFY")}
    for cat, r in zip(_task_categories(names, stream.tolist(), hccl_streams), rows.tolist()):
        cats.setdefault(cat, []).append(r)


def classify(trace: Trace, roles: dict[int, str]) -> None:
    """Give the Ascend events their categories, and the derived lines their kind (module doc)."""
    if not roles or not trace.n_events:
        return
    ev = trace.events
    role = np.array([roles.get(i, "") for i in range(len(trace.tracks))], object)[ev["track"]]
    cats: dict[str, list[int]] = {}
    hw = np.flatnonzero(role == "hardware")
    hc = np.flatnonzero(role == "hccl_task")
    hccl_streams: set[int] = set()
    if len(hc):
        _, vals = _lookup(trace, "stream id", hc)
        hccl_streams = {s for s in int_values(vals).tolist() if s >= 0}
    if len(hw):
        _hardware(trace, hw, hccl_streams, cats)
    derived = np.flatnonzero((role == "overlap") | (role == "hccl_op") | ((role == "hccl_task") & (len(hw) > 0)))
    if len(hc) and not len(hw):  # HCCL's tasks alone (hccl_*.json): the communication itself
        cats.setdefault("collective_comm", []).extend(hc.tolist())
    cats.setdefault("collective_comm", []).extend(np.flatnonzero(role == "communication").tolist())
    api = np.flatnonzero(role == "api")
    empty = trace.string_id("")
    if len(api) and empty >= 0:  # the API's calls (a category of their own is kept)
        cats.setdefault(keys.CAT_RUNTIME, []).extend(api[ev["category"][api] == empty].tolist())
    steps = np.flatnonzero(role == "steps")
    step_rows, numbers = _iterations(trace, steps)
    derived = np.concatenate([derived, np.setdiff1d(steps, step_rows)])
    cats.setdefault(keys.CAT_DERIVED, []).extend(derived.tolist())
    for cat, rows in cats.items():
        if rows:
            ev["category"][np.asarray(rows, np.int64)] = trace.intern(cat)
    if len(step_rows):
        ev["category"][step_rows] = trace.intern(keys.CAT_STEP)
        if keys.STEP not in trace.stats:
            trace.stats[keys.STEP] = StatColumn(step_rows, numbers)
    derived_tracks = {"overlap", "hccl_op"} | ({"hccl_task"} if len(hw) else set())
    for i, r in roles.items():
        if r in derived_tracks:
            trace.tracks[i].kind = "derived"
    trace.__dict__.pop("kinds", None)  # (cached from the categories)


def _iterations(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The step trace's ``Iteration N`` spans (ascending rows) and their numbers (the
    ``Iteration ID`` arg, else the name's N)."""
    if not len(rows):
        return rows, np.zeros(0, np.int64)
    names = trace.names(rows)
    nums = np.array([int(m.group(1)) if (m := re.match(_ITERATION, str(n))) else -1 for n in names], np.int64)
    keep = (nums >= 0) & (trace.events["dur_ns"][rows] > 0)
    rows, nums = rows[keep], nums[keep]
    has, ids = _lookup(trace, "Iteration ID", rows)
    if has.any():
        given = int_values(ids)
        nums[np.flatnonzero(has)[given >= 0]] = given[given >= 0]
    return rows, nums
