"""FLOPs and bytes of the XLA ops a JAX/XLA program ran, from the HLO its XSpace holds:
XLA's GPU and CPU backends put no ``flops`` / ``bytes_accessed`` stats on their ops
(XProf counts them itself from the HLO), so each GPU kernel, copy or fill, and each op
of XLA's CPU runtime (a host event, ``gpu.xla_rows``), whose ``hlo_op`` names an
instruction of its module's HLO (by ``hlo_module`` and ``program_id``, as ``gpu.py``
matches them for the framework ops) gets that instruction's cost (``hlo_cost.py``; on the
CPU an fp32 product is ``fp32``, not a GPU's ``tf32``). A loop's body ops count on each
trip the trace shows, where XLA's ``cost_analysis()`` counts one.

An op that ran as several kernels per execution (a convolution as an im2col kernel and a
gemm) has its cost shared among the kernel names it ran as, in proportion to their mean
durations, so that summing its kernels counts the op once per execution (XProf's
op_profile gives every kernel of the op the whole op's cost); the whole op's figures
are kept too (``op_flops``, ``op_bytes``), for ``op_efficiency``'s row per HLO op. Kernels XLA ran inside a
command buffer whose HLO instruction is not known (a cuBLAS kernel in a CUDA graph,
``hlo_op`` ``command_buffer_1``) get no figure.

Computed when an analysis first asks (``analyze/flops.py``): a load does not decode the HLO
for it. A module whose HLO is damaged is named in a warning and costs nothing.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...derive import cache
from ...derive.hlo_costs import DeviceCosts, empty
from ...trace import keys
from ...trace.core import Trace
from ...trace import metadata_keys as mkeys
from .gpu import HloModules, hlo_modules, xla_rows, module_combos

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...trace.stats import StatColumn
    from .hlo_cost import OpCost

log = logging.getLogger("polyprof")


def costs(trace: Trace) -> DeviceCosts:
    """:func:`device_costs`, computed once per trace (empty for a trace without XLA ops)."""
    return cache.memo(trace, "hlo_costs", lambda t: device_costs(t) if keys.HLO_OP in t.stats else empty())


def add_cost_args(trace: Trace, args: list[Any]) -> None:
    """Put the FLOPs, bytes and precision of each op :func:`costs` counts into its JSON
    export's ``args`` (a dict or None per event; ``flops``, ``bytes_accessed``,
    ``flops_precision``): a Kineto or Chrome file carries no HLO, so without them a read
    of the export counts no FLOPs (its MFU gone, a command buffer's kernels taken for
    graph replays of unknown cost). An op with a ``flops`` of its own keeps it."""
    hc = costs(trace)
    known = ~np.isnan(hc.flops)
    for r, f, b, p in zip(hc.rows[known].tolist(), hc.flops[known].tolist(), hc.bytes[known].tolist(),
                          hc.precision[known].tolist()):
        a = args[r]
        if a is None:
            a = args[r] = {}
        if keys.FLOPS in a:
            continue
        a[keys.FLOPS] = f
        if b == b:  # (NaN: unknown)
            a[keys.BYTES_ACCESSED] = b
        if p:
            a[keys.FLOPS_PRECISION] = p


def device_costs(trace: Trace) -> DeviceCosts:
    """The costs of the device events whose XLA op the trace's HLO holds (none where the
    trace has no HLO modules or no such events), and of the library kernels XLA ran in
    command buffers (``command_buffer_costs.py``)."""
    own_rows, buffer_rows = xla_rows(trace, in_command_buffer=False), xla_rows(trace, in_command_buffer=True)
    if own_rows is None and buffer_rows is None:
        return empty()  # (a TPU's XLA ops: no HLO decoded)
    modules = hlo_modules(trace)  # the modules the reader decoded for op attribution, not decoded again
    if not modules.protos:
        return empty()
    own, ran = _instruction_costs(trace, modules, own_rows)
    if buffer_rows is None:
        return own
    from .command_buffer_costs import library_costs  # only a file with command buffers and their HLO

    lib = library_costs(trace, modules, ran, buffer_rows[1], buffer_rows[2])
    if not lib.rows:
        return own
    n_op = len(own.op_name)
    rows = np.concatenate([own.rows, *lib.rows])
    order = np.argsort(rows, kind="stable")
    cat = [(own.flops, lib.flops), (own.bytes, lib.bytes), (own.transcendentals, lib.transcendentals),
           (own.precision, lib.precision), (own.op, [o + n_op for o in lib.op])]
    flops, nbytes, trans, prec, op = (np.concatenate([a, *b])[order] for a, b in cat)
    return DeviceCosts(rows[order], flops, nbytes, trans, prec, op,
                       np.concatenate([own.op_name, np.array(lib.op_name, object)]),
                       np.concatenate([own.op_module, np.array(lib.op_module, object)]),
                       np.concatenate([own.op_opcode, np.full(len(lib.op_name), "custom-call", object)]),
                       np.concatenate([own.op_flops, lib.op_flops]), np.concatenate([own.op_bytes, lib.op_bytes]))


def _instruction_costs(trace: Trace, modules: HloModules, found: tuple[Mapping[str, StatColumn], StatColumn, np.ndarray]
                       | None) -> tuple[DeviceCosts, dict[tuple[str, int], set[str]]]:
    """:func:`device_costs` of the events whose ``hlo_op`` names an instruction, and per
    module the instructions that ran on a GPU as kernels of their own."""
    if found is None:  # (``found``: ``xla_rows`` of the ops not in a command buffer)
        return empty(), {}
    _, hlo, at = found
    from .hlo_cost import OpCost  # the HLO decoder: only a file with XLA ops and their HLO (not a TPU's)

    rows = hlo.rows[at]
    names, code = np.unique(hlo.values[at].astype(str), return_inverse=True)
    device = np.asarray([p.kind == "device" for p in trace.planes], bool)
    on_device = device[trace.track_plane[trace.events["track"][rows]]]
    # one combo per (instruction name, on a GPU or the CPU runtime, module, program id)
    combos, inv = module_combos(trace, rows, code.reshape(-1) * 2 + on_device)
    op_names, opcodes = [str(names[hc >> 1]).rsplit("::", 1)[-1] for hc, _, _ in combos], []
    tkeys = [None if (key := modules.key(mod, pid)) is None else (*key, bool(hc & 1)) for hc, mod, pid in combos]
    ran: dict[tuple[str, int, bool], set[str]] = {}  # the instructions each module ran: only those are costed
    for tkey, name in zip(tkeys, op_names):
        if tkey is not None:
            ran.setdefault(tkey, set()).add(name)
    tables = {tkey: _module_table(modules, tkey, ran_here) for tkey, ran_here in ran.items()}
    cost_of: list[OpCost | None] = []
    codes: dict[tuple[str, int], dict[str, str]] = {}  # module -> instruction name -> opcode
    for tkey, name in zip(tkeys, op_names):
        key = None if tkey is None else tkey[:2]
        table = tables.get(tkey) if tkey is not None else None
        cost_of.append(table.get(name) if table else None)
        if cost_of[-1] is not None and key is not None and key not in codes:
            codes[key] = _opcodes(modules, key)
        opcodes.append(codes[key].get(name, "") if cost_of[-1] is not None and key is not None else "")
    ran_on_gpu = {tkey[:2]: names_ran for tkey, names_ran in ran.items() if tkey[2]}
    has = np.array([c is not None for c in cost_of], bool)
    keep = has[inv]
    rows, inv = rows[keep], inv[keep]
    if not len(rows):
        return empty(), ran_on_gpu
    share = _kernel_shares(trace, rows, inv)
    known = [c if c is not None else OpCost(math.nan, math.nan, math.nan, "") for c in cost_of]
    per = np.array([(c.flops, c.bytes, c.transcendentals) for c in known], np.float64).reshape(-1, 3)
    prec = np.array([c.precision for c in known], object)
    order = np.argsort(rows, kind="stable")
    rows, inv, share = rows[order], inv[order], share[order]
    return DeviceCosts(rows, per[inv, 0] * share, per[inv, 1] * share, per[inv, 2] * share, prec[inv],
                       inv.astype(np.int64), np.array(op_names, object), np.array([m for _, m, _ in combos], object),
                       np.array(opcodes, object), per[:, 0].copy(), per[:, 1].copy()), ran_on_gpu


def _opcodes(modules: HloModules, key: tuple[str, int]) -> dict[str, str]:
    """instruction name -> opcode of module ``key`` (empty where its HLO is damaged)."""
    decoded = modules.module(key)
    return {} if decoded is None else {i.name: i.opcode for c in decoded.computations for i in c.instructions}


def _module_table(modules: HloModules, key: tuple[str, int, bool], names: set[str]) -> dict[str, OpCost] | None:
    """The costs of a module's instructions ``names`` run on a GPU (``key[2]``: TF32
    products) or by XLA's CPU runtime; None (and a warning) where its HLO is damaged."""
    from .hlo_cost import module_costs  # the HLO decoder: only a file with XLA ops and their HLO

    decoded = modules.module(key[:2])
    try:
        if decoded is None:
            raise ValueError(modules.errors.get(key[:2], "undecodable"))
        return module_costs(decoded, tf32=key[2], names=names)
    except ValueError as e:
        msg = f"xspace: the HLO of module {key[0]}({key[1]}) is damaged ({e}): its ops get no FLOPs or bytes"
        modules.metadata.setdefault(mkeys.WARNINGS, []).append(msg)
        log.warning(msg)
        return None


def _kernel_shares(trace: Trace, rows: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Each row's share of its op's cost: 1 where the op ran as one kernel name; else the
    mean duration of the row's kernel name over the sum of the op's names' means."""
    ev = trace.events
    name = ev["name"][rows].astype(np.int64)
    pair, pinv = np.unique(np.stack([op.astype(np.int64), name]), axis=1, return_inverse=True)
    pinv = pinv.reshape(-1)
    dur = ev["dur_ns"][rows].astype(np.float64)
    mean = np.bincount(pinv, weights=dur, minlength=pair.shape[1]) / np.bincount(pinv, minlength=pair.shape[1])
    n_names = np.bincount(pair[0], minlength=int(op.max()) + 1)
    total = np.bincount(pair[0], weights=mean, minlength=int(op.max()) + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total[op] > 0, mean[pinv] / total[op], 1.0 / n_names[op])
    return np.where(n_names[op] == 1, 1.0, share)
