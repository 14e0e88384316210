"""rocprofv3's JSON output (``rocprofv3 --output-format json``: ``results.json``) as a Trace.

The document is ``{"rocprofiler-sdk-tool": [one object per process]}`` (rocprofiler-sdk's
``generateJSON.cpp`` and ``rocprofv3-schema.json``): ``metadata`` (pid, node),
``agents``, ``strings`` (the names of each record kind's operations, ROCTx messages by
correlation id), ``kernel_symbols``, and ``buffer_records`` with ``kernel_dispatch``,
``memory_copy``, ``hip_api``, ``hsa_api``, ``marker_api`` (ROCTx) and ``rccl_api``
records. It is decoded by msgspec into typed records (fields this reader does not use
are skipped, not built), then turned into columns and a Trace by formats/rocm_trace.py.
Timestamps stay rocprofiler-sdk's (ns); the file records no wall-clock anchor.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np

from ..errors import TraceFormatError
from ..trace import keys
from ..trace.core import Trace
from ..trace.sorting import unique_inverse
from . import rocm_trace
from .parts import Part, combined_names, set_stat, triples
from .safety import guarded

log = logging.getLogger("polyprof")

TOP_KEY = "rocprofiler-sdk-tool"


class _Handle(msgspec.Struct, frozen=True):
    handle: int = 0


class _Corr(msgspec.Struct, frozen=True):
    internal: int = 0
    external: int = 0


class _XYZ(msgspec.Struct, frozen=True):
    x: int = 1
    y: int = 1
    z: int = 1


class _DispatchInfo(msgspec.Struct, frozen=True):
    agent_id: _Handle = _Handle()
    queue_id: _Handle = _Handle()
    kernel_id: int = 0
    dispatch_id: int = 0
    private_segment_size: int = 0
    group_segment_size: int = 0
    workgroup_size: _XYZ = _XYZ()
    grid_size: _XYZ = _XYZ()


class _Record(msgspec.Struct):
    kind: int = 0
    operation: int = 0
    thread_id: int = 0
    correlation_id: _Corr = _Corr()
    start_timestamp: int = 0
    end_timestamp: int = 0


class _Dispatch(_Record):
    dispatch_info: _DispatchInfo = _DispatchInfo()
    stream_id: _Handle = _Handle()


class _Copy(_Record):
    dst_agent_id: _Handle = _Handle()
    src_agent_id: _Handle = _Handle()
    bytes: int = 0
    stream_id: _Handle = _Handle()


class _Buffers(msgspec.Struct, frozen=True):
    kernel_dispatch: list[_Dispatch] = []
    memory_copy: list[_Copy] = []
    hip_api: list[_Record] = []
    hsa_api: list[_Record] = []
    marker_api: list[_Record] = []
    rccl_api: list[_Record] = []


class _KindOps(msgspec.Struct):
    kind: str = ""
    operations: list[str] = []


class _KeyValue(msgspec.Struct):
    key: int = 0
    value: str = ""


class _Strings(msgspec.Struct, frozen=True):
    buffer_records: list[_KindOps] = []
    marker_api: list[_KeyValue] = []


class _Symbol(msgspec.Struct):
    kernel_id: int = 0
    kernel_name: str = ""
    formatted_kernel_name: str = ""
    demangled_kernel_name: str = ""
    sgpr_count: int = 0
    arch_vgpr_count: int = 0
    accum_vgpr_count: int = 0


class _Meta(msgspec.Struct, frozen=True):
    pid: int = 0
    init_time: int = 0
    fini_time: int = 0
    node: dict[str, Any] = {}
    command: list[str] = []


class _Tool(msgspec.Struct):
    metadata: _Meta = _Meta()
    agents: list[dict[str, Any]] = []
    strings: _Strings = _Strings()
    kernel_symbols: list[_Symbol] = []
    buffer_records: _Buffers = _Buffers()


class _Document(msgspec.Struct):
    tool: list[_Tool] = msgspec.field(name=TOP_KEY, default_factory=list)


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object whose first key is ``"rocprofiler-sdk-tool"``."""
    body = head[2:] if head.startswith(b"GZ") else head
    body = body.lstrip()
    return body[:1] == b"{" and body[1:64].lstrip().startswith(b'"' + TOP_KEY.encode() + b'"')


def _read(path: Path) -> bytes:
    from .kineto.progress import _Progress  # the streamed blocks only when a file is read, not sniffed
    from .kineto.stream import _Source  # (as above)

    return b"".join(_Source(path, _Progress(False, path, 0), 1 << 24).blocks())


def _col(records: list[Any], get: Callable[[Any], int]) -> np.ndarray:
    return np.fromiter((get(r) for r in records), np.int64, len(records))


