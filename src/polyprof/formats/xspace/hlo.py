"""The HLO modules JAX/XLA store in an XSpace (``Hlo Proto`` stats of the ``/host:metadata``
plane's event metadata, one ``xla.HloProto`` per compiled program, named
``<module>(<program id>)``), decoded without protobuf (``wire.fields``) as far as polyprof
reads them: for op attribution each instruction's name and its framework op
(``OpMetadata.op_name``, e.g. ``jit(step)/jvp()/dot_general``); for the FLOPs and bytes
``hlo_cost.py`` counts, its opcode, shape, operands, called computations and the
attributes of dots, convolutions and custom calls (:class:`Instruction`).

Only those fields are kept; a sub-message is decoded when first read. A message field
that occurs twice is merged as protobuf merges it (its bytes concatenated), a scalar's
last occurrence wins, a field of an unexpected wire type is skipped as unknown. Bounded
on hostile bytes: no length reaches past its message, a tuple shape nests at most
:data:`MAX_DEPTH` deep (protobuf's own limit is 100 messages).

A kernel XLA emits is named after the instruction it executes, with every character
outside ``[A-Za-z0-9_]`` replaced by ``_`` (``gemm_fusion_dot.2`` runs as the kernel
``gemm_fusion_dot_2``); ``instructions`` keys the instructions by that kernel name."""

from __future__ import annotations

import ast
import re
from typing import Iterator, Mapping

from .wire import fields, packed, signed

HLO_PROTO = "Hlo Proto"  # tsl StatType::kHloProto
MAX_DEPTH = 64
# the patterns are compiled on first use (re's cache), not at import: a summary of a file
# without HLO needs none of them, one with HLO only the first
_MODULE_NAME = r"^(.*)\((\d{1,19})\)$"  # a program id is an int64: longer is no module's
_UNSAFE = r"[^A-Za-z0-9_]"
# A .polyprof file written before polyprof kept bytes holds the repr of the HloProto's bytes
_BYTES_REPR = r"(?s:b'(?:[^'\\]|\\.)*'|b\"(?:[^\"\\]|\\.)*\")"

# Field numbers of XLA's xla/service/hlo.proto and xla/xla_data.proto (the messages'
# names there in the comments)
_PROTO_MODULE = 1  # HloProto.hlo_module
_MODULE_NAME_F, _MODULE_COMPUTATIONS = 1, 3  # HloModuleProto.name, .computations
_COMP_INSTRUCTIONS, _COMP_ID, _COMP_ROOT = 2, 5, 6  # HloComputationProto.instructions, .id, .root_id
# HloInstructionProto
_I_NAME, _I_OPCODE, _I_SHAPE, _I_METADATA, _I_ID, _I_OPERANDS, _I_CALLED = 1, 2, 3, 7, 35, 36, 38
_I_WINDOW, _I_CONV_DIMS, _I_TARGET, _I_DOT_DIMS, _I_BACKEND_CONFIG = 15, 16, 28, 30, 43
_I_FEATURE_GROUPS, _I_PRECISION, _I_BATCH_GROUPS = 50, 51, 58
_METADATA_OP_NAME = 2  # OpMetadata.op_name
_SHAPE_TYPE, _SHAPE_DIMS, _SHAPE_TUPLE = 2, 3, 4  # ShapeProto.element_type, .dimensions, .tuple_shapes
_WINDOW_DIMS = 1  # Window.dimensions: WindowDimension
_WD_SIZE, _WD_STRIDE, _WD_PAD_LOW, _WD_WINDOW_DIL, _WD_BASE_DIL = 1, 2, 3, 5, 6
_DOT_LHS_CONTRACTING = 1  # DotDimensionNumbers.lhs_contracting_dimensions
_OPERAND_PRECISION = 1  # PrecisionConfig.operand_precision: DEFAULT 0, HIGH 1, HIGHEST 2
# ConvolutionDimensionNumbers: input_batch_dimension, input_feature_dimension,
# output_feature_dimension; input_spatial_dimensions, kernel_spatial_dimensions,
# output_spatial_dimensions
_CONV_ONE, _CONV_MANY = (7, 8, 10), (11, 6, 12)
_MESSAGES = frozenset((_I_SHAPE, _I_METADATA, _I_WINDOW, _I_CONV_DIMS, _I_DOT_DIMS, _I_PRECISION))
_KEPT = _MESSAGES | {_I_TARGET, _I_BACKEND_CONFIG, _I_FEATURE_GROUPS, _I_BATCH_GROUPS}


