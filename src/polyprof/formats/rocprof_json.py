"""rocprofv3's JSON output (``rocprofv3 --output-format json``: ``results.json``) as a Trace.

The document is ``{"rocprofiler-sdk-tool": [one object per process]}`` (rocprofiler-sdk's
``generateJSON.cpp`` and ``rocprofv3-schema.json``): ``metadata`` (pid, node),
``agents``, ``strings`` (the names of each record kind's operations, ROCTx messages by
correlation id), ``kernel_symbols``, and ``buffer_records`` with ``kernel_dispatch``,
``memory_copy``, ``hip_api``, ``hsa_api``, ``marker_api`` (ROCTx) and ``rccl_api``
records. It is decoded by msgspec: the records of each kind kept as raw JSON, then decoded
``CHUNK`` at a time into typed records (fields this reader does not use are skipped, not
built) and straight into columns, so the records' structs never all live at once; the
columns become a Trace in formats/rocm_trace.py.
Timestamps stay rocprofiler-sdk's (ns); the file records no wall-clock anchor.
"""

from __future__ import annotations

import logging
import re
from operator import attrgetter
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


class _Handle(msgspec.Struct, frozen=True, gc=False):
    handle: int = 0


class _Corr(msgspec.Struct, frozen=True, gc=False):
    internal: int = 0
    external: int = 0


class _XYZ(msgspec.Struct, frozen=True, gc=False):
    x: int = 1
    y: int = 1
    z: int = 1


class _DispatchInfo(msgspec.Struct, frozen=True, gc=False):
    agent_id: _Handle = _Handle()
    queue_id: _Handle = _Handle()
    kernel_id: int = 0
    dispatch_id: int = 0
    private_segment_size: int = 0
    group_segment_size: int = 0
    workgroup_size: _XYZ = _XYZ()
    grid_size: _XYZ = _XYZ()


class _Record(msgspec.Struct, gc=False):  # no cycles: not tracked by the GC (millions of them)
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
    """Each record's JSON text, not yet decoded: :func:`_columns` decodes them a chunk at
    a time (decoded all at once, a record's nested structs took about 1 KB each)."""

    kernel_dispatch: list[msgspec.Raw] = []
    memory_copy: list[msgspec.Raw] = []
    hip_api: list[msgspec.Raw] = []
    hsa_api: list[msgspec.Raw] = []
    marker_api: list[msgspec.Raw] = []
    rccl_api: list[msgspec.Raw] = []


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


def _read(path: Path) -> bytearray:
    from .inflate import Decompressed  # the streamed blocks only when a file is read, not sniffed

    out = bytearray()  # grown block by block: a join of the blocks held the file twice at once
    for block in Decompressed(path, 1 << 24).blocks():
        out += block
    return out


#: records decoded into structs at a time: memory bounded by a chunk, not by the file
CHUNK = 1 << 14

Getters = dict[str, Callable[[Any], int]]
_RECORD: Getters = {k: attrgetter(f) for k, f in (
    ("kind", "kind"), ("operation", "operation"), ("thread", "thread_id"), ("corr", "correlation_id.internal"),
    ("ext", "correlation_id.external"), ("start", "start_timestamp"), ("end", "end_timestamp"))}
_DISPATCH: Getters = {**_RECORD, **{k: attrgetter(f) for k, f in (
    ("kernel", "dispatch_info.kernel_id"), ("stream", "stream_id.handle"), ("queue", "dispatch_info.queue_id.handle"),
    ("agent", "dispatch_info.agent_id.handle"), ("dispatch", "dispatch_info.dispatch_id"),
    ("grid_x", "dispatch_info.grid_size.x"), ("grid_y", "dispatch_info.grid_size.y"),
    ("grid_z", "dispatch_info.grid_size.z"), ("block_x", "dispatch_info.workgroup_size.x"),
    ("block_y", "dispatch_info.workgroup_size.y"), ("block_z", "dispatch_info.workgroup_size.z"),
    ("lds", "dispatch_info.group_segment_size"), ("scratch", "dispatch_info.private_segment_size"))}}
_COPY: Getters = {**_RECORD, **{k: attrgetter(f) for k, f in (
    ("dst", "dst_agent_id.handle"), ("src", "src_agent_id.handle"), ("bytes", "bytes"),
    ("stream", "stream_id.handle"))}}


