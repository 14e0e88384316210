"""Events of one vendor table as columns, before they become a Trace (a reader's middle stage).

The SQLite readers (formats/nsys, formats/rocpd) and rocprofv3's JSON reader read each
table into a :class:`Part`: times, the process and thread (host) or device and queue
(device) of each event, names and categories as codes into small lists, stats. Their
builders turn parts into sources, planes, tracks, events and flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Part:
    """Events of one table: times, where they happened, names, category, stats."""

    table: str
    device: bool  # device events: (process, device, queue/stream); host: (process, thread)
    start: np.ndarray
    end: np.ndarray
    gpid: np.ndarray  # the process, as the format keys it (nsys: globalPid); -1 when unknown
    tid: np.ndarray  # host: OS thread id; device: stream or queue id
    dev: np.ndarray  # device key (host events: 0)
    names: np.ndarray  # codes into name_values
    name_values: list[str]
    category: np.ndarray  # codes into categories
    categories: list[str]
    #: key -> values for every event, or key -> (rows, values) for some
    stats: dict[str, Any] = field(default_factory=dict)
    corr: np.ndarray | None = None  # correlation ids (-1: none)
    rows: np.ndarray | None = None  # the events' rows in the trace, once added

    def __len__(self) -> int:
        return len(self.start)

    def take(self, keep: np.ndarray) -> "Part":
        """The events where ``keep`` (a boolean mask) is set."""
        new_row = np.cumsum(keep) - 1
        stats: dict[str, Any] = {}
        for k, v in self.stats.items():
            if isinstance(v, tuple):
                rows, vals = v
                sel = keep[rows]
                stats[k] = (new_row[rows[sel]], np.asarray(vals)[sel])
            else:
                stats[k] = v[keep]
        pick = lambda a: None if a is None else a[keep]  # noqa: E731
        return Part(self.table, self.device, self.start[keep], self.end[keep], self.gpid[keep], self.tid[keep],
                    self.dev[keep], self.names[keep], self.name_values, self.category[keep], self.categories,
                    stats, pick(self.corr))


def one(n: int, value: str) -> tuple[np.ndarray, list[str]]:
    """Codes and values of a column that is ``value`` everywhere."""
    return np.zeros(n, np.int64), [value]


def set_stat(stats: dict[str, Any], key: str, values: np.ndarray, missing: int = -1) -> None:
    """A stat from an integer column, left out where the column holds ``missing``."""
    has = values != missing
    if has.all():
        stats[key] = values
    elif has.any():
        rows = np.flatnonzero(has)
        stats[key] = (rows, values[rows])


def triples(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``"x,y,z"`` texts (grid, block) of three integer columns, made once per distinct triple."""
    trip = np.stack([x, y, z], axis=1)
    uniq, inv = np.unique(trip, axis=0, return_inverse=True)
    text = np.array([",".join(str(int(v)) for v in u) for u in uniq], dtype=object)
    return text[inv.ravel()]


def combined_names(parts: list[np.ndarray], label: Any) -> tuple[np.ndarray, list[str]]:
    """Codes and names made from a few small-integer columns (``label(*values) -> text``)."""
    key = np.stack(parts, axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    return inv.ravel().astype(np.int64), [label(*(int(x) for x in u)) for u in uniq]


def flow_pairs(launch_proc: np.ndarray, launch_corr: np.ndarray, launch_row: np.ndarray,
               dev_proc: np.ndarray, dev_corr: np.ndarray, dev_row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src rows, dst rows, ids): each device row to the first launch row with its
    (process, correlation id); ids <= 0 are no ids."""
    ok = launch_corr > 0
    lp, lc, lr = launch_proc[ok], launch_corr[ok], launch_row[ok]
    order = np.lexsort((lr, lc, lp))
    lp, lc, lr = lp[order], lc[order], lr[order]
    first = np.ones(len(lp), bool)
    first[1:] = (lp[1:] != lp[:-1]) | (lc[1:] != lc[:-1])
    lp, lc, lr = lp[first], lc[first], lr[first]
    if not len(lp) or not len(dev_row):
        z = np.zeros(0, np.int64)
        return z, z, z
    both = np.concatenate([np.stack([lp, lc], 1), np.stack([dev_proc, dev_corr], 1)])
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.ravel()
    where = np.full(inv.max() + 1, -1, np.int64)
    where[inv[:len(lp)]] = lr
    src = where[inv[len(lp):]]
    hit = (src >= 0) & (dev_corr > 0)
    return src[hit], dev_row[hit], dev_corr[hit]
