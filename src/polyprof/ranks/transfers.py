"""Point-to-point transfers across the ranks of a job: both ends of each joined into one
``transfers`` table, and the clock constraints they give.

**Matching.** The k-th send from rank a to rank b is the k-th receive on b from a (MPI
and gloo deliver the messages between two ranks in order; NCCL's too, per pair and
communicator). Only transfers whose peer the trace names are matched (``peer`` of
``analyze/collectives.py``); a SendRecv kernel that names none binds nobody.

**Constraints.** A message cannot arrive before it was sent: the receive on b ends at
or after the send on a began. That is all a transfer says (a small send may complete
before its receive is even posted: gloo and NCCL send eagerly), so transfers bound the
offset between two ranks from both sides only when messages go both ways (a pipeline's
activations forward and gradients back); one way only bounds it from one side, and the
rank is reported as not aligned. Where two recordings did not start at the same
transfer, a shift of up to ``MAX_SHIFT`` per direction is tried, sizes must agree, and
of the shift pairs whose constraints agree the one with the most matches, then the
smallest bound, is taken (a pairing off by one may agree too, only more loosely).
"""

from __future__ import annotations

import numpy as np

from ..analyze.frames import frame, order_desc
from ..analyze.table import Table
from ..analyze.transfers import group_rows, summarise
from ..trace import clock
from ..trace.clock import ClockFit

MAX_SHIFT = 3
COLUMNS = ["src", "dst", "bytes", "count", "sends", "recvs", "total_bytes", "bytes_per_step", "send_ns", "recv_ns",
           "time_per_step_ns", "blocking_ns"]


def job_transfers(tables: dict[int, Table], steps: dict[int, int]) -> Table:
    """Both ends of every transfer of the job (rows in the window: ``in_window``), per
    direction and size.

    Columns: ``src``, ``dst`` (-1: a peer the trace does not name), ``bytes`` (per
    transfer), ``count`` (transfers: the larger of the ends' counts, each transfer once),
    ``sends`` / ``recvs`` (as seen on the sending / receiving rank), ``total_bytes``,
    ``bytes_per_step`` (per step of the sender's window, else the receiver's; NaN
    without steps), ``send_ns`` / ``recv_ns`` (time in the send on the sender, in the
    receive on the receiver), ``time_per_step_ns`` (both ends' time per step),
    ``blocking_ns`` (what the ranks' threads waited in them: CPU backends)."""
    parts = []
    for r, t in sorted(tables.items()):
        inside = t.take(np.asarray(t["in_window"], bool)) if "in_window" in t and len(t) else t
        s = summarise(inside, r, steps.get(r, 0))
        if len(s):
            parts.append(s)
    if not parts:
        return frame({c: np.zeros(0, np.int64) for c in COLUMNS})
    a = Table.concat(parts)
    cols = {c: np.asarray(a[c]) for c in ("src", "dst", "bytes")}
    first, g = group_rows(cols, ["src", "dst", "bytes"])
    k = len(first)
    recv = np.asarray(a["op"], object) == "recv"
    n, time = np.asarray(a["count"], np.int64), np.asarray(a["time_ns"], np.int64)
    sends = np.bincount(g, weights=np.where(recv, 0, n), minlength=k).astype(np.int64)
    recvs = np.bincount(g, weights=np.where(recv, n, 0), minlength=k).astype(np.int64)
    send_ns = np.bincount(g, weights=np.where(recv, 0, time), minlength=k).astype(np.int64)
    recv_ns = np.bincount(g, weights=np.where(recv, time, 0), minlength=k).astype(np.int64)
    blocking = np.bincount(g, weights=np.asarray(a["blocking_ns"], np.int64), minlength=k).astype(np.int64)
    src, dst, size = cols["src"][first], cols["dst"][first], cols["bytes"][first]
    count = np.maximum(sends, recvs)
    n_steps = np.array([steps.get(int(s), 0) or steps.get(int(d), 0) for s, d in zip(src, dst)], np.float64)
    total = count * size
    with np.errstate(divide="ignore", invalid="ignore"):
        bps = np.where(n_steps > 0, total / n_steps, np.nan)
        tps = np.where(n_steps > 0, (send_ns + recv_ns) / n_steps, np.nan)
    return frame({"src": src, "dst": dst, "bytes": size, "count": count, "sends": sends, "recvs": recvs,
                  "total_bytes": total, "bytes_per_step": bps, "send_ns": send_ns, "recv_ns": recv_ns,
                  "time_per_step_ns": tps, "blocking_ns": blocking}, order=order_desc(send_ns + recv_ns))