def _columns(raws: list[msgspec.Raw], typ: type, getters: Getters, where: str) -> dict[str, np.ndarray]:
    """The records' fields as int64 columns, decoded ``CHUNK`` records at a time (their
    structs dropped before the next chunk). Raises ``msgspec.ValidationError`` naming the
    record (``where[i]``) and ``OverflowError`` for an integer beyond 64 bits."""
    n = len(raws)
    out = {k: np.empty(n, np.int64) for k in getters}
    decoder = msgspec.json.Decoder(list[typ])  # type: ignore[valid-type]
    for i in range(0, n, CHUNK):
        try:
            recs = decoder.decode(b"[" + b",".join(raws[i:i + CHUNK]) + b"]")
        except msgspec.ValidationError as e:  # "... - at `$[k].field`": the record in the file
            at = re.sub(r"\$\[(\d+)\]", lambda m, i=i: f"{where}[{i + int(m[1])}]", str(e))  # type: ignore[misc]
            raise msgspec.ValidationError(at) from None
        for k, get in getters.items():
            out[k][i:i + len(recs)] = np.fromiter(map(get, recs), np.int64, len(recs))
        del recs
    return out


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
    where = f'{TOP_KEY}[pid {tool.metadata.pid}].buffer_records'
    # kernels, on (agent, queue): a HIP stream maps onto a hardware queue, which runs its
    # work in order (rocprofv3 gives each early kernel a stream of its own)
    if buf.kernel_dispatch:
        c = _columns(buf.kernel_dispatch, _Dispatch, _DISPATCH, f"{where}.kernel_dispatch")
        n = len(c["start"])
        sym = {s.kernel_id: s for s in tool.kernel_symbols}
        uniq, inv = unique_inverse(c["kernel"])
        kname = [(lambda s: (s.formatted_kernel_name or s.demangled_kernel_name or s.kernel_name)
                  if s else f"kernel {k}")(sym.get(k)) for k in uniq.tolist()]
        stats: dict[str, Any] = {keys.STREAM: c["stream"], keys.QUEUE: c["queue"], "dispatch id": c["dispatch"]}
        set_stat(stats, keys.CORRELATION_ID, c["corr"], 0)
        set_stat(stats, keys.EXTERNAL_ID, c["ext"], 0)
        stats[keys.GRID] = triples(c["grid_x"], c["grid_y"], c["grid_z"])
        stats[keys.BLOCK] = triples(c["block_x"], c["block_y"], c["block_z"])
        stats["shared memory"] = c["lds"]
        stats["scratch memory"] = c["scratch"]
        vg = np.array([(sym[k].arch_vgpr_count if k in sym else -1) for k in uniq.tolist()], np.int64)
        set_stat(stats, "vgpr count", vg[inv])
        parts.append(Part("kernel_dispatch", True, c["start"], c["end"], np.full(n, g, np.int64),
                          -c["queue"], c["agent"], inv.astype(np.int64), kname, np.zeros(n, np.int64),
                          [keys.CAT_KERNEL], stats, c["corr"]))
    if buf.memory_copy:
        c = _columns(buf.memory_copy, _Copy, _COPY, f"{where}.memory_copy")
        n = len(c["start"])
        dst, src = c["dst"], c["src"]
        _, gpu_of = _agents(tool, g)
        on = np.where(np.array([gpu_of.get(int(d), False) for d in dst.tolist()], bool), dst, src)
        codes, vals = combined_names([c["kind"], c["operation"]],
                                     lambda k, o: rocm_trace.copy_name(names.op(k, o)))
        stats = {keys.BYTES: c["bytes"], "dst agent": dst, "src agent": src}
        set_stat(stats, keys.CORRELATION_ID, c["corr"], 0)
        parts.append(Part("memory_copy", True, c["start"], c["end"], np.full(n, g, np.int64), c["stream"], on,
                          codes, vals, np.zeros(n, np.int64), [keys.CAT_MEMCPY], stats, c["corr"]))
    msgs = {kv.key: kv.value for kv in tool.strings.marker_api}
    for table, recs in (("hip_api", buf.hip_api), ("hsa_api", buf.hsa_api), ("rccl_api", buf.rccl_api),
                        ("marker_api", buf.marker_api)):
        if recs:
            parts.append(_api_part(table, _columns(recs, _Record, _RECORD, f"{where}.{table}"), g, names, msgs))
    return parts