class _Names:
    """Operation names per (record kind, operation)."""

    def __init__(self, strings: _Strings):
        self.kinds = [k.kind for k in strings.buffer_records]
        self.ops = [k.operations for k in strings.buffer_records]

    def kind(self, k: int) -> str:
        return self.kinds[k] if 0 <= k < len(self.kinds) else f"kind {k}"

    def op(self, k: int, o: int) -> str:
        ops = self.ops[k] if 0 <= k < len(self.ops) else []
        return ops[o] if 0 <= o < len(ops) else f"{self.kind(k)} {o}"


def _agents(tool: _Tool, g: int) -> tuple[dict[tuple[int, int], rocm_trace.Agent], dict[int, bool]]:
    out: dict[tuple[int, int], rocm_trace.Agent] = {}
    gpu_of: dict[int, bool] = {}
    gpus = 0
    for a in tool.agents:
        h = a.get("id", {}).get("handle") if isinstance(a.get("id"), dict) else None
        if not isinstance(h, int):
            continue
        gpu = a.get("type") == 2
        gpu_of[h] = gpu
        if not gpu:
            continue
        idx = next((a[k] for k in ("gpu_index", "logical_node_type_id") if isinstance(a.get(k), int) and a[k] >= 0),
                   gpus)
        gpus += 1
        props: dict[str, Any] = {k: a[k] for k in ("name", "product_name", "vendor_name", "cu_count", "simd_per_cu",
                                   "wave_front_size", "max_waves_per_cu", "max_engine_clk_fcompute", "num_xcc",
                                   "gfx_target_version", "node_id") if k in a}
        props["agent_handle"] = h
        out[(g, h)] = rocm_trace.Agent(int(idx), True, props)
    return out, gpu_of


