"""FLOPs and bytes of framework ops: from the trace where it has them, else estimated
from the op's input shapes and types (torch's ``Input Dims`` / ``Input type`` /
``Concrete Inputs``) and what the op is.

The formulas (one rule per op: ``analyze/op_rules.py``), and what each does not cover,
are in docs/analysis.md ("FLOPs and bytes"). The matrix products and ``conv2d`` count as torch's profiler counts them
(``with_flops=True``: 2·M·K·N per product, bias additions not counted), so the two
agree where both exist. Estimates are made once per distinct (op, shapes, types,
arguments), not per event.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import numpy as np

from ..derive import cache
from ..derive.hlo_costs import empty
from ..trace import keys
from ..trace.core import Trace
from ..trace.sorting import find, unique, unique_inverse
from . import nesting

if TYPE_CHECKING:
    from ..derive.hlo_costs import DeviceCosts

INPUT_DIMS, INPUT_TYPE, CONCRETE = keys.INPUT_DIMS, keys.INPUT_TYPE, keys.CONCRETE_INPUTS
INPUT_STRIDES = "Input Strides"  # a framework op's input strides, JSON text (torch 2.x's record_shapes)
XLA_BYTES = keys.BYTES_ACCESSED  # XLA's cost analysis, as XSpace carries it on each HLO op

#: where an op's figures come from (the ``flops_source`` column): the trace's stats, the
#: op's input shapes, CUPTI's instruction counters, the HLO of an XLA program in the file
SOURCE_NAMES = np.array(["", "trace", "shapes", "counters", "hlo"], object)
NONE, TRACE, SHAPES, COUNTERS, HLO = 0, 1, 2, 3, 4

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
    found = trace.stats.lookup_rows([keys.FLOPS, XLA_BYTES, keys.FLOPS_PRECISION], rows)
    # shapes are read only for the ops a rule covers: the args of every other op stay
    # undecoded (most of a trace's ops, and most of the cost of reading them); a trace
    # with no input shapes at all (an XSpace, nsys) has no op's names looked at
    shapes = estimate and trace.stats.may_have(INPUT_DIMS)
    covered = np.flatnonzero(_covered(trace, rows)) if shapes else np.zeros(0, np.int64)
    if len(covered):
        f, b, p = _shape_estimates(trace, rows[covered])
        flops[covered], nbytes[covered], prec[covered] = f, b, p
        src[covered[~np.isnan(f)]] = SHAPES
    _counters(trace, rows, flops, prec, src)
    _hlo(trace, rows, flops, nbytes, prec, src)
    for stat, out in ((keys.FLOPS, flops), (XLA_BYTES, nbytes)):
        if stat in found:
            has, vals = found[stat]
            v = np.asarray(vals, np.float64) if np.asarray(vals).dtype.kind in "iuf" else _numbers(vals)
            out[has] = v
            if stat == keys.FLOPS:
                src[has] = TRACE
    if keys.FLOPS_PRECISION in found:  # (polyprof's export of FLOPs counted from an HLO)
        has, vals = found[keys.FLOPS_PRECISION]
        prec[has] = np.asarray(vals, object).astype(str)
    return Costs(flops, nbytes, prec, src)


def ran_precision(trace: Trace, rows: np.ndarray, on_device: np.ndarray, flops: np.ndarray,
                  prec: np.ndarray) -> np.ndarray:
    """The precision each framework op of ``rows`` (ascending; ``on_device`` False) ran
    in: where other framework ops with FLOPs and a precision are nested in it on its
    thread, the one most of the FLOPs of the innermost of those are in (the ops that
    ran), else its own (its first data input's, :func:`_element`). Under
    ``torch.autocast`` torch records an ``aten::linear`` with the fp32 inputs it was
    called with, around the ``aten::linear`` of their bf16 casts and that one's
    ``aten::addmm``: its own inputs made a bf16 product fp32, and the MFU of an
    inference under autocast was held to the fp32 peak (15 times too high on an H200)."""
    host = np.flatnonzero(~on_device & (np.nan_to_num(flops) > 0) & (prec != ""))
    if len(host) < 2:
        return prec
    order, depth, parent = (np.asarray(a, np.int64) for a in nesting.of_rows(trace, rows[host], keep=False))
    if not (parent >= 0).any():
        return prec
    kinds, code = unique_inverse(prec[host[order]].astype(str))
    leaf = np.ones(len(order), bool)
    leaf[parent[parent >= 0]] = False
    acc = np.zeros((len(order), len(kinds)))  # per op, its innermost nested ops' FLOPs per precision
    acc[np.flatnonzero(leaf), code[leaf]] = flops[host[order[leaf]]]
    for d in range(int(depth.max()), 0, -1):  # each level's sums to the level above, the deepest first
        at = np.flatnonzero(depth == d)
        np.add.at(acc, parent[at], acc[at])
    out = prec.copy()
    inner = np.flatnonzero(~leaf)
    out[host[order[inner]]] = kinds[np.argmax(acc[inner], axis=1)]
    return out


def hlo_costs(trace: Trace) -> DeviceCosts:
    """The costs of the device events of an XLA program counted from the HLO its file
    holds (``formats/xspace/xla_costs.py``: a JAX GPU XSpace, whose kernels carry no
    figures of their own): ``rows`` ascending, ``flops``, ``bytes``, ``transcendentals``,
    ``precision``. Computed once per trace; empty for a trace without XLA ops."""
    if keys.HLO_OP not in trace.stats:
        return cache.memo(trace, "hlo_costs", lambda _: empty())
    # the HLO decoder only for a trace with XLA ops: a Kineto or nsys summary never imports it
    from ..formats.xspace.xla_costs import costs

    return costs(trace)


def _hlo(trace: Trace, rows: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, prec: np.ndarray,
         src: np.ndarray) -> None:
    """FLOPs, bytes and precision from the HLO (:func:`hlo_costs`) of the ``rows`` it costs."""
    if keys.HLO_OP not in trace.stats:
        return
    hc = hlo_costs(trace)
    if not len(hc.rows):
        return
    pos = find(hc.rows, rows)
    at, p = np.flatnonzero(pos >= 0), pos[pos >= 0]
    flops[at], nbytes[at], prec[at] = hc.flops[p], hc.bytes[p], hc.precision[p]
    src[at] = HLO


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
    types, concrete inputs) estimated once, with the strides of its first call."""
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
    # one pass over the rows' (name, dims, types, concrete): their texts are the same few
    # objects over and over (a lookup spreads each distinct value), whose hashes are kept
    seen: dict[tuple, int] = {}
    calls = list(zip(names, np.asarray(dims, object).tolist(), types.tolist(), conc.tolist()))
    inv = np.fromiter((seen.setdefault(c, len(seen)) for c in calls), np.intp, len(calls))
    groups = list(seen)
    # the strides of one call of each group whose rule reads them (torch 2.x: which inputs
    # are expanded; a call site keeps its pattern): decoding every call's would cost more
    # than the estimates (12 ms of a 30 MB trace's summary)
    first = np.full(len(groups), -1, np.int64)
    first[inv[::-1]] = np.arange(len(inv))[::-1]
    reads = np.array([_reads_strides(trace.strings[g[0]]) for g in groups], bool)
    strides = np.full(len(groups), "", object)
    if reads.any():
        got = trace.stats.lookup_rows([INPUT_STRIDES], rows[at[first[reads]]]).get(INPUT_STRIDES)
        strides[reads] = _text_at(got, np.arange(int(reads.sum())), int(reads.sum()))
    est = [estimate_one(trace.strings[n], d, t, c, st) for (n, d, t, c), st in zip(groups, strides.tolist())]
    flops[at] = np.array([e[0] for e in est], np.float64)[inv]
    nbytes[at] = np.array([e[1] for e in est], np.float64)[inv]
    prec[at] = np.array([e[2] for e in est], object)[inv]
    return flops, nbytes, prec


def _reads_strides(name: str) -> bool:
    from .op_rules import STRIDED, rule_of  # the rules: only for a trace with input shapes (torch's)

    return rule_of(_base(name)) in STRIDED


def _covered(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` name an op a rule of :func:`estimate_one` covers (once per name)."""
    names = np.asarray(trace.events["name"][rows])
    # name ids as 16 bits where every id fits: NumPy's stable sort of those is a radix sort
    codes, inv = unique_inverse(names.astype(np.uint16 if len(trace.strings) <= 1 << 16 else np.int64))
    strings = trace.strings
    from .op_rules import rule_of  # (as in _reads_strides)

    ok = np.fromiter((rule_of(_base(strings[c])) is not None for c in codes.tolist()), bool, len(codes))
    return ok[inv]


def _base(name: str) -> str:
    """An op's base name, as its rule knows it: ``aten::add_.Tensor`` -> ``add_``."""
    return name.rsplit("::", 1)[-1].split(".", 1)[0]


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
def estimate_one(name: str, dims_text: str, types_text: str = "", concrete_text: str = "",
                 strides_text: str = "") -> tuple[float, float, str]:
    """(flops, bytes, precision) of one call of op ``name`` with these inputs (the JSON
    texts torch records; ``Input Strides`` decoded only for the rules that read them);
    NaN flops and bytes for an op not covered or inputs that do not fit it."""
    from .op_rules import STRIDED, Op, rule_of  # (as in _reads_strides)

    base = _base(name)
    rule = rule_of(base)
    try:
        dims = _json(dims_text) if dims_text else []
        types = _json(types_text) if types_text else []
        conc = _json(concrete_text) if concrete_text else []
        strides = _json(strides_text) if strides_text and rule in STRIDED else []
    except (ValueError, TypeError):
        return math.nan, math.nan, ""
    if rule is None or not isinstance(dims, list):
        return math.nan, math.nan, ""
    types = types if isinstance(types, list) else []
    elem, prec = _element(types)
    sizes = [_TYPES[t][0] if isinstance(t, str) and t in _TYPES else 0 for t in types]
    try:
        fl, elems = rule(Op(base, dims, types, conc if isinstance(conc, list) else [],
                            strides if isinstance(strides, list) else [], sizes, elem))
    except (LookupError, TypeError, ValueError, ZeroDivisionError):
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
    """Bytes per element and precision of an op: those of its first input of a type that
    computes in a precision (a where's data, not its bool mask, which made a where's
    bytes 1 per element and its precision ""; an embedding's weights, not its indices),
    else of its first input of a known type (integer ops: no precision)."""
    known = [_TYPES[t] for t in types if isinstance(t, str) and t in _TYPES]
    return next((k for k in known if k[1]), known[0] if known else (0, ""))
