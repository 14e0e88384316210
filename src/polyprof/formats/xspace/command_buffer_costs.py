"""FLOPs and bytes of the library kernels XLA ran inside a command buffer (a CUDA graph).

XLA puts a cuBLAS or cuDNN call into a command buffer with the kernels around it; its
kernels then name only the command buffer (``hlo_op`` ``command_buffer_1``), and no HLO
instruction has their names (``gpu.command_buffer_ops`` gives the XLA-emitted kernels
of a command buffer their instructions; a library's keep the command buffer). Their
costs were unknown, and on a JAX transformer whose matrix products all ran so (cuBLAS
``sm90_xmma_gemm_*``, 54% of its kernel time) the MFU read 2.0% where XLA's own count
makes it 24.7%.

The HLO says what they did: the module's library calls (``custom-call`` instructions
outside fused computations) that ran as no kernel of their own. Each execution of the
module runs them once; its executions are the command buffer's launches (one
``correlation_id`` per launch of a graph). So their summed cost (``hlo_cost.py``) times
the launches is what the module's library kernels in command buffers did, shared among
them: among their kernel names by the names' time, within a name equally per kernel
(one pseudo-op per kernel name, ``op_flops`` its mean, so that ``analyze/efficiency.py``
counts each kernel once). A kernel not named like a library's (a memset) gets nothing.
Exact in total; per kernel an estimate (a name's kernels may differ in shape). A module
with several command buffers, or whose uncosted library calls are in a computation
another calls (a ``while`` body, a ``conditional`` branch: how often they ran is not in
the HLO), gets nothing for them, as before (said in the log).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from ...trace.categories import MATRIX_KERNEL
from ...trace.core import Trace
from ...trace.sorting import unique_inverse
from ...trace.stats import StatColumn
from .gpu import HloModules, _row_values, module_combos

if TYPE_CHECKING:
    from .hlo import Module
    from .hlo_cost import OpCost

log = logging.getLogger("polyprof")

#: the opcodes whose called computations are not run as ops of their own (fused
#: computations, reducers and comparators)
_INNER_CALLERS = frozenset(("fusion", "reduce", "reduce-window", "scatter", "select-and-scatter", "sort", "map",
                            "all-reduce", "reduce-scatter", "all-reduce-start"))


class LibraryCosts:
    """Per costed kernel (``rows`` ascending): ``flops``, ``bytes``, ``transcendentals``,
    ``precision``, ``op`` (a position in the ``op_*`` lists: one per (module, kernel
    name)); per op ``op_name`` (the command buffer), ``op_module``, ``op_flops`` and
    ``op_bytes`` (a kernel's mean)."""

    __slots__ = ("rows", "flops", "bytes", "transcendentals", "precision", "op", "op_name", "op_module",
                 "op_flops", "op_bytes")

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.flops: list[np.ndarray] = []
        self.bytes: list[np.ndarray] = []
        self.transcendentals: list[np.ndarray] = []
        self.precision: list[np.ndarray] = []
        self.op: list[np.ndarray] = []
        self.op_name: list[str] = []
        self.op_module: list[str] = []
        self.op_flops: list[float] = []
        self.op_bytes: list[float] = []


def library_costs(trace: Trace, modules: HloModules, ran: dict[tuple[str, int], set[str]], hlo: StatColumn,
                  at: np.ndarray) -> LibraryCosts:
    """The costs of the library kernels in command buffers of the modules ``modules``
    holds (``hlo``, ``at``: ``gpu.xla_rows`` of the kernels in command buffers); ``ran``:
    per module, the instructions that ran as kernels of their own."""
    out = LibraryCosts()
    rows = hlo.rows[at]
    names, name_of = unique_inverse(trace.events["name"][rows])  # (a regex per kernel name)
    lib = np.array([bool(MATRIX_KERNEL.search(trace.strings[int(n)])) for n in names.tolist()], bool)
    lib = lib[name_of.reshape(-1)]
    buffers = hlo.values[at]
    combos, inv = module_combos(trace, rows, np.zeros(len(rows), np.int64))
    corr = _row_values(trace, "correlation_id", rows, None)
    from .hlo_cost import module_costs  # the HLO cost pass: only a file with command buffers and HLO

    for c, (_, mod, pid) in enumerate(combos):
        key = modules.key(mod, pid)
        decoded = modules.module(key) if key is not None else None
        in_module = inv.reshape(-1) == c
        mine = np.flatnonzero(in_module & lib)
        if decoded is None or not len(mine):
            continue
        calls = library_calls(decoded, ran.get(key, set()))  # type: ignore[arg-type]
        if calls is None or len(set(buffers[mine].tolist())) > 1:
            log.info("xspace: module %s(%d): its library kernels in command buffers get no FLOPs (calls in a "
                     "loop or branch, or several command buffers: how often each ran is not known)", mod, pid)
            continue
        launches = _launches(corr[in_module])
        if not calls or not launches:
            continue
        try:
            costs = module_costs(decoded, tf32=True, names=calls)
        except ValueError:  # (xla_costs warns about a damaged module once)
            continue
        _share(trace, out, rows[mine], str(buffers[mine[0]]), mod, [costs[n] for n in calls if n in costs], launches)
    return out


def library_calls(module: Module, ran: set[str]) -> set[str] | None:
    """The module's library calls (``custom-call`` instructions of computations run as
    ops, not fused or applied inside another op) that did not run as kernels of their
    own (``ran``); None where one of them is in a computation another calls (a ``while``
    body, a ``conditional`` branch, a ``call``): how often it ran is not known."""
    called = {cid for c in module.computations for i in c.instructions for cid in i.called_computation_ids}
    inner = {cid for c in module.computations for i in c.instructions if i.opcode in _INNER_CALLERS
             for cid in i.called_computation_ids}
    out: set[str] = set()
    for c in module.computations:
        if c.id in inner:
            continue
        calls = {i.name for i in c.instructions if i.opcode == "custom-call" and i.name not in ran}
        if calls and c.id in called:
            return None
        out |= calls
    return out


def _launches(corr: np.ndarray) -> int:
    """The module's executions: its command buffer's launches (distinct correlation ids);
    0 where the kernels carry no correlation id."""
    return len({v for v in corr.tolist() if isinstance(v, int)})


def _share(trace: Trace, out: LibraryCosts, rows: np.ndarray, buffer: str, module: str, costs: list[OpCost],
           launches: int) -> None:
    """Append one op per kernel name of ``rows``: the calls' cost times ``launches``,
    shared among the names by their time, within a name equally."""
    flops = sum(c.flops for c in costs if not math.isnan(c.flops)) * launches
    nbytes = sum(c.bytes for c in costs if not math.isnan(c.bytes)) * launches
    trans = sum(c.transcendentals for c in costs if not math.isnan(c.transcendentals)) * launches
    by_prec: dict[str, float] = {}
    for c in costs:
        if not math.isnan(c.flops):
            by_prec[c.precision] = by_prec.get(c.precision, 0.0) + c.flops
    precision = max(by_prec, key=by_prec.__getitem__) if by_prec else ""
    ev = trace.events
    dur = ev["dur_ns"][rows].astype(np.float64)
    names, inv = np.unique(ev["name"][rows], return_inverse=True)
    inv = inv.reshape(-1)
    name_time = np.bincount(inv, weights=dur, minlength=len(names))
    count = np.bincount(inv, minlength=len(names))
    total = float(name_time.sum())
    for k in range(len(names)):
        share = float(name_time[k]) / total if total > 0 else 1.0 / len(names)
        mine = rows[inv == k]
        n = max(int(count[k]), 1)
        op = len(out.op_name)
        out.op_name.append(buffer)
        out.op_module.append(module)
        out.op_flops.append(flops * share / n)
        out.op_bytes.append(nbytes * share / n)
        out.rows.append(mine)
        out.flops.append(np.full(len(mine), flops * share / n))
        out.bytes.append(np.full(len(mine), nbytes * share / n))
        out.transcendentals.append(np.full(len(mine), trans * share / n))
        out.precision.append(np.full(len(mine), precision, object))
        out.op.append(np.full(len(mine), op, np.int64))
