"""What XProf's roofline_model and op_profile read for the FLOPs of a GPU trace's ops.

XProf gives a GPU event FLOPs only when the event is an XLA op: its ``hlo_op`` names an
instruction of an HLO module stored on the ``/host:metadata`` plane (a ``Hlo Proto``
stat on the event metadata whose id is the ``program_id`` the event carries); then the
event's own ``flops`` and ``bytes_accessed`` stats are its cost (xprof
``ConvertDeviceTraceXPlaneToOpMetricsDb``). An event with only ``tf_op`` (a framework
op) counts 0 FLOPs, so a PyTorch trace exported with ``tf_op`` alone shows 0 FLOP/s.

So, for a trace with framework-op costs (``analyze.efficiency``: the trace's own
figures or estimates from shapes) and no XLA ops of its own, the writer adds:

- one HLO module, ``polyprof_framework_ops``, with one ``custom-call`` instruction per
  (costed op, device op) pair (the instruction's name: the op's name made a valid HLO
  name, ``aten::addmm`` -> ``aten__addmm``, with the device op's after a dot where the
  op's work falls under several; its ``op_name`` / ``op_type`` metadata: the device op,
  cut so that XProf's ``op_name:op_type`` reads as it, so XProf's framework-op view keeps
  polyprof's device ops), shape ``()`` so XLA's cost analysis gives it nothing of its own;
- on each device activity, the innermost costed op around its launch (as an XLA op is
  the innermost unit of work): ``hlo_op`` and ``program_id`` naming its instruction, and
  ``flops`` / ``bytes_accessed``: that op's *own* figures (less its costed children's:
  ``aten::linear`` keeps none of its ``aten::addmm``'s, so each FLOP is counted once)
  shared among the activities each call launched by duration, then divided evenly among
  all occurrences of the instruction. XProf keeps one value per occurrence and merges
  back-to-back occurrences (value × count), so equal values make its sums exact
  whatever it merges: its FLOP rate of an op that launches its work itself is
  polyprof's ``op_efficiency`` rate (total FLOPs ÷ summed device time); per step it
  apportions the FLOPs by the step's share of the occurrences;
- on each GPU plane XProf's device capabilities, from polyprof's peaks
  (``analyze.peaks``) and Kineto's ``deviceProperties``: ``peak_teraflops_per_second``
  (at the precision most model FLOPs are in), ``memory_bandwidth`` (bytes/s),
  ``core_count``, ``compute_cap_major`` / ``compute_cap_minor``, ``memory_size``,
  ``device_vendor`` (none on a plane that has XProf's own: a profiler's XSpace).

Only what the trace lacks is added, and every added key is listed for polyprof's
reader to drop, so polyprof -> XSpace -> polyprof keeps the trace as it was. A trace that
already carries ``flops`` on its host ops (torch's ``flops`` arg) keeps them; the device
activities' ``flops`` go on the device planes, which name them (``polyprof.added``) for
the reader to drop there alone. Where the trace has ``flops`` on a device plane
already, its activities get none of polyprof's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..analyze.common import device_view
from ..analyze.devops import device_op_names
from ..analyze.efficiency import costed_rows, main_precision, model_precisions, resolve_peak
from ..derive import cache
from ..derive.intervals import innermost, nesting_depth
from ..formats.perfetto_wire import message
from ..trace import keys
from ..trace.core import Trace
from ..trace.model import Plane
from .xspace_plane import PlaneWriter
from ..trace.sorting import unique

METADATA_PLANE = "/host:metadata"  # tsl kMetadataPlaneName
HLO_PROTO = "Hlo Proto"  # tsl StatType::kHloProto
HLO_OP = keys.HLO_OP
PROGRAM_ID = keys.PROGRAM_ID
FLOPS = keys.FLOPS
BYTES_ACCESSED = keys.BYTES_ACCESSED
MODULE_NAME = "polyprof_framework_ops"
#: the module's program id (any id the trace's events do not use: it has no XLA ops)
PROGRAM = 1

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def hlo_name(op: str) -> str:
    """``op`` as XLA names an instruction (XLA's name sanitizer): letters, digits, ``_``
    ``.`` ``-``, the first a letter or ``_``, no leading ``__``."""
    s = _UNSAFE.sub("_", op) or "_"
    if not (s[0].isalpha() or s[0] == "_"):
        s = "_" + s[1:]
    if s.startswith("__") and not s.startswith("__xla_"):
        s = "a" + s[1:]
    return s


@dataclass
class DeviceCosts:
    """The XLA-op view of a trace's costed framework ops."""

    rows: np.ndarray  # device activity rows, ascending
    instruction: np.ndarray  # per row: index into ``names``
    names: list[str]  # instruction names (unique, valid HLO names)
    ops: list[str]  # the costed framework op of each instruction
    device_ops: list[str]  # the op XProf's framework-op view puts its time under (``tf_op``)
    flops: np.ndarray  # int64 per instruction: each occurrence's FLOPs
    bytes: np.ndarray  # int64 per instruction: each occurrence's bytes


def device_costs(trace: Trace) -> DeviceCosts | None:
    """Each device activity launched inside a costed framework op, with its share of the
    innermost such op's own figures (module docstring); None when there are none, or the
    trace has XLA ops of its own (``hlo_op``). Computed once per trace."""
    return cache.memo(trace, "xprof_device_costs", _device_costs)


def _device_costs(trace: Trace) -> DeviceCosts | None:
    if HLO_OP in trace.stats or PROGRAM_ID in trace.stats:
        return None
    rows, on_device, c = costed_rows(trace)
    host = np.flatnonzero(~on_device)
    if not len(host):
        return None
    ops = rows[host]
    v = device_view(trace)
    has = np.flatnonzero(v.launch >= 0)
    if not len(has):
        return None
    ev = trace.events
    th = cache.threads(trace)
    o_th, o_st = th[ev["track"][ops]], ev["start_ns"][ops]
    o_en = o_st + ev["dur_ns"][ops]
    launch = v.launch[has]
    hit = innermost(o_th, o_st, o_en, th[ev["track"][launch]], ev["start_ns"][launch])
    sel = hit >= 0
    if not sel.any():
        return None
    at, call = has[sel], hit[sel]  # positions in the device view; the innermost costed op of each
    dev_rows = v.rows[at]
    own_f = exclusive(o_th, o_st, o_en, np.nan_to_num(c.flops[host]))
    own_b = exclusive(o_th, o_st, o_en, np.nan_to_num(c.bytes[host]))
    # each call's own figures shared among the activities it launched itself, by duration
    # (all equal if none lasts)
    dur = ev["dur_ns"][dev_rows].astype(np.float64)
    n_calls = len(ops)
    call_dur = np.bincount(call, weights=dur, minlength=n_calls)
    call_n = np.bincount(call, minlength=n_calls).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(call_dur[call] > 0, dur / call_dur[call], 1.0 / call_n[call])
    f = own_f[call] * share
    b = own_b[call] * share
    # one instruction per (costed op, device op): XProf's framework-op view stays per device op
    op_names_ = np.asarray(trace.strings, dtype=object)[ev["name"][ops[call]]]
    dev_ops = device_op_names(trace)[at]
    pairs = [f"{o}\0{d}" for o, d in zip(op_names_.tolist(), dev_ops.tolist())]
    keys_, inv = np.unique(np.asarray(pairs, dtype=object).astype(str), return_inverse=True)
    count = np.bincount(inv, minlength=len(keys_))
    per_f = np.rint(np.bincount(inv, weights=f, minlength=len(keys_)) / count).astype(np.int64)
    per_b = np.rint(np.bincount(inv, weights=b, minlength=len(keys_)) / count).astype(np.int64)
    split = [k.split("\0", 1) for k in keys_.tolist()]
    parts: dict[str, int] = {}
    for o, _ in split:
        parts[o] = parts.get(o, 0) + 1
    names: list[str] = []
    taken: set[str] = set()
    for o, d in split:
        base = name = hlo_name(o) if parts[o] == 1 else f"{hlo_name(o)}.{hlo_name(d)}"
        k = 0
        while name in taken:
            k += 1
            name = f"{base}.{k}"
        taken.add(name)
        names.append(name)
    order = np.argsort(dev_rows, kind="stable")
    return DeviceCosts(dev_rows[order], inv[order].astype(np.int64), names, [o for o, _ in split],
                       [d for _, d in split], per_f, per_b)


def exclusive(thread: np.ndarray, start: np.ndarray, end: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Each span's ``value`` less its children's (the spans directly inside it on its
    thread), at least 0: an ``aten::linear``'s FLOPs are its ``aten::addmm``'s, so it
    keeps none of its own and each FLOP is counted once."""
    parent = np.full(len(value), -1, np.int64)
    order, _, depth = nesting_depth(thread, start, end)
    for d in range(1, int(depth.max()) + 1 if len(depth) else 0):
        child, cand = np.flatnonzero(depth == d), np.flatnonzero(depth == d - 1)
        k = np.searchsorted(cand, child) - 1  # the nearest span one level up before it
        p = cand[np.maximum(k, 0)]
        ok = (k >= 0) & (thread[order[p]] == thread[order[child]])
        parent[order[child[ok]]] = order[p[ok]]
    empty = np.flatnonzero(end <= start)  # an instant op: the span around its time
    if len(empty):
        parent[empty] = innermost(thread, start, end, thread[empty], start[empty])
    inner = np.bincount(parent[parent >= 0], weights=value[parent >= 0], minlength=len(value))
    return np.maximum(value - inner, 0.0)


def stat_columns(trace: Trace, costs: DeviceCosts) -> dict[str, tuple[np.ndarray, list[object]]]:
    """Stat key -> (rows, values) of the XLA-op stats, for the keys the trace lacks."""
    out: dict[str, tuple[np.ndarray, list[object]]] = {
        HLO_OP: (costs.rows, [costs.names[i] for i in costs.instruction.tolist()]),
        PROGRAM_ID: (costs.rows, [PROGRAM] * len(costs.rows)),
    }
    for key, vals in ((FLOPS, costs.flops), (BYTES_ACCESSED, costs.bytes)):
        if key not in trace.stats:
            out[key] = (costs.rows, vals[costs.instruction].tolist())
    return out


def plane_columns(trace: Trace, costs: DeviceCosts) -> dict[str, tuple[np.ndarray, list[object]]]:
    """``flops`` / ``bytes_accessed`` of the device activities where the trace has the key
    on other planes only (torch's ``flops`` arg on host ops): written on the activities'
    planes, which list them for the reader to drop there alone."""
    out: dict[str, tuple[np.ndarray, list[object]]] = {}
    planes = unique(trace.track_plane[trace.events["track"][costs.rows]])
    for key, vals in ((FLOPS, costs.flops), (BYTES_ACCESSED, costs.bytes)):
        col = trace.stats.get(key)
        if col is not None and not np.isin(trace.track_plane[trace.events["track"][col.rows]], planes).any():
            out[key] = (costs.rows, vals[costs.instruction].tolist())
    return out


# xla.ShapeProto.element_type: TUPLE; fields of the HLO protos (xla/service/hlo.proto,
# xla/xla_data.proto) written here
_TUPLE = 13


def hlo_proto(costs: DeviceCosts) -> bytes:
    """A serialized ``xla.HloProto``: the module of one custom-call per instruction."""
    empty = message([(2, _TUPLE)])  # ShapeProto{element_type=TUPLE}: ()
    instrs = []
    for i, (name, op, dev) in enumerate(zip(costs.names, costs.ops, costs.device_ops), start=1):
        # OpMetadata{op_type=1, op_name=2}: XProf's framework op is op_name + ":" + op_type,
        # so the device op's name is cut at its first ':' to read back as itself
        head, colon, tail = dev.partition(":")
        meta = message([(1, colon and tail), (2, head)]) if colon else message([(2, dev)])
        # HloInstructionProto{name=1, opcode=2, shape=3, metadata=7, custom_call_target=28, id=35}
        instrs.append(message([(1, name), (2, "custom-call"), (3, empty), (7, meta), (28, op), (35, i)]))
    root = len(instrs)
    program = message([(2, empty)])  # ProgramShapeProto{result=()}
    # HloComputationProto{name=1, instructions=2, program_shape=4, id=5, root_id=6}
    comp = message([(1, "main"), (2, instrs), (4, program), (5, 1), (6, root)])
    # HloModuleProto{name=1, entry_computation_name=2, computations=3, host_program_shape=4, id=5,
    # entry_computation_id=6}
    module = message([(1, MODULE_NAME), (2, "main"), (3, comp), (4, program), (5, PROGRAM), (6, 1)])
    return message([(1, module)])  # HloProto{hlo_module=1}


def write_hlo_module(pw: PlaneWriter, costs: DeviceCosts) -> None:
    """The module as XProf finds it on its plane (``pw``): event metadata with id
    :data:`PROGRAM` holding a ``Hlo Proto`` bytes stat."""
    mid = pw.keep_event_id(PROGRAM, MODULE_NAME)
    st = pw.x.event_metadata[mid].stats.add()
    st.metadata_id = pw.stat_id(HLO_PROTO)
    st.bytes_value = hlo_proto(costs)


#: the device-capability stats XProf's profilers write on a GPU plane (tsl xplane_schema)
_XPROF_CAPS = ("clock_rate", "core_count", "memory_bandwidth", "peak_teraflops_per_second", "device_vendor")
#: polyprof's vendor names -> XProf's (tsl kDeviceVendorNvidia, kDeviceVendorAMD)
_VENDORS = {"NVIDIA": "Nvidia", "AMD": "AMD"}


def device_caps(trace: Trace, plane: Plane) -> dict[str, float | int | str]:
    """XProf's device-capability stats for a device plane; none for a plane that has
    XProf's own (an XSpace a profiler wrote: XProf derives its peaks from them)."""
    props: Mapping[str, object] = plane.properties
    if any(k in props for k in _XPROF_CAPS):
        return {}
    out: dict[str, float | int | str] = {}
    vendor = _VENDORS.get(plane.vendor.upper())
    if vendor:
        out["device_vendor"] = vendor
    pk = resolve_peak(trace, None)
    if pk is not None:
        main = main_precision(model_precisions(trace))  # as mfu: the precision most model FLOPs are in
        tf = pk.flops(main) or pk.flops("")
        if tf:
            out["peak_teraflops_per_second"] = tf / 1e12
        if pk.bandwidth:
            out["memory_bandwidth"] = int(pk.bandwidth)
    for xprof_key, kineto_key in (("core_count", "numSms"), ("compute_cap_major", "computeMajor"),
                                  ("compute_cap_minor", "computeMinor"), ("memory_size", "totalGlobalMem")):
        v = props.get(kineto_key)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out[xprof_key] = int(v)
    return {k: v for k, v in out.items() if k not in props}