def _tool_parts(tool: _Tool, g: int) -> list[Part]:
    names = _Names(tool.strings)
    buf = tool.buffer_records
    parts: list[Part] = []
    # kernels, on (agent, queue): a HIP stream maps onto a hardware queue, which runs its
    # work in order (rocprofv3 gives each early kernel a stream of its own)
    kd = buf.kernel_dispatch
    if kd:
        n = len(kd)
        sym = {s.kernel_id: s for s in tool.kernel_symbols}
        kid = _col(kd, lambda r: r.dispatch_info.kernel_id)
        uniq, inv = unique_inverse(kid)
        kname = [(lambda s: (s.formatted_kernel_name or s.demangled_kernel_name or s.kernel_name)
                  if s else f"kernel {k}")(sym.get(k)) for k in uniq.tolist()]
        stream = _col(kd, lambda r: r.stream_id.handle)
        queue = _col(kd, lambda r: r.dispatch_info.queue_id.handle)
        corr = _col(kd, lambda r: r.correlation_id.internal)
        ext = _col(kd, lambda r: r.correlation_id.external)
        stats: dict[str, Any] = {keys.STREAM: stream, keys.QUEUE: queue, "dispatch id": _col(
            kd, lambda r: r.dispatch_info.dispatch_id)}
        set_stat(stats, keys.CORRELATION_ID, corr, 0)
        set_stat(stats, keys.EXTERNAL_ID, ext, 0)
        grid = [_col(kd, lambda r: r.dispatch_info.grid_size.x), _col(kd, lambda r: r.dispatch_info.grid_size.y),
                _col(kd, lambda r: r.dispatch_info.grid_size.z)]
        block = [_col(kd, lambda r: r.dispatch_info.workgroup_size.x),
                 _col(kd, lambda r: r.dispatch_info.workgroup_size.y),
                 _col(kd, lambda r: r.dispatch_info.workgroup_size.z)]
        stats[keys.GRID] = triples(*grid)
        stats[keys.BLOCK] = triples(*block)
        stats["shared memory"] = _col(kd, lambda r: r.dispatch_info.group_segment_size)
        stats["scratch memory"] = _col(kd, lambda r: r.dispatch_info.private_segment_size)
        vg = np.array([(sym[k].arch_vgpr_count if k in sym else -1) for k in uniq.tolist()], np.int64)
        set_stat(stats, "vgpr count", vg[inv])
        parts.append(Part("kernel_dispatch", True, _col(kd, lambda r: r.start_timestamp),
                          _col(kd, lambda r: r.end_timestamp), np.full(n, g, np.int64),
                          -queue, _col(kd, lambda r: r.dispatch_info.agent_id.handle),
                          inv.astype(np.int64), kname, np.zeros(n, np.int64), [keys.CAT_KERNEL], stats, corr))
    mc = buf.memory_copy
    if mc:
        n = len(mc)
        dst = _col(mc, lambda r: r.dst_agent_id.handle)
        src = _col(mc, lambda r: r.src_agent_id.handle)
        _, gpu_of = _agents(tool, g)
        on = np.where(np.array([gpu_of.get(int(d), False) for d in dst.tolist()], bool), dst, src)
        kinds, ops = _col(mc, lambda r: r.kind), _col(mc, lambda r: r.operation)
        codes, vals = combined_names([kinds, ops], lambda k, o: rocm_trace.copy_name(names.op(k, o)))
        corr = _col(mc, lambda r: r.correlation_id.internal)
        stats = {keys.BYTES: _col(mc, lambda r: r.bytes), "dst agent": dst, "src agent": src}
        set_stat(stats, keys.CORRELATION_ID, corr, 0)
        stream = _col(mc, lambda r: r.stream_id.handle)
        parts.append(Part("memory_copy", True, _col(mc, lambda r: r.start_timestamp),
                          _col(mc, lambda r: r.end_timestamp), np.full(n, g, np.int64), stream, on, codes, vals,
                          np.zeros(n, np.int64), [keys.CAT_MEMCPY], stats, corr))
    msgs = {kv.key: kv.value for kv in tool.strings.marker_api}
    for table, recs in (("hip_api", buf.hip_api), ("hsa_api", buf.hsa_api), ("rccl_api", buf.rccl_api),
                        ("marker_api", buf.marker_api)):
        if not recs:
            continue
        n = len(recs)
        kinds, ops = _col(recs, lambda r: r.kind), _col(recs, lambda r: r.operation)
        corr = _col(recs, lambda r: r.correlation_id.internal)
        ext = _col(recs, lambda r: r.correlation_id.external)
        stats = {}
        set_stat(stats, keys.EXTERNAL_ID, ext, 0)
        if table == "marker_api":
            # ROCTx: the message by correlation id; marks are instants
            opnames = [names.op(int(k), int(o)) for k, o in zip(kinds.tolist(), ops.tolist())]
            mark = np.array([rocm_trace.is_mark(s) for s in opnames], bool)
            text = [msgs.get(int(c)) or s for c, s in zip(corr.tolist(), opnames)]
            codes_u, inv = np.unique(np.array(text, dtype=object), return_inverse=True)
            start, end = _col(recs, lambda r: r.start_timestamp), _col(recs, lambda r: r.end_timestamp)
            end = np.where(mark, start, end)
            parts.append(Part(table, False, start, end, np.full(n, g, np.int64),
                              _col(recs, lambda r: r.thread_id), np.zeros(n, np.int64), inv.ravel().astype(np.int64),
                              [str(x) for x in codes_u.tolist()], mark.astype(np.int64),
                              [rocm_trace.CAT_ROCTX, rocm_trace.CAT_ROCTX_MARK], stats, None))
            continue
        set_stat(stats, keys.CORRELATION_ID, corr, 0)
        codes, vals = combined_names([kinds, ops], lambda k, o: names.op(k, o))
        ccodes, cvals = combined_names([kinds], lambda k: rocm_trace.api_category(names.kind(k)))
        parts.append(Part(table, False, _col(recs, lambda r: r.start_timestamp), _col(recs, lambda r: r.end_timestamp),
                          np.full(n, g, np.int64), _col(recs, lambda r: r.thread_id), np.zeros(n, np.int64),
                          codes, vals, ccodes, cvals, stats, corr))
    return parts


def from_bytes(data: bytes, path: Path) -> Trace:
    try:
        doc = msgspec.json.decode(data, type=_Document)
    except msgspec.ValidationError as e:
        raise TraceFormatError(path, f"not rocprofv3 JSON as rocprofiler-sdk writes it ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"broken JSON ({e})") from None
    if not doc.tool:
        raise TraceFormatError(path, f"no {TOP_KEY!r} records")
    parts: list[Part] = []
    processes: dict[int, rocm_trace.Process] = {}
    agents: dict[tuple[int, int], rocm_trace.Agent] = {}
    for i, tool in enumerate(doc.tool):
        g = int(tool.metadata.pid) or i
        node = tool.metadata.node if isinstance(tool.metadata.node, dict) else {}
        processes[g] = rocm_trace.Process(pid=int(tool.metadata.pid), host=str(node.get("hostname") or ""),
                                          name=" ".join(tool.metadata.command[:1]))
        agents.update(_agents(tool, g)[0])
        try:
            parts.extend(_tool_parts(tool, g))
        except OverflowError:
            raise TraceFormatError(path, f"process {tool.metadata.pid}: a record holds an integer beyond "
                                         "64 bits") from None
    md = {"clock": "rocprofiler-sdk timestamps (ns)",
          "rocprof": {"format": "rocprofv3 json", "processes": len(doc.tool)}}
    return rocm_trace.build(parts, processes, agents, {}, md, path.name)


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read rocprofv3's JSON output (``results.json``, plain or gzipped)."""
    path = Path(path)
    return from_bytes(_read(path), path)
