"""Write any Trace as Kineto-format JSON, so it opens where ``torch.profiler`` traces open
(Perfetto, chrome://tracing, Holistic Trace Analysis, TensorBoard's profiler plugin).

Kineto's conventions: device planes become pid = device index with one tid per stream,
host planes keep their process id; ``ts``/``dur`` are µs relative to
``baseTimeNanoseconds`` (printed with ns precision); flows become ``s``/``f`` pairs
(``bp: e``); stats go back to args under Kineto's names (``correlation``,
``External id``), the ids of a trace of several sources made unique per source
(``formats/export_ids.py``). Traces on CLOCK_MONOTONIC are moved to wall-clock time through their
``wall_anchor``, as Kineto's timestamps are wall-clock based. Before the events, the
header torch writes: ``distributedInfo``, the host the trace was recorded on
(``host_name``) and, for a trace read from a Kineto file, that file's own top-level keys
(``trace_id``, ``record_shapes``, the CUDA and CUPTI versions...). After the events,
polyprof's own key (``polyprof``): the clock, the shift to the wall clock, and the
trace's warnings and plugin errors (``warnings``, ``plugin_errors``: formats/chrome.py's
``notes``), which polyprof's reader restores; viewers and HTA ignore it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.memory import export_counters
from ..formats.chrome import distributed_info, host_name, spaced
from ..formats.export_ids import SourceIds
from ..formats.export_notes import HOST_NAME, notes
from ..formats.device_list import device_properties
from ..formats.kineto_view import copy_names, device_streams, kineto_ids, stream_handles, time_base
from ..formats.jsonfile import write_json
from ..trace import metadata_keys as mkeys

#: polyprof stat key -> Kineto arg name (the reader's mapping, reversed).
_ARG_NAMES = {keys.CORRELATION_ID: "correlation", keys.EXTERNAL_ID: "External id"}
#: Zero-length events of these kinds stay complete events ("X"); others become instants.
_X_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.RUNTIME, Kind.CPU_OP, Kind.ANNOTATION,
            Kind.DEVICE_ANNOTATION, Kind.STEP, Kind.PYTHON, Kind.COLLECTIVE)


def _us(ns: np.ndarray) -> list[float]:
    """Relative ns -> µs floats that print as exact three-decimal values."""
    return (np.asarray(ns, np.int64) / 1000.0).tolist()


#: what :func:`correlation_offset` adds to small correlation ids
HTA_ID_OFFSET = 1 << 15


def correlation_offset(ids: np.ndarray, n_rows: int) -> int:
    """What to add to the correlation ids so that HTA can load the file: 0 for most traces.

    HTA (0.5) stores the ``correlation`` column in the smallest integer type that holds
    its values (-1 included), then writes event row numbers into a copy of it: with ids
    that fit int8 or int16 and more rows than that type holds (OpenCL ids count from 1),
    it raises a TypeError while loading. Such ids are written plus :data:`HTA_ID_OFFSET`
    (ids and links stay one to one; docs/analysis.md)."""
    if not len(ids):
        return 0
    top = int(ids.max())
    for bound in (127, 32767):  # int8, int16: plus the offset, the ids need int32
        if top <= bound:
            return HTA_ID_OFFSET if n_rows > bound else 0
    return 0


def _arg_value(v: Any) -> Any:
    """Stat value -> JSON arg; JSON text that the reader made of lists/dicts goes back to JSON."""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str) and v[:1] in ("[", "{"):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            return v
    return v


def to_kineto(trace: Trace, distributed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Kineto JSON document of a trace (a dict ready for orjson); ``distributed``: keys
    that replace those of its ``distributedInfo`` (a job's rank and world size)."""
    c = export_counters(trace)  # with the memory series as counter tracks
    shift, base = time_base(trace, c)
    pids, tids = kineto_ids(trace)
    out = _name_records(trace, pids, tids)
    if trace.n_events:
        out += _event_records(trace, pids, tids, shift - base)
    if len(c["ts_ns"]):
        cts = _us(c["ts_ns"] + shift - base)
        for pl, nm, t, v in zip(c["plane"].tolist(), c["name"].tolist(), cts, c["value"].tolist()):
            if v != v or v in (float("inf"), float("-inf")):  # no JSON number: left out, as formats/chrome.py
                continue
            name = trace.strings[nm]
            out.append({"ph": "C", "name": name, "pid": pids[pl], "tid": 0, "ts": t, "args": {name: v}})
    meta = trace.metadata
    doc: dict[str, Any] = {"schemaVersion": meta.get(mkeys.SCHEMA_VERSION, 1),
                           "deviceProperties": device_properties(trace)}
    dist = {**distributed_info(trace), **(distributed or {})}
    if dist:
        doc["distributedInfo"] = dist
    doc.update(_file_header(trace))
    host = host_name(trace)
    if host:
        doc[HOST_NAME] = host
    doc["traceEvents"] = out
    doc["traceName"] = str(meta.get(mkeys.TRACE_NAME) or (meta.get(mkeys.FILE_SOURCE) or {}).get("path", "polyprof"))
    doc["displayTimeUnit"] = "ms"
    doc["baseTimeNanoseconds"] = base
    # (with the trace's warnings and plugin errors, which the reader restores)
    doc["polyprof"] = {"clock": meta.get(mkeys.CLOCK_NAME, ""), "wall_shift_ns": shift, **notes(trace, shift)}
    return doc


