"""FLOPs and bytes of each instruction of an XLA module (the ``Hlo Proto`` an XSpace
stores per program, ``hlo.py``), counted by the conventions of XLA's ``HloCostAnalysis``,
which XProf's op_profile, roofline_model and hlo_stats show for GPU programs:

- ``dot``: 2 x output elements x the product of the lhs contracting dimensions;
- ``convolution``: 2 x (input features / feature groups) x output features x (batch /
  batch groups) x the product over spatial dimensions of the (output, kernel) position
  pairs that read the input rather than its padding (so a padded conv counts less than
  2 x output x kernel volume x input features);
- cuBLAS / cuBLASLt gemm custom calls (``__cublas$gemm``, ``__cublas$lt$matmul...``): a
  dot with the dimension numbers of their ``backend_config`` JSON; cuDNN / MIOpen
  convolution custom calls (``__cudnn$conv...``): a convolution with their window and
  dimension numbers; their scratch output (the last tuple element, ``u8``/``s8``) is no
  output. Other custom calls: FLOPs unknown (NaN), bytes their operands and outputs;
- elementwise ops: 1 FLOP per output element, the transcendental ones (exp, log, tanh,
  rsqrt...) counted apart as transcendentals, not FLOPs;
- ``reduce``: (input elements - output elements) x the FLOPs of its reducer;
  ``reduce-window``: (window size - 1) x output elements x the reducer's; ``map``:
  elements x the mapped computation's; ``all-reduce``: 1 per output element;
- ``fusion`` (loop, input, Triton gemm fusions...), ``call``, ``while`` (one trip):
  the sum over the instructions of the called computations. A ``while``, ``call`` or
  ``conditional`` has no figure of its own in :func:`module_costs`: the instructions of
  its computations run as ops of their own (each trip of a loop; XLA's CPU runtime
  also traces the loop's thunk around them), which counting it too would count twice;
- data movement (copy, transpose, slice, broadcast, concatenate...): no FLOPs.

Bytes are what the op reads and writes: its operands and outputs; a fusion's outputs
(a dynamic-update-slice root writes only its update) and the fused parameters it reads
(a parameter read only through slices: the slices' bytes). Parameters, constants,
tuples, get-tuple-element and bitcasts move nothing.

The precision is that of the first operand of the op's dot or convolution, or
otherwise of its output: ``bf16``, ``fp16``, ``fp32``, ``fp64``, ``fp8``, ``int8``; an
fp32 dot or convolution is ``tf32`` unless its operands' precision is HIGHEST (XLA's GPU
backends run DEFAULT-precision fp32 products on tensor cores in TF32: the H200
transformer's fp32 gemm fusions reach 73 TFLOP/s, past the 67 of fp32 without them);
``tf32=False`` (XLA's CPU backend, which has no TF32) keeps it ``fp32``.
"""

from __future__ import annotations

import json
import math
from typing import Collection, Iterable, NamedTuple

import numpy as np

from .hlo import MAX_DEPTH, Instruction, Module, Shape, WindowDim, module

#: bits per element of xla.PrimitiveType (xla_data.proto); absent: no data (tuple, token)
ELEMENT_BITS = {1: 8, 2: 8, 3: 16, 4: 32, 5: 64, 6: 8, 7: 16, 8: 32, 9: 64, 10: 16, 11: 32, 12: 64, 15: 64,
                16: 16, 18: 128, 19: 8, 20: 8, 21: 4, 22: 4, 23: 8, 24: 8, 25: 8, 26: 2, 27: 2, 28: 8, 29: 8,
                30: 1, 31: 1, 32: 4, 33: 8}
#: precision (the peaks' names, analyze/peaks.py) of xla.PrimitiveType
PRECISION = {10: "fp16", 11: "fp32", 12: "fp64", 15: "fp32", 16: "bf16", 18: "fp64", 2: "int8", 6: "int8",
             **{t: "fp8" for t in (19, 20, 23, 24, 25, 28, 29, 33)}}
_TUPLE = 13
_INT64_END = 1 << 63

ELEMENTWISE = frozenset((
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "clz", "compare", "complex", "convert", "cos",
    "divide", "erf", "exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log",
    "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power",
    "real", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sin", "sqrt",
    "stochastic-convert", "subtract", "tan", "tanh", "xor"))
