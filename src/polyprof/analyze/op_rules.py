"""The FLOPs and elements moved of one call of a framework op, by what the op is: one rule
per op (matrix products, convolutions, attention, normalisation, elementwise ops,
embeddings, optimizers), read from its input shapes, types, concrete inputs and strides
(``analyze/flops.py`` decodes them and counts bytes). The formulas, and what each does
not cover, are in docs/analysis.md ("FLOPs and bytes")."""

from __future__ import annotations

import json
import re
import math
from typing import Any, Callable, NamedTuple, Sequence


#: Python's literals in a concrete input, and JSON's
_PY_WORDS = re.compile(r"\b(?:True|False|None)\b")
_JSON_WORDS = {"True": "true", "False": "false", "None": "null"}


class Op(NamedTuple):
    """One call: the base name (``mm``), input dims, types, concrete inputs and strides;
    ``sizes`` each input's bytes per element (0 where unknown) and ``elem`` the op's, that
    of its data (``analyze/flops.py``: what it multiplies the elements a rule counts by)."""

    name: str
    dims: list
    types: list
    conc: list
    strides: list = []
    sizes: list = []
    elem: int = 0

    def width(self, i: int, default: float = 1.0) -> float:
        """Input ``i``'s element size in the op's elements (a where's bool mask of fp32
        data: 0.25); ``default`` where either size is unknown."""
        s = self.sizes[i] if i < len(self.sizes) else 0
        return s / self.elem if s and self.elem else default

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
            pass
        if low[:1] in "[(" and _PY_WORDS.search(low):  # torch writes a list of bools as Python: [False, True, True]
            try:
                return json.loads(_PY_WORDS.sub(lambda m: _JSON_WORDS[m.group(0)], low.replace("(", "[").replace(")", "]")))
            except ValueError:
                pass
        return low.strip("'\"")


def numel(shape: Sequence[int]) -> int:
    """Elements of a tensor of this shape, multiplied as doubles left to right (as NumPy's
    product of a short float64 array): a plain loop, not an array per call."""
    return int(math.prod(map(float, shape))) if len(shape) else 1


def _broadcast(*shapes: Sequence[int]) -> list[int]:
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for j, x in enumerate(s, n - len(s)):
            out[j] = x if out[j] == 1 else out[j]
    return out


def _is_tensor(d: Any) -> bool:  # a tensor's dims, of one dimension or more (not a scalar's or a TensorList's)
    return isinstance(d, list) and bool(d) and all(isinstance(x, int) for x in d)


#: an elementwise op's arguments merged over its functional overloads' schemas (``T`` a position some overload
#: takes a tensor at, ``x`` one none does: a Scalar, alpha, a rounding mode): add.Tensor(self, other, *, alpha)
#: is ``TTx``. An ``out=`` call records its output last among the inputs, and its name has no overload (torch
#: 1.8's ``clamp_min_`` calls ``aten::clamp_min`` with ``out`` its ``self``).
_SIGNATURES = {n: sig for sig, names in (
    ("T", "relu neg abs exp sqrt rsqrt sigmoid tanh reciprocal square sign silu"),
    ("Tx", "log gelu leaky_relu clone contiguous"), ("Txx", "threshold hardtanh"), ("Txxx", "elu"),
    ("TT", "mul maximum minimum clamp_min clamp_max pow sigmoid_backward tanh_backward silu_backward fill"
           " eq ne lt le gt ge"),
    ("TTx", "add sub rsub div threshold_backward gelu_backward copy"), ("TTT", "clamp where lerp"),
    ("TTTx", "addcmul addcdiv")) for n in names.split()}


def _split_out(op: Op) -> tuple[list[int], int | None]:
    """(positions of the tensors read, of the ``out=`` tensor or None): a tensor last, past the functional's
    arguments or where it takes none (:data:`_SIGNATURES`). ``aten::add(a, b, 1)`` reads two; (a, b, 1, out) too."""
    d, n = op.dims, len(op.dims)
    sig = _SIGNATURES.get(op.name.rstrip("_"))
    out = n - 1 if sig is not None and n and _is_tensor(d[-1]) and (n > len(sig) or sig[n - 1] == "x") else None
    return [i for i in range(n if out is None else n - 1) if _is_tensor(d[i])], out


def _read(op: Op, i: int) -> float:
    """Elements input ``i`` reads, in the op's elements (:meth:`Op.width`: a bool mask
    counts a quarter of an fp32 element): an expanded one's (stride 0 dims) distinct
    elements where its strides are recorded (torch 2.x), else all."""
    d = op.dims[i]
    s = op.strides[i] if i < len(op.strides) else None
    if isinstance(s, list) and len(s) == len(d) and all(isinstance(x, int) for x in s):
        return numel([x for x, st in zip(d, s) if st != 0]) * op.width(i)
    return numel(d) * op.width(i)


