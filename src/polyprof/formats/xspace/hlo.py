"""The HLO modules JAX/XLA store in an XSpace (``Hlo Proto`` stats of the ``/host:metadata``
plane's event metadata, one ``xla.HloProto`` per compiled program, named
``<module>(<program id>)``), read as far as op attribution needs: each instruction's name
and its framework op (``OpMetadata.op_name``, e.g. ``jit(step)/jvp()/dot_general``).

A kernel XLA emits is named after the instruction it executes, with every character
outside ``[A-Za-z0-9_]`` replaced by ``_`` (``gemm_fusion_dot.2`` runs as the kernel
``gemm_fusion_dot_2``); ``instructions`` keys the instructions by that kernel name."""

from __future__ import annotations

import re
from typing import Iterator, Mapping

from .wire import varint

HLO_PROTO = "Hlo Proto"  # tsl StatType::kHloProto
_MODULE_NAME = re.compile(r"^(.*)\((\d+)\)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
# field numbers in xla/service/hlo.proto
_PROTO_MODULE, _MODULE_COMPUTATIONS, _COMPUTATION_INSTRUCTIONS = 1, 3, 2
_INSTRUCTION_NAME, _INSTRUCTION_METADATA, _METADATA_OP_NAME = 1, 7, 2


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: ints for varints and fixed fields,
    bytes for length-delimited ones. ValueError where the bytes are damaged."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        if key is None:
            raise ValueError("truncated key")
        wire = key & 7
        if wire == 0:
            val, pos = varint(data, pos)
            if val is None:
                raise ValueError("truncated varint")
            yield key >> 3, val
        elif wire == 2:
            n, pos = varint(data, pos)
            if n is None or pos + n > len(data):
                raise ValueError("truncated field")
            yield key >> 3, data[pos:pos + n]
            pos += n
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ValueError("truncated fixed field")
            yield key >> 3, int.from_bytes(data[pos:pos + size], "little")
            pos += size
        else:
            raise ValueError(f"wire type {wire}")


def _sub(data: bytes, number: int) -> Iterator[bytes]:
    for f, v in _fields(data):
        if f == number and isinstance(v, bytes):
            yield v


def instructions(hlo_proto: bytes) -> dict[str, tuple[str, str]]:
    """kernel name -> (instruction name, framework op name, "" where none) of every
    instruction of the module in ``hlo_proto``. ValueError where the bytes are damaged."""
    return kernel_names(op_names(hlo_proto))


def kernel_names(ops: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """kernel name -> (instruction name, framework op name) from :func:`op_names`."""
    out: dict[str, tuple[str, str]] = {}
    for name, op in ops.items():
        out.setdefault(_UNSAFE.sub("_", name), (name, op))
    return out


def op_names(hlo_proto: bytes) -> dict[str, str]:
    """instruction name -> framework op name ("" where none) of every instruction of the
    module in ``hlo_proto``, in the proto's order. ValueError where the bytes are damaged."""
    out: dict[str, str] = {}
    for module in _sub(hlo_proto, _PROTO_MODULE):
        for comp in _sub(module, _MODULE_COMPUTATIONS):
            for ins in _sub(comp, _COMPUTATION_INSTRUCTIONS):
                name = op = ""
                for f, v in _fields(ins):
                    if f == _INSTRUCTION_NAME and isinstance(v, bytes):
                        name = v.decode("utf-8", "replace")
                    elif f == _INSTRUCTION_METADATA and isinstance(v, bytes):
                        op = next((m.decode("utf-8", "replace") for m in _sub(v, _METADATA_OP_NAME)), "")
                if name:
                    out.setdefault(name, op)
    return out


def modules(entries: list[Mapping[str, object]]) -> dict[tuple[str, int], bytes]:
    """(module name, program id) -> HloProto bytes, from a plane's unreferenced event
    metadata (``{"name": "jit_step(3977)", "stats": {"Hlo Proto": b"..."}}``)."""
    out: dict[tuple[str, int], bytes] = {}
    for e in entries:
        stats = e.get("stats")
        proto = stats.get(HLO_PROTO) if isinstance(stats, dict) else None
        m = _MODULE_NAME.match(str(e.get("name", "")))
        if isinstance(proto, bytes) and m:
            out[(m.group(1), int(m.group(2)))] = proto
    return out
