"""The type of the FLOPs and bytes an XLA program's device events cost, as counted from
the HLO its file holds (``formats/xspace/xla_costs.py`` counts them): here, below the
readers, so that an analysis of a trace without XLA ops makes the empty one without
importing the HLO decoder."""

from __future__ import annotations

import numpy as np


class DeviceCosts:
    """Per device event with a figure (``rows`` ascending): ``flops`` (NaN: unknown, e.g.
    a custom call XLA does not count), ``bytes``, ``transcendentals`` (its kernel name's
    share of its op's), ``precision``, ``op`` (its HLO op: a position in the ``op_*``
    arrays). Per HLO op (an instruction of a module, on a GPU or the CPU runtime):
    ``op_name``, ``op_module``, ``op_opcode`` (``fusion``, ``custom-call``...), and the
    whole op's ``op_flops`` and ``op_bytes`` per execution, not shared among kernels. (A
    plain class, as ``hlo.py``'s records: no NamedTuple's annotations compiled at import.)"""

    __slots__ = ("rows", "flops", "bytes", "transcendentals", "precision", "op", "op_name", "op_module",
                 "op_opcode", "op_flops", "op_bytes")

    def __init__(self, rows: np.ndarray, flops: np.ndarray, bytes: np.ndarray, transcendentals: np.ndarray,
                 precision: np.ndarray, op: np.ndarray, op_name: np.ndarray, op_module: np.ndarray,
                 op_opcode: np.ndarray, op_flops: np.ndarray, op_bytes: np.ndarray) -> None:
        self.rows, self.flops, self.bytes, self.transcendentals = rows, flops, bytes, transcendentals
        self.precision, self.op = precision, op
        self.op_name, self.op_module, self.op_opcode, self.op_flops, self.op_bytes = (op_name, op_module, op_opcode,
                                                                                    op_flops, op_bytes)


def empty() -> DeviceCosts:
    none = np.zeros(0, object)
    return DeviceCosts(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0), none, np.zeros(0, np.int64),
                       none, none, none, np.zeros(0), np.zeros(0))
