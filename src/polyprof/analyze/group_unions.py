"""The union of each group's intervals inside one window, for every group at once.

The device breakdowns take, per device or stream and per class of activity, the union of
its intervals clipped to the analysed span (``derive.intervals.clip_union``). Done group
by group that is a dozen NumPy calls on a few elements each, times every group: most of
those analyses' time on a trace of a few thousand events. Here the groups are laid end to
end, each shifted past the last one's span, so that one union of every interval gives
each group's segments and none of them spans two groups: the same segments, in integers,
as ``clip_union`` gives each group.
"""

from __future__ import annotations

import numpy as np

from ..derive.intervals import clip_union, union

#: the groups laid end to end stay below this (int64 ns with room to spare); past it, the
#: union is taken group by group
LIMIT = 1 << 62


def clipped_unions(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_groups: int, t0: int,
                   t1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, start, end) of the disjoint segments covering each group's intervals
    ``[starts, ends)`` clipped to ``[t0, t1)``, by group then start: for each group ``g``
    in ``range(n_groups)``, ``clip_union(starts[group == g], ends[group == g], t0, t1)``."""
    group = np.asarray(group, np.int64)
    width = t1 - t0 + 1
    if width <= 0 or n_groups * width >= LIMIT:
        return _one_by_one(group, starts, ends, n_groups, t0, t1)
    shift = group * width - t0
    s = np.minimum(np.maximum(starts, t0), t1) + shift
    e = np.minimum(np.maximum(ends, t0), t1) + shift
    us, ue = union(s, e)
    keep = ue > us
    us, ue = us[keep], ue[keep]
    g = us // width
    back = g * width - t0
    return g, us - back, ue - back


def _one_by_one(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_groups: int, t0: int,
                t1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = [clip_union(starts[group == g], ends[group == g], t0, t1) for g in range(n_groups)]
    g = np.repeat(np.arange(n_groups, dtype=np.int64), [len(s) for s, _ in parts])
    return (g, np.concatenate([np.zeros(0, np.int64), *(s for s, _ in parts)]),
            np.concatenate([np.zeros(0, np.int64), *(e for _, e in parts)]))


def covered_lengths(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_groups: int, t0: int,
                    t1: int) -> np.ndarray:
    """Per group, the time its intervals cover inside ``[t0, t1)`` (int64 ns)."""
    g, s, e = clipped_unions(group, starts, ends, n_groups, t0, t1)
    return sums(g, e - s, n_groups)


def sums(group: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the sum of the int64 ``values`` of its rows (``group`` ascending), exact."""
    at = np.searchsorted(group, np.arange(n_groups + 1))
    total = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return total[at[1:]] - total[at[:-1]]
