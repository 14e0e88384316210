"""Point-to-point transfers of one trace: who sent to whom, how much, and how long the
rank spent in them.

A transfer is a send or a receive (``gloo:send`` / ``gloo:recv``, ``mpi:*``, NCCL's
``SendRecv`` kernels: the ``p2p`` rows of ``analyze/collectives.py``), never a
collective. Each row of :func:`transfers` is one direction and size as this rank saw
it; a job's ``transfers`` (``ranks/transfers.py``) joins both ends of each.
"""

from __future__ import annotations

import numpy as np

from ..derive import cache
from ..trace.core import Trace
from ..trace.identity import rank_of
from .collectives import collective_table, windowed
from .frames import frame, order_desc
from .table import Table

COLUMNS = ["src", "dst", "op", "bytes", "count", "total_bytes", "bytes_per_step", "time_ns", "time_per_step_ns",
           "blocking_ns", "peer_from"]


def trace_rank(trace: Trace) -> int:
    """The rank a trace belongs to (its source's, else its metadata's), -1 if unknown."""
    if len(trace.sources) == 1 and trace.sources[0].rank is not None:
        return int(trace.sources[0].rank)
    r = rank_of(trace.metadata)
    return -1 if r is None else r


def ends(table: Table, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) rank of each transfer row of ``rank``'s collective table: a send goes
    from the rank to its peer, a receive the other way; a SendRecv kernel is put as sent
    (-1: the trace does not name the peer)."""
    op, peer = np.asarray(table["op"], object), np.asarray(table["peer"], np.int64)
    me = np.full(len(table), rank, np.int64)
    recv = op == "recv"
    return np.where(recv, peer, me), np.where(recv, me, peer)


def group_rows(cols: dict[str, np.ndarray], by: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each group, group of each row) of the rows by the columns ``by``,
    groups numbered in order of first appearance."""
    n = len(next(iter(cols.values())))
    codes = [np.unique(np.asarray(cols[c]).astype(str) if cols[c].dtype == object else cols[c],
                       return_inverse=True)[1].ravel() for c in by]
    _, first, inv = np.unique(np.stack(codes, axis=1) if n else np.zeros((0, len(by)), np.int64), axis=0,
                              return_index=True, return_inverse=True)
    renumber = np.empty(len(first), np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(len(first))
    return np.sort(first), renumber[inv.ravel()]


def per_step(x: np.ndarray, steps: int) -> np.ndarray:
    return x / steps if steps > 0 else np.full(len(x), np.nan)


def summarise(table: Table, rank: int, steps: int) -> Table:
    """The transfer rows of one rank's collective table (already windowed), grouped by
    direction, op and size; see :func:`transfers`."""
    t = table.take(np.asarray(table["p2p"], bool)) if len(table) else table
    if not len(t):
        return frame({c: np.zeros(0, object if c in ("op", "peer_from") else np.int64) for c in COLUMNS})
    src, dst = ends(t, rank)
    cols = {"src": src, "dst": dst, "op": np.asarray(t["op"], object), "bytes": np.asarray(t["bytes"], np.int64)}
    first, g = group_rows(cols, ["src", "dst", "op", "bytes"])
    k = len(first)
    dur = np.asarray(t["dur_ns"], np.int64)
    count = np.bincount(g, minlength=k)
    time = np.bincount(g, weights=dur, minlength=k).astype(np.int64)
    blocking = np.bincount(g, weights=np.where(np.asarray(t["host"], bool), dur, 0), minlength=k).astype(np.int64)
    total = count * cols["bytes"][first]
    return frame({"src": src[first], "dst": dst[first], "op": cols["op"][first], "bytes": cols["bytes"][first],
                  "count": count, "total_bytes": total, "bytes_per_step": per_step(total, steps), "time_ns": time,
                  "time_per_step_ns": per_step(time, steps), "blocking_ns": blocking,
                  "peer_from": np.asarray(t["peer_from"], object)[first]}, order=order_desc(time))


def transfers(trace: Trace) -> Table:
    """The rank's point-to-point transfers in the analysed window, per direction, op
    and size.

    Columns: ``src``, ``dst`` (ranks; -1 where the trace does not name the peer),
    ``op`` (send / recv / sendrecv: which end this rank is), ``bytes`` (per transfer; 0
    when the trace gives no size), ``count``, ``total_bytes``, ``bytes_per_step`` and
    ``time_per_step_ns`` (per step of the window; NaN without steps), ``time_ns`` (time
    in these transfers: the CPU backend's range from post to completion, or the
    kernel), ``blocking_ns`` (of that, what the calling thread waited: CPU backends'
    transfers; a device kernel blocks its stream, not the host), ``peer_from`` (where
    the peer came from: ``comms args``, ``c10d op``)."""
    return summarise(windowed(trace, collective_table(trace)), trace_rank(trace), len(cache.steps(trace)))