# --- matrix products (torch's profiler: 2*M*K*N, additions of bias not counted) ---
def _inner(k: int, k2: int, args: int, most: int) -> None:
    """ValueError where inner dims differ or arguments outnumber the schemas': several calls' shapes spliced."""
    if k != k2 or args > most:
        raise ValueError("inputs are not a product's")


def _mm(op: Op) -> tuple[float, float]:
    o = 1 if op.name.rstrip("_") in ("addmm", "_addmm_activation") else 0
    a, b = op.shape(o), op.shape(o + 1)
    m, k, n = a[0], a[1], b[1]
    _inner(k, b[0], len(op.dims), 7 if o else 4)
    return 2.0 * m * k * n, m * k + k * n + m * n + (numel(op.shape(0)) if o else 0)


def _bmm(op: Op) -> tuple[float, float]:
    o = 1 if op.name.startswith("baddbmm") else 0
    a, b = op.shape(o), op.shape(o + 1)
    bb, m, k, n = a[0], a[1], a[2], b[2]
    _inner(k, b[1], len(op.dims), 7 if o else 4)
    return 2.0 * bb * m * k * n, bb * (m * k + k * n + m * n) + (numel(op.shape(0)) if o else 0)


def _matmul(op: Op) -> tuple[float, float]:
    a, b = op.shape(0), op.shape(1)
    if len(a) == 1 and len(b) == 1:
        _inner(a[0], b[0], len(op.dims), 3)
        return 2.0 * a[0], 2 * a[0] + 1
    m, k = (1, a[0]) if len(a) == 1 else (a[-2], a[-1])
    n = 1 if len(b) == 1 else b[-1]
    _inner(k, b[0] if len(b) == 1 else b[-2], len(op.dims), 3)
    batch = numel(_broadcast(a[:-2], b[:-2])) if len(a) > 2 or len(b) > 2 else 1
    return 2.0 * batch * m * k * n, numel(a) + numel(b) + batch * m * n


def _linear(op: Op) -> tuple[float, float]:
    x, w = op.shape(0), op.shape(1)
    rows, k, n = numel(x[:-1]), x[-1], w[0]
    _inner(k, w[-1], len(op.dims), 4)
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
    """Q·Kᵀ and P·V: 2·B·H·L·S·(E + Ev) forward, halved when causal; the backward five
    products, as torch's FlopCounterMode counts them: Q·Kᵀ again, dO·Vᵀ and Pᵀ·dO (Ev),
    dS·K and dSᵀ·Q (E): 2·B·H·L·S·(3·E + 2·Ev), 2.5× the forward where E = Ev."""
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
    io = numel(q) + numel(k) + numel(v) + b * h * lq * ev
    if backward:
        return 2.0 * b * h * lq * s * (3 * e + 2 * ev) * half, 2 * io + b * h * lq * ev
    return 2.0 * b * h * lq * s * (e + ev) * half, io


# --- recurrent layers ---
#: ops whose weights come in a TensorList (every layer and direction: w_ih, w_hh, biases, w_hr)
_RNN_LISTS = ("lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn", "miopen_rnn")


def _rnn(op: Op) -> tuple[float, float]:
    """An RNN, LSTM or GRU: per time step and sequence, each weight matrix (w_ih, w_hh and
    an LSTM's projection w_hr, of every layer and direction) multiplies a vector:
    2·steps·Σ weight elements, steps the input's leading dims (T·N, or a packed sequence's
    rows). The biases and the gates' elementwise work are not counted. ``mkldnn_rnn_layer``
    (one layer and direction on a CPU: input, w_ih, w_hh, ...) counts its two weights."""
    x = op.shape(0)
    steps = numel(x[:-1])
    if op.name == "mkldnn_rnn_layer":
        mats = [op.shape(1), op.shape(2)]
    else:
        mats = [t for d in op.dims if isinstance(d, list) and d and all(isinstance(m, list) for m in d)
                for t in d if len(t) == 2]
    if not mats:
        raise ValueError("no weights")
    weights = sum(numel(m) for m in mats)
    out = steps * mats[1][1] if len(mats) > 1 else 0  # w_hh [gates·H, H (or the projection's size)]
    return 2.0 * steps * weights, numel(x) + weights + out


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


#: comparisons: their result is bool, one byte per element
_BOOL_RESULT = frozenset("eq ne lt le gt ge".split())


def _result(op: Op) -> tuple[int, float]:
    """(elements of the result, elements read and written, each tensor at its own size:
    :func:`_read`): an ``out=`` tensor is the result, not an input; a comparison's result
    is bool, else of the op's type."""
    ins, out = _split_out(op)
    if not ins:
        raise ValueError("no tensor input")
    n = numel(op.dims[out]) if out is not None else numel(_broadcast(*(op.dims[i] for i in ins)))
    width = op.width(out) if out is not None else \
        (1.0 / op.elem if op.elem and op.name.rstrip("_") in _BOOL_RESULT else 1.0)
    return n, sum(_read(op, i) for i in ins) + n * width


