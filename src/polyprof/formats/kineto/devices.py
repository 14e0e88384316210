"""Which processes are devices, of which kind and vendor (the vendor heuristics).

A pid is a device when its ``process_labels`` or ``process_name`` names one (``GPU 0``,
``MTIA:1``, a plane name polyprof wrote; the label ``NPU`` alone, msprof's, is device 0),
but a pid also labelled ``CPU`` is the host unless it holds device activity (Kineto labels
pids 0-15 ``GPU N`` whatever they are: a host process of pid 1, in a container, is
labelled both; ``collector.device_label``), or when it has only device categories
(kernels, copies) and an integer pid; the vendor comes from ``deviceProperties`` names,
version keys of the document, and the runtime calls' names (``cuda*``, ``hip*``, ``ze*``).
torch's legacy autograd profiler (torch 1.x ``export_chrome_trace`` without Kineto) writes
its ops with no category in a process named ``CPU functions`` and the CUDA work they ran
in one named ``CUDA functions`` (a thread per device index): ops, and an NVIDIA device per
thread (``legacy.py``: the plane is the track's, ``build.pair_tracks``).
TensorFlow 1.x's timeline (``tf.python.client.timeline``) names a process per GPU stream,
``/device:GPU:0/stream:13 Compute`` (``/gpu:0/...`` in older releases), its copies'
``/device:GPU:0/memcpy Compute``, and repeats every stream's kernels in ``stream:all``:
lines of that GPU, the repeat a derived one.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ...trace import keys
from ...trace.sorting import member
from . import ascend, legacy, rocprof_v1
from .codes import _distinct, _hashable, _is_id

if TYPE_CHECKING:
    from .collector import _Collector

log = logging.getLogger("polyprof")

_DEVICE_LABEL = re.compile(r"^\s*([A-Za-z][A-Za-z_]*)\s*:?\s*(\d{1,9})\s*$")
_PLANE_NAME = re.compile(r"^/device:([^:/]+):(\d{1,9})$")
_DEVICE_KINDS = {"GPU", "MTIA", "XPU", "HPU", "NPU", "TPU", "MPS", "IPU", "DEVICE"}
#: device kinds a process label may name with no index (msprof labels its Ascend processes "NPU")
_BARE_KINDS = {"NPU"}
#: TensorFlow 1.x timeline's processes of a GPU's streams and copies (not the executor's
#: ``/job:.../device:GPU:0 Compute``, host threads running the ops)
_TF_LINE = re.compile(r"^(?:/job:[^/ ]+/replica:\d+/task:\d+)?/(?:device:)?gpu:(\d{1,9})/(stream:(?:\d+|all)|memcpy)"
                      r" Compute$", re.IGNORECASE)
_TF_OP = "Op"  # the category TensorFlow 1.x's timeline gives every op
#: TensorFlow 1.x timeline's executor processes (``/job:localhost/replica:0/task:0/device:CPU:0
#: Compute``, ``/job:.../gpu:0 Compute`` in older releases): the host threads running the
#: graph's ops, each an ``Op`` event named by its type (``MatMul``), its node in the args
_TF_EXECUTOR = re.compile(r"^(?:/job:[^/ ]+/replica:\d+/task:\d+)?/(?:device:)?[A-Za-z_]+:\d{1,9} Compute$",
                          re.IGNORECASE)
#: the legacy autograd profiler's processes (string pids; spelled "CUDA Functions" too)
_LEGACY_CPU, _LEGACY_CUDA = legacy.CPU_FUNCTIONS, legacy.CUDA_FUNCTIONS
#: Categories that only occur on a device timeline (used when a pid has no labels).
_DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "mtia_ccp_events",
                      "cuda_sync", "collective_comm"}


def device_planes(col: "_Collector", top: dict[str, Any], pid_vals: list, pid_c: np.ndarray, cat_c: np.ndarray,
                  counts: np.ndarray | None = None) -> list[tuple[int, str]]:
    """(plane id, "host"|"device") for every pid code. ``counts``: events per pid code,
    when ``pid_c``/``cat_c`` hold each (pid, category) pair once (chunks.py)."""
    b = col.b
    devprops = {}
    props = top.get("deviceProperties")
    for d in props if isinstance(props, list) else []:
        if isinstance(d, dict) and isinstance(d.get("id"), int):
            devprops[d["id"]] = d
    if counts is None:
        counts = np.bincount(pid_c, minlength=len(pid_vals)) if len(pid_c) else np.zeros(len(pid_vals), int)
    dev_pids = set(_distinct(pid_c[_of_device_category(col, cat_c)]).tolist())  # pids with device-only categories
    vendor_hint = ascend.VENDOR if ascend.is_ascend(col) else _vendor_hint(top, col.b.strings)
    if not vendor_hint and any(_legacy(pv, _LEGACY_CUDA) for pv in pid_vals):
        vendor_hint = "NVIDIA"

    kinds: list[tuple[str, str, int]] = []  # (kind, device kind, index)
    shared: list[Any] = []  # pids labelled a host's and a device's that hold device activity
    legacy_gpu = [False] * len(pid_vals)  # the legacy export's CUDA functions
    for code, pv in enumerate(pid_vals):
        info = col.process.get(pv, {}) if _hashable(pv) else {}
        labels, pname = info.get("process_labels"), info.get("process_name")
        if code in dev_pids and _hashable(pv) and pv in col.device_label:  # a host pid that is a device's too
            labels = col.device_label[pv]
            shared.append(pv)
        dev = None
        m = _PLANE_NAME.match(pname) if isinstance(pname, str) else None
        if m:  # a Chrome trace polyprof wrote: processes are named after planes
            kinds.append(("device", m.group(1), int(m.group(2))))
            continue
        m = _TF_LINE.match(pname) if isinstance(pname, str) and labels is None else None
        if m:  # TensorFlow 1.x's timeline: a stream (or the copies) of a GPU
            kinds.append(("device", "GPU", int(m.group(1))))
            continue
        for text, strict in ((labels, False), (pname, True)):
            if isinstance(text, str):
                m = _DEVICE_LABEL.match(text)
                if m and m.group(1).upper() != "CPU" and (not strict or m.group(1).upper() in _DEVICE_KINDS):
                    dev = (m.group(1).upper(), int(m.group(2)))
                    break
                if not strict and text.strip().upper() in _BARE_KINDS:  # msprof's "NPU": device 0
                    dev = (text.strip().upper(), 0)
                    break
                if text.strip().upper() == "CPU" and not strict:
                    break
        if dev is None and code in dev_pids and _is_id(pv) and pv >= 0:
            dev = ("GPU", pv)
        if dev is None and labels is None and pname is None and _legacy(pv, _LEGACY_CUDA):
            dev = ("GPU", 0)
            legacy_gpu[code] = True
        kinds.append(("device", dev[0], dev[1]) if dev else ("host", "", 0))
    if shared:
        log.info("%s: process %s is labelled both CPU and a device (Kineto labels processes 0-15 as GPUs) "
                 "and holds both: its threads with device activity are the device's, the others the host's",
                 col.path, ", ".join(map(str, shared)))
    if rocprof_v1.is_rocprof_v1(col):
        _copy_lane(col, pid_vals, kinds, counts)
    ascend.mindspore_planes(col, pid_vals, kinds)  # MindSpore's timeline display: its NPU by its pids

    host_codes = [c for c, k in enumerate(kinds) if k[0] == "host" and _is_id(pid_vals[c])
                  and not _pseudo_pid(col, pid_vals[c])]
    main = max(host_codes, key=lambda c: (counts[c] if c < len(counts) else 0, -c)) if host_codes else None
    process_wide = {c[0] for c in col.counters} | {a[0] for a in col.asyncs}
    used = set(_distinct(pid_c).tolist()) | process_wide
    out: list[tuple[int, str]] = []
    for code, pv in enumerate(pid_vals):
        kind, dkind, index = kinds[code]
        if legacy_gpu[code] and code in process_wide:  # (counters, async events: device 0's plane)
            zero = legacy.device_plane(col, pv, 0, _vendor_hint(top, col.b.strings) or "NVIDIA")
            out.append((-1 if zero is None else zero, kind))
            continue
        if code not in used or legacy_gpu[code]:  # only flow endpoints or E events: no plane of its own;
            out.append((-1, kind))  # the legacy CUDA functions' threads: a plane each (legacy.device_plane)
            continue
        info = col.process.get(pv, {}) if _hashable(pv) else {}
        props = {k: v for k, v in info.items() if v is not None}
        if kind == "device":
            dp = devprops.get(index, {})
            props = {**dp, **props, **({"process_labels": col.device_label[pv]} if pv in shared else {})}
            vendor = _vendor(dkind, _vendor_text(props), vendor_hint)
            pid = pv if _is_id(pv) else index
            out.append((b.plane(keys.device_plane(dkind, index), "device", vendor, index, pid, props), "device"))
        elif code == main or not _is_id(pv) or _pseudo_pid(col, pv):
            # the main process, and Kineto's pseudo processes ("Spans", "Traces", the CUPTI
            # overhead's pid -1) on it
            pid = pid_vals[main] if main is not None else 0
            mprops = {k: v for k, v in (col.process.get(pid_vals[main], {}) if main is not None else {}).items()
                      if v is not None}
            out.append((b.plane(keys.HOST_PLANE, "host", "", 0, pid, mprops), "host"))
        else:
            out.append((b.plane(f"{keys.HOST_PLANE}:{pv}", "host", "", 0, pv, props), "host"))
    return out


def _pseudo_pid(col: "_Collector", pv: Any) -> bool:
    """A negative integer pid no process metadata names: Kineto's CUPTI overhead
    (``Activity Buffer Request``, category ``overhead``, pid -1), not a process of its own."""
    return _is_id(pv) and pv < 0 and not col.process.get(pv)


def shared_codes(col: "_Collector", planes: list[tuple[int, str]]) -> list[int]:
    """The pid codes of devices whose pid a host process labelled ``CPU`` has too."""
    pid_vals = col.id_values[id(col.pids)]
    return [c for c, (_, kind) in enumerate(planes)
            if kind == "device" and _hashable(pid_vals[c]) and pid_vals[c] in col.device_label]


def shared_host_pairs(col: "_Collector", planes: list[tuple[int, str]], uniq: np.ndarray, pair: np.ndarray,
                      cat_c: np.ndarray, ntid: int) -> set[int]:
    """The (pid code * ntid + tid code) pairs, of ``uniq`` (the distinct ones of
    ``pair``, each event's), that are a host process's threads on a device's pid: a pid
    also labelled ``CPU`` (``collector.device_label``: a host process whose pid is the
    device's index, as Kineto numbers devices), a thread of it with no device category
    (``build.pair_tracks`` puts it on the host plane)."""
    shared = shared_codes(col, planes)
    if not shared:
        return set()
    mine = uniq[member(uniq // ntid, np.array(shared, np.int64))]
    with_device = _distinct(pair[_of_device_category(col, cat_c)])
    return set(mine[~member(mine, with_device)].tolist())


def _of_device_category(col: "_Collector", cat_c: np.ndarray) -> np.ndarray:
    """Whether each event's category (``cat_c``, string ids) is one only a device's
    timeline has (:data:`_DEVICE_CATEGORIES`; only those the trace has are looked up:
    interning the others would add them to its strings, where ``device_planes``'s vendor
    hint took "cuda_sync" for a CUDA runtime call)."""
    ids = [i for i, s in enumerate(col.b.strings) if s in _DEVICE_CATEGORIES]
    return member(cat_c, np.array(ids, np.int32))


def _copy_lane(col: "_Collector", pid_vals: list, kinds: list[tuple[str, str, int]], counts: np.ndarray) -> None:
    """rocprof (v1)'s JSON puts every device's copies in one process named ``COPY`` (its
    kernels in ``GPU<n>``): with one device that has events, that process is the device's
    (its copies on the device's streams); with several, which copy ran where is in each
    copy's args alone, and the process stays a host plane."""
    busy = {k[1:] for c, k in enumerate(kinds) if k[0] == "device" and c < len(counts) and counts[c]}
    if len(busy) != 1:
        return
    for code, pv in enumerate(pid_vals):
        info = col.process.get(pv, {}) if _hashable(pv) else {}
        if kinds[code][0] == "host" and info.get("process_name") == "COPY" and not info.get("process_labels"):
            kinds[code] = ("device", *next(iter(busy)))


#: the names a converter gives copies and fills (rpd2tracing: its opType; TensorFlow 1.x's
#: timeline: ``MEMCPYHtoD``...), by their start
_COPY_NAMES = ("Memcpy", "memcpy", "MEMCPY", "Copy", "copy")
_FILL_NAMES = ("Memset", "memset", "MEMSET", "FillBuffer")


def tf_line(process_name: Any) -> str | None:
    """The line a TensorFlow 1.x timeline's GPU process is (``stream 13``, ``memcpy``,
    ``stream:all``), None for any other process."""
    m = _TF_LINE.match(process_name) if isinstance(process_name, str) else None
    if m is None:
        return None
    line = m.group(2).lower()
    return f"stream {line[7:]}" if line.startswith("stream:") and line != "stream:all" else line


def _device_category(name: str) -> str:
    if name.startswith(_COPY_NAMES):
        return keys.CAT_MEMCPY
    return keys.CAT_MEMSET if name.startswith(_FILL_NAMES) else keys.CAT_KERNEL


def _host_category(name: str) -> str:
    """A HIP or CUDA runtime call by its name ("" for anything else: left as it is)."""
    if name.startswith("hip"):
        return "hip_runtime"
    return "cuda_runtime" if name.startswith(("cuda", "cuLaunch", "cuMemcpy", "cuGraph")) else ""


#: the lines of a device that XProf's trace viewer derives from its activity (its JSON, like
#: rpd2tracing's, writes no categories): not activity of their own
_DERIVED_LINES = {keys.LINE_STEPS, keys.LINE_SECTIONS, keys.LINE_FRAMEWORK_OPS, keys.LINE_NAME_SCOPE,
                  keys.LINE_XLA_MODULES, keys.LINE_XLA_OPS, keys.LINE_SOURCE, "TensorFlow Ops",
                  "TensorFlow Name Scope", "Launch Stats"}


def _on_derived_lines(col: "_Collector", pid_c: np.ndarray, tid_c: np.ndarray) -> np.ndarray:
    """Whether each (pid, tid) code pair is a thread named as a derived line."""
    pid_vals, tid_vals = col.id_values[id(col.pids)], col.id_values[id(col.tids)]
    ntid = max(len(tid_vals), 1)
    pairs, inv = np.unique(pid_c.astype(np.int64) * ntid + tid_c, return_inverse=True)
    derived = []
    for p, t in (divmod(u, ntid) for u in pairs.tolist()):
        try:
            name = col.threads.get((pid_vals[p], tid_vals[t]), {}).get("thread_name")
        except TypeError:  # an unhashable id
            name = None
        derived.append(isinstance(name, str) and name.strip() in _DERIVED_LINES)
    return np.array(derived, bool)[inv.ravel()] if len(pairs) else np.zeros(0, bool)


def categorise_device_events(col: "_Collector", planes: list[tuple[int, str]], pid_c: np.ndarray,
                             tid_c: np.ndarray, cat_c: np.ndarray, name_c: np.ndarray) -> None:
    """Events with no category in a trace with a device plane (the Chrome JSON of
    converters such as rocmProfileData's rpd2tracing, which write none): on a device plane
    its activity, ``cat_c`` set in place to a copy or a fill where the name says so
    (``Memcpy…``/``Copy…``, ``Memset…``/``FillBuffer``), else to a kernel; on a host plane,
    HIP and CUDA runtime calls by their names (``hip…``, ``cuda…``), so flows and
    correlation find the launches. A device's lines named as XProf's derived ones (``XLA
    Ops``, ``Steps``...) are left as they are."""
    strings = col.b.strings
    dev = [code for code, (_, kind) in enumerate(planes) if kind == "device"]
    pid_vals = col.id_values[id(col.pids)]
    legacy_cpu = [code for code, (_, kind) in enumerate(planes)
                  if kind == "host" and _legacy(pid_vals[code], _LEGACY_CPU)]
    executor = [code for code, (_, kind) in enumerate(planes) if kind == "host" and _tf_executor(col, pid_vals[code])]
    if not (dev or legacy_cpu or executor) or not len(cat_c):
        return
    _tf_timeline(col, dev, pid_c, cat_c, name_c)
    _tf_ops(col, executor, pid_c, cat_c)
    empty = col.b.string_id("")
    if empty < 0:  # no event without a category
        return
    rows = np.flatnonzero(cat_c == empty)  # few or none: the pids of those alone
    if legacy_cpu and len(rows):  # the legacy autograd profiler's ops
        ops = member(pid_c[rows], np.array(legacy_cpu, pid_c.dtype))
        cat_c[rows[ops]] = col.b.intern(keys.CAT_CPU_OP)
        rows = rows[~ops]
    if not dev or not len(rows):
        return
    on_dev = member(pid_c[rows], np.array(dev, pid_c.dtype))
    if on_dev.any():  # not the lines a viewer derives from the activity (XLA Ops, Steps...)
        on_dev[on_dev] = ~_on_derived_lines(col, pid_c[rows[on_dev]], tid_c[rows[on_dev]])
    names, inv = np.unique(name_c[rows], return_inverse=True)
    texts = [strings[int(n)] for n in names.tolist()]
    for where, category in ((on_dev, _device_category), (~on_dev, _host_category)):
        cats = [category(t) for t in texts]
        if not any(cats):
            continue
        code = np.array([col.b.intern(c) if c else -1 for c in cats], np.int64)[inv.ravel()]
        take = where & (code >= 0)
        cat_c[rows[take]] = code[take]


def _tf_timeline(col: "_Collector", dev: list[int], pid_c: np.ndarray, cat_c: np.ndarray,
                 name_c: np.ndarray) -> None:
    """TensorFlow 1.x timeline's ops on a GPU's lines (category ``Op``): kernels, or copies
    and fills by name; on ``stream:all``, which repeats the streams' kernels, derived."""
    pid_vals = col.id_values[id(col.pids)]
    lines = {c: tf_line(col.process.get(pid_vals[c], {}).get("process_name")) for c in dev
             if _hashable(pid_vals[c])}
    lines = {c: line for c, line in lines.items() if line}
    strings = col.b.strings
    op = col.b.string_id(_TF_OP)
    if not lines or op < 0:
        return
    rows = np.flatnonzero((cat_c == op) & member(pid_c, np.array(sorted(lines), pid_c.dtype)))
    if not len(rows):
        return
    names, inv = np.unique(name_c[rows], return_inverse=True)
    code = np.array([col.b.intern(_device_category(strings[int(n)])) for n in names.tolist()], np.int64)
    new = code[inv.ravel()]
    repeat = [c for c, line in lines.items() if line == "stream:all"] + _tf_copy_repeats(col, lines, pid_c[rows], name_c[rows])
    if repeat:
        new[member(pid_c[rows], np.array(repeat, pid_c.dtype))] = col.b.intern(keys.CAT_DERIVED)
    cat_c[rows] = new


def _tf_copy_repeats(col: "_Collector", lines: dict[int, str | None], pids: np.ndarray, names: np.ndarray) -> list[int]:
    """The ``memcpy`` lines that repeat copies their GPU's stream lines hold: TensorFlow's
    device tracer saves each copy on its stream and again on ``memcpy`` (as ``stream:all``
    repeats the kernels). A ``memcpy`` line is a repeat when every name on it is also on a
    stream line of its GPU; else (its copies on no stream) it is the copies' only line."""
    pid_vals = col.id_values[id(col.pids)]
    gpu = {c: _TF_LINE.match(col.process[pid_vals[c]]["process_name"]).group(1) for c in lines}  # type: ignore[union-attr]
    out = []
    for c, line in lines.items():
        streams = [s for s, other in lines.items() if str(other).startswith("stream ") and gpu[s] == gpu[c]]
        if line != "memcpy" or not streams:
            continue
        mine = np.unique(names[pids == c])
        if np.isin(mine, names[member(pids, np.array(streams, pids.dtype))]).all():
            out.append(c)
    return out


def _tf_executor(col: "_Collector", pid: Any) -> bool:
    """Whether a pid is a TensorFlow 1.x timeline's executor process (:data:`_TF_EXECUTOR`)."""
    name = col.process.get(pid, {}).get("process_name") if _hashable(pid) else None
    return isinstance(name, str) and _TF_EXECUTOR.match(name) is not None


def _tf_ops(col: "_Collector", executor: list[int], pid_c: np.ndarray, cat_c: np.ndarray) -> None:
    """TensorFlow 1.x timeline's ops on its executor's processes (category ``Op``):
    framework ops, as torch's ``cpu_op`` (the host side of the graph's execution)."""
    op = col.b.string_id(_TF_OP)
    if not executor or op < 0:
        return
    rows = (cat_c == op) & member(pid_c, np.array(executor, pid_c.dtype))
    if rows.any():
        cat_c[rows] = col.b.intern(keys.CAT_CPU_OP)


_legacy = legacy.is_legacy  # whether a pid is the legacy autograd profiler's process ``name``


def legacy_plane(col: "_Collector", pid: Any, tid: Any) -> int | None:
    """The device plane of a thread of the legacy export's ``CUDA functions`` (its id: the
    device index), None for any other thread; the vendor as :func:`device_planes` gives it."""
    if not _legacy(pid, _LEGACY_CUDA):
        return None
    return legacy.device_plane(col, pid, tid, _vendor_hint({}, col.b.strings) or "NVIDIA")


def _vendor_hint(top: dict[str, Any], strings: list[str]) -> str:
    if any(k in top for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version")):
        return "NVIDIA"
    if any(k in top for k in ("roctracer_version", "hip_runtime_version", "rocm_version")):
        return "AMD"
    names = [s for s in strings[:50000]]
    if any(s.startswith("hip") for s in names):
        return "AMD"
    if any(s.startswith(("cuda", "cuLaunch", "cuMem")) for s in names):
        return "NVIDIA"
    if any(s.startswith(("ze", "sycl", "urEnqueue")) for s in names):
        return "Intel"
    return ""

#: the deviceProperties keys that name a device or its vendor: torch's Kineto writes
#: ``name`` only ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X", or "" on some ROCm
#: builds); rocprofv3's agents, which polyprof's exports carry, name the ISA (``name``:
#: "gfx950") beside ``product_name`` and ``vendor_name`` ("AMD")
_VENDOR_KEYS = ("vendor_name", "vendor", "product_name", "marketing_name", "name")


def _vendor_text(props: dict[str, Any]) -> str:
    """The texts of a device's properties that may name its vendor, joined."""
    return " ".join(v for k in _VENDOR_KEYS if isinstance(v := props.get(k), str))


def _vendor(dkind: str, name: str, hint: str) -> str:
    low = name.lower()
    if dkind == "MTIA":
        return "Meta"
    if dkind == "XPU" or "intel" in low:
        return "Intel"
    if any(s in low for s in ("nvidia", "tesla", "geforce", "quadro", "rtx")):
        return "NVIDIA"
    if any(s in low for s in ("amd", "radeon", "instinct")) or any(w[:3] == "gfx" and w[3:4].isdigit()
                                                                  for w in low.split()):  # an AMD ISA: gfx950
        return "AMD"
    return hint
