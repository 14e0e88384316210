"""FLOPs and bytes of framework ops: from the trace where it has them, else estimated
from the op's input shapes and types (torch's ``Input Dims`` / ``Input type`` /
``Concrete Inputs``) and what the op is.

The formulas, and what each does not cover, are in docs/analysis.md ("FLOPs and
bytes"). The matrix products and ``conv2d`` count as torch's profiler counts them
(``with_flops=True``: 2·M·K·N per product, bias additions not counted), so the two
agree where both exist. Estimates are made once per distinct (op, shapes, types,
arguments), not per event.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..derive import cache
from ..trace import keys
from ..trace.core import Trace
from ..trace.sorting import unique, unique_inverse

INPUT_DIMS, INPUT_TYPE, CONCRETE = keys.INPUT_DIMS, keys.INPUT_TYPE, keys.CONCRETE_INPUTS
XLA_BYTES = keys.BYTES_ACCESSED  # XLA's cost analysis, as XSpace carries it on each HLO op

#: where an op's figures come from (the ``flops_source`` column)
SOURCE_NAMES = np.array(["", "trace", "shapes", "counters"], object)
NONE, TRACE, SHAPES, COUNTERS = 0, 1, 2, 3

#: CUPTI range-profiler counters of executed floating-point instructions (per thread) ->
#: (FLOPs per instruction, precision): Nsight Compute's "achieved FLOPs" sum, a fused
#: multiply-add counting two
_SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
COUNTER_FLOPS = {_SASS.format(op): (2.0 if op.endswith("fma") else 1.0, prec)
                 for prec, ops in (("fp64", ("dadd", "dmul", "dfma")), ("fp32", ("fadd", "fmul", "ffma")),
                                   ("fp16", ("hadd", "hmul", "hfma")))
                 for op in ops}

#: bytes per element of torch's type names, and the precision they compute in
_TYPES: dict[str, tuple[int, str]] = {
    "double": (8, "fp64"), "float": (4, "fp32"), "c10::Half": (2, "fp16"), "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"), "unsigned char": (1, "int8"),
    "c10::qint8": (1, "int8"), "c10::quint8": (1, "int8"), "bool": (1, ""), "short int": (2, ""),
    "int": (4, ""), "long int": (8, ""), "long": (8, ""), "c10::complex<float>": (8, "fp32"),
    "c10::complex<double>": (16, "fp64"),
}


class Costs(NamedTuple):
    """Per row asked for: ``flops`` and ``bytes`` (float64; NaN where unknown),
    ``precision`` (``fp32``, ``bf16``...; "" where unknown) and ``source`` (codes of
    :data:`SOURCE_NAMES`)."""

    flops: np.ndarray
    bytes: np.ndarray
    precision: np.ndarray
    source: np.ndarray


def op_costs(trace: Trace, rows: np.ndarray, estimate: bool = True) -> Costs:
    """FLOPs and bytes of the events ``rows`` (ascending): the trace's ``flops`` /
    ``bytes_accessed`` stats where an event has them, else (``estimate``) the estimate
    from its shapes (:func:`estimate`)."""
    rows = np.asarray(rows, np.int64)
    n = len(rows)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    prec = np.full(n, "", object)
    src = np.zeros(n, np.int8)
    if not n:
        return Costs(flops, nbytes, prec, src)
    found = trace.stats.lookup_rows([keys.FLOPS, XLA_BYTES], rows)
    # shapes are read only for the ops a rule covers: the args of every other op stay
    # undecoded (most of a trace's ops, and most of the cost of reading them)
    covered = np.flatnonzero(_covered(trace, rows)) if estimate else np.zeros(0, np.int64)
    if len(covered):
        f, b, p = _shape_estimates(trace, rows[covered])
        flops[covered], nbytes[covered], prec[covered] = f, b, p
        src[covered[~np.isnan(f)]] = SHAPES
    _counters(trace, rows, flops, prec, src)
    for stat, out in ((keys.FLOPS, flops), (XLA_BYTES, nbytes)):
        if stat in found:
            has, vals = found[stat]
            v = np.asarray(vals, np.float64) if np.asarray(vals).dtype.kind in "iuf" else _numbers(vals)
            out[has] = v
            if stat == keys.FLOPS:
                src[has] = TRACE
    return Costs(flops, nbytes, prec, src)


def counter_rows(trace: Trace) -> np.ndarray:
    """Rows carrying any of the FLOP counters (:data:`COUNTER_FLOPS`), ascending."""
    cols = [trace.stats.get(k) for k in COUNTER_FLOPS if k in trace.stats]
    return unique(np.concatenate([c.rows for c in cols if c is not None] or [np.zeros(0, np.int64)]))


def _counters(trace: Trace, rows: np.ndarray, flops: np.ndarray, prec: np.ndarray, src: np.ndarray) -> None:
    """FLOPs measured by CUPTI's instruction counters, where the rows carry them; the
    precision with the most FLOPs."""
    present = [k for k in COUNTER_FLOPS if k in trace.stats]
    if not present:
        return
    found = trace.stats.lookup_rows(present, rows)
    total = np.zeros(len(rows))
    per = {p: np.zeros(len(rows)) for p in ("fp64", "fp32", "fp16")}
    has_any = np.zeros(len(rows), bool)
    for k, (has, vals) in found.items():
        w, p = COUNTER_FLOPS[k]
        v = w * np.asarray(vals, np.float64)
        total[has] += v
        per[p][has] += v
        has_any |= has
    at = np.flatnonzero(has_any)
    flops[at] = total[at]
    names = np.array(list(per), object)
    prec[at] = np.where(total[at] > 0, names[np.argmax(np.stack([per[p][at] for p in per]), axis=0)], "")
    src[at] = COUNTERS


def _shape_estimates(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flops, bytes, precision) from the shapes of ``rows`` (ascending; NaN, NaN, "" where
    none), each row estimated once per trace: op_efficiency, the kernels' costs and
    kernel_efficiency ask for the same ops, whose args are decoded once."""
    done: dict[str, np.ndarray] = cache.memo(trace, "shape_estimates", lambda t: {
        "rows": np.zeros(0, np.int64), "flops": np.zeros(0), "bytes": np.zeros(0), "prec": np.zeros(0, object)})
    pos = np.searchsorted(done["rows"], rows)
    have = pos < len(done["rows"])
    have[have] = done["rows"][pos[have]] == rows[have]
    new = rows[~have]
    if len(new):
        f, b, p = _estimate_rows(trace, new)
        merged = np.concatenate([done["rows"], new])
        order = np.argsort(merged, kind="stable")
        done["rows"] = merged[order]
        for k, v in (("flops", f), ("bytes", b), ("prec", p)):
            done[k] = np.concatenate([done[k], v])[order]
        pos = np.searchsorted(done["rows"], rows)
    return done["flops"][pos], done["bytes"][pos], done["prec"][pos]