def _one_way(src_t: Table, src: int, dst_t: Table, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(send start, send bytes, recv end, recv bytes) of the transfers from ``src`` to
    ``dst``, each end in its rank's time order."""
    def rows(t: Table, op: str, peer: int) -> np.ndarray:
        if not len(t):
            return np.zeros(0, np.int64)
        m = (np.asarray(t["op"], object) == op) & (np.asarray(t["peer"], np.int64) == peer)
        idx = np.flatnonzero(m)
        return idx[np.argsort(np.asarray(t["start_ns"], np.int64)[idx], kind="stable")]

    s, r = rows(src_t, "send", dst), rows(dst_t, "recv", src)
    return (np.asarray(src_t["start_ns"], np.int64)[s] if len(s) else s,
            np.asarray(src_t["bytes"], np.int64)[s] if len(s) else s,
            np.asarray(dst_t["end_ns"], np.int64)[r] if len(r) else r,
            np.asarray(dst_t["bytes"], np.int64)[r] if len(r) else r)


_NONE = (np.zeros(0, np.int64),) * 4


def _shifts(a_bytes: np.ndarray, b_bytes: np.ndarray) -> list[tuple[int, int]]:
    """(shift, matches) that pair the k-th of ``a`` with the (k + shift)-th of ``b`` with
    agreeing sizes (0 = unknown agrees with anything), most matches first."""
    out = []
    for s in sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=abs):
        i = np.arange(max(0, -s), min(len(a_bytes), len(b_bytes) - s))
        if not len(i):
            continue
        x, y = a_bytes[i], b_bytes[i + s]
        if ((x == y) | (x == 0) | (y == 0)).all():
            out.append((s, len(i)))
    return sorted(out, key=lambda p: -p[1])


def _pairs(send: np.ndarray, recv: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(max(0, -shift), min(len(send), len(recv) - shift))
    return send[i], recv[i + shift]


def align_transfers(ref_t: Table, ref: int, other_t: Table, other: int) -> tuple[ClockFit | None, int, str]:
    """(fit of ``other`` onto ``ref``'s clock, transfers matched, why not) from the
    transfers between the two ranks; see the module doc. The fit is None when they
    give no consistent two-sided constraints."""
    fwd = _one_way(ref_t, ref, other_t, other)  # ref sends: other's recv end >= ref's send start
    back = _one_way(other_t, other, ref_t, ref)  # other sends: ref's recv end >= other's send start
    if not len(fwd[0]) or not len(fwd[2]):
        fwd = _NONE
    if not len(back[0]) or not len(back[2]):
        back = _NONE
    if not len(fwd[0]) and not len(back[0]):
        return None, 0, ""
    if not len(fwd[0]) or not len(back[0]):
        a, b = (ref, other) if len(fwd[0]) else (other, ref)
        return None, 0, (f"transfers go one way only (rank {a} to rank {b}): they bound the clock offset "
                         "from one side")
    best: tuple[ClockFit | None, int] = (None, 0)
    for sf, nf in _shifts(fwd[1], fwd[3]):
        for sb, nb in _shifts(back[1], back[3]):
            send_f, recv_f = _pairs(fwd[0], fwd[2], sf)
            send_b, recv_b = _pairs(back[0], back[2], sb)
            f = clock.fit_bounds(recv_f, send_f, send_b, recv_b, max_drift_ppm=100.0, method="transfers",
                                 warn=False)
            # a pairing off by one can still agree (a later message's receive ends after an
            # earlier send too), only more loosely: the most matches, then the tightest
            if f.consistent and (best[0] is None or (nf + nb, -f.bound_ns) > (best[1], -best[0].bound_ns)):
                best = (f, nf + nb)
    if best[0] is None:
        return None, 0, "the transfers' constraints disagree (a recording that starts mid-exchange?)"
    return best[0], best[1], ""