TRANSCENDENTAL = frozenset(("atan2", "cbrt", "cos", "erf", "exponential", "exponential-minus-one", "log",
                            "log-plus-one", "logistic", "power", "rsqrt", "sin", "sqrt", "tan", "tanh"))
#: instructions that move no data of their own
_NO_BYTES = frozenset(("parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
                       "add-dependency", "domain", "opt-barrier"))
#: ops that run the computations they call once each (their FLOPs are those computations')
_CALLS = frozenset(("fusion", "call", "while", "async-start"))
#: ops whose computations' instructions run as ops of their own (no figure of their own)
_CONTROL_FLOW = frozenset(("while", "call", "conditional"))
GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")  # and their suffixed kinds ($f8...)
CONV_TARGET = "__cudnn$conv"  # __cudnn$convForward, $convBackwardInput, $convBiasActivationForward...
#: the most steps one convolution dimension's count may take (a hostile module's window)
MAX_STEPS = 10**7
#: the most kernel positions along one dimension counted at once (8 MB a column)
MAX_KERNEL = 10**6
#: what a module's damaged or hostile attributes raise while one instruction is costed
_UNCOUNTABLE = (KeyError, IndexError, ValueError, TypeError, AttributeError, OverflowError, RecursionError)


class OpCost(NamedTuple):
    """One instruction's cost: ``flops`` (NaN: unknown), ``transcendentals``, ``bytes``
    read and written, ``precision`` ("" where none applies)."""

    flops: float
    transcendentals: float
    bytes: float
    precision: str


def _product(dims: tuple[int, ...]) -> int:
    """The product of array dimensions; ValueError where one is negative (damaged, or a
    dynamic dimension's bound unknown) or the product reaches 2**63 (XLA keeps a shape's
    element and byte counts in int64), found before multiplying further."""
    if dims and min(dims) < 0:
        raise ValueError(f"a dimension of {min(dims)}")
    if 0 in dims:
        return 0
    n = 1
    for d in dims:
        n *= d
        if n >= _INT64_END:
            raise ValueError("2**63 elements or more")
    return n


def _dim(shape: Shape, index: int) -> int:
    """Dimension ``index`` of ``shape``; IndexError where it has none such (no negative
    indexing from the end), ValueError where it is negative."""
    if not 0 <= index < len(shape.dimensions):
        raise IndexError(f"dimension {index} of a rank-{len(shape.dimensions)} shape")
    return _product((shape.dimensions[index],))


def elements(shape: Shape) -> int:
    """Elements of an array shape (of all leaves of a tuple); ValueError where a
    dimension is negative or the count reaches 2**63."""
    if shape.element_type == _TUPLE:
        return _product((sum(elements(s) for s in shape.tuple_shapes),))
    return _product(shape.dimensions)


def nbytes(shape: Shape) -> float:
    """Bytes of an array shape (of all leaves of a tuple); 0 for tokens and opaque data.
    ValueError as :func:`elements`, or where its bits (a leaf's) or bytes reach 2**63."""
    if shape.element_type == _TUPLE:
        total = sum(nbytes(s) for s in shape.tuple_shapes)
        if total >= _INT64_END:
            raise ValueError("2**63 bytes or more")
        return total
    bits = ELEMENT_BITS.get(shape.element_type, 0)
    return _product((_product(shape.dimensions), bits)) / 8


def _first(shape: Shape) -> Shape:
    """The first leaf of a tuple shape (a library call's result), else the shape."""
    while shape.element_type == _TUPLE and len(shape.tuple_shapes):
        shape = shape.tuple_shapes[0]
    return shape


def _is_gemm(target: str) -> bool:
    return target.startswith(GEMM_TARGETS)


def _is_library(target: str) -> bool:
    return _is_gemm(target) or target.startswith(CONV_TARGET)


def dot_flops(lhs: Shape, out: Shape, contracting: Iterable[int]) -> float:
    """2 x output elements x the product of the lhs contracting dimensions."""
    width = _product(tuple(_dim(lhs, int(d)) for d in contracting))
    return 2.0 * elements(out) * width