def _estimate_rows(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_shape_estimates` for rows not estimated yet: each distinct (name, dims,
    types, concrete inputs) estimated once."""
    n = len(rows)
    flops, nbytes, prec = np.full(n, np.nan), np.full(n, np.nan), np.full(n, "", object)
    shapes = trace.stats.lookup_rows([INPUT_DIMS, INPUT_TYPE, CONCRETE], rows)
    if INPUT_DIMS not in shapes or not np.any(shapes[INPUT_DIMS][0]):  # a column with no row here: nothing
        return flops, nbytes, prec
    has, dims = shapes[INPUT_DIMS]
    at = np.flatnonzero(has)
    types = _text_at(shapes.get(INPUT_TYPE), at, n)
    conc = _text_at(shapes.get(CONCRETE), at, n)
    names = trace.events["name"][rows[at]].tolist()
    # one pass over the rows' (name, dims, types, concrete) tuples: their texts are the same
    # few objects over and over (a lookup spreads each distinct value), whose hashes are kept
    seen: dict[tuple, int] = {}
    calls = list(zip(names, np.asarray(dims, object).tolist(), types.tolist(), conc.tolist()))
    inv = np.fromiter((seen.setdefault(c, len(seen)) for c in calls), np.intp, len(calls))
    est = [estimate_one(trace.strings[n], d, t, c) for n, d, t, c in seen]
    flops[at] = np.array([e[0] for e in est], np.float64)[inv]
    nbytes[at] = np.array([e[1] for e in est], np.float64)[inv]
    prec[at] = np.array([e[2] for e in est], object)[inv]
    return flops, nbytes, prec


def _covered(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` name an op a rule of :func:`estimate_one` covers (once per name)."""
    names = np.asarray(trace.events["name"][rows])
    # name ids as 16 bits where every id fits: NumPy's stable sort of those is a radix sort
    codes, inv = unique_inverse(names.astype(np.uint16 if len(trace.strings) <= 1 << 16 else np.int64))
    strings = trace.strings
    ok = np.fromiter(map(_has_rule, [strings[c] for c in codes.tolist()]), bool, len(codes))
    return ok[inv]


def _has_rule(name: str) -> bool:
    return _rule(name.rsplit("::", 1)[-1].split(".", 1)[0]) is not None


def _text_at(col: tuple[np.ndarray, np.ndarray] | None, at: np.ndarray, n: int) -> np.ndarray:
    """The text values of a looked-up stat at the positions ``at`` ("" where absent)."""
    out = np.full(n, "", object)
    if col is not None:
        has, vals = col
        out[has] = vals
    return out[at]


def _numbers(vals: np.ndarray) -> np.ndarray:
    out = np.full(len(vals), np.nan)
    for i, v in enumerate(vals.tolist()):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            pass
    return out


# ------------------------------------------------------------------ one op
def estimate_one(name: str, dims_text: str, types_text: str = "", concrete_text: str = "") -> tuple[float, float, str]:
    """(flops, bytes, precision) of one call of op ``name`` with these inputs (the
    JSON texts torch records); NaN flops and bytes for an op not covered or inputs
    that do not fit it."""
    try:
        dims = _json(dims_text) if dims_text else []
        types = _json(types_text) if types_text else []
        conc = _json(concrete_text) if concrete_text else []
    except (ValueError, TypeError):
        return math.nan, math.nan, ""
    if not isinstance(dims, list):
        return math.nan, math.nan, ""
    base = name.rsplit("::", 1)[-1].split(".", 1)[0]
    rule = _rule(base)
    if rule is None:
        return math.nan, math.nan, ""
    types = types if isinstance(types, list) else []
    elem, prec = _element(types)
    try:
        fl, elems = rule(Op(base, dims, types, conc if isinstance(conc, list) else []))
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return math.nan, math.nan, ""
    return float(fl), float(elems) * elem if elem else math.nan, prec


def _json(text: str) -> Any:
    """JSON text -> value: orjson's decode, else the standard library's (numbers past 64
    bits, NaN and Infinity, which it reads and orjson does not); ValueError if neither reads it."""
    import orjson  # torch's input shapes only: an XSpace summary never imports it (test_import_weight.py)

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _element(types: Sequence[Any]) -> tuple[int, str]:
    """Bytes per element and precision of the first tensor input with a known type."""
    for t in types:
        if isinstance(t, str) and t in _TYPES:
            return _TYPES[t]
    return 0, ""


class Op(NamedTuple):
    """One call: the base name (``mm``), input dims, input types, concrete inputs."""

    name: str
    dims: list
    types: list
    conc: list

    def shape(self, i: int) -> list[int]:
        d = self.dims[i]
        if not isinstance(d, list) or any(not isinstance(x, int) for x in d):
            raise TypeError("not one tensor")
        return d

    def arg(self, i: int, default: Any = None) -> Any:
        """Concrete input ``i`` as a Python value ("[2, 2]" -> [2, 2], "True" -> True)."""
        if i >= len(self.conc) or self.conc[i] in ("", None):
            return default
        v = self.conc[i]
        if not isinstance(v, str):
            return v
        low = v.strip()
        if low in ("True", "False"):
            return low == "True"
        try:
            return json.loads(low)
        except ValueError:
            return low.strip("'\"")


def numel(shape: Sequence[int]) -> int:
    """Elements of a tensor of this shape, multiplied as doubles left to right (as NumPy's
    product of a short float64 array): a plain loop, not an array per call."""
    return int(math.prod(map(float, shape))) if len(shape) else 1


def _broadcast(*shapes: Sequence[int]) -> list[int]:
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for i, x in enumerate(s):
            j = n - len(s) + i
            out[j] = x if out[j] == 1 else out[j]
    return out


def _tensors(op: Op) -> list[list[int]]:
    """The dims of every tensor input (empty dims of scalars and None left out)."""
    return [d for d in op.dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]


# --- matrix products (torch's profiler: 2*M*K*N, additions of bias not counted) ---
def _mm(op: Op) -> tuple[float, float]:
    o = 1 if op.name in ("addmm", "addmm_") else 0
    a, b = op.shape(o), op.shape(o + 1)
    m, k, n = a[0], a[1], b[1]
    return 2.0 * m * k * n, m * k + k * n + m * n + (numel(op.shape(0)) if o else 0)


def _bmm(op: Op) -> tuple[float, float]:
    o = 1 if op.name.startswith("baddbmm") else 0
    a, b = op.shape(o), op.shape(o + 1)
    bb, m, k, n = a[0], a[1], a[2], b[2]
    return 2.0 * bb * m * k * n, bb * (m * k + k * n + m * n) + (numel(op.shape(0)) if o else 0)


def _matmul(op: Op) -> tuple[float, float]:
    a, b = op.shape(0), op.shape(1)
    if len(a) == 1 and len(b) == 1:
        return 2.0 * a[0], 2 * a[0] + 1
    m, k = (1, a[0]) if len(a) == 1 else (a[-2], a[-1])
    n = 1 if len(b) == 1 else b[-1]
    batch = numel(_broadcast(a[:-2], b[:-2])) if len(a) > 2 or len(b) > 2 else 1
    return 2.0 * batch * m * k * n, numel(a) + numel(b) + batch * m * n


def _linear(op: Op) -> tuple[float, float]:
    x, w = op.shape(0), op.shape(1)
    rows, k, n = numel(x[:-1]), x[-1], w[0]
    bias = numel(op.shape(2)) if len(op.dims) > 2 and op.dims[2] else 0
    return 2.0 * rows * k * n, numel(x) + numel(w) + bias + rows * n


# --- convolution ---
#: positions of (stride, padding, dilation, transposed) in the concrete inputs
_CONV_ARGS = {"conv1d": (3, 4, 5, None), "conv2d": (3, 4, 5, None), "conv3d": (3, 4, 5, None),
              "convolution": (3, 4, 5, 6), "_convolution": (3, 4, 5, 6),
              "cudnn_convolution": (3, 2, 4, None), "mkldnn_convolution": (4, 3, 5, None),
              "miopen_convolution": (4, 3, 5, None), "slow_conv2d_forward": (4, 5, None, None),
              "_slow_conv2d_forward": (4, 5, None, None), "thnn_conv2d": (4, 5, None, None)}
_CONV_T = ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cudnn_convolution_transpose",
           "miopen_convolution_transpose")


def _per_dim(v: Any, n: int, default: int) -> list[int]:
    if v is None:
        return [default] * n
    v = v if isinstance(v, list) else [v]
    return [int(x) for x in (v * n if len(v) == 1 else v)][:n]


def _conv_out(op: Op, x: list[int], w: list[int]) -> list[int]:
    """Output spatial size of a (not transposed) convolution. Without its stride and
    padding (a trace recorded without concrete inputs, as torch did before 2.0) the size
    is unknown: ValueError, so the call has no FLOPs rather than a stride-1 guess (4x
    the FLOPs of a stride-2 convolution)."""
    si, pi, di, _ = _CONV_ARGS[op.name]
    nd = len(w) - 2
    pad_v = op.arg(pi)
    if op.arg(si) is None or pad_v is None:
        raise ValueError("stride or padding not recorded")
    stride = _per_dim(op.arg(si), nd, 1)
    dil = _per_dim(op.arg(di) if di is not None else None, nd, 1)
    if pad_v == "same":
        return x[2:]
    pad = _per_dim(0 if pad_v == "valid" else pad_v, nd, 0)
    return [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(nd)]


def _conv(op: Op) -> tuple[float, float]:
    x, w = op.shape(0), op.shape(1)
    ti = _CONV_ARGS.get(op.name, (0, 0, 0, None))[3]
    transposed = op.name in _CONV_T or (ti is not None and op.arg(ti) is True)
    bias = numel(op.dims[2]) if len(op.dims) > 2 and isinstance(op.dims[2], list) and op.dims[2] else 0
    if transposed:  # weight [Cin, Cout/g, k...]: each input element meets Cout/g * k weights
        fl = 2.0 * numel(x) * w[1] * numel(w[2:])
        return fl, numel(x) + numel(w) + bias + _t_out(x, w)
    out = _conv_out(op, x, w)
    n_out = x[0] * w[0] * numel(out)
    return 2.0 * n_out * w[1] * numel(w[2:]), numel(x) + numel(w) + bias + n_out


def _t_out(x: list[int], w: list[int]) -> float:
    """Elements written by a transposed convolution, as if stride 1, no padding."""
    return x[0] * w[1] * numel([x[2 + i] + w[2 + i] - 1 for i in range(len(w) - 2)])


def _conv_backward(op: Op) -> tuple[float, float]:
    """convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask): each of grad input and grad weight
    asked for (``output_mask``) costs the forward's FLOPs."""
    g, x, w = op.shape(0), op.shape(1), op.shape(2)
    fwd = 2.0 * numel(x) * w[1] * numel(w[2:]) if op.arg(7) is True else 2.0 * numel(g) * w[1] * numel(w[2:])
    mask = op.arg(10, [True, True, True])
    parts = sum(bool(m) for m in mask[:2]) if isinstance(mask, list) else 2
    return fwd * parts, 2 * numel(g) + 2 * numel(x) + 2 * numel(w)