def _elementwise(each: float) -> Callable[[Op], tuple[float, float]]:
    """``each`` FLOPs per element of the (broadcast) result; bytes: :func:`_result`'s."""
    def rule(op: Op) -> tuple[float, float]:
        n, moved = _result(op)
        return each * n, moved
    return rule


def _add_mul(op: Op) -> tuple[float, float]:  # (bytes: each tensor at its own size)
    """torch's profiler counts aten::add and aten::mul as one FLOP per element of the first input."""
    return float(numel(op.shape(0))), _result(op)[1]


def _copy(op: Op) -> tuple[float, float]:
    """copy_(self, src): src read, self written; clone / contiguous(self): self read."""
    src = 1 if op.name.rstrip("_") == "copy" and len(op.dims) > 1 and _is_tensor(op.dims[1]) else 0
    return 0.0, _read(op, src) + numel(op.shape(0)) * op.width(0)  # (a cast: each at its own size)


def _fill(op: Op) -> tuple[float, float]:
    """fill_(self, value): self (or ``out=``) written, nothing read (the value is a scalar)."""
    at = _split_out(op)[1] or 0
    return 0.0, numel(op.dims[at]) * op.width(at)


def _embedding(op: Op) -> tuple[float, float]:
    """embedding(weight[V, D], indices): a gather, no FLOPs; reads and writes rows·D."""
    w, idx = op.shape(0), op.shape(1)
    out = numel(idx) * w[-1]
    return 0.0, 2 * out + numel(idx) * op.width(1, 2.0)  # the indices at their size (int64; unknown: twice fp32)


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
    each = _FOREACH[op.name[len("_foreach_"):].rstrip("_")]  # KeyError: not covered
    return float(each) * n, n * (len(ls) + 1)


def _fused_optimizer(op: Op) -> tuple[float, float]:
    ls = _lists(op)
    n = sum(numel(t) for t in ls[0])
    lists = min(len(ls), 4)  # params, grads and (Adam) the two moments: read; the same less grads written
    return _FUSED[op.name.rstrip("_")] * n, n * (2 * lists - 1)


#: FLOPs per element of the elementwise ops (:data:`_SIGNATURES` but those with rules of their own): 1 unless given
_ELEMENTWISE_COST = {"gelu": 8.0, "silu": 4.0, "gelu_backward": 13.0, "silu_backward": 6.0, "sigmoid": 4.0,
                     "tanh": 4.0, "sigmoid_backward": 2.0, "tanh_backward": 2.0, "addcmul": 3.0, "addcdiv": 3.0,
                     "lerp": 2.0, "where": 1.0}
_OWN_RULES = ("add", "mul", "copy", "clone", "contiguous", "fill")

_RULES: dict[str, Callable[[Op], tuple[float, float]]] = {
    "mm": _mm, "addmm": _mm, "_addmm_activation": _mm, "bmm": _bmm, "baddbmm": _bmm,
    "matmul": _matmul, "linear": _linear,
    **{k: _conv for k in (*_CONV_ARGS, *_CONV_T)},
    "convolution_backward": _conv_backward,
    **{k: _rnn for k in (*_RNN_LISTS, "mkldnn_rnn_layer")},
    **{k: _attention for k in _ATTENTION},
    "layer_norm": _layer_norm, "native_layer_norm": _layer_norm, "rms_norm": _rms_norm,
    "_fused_rms_norm": _rms_norm,
    "softmax": _per_element(5.0), "_softmax": _per_element(5.0), "log_softmax": _per_element(5.0),
    "_log_softmax": _per_element(5.0), "_safe_softmax": _per_element(5.0),
    "add": _add_mul, "mul": _add_mul,
    **{k: _elementwise(_ELEMENTWISE_COST.get(k, 1.0)) for k in _SIGNATURES if k not in _OWN_RULES},
    "copy": _copy, "clone": _copy, "contiguous": _copy, "fill": _fill,
    "embedding": _embedding,
}
STRIDED = frozenset(r for k, r in _RULES.items() if k in _SIGNATURES and r is not _fill)


def rule_of(base: str) -> Callable[[Op], tuple[float, float]] | None:
    """The rule for an op's base name (``add_`` and ``add.out`` as ``add``)."""
    b = base.split(".", 1)[0]
    if b.startswith("_foreach_"):
        return _foreach
    if b.rstrip("_") in _FUSED:
        return _fused_optimizer
    return _RULES.get(b) or (_RULES.get(b[:-1]) if b.endswith("_") and b[:-1] in _RULES else None)
