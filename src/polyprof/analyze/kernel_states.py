"""Exclusive kernel-type states: how long each device ran only compute, only
communication, only memory work, or several at once (HTA's kernel type breakdown).

Per device, each class's activity is merged into busy intervals (copies and fills are
one class, "memory", as HTA has it); every instant of the analysed span is in exactly
one state: the set of classes busy then, or idle. So the state times add up to the span.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.core import Trace
from .common import COMMUNICATION, COMPUTE, MEMCPY, MEMSET, analysed_stretches, device_view
from .breakdown import ALL_DEVICES
from .frames import empty_frame, rows_frame
from .window import WindowArg, selection, view
from ..trace.sorting import unique
from .group_unions import clipped_unions

if TYPE_CHECKING:
    from .table import Table

#: state bits, in the order their names are joined ("compute + communication")
CLASSES = (("compute", (COMPUTE,)), ("communication", (COMMUNICATION,)), ("memory", (MEMCPY, MEMSET)))
COLUMNS = ["plane", "state", "time_ns", "segments", "span_pct", "busy_pct"]
#: the low bits of a sweep key (:func:`_sweep`): what happens at that instant, in the order
#: the instants of one time take: the span's start (0), a class starting (1..k), one ending
#: (k+1..2k), the span's end (2k+1), so a device's last instant is its span's end
_CODE_BITS = (2 * len(CLASSES) + 1).bit_length()
_LIMIT = 2 ** 63
#: segments encoded at a time (the temporaries are a block's, not every segment's)
_BLOCK = 1 << 16


def state_name(bits: int) -> str:
    if not bits:
        return "idle"
    names = [n for i, (n, _) in enumerate(CLASSES) if bits >> i & 1]
    return " + ".join(names) + (" only" if len(names) == 1 else "")


def kernel_state_breakdown(trace: Trace, window: WindowArg = None) -> Table:
    """One row per (device, state) that occurs, states in bit order, idle last.

    Columns: ``plane``, ``state`` ("compute only", "communication only", "memory only",
    "compute + communication", ..., "idle"), ``time_ns`` (time in that state inside the
    analysed span; they add up to the span), ``segments`` (separate stretches of it),
    ``span_pct`` (of the span), ``busy_pct`` (of the time any class is busy; NaN for idle).

    ``window="hta"``: HTA 0.5's kernel-type table (``get_gpu_kernel_breakdown``,
    ``analyze/hta_tables.py``), its rows in its order: every state HTA lists, zero-length
    ones included, no idle row; ``time_ns`` is its ``sum`` (whole µs), ``busy_pct`` its
    ``percentage`` before rounding, ``span_pct`` of HTA's temporal span, ``segments`` the
    stretches of positive length; one plane, or ``(all devices)`` (HTA's one table per rank).
    """
    trace = view(trace, window)
    sel = selection(trace)
    if sel is not None and sel.hta:
        return _hta_states(trace)
    v = device_view(trace)
    t0, t1 = v.span
    planes = unique(v.plane)
    n, k = len(planes), len(CLASSES)
    if not n:
        return empty_frame(COLUMNS, ("plane", "state"), np.float64)
    # each device's classes merged into busy segments, every (device, class) at once
    # (group_unions.py); then each device's segment starts and ends swept in time order,
    # the state the sum of the bits of the classes busy
    at = np.searchsorted(planes, v.plane)
    bit = np.zeros(max(c for _, cs in CLASSES for c in cs) + 1, np.int64)
    for i, (_, classes) in enumerate(CLASSES):
        bit[list(classes)] = i
    ws, we = analysed_stretches(trace)  # (one, or a schedule's few cycles: what is between them is left out)
    group = at * k + bit[v.cls]
    del at
    parts = [clipped_unions(group, v.start, v.end, n * k, a, b) for a, b in zip(ws.tolist(), we.tolist())]
    del group
    states = 1 << k
    fits = t1 >= t0 and n << (int(t1 - t0).bit_length() + _CODE_BITS) <= _LIMIT
    per, segs = (_sweep if fits else _sweep_lexsort)(parts, n, k, t0, t1)
    per, segs = per.reshape(n, states), segs.reshape(n, states)
    span = int((we - ws).sum())
    per[:, 0] -= (t1 - t0) - span  # between the stretches: idle in the sweep, not analysed
    out = []
    for j, plane in enumerate(planes.tolist()):
        busy = span - int(per[j, 0])
        name = trace.planes[plane].name
        for bits in [*range(1, states), 0]:
            if per[j, bits] or bits == 0:
                out.append((name, state_name(bits), int(per[j, bits]), int(segs[j, bits]),
                            100.0 * per[j, bits] / span if span else np.nan,
                            100.0 * per[j, bits] / busy if bits and busy else np.nan))
    return rows_frame(out, COLUMNS) if out else empty_frame(COLUMNS, ("plane", "state"), np.float64)


Parts = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def _sweep(parts: Parts, n: int, k: int, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """Per (device, state), flat (``device << k | state``): the time in that state and its
    stretches. ``parts``: each analysed stretch's (group, start, end) segments
    (:func:`~.group_unions.clipped_unions`, group ``device * k + class``), emptied as read.

    Each instant, the span's ends included, is one int64 key ``(device << tbits | time -
    t0) << _CODE_BITS | code``, sorted in place; the codes, the state (their running sum
    of class bits, int8), the time to the next instant and the device are then read out of
    it one at a time, so at most the keys, the times (float64, as ``np.bincount`` weighs
    them) and the states are alive at once. At one time the states of the instants before
    the last last no time: the order of the ties is the one of :func:`_sweep_lexsort`."""
    t0, t1 = int(t0), int(t1)
    tbits = (t1 - t0).bit_length()
    size = sum(len(g) for g, _, _ in parts)
    total = 2 * size + 2 * n
    key = np.empty(total, np.int64)
    dev = np.arange(n, dtype=np.int64) << (tbits + _CODE_BITS)
    key[:n] = dev
    key[total - n:] = dev + ((t1 - t0) << _CODE_BITS | 2 * k + 1)
    del dev
    at = n
    while parts:
        g, s, e = parts.pop(0)
        for lo in range(0, len(g), _BLOCK):
            hi = min(lo + _BLOCK, len(g))
            own, cls = np.divmod(g[lo:hi], k)
            own <<= tbits
            own -= t0
            key[at + lo:at + hi] = (own + s[lo:hi]) << _CODE_BITS | cls + 1
            key[at + size + lo:at + size + hi] = (own + e[lo:hi]) << _CODE_BITS | cls + k + 1
        at += len(g)
        del g, s, e
    key.sort(kind="stable")  # (a merge of sorted runs: each (device, class)'s starts, its ends)
    code = np.empty(total, np.int8)
    np.bitwise_and(key, (1 << _CODE_BITS) - 1, out=code, casting="unsafe")
    ends = np.flatnonzero(code == 2 * k + 1)  # each device's last instant
    step = np.zeros(1 << _CODE_BITS, np.int8)
    step[1:k + 1] = 1 << np.arange(k)
    step[k + 1:2 * k + 1] = -step[1:k + 1]
    state = step[code]
    del code
    np.cumsum(state, dtype=np.int8, out=state)  # (a device's instants end at 0: no class busy)
    key >>= _CODE_BITS
    dur = np.empty(total - 1)
    np.subtract(key[1:], key[:-1], out=dur, casting="unsafe")  # (in int64, then as float64)
    dur[ends[:-1]] = 0  # from a device's end to the next one's start
    key >>= tbits
    key <<= k
    key += state  # the (device, state) of each instant
    del state
    per = np.bincount(key[:-1], weights=dur, minlength=n << k).astype(np.int64)
    live = dur > 0
    del dur
    bins = key[:-1][live]  # consecutive stretches of one state are one segment
    del key, live
    first = np.ones(len(bins), bool)
    np.not_equal(bins[1:], bins[:-1], out=first[1:])
    return per, np.bincount(bins[first], minlength=n << k)


def _sweep_lexsort(parts: Parts, n: int, k: int, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_sweep` where its keys do not fit in an int64: the instants by ``np.lexsort``."""
    g, s, e = (np.concatenate([q[i] for q in parts]) for i in range(3))
    own = g // k  # the device of each segment
    step = np.left_shift(1, g % k)
    dev = np.arange(n, dtype=np.int64)
    t = np.concatenate([np.full(n, t0, np.int64), s, e, np.full(n, t1, np.int64)])
    p = np.concatenate([dev, own, own, dev])
    d = np.concatenate([np.zeros(n, np.int64), step, -step, np.zeros(n, np.int64)])
    order = np.lexsort((t, p))
    t, p, state = t[order], p[order], np.cumsum(d[order])
    last = np.append(p[1:] != p[:-1], True)  # a device's last instant (t1): no time after it
    dur = np.append(np.diff(t), 0)[~last]
    p_in, state_in = p[~last], state[~last]
    states = 1 << k
    per = np.bincount(p_in * states + state_in, weights=dur, minlength=n * states).astype(np.int64)
    live = dur > 0
    st_live, p_live = state_in[live], p_in[live]  # consecutive stretches of one state are one segment
    first = np.concatenate([[True], (st_live[1:] != st_live[:-1]) | (p_live[1:] != p_live[:-1])]) \
        if len(st_live) else st_live.astype(bool)
    segs = np.bincount(p_live[first] * states + st_live[first], minlength=n * states)
    return per, segs


def _hta_states(trace: Trace) -> Table:
    """HTA 0.5's kernel-type table as rows of :func:`kernel_state_breakdown`."""
    from .hta_compat import hta_activity, merged  # HTA's own computations: only for its window (--span device)
    from .hta_tables import kernel_types  # (as above)

    kt = kernel_types(trace)
    planes = unique(trace.track_plane[trace.events["track"][kt.rows]]) if len(kt.rows) else np.zeros(0, np.int64)
    name = trace.planes[int(planes[0])].name if len(planes) == 1 else ALL_DEVICES
    a = hta_activity(trace)
    t0, t1, _ = merged(a.start, a.end)
    total = int(kt.time_us.sum())
    out = []
    for bits, us, n in zip(kt.bits.tolist(), kt.time_us.tolist(), kt.stretches.tolist()):
        out.append((name, state_name(bits) if bits else "untyped", 1000 * us, n,
                    100.0 * 1000 * us / (t1 - t0) if t1 > t0 else np.nan, 100.0 * us / total if total else np.nan))
    return rows_frame(out, COLUMNS) if out else empty_frame(COLUMNS, ("plane", "state"), np.float64)