# --- attention ---
#: base name -> (index of q, layout "bhld" or "blhd", index of is_causal, backward)
_ATTENTION = {
    "scaled_dot_product_attention": (0, "bhld", 5, False),
    "_scaled_dot_product_flash_attention": (0, "bhld", 4, False),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "bhld", 4, False),
    "_scaled_dot_product_efficient_attention": (0, "bhld", 6, False),
    "_scaled_dot_product_cudnn_attention": (0, "bhld", 6, False),
    "_scaled_dot_product_fused_attention_overrideable": (0, "bhld", 5, False),
    "_flash_attention_forward": (0, "blhd", 8, False),
    "_efficient_attention_forward": (0, "blhd", 9, False),
    "_scaled_dot_product_flash_attention_backward": (1, "bhld", 11, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhld", 7, True),
    "_scaled_dot_product_efficient_attention_backward": (1, "bhld", 11, True),
    "_scaled_dot_product_cudnn_attention_backward": (1, "bhld", 14, True),
    "_flash_attention_backward": (1, "blhd", 11, True),
    "_efficient_attention_backward": (1, "blhd", 14, True),
}


def _attention(op: Op) -> tuple[float, float]:
    """Q·Kᵀ and P·V: 2·B·H·L·S·(E + Ev) forward, halved when causal; the backward 2.5×
    the forward (five products for two)."""
    qi, layout, ci, backward = _ATTENTION[op.name]
    q, k, v = op.shape(qi), op.shape(qi + 1), op.shape(qi + 2)
    if len(q) != 4:
        raise ValueError("varlen or unbatched attention is not covered")
    if layout == "bhld":
        b, h, lq, e = q
        s, ev = k[2], v[3]
    else:
        b, lq, h, e = q
        s, ev = k[1], v[3]
    causal = op.arg(ci)
    half = 0.5 if causal is True or (op.name.startswith("_efficient") and isinstance(causal, int)
                                     and not isinstance(causal, bool) and causal > 0) else 1.0
    fwd = 2.0 * b * h * lq * s * (e + ev) * half
    io = numel(q) + numel(k) + numel(v) + b * h * lq * ev
    return (2.5 * fwd, 2 * io + b * h * lq * ev) if backward else (fwd, io)


