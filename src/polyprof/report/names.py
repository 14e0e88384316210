"""Names shortened by what their parts mean before they are cut: the terminal tables'
name columns (the JSON and the HTML keep every name whole).

A demangled kernel name is mostly noise in a column of 30 cells: ``void
at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,
at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, ...)``. As
HTA's ``shorten_name`` and nsys's base kernel names do, :func:`ladder` takes off, one
step at a time, the return type and argument list, then the namespaces (``at::native::``,
``(anonymous namespace)::``) and the argument lists inside the template arguments, then
the template arguments themselves. :func:`fit_names` shows each name at the first step
that fits its column, steps back where two different names would read the same
(``vectorized_elementwise_kernel`` twice keeps its template arguments), and cuts what
still does not fit where the rows differ (``report/fit.py``).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..analyze.common import op_of
from .fit import elide, fit_texts
from .textout import _cells, cell_sizes

#: the patterns below are compiled on first use (re's cache), not on import: a summary
#: whose names all fit never needs them
#: words a demangled signature's return type is made of (``void`` nearly always)
_RETURN_WORDS = ("void", "static", "inline", "extern", "__global__", "__device__", "__host__", "unsigned", "signed",
                 "int", "long", "short", "char", "float", "double", "bool", "auto", "const", "volatile", "size_t")
_RETURN = rf"(?:(?:{'|'.join(_RETURN_WORDS)})\b[\s*&]*)+"
#: an argument list of types (``(ncclDevComm*, unsigned long, ncclWork*)``), not of
#: values (``Stream #14(Memset,Compute)``, ``PjitFunction(step)``)
_TYPED = r"[*&]|::|\b(?:void|bool|char|short|int|long|float|double|unsigned|signed|const)\b"
_TRAILING = r"(?:\s+(?:const|volatile|&|&&))+$|\s*\[clone [^\]]*\]$"
#: how a name :data:`_TRAILING` can match ends (``$`` matches before a last newline too)
_TRAILING_ENDS = ("const", "volatile", "&", "]", "\n")
_QUALIFIER = r"\b(?!const::)[A-Za-z_]\w*::(?!:)"
_INNER_ARGS = r"\(([^()]*)\)(?!\d)"  # not a cast such as (cudnnKernelDataType_t)2
_DEVICE = "/device:"


def _close(s: str, end: int, open_: str, close: str) -> int:
    """The index of the ``open_`` that matches the ``close`` at ``s[end]``; -1 if none."""
    depth = 0
    for i in range(end, -1, -1):
        if s[i] == close:
            depth += 1
        elif s[i] == open_:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _signature(s: str) -> tuple[str, bool]:
    """``s`` without its return type and its trailing argument list (or note in
    parentheses: ``Stream #14(Memset,Compute)``, ``cuGraphLaunch (CudaGraph:147)``), and
    whether it is a C++ signature (a return type or an argument list of types)."""
    # each pattern is tried only on a name it can match (most names: none of them; the
    # patterns then are never compiled in the process)
    if s.endswith(_TRAILING_ENDS):
        trailing = re.compile(_TRAILING)
        s = trailing.sub("", trailing.sub("", s))
    cpp = False
    if s.endswith(")"):
        at = _close(s, len(s) - 1, "(", ")")
        if at == 0 and len(s) > 2:  # all of it in parentheses: "(all streams)"
            return s[1:-1], False
        if at > 0 and s[:at].strip():
            cpp = not s[at + 1:-1].strip() or re.compile(_TYPED).search(s, at + 1, len(s) - 1) is not None
            s = s[:at].rstrip()
    m = re.compile(_RETURN).match(s) if (cpp or "::" in s or "<" in s) and s.startswith(_RETURN_WORDS) else None
    if m and m.end() < len(s) and s[m.end() - 1] in " *&":
        s, cpp = s[m.end():], True
    if s.startswith(_DEVICE) and len(s) > len(_DEVICE):  # /device:GPU:0
        s = s[len(_DEVICE):]
    return s, cpp


def _without_namespaces(s: str) -> str:
    """Namespaces and classes that qualify a name taken off everywhere in it, and the
    argument lists of types inside it emptied: ``BinaryFunctor<float, threshold_kernel_impl<float>()::{lambda()#1}>``;
    a list of values stays (nvcc's ``[lambda(int, int) (instance 2)]``, which tells a
    kernel's lambdas apart: ``[lambda() (instance 2)]``)."""
    s = re.compile(_QUALIFIER).sub("", s.replace("(anonymous namespace)::", ""))
    while True:
        t = re.compile(_INNER_ARGS).sub(lambda m: "()" if m.group(1) and re.search(_TYPED, m.group(1))
                                        else m.group(0), s)  # (a list of values kept: "(instance 2)")
        if t == s:
            return s
        s = t


def _without_templates(s: str) -> str:
    """``s`` without its template arguments (balanced ``<...>``), or ``s`` where they do
    not balance (``operator<``)."""
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    base = "".join(out).strip()
    return base if base and not depth else s


@lru_cache(maxsize=4096)
def ladder(name: str) -> tuple[str, ...]:
    """``name`` shortened step by step, each step keeping less: the name itself; without
    return type and argument list; then (a C++ signature's) without namespaces and with
    its inner argument lists emptied; then without template arguments (its base name,
    as nsys and HTA show it). A step that would leave nothing keeps the step before."""
    if not any(c in name for c in "(<: /"):  # the common case: nothing to take off
        return (name,)
    first, cpp = _signature(name)
    first = first or name
    if not cpp:
        return (name, first)
    second = _without_namespaces(first) or first
    return (name, first, second, _without_templates(second))


def module_ladder(name: str, module: str, width: int) -> tuple[str, ...]:
    """The :func:`ladder` of an XLA op named ``module/op`` (``analyze.common.qualified_names``):
    the module before each step of the op's, then, the op's last step kept whole, the
    module cut to what is left of ``width`` (``jit_train_st…/ynn_fusion.3``, as ``diff``
    cuts such a name). A name not of that form: its own ladder."""
    op = op_of(name, module)
    if op is None:
        return ladder(name)
    ops = ladder(op)
    last = ops[-1]
    short = f"{elide(module, max(width - _cells(last) - 1, 2), 0)}/{last}"
    return tuple(dict.fromkeys([f"{module}/{s}" for s in ops] + [short]))


def one_module(texts: list[str], modules: list[str]) -> tuple[list[str], str]:
    """(``texts`` without the ``module/`` of their XLA ops, that module) where the ops of
    these rows are all of one module (a jitted step's kernels: ``jit_step/`` on every row
    said nothing and took the room the kernels' names need); else (``texts``, "")."""
    one = set(modules) - {""}
    if len(one) != 1:
        return texts, ""
    m = one.pop()
    return [t if (o := op_of(t, m)) is None else o for t in texts], m


def fit_names(texts: list[str], width: int, modules: list[str] | None = None) -> list[str]:
    """Names in ``width`` cells: each at the first step of its :func:`ladder` that fits
    (its last if none), stepped back where different names would read alike, then cut
    where they still do not fit (``fit.fit_texts``: apart where they differ). ``modules``:
    each name's compiled module, "" for none (:func:`module_ladder`)."""
    if not texts or max(cell_sizes(texts)) <= width:
        return texts
    steps = {t: ladder(t) for t in texts}
    ops: dict[str, str] = {}  # a module/op name's op, at the last step of its ladder
    for t, m in zip(texts, modules or ()):
        op = op_of(t, m)
        if op is not None:
            steps[t] = module_ladder(t, m, width)
            ops[t] = ladder(op)[-1]
    level = {t: next((k for k, s in enumerate(st) if _cells(s) <= width), len(st) - 1) for t, st in steps.items()}
    while True:
        seen: dict[str, list[str]] = {}
        for t, k in level.items():
            seen.setdefault(steps[t][min(k, len(steps[t]) - 1)], []).append(t)
        alike = [group for group in seen.values() if len(group) > 1]
        if not alike:
            break
        for group in alike:  # back to the last step at which the group's names differ
            k = max(level[t] for t in group) - 1
            while k > 0 and len({steps[t][min(k, len(steps[t]) - 1)] for t in group}) < len(group):
                k -= 1
            for t in group:
                level[t] = min(level[t], k)
    chosen = [steps[t][min(level[t], len(steps[t]) - 1)] for t in texts]
    return _cut_ops(texts, chosen, width, ops) if ops else fit_texts(chosen, width)


def _cut_ops(texts: list[str], chosen: list[str], width: int, ops: dict[str, str]) -> list[str]:
    """``fit.fit_texts`` of the ``chosen`` steps, except that a ``module/op`` name still
    too wide with its module cut short keeps that module's start and has its op cut, the
    ops apart from each other (the words that tell cuBLAS kernels apart kept), where
    that keeps every name apart."""
    out = fit_texts(chosen, width)
    idx = [i for i, (t, c) in enumerate(zip(texts, chosen)) if t in ops and c.endswith(ops[t]) and _cells(c) > width]
    if not idx:
        return out
    pre = [chosen[i][:len(chosen[i]) - len(ops[texts[i]])] for i in idx]
    room = width - max(_cells(p) for p in pre)
    if room < 8:
        return out
    got = list(out)
    for i, p, op in zip(idx, pre, fit_texts([ops[texts[i]] for i in idx], room)):
        got[i] = p + op
    return got if len(set(got)) == len(set(texts)) == len(set(zip(texts, got))) else out