#: top-level keys of a read file that are not copied as its header: polyprof's own
#: exports' (the Chrome export's ``otherData`` holds times from its own origin, the
#: Kineto export's ``polyprof`` its clock) and the host (``host_name``: the sources'),
#: written anew
_NOT_HEADER = frozenset(("otherData", "polyprof", "traceEvents", HOST_NAME))


def _file_header(trace: Trace) -> dict[str, Any]:
    """The top-level keys of the Kineto / Chrome file the trace was read from that
    polyprof does not declare (``trace/metadata_keys.py``: the reader keeps them
    verbatim), as torch wrote them: ``trace_id``, ``record_shapes``, the CUDA driver,
    runtime and CUPTI versions, a user's ``add_metadata_json`` keys..."""
    return {k: v for k, v in trace.metadata.items()
            if k not in mkeys.DECLARED and k not in _NOT_HEADER and isinstance(k, str)}


def _name_records(trace: Trace, pids: list[int], tids: list[int]) -> list[dict[str, Any]]:
    """``M`` records: process names, labels and sort order per plane, thread names per track."""
    out: list[dict[str, Any]] = []
    for p, pid in zip(trace.planes, pids):
        props = p.properties or {}
        if p.kind == "device":
            label = f"{p.name.split(':')[-2] if p.name.count(':') >= 2 else 'GPU'} {p.index}"
        else:
            label = "CPU"
        out.append({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                    "args": {"name": props.get("process_name") or p.name}})
        out.append({"name": "process_labels", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                    "args": {"labels": props.get("process_labels") or label}})
        sort = props.get("process_sort_index")
        out.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                    "args": {"sort_index": sort if isinstance(sort, int) else
                             (16777216 + p.index if p.kind == "device" else pid)}})
    for t, tid in zip(trace.tracks, tids):
        pid = pids[t.plane]
        out.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": t.name}})
        out.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": tid,
                    "args": {"sort_index": t.sort_index}})
    return out