# --- normalisation, softmax, elementwise, embedding, optimizers ---
def _per_element(flops_each: float, reads: int = 1) -> Callable[[Op], tuple[float, float]]:
    def rule(op: Op) -> tuple[float, float]:
        n = numel(op.shape(0))
        return flops_each * n, n * (reads + 1)
    return rule


def _layer_norm(op: Op) -> tuple[float, float]:
    """mean, centre, square and sum, scale by 1/σ: 5 per element; weight and bias 2 more."""
    x = op.shape(0)
    affine = len(op.dims) > 3 and isinstance(op.dims[2], list) and bool(op.dims[2])
    n = numel(x)
    return (7.0 if affine else 5.0) * n, 2 * n + (2 * numel(op.dims[2]) if affine else 0)


def _rms_norm(op: Op) -> tuple[float, float]:
    """square and sum, scale by 1/rms: 3 per element; weight 1 more."""
    x = op.shape(0)
    weight = len(op.dims) > 2 and isinstance(op.dims[2], list) and bool(op.dims[2])
    n = numel(x)
    return (4.0 if weight else 3.0) * n, 2 * n + (numel(op.dims[2]) if weight else 0)


def _elementwise(each: float) -> Callable[[Op], tuple[float, float]]:
    """``each`` FLOPs per element of the (broadcast) result; bytes: inputs and result."""
    def rule(op: Op) -> tuple[float, float]:
        ts = _tensors(op)
        if not ts:
            raise ValueError("no tensor input")
        out = numel(_broadcast(*ts))
        return each * out, sum(numel(t) for t in ts) + out
    return rule


