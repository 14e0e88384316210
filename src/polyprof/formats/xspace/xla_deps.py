"""Which ops of XLA's CPU runtime wait for which others: their data dependencies, from
the HLO a JAX CPU profile's XSpace holds (``hlo.py``).

XLA's CPU runtime runs a program's ops (host events with an ``hlo_op``, ``gpu.xla_rows``)
on PjRt's client thread and on its intra-op worker threads, an op as soon as its
operands are ready; the trace records no link between them. The HLO does: an op reads
the outputs of its operands, and through the instructions that run as no op of their
own (parameters, constants, tuples, ``get-tuple-element``, ``bitcast``: none has an
event) the ops whose outputs reach it. :func:`op_dependencies` gives, per op of the
trace (an instruction of a module, by ``hlo_module`` and ``program_id`` as
``xla_costs.py`` finds them), the ops it reads from. The critical path's graph
(``analyze/xla_links.py``) links each op run to the last run before it of each of
those ops, so a path follows the computation from thread to thread.

Not followed: a loop's carried values (a ``while`` body's parameter is its previous
trip's result) and control dependencies; a module whose HLO is damaged links nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...trace.core import Trace
from .gpu import hlo_modules, module_combos, xla_rows

if TYPE_CHECKING:
    from .hlo import Module

#: the most instructions of one module followed (a larger one links nothing; a real
#: program's module has thousands)
MAX_INSTRUCTIONS = 1_000_000


class OpDependencies:
    """``rows`` (ascending): the events of XLA's CPU runtime's ops; ``op``: each one's op
    (-1: no HLO for it); ``ptr``/``producers``: per op, the ops it reads from
    (``producers[ptr[k]:ptr[k + 1]]``)."""

    __slots__ = ("rows", "op", "ptr", "producers")

    def __init__(self, rows: np.ndarray, op: np.ndarray, ptr: np.ndarray, producers: np.ndarray) -> None:
        self.rows, self.op, self.ptr, self.producers = rows, op, ptr, producers


def empty() -> OpDependencies:
    z = np.zeros(0, np.int64)
    return OpDependencies(z, z, np.zeros(1, np.int64), z)


def op_dependencies(trace: Trace, on_host: np.ndarray) -> OpDependencies:
    """The dependencies of the XLA ops among the rows ``on_host`` marks (host events: XLA's
    CPU runtime; a GPU's streams run in their own order)."""
    found = xla_rows(trace, in_command_buffer=False)
    modules = hlo_modules(trace)
    if found is None or not modules.protos:
        return empty()
    _, hlo, at = found
    rows = hlo.rows[at]
    keep = on_host[rows]
    rows, values = rows[keep], hlo.values[at][keep]
    if not len(rows):
        return empty()
    names, code = np.unique(np.array([str(v).rsplit("::", 1)[-1] for v in values.tolist()], object).astype(str),
                            return_inverse=True)
    combos, inv = module_combos(trace, rows, code.reshape(-1))
    op_key = [(modules.key(mod, pid), str(names[c])) for c, mod, pid in combos]
    index = {k: i for i, k in enumerate(op_key) if k[0] is not None}
    ran: dict[tuple[str, int], set[str]] = {}
    for mkey, name in index:
        ran.setdefault(mkey, set()).add(name)  # type: ignore[arg-type]
    feeds: dict[tuple[str, int], dict[str, set[str]]] = {}
    for mkey, names_ran in ran.items():
        decoded = modules.module(mkey)
        feeds[mkey] = {} if decoded is None else producers(decoded, names_ran)
    lists: list[list[int]] = []
    for mkey, name in op_key:
        fed = feeds.get(mkey, {}).get(name, set()) if mkey is not None else set()
        lists.append(sorted(index[(mkey, p)] for p in fed if (mkey, p) in index))
    ptr = np.zeros(len(lists) + 1, np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    flat = np.fromiter((p for x in lists for p in x), np.int64, int(ptr[-1]))
    op = np.asarray(inv, np.int64).reshape(-1)
    order = np.argsort(rows, kind="stable")
    return OpDependencies(rows[order], op[order], ptr, flat)


def producers(module: Module, ran: set[str]) -> dict[str, set[str]]:
    """Per instruction of ``module`` named in ``ran`` (those the trace shows running), the
    instructions of ``ran`` whose outputs it reads: its operands, or where an operand
    does not run as an op of its own, that operand's, and so on."""
    by_id = {i.id: i for c in module.computations for i in c.instructions}
    if len(by_id) > MAX_INSTRUCTIONS:
        return {}
    reach: dict[int, frozenset[str]] = {}  # an instruction: the running ones it reads
    visiting: set[int] = set()

    def inputs(ins_id: int) -> frozenset[str]:
        """What instruction ``ins_id`` reads from running ones (iterative: chains of
        non-running instructions can be long)."""
        stack = [ins_id]
        while stack:
            top = stack[-1]
            pending = [o for o in by_id[top].operand_ids
                       if o in by_id and by_id[o].name not in ran and o not in reach and o != top]
            if pending and top not in visiting:
                visiting.add(top)
                stack.extend(pending)
                continue
            stack.pop()
            visiting.discard(top)
            got: set[str] = set()
            for o in by_id[top].operand_ids:
                if o not in by_id or o == top:
                    continue
                if by_id[o].name in ran:
                    got.add(by_id[o].name)
                else:
                    got |= reach.get(o, frozenset())
            reach[top] = frozenset(got)
        return reach[ins_id]

    out: dict[str, set[str]] = {}
    for ins in by_id.values():
        if ins.name in ran:
            out[ins.name] = set(inputs(ins.id)) - {ins.name}
    return out
