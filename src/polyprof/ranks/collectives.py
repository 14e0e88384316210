"""The collectives of one rank, as a small table: what alignment, stragglers and
collective statistics work from.

A collective is a communication kernel on a device (NCCL, RCCL: ``ncclKernel_*``,
``ncclDevKernel_*``, named as ``analyze.common.activity_class`` calls communication) or,
in a trace without device activity, a blocking CPU collective (``gloo:all_reduce``...).
Host-side ``nccl:*`` annotations and ``record_param_comms`` are not used: they only
enqueue the kernel, so they say nothing about when the ranks met.

Each row gets a ``key`` (process group and operation) and ``seq``: the collective's
sequence number in its process group where the trace has one on every collective of the
key (``Seq``, which recent PyTorch writes with the comms args), else its position among
the rank's collectives of that key in time order (the k-th collective of a communicator
is the same collective on every rank); ``seq_from`` says which. Sizes come from the Kineto args
(``In msg nelems`` / ``Out msg nelems`` / ``dtype`` / ``Group size``) where present. An arg
the kernel lacks is taken from the framework op that launched it (``record_param_comms``,
where PyTorch writes the comms args, ``Seq`` included, when the kernel has fewer).
"""

from __future__ import annotations

import re

import numpy as np

from ..analyze.common import COMMUNICATION, device_view, frame
from ..analyze.frames import order_desc
from ..analyze.table import Table
from ..trace.core import Trace
from ..trace.factorize import factorize

COLUMNS = ["key", "seq", "seq_from", "op", "pg", "name", "start_ns", "end_ns", "dur_ns", "bytes", "group_size",
           "p2p"]

#: element sizes of the dtype names torch writes (``dtype`` arg; Input type names)
DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
               "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1, "char": 1,
               "signed char": 1, "unsigned char": 1, "int8": 1, "uint8": 1, "bool": 1,
               "float8_e4m3fn": 1, "float8_e5m2": 1}

_KERNEL_OP = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_P2P = ("sendrecv", "send", "recv")


def normalise_op(text: str) -> str:
    """``ncclKernel_AllReduce_RING_LL_Sum_float(...)``, ``allreduce``, ``gloo:all_reduce``,
    ``nccl:_all_gather_base`` -> ``allreduce`` / ``allgather``."""
    m = _KERNEL_OP.search(text)
    s = m.group(1) if m else text.split(":", 1)[-1]
    s = s.lower().replace("_", "").replace("-", "")
    for suffix in ("base", "coalesced", "intoTensor".lower()):
        if s.endswith(suffix) and len(s) > len(suffix):
            s = s[: -len(suffix)]
    return s


