"""Perfetto's tracks -> polyprof's planes and tracks.

Perfetto describes tracks by ``TrackDescriptor`` (a uuid, a parent, and a process, a
thread or a counter, or only a name); older producers name a sequence's thread by a
``ThreadDescriptor`` packet and processes by ``ProcessDescriptor`` or a ``ProcessTree``.
Every track is given a small code when it is first named (by a descriptor or by an event
that refers to it: descriptors may come after their events), and resolved at the end:

- a process -> a plane (kind ``host``) called by the process's name (``<name> (pid N)``
  when several processes share it, ``pid N`` when it has none); a ``/device:<KIND>:<N>``
  name (a polyprof export) makes a device plane;
- a thread -> a ``thread`` track of its process's plane (tid, thread name);
- a named track -> a track of the plane of its nearest process or thread ancestor:
  ``stream`` on a device plane (the number in ``stream 7`` is its tid), else ``line``;
  ``derived`` when all its events are of polyprof's ``derived`` category (the lines
  ``polyprof export --derive`` adds: Steps, Sections...); rocprofv3's GPU agent tracks
  (which have no process) are streams of ``/device:GPU:<agent node>``, and its other host
  threads are threads of the trace's one process; another track with no such
  ancestor goes to the plane ``Global tracks``. polyprof's writer puts slices that
  overlap without nesting on child tracks ``<track> (overlap k)``: they are that track.
- a counter track -> counter samples named after the track on its ancestor's plane;
- a GPU's hardware queue (``GpuRenderStageEvent``) -> a ``stream`` of ``/device:GPU:<id>``,
  and its counters (``GpuCounterEvent``) -> counters there.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...trace.builder import TraceBuilder
from ..kineto.devices import _vendor, _vendor_hint
from ..slice_lanes import LANE
from .sequences import text

_DEVICE_PLANE = re.compile(r"^/device:([^:/]+):(\d{1,9})$")
#: rocprofv3's tracks with no process (rocprofiler-sdk, lib/output/generatePerfetto.cpp):
#: a GPU agent's streams and queues ("COMPUTE AGENT [4] STREAM [0] (GPU)", "COMPUTE GPU [0]
#: QUEUE [1] ...", "COPY to AGENT [4] THREAD [1] (GPU)") and the host threads other than
#: the main one ("THREAD 1 (12345)")
_ROCPROF_DEVICE = re.compile(r"^(?:COMPUTE|COPY to) [A-Z]+ \[(\d+)\] .*\((?:GPU|UNK)\)\s*$|"
                             r"^COMPUTE [A-Z]+ \[(\d+)\] QUEUE \[\d+\] GPU\s*$")
_ROCPROF_THREAD = re.compile(r"^THREAD \d+ \((\d+)\)$")
_NUMBER = re.compile(r"(\d{1,18})\s*$")
GLOBAL_PLANE = "Global tracks"
#: CounterDescriptor.BuiltinCounterType -> the name Perfetto gives such a counter
_COUNTER_TYPES = {1: "thread_time", 2: "thread_instruction_count"}


class Tracks:
    """Every track named so far: ``info[code]`` holds what is known of it.

    A pid used again by a new process (a process descriptor with another uuid) starts a
    new *generation* of that pid, as Perfetto's trace processor does: threads described
    after it belong to the new process."""

    def __init__(self) -> None:
        self.by_key: dict[tuple, int] = {}
        self.uuids: dict[int, int] = {}  # track uuid -> code (read by the compiled walk too)
        self.info: list[dict[str, Any]] = []
        self.processes: dict[tuple[int, int], dict[str, Any]] = {}  # (pid, generation) -> name, labels, order
        self.generation: dict[int, int] = {}  # pid -> its current generation
        #: GPU counter id -> (GPU, name, forwards-looking) of its first legacy descriptor
        #: (Perfetto keeps these ids for the whole trace, the first descriptor of an id wins)
        self.gpu_counter_specs: dict[int, tuple[int, str, bool]] = {}

    def _code(self, key: tuple) -> int:
        c = self.by_key.get(key)
        if c is None:
            c = self.by_key[key] = len(self.info)
            self.info.append({})
        return c

    def of_uuid(self, uuid: int) -> int:
        c = self.uuids.get(uuid)
        if c is None:
            c = self.uuids[uuid] = len(self.info)
            self.info.append({})
        return c

    def describe(self, td: Any) -> None:
        c = self.of_uuid(td.uuid)
        info = self.info[c]
        info["described"] = True
        if td.HasField("parent_uuid"):
            info["parent"] = td.parent_uuid
        which = td.WhichOneof("static_or_dynamic_name")
        if which:
            info["name"] = text(getattr(td, which))
        if td.HasField("sibling_order_rank"):
            info["rank"] = td.sibling_order_rank
        if td.HasField("process"):
            p = td.process
            info["process"] = self.process(p.pid, text(p.process_name or (p.cmdline[0] if p.cmdline else "")),
                                           list(p.process_labels), uuid=td.uuid)
        if td.HasField("thread"):
            t = td.thread
            info["thread"] = (t.pid, t.tid)
            info.setdefault("generation", self._current(t.pid))
            if t.thread_name:
                info["name"] = text(t.thread_name)
            self.by_key.setdefault(("thread", t.pid, t.tid), c)
        if td.HasField("counter"):
            k = td.counter
            info["counter"] = (bool(k.is_incremental), k.unit_multiplier or 1, k.type)

    def _current(self, pid: int) -> int:
        """The current generation of ``pid`` (a nameless process is made for a pid first
        seen through a thread)."""
        if pid not in self.generation:
            self.process(pid, "", [])
        return self.generation[pid]

    def process(self, pid: int, name: str, labels: list[str], weak: bool = False, uuid: int | None = None
                ) -> tuple[int, int]:
        """(pid, generation) of a process named by a descriptor or a process tree."""
        name, labels = text(name), [text(x) for x in labels]
        g = self.generation.get(pid)
        p = self.processes.get((pid, g)) if g is not None else None
        if p is not None and uuid is not None and p["uuid"] not in (None, uuid):  # the pid was reused
            g, p = g + 1, None  # type: ignore[operator]
        if p is None:
            g = 0 if g is None else g
            self.generation[pid] = g
            self.processes[(pid, g)] = {"name": name, "labels": labels, "uuid": uuid, "order": len(self.processes)}
        else:
            if name and (not weak or not p["name"]):
                p["name"] = name
                p["labels"] = labels or p["labels"]
            if p["uuid"] is None:
                p["uuid"] = uuid
        return pid, g  # type: ignore[return-value]

    def process_track(self, pid: int) -> int:
        """The track of the current process of ``pid`` itself (legacy process-scoped events)."""
        key = (pid, self._current(pid))
        c = self._code(("process",) + key)
        self.info[c]["process"] = key
        return c

    def thread(self, pid: int, tid: int, name: str, weak: bool = False) -> int:
        name = text(name)
        c = self._code(("thread", pid, tid))
        info = self.info[c]
        info.setdefault("thread", (pid, tid))
        info.setdefault("generation", self._current(pid))
        if name and (not weak or "name" not in info):
            info["name"] = name
        return c

    def pid_of(self, code: int) -> int | None:
        info = self.info[code]
        if "thread" in info:
            return info["thread"][0]
        if "process" in info:
            return info["process"][0]
        return None

    def child_counter(self, parent: int, name: str) -> int:
        """A counter of a track's own (a thread's ``thread_time``)."""
        c = self._code(("child counter", parent, name))
        self.info[c].update(counter=(False, 1, 0), name=name, parent_code=parent)
        return c

    def incremental(self, code: int) -> bool:
        return bool(self.info[code].get("counter", (False,))[0])

    def gpu_queue(self, gpu: int, queue: str) -> int:
        c = self._code(("gpu queue", gpu, queue))
        self.info[c].update(gpu=gpu, name=queue)
        return c

    def gpu_counter(self, counter_id: int) -> int:
        """The counter of a legacy descriptor's id: its GPU and name are its descriptor's,
        which may come later in the file (:meth:`describe_gpu_counters`)."""
        c = self._code(("gpu counter", counter_id))
        self.info[c].update(counter=(False, 1, 0), gpu_counter=counter_id)
        return c

    def gpu_counter_named(self, gpu: int, name: str) -> int:
        """The counter ``name`` of GPU ``gpu`` (an interned descriptor's spec)."""
        c = self._code(("gpu counter named", gpu, name))
        self.info[c].update(gpu=gpu, counter=(False, 1, 0), name=name, gpu_counter=None)
        return c

    def describe_gpu_counters(self) -> tuple[dict[int, int], set[int]]:
        """Each legacy GPU counter given its descriptor's GPU and name; returns the
        counters no descriptor describes (code -> counter id: Perfetto drops their
        samples) and those that look backwards."""
        undescribed: dict[int, int] = {}
        backwards: set[int] = set()
        for key, c in self.by_key.items():
            if key[0] != "gpu counter":
                continue
            spec = self.gpu_counter_specs.get(key[1])
            if spec is None:
                undescribed[c] = key[1]
                continue
            self.info[c].update(gpu=spec[0], name=spec[1])
            if not spec[2]:
                backwards.add(c)
        return undescribed, backwards

    # ------------------------------------------------------------------ resolution
    def layout(self, b: TraceBuilder, used: np.ndarray, derived: np.ndarray, first_names: dict[int, str]
               ) -> "Layout":
        """Planes and tracks in ``b`` for every track; ``used``: the codes events are on,
        ``derived``: those whose events are all of the ``derived`` category,
        ``first_names``: the name of the first event on each (names a nameless track)."""
        return Layout(self, b, used, derived, first_names)


class Layout:
    """Trace track of every event track code, (plane, name, incremental, multiplier) of
    every counter track code."""

    def __init__(self, tracks: Tracks, b: TraceBuilder, used: np.ndarray, derived: np.ndarray,
                 first_names: dict[int, str]):
        self.t, self.b = tracks, b
        self.first_names = first_names
        self.hint = _vendor_hint({}, b.strings)
        self.shared_names: dict[str, int] = {}
        for p in tracks.processes.values():
            self.shared_names[p["name"]] = self.shared_names.get(p["name"], 0) + 1
        self.derived = set(derived.tolist())
        self.planes: dict[Any, int] = {}
        n = len(tracks.info)
        self.track = np.full(n, -1, np.int64)
        for key in sorted(tracks.processes, key=lambda k: tracks.processes[k]["order"]):
            self.plane_of_process(key)
        want = np.zeros(n, bool)
        want[used] = True
        lanes = []
        for c, info in enumerate(tracks.info):
            if not want[c] and ("counter" in info or "process" in info or not info.get("described")):
                continue
            if LANE.match(info.get("name", "")):
                lanes.append(c)
                continue
            self.track[c] = self._track(c)
        for c in lanes:  # after the tracks they are lanes of
            self.track[c] = self._track(c)

    def plane_of_process(self, key: tuple[int, int]) -> int:
        """The plane of process ``key`` (pid, generation)."""
        if key not in self.planes:
            pid = key[0]
            p = self.t.processes.get(key, {"name": "", "labels": []})
            name = p["name"]
            m = _DEVICE_PLANE.match(name)
            if m:
                dkind, index = m.group(1), int(m.group(2))
                hint = self.hint if dkind == "GPU" else ""
                self.planes[key] = self.b.plane(name, "device", _vendor(dkind, "", hint), index, index)
            else:
                if not name or self.shared_names.get(name, 0) > 1:
                    name = f"{name} (pid {pid})" if name else f"pid {pid}"
                self.planes[key] = self.b.plane(name, "host", pid=pid)
        return self.planes[key]

    def _plane_of_gpu(self, gpu: int) -> int:
        name = f"/device:GPU:{gpu}"
        if name not in self.planes:
            self.planes[name] = self.b.plane(name, "device", self.hint, gpu, gpu)
        return self.planes[name]

    def _global(self) -> int:
        if GLOBAL_PLANE not in self.planes:
            self.planes[GLOBAL_PLANE] = self.b.plane(GLOBAL_PLANE, "host")
        return self.planes[GLOBAL_PLANE]

    def plane_of(self, c: int) -> int:
        """The plane of track code ``c``: of its nearest process or thread ancestor."""
        seen = set()
        info = self.t.info[c]
        while True:
            if "thread" in info:
                pid = info["thread"][0]
                return self.plane_of_process((pid, info.get("generation", self.t.generation.get(pid, 0))))
            if "process" in info:
                return self.plane_of_process(info["process"])
            if "gpu" in info:
                return self._plane_of_gpu(info["gpu"])
            if "parent_code" in info:
                code = info["parent_code"]
            else:
                parent = info.get("parent")
                code = self.t.uuids.get(parent) if parent is not None else None
            if code is None or code in seen:
                return self._root(info)
            seen.add(code)
            info = self.t.info[code]

    def _root(self, info: dict[str, Any]) -> int:
        """The plane of a track with no process above it: a rocprofv3 GPU track's device,
        a rocprofv3 host thread's process (when the trace has one), else Global tracks."""
        name = info.get("name", "")
        m = _ROCPROF_DEVICE.match(name)
        if m:
            index = int(m.group(1) or m.group(2))
            key = f"/device:GPU:{index}"
            if key not in self.planes:
                self.planes[key] = self.b.plane(key, "device", "AMD", index, index)
            return self.planes[key]
        if _ROCPROF_THREAD.match(name) and len(self.t.processes) == 1:
            return self.plane_of_process(next(iter(self.t.processes)))
        return self._global()

    def _thread_parent(self, c: int) -> str | None:
        """The name of the thread track a track hangs under, if it does."""
        info = self.t.info[c]
        code = info.get("parent_code")
        if code is None and info.get("parent") is not None:
            code = self.t.uuids.get(info["parent"])
        if code is None or "thread" not in self.t.info[code]:
            return None
        return self.t.info[code].get("name") or f"thread {self.t.info[code]['thread'][1]}"

    def _track(self, c: int) -> int:
        info = self.t.info[c]
        plane = self.plane_of(c)
        rank = info.get("rank")
        name = info.get("name", "")
        if "thread" in info:
            tid = info["thread"][1]
            return self.b.track(plane, name or f"thread {tid}", "thread", tid, sort_index=rank)
        if "process" in info:
            return self.b.track(plane, self.b.planes[plane].name, "line", 0, sort_index=rank)
        m = LANE.match(name)
        if m:
            base = next((t.id for t in self.b.tracks if t.plane == plane and t.name == m.group(1)), None)
            if base is not None:
                return base
        if not name:
            name = "Default Track" if c == self.t.uuids.get(0) else self.first_names.get(c, f"track {c}")
        if c in self.derived:
            return self.b.track(plane, name, "derived", 0, sort_index=rank)
        m = _ROCPROF_THREAD.match(name)
        if m and self.b.planes[plane].name != GLOBAL_PLANE:
            return self.b.track(plane, name, "thread", int(m.group(1)), sort_index=rank)
        if self.b.planes[plane].kind == "device":
            num = _NUMBER.search(name)
            return self.b.track(plane, name, "stream", int(num.group(1)) if num else 0, sort_index=rank)
        return self.b.track(plane, name, "line", 0, sort_index=rank)

    def counter(self, c: int) -> tuple[int, str, int]:
        """(plane, counter name, unit multiplier) of counter track code ``c``. polyprof's
        counters are per plane: a counter under a thread is called ``<name> (<thread>)``."""
        info = self.t.info[c]
        _, mult, ctype = info.get("counter", (False, 1, 0))
        if "gpu_counter" in info:
            name = info.get("name") or f"gpu counter {info['gpu_counter']}"
        else:
            name = info.get("name") or _COUNTER_TYPES.get(ctype) or f"counter {c}"
            thread = self._thread_parent(c)
            if thread:
                name = f"{name} ({thread})"
        return self.plane_of(c), name, mult