# The records below are plain classes, read by attribute only: a NamedTuple compiles each
# field's annotation when its module is imported (~60 us a class in every summary process)
class Shape:
    """ShapeProto: ``element_type`` (xla.PrimitiveType, 13: a tuple), ``dimensions``,
    ``tuple_shapes``."""

    __slots__ = ("element_type", "dimensions", "tuple_shapes")

    def __init__(self, element_type: int, dimensions: tuple[int, ...], tuple_shapes: tuple[Shape, ...]) -> None:
        self.element_type, self.dimensions, self.tuple_shapes = element_type, dimensions, tuple_shapes


class WindowDim:
    __slots__ = ("size", "stride", "padding_low", "window_dilation", "base_dilation")

    def __init__(self, size: int, stride: int, padding_low: int, window_dilation: int, base_dilation: int) -> None:
        self.size, self.stride, self.padding_low = size, stride, padding_low
        self.window_dilation, self.base_dilation = window_dilation, base_dilation


class ConvDims:
    __slots__ = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
                 "kernel_spatial_dimensions", "output_feature_dimension", "output_spatial_dimensions")

    def __init__(self, input_batch_dimension: int, input_feature_dimension: int,
                 input_spatial_dimensions: tuple[int, ...], kernel_spatial_dimensions: tuple[int, ...],
                 output_feature_dimension: int, output_spatial_dimensions: tuple[int, ...]) -> None:
        self.input_batch_dimension = input_batch_dimension
        self.input_feature_dimension = input_feature_dimension
        self.input_spatial_dimensions = input_spatial_dimensions
        self.kernel_spatial_dimensions = kernel_spatial_dimensions
        self.output_feature_dimension = output_feature_dimension
        self.output_spatial_dimensions = output_spatial_dimensions


def _int32(v: int) -> int:
    return (signed(v) + (1 << 31)) % (1 << 32) - (1 << 31)


def _signed_all(values: list[int]) -> list[int]:
    """int64 values from their varints (the list itself where none is negative)."""
    return [signed(x) for x in values] if values and max(values) >= 1 << 63 else values


def _ints(data: bytes, number: int) -> tuple[int, ...]:
    """A repeated int64 field of a message (packed or not)."""
    return tuple(signed(x) for f, v in fields(data) if f == number for x in packed(v))