#: the Kineto args a collective kernel may carry that the table uses
ARGS = ("Collective name", "Process Group Name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "Seq")


def _stats(trace: Trace, rows: np.ndarray, keys: tuple[str, ...] = ARGS) -> dict[str, np.ndarray]:
    """Each of ``keys`` for ``rows`` (ascending) as an object array (None where
    absent); deferred args are decoded for these rows only."""
    got = trace.stats.lookup_rows(keys, rows) if len(rows) else {}
    out = {}
    for key in keys:
        col = np.full(len(rows), None, object)
        if key in got:
            m, v = got[key]
            col[m] = list(v)
        out[key] = col
    return out


def _with_op_args(trace: Trace, rows: np.ndarray, st: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``st`` with what a kernel lacks taken from the framework op that launched it
    (``record_param_comms`` carries the comms args, ``Seq`` among them, where a kernel
    may carry none or only some)."""
    lacking = tuple(k for k, v in st.items() if (v == None).any())  # noqa: E711 - elementwise
    if not len(rows) or not lacking:
        return st
    from ..derive import cache

    corr = cache.correlation(trace)
    dev = corr.device_rows
    i = np.searchsorted(dev, rows)
    found = i < len(dev)
    found[found] &= dev[i[found]] == rows[found]
    op = np.full(len(rows), -1, np.int64)
    op[found] = corr.op[i[found]]
    has = op >= 0
    if not has.any():
        return st
    uniq, back = np.unique(op[has], return_inverse=True)
    got = _stats(trace, uniq, lacking)
    take = np.flatnonzero(has)
    out = dict(st)
    for key in lacking:
        col = st[key].copy()
        fill = got[key][back]
        use = (col[take] == None) & (fill != None)  # noqa: E711
        col[take[use]] = fill[use]
        out[key] = col
    return out


def _num(values: np.ndarray, missing: int = 0) -> np.ndarray:
    out = np.full(len(values), missing, np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = int(v) if v is not None else missing
        except (TypeError, ValueError, OverflowError):
            pass
    return out


def _sequence(keys: np.ndarray, recorded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seq, seq_from) per row (rows in time order): the recorded ``Seq`` for the keys
    whose every row has one, distinct and increasing; else the order within the key."""
    if not len(keys):
        return np.zeros(0, np.int64), np.zeros(0, object)
    codes = factorize(keys)[0]
    by_key = np.argsort(codes, kind="stable")
    c = codes[by_key]
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    seq = np.empty(len(keys), np.int64)
    seq[by_key] = np.arange(len(c)) - np.repeat(first, np.diff(np.r_[first, len(c)]))
    src = np.full(len(keys), "order", object)
    for k in np.unique(keys[recorded >= 0]):
        mine = keys == k
        r = recorded[mine]
        if (r >= 0).all() and (np.diff(r) > 0).all():
            seq[mine], src[mine] = r, "Seq"
    return seq, src


def collective_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, start, end) of the rank's collectives: device communication kernels, else
    blocking CPU collectives (gloo)."""
    v = device_view(trace)
    sel = v.cls == COMMUNICATION
    if sel.any():
        return v.rows[sel], v.start[sel], v.end[sel]
    if not trace.n_events:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    ids = [i for i, s in enumerate(trace.strings) if s.lower().startswith("gloo:")]
    rows = np.flatnonzero(np.isin(trace.events["name"], ids) & (trace.events["dur_ns"] > 0)) if ids \
        else np.zeros(0, np.int64)
    st = trace.start_ns[rows]
    return rows, st, st + trace.dur_ns[rows]


def collective_table(trace: Trace) -> Table:
    """One row per collective of one rank, in time order; see the module doc."""
    rows, start, end = collective_rows(trace)
    by_row = np.argsort(rows, kind="stable")  # stat lookups want ascending rows
    rows, start, end = rows[by_row], start[by_row], end[by_row]
    st = _with_op_args(trace, rows, _stats(trace, rows))
    coll, pg_v, dtype = st["Collective name"], st["Process Group Name"], st["dtype"]
    n_in, n_out, group = _num(st["In msg nelems"]), _num(st["Out msg nelems"]), _num(st["Group size"])
    recorded = _num(st["Seq"], -1)
    order = np.argsort(start, kind="stable")  # then time order
    rows, start, end, coll, pg_v, n_in, n_out, dtype, group, recorded = (
        x[order] for x in (rows, start, end, coll, pg_v, n_in, n_out, dtype, group, recorded))
    names = trace.names(rows) if len(rows) else np.zeros(0, object)
    ops = np.array([normalise_op(str(c) if c else str(n)) for c, n in zip(coll, names)], object)
    pg = np.array([str(x) if x is not None else "" for x in pg_v], object)
    size = np.fromiter((DTYPE_BYTES.get(str(d).lower(), 0) if d is not None else 0 for d in dtype),
                       np.int64, len(rows))
    keys = np.array([f"{g}/{o}" if g else o for g, o in zip(pg, ops)], object)
    seq, seq_from = _sequence(keys, recorded)
    return frame({"key": keys, "seq": seq, "seq_from": seq_from, "op": ops, "pg": pg, "name": names,
                  "start_ns": start.astype(np.int64), "end_ns": end.astype(np.int64),
                  "dur_ns": (end - start).astype(np.int64), "bytes": np.maximum(n_in, n_out) * size,
                  "group_size": group,
                  "p2p": np.fromiter((o in _P2P for o in ops), bool, len(ops))})


#: bus bandwidth = algorithm bandwidth x this factor (n = ranks in the group), as
#: nccl-tests define it: the data each link carries, comparable with the link's peak
def bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall", "alltoallv"):
        return (n - 1) / n
    return 1.0


def collective_stats(tables: dict[int, Table]) -> Table:
    """Per collective type and size over every rank: count, time, bytes, bandwidths.

    Columns: ``op``, ``bytes`` (per call, 0 when the trace gives no size), ``count``,
    ``ranks``, ``total_ns``, ``mean_ns``, ``max_ns`` (kernel time, summed over ranks),
    ``algbw_gbps`` (bytes / mean time), ``busbw_gbps`` (``algbw`` x the nccl-tests bus
    factor of the op and group size; NaN without sizes).
    """
    parts = [(r, t) for r, t in tables.items() if len(t)]
    cols = ["op", "bytes", "count", "ranks", "total_ns", "mean_ns", "max_ns", "algbw_gbps", "busbw_gbps"]
    if not parts:
        return frame({c: np.zeros(0, object if c == "op" else np.float64) for c in cols})

    def column(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.asarray(t[name], dtype) for _, t in parts])

    ops, nbytes, dur, group = column("op", object), column("bytes", np.int64), column("dur_ns", np.int64), \
        column("group_size", np.int64)
    rank = np.repeat(np.array([r for r, _ in parts], np.int64), [len(t) for _, t in parts])
    # groups of (op, bytes) numbered in order of first appearance (pandas' groupby(sort=False))
    _, op_code = np.unique(ops.astype(str), return_inverse=True)
    _, first, inv = np.unique(np.stack([op_code.ravel(), nbytes], axis=1), axis=0, return_index=True,
                              return_inverse=True)
    renumber = np.empty(len(first), np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(len(first))
    g, k = renumber[inv.ravel()], len(first)
    count = np.bincount(g, minlength=k)
    total = np.zeros(k, np.int64)
    np.add.at(total, g, dur)
    longest, widest = np.full(k, np.iinfo(np.int64).min), np.full(k, np.iinfo(np.int64).min)
    np.maximum.at(longest, g, dur)
    np.maximum.at(widest, g, group)
    ranks = np.bincount(np.unique(np.stack([g, rank], axis=1), axis=0)[:, 0], minlength=k)
    firsts = np.sort(first)
    mean = total / count
    size = nbytes[firsts].astype(np.float64)
    algbw = np.where(size > 0, size / np.maximum(mean, 1), np.nan)  # B/ns = GB/s
    n = np.where(widest > 0, widest, ranks)
    busbw = algbw * np.array([bus_factor(o, int(m)) for o, m in zip(ops[firsts], n)])
    return frame({"op": ops[firsts], "bytes": nbytes[firsts], "count": count, "ranks": ranks, "total_ns": total,
                  "mean_ns": mean, "max_ns": longest, "algbw_gbps": algbw, "busbw_gbps": busbw},
                 order=order_desc(total))