def _event_records(trace: Trace, pids: list[int], tids: list[int], shift: int) -> list[dict[str, Any]]:
    """``X``/``i`` records of the events (times moved by ``shift`` ns) and ``s``/``f`` of the flows."""
    ev, n = trace.events, trace.n_events
    track_pid = np.array([pids[t.plane] for t in trace.tracks], np.int64)
    track_tid = np.array(tids, np.int64)
    pid_l = track_pid[ev["track"]].tolist()
    tid_l = track_tid[ev["track"]].tolist()
    ts_l = _us(ev["start_ns"] + shift)
    dur_l = _us(ev["dur_ns"])
    names, cats = trace.names().tolist(), trace.categories().tolist()
    kinds = trace.kinds
    on_host = np.array([p.kind != "device" for p in trace.planes], bool)[trace.track_plane][ev["track"]]
    # Kineto writes every device record as a complete event, even of zero length
    complete = ((ev["dur_ns"] > 0) | np.isin(kinds, np.asarray(_X_KINDS, np.int8))
                | (~on_host & (kinds != Kind.MARK))).tolist()
    ids = SourceIds(trace)  # correlation, external and flow ids unique per source (formats/export_ids.py)
    args = _event_args(trace, ids)
    _hlo_cost_args(trace, args)
    _device_args(trace, args, tids, pids)
    _copy_names(trace, names, args)
    _profiler_steps(trace, names, cats, args)
    out: list[dict[str, Any]] = []
    for i in range(n):
        if complete[i]:
            e = {"ph": "X", "cat": cats[i], "name": names[i], "pid": pid_l[i], "tid": tid_l[i],
                 "ts": ts_l[i], "dur": dur_l[i]}
        else:
            e = {"ph": "i", "s": "t", "cat": cats[i], "name": names[i], "pid": pid_l[i], "tid": tid_l[i],
                 "ts": ts_l[i]}
        if args[i]:
            e["args"] = args[i]
        out.append(e)
    fl = trace.flows
    used: set[tuple[str, int]] = set()
    for k, (s, d, fid, fc) in enumerate(zip(fl["src"].tolist(), fl["dst"].tolist(), ids.flow_ids.tolist(),
                                             fl["category"].tolist())):
        cat = trace.strings[fc] or "ac2g"
        ident = fid if fid > 0 and (cat, fid) not in used else 10 ** 12 + k
        used.add((cat, ident))
        out.append({"ph": "s", "id": ident, "pid": pid_l[s], "tid": tid_l[s], "ts": ts_l[s],
                    "cat": cat, "name": cat})
        out.append({"ph": "f", "id": ident, "pid": pid_l[d], "tid": tid_l[d], "ts": ts_l[d],
                    "cat": cat, "name": cat, "bp": "e"})
    return out


def _event_args(trace: Trace, ids: SourceIds) -> list[dict[str, Any] | None]:
    """Each event's args: its stats under Kineto's names (None: no stats), the id
    columns as ``ids`` writes them."""
    args: list[dict[str, Any] | None] = [None] * trace.n_events
    # the records HTA may number: events, flow ends, counters, names (an upper bound)
    n_rows = (trace.n_events + 2 * len(trace.flows["src"]) + len(trace.counters["ts_ns"])
              + 3 * len(trace.planes) + 2 * len(trace.tracks))
    for key, col in trace.stats.items():
        name = _ARG_NAMES.get(key, key)
        values = ids.values(key, col)
        vals = values.tolist() if col.kind in "iuf" else [_arg_value(v) for v in values]
        if key == keys.CORRELATION_ID and col.kind in "iu":
            moved = correlation_offset(values, n_rows)
            vals = [v + moved if v else v for v in vals] if moved else vals  # (0: no API call, as CUPTI's)
        if key == keys.STREAM and col.kind in "iu":
            # a runtime call's stream argument on the host is a handle (ROCm: "0x0");
            # device activity and framework ops (Triton's cpu_op) have an integer
            handle = stream_handles(trace)[col.rows].tolist()
            vals = [f"0x{v:x}" if h and v >= 0 else v for v, h in zip(vals, handle)]
        for r, v in zip(col.rows.tolist(), vals):
            a = args[r]
            if a is None:
                a = args[r] = {}
            a[name] = v
    return args


def _hlo_cost_args(trace: Trace, args: list[dict[str, Any] | None]) -> None:
    """The FLOPs an XSpace's HLO gives its XLA ops, as args (``xla_costs.add_cost_args``)."""
    if keys.HLO_OP in trace.stats:
        from ..formats.xspace.xla_costs import add_cost_args  # the HLO decoder: only a trace with XLA ops

        add_cost_args(trace, args)


