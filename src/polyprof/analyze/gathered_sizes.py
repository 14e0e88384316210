"""The size of a CPU backend's all-gather as NCCL's is sized: the gathered bytes.

NCCL's rows take the larger of ``In msg nelems`` and ``Out msg nelems`` (nccl-tests'
size: an all-gather's output, a reduce-scatter's input). gloo's ``gloo:all_gather``
range records only its own input (``Input Dims`` ``[[32896]]``: the shard), while the
c10d op that posted it lists both tensors (``c10d::_allgather_base_``: ``[[65792],
[32896], ...]``, the output first). So a gloo all-gather is sized from the op that
posted it: the k-th such op with the k-th all-gather in time order, where the counts
agree and each op began before its collective (gloo runs the work on a worker thread of
its own; one c10d op posts one collective), its largest tensor (a list of tensors, the
list's sum); else, where the group's size is known, the shard times the group's size
(gloo's all-gather gathers equal shards). (gloo runs ``reduce_scatter_tensor`` as an
all-reduce of the whole input: already NCCL's size.)
"""

from __future__ import annotations

import numpy as np

from ..trace import keys
from ..trace.core import Trace
from .collective_roots import json_arg

#: the c10d ops that post an all-gather on gloo
POSTING_OPS = ("c10d::_allgather_base_", "c10d::allgather_", "c10d::allgather_into_tensor_coalesced_")


def gathered_bytes(trace: Trace, ops: np.ndarray, host: np.ndarray, start: np.ndarray, nbytes: np.ndarray,
                   group: np.ndarray, dtype_bytes: dict[str, int]) -> np.ndarray:
    """``nbytes`` with each host all-gather (``ops`` normalised, ``host`` rows, ``start``
    their start times, ``group`` their groups' sizes, 0: unknown) sized by its gathered
    bytes; see the module doc. ``dtype_bytes``: bytes per element by ``Input type``."""
    out = np.asarray(nbytes, np.int64).copy()
    mine = np.flatnonzero((np.asarray(ops, object) == "allgather") & np.asarray(host, bool))
    if not len(mine):
        return out
    posted = _posted(trace, np.asarray(start, np.int64)[mine], dtype_bytes)
    grown = out[mine] * np.maximum(np.asarray(group, np.int64)[mine], 1)
    out[mine] = np.where(posted > 0, np.maximum(posted, out[mine]), grown)
    return out


def _posted(trace: Trace, start: np.ndarray, dtype_bytes: dict[str, int]) -> np.ndarray:
    """Per all-gather (``start``: its start time), the largest tensor of the c10d op that
    posted it, 0 where the ops do not pair with the collectives one to one."""
    out = np.zeros(len(start), np.int64)
    ids = [i for i in (trace.string_id(n) for n in POSTING_OPS) if i >= 0]
    if not ids:
        return out
    posts = np.flatnonzero(np.isin(np.asarray(trace.events["name"]), ids))
    at = np.asarray(trace.events["start_ns"][posts], np.int64)
    posts, at = posts[np.argsort(at, kind="stable")], np.sort(at, kind="stable")
    order = np.argsort(start, kind="stable")
    if len(posts) != len(start) or not (at <= start[order]).all():
        return out
    got = trace.stats.lookup_rows((keys.INPUT_DIMS, keys.INPUT_TYPE), posts)
    dims, types = np.full(len(posts), None, object), np.full(len(posts), None, object)
    for name, col in ((keys.INPUT_DIMS, dims), (keys.INPUT_TYPE, types)):
        if name in got:
            m, v = got[name]
            col[m] = list(v)
    out[order] = [_largest(d, t, dtype_bytes) for d, t in zip(dims.tolist(), types.tolist())]
    return out


def input_bytes(dims: object, types: object, dtype_bytes: dict[str, int], lists: bool = True) -> list[int]:
    """Bytes of each input an op's ``Input Dims`` and ``Input type`` (JSON text or lists)
    describe: a tensor's; a list of tensors' summed (0 without ``lists``; with no dtype of
    its own, the op's first known dtype stands for it); any other input's 0."""
    d, t = json_arg(dims), json_arg(types)
    if not isinstance(d, list) or not isinstance(t, list):
        return []
    out = []
    for shape, dtype in zip(d, t):
        size = dtype_bytes.get(str(dtype).lower(), 0)
        listed = isinstance(shape, list) and bool(shape) and all(isinstance(x, list) for x in shape)
        shapes = shape if listed else [shape]
        if listed and not lists:
            size = 0
        elif not size and listed:
            size = next((dtype_bytes[str(x).lower()] for x in t if str(x).lower() in dtype_bytes), 0)
        out.append(size * sum(int(np.prod(s, dtype=np.int64)) for s in shapes
                              if isinstance(s, list) and all(isinstance(x, int) for x in s)))
    return out


def _largest(dims: object, types: object, dtype_bytes: dict[str, int]) -> int:
    """The bytes of the largest tensor (or list of tensors, summed) an op's ``Input
    Dims`` and ``Input type`` list; 0 where they say none."""
    return max(input_bytes(dims, types, dtype_bytes), default=0)