def _add_mul(op: Op) -> tuple[float, float]:
    """torch's profiler counts aten::add and aten::mul as one FLOP per element of the first input."""
    ts = _tensors(op)
    return float(numel(op.shape(0))), sum(numel(t) for t in ts) + numel(_broadcast(*ts))


def _copy(op: Op) -> tuple[float, float]:
    n = numel(op.shape(0))
    return 0.0, 2 * n


def _embedding(op: Op) -> tuple[float, float]:
    """embedding(weight[V, D], indices): a gather, no FLOPs; reads and writes rows·D."""
    w, idx = op.shape(0), op.shape(1)
    out = numel(idx) * w[-1]
    return 0.0, 2 * out + numel(idx) * 2  # indices are int64: 2 elements of a 4-byte type


#: per element of the first TensorList: FLOPs, and how many lists are read and written
_FOREACH = {"add": 1, "sub": 1, "mul": 1, "div": 1, "addcmul": 3, "addcdiv": 3, "lerp": 2, "sqrt": 1,
            "neg": 1, "abs": 1, "exp": 1, "reciprocal": 1, "maximum": 1, "minimum": 1, "pow": 1,
            "clamp_min": 1, "clamp_max": 1, "norm": 2, "sign": 1, "copy": 0, "zero": 0}
