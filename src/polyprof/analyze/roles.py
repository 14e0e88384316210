"""Names that keep their role across a rename: one row in a diff.

Some changes rename the work without changing what it is for, and the fix of a slow
job is often exactly such a change: a DataLoader given ``num_workers`` runs its batches
through ``_MultiProcessingDataLoaderIter`` instead of ``_SingleProcessDataLoaderIter``;
pinned host memory turns ``Memcpy HtoD (Pageable -> Device)`` into ``Memcpy HtoD
(Pinned -> Device)``; another NCCL version or algorithm names its all-reduce kernel
otherwise. Listed as one name "gone" and another "new", such a fix reads as two
unrelated changes. :func:`role_name` maps each to the name of its role, after
:func:`~analyze.names.normalize_name`; the rule is the first of :data:`ROLES` whose
pattern matches (``re.search``), its replacement applied once:

========================  ==============================================================
rule                      raw names (examples) -> role name
========================  ==============================================================
``dataloader-iterator``   ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``,
                          ``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``
                          -> ``enumerate(DataLoader)#DataLoaderIter.__next__``
``optimizer-step``        ``Optimizer.step#SGD.step``, ``Optimizer.step#AdamW.step`` ->
                          ``Optimizer.step``; also ``zero_grad``
``host-to-device-copy``   ``Memcpy HtoD (Pageable -> Device)``, ``(Pinned -> Device)`` ->
                          ``Memcpy HtoD``; also DtoH and DtoD, and ``Memset``
``nccl-kernel``           ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``,
                          ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` ->
                          ``nccl AllReduce kernel``
========================  ==============================================================

Only renames that keep the role are listed: a kernel replaced by another algorithm's
kernel (a different cuDNN convolution) is a different kernel and stays two rows. The
raw names a row merges are in its ``raw_names``; ``--raw-names`` (``normalize=False``)
turns the rules off.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: (rule, pattern, replacement), the first match wins
ROLES: list[tuple[str, re.Pattern[str], str]] = [
    ("dataloader-iterator", re.compile(r"#_?\w*DataLoaderIter\.(\w+)$"), r"#DataLoaderIter.\1"),
    ("optimizer-step", re.compile(r"^Optimizer\.(step|zero_grad)#\w+\.\1$"), r"Optimizer.\1"),
    ("host-to-device-copy", re.compile(r"^(Memcpy [HDP]to[HDP]|Memset) \([^)]*\)$"), r"\1"),
    ("nccl-kernel", re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)(?:_.*)?(?:\(.*\))?$"), r"nccl \1 kernel"),
]


@lru_cache(maxsize=1 << 16)
def role_name(name: str) -> str:
    """The name of ``name``'s role (see the module doc); ``name`` itself when no rule matches."""
    for _, pattern, repl in ROLES:
        new, n = pattern.subn(repl, name, count=1)
        if n:
            return new
    return name
