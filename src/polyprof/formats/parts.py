"""Events of one vendor table as columns, before they become a Trace (a reader's middle stage).

The SQLite readers (formats/nsys, formats/rocpd) and rocprofv3's JSON reader read each
table into a :class:`Part`: times, the process and thread (host) or device and queue
(device) of each event, names and categories as codes into small lists, stats. Their
builders turn parts into sources, planes, tracks, events and flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..trace.sorting import lexsort, unique_inverse
from .safety import TIME_LIMIT_NS


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


    def sane_times(self, notes: list[str]) -> "Part":
        """The part without the rows whose times are beyond +-2**62 ns (damage, not a
        clock: the analyses' spans would overflow int64), counted in ``notes``."""
        lim = TIME_LIMIT_NS
        ok = (self.start >= -lim) & (self.start <= lim) & (self.end >= -lim) & (self.end <= lim)
        if ok.all():
            return self
        notes.append(f"{int((~ok).sum())} row(s) of {self.table} left out: times beyond +-2**62 ns (a damaged file)")
        return self.take(ok)

    def forward_times(self, notes: list[str]) -> "Part":
        """The part with each row that ends before it starts (a damaged file: a negative
        duration) kept at its start, 0 ns long, counted in ``notes``; never silently."""
        back = self.end < self.start
        if back.any():
            notes.append(f"{int(back.sum())} row(s) of {self.table} end before they start (a damaged file): "
                         "kept at their start, 0 ns long")
            self.end = np.maximum(self.end, self.start)
        return self


def read_parts(readers: Iterable[Callable[[], Part | None]], notes: list[str]) -> Iterator[Part]:
    """The parts the ``readers`` give, one at a time, each without its rows of damaged
    times (:meth:`Part.sane_times`) and with those that end before they start made 0 ns
    long (:meth:`Part.forward_times`), both said in ``notes``; none that is empty."""
    for read in readers:
        p = read()
        if p is not None and len(p):
            p = p.sane_times(notes)
            if len(p):
                yield p.forward_times(notes)


def zeros(n: int) -> np.ndarray:
    """A read-only column of ``n`` zeros that takes no memory (a broadcast scalar)."""
    return np.broadcast_to(np.int64(0), (n,))


def one(n: int, value: str) -> tuple[np.ndarray, list[str]]:
    """Codes and values of a column that is ``value`` everywhere."""
    return zeros(n), [value]


def set_stat(stats: dict[str, Any], key: str, values: np.ndarray, missing: int = -1) -> None:
    """A stat from an integer column, left out where the column holds ``missing``."""
    has = values != missing
    if has.all():
        stats[key] = values
    elif has.any():
        rows = np.flatnonzero(has)
        stats[key] = (rows, values[rows])


def factorized(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, code of each value): no sort for a constant column (a
    single process, device or class is the usual case)."""
    col = np.asarray(col)
    if not len(col) or col.min() == col.max():
        return col[:1], np.zeros(len(col), np.intp)
    return unique_inverse(col)


def group_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, one row per group as a k x len(cols) array) of integer columns
    taken together: each column factorized by a sort, the codes combined into one int64
    key (``np.unique(axis=0)`` sorts rows of Python-compared structures: minutes on
    millions of rows)."""
    n = len(cols[0])
    key = np.zeros(n, np.int64)
    size = 1
    for c in cols:
        u, inv = factorized(c)
        if len(u) <= 1:
            continue
        if size * len(u) >= (1 << 62):  # renumber what is combined so far
            uk, key = unique_inverse(key)
            key = key.astype(np.int64)
            size = len(uk)
        key = key * len(u) + inv
        size *= len(u)
    uk, inv = factorized(key)
    first = np.empty(len(uk), np.intp)
    first[inv[::-1]] = np.arange(n - 1, -1, -1)  # the first row of each group
    return inv, np.stack([np.asarray(c)[first] for c in cols], axis=1) if n else np.zeros((0, len(cols)), np.int64)


def triples(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``"x,y,z"`` texts (grid, block) of three integer columns, made once per distinct triple."""
    inv, uniq = group_rows(x, y, z)
    text = np.array([",".join(str(int(v)) for v in u) for u in uniq.tolist()], dtype=object)
    return text[inv]


def combined_names(parts: list[np.ndarray], label: Any) -> tuple[np.ndarray, list[str]]:
    """Codes and names made from a few small-integer columns (``label(*values) -> text``)."""
    inv, uniq = group_rows(*parts)
    return inv.astype(np.int64), [label(*(int(x) for x in u)) for u in uniq.tolist()]


def pair_keys(proc_a: np.ndarray, id_a: np.ndarray, proc_b: np.ndarray, id_b: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per (process, id) pair of two sets, equal where the pairs are: the
    process's code above the id's bits when they fit (ids < 0 count as 0), else the
    pairs' group numbers."""
    one_proc = [int(x) for p in (proc_a, proc_b) if len(p) for x in (p.min(), p.max())]
    if len(set(one_proc)) <= 1:  # a single process: the ids are the keys
        return np.maximum(id_a, 0), np.maximum(id_b, 0)
    _, pcode = factorized(np.concatenate([proc_a, proc_b]))
    hi = int(max(id_a.max(initial=0), id_b.max(initial=0)))
    bits = max(hi, 1).bit_length()
    if int(pcode.max(initial=0)).bit_length() + bits > 62:
        group, _ = group_rows(np.concatenate([proc_a, proc_b]), np.concatenate([id_a, id_b]))
        group = group.astype(np.int64)
        return group[:len(id_a)], group[len(id_a):]
    pcode = pcode.astype(np.int64) << bits
    return pcode[:len(id_a)] | np.maximum(id_a, 0), pcode[len(id_a):] | np.maximum(id_b, 0)


def flow_pairs(launch_proc: np.ndarray, launch_corr: np.ndarray, launch_row: np.ndarray,
               dev_proc: np.ndarray, dev_corr: np.ndarray, dev_row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src rows, dst rows, ids): each device row to the first launch row with its
    (process, correlation id); ids <= 0 are no ids. One int64 key per (process, id)
    where the ids fit beside the process codes, so only the launches are sorted."""
    if not len(launch_row) or not len(dev_row):
        z = np.zeros(0, np.int64)
        return z, z, z
    lkey, dkey = pair_keys(launch_proc, launch_corr, dev_proc, dev_corr)
    ok = launch_corr > 0
    lkey, lrow = (lkey, launch_row) if ok.all() else (lkey[ok], launch_row[ok])
    del ok
    # by key, then row (rows ascend in the launches as given: a stable sort keeps them),
    # so the first launch of a key comes first
    order = np.argsort(lkey, kind="stable") if np.all(lrow[1:] >= lrow[:-1]) else lexsort((lrow, lkey))
    lkey, lrow = lkey[order], lrow[order]
    del order
    pos = np.searchsorted(lkey, dkey) if len(lkey) else np.zeros(len(dkey), np.intp)
    pos = np.minimum(pos, max(len(lkey) - 1, 0))
    hit = (dev_corr > 0) & (lkey[pos] == dkey) if len(lkey) else np.zeros(len(dkey), bool)
    return lrow[pos[hit]], dev_row[hit], dev_corr[hit]