#: Adam(W): m, v updated (3 + 4), bias corrections and the step (6): 13 per element, +2 with weight decay
_FUSED = {"_fused_adam": 13.0, "_fused_adamw": 15.0, "_fused_sgd": 3.0, "_fused_adagrad": 6.0}


def _lists(op: Op) -> list[list[list[int]]]:
    return [d for d in op.dims if isinstance(d, list) and d and all(isinstance(t, list) for t in d)]


def _foreach(op: Op) -> tuple[float, float]:
    ls = _lists(op)
    if not ls:
        raise ValueError("no TensorList")
    n = sum(numel(t) for t in ls[0])
    base = op.name[len("_foreach_"):].rstrip("_")
    each = _FOREACH.get(base)
    if each is None:
        raise ValueError("foreach op not covered")
    return float(each) * n, n * (len(ls) + 1)


def _fused_optimizer(op: Op) -> tuple[float, float]:
    ls = _lists(op)
    n = sum(numel(t) for t in ls[0])
    lists = min(len(ls), 4)  # params, grads and (Adam) the two moments: read; the same less grads written
    return _FUSED[op.name.rstrip("_")] * n, n * (2 * lists - 1)


_ELEMENTWISE_1 = ("sub", "div", "rsub", "relu", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid",
                  "tanh", "clamp", "clamp_min", "clamp_max", "threshold", "threshold_backward", "maximum",
                  "minimum", "where", "pow", "reciprocal", "square", "hardtanh", "leaky_relu", "elu", "sign",
                  "sigmoid_backward", "tanh_backward", "silu", "gelu", "silu_backward", "gelu_backward", "fill")
