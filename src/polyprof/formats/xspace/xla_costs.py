"""FLOPs and bytes of the XLA ops a JAX/XLA GPU program ran, from the HLO its XSpace
holds: XLA's GPU backends put no ``flops`` / ``bytes_accessed`` stats on the kernels
(XProf counts them itself from the HLO), so each kernel, copy or fill whose ``hlo_op``
names an instruction of its module's HLO (by ``hlo_module`` and ``program_id``, as
``gpu.py`` matches them for the framework ops) gets that instruction's cost
(``hlo_cost.py``).

An op that ran as several kernels per execution (a convolution as an im2col kernel and a
gemm) has its cost shared among the kernel names it ran as, in proportion to their mean
durations, so that summing its kernels counts the op once per execution (XProf's
op_profile gives every kernel of the op the whole op's cost). Kernels XLA ran inside a
command buffer whose HLO instruction is not known (a cuBLAS kernel in a CUDA graph,
``hlo_op`` ``command_buffer_1``) get no figure.

Computed when an analysis first asks (``analyze/flops.py``): a load does not decode the HLO
for it. A module whose HLO is damaged is named in a warning and costs nothing.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import numpy as np

from ...trace.core import Trace
from ...trace import metadata_keys as mkeys
from .gpu import HloModules, gpu_xla_rows, module_combos
from .hlo_cost import OpCost, module_costs

log = logging.getLogger("polyprof")


class DeviceCosts(NamedTuple):
    """Per device event with a figure (``rows`` ascending): ``flops`` (NaN: unknown, e.g.
    a custom call XLA does not count), ``bytes``, ``transcendentals``, ``precision``."""

    rows: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    transcendentals: np.ndarray
    precision: np.ndarray


def empty() -> DeviceCosts:
    return DeviceCosts(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, object))


def device_costs(trace: Trace) -> DeviceCosts:
    """The costs of the device events whose XLA op the trace's HLO holds (none where the
    trace has no HLO modules or no such events)."""
    found = gpu_xla_rows(trace, in_command_buffer=False)
    if found is None:
        return empty()
    _, hlo, at = found
    modules = HloModules(trace)
    if not modules.protos:
        return empty()
    rows = hlo.rows[at]
    names, code = np.unique(hlo.values[at].astype(str), return_inverse=True)
    combos, inv = module_combos(trace, rows, code.reshape(-1))
    tables: dict[tuple[str, int], dict[str, OpCost] | None] = {}
    cost_of: list[OpCost | None] = []
    for hc, mod, pid in combos:
        key = modules._key(mod, pid)
        if key is not None and key not in tables:
            tables[key] = _module_table(trace, key, modules.protos[key])
        table = tables.get(key) if key is not None else None
        cost_of.append(table.get(str(names[hc]).rsplit("::", 1)[-1]) if table else None)
    has = np.array([c is not None for c in cost_of], bool)
    keep = has[inv]
    rows, inv = rows[keep], inv[keep]
    if not len(rows):
        return empty()
    share = _kernel_shares(trace, rows, inv)
    known = [c if c is not None else OpCost(math.nan, math.nan, math.nan, "") for c in cost_of]
    per = np.array([(c.flops, c.bytes, c.transcendentals) for c in known], np.float64).reshape(-1, 3)
    prec = np.array([c.precision for c in known], object)
    order = np.argsort(rows, kind="stable")
    rows, inv, share = rows[order], inv[order], share[order]
    return DeviceCosts(rows, per[inv, 0] * share, per[inv, 1] * share, per[inv, 2] * share, prec[inv])


def _module_table(trace: Trace, key: tuple[str, int], proto: bytes) -> dict[str, OpCost] | None:
    try:
        return module_costs(proto)
    except ValueError as e:
        msg = f"xspace: the HLO of module {key[0]}({key[1]}) is damaged ({e}): its ops get no FLOPs or bytes"
        trace.metadata.setdefault(mkeys.WARNINGS, []).append(msg)
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