def shape(data: bytes, depth: int = 0) -> Shape:
    """A ShapeProto's bytes decoded; ValueError where damaged or nested too deep."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a tuple shape nested deeper than {MAX_DEPTH}")
    etype, dims, parts = 0, [], []
    for f, v in fields(data):
        if f == _SHAPE_DIMS:
            dims.extend(_signed_all(packed(v)))
        elif f == _SHAPE_TYPE and isinstance(v, int):
            etype = _int32(v)
        elif f == _SHAPE_TUPLE and isinstance(v, bytes):
            parts.append(shape(v, depth + 1))
    return Shape(etype, tuple(dims), tuple(parts))


class Instruction:
    """One HloInstructionProto: ``id``, ``name``, ``opcode``, ``operand_ids``,
    ``called_computation_ids`` decoded; the rest (``shape``, ``op_name``, the attributes
    of dots, convolutions and custom calls) when first read. :meth:`check` decodes them
    all (ValueError where one is damaged)."""

    __slots__ = ("id", "name", "opcode", "operand_ids", "called_computation_ids", "_raw", "_shape")

    def __init__(self, data: bytes):
        self.id, self.name, self.opcode = 0, "", ""
        self.operand_ids: list[int] = []
        self.called_computation_ids: list[int] = []
        raw: dict[int, int | bytes] = {}
        parts: dict[int, list[bytes]] = {}  # a message's occurrences, joined once (not pairwise: quadratic)
        for f, v in fields(data):
            if isinstance(v, bytes):
                if f == _I_NAME:
                    self.name = v.decode("utf-8", "replace")
                elif f == _I_OPCODE:
                    self.opcode = v.decode("utf-8", "replace")
                elif f == _I_OPERANDS:
                    self.operand_ids.extend(_signed_all(packed(v)))
                elif f == _I_CALLED:
                    self.called_computation_ids.extend(_signed_all(packed(v)))
                elif f in _MESSAGES:
                    if not isinstance(raw.get(f), bytes):
                        parts[f] = []
                    parts[f].append(v)  # protobuf's merge of a repeated message: the bytes concatenated
                    raw[f] = v
                elif f in _KEPT:
                    raw[f] = v
            elif f == _I_ID:
                self.id = signed(v)
            elif f == _I_OPERANDS:
                self.operand_ids.append(signed(v))
            elif f == _I_CALLED:
                self.called_computation_ids.append(signed(v))
            elif f in _KEPT and f not in _MESSAGES:
                raw[f] = v
        for f, got in parts.items():
            if len(got) > 1 and isinstance(raw.get(f), bytes):
                raw[f] = b"".join(got)
        self._raw = raw
        self._shape: Shape | None = None

    def _bytes(self, f: int) -> bytes:
        v = self._raw.get(f, b"")
        return v if isinstance(v, bytes) else b""

    def _int(self, f: int) -> int:
        v = self._raw.get(f, 0)
        return signed(v) if isinstance(v, int) else 0

    @property
    def shape(self) -> Shape:
        if self._shape is None:
            self._shape = shape(self._bytes(_I_SHAPE))
        return self._shape

    @property
    def op_name(self) -> str:
        """OpMetadata.op_name: the framework op ("" where none)."""
        found = ""
        for f, v in fields(self._bytes(_I_METADATA)):
            if f == _METADATA_OP_NAME and isinstance(v, bytes):
                found = v.decode("utf-8", "replace")
        return found

    @property
    def custom_call_target(self) -> str:
        return self._bytes(_I_TARGET).decode("utf-8", "replace")

    @property
    def backend_config(self) -> bytes:
        return self._bytes(_I_BACKEND_CONFIG)

    @property
    def feature_group_count(self) -> int:
        return self._int(_I_FEATURE_GROUPS)

    @property
    def batch_group_count(self) -> int:
        return self._int(_I_BATCH_GROUPS)

    @property
    def lhs_contracting_dimensions(self) -> tuple[int, ...]:
        return _ints(self._bytes(_I_DOT_DIMS), _DOT_LHS_CONTRACTING)

    @property
    def operand_precision(self) -> tuple[int, ...]:
        return tuple(_int32(x) for x in _ints(self._bytes(_I_PRECISION), _OPERAND_PRECISION))

    @property
    def window(self) -> tuple[WindowDim, ...]:
        out = []
        for f, v in fields(self._bytes(_I_WINDOW)):
            if f == _WINDOW_DIMS and isinstance(v, bytes):
                d = {k: 0 for k in (_WD_SIZE, _WD_STRIDE, _WD_PAD_LOW, _WD_WINDOW_DIL, _WD_BASE_DIL)}
                for g, w in fields(v):
                    if g in d and isinstance(w, int):
                        d[g] = signed(w)
                out.append(WindowDim(d[_WD_SIZE], d[_WD_STRIDE], d[_WD_PAD_LOW], d[_WD_WINDOW_DIL],
                                     d[_WD_BASE_DIL]))
        return tuple(out)

    @property
    def convolution_dimension_numbers(self) -> ConvDims:
        one: dict[int, int] = dict.fromkeys(_CONV_ONE, 0)
        many: dict[int, list[int]] = {f: [] for f in _CONV_MANY}
        for f, v in fields(self._bytes(_I_CONV_DIMS)):
            if f in many:
                many[f].extend(signed(x) for x in packed(v))
            elif f in one and isinstance(v, int):
                one[f] = signed(v)
        (batch, feature, out_feature), (spatial, kernel, out_spatial) = _CONV_ONE, _CONV_MANY
        return ConvDims(one[batch], one[feature], tuple(many[spatial]), tuple(many[kernel]), one[out_feature],
                        tuple(many[out_spatial]))

    def check(self) -> None:
        """Decode the fields the cost pass reads, of those present: ValueError where one
        is damaged."""
        _ = self.shape
        raw = self._raw
        if _I_WINDOW in raw:
            _ = self.window
        if _I_CONV_DIMS in raw:
            _ = self.convolution_dimension_numbers
        if _I_DOT_DIMS in raw:
            _ = self.lhs_contracting_dimensions
        if _I_PRECISION in raw:
            _ = self.operand_precision


class Computation:
    __slots__ = ("id", "root_id", "instructions")

    def __init__(self, id: int, root_id: int, instructions: list[Instruction]) -> None:
        self.id, self.root_id, self.instructions = id, root_id, instructions


class Module:
    __slots__ = ("name", "computations")

    def __init__(self, name: str, computations: list[Computation]) -> None:
        self.name, self.computations = name, computations


def _sub(data: bytes, number: int) -> Iterator[bytes]:
    for f, v in fields(data):
        if f == number and isinstance(v, bytes):
            yield v


def module(hlo_proto: bytes) -> Module:
    """The module of an ``xla.HloProto``'s bytes (every instruction's top-level fields
    decoded, :class:`Instruction`); ValueError where the bytes are damaged."""
    body = b"".join(_sub(hlo_proto, _PROTO_MODULE))  # a message repeated: merged
    name, comps = "", []
    for f, v in fields(body):
        if f == _MODULE_NAME_F and isinstance(v, bytes):
            name = v.decode("utf-8", "replace")
        elif f == _MODULE_COMPUTATIONS and isinstance(v, bytes):
            cid = root = 0
            ins = []
            for g, w in fields(v):
                if g == _COMP_INSTRUCTIONS and isinstance(w, bytes):
                    ins.append(Instruction(w))
                elif g == _COMP_ID and isinstance(w, int):
                    cid = signed(w)
                elif g == _COMP_ROOT and isinstance(w, int):
                    root = signed(w)
            comps.append(Computation(cid, root, ins))
    return Module(name, comps)


def instructions(hlo_proto: bytes) -> dict[str, tuple[str, str]]:
    """kernel name -> (instruction name, framework op name, "" where none) of every
    instruction of the module in ``hlo_proto``. ValueError where the bytes are damaged."""
    return kernel_names(op_names(hlo_proto))


def kernel_names(ops: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """kernel name -> (instruction name, framework op name) from :func:`op_names`."""
    out: dict[str, tuple[str, str]] = {}
    unsafe = re.compile(_UNSAFE)
    for name, op in ops.items():
        out.setdefault(unsafe.sub("_", name), (name, op))
    return out


def op_names(hlo_proto: bytes | Module) -> dict[str, str]:
    """instruction name -> framework op name ("" where none) of every instruction of the
    module in ``hlo_proto`` (its bytes, or :func:`module`'s), in the proto's order.
    ValueError where the bytes are damaged."""
    mod = module(hlo_proto) if isinstance(hlo_proto, bytes) else hlo_proto
    out: dict[str, str] = {}
    for comp in mod.computations:
        for ins in comp.instructions:
            if ins.name and ins.name not in out:
                out[ins.name] = ins.op_name
    return out


def modules(entries: list[Mapping[str, object]]) -> dict[tuple[str, int], bytes]:
    """(module name, program id) -> HloProto bytes, from a plane's unreferenced event
    metadata (``{"name": "jit_step(3977)", "stats": {"Hlo Proto": b"..."}}``). A .polyprof
    file written before polyprof kept bytes holds their repr (``"b'\\\\n\\\\x8f...'"``):
    read back to the bytes."""
    out: dict[tuple[str, int], bytes] = {}
    module_name = re.compile(_MODULE_NAME)
    for e in entries:
        stats = e.get("stats")
        proto = stats.get(HLO_PROTO) if isinstance(stats, dict) else None
        if isinstance(proto, str):
            proto = _from_repr(proto)
        m = module_name.match(str(e.get("name", "")))
        if isinstance(proto, bytes) and m:
            out[(m.group(1), int(m.group(2)))] = proto
    return out


def _from_repr(text: str) -> bytes | None:
    """The bytes whose ``repr`` is ``text``; None where it is no such repr."""
    if not re.compile(_BYTES_REPR).fullmatch(text):
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, bytes) else None
