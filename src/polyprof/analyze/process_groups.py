"""A trace's process groups, from Kineto's ``distributedInfo`` (``pg_config``: each group's
name, size and global ranks; ``world_size``): what a collective's own args leave out."""

from __future__ import annotations

import numpy as np

from ..trace import metadata_keys as mkeys
from ..trace.core import Trace


def group_ranks(trace: Trace) -> list[int] | None:
    """The global ranks of the trace's one process group (``distributedInfo.pg_config``),
    None when there are several (a c10d op's peer is then a rank of a group it does not
    name) or none are listed."""
    info = distributed_info(trace)
    pgs = info.get("pg_config") if info is not None else None
    if isinstance(pgs, list) and len(pgs) == 1 and isinstance(pgs[0], dict):
        ranks = pgs[0].get("ranks")
        if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
            return ranks
    return None


def distributed_info(trace: Trace) -> dict | None:
    """The trace's ``distributedInfo`` (Kineto's header), None where it has none."""
    info = trace.metadata.get(mkeys.DISTRIBUTED_INFO)
    if not isinstance(info, dict):
        torch_md = trace.metadata.get(mkeys.TORCH)
        info = torch_md.get(mkeys.DISTRIBUTED_INFO) if isinstance(torch_md, dict) else None
    return info if isinstance(info, dict) else None


def known_group_sizes(trace: Trace, group: np.ndarray, pg: np.ndarray) -> np.ndarray:
    """``group`` (each collective's ``Group size``, 0: not given) with the sizes
    ``distributedInfo`` gives where the row has none: its process group's ``pg_size``
    (by the ``Process Group Name`` it names), or, for a row naming none (gloo's
    ``gloo:all_reduce`` ranges), the size every listed group has, else the world size
    where no group is listed. Before, such rows were a group of 1 (bus bandwidth equal
    to the algorithm bandwidth)."""
    missing = np.flatnonzero(group <= 0)
    info = distributed_info(trace) if len(missing) else None
    if info is None:
        return group
    groups = info.get("pg_config")
    sizes = {str(c.get("pg_name")): int(c["pg_size"]) for c in (groups if isinstance(groups, list) else [])
             if isinstance(c, dict) and isinstance(c.get("pg_size"), int) and c["pg_size"] > 0}
    world = info.get("world_size")
    if sizes:
        one = set(sizes.values())
        unnamed = one.pop() if len(one) == 1 else 0
    else:
        unnamed = world if isinstance(world, int) and world > 0 else 0
    out = group.copy()
    for i in missing.tolist():
        name = pg[i]
        out[i] = sizes.get(str(name), 0) if name not in (None, "") else unnamed
    return out