def _valid_positions(size_in: int, size_out: int, size_k: int, w: WindowDim) -> int:
    """(output, kernel) position pairs along one spatial dimension that read the input,
    not its padding or the holes of its base dilation (XLA's convolution count).
    ValueError beyond :data:`MAX_STEPS` steps (a hostile module's window)."""
    stride, lo = max(1, w.stride or 1), w.padding_low
    wdil, bdil = max(1, w.window_dilation or 1), max(1, w.base_dilation or 1)
    if max(abs(lo), wdil * size_k, stride, size_in, size_out) >= 1 << 50:  # (int64 arithmetic below)
        raise ValueError(f"a convolution window of {size_k} x {size_out} positions")
    if bdil == 1:  # per kernel position k, the outputs o with 0 <= o*stride - lo + k*wdil < size_in
        if size_k > MAX_KERNEL:
            raise ValueError(f"a convolution window of {size_k} positions")
        shift = lo - np.arange(size_k, dtype=np.int64) * wdil
        first = np.maximum(-((-shift) // stride), 0)  # ceil(shift / stride)
        last = np.minimum((size_in - 1 + shift) // stride, size_out - 1)
        return int(np.maximum(last - first + 1, 0).sum())
    if size_k * max(size_out, 1) > MAX_STEPS:
        raise ValueError(f"a convolution window of {size_k} x {size_out} positions")
    count = 0
    for k in range(size_k):
        for o in range(size_out):
            idx = o * stride - lo + k * wdil
            if idx % bdil == 0 and 0 <= idx // bdil < size_in:
                count += 1
    return count


def conv_flops(ins: Instruction, lhs: Shape, rhs: Shape, out: Shape) -> float:
    """XLA's FLOPs of convolution ``ins`` with these input, kernel and output shapes."""
    dn = ins.convolution_dimension_numbers
    fin = _dim(lhs, dn.input_feature_dimension)
    fout = _dim(out, dn.output_feature_dimension)
    batch = _dim(lhs, dn.input_batch_dimension)
    positions = 1
    for i, w in enumerate(ins.window):
        positions *= _valid_positions(_dim(lhs, dn.input_spatial_dimensions[i]),
                                      _dim(out, dn.output_spatial_dimensions[i]),
                                      _dim(rhs, dn.kernel_spatial_dimensions[i]), w)
    groups, bgroups = max(1, ins.feature_group_count), max(1, ins.batch_group_count)
    return 2.0 * (fin // groups) * fout * (batch // bgroups) * positions


class ModuleCosts:
    """The costs of the instructions of one HLO module (an ``xla.HloProto``'s bytes, or
    them decoded by ``hlo.module``); ``ValueError`` where the bytes are no such message."""

    def __init__(self, data: bytes | Module, tf32: bool = True):
        self.tf32 = tf32
        try:
            decoded = module(data) if isinstance(data, bytes) else data
            for c in decoded.computations:
                for i in c.instructions:
                    i.check()
        except ValueError as e:
            raise ValueError(f"not an HLO module ({e})") from e
        self.name = decoded.name
        self.computations = {c.id: c for c in decoded.computations}
        self.by_id = {i.id: i for c in decoded.computations for i in c.instructions}
        self._comp_cost: dict[int, tuple[float, float]] = {}
        self._fusion_bytes_of: dict[int, float] = {}
        self._core_of: dict[int, Instruction | None] = {}
        self._depth = 0
        self._fused = {cid for i in self.by_id.values() if i.opcode == "fusion" for cid in i.called_computation_ids}

    def costs(self, names: Collection[str] | None = None) -> dict[str, OpCost]:
        """instruction name -> its cost, for the instructions outside fusions (those that
        run as kernels, library calls or CPU thunks, or hold them), but for control flow
        (``_CONTROL_FLOW``), whose computations' instructions are costed themselves; the
        first of a name. ``names``: only the instructions of those names (the ops a trace
        shows running: the module's others are not costed)."""
        out: dict[str, OpCost] = {}
        for cid, comp in self.computations.items():
            if cid in self._fused:
                continue
            for ins in comp.instructions:
                if ins.opcode not in _CONTROL_FLOW and ins.name not in out and (names is None or ins.name in names):
                    out[ins.name] = self.cost(ins)
        return out

    def operand(self, ins: Instruction, i: int) -> Instruction:
        return self.by_id[ins.operand_ids[i]]

    def cost(self, ins: Instruction) -> OpCost:
        """The cost of instruction ``ins``; NaN FLOPs where the module does not hold what
        its count needs (an operand, a called computation) or its figures are beyond
        counting (a hostile module's)."""
        try:
            prec = self.precision(ins)
        except _UNCOUNTABLE:
            prec = ""
        try:
            flops, trans = self.flops(ins)
            moved = float(self.bytes(ins))
        except _UNCOUNTABLE:
            return OpCost(math.nan, math.nan, math.nan, prec)
        return OpCost(flops, trans, moved, prec)

    def flops(self, ins: Instruction) -> tuple[float, float]:
        """(FLOPs, transcendentals) of ``ins``."""
        op = ins.opcode
        if op in ELEMENTWISE:
            n = float(elements(ins.shape))
            return (0.0, n) if op in TRANSCENDENTAL else (n, 0.0)
        if op == "dot":
            return dot_flops(self.operand(ins, 0).shape, ins.shape,
                             ins.lhs_contracting_dimensions), 0.0
        if op == "convolution":
            return conv_flops(ins, self.operand(ins, 0).shape, self.operand(ins, 1).shape, ins.shape), 0.0
        if op == "custom-call":
            return self._custom_call_flops(ins), 0.0
        if op in _CALLS:
            f = t = 0.0
            for cid in ins.called_computation_ids:
                cf, ct = self.computation_flops(cid)
                f, t = f + cf, t + ct
            return f, t
        if op in ("reduce", "reduce-window", "map"):
            return self._reduction_flops(ins)
        if op == "all-reduce" or op == "all-reduce-start":
            return float(elements(ins.shape)), 0.0
        if op in ("rng", "rng-bit-generator"):
            return 0.0, float(elements(ins.shape))
        return 0.0, 0.0

    def _reduction_flops(self, ins: Instruction) -> tuple[float, float]:
        f, t = self.computation_flops(ins.called_computation_ids[0])
        out = float(elements(_first(ins.shape)))
        if ins.opcode == "reduce":
            times = float(elements(self.operand(ins, 0).shape)) - out
        elif ins.opcode == "reduce-window":
            times = (_product(tuple(d.size for d in ins.window)) - 1) * out
        else:
            times = out
        return f * times, t * times

    def _custom_call_flops(self, ins: Instruction) -> float:
        target = ins.custom_call_target
        if _is_gemm(target):
            config = json.loads(ins.backend_config or b"{}")
            dims = config.get("gemm_backend_config", config).get("dot_dimension_numbers", {})
            contracting = [int(d) for d in dims.get("lhs_contracting_dimensions", [])]
            return dot_flops(self.operand(ins, 0).shape, _first(ins.shape), contracting)
        if target.startswith(CONV_TARGET):
            return conv_flops(ins, self.operand(ins, 0).shape, self.operand(ins, 1).shape, _first(ins.shape))
        return math.nan

    def computation_flops(self, cid: int) -> tuple[float, float]:
        """(FLOPs, transcendentals) summed over computation ``cid``'s instructions;
        ValueError past :data:`hlo.MAX_DEPTH` nested calls (a hostile module's)."""
        if cid not in self._comp_cost:
            if self._depth >= MAX_DEPTH:
                raise ValueError(f"computations call each other deeper than {MAX_DEPTH}")
            self._comp_cost[cid] = (math.nan, math.nan)  # a recursion (none in valid HLO) reads as unknown
            self._depth += 1
            try:
                f = t = 0.0
                for i in self.computations[cid].instructions:
                    fi, ti = self.flops(i)
                    f, t = f + fi, t + ti
            finally:
                self._depth -= 1
            self._comp_cost[cid] = (f, t)
        return self._comp_cost[cid]

    def bytes(self, ins: Instruction) -> float:
        """Bytes ``ins`` reads and writes."""
        op = ins.opcode
        if op in _NO_BYTES:
            return 0.0
        if op == "fusion":
            return self._fusion_bytes(ins)
        if op == "slice" or op == "dynamic-slice":
            return 2 * nbytes(ins.shape) + self._operand_bytes(ins, 1)
        if op == "dynamic-update-slice":
            return 2 * nbytes(self.operand(ins, 1).shape) + self._operand_bytes(ins, 2)
        library = op == "custom-call" and _is_library(ins.custom_call_target)
        return (_library_output_bytes(ins.shape) if library else nbytes(ins.shape)) + self._operand_bytes(ins, 0)

    def _operand_bytes(self, ins: Instruction, first: int) -> float:
        return sum(nbytes(self.operand(ins, i).shape) for i in range(first, len(ins.operand_ids)))

    def _fusion_bytes(self, ins: Instruction) -> float:
        cid = ins.called_computation_ids[0]
        if cid not in self._fusion_bytes_of:  # once per fused computation, not per fusion calling it
            self._fusion_bytes_of[cid] = self._fused_computation_bytes(cid)
        return self._fusion_bytes_of[cid]

    def _fused_computation_bytes(self, cid: int) -> float:
        comp = self.computations[cid]
        inner = {i.id: i for i in comp.instructions}
        root = inner[comp.root_id]
        outs = [inner[o] for o in root.operand_ids] if root.opcode == "tuple" else [root]
        written = sum(nbytes(self.by_id[o.operand_ids[1]].shape) if o.opcode == "dynamic-update-slice"
                      else nbytes(o.shape) for o in outs)
        users: dict[int, list[Instruction]] = {}
        for i in comp.instructions:
            for o in i.operand_ids:
                users.setdefault(o, []).append(i)
        read = 0.0
        for p in comp.instructions:
            if p.opcode != "parameter":
                continue
            size = nbytes(p.shape)
            us = users.get(p.id, [])
            if us and all(u.opcode in ("slice", "dynamic-slice") and u.operand_ids[0] == p.id for u in us):
                size = min(size, sum(nbytes(u.shape) for u in us))
            elif us and all(u.opcode == "dynamic-update-slice" and u.operand_ids[0] == p.id for u in us):
                size = 0.0  # updated in place: only the update is written
            read += size
        return written + read

    def precision(self, ins: Instruction) -> str:
        """The precision of ``ins``: of its dot's or convolution's first operand, else of
        its output."""
        core = self._core(ins)
        if core is not None and core.operand_ids and core.operand_ids[0] in self.by_id:
            prec = PRECISION.get(self.by_id[core.operand_ids[0]].shape.element_type, "")
            return "tf32" if self.tf32 and prec == "fp32" and not _highest(core) else prec
        return PRECISION.get(_first(ins.shape).element_type, "")

    def _core(self, ins: Instruction, depth: int = 0) -> Instruction | None:
        """The dot, convolution or library call ``ins`` is or holds (first found), else None."""
        if ins.opcode in ("dot", "convolution") or (ins.opcode == "custom-call"
                                                    and _is_library(ins.custom_call_target)):
            return ins
        if ins.opcode == "fusion" and depth < MAX_DEPTH:
            for cid in ins.called_computation_ids:
                if cid not in self._core_of:
                    self._core_of[cid] = None  # a recursion (none in valid HLO) holds none
                    comp = self.computations.get(cid)
                    self._core_of[cid] = next((c for i in (comp.instructions if comp else ())
                                               if (c := self._core(i, depth + 1)) is not None), None)
                if self._core_of[cid] is not None:
                    return self._core_of[cid]
        return None


def _highest(ins: Instruction) -> bool:
    """Whether a dot's or convolution's operands are all of precision HIGHEST (full fp32
    products); XLA's GPU backends run an fp32 one of DEFAULT precision on tensor cores in
    TF32 (cuBLAS, cuDNN, Triton)."""
    if ins.opcode == "custom-call":
        try:
            config = json.loads(ins.backend_config or b"{}")
        except ValueError:
            return False
        found = config.get("gemm_backend_config", {}).get("precision_config", {}).get("operand_precision", [])
        return bool(found) and all(p == "HIGHEST" for p in found)
    found = ins.operand_precision
    return bool(found) and all(p == 2 for p in found)


def _library_output_bytes(shape: Shape) -> float:
    """A library call's output bytes less its scratch buffer (the last tuple element, an
    ``s8[n]`` / ``u8[n]`` workspace)."""
    if shape.element_type != _TUPLE or len(shape.tuple_shapes) < 2:
        return nbytes(shape)
    last = shape.tuple_shapes[-1]
    scratch = nbytes(last) if last.element_type in (2, 6) and len(last.dimensions) == 1 else 0.0
    return nbytes(shape) - scratch


def module_costs(data: bytes | Module, tf32: bool = True, names: Collection[str] | None = None) -> dict[str, OpCost]:
    """instruction name -> :class:`OpCost` of the module in ``data`` (an ``xla.HloProto``,
    or it decoded by ``hlo.module``), run by a backend that computes DEFAULT-precision
    fp32 products in TF32 (a GPU's) or not (``tf32=False``: XLA's CPU backend);
    ``names``: of those instructions only (:meth:`ModuleCosts.costs`); ValueError where
    the bytes are damaged."""
    return ModuleCosts(data, tf32).costs(names)