def _api_part(table: str, c: dict[str, np.ndarray], g: int, names: _Names, msgs: dict[int, str]) -> Part:
    """Host API calls (HIP, HSA, RCCL) or ROCTx ranges and marks, from their columns."""
    n = len(c["start"])
    kinds, ops, corr = c["kind"], c["operation"], c["corr"]
    stats: dict[str, Any] = {}
    set_stat(stats, keys.EXTERNAL_ID, c["ext"], 0)
    if table == "marker_api":
        # ROCTx: the message by correlation id; marks are instants
        opnames = [names.op(int(k), int(o)) for k, o in zip(kinds.tolist(), ops.tolist())]
        mark = np.array([rocm_trace.is_mark(s) for s in opnames], bool)
        text = [msgs.get(int(k)) or s for k, s in zip(corr.tolist(), opnames)]
        codes_u, inv = np.unique(np.array(text, dtype=object), return_inverse=True)
        end = np.where(mark, c["start"], c["end"])
        return Part(table, False, c["start"], end, np.full(n, g, np.int64), c["thread"], np.zeros(n, np.int64),
                    inv.ravel().astype(np.int64), [str(x) for x in codes_u.tolist()], mark.astype(np.int64),
                    [rocm_trace.CAT_ROCTX, rocm_trace.CAT_ROCTX_MARK], stats, None)
    set_stat(stats, keys.CORRELATION_ID, corr, 0)
    codes, vals = combined_names([kinds, ops], lambda k, o: names.op(k, o))
    ccodes, cvals = combined_names([kinds], lambda k: rocm_trace.api_category(names.kind(k)))
    return Part(table, False, c["start"], c["end"], np.full(n, g, np.int64), c["thread"], np.zeros(n, np.int64),
                codes, vals, ccodes, cvals, stats, corr)


def from_bytes(data: bytes | bytearray, path: Path) -> Trace:
    parts, processes, agents, md = _decoded(data, path)
    return rocm_trace.build(parts, processes, agents, {}, md, path.name)


Decoded = tuple[list[Part], dict[int, rocm_trace.Process], dict[tuple[int, int], rocm_trace.Agent], dict[str, Any]]


def _decoded(data: bytes | bytearray, path: Path) -> Decoded:
    """The columns of every process's records (the file's bytes may go once this returns)."""
    try:
        doc = msgspec.json.decode(data, type=_Document)
    except msgspec.ValidationError as e:
        raise TraceFormatError(path, f"not rocprofv3 JSON as rocprofiler-sdk writes it ({e})") from None
    except msgspec.DecodeError as e:  # (msgspec >= 0.23: "Invalid UTF-8 encoded string" for a string not UTF-8)
        raise TraceFormatError(path, "a JSON string is not UTF-8 text" if "UTF-8" in str(e) else
                               f"broken JSON ({e})") from None
    except UnicodeDecodeError as e:  # msgspec's before 0.23, for a string that is not UTF-8
        raise TraceFormatError(path, f"a JSON string is not UTF-8 text ({e.reason})") from None
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
        except msgspec.ValidationError as e:  # a record, decoded with its chunk (_columns)
            raise TraceFormatError(path, f"not rocprofv3 JSON as rocprofiler-sdk writes it ({e})") from None
    for p in parts:  # beyond +-2**62 ns is damage, not a clock (an end minus a start must fit in int64)
        far = np.flatnonzero((p.start < -(2**62)) | (p.start > 2**62) | (p.end < -(2**62)) | (p.end > 2**62))
        if len(far):
            raise TraceFormatError(path, f"{p.table} record {int(far[0])}: a time beyond +-2**62 ns")
    md = {"clock": "rocprofiler-sdk timestamps (ns)",
          "rocprof": {"format": "rocprofv3 json", "processes": len(doc.tool)}}
    return parts, processes, agents, md


@guarded
def load(path: str | Path, **options: object) -> Trace:
    """Read rocprofv3's JSON output (``results.json``, plain or gzipped)."""
    path = Path(path)
    parts, processes, agents, md = _decoded(_read(path), path)  # the file's bytes go before the build
    return rocm_trace.build(parts, processes, agents, {}, md, path.name)