_ELEMENTWISE_COST = {"gelu": 8.0, "silu": 4.0, "gelu_backward": 13.0, "silu_backward": 6.0,
                     "sigmoid": 4.0, "tanh": 4.0, "sigmoid_backward": 2.0, "tanh_backward": 2.0,
                     "addcmul": 3.0, "addcdiv": 3.0, "lerp": 2.0, "fill": 0.0, "where": 1.0}

_RULES: dict[str, Callable[[Op], tuple[float, float]]] = {
    "mm": _mm, "addmm": _mm, "_addmm_activation": _mm, "bmm": _bmm, "baddbmm": _bmm,
    "matmul": _matmul, "linear": _linear,
    **{k: _conv for k in (*_CONV_ARGS, *_CONV_T)},
    "convolution_backward": _conv_backward,
    **{k: _attention for k in _ATTENTION},
    "layer_norm": _layer_norm, "native_layer_norm": _layer_norm, "rms_norm": _rms_norm,
    "_fused_rms_norm": _rms_norm,
    "softmax": _per_element(5.0), "_softmax": _per_element(5.0), "log_softmax": _per_element(5.0),
    "_log_softmax": _per_element(5.0), "_safe_softmax": _per_element(5.0),
    "add": _add_mul, "mul": _add_mul,
    **{k: _elementwise(_ELEMENTWISE_COST.get(k, 1.0)) for k in (*_ELEMENTWISE_1, "addcmul", "addcdiv", "lerp")},
    "copy": _copy, "clone": _copy, "contiguous": _copy,
    "embedding": _embedding,
}


def _rule(base: str) -> Callable[[Op], tuple[float, float]] | None:
    """The rule for an op's base name (``add_`` and ``add.out`` as ``add``)."""
    b = base.split(".", 1)[0]
    if b.startswith("_foreach_"):
        return _foreach
    if b.rstrip("_") in _FUSED:
        return _fused_optimizer
    return _RULES.get(b) or (_RULES.get(b[:-1]) if b.endswith("_") and b[:-1] in _RULES else None)