def _profiler_steps(trace: Trace, names: list[str], cats: list[str], args: list[dict[str, Any] | None]) -> None:
    """Steps that torch.profiler did not mark (``polyprof.step()``, JAX's and TF's step
    annotations) written as torch marks them, ``ProfilerStep#N`` of ``user_annotation``:
    HTA and TensorBoard's torch plugin find a trace's steps by that name alone. The
    event's own name and category stay in its args (``polyprof_name``,
    ``polyprof_category``). Not XProf's device step markers (a TensorFlow GPU XSpace's
    ``Steps`` line): events of a device, where HTA looks for no step."""
    from ..derive import cache  # the steps, found only for a trace this export writes

    steps = cache.steps(trace)
    if steps.source in ("", "ProfilerStep", "xprof"):
        return
    for r, n in zip(steps.rows.tolist(), steps.number.tolist()):
        a = args[r]
        if a is None:
            a = args[r] = {}
        a["polyprof_name"], a["polyprof_category"] = names[r], cats[r]
        names[r], cats[r] = f"ProfilerStep#{n}", "user_annotation"


def _device_args(trace: Trace, args: list[dict[str, Any] | None], tids: list[int], pids: list[int]) -> None:
    """Kineto's ``stream`` and ``device`` args on device activity that has no stream
    (OpenCL queues, XLA ops; ``formats/kineto_view.py: device_streams``): HTA takes device
    kernels to be the events with a stream."""
    rows, streams = device_streams(trace, tids)
    if not len(rows):
        return
    devices = [pids[p] for p in trace.track_plane[trace.events["track"][rows]].tolist()]
    for r, stream, device in zip(rows.tolist(), streams.tolist(), devices):
        a = args[r]
        if a is None:
            a = args[r] = {}
        a["stream"] = stream
        a.setdefault("device", device)


def _copy_names(trace: Trace, names: list[str], args: list[dict[str, Any] | None]) -> None:
    """Copies and fills named as Kineto names them (``Memcpy HtoD (WriteBuffer (HtoD))``,
    ``formats/kineto_view.py: copy_names``), where HTA would not type their own names as
    memory; the own name stays in the new one's parentheses and in ``polyprof_name``."""
    cn = copy_names(trace)
    for r, k in zip(cn.rows.tolist(), cn.which.tolist()):
        a = args[r]
        if a is None:
            a = args[r] = {}
        a["polyprof_name"] = names[r]
        names[r] = cn.names[k]


def write(trace: Trace, path: str | Path, distributed: dict[str, Any] | None = None) -> Path:
    """Write ``trace`` as Kineto JSON (gzipped when the name ends with ``.gz``;
    ``distributed``: as :func:`to_kineto`'s). The ``distributedInfo`` is spaced as Kineto
    writes it (``"rank": 1``): HTA finds a file's rank with a pattern that needs the
    space, and took every compact file for rank 0."""
    path = Path(path)
    doc = to_kineto(trace, distributed)
    if isinstance(doc.get("distributedInfo"), dict):
        doc["distributedInfo"] = spaced(doc["distributedInfo"])
    return write_json(doc, path)


def rank_file_name(trace: Trace, rank: int) -> str:
    """The name Kineto's ``tensorboard_trace_handler`` gives a rank's file,
    ``<host>_<pid>.<ms>.pt.trace.json.gz`` (the host and pid the rank was recorded in,
    ``rank<N>`` where the trace does not name both; ms: its first time, wall clock)."""
    src = trace.sources[0] if trace.sources else None
    host = re.sub(r"[^A-Za-z0-9.-]", "-", src.host) if src is not None and src.host else ""
    worker = f"{host}_{src.pid}" if src is not None and host and src.pid > 0 else f"rank{rank}"
    shift, base = time_base(trace)
    first = int(trace.events["start_ns"].min()) + shift if trace.n_events else base
    return f"{worker}.{max(first, 0) // 1_000_000}.pt.trace.json.gz"
