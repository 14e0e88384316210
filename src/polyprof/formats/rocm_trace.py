"""The Trace of what a ROCm profiler recorded (rocpd databases, rocprofv3 JSON), from parts.

Both readers describe the same things: processes, their threads, agents (GPUs) with
queues and streams, kernel dispatches and copies on the GPUs, HIP/HSA API calls and
ROCTx ranges on the threads, linked by correlation ids. This module makes one Trace of
them: a source per process, ``/host:CPU`` with a track per thread, ``/device:GPU:<n>``
per GPU agent with a track per stream (or queue), a flow from each API call to the
device work with its correlation id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import logs
from ..trace import keys
from ..trace import metadata_keys as mkeys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace
from ..trace.sorting import unique
from .parts import Part, flow_pairs, group_rows

log = logs.kept(__name__)

#: rocprofiler-sdk's buffer-record kinds -> polyprof categories (trace/categories.py)
API_CATEGORIES = {"HIP_RUNTIME_API": "hip_runtime", "HIP_RUNTIME_API_EXT": "hip_runtime",
                  "HIP_COMPILER_API": "hip_compiler", "HIP_COMPILER_API_EXT": "hip_compiler",
                  "HSA_CORE_API": "hsa_api", "HSA_AMD_EXT_API": "hsa_api", "HSA_IMAGE_EXT_API": "hsa_api",
                  "HSA_FINALIZE_EXT_API": "hsa_api", "RCCL_API": "rccl_api",
                  "MARKER_CORE_API": "roctx", "MARKER_CORE_RANGE_API": "roctx", "MARKER_CONTROL_API": "roctx",
                  "MARKER_NAME_API": "roctx"}
CAT_ROCTX, CAT_ROCTX_MARK = "roctx", "roctx_mark"

#: rocprofiler-sdk's memory copy operations -> the names Kineto gives copies
COPY_NAMES = {"MEMORY_COPY_HOST_TO_HOST": "Memcpy HtoH", "MEMORY_COPY_HOST_TO_DEVICE": "Memcpy HtoD",
              "MEMORY_COPY_DEVICE_TO_HOST": "Memcpy DtoH", "MEMORY_COPY_DEVICE_TO_DEVICE": "Memcpy DtoD"}


def api_category(kind: str) -> str:
    return API_CATEGORIES.get(kind, kind.lower())


def copy_name(op: str) -> str:
    return COPY_NAMES.get(op, op)


def is_mark(op: str) -> bool:
    """ROCTx operations that are instants (``roctxMarkA``), not ranges."""
    return "mark" in op.lower()


@dataclass
class Process:
    pid: int
    host: str = ""
    name: str = ""
    threads: dict[int, str] = field(default_factory=dict)  # OS tid -> name


@dataclass
class Agent:
    index: int  # the GPU's index among the process's GPUs (type index)
    gpu: bool = True
    properties: dict[str, Any] = field(default_factory=dict)


def build(parts: list[Part], processes: dict[int, Process], agents: dict[tuple[int, int], Agent],
          queue_names: dict[tuple[int, int, int], str], metadata: dict[str, Any], label: str,
          anchor: dict[str, int] | None = None) -> Trace:
    """``agents`` and ``queue_names`` are keyed by (process key, agent key[, queue key]);
    a part's ``dev`` is its agent key and ``tid`` its stream key, or minus its queue key
    where the work has no stream (device parts), or its OS thread id (host parts). A row
    that ends before it starts (a damaged file) is kept 0 ns long, with a warning."""
    backwards: list[str] = []
    parts = [p.forward_times(backwards) for p in parts if len(p)]  # rows that end before they start: said
    for note in backwards:
        log.warning("%s: %s", label, note)
    if backwards:
        metadata = {**metadata, mkeys.WARNINGS: [*metadata.get(mkeys.WARNINGS, []), *backwards]}
    b = TraceBuilder()
    procs = sorted({int(g) for p in parts for g in unique(p.gpid).tolist()})
    several = len(procs) > 1
    source_of = {}
    for g in procs:
        pr = processes.get(g, Process(pid=max(g, 0)))
        source_of[g] = b.source(host=pr.host, pid=pr.pid, label=f"{label} pid {pr.pid}" if several else "",
                                clock={"wall_anchor": dict(anchor)} if anchor else None,
                                metadata={"process_name": pr.name} if pr.name else None)
    for p in parts:
        inv, uniq = group_rows(p.gpid, p.dev, p.tid)
        track_of = np.empty(len(uniq), np.int32)
        for i, (g, d, t) in enumerate(uniq.tolist()):
            src = source_of[g]
            pr = processes.get(g, Process(pid=max(g, 0)))
            if p.device:
                ag = agents.get((g, d), Agent(index=d))
                plane = b.plane(keys.device_plane("GPU", ag.index), "device", "AMD", ag.index, ag.index,
                                ag.properties, source=src)
                name = queue_names.get((g, d, t)) or (f"stream {t}" if t >= 0 else f"queue {-t}")
                track_of[i] = b.track(plane, name, "stream", t)
            else:
                plane = b.plane(keys.HOST_PLANE, "host", "", 0, pr.pid,
                                {"process_name": pr.name} if pr.name else None, source=src)
                track_of[i] = b.track(plane, pr.threads.get(t) or f"thread {t}", "thread", t)
        names = b.intern_many(np.array(p.name_values, dtype=object))[p.names] if p.name_values else p.names
        cats = np.array([b.intern(c) for c in p.categories], np.int32)[p.category]
        p.rows = b.events(track_of[inv], names.astype(np.int32), p.start, p.end - p.start,
                          cats, p.stats)
    launches = [p for p in parts if not p.device and p.corr is not None]
    devices = [p for p in parts if p.device and p.corr is not None]
    if launches and devices:
        cat = lambda ps, f: np.concatenate([getattr(p, f) for p in ps])  # noqa: E731
        fsrc, fdst, ids = flow_pairs(cat(launches, "gpid"), cat(launches, "corr"), cat(launches, "rows"),
                                   cat(devices, "gpid"), cat(devices, "corr"), cat(devices, "rows"))
        if len(fsrc):
            b.flows(fsrc, fdst, ids, category="ac2g")
    if anchor:
        metadata = {**metadata, "wall_anchor": anchor}
    b.metadata.update(metadata)
    return b.build()
