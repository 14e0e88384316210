"""Name normalisation: the same kernel, op or section gets the same name in every run.

Names carry parts that change from run to run although the work is the same: object
addresses, hashes, template instantiations, the instance numbers a compiler hands out.
:func:`normalize_name` replaces them, rule by rule, in the order of :data:`RULES`:

1. ``hex-address``: ``0x7f3a2c00`` -> ``0x?`` (addresses and ids printed in hex).
2. ``hex-id``: a run of 8 or more hex digits with at least one digit and one letter,
   standing alone or between ``_ . - : /`` -> ``<hex>`` (hashes in generated names).
3. ``template-number``: a numeric template argument (``<4, ...>``, ``..., 128, true>``,
   ``(cudnnKernelDataType_t)2``, ``32ul``, ``-1``) -> ``N``; type arguments stay.
   ``bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>`` and its ``<..., 32,
   ...>`` instantiation are one kernel for a diff.
4. ``program-id``: a trailing parenthesised number, the fingerprint XLA puts on
   module names (``jit_f(12190760917235803885)`` -> ``jit_f``).
5. ``kernel-descriptor``: the ``.kd`` of an AMD code object's kernel descriptor symbol,
   which some ROCm profilers and versions name kernels by (``input_transpose_fusion.kd``
   in one run of TraceLens's MI300X pair, ``input_transpose_fusion`` in the other).
6. ``hlo-instance``: XLA/HLO's ``.N`` suffix (``fusion.12``, ``copy-done.3`` ->
   ``fusion``, ``copy-done``), for op names whose module the trace does not give.
7. ``instance-suffix``: ``#7`` at the end (``ProfilerStep#7``) -> ``#N``; Triton's
   kernel index (``triton_poi_fused_add_0`` -> ``triton_poi_fused_add``).

Numbers that are part of a kernel's identity outside template arguments stay
(``ampere_sgemm_32x32_sliced1x4_tn``, ``AddmmBackward0``, ``dense_1``).

**HLO instance numbers.** XLA names the instructions of one module uniquely by adding
``.N`` to a repeated name: ``dot``, ``dot.1`` and ``dot.2`` of one module are three
different matmuls, not three instances of one. Folding them is only a fallback, for
names without their module (a TPU's XLA ops, whose module is the event around them):
then ``copy-done`` ... ``copy-done.5`` are one row rather than six unmatched ones when a
change of the program renumbers them. Where the module is known (an ``hlo_module`` stat,
as on JAX's CPU ops and XLA's GPU kernels), the diff names the row ``module/op`` and
normalises the op with :func:`normalize_op_name`, which keeps ``.N``: XProf's op
profile and hlo_stats also key an op by (program, HLO name).
"""

from __future__ import annotations

import re
from functools import lru_cache

#: (rule name, pattern, replacement), applied in this order
RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("hex-address", re.compile(r"0[xX][0-9a-fA-F]+"), "0x?"),
    ("hex-id", re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}"
                          r"(?![0-9A-Za-z])"), "<hex>"),
    ("template-number", re.compile(r"(?<=[<,])(\s*)(?:\([\w:]+\))?[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
                                   r"[uUlLfF]*(?=\s*[,>])"), r"\1N"),
    ("program-id", re.compile(r"(?<=[\w>])\(\d+\)$"), ""),
    ("kernel-descriptor", re.compile(r"(?<=\w)\.kd$"), ""),
    ("hlo-instance", re.compile(r"(?<=[A-Za-z])(?:\.\d+)+$"), ""),
    ("instance-suffix", re.compile(r"#\d+$"), "#N"),
    ("instance-suffix", re.compile(r"^(triton_\w*?)_\d+$"), r"\1"),
]


#: the rules for an op named within its module (:func:`normalize_op_name`)
OP_RULES = [r for r in RULES if r[0] != "hlo-instance"]


@lru_cache(maxsize=1 << 16)
def normalize_name(name: str) -> str:
    """``name`` with the run-specific parts replaced (see the module doc)."""
    for _, pattern, repl in RULES:
        name = pattern.sub(repl, name)
    return name


@lru_cache(maxsize=1 << 16)
def normalize_op_name(name: str) -> str:
    """An XLA op's name within its known module: :func:`normalize_name` without the
    ``hlo-instance`` rule (``dot.1`` and ``dot.2`` of one module are two ops)."""
    for _, pattern, repl in OP_RULES:
        name = pattern.sub(repl, name)
    return name
