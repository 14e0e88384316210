"""Where device time went: temporal breakdown, idle time, kernels, comm/compute overlap."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from ..derive.intervals import covered, union
from ..trace.core import Trace
from .common import (CLASS_NAMES, COMMUNICATION, COMPUTE, DeviceView, activity_class, analysed_stretches, device_view,
                     qualified_names)
from .frames import empty_frame, frame, order_desc, ratio_pct
from .grouping import group_stats
from .occupancy import LAUNCH_COLUMNS, launch_config
from .window import WindowArg, selection, view
from ..trace.sorting import lexsort, unique, unique_counts, unique_inverse
from .group_unions import LIMIT as GROUPS_LIMIT, covered_lengths, sums

if TYPE_CHECKING:
    from .table import Table

ALL_STREAMS = "(all streams)"
#: an idle gap no longer than this, with the next activity already launched, is kernel-wait
KERNEL_WAIT_MAX_NS = 50_000


def _groups(trace: Trace):  # trace: already the window's view
    """(plane, track or -1, selector, same) for every device stream, then each whole
    device; ``same``: the device row selects what its one stream's row did (a device
    with one stream), so its figures are that row's."""
    v = device_view(trace)
    for plane in unique(v.plane):
        on = v.plane == plane
        tracks = unique(v.track[on])
        for track in tracks:
            yield int(plane), int(track), on & (v.track == track), False
        yield int(plane), -1, on, len(tracks) == 1


def _group_rows(v: DeviceView) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """The rows :func:`_groups` gives, as (plane, track or -1), and each activity's stream
    row and device row (every group at once: ``group_unions.py``)."""
    key = (v.plane.astype(np.int64) << 32) | v.track.astype(np.int64)
    pairs, inv = unique_inverse(key)
    rows: list[tuple[int, int]] = []
    stream_row = np.empty(len(pairs), np.int64)
    device_row = np.empty(len(pairs), np.int64)
    plane_pairs: list[int] = []
    for k, (plane, track) in enumerate(zip((pairs >> 32).tolist(), (pairs & 0xFFFFFFFF).tolist())):
        if plane_pairs and rows[stream_row[plane_pairs[0]]][0] != plane:
            device_row[plane_pairs] = len(rows)
            rows.append((rows[-1][0], -1))
            plane_pairs = []
        stream_row[k] = len(rows)
        rows.append((plane, track))
        plane_pairs.append(k)
    if plane_pairs:
        device_row[plane_pairs] = len(rows)
        rows.append((rows[-1][0], -1))
    return rows, stream_row[inv], device_row[inv]


def temporal_breakdown(trace: Trace, window: WindowArg = None) -> Table:
    """Busy compute / busy non-compute / idle time per device stream and per device.

    One row per (device, stream) and one per device with ``stream`` = "(all streams)"
    (time when any stream is busy). Inside the analysed span (``analyze.common``):
    ``compute_ns`` = time covered by compute kernels; ``non_compute_ns`` = time busy
    with copies, fills or communication kernels but no compute kernel; ``idle_ns`` =
    the rest, so ``compute_ns + non_compute_ns + idle_ns == span_ns``; where the window's
    steps were recorded in separate stretches (a schedule's cycles), ``span_ns`` is the
    stretches' total and what is between them is not counted (``analysed_stretches``). Columns:
    ``plane``, ``stream``, ``track_id`` (-1 for the device row), ``span_start_ns``,
    ``span_ns``, ``compute_ns``, ``non_compute_ns``, ``idle_ns``, ``busy_ns``,
    ``activities`` (count inside the span), ``compute_pct``, ``non_compute_pct``,
    ``idle_pct``. ``window``: the steps analysed (``analyze/window.py``; default all);
    ``"hta"``: HTA 0.5's temporal breakdown (:func:`_hta_temporal`).
    """
    trace = view(trace, window)
    sel = selection(trace)
    if sel is not None and sel.hta:
        return _hta_temporal(trace)
    v = device_view(trace)
    t0 = v.span[0]
    ws, we = analysed_stretches(trace)
    span = int((we - ws).sum())
    rows, stream_row, device_row = _group_rows(v)
    n = len(rows)
    comp = np.flatnonzero(v.cls == COMPUTE)
    c_start, c_end = v.start[comp], v.end[comp]
    busy_ns, compute_ns, hit = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(len(v.start), bool)
    for a, b in zip(ws.tolist(), we.tolist()):  # (the stretches: one, or a schedule's few cycles)
        hit |= (v.end > a) & (v.start < b)
    counts = np.zeros(n, np.int64)
    # each activity on its stream's row, then on its device's: the two passes apart (their
    # groups are disjoint), each holding one copy of the activities, not two
    for group in (stream_row, device_row):
        for a, b in zip(ws.tolist(), we.tolist()):
            busy_ns += covered_lengths(group, v.start, v.end, n, a, b)
            compute_ns += covered_lengths(group[comp], c_start, c_end, n, a, b)
        counts += np.bincount(group[hit], minlength=n)
    busy, compute, inside = busy_ns.tolist(), compute_ns.tolist(), counts.tolist()
    out = [(trace.planes[plane].name, trace.tracks[track].name if track >= 0 else ALL_STREAMS,
            track, t0, span, compute[i], busy[i] - compute[i], span - busy[i], busy[i], inside[i])
           for i, (plane, track) in enumerate(rows)]
    cols = _columns(out, ["plane", "stream", "track_id", "span_start_ns", "span_ns", "compute_ns",
                          "non_compute_ns", "idle_ns", "busy_ns", "activities"])
    for c in ("compute", "non_compute", "idle"):
        cols[f"{c}_pct"] = ratio_pct(cols[f"{c}_ns"], cols["span_ns"])
    return frame(cols)


ALL_DEVICES = "(all devices)"
_TEMPORAL = ["plane", "stream", "track_id", "span_start_ns", "span_ns", "compute_ns", "non_compute_ns", "idle_ns",
             "busy_ns", "activities"]


def _hta_temporal(trace: Trace) -> Table:
    """The temporal breakdown as HTA 0.5 computes it (``analyze/hta_compat.py``): the
    activity HTA counts, merged its way, over its span (the rank's first to last
    activity). Rows as :func:`temporal_breakdown`'s, each over that span; with more than
    one device, a last row ``(all devices)`` / ``(all streams)``: HTA's one row per rank."""
    from .hta_compat import hta_activity, merged  # HTA's own computations: only for its window (--span device)

    a = hta_activity(trace)
    track = trace.events["track"][a.rows]
    plane = trace.track_plane[track] if len(track) else np.zeros(0, np.int32)
    t0, t1, _ = merged(a.start, a.end)
    span = t1 - t0

    def row(p: str, stream: str, track_id: int, sel: np.ndarray) -> tuple:
        busy = merged(a.start[sel], a.end[sel])[2]
        # HTA's µs rounding can end a sub-µs kernel before its start: alone such a kernel
        # subtracts from the compute total less than it does inside the busy union, so
        # compute could pass busy (HTA asserts there; the H200 JAX run): capped at busy
        compute = min(merged(a.start[sel & a.compute], a.end[sel & a.compute])[2], busy)
        return (p, stream, track_id, t0, span, compute, busy - compute, span - busy, busy, int(sel.sum()))

    out = []
    planes = unique(plane)
    for p in planes:
        on = plane == p
        name = trace.planes[int(p)].name
        for tr in unique(track[on]):
            out.append(row(name, trace.tracks[int(tr)].name, int(tr), on & (track == tr)))
        out.append(row(name, ALL_STREAMS, -1, on))
    if len(planes) > 1:
        out.append(row(ALL_DEVICES, ALL_STREAMS, -1, np.ones(len(a.rows), bool)))
    cols = _columns(out, _TEMPORAL)
    for c in ("compute", "non_compute", "idle"):
        cols[f"{c}_pct"] = ratio_pct(cols[f"{c}_ns"], cols["span_ns"])
    return frame(cols)


def _columns(rows: list[tuple], names: list[str]) -> dict[str, np.ndarray]:
    """Rows of (plane, stream, then integers) as columns; typed even when there are none."""
    cols = {c: np.array([r[i] for r in rows], object if i < 2 else np.int64) for i, c in enumerate(names)}
    return cols


def idle_time_breakdown(trace: Trace, kernel_wait_max_ns: int = KERNEL_WAIT_MAX_NS,
                        window: WindowArg = None) -> Table:
    """Idle time per device stream (and device) split by cause.

    Each idle gap inside the analysed span (between busy periods, and before the first)
    is classified by the activity that ends it: **host-wait** when that activity's launch
    call started only after the device went idle (the host was late; where it then
    waited more than ``kernel_wait_max_ns`` after the call returned, only the gap up to
    then: :func:`_split_gaps`); **kernel-wait**
    when it was launched before, and the gap is at most ``kernel_wait_max_ns`` (launch
    latency between back-to-back work); **other** for the rest — longer gaps with work
    already queued (waits on events, other streams, syncs), activity without a known
    launch, and the idle tail after the last activity. ``host_wait_ns + kernel_wait_ns +
    other_ns == idle_ns``, which equals ``temporal_breakdown``'s ``idle_ns``. Columns:
    ``plane``, ``stream``, ``track_id``, ``idle_ns``, ``host_wait_ns``, ``kernel_wait_ns``,
    ``other_ns``, ``gaps``, ``host_wait_pct``, ``kernel_wait_pct``, ``other_pct`` (of idle).
    ``window="hta"``: HTA 0.5's idle time breakdown (:func:`_hta_idle`; its 30 µs
    threshold unless ``kernel_wait_max_ns`` is given).
    """
    trace = view(trace, window)
    sel = selection(trace)
    if sel is not None and sel.hta:
        return _hta_idle(trace, kernel_wait_max_ns)
    v = device_view(trace)
    launch = launch_calls(trace, v)
    out: list[tuple] = []
    for t0, t1 in zip(*(a.tolist() for a in analysed_stretches(trace))):  # (one, or a schedule's few cycles)
        part = _idle_rows(trace, v, launch, kernel_wait_max_ns, t0, t1)
        if part is None:  # the groups laid end to end would pass 2**62 ns
            part = _idle_rows_one_by_one(trace, v, launch, kernel_wait_max_ns, t0, t1)
        out = part if not out else [(*r[:3], *(x + y for x, y in zip(r[3:], q[3:]))) for r, q in zip(out, part)]
    cols = _columns(out, ["plane", "stream", "track_id", "idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns",
                          "gaps"])
    for c in ("host_wait", "kernel_wait", "other"):
        cols[f"{c}_pct"] = ratio_pct(cols[f"{c}_ns"], cols["idle_ns"])
    return frame(cols)


def launch_calls(trace: Trace, v: DeviceView) -> np.ndarray:
    """Each activity's launch call, (start, end) ns as rows 0 and 1; -1 where not known."""
    ev = trace.events
    at = np.maximum(v.launch, 0)
    return np.where(v.launch >= 0, np.stack([ev["start_ns"][at], ev["start_ns"][at] + ev["dur_ns"][at]]), -1)


def _idle_rows(trace: Trace, v: DeviceView, launch: np.ndarray, kernel_wait_max_ns: int, t0: int,
               t1: int) -> list[tuple] | None:
    """:func:`idle_time_breakdown`'s rows over ``[t0, t1)``, every stream and device at
    once (``group_unions.py``: each group shifted past the last one's span, so one sort
    and one running maximum serve them all); None where the groups laid end to end would
    pass 2**62 ns."""
    rows, stream_row, device_row = _group_rows(v)
    n, width = len(rows), t1 - t0 + 1
    if width <= 0 or n * width >= GROUPS_LIMIT:
        return None
    host, kern, other, gaps = (np.zeros(n, np.int64) for _ in range(4))
    tail = np.full(n, t1 - t0, np.int64)  # a group without activity inside: idle throughout
    # each activity on its stream's row, then on its device's: the two passes apart (their
    # groups are disjoint), each holding one copy of the activities, not two
    for group in (stream_row, device_row):
        _idle_sums(v, group, launch, kernel_wait_max_ns, t0, t1, (host, kern, other, gaps, tail))
    other = other + np.maximum(tail, 0)
    gaps = gaps + (tail > 0)
    out = []
    for i, (plane, track) in enumerate(rows):
        h, k, o = int(host[i]), int(kern[i]), int(other[i])
        out.append((trace.planes[plane].name, trace.tracks[track].name if track >= 0 else ALL_STREAMS, track,
                    h + k + o, h, k, o, int(gaps[i])))
    return out


def _idle_sums(v: DeviceView, group: np.ndarray, launch: np.ndarray, kernel_wait_max_ns: int, t0: int,
               t1: int, out: tuple[np.ndarray, ...]) -> None:
    """Into ``out`` (host-wait, kernel-wait and other ns, gaps, and the idle tail, per
    group; the groups laid end to end, ``group_unions.py``) the idle gaps over ``[t0, t1)``
    of the activities in the groups ``group``, each array let go once read."""
    host, kern, other, gaps, tail = out
    n, width = len(tail), t1 - t0 + 1
    act = np.flatnonzero((v.end > t0) & (v.start < t1))
    s = np.minimum(np.maximum(v.start[act], t0), t1) - t0 + group[act] * width  # np.clip, without its wrapper
    order = np.argsort(s, kind="stable")
    act = act[order]
    s = s[order]
    del order
    group = group[act]  # ascending: each group's span lies past the last one's
    reach = np.minimum(np.maximum(v.end[act], t0), t1) - t0 + group * width
    np.maximum.accumulate(reach, out=reach)
    first = np.ones(len(group), bool)
    np.not_equal(group[1:], group[:-1], out=first[1:])
    prev_end = np.empty(len(s), np.int64)
    prev_end[1:] = reach[:-1]
    prev_end[first] = group[first] * width
    gap = np.subtract(s, prev_end, out=s)
    g = np.flatnonzero(gap > 0)
    gl, gg = gap[g], group[g]
    calls = launch[:, act[g]]
    del gap, s, act
    h, k, o = _split_gaps(gl, prev_end[g] - gg * width + t0, calls, kernel_wait_max_ns)
    del prev_end, calls
    host += sums(gg, h, n)
    kern += sums(gg, k, n)
    other += sums(gg, o, n)
    gaps += np.bincount(gg, minlength=n)
    last = np.append(first[1:], True) if len(group) else first
    tail[group[last]] = group[last] * width + (t1 - t0) - reach[last]


def _split_gaps(length: np.ndarray, start: np.ndarray, launch: np.ndarray, kernel_wait_max_ns: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(host-wait, kernel-wait, other) ns of each idle gap (``length`` ns from ``start``),
    by the launch call (``launch``: its start and end ns, rows 0 and 1; -1: not known) of
    the activity that ends it:

    * launched after the gap began: host-wait; but where the activity then started more
      than ``kernel_wait_max_ns`` after the call returned (queued behind an event wait, a
      copy or another stream), only the time until the call returned is the host's, the
      rest other (a kernel launched 40 µs into a 493 ms stall behind ``hipStreamWaitEvent``
      made the whole stall host-wait, and the finding advised a faster DataLoader);
    * launched before: kernel-wait for a gap of at most ``kernel_wait_max_ns``, else other;
    * no known launch: other."""
    call, returned = launch
    known = call >= 0
    late = known & (call >= start)
    queued = late & (start + length - returned > kernel_wait_max_ns)
    host = np.where(late, np.where(queued, returned - start, length), 0)
    kern = np.where(known & ~late & (length <= kernel_wait_max_ns), length, 0)
    return host, kern, length - host - kern


def _idle_rows_one_by_one(trace: Trace, v: DeviceView, launch: np.ndarray,
                          kernel_wait_max_ns: int, t0: int, t1: int) -> list[tuple]:
    """:func:`idle_time_breakdown`'s rows over ``[t0, t1)``, stream by stream."""
    out: list[tuple] = []
    for plane, track, sel, same in _groups(trace):
        if same:  # the device's one stream: its figures
            out.append((out[-1][0], ALL_STREAMS, track, *out[-1][3:]))
            continue
        idx = np.flatnonzero(sel & (v.end > t0) & (v.start < t1))
        s = np.minimum(np.maximum(v.start[idx], t0), t1)  # np.clip, without its wrapper
        e = np.minimum(np.maximum(v.end[idx], t0), t1)
        order = np.argsort(s, kind="stable")
        idx, s, e = idx[order], s[order], e[order]
        host = kern = other = 0
        gaps = 0
        if len(idx):
            reach = np.maximum.accumulate(e)
            prev_end = np.concatenate([[t0], reach[:-1]])
            gap = s - prev_end
            g = np.flatnonzero(gap > 0)
            gaps = len(g)
            h, k, o = _split_gaps(gap[g], prev_end[g], launch[:, idx[g]], kernel_wait_max_ns)
            host, kern, other = int(h.sum()), int(k.sum()), int(o.sum())
            tail = t1 - int(reach[-1])
            if tail > 0:
                other += tail
                gaps += 1
        else:
            other = t1 - t0
            gaps = 1 if t1 > t0 else 0
        idle = host + kern + other
        out.append((trace.planes[plane].name, trace.tracks[track].name if track >= 0 else ALL_STREAMS, track,
                    idle, host, kern, other, gaps))
    return out


def _hta_idle(trace: Trace, kernel_wait_max_ns: int) -> Table:
    """HTA 0.5's ``get_idle_time_breakdown`` (``hta_compat.idle_gaps``): one row per HTA
    stream, on the track of its first activity (named with its stream where several
    share it), the longest idle first, and per device ``(all streams)``: the
    sum of its streams (HTA charts them stacked). ``gaps``: the gaps between consecutive
    activities of a stream."""
    from .hta_compat import CONSECUTIVE_KERNEL_DELAY_NS, idle_gaps  # HTA's own computations: only for its window (--span device)

    delay = CONSECUTIVE_KERNEL_DELAY_NS if kernel_wait_max_ns == KERNEL_WAIT_MAX_NS else kernel_wait_max_ns
    by_plane: dict[int, list[tuple]] = {}
    gaps = idle_gaps(trace, delay)
    track_of = {sid: int(trace.events["track"][g.first_row]) for sid, g in gaps.items()}
    shared = Counter(track_of.values())
    for sid, g in gaps.items():
        track = track_of[sid]
        plane = int(trace.track_plane[track])
        # HTA's streams are its `stream` values: where several share a track (rocprofv3's
        # streams on 4 queues), each row says its own
        label = trace.tracks[track].name + (f" stream {sid}" if shared[track] > 1 else "")
        by_plane.setdefault(plane, []).append(
            (trace.planes[plane].name, label, track, g.host_wait + g.kernel_wait + g.other,
             g.host_wait, g.kernel_wait, g.other, g.gaps))
    out: list[tuple] = []
    for plane in sorted(by_plane):
        rows_ = sorted(by_plane[plane], key=lambda r: -r[3])  # the longest idle first
        out += rows_
        sums = [sum(r[i] for r in rows_) for i in range(3, 8)]
        out.append((rows_[0][0], ALL_STREAMS, -1, *sums))
    cols = _columns(out, ["plane", "stream", "track_id", "idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns",
                          "gaps"])
    for c in ("host_wait", "kernel_wait", "other"):
        cols[f"{c}_pct"] = ratio_pct(cols[f"{c}_ns"], cols["idle_ns"])
    return frame(cols)


def kernel_breakdown(trace: Trace, by_device: bool = False, window: WindowArg = None) -> Table:
    """Device activity (kernels, copies, fills) grouped by name.

    Columns: ``name``, ``module``, ``kind`` (compute / communication / memcpy / memset),
    [``plane`` when ``by_device``], ``count``, ``total_ns`` (sum of durations; an XLA op's
    ``device_duration_ps`` where the trace has it, as XProf counts it), ``mean_ns``,
    ``median_ns``, ``min_ns``, ``max_ns``, ``share_pct`` (of the summed duration of all
    device activity), ``devices`` (planes it ran on). Sorted by ``total_ns``. Summing
    ``total_ns`` over the compute and communication rows gives the busy kernel time
    (durations summed, so concurrent streams add up). With a ``window``, the activity
    launched in its steps. The launch configuration of each name's first launch:
    ``grid``, ``block``, ``registers``, ``shared_mem``, theoretical ``occupancy`` and
    ``occupancy_limit`` (``analyze/occupancy.py``; "" / -1 / NaN where unknown). A kernel
    of a known compiled module (an XLA GPU kernel, ``common.qualified_names``) is a row of
    its module, named ``module/kernel``, with ``module`` ("" for the other rows): XLA
    names ops uniquely within a module only.
    """
    rows, cls, plane, start, dur = _kernel_rows(trace, window)
    cols = ["name", "module", "kind", *(["plane"] if by_device else []), "count", "total_ns", "mean_ns", "median_ns",
            "min_ns", "max_ns", "share_pct", "devices", *LAUNCH_COLUMNS]
    if not len(rows):
        return empty_frame(cols, cols)
    name, labels, modules = qualified_names(trace, rows)
    base = (name << 8) | cls.astype(np.int64)
    on_plane = (base << 20) | plane.astype(np.int64)
    key = on_plane if by_device else base
    g = group_stats(key, dur)
    k = g["key"]
    # on how many devices each (name, class) ran: distinct (base, plane) pairs per base
    pairs = unique(on_plane)
    pb, pc = unique_counts(pairs >> 20)
    kb = (k >> 20) if by_device else k
    total = dur.sum()
    out = frame({
        "name": labels[kb >> 8], "module": modules[kb >> 8], "kind": CLASS_NAMES[kb & 0xFF],
        **({"plane": np.array([trace.planes[int(p)].name for p in (k & 0xFFFFF)], object)} if by_device else {}),
        "count": g["count"], "total_ns": g["total"], "mean_ns": g["mean"], "median_ns": g["median"],
        "min_ns": g["min"], "max_ns": g["max"],
        "share_pct": 100.0 * g["total"] / total if total else np.zeros(len(k)),
        "devices": pc[np.searchsorted(pb, kb)],
        # (each name's earliest by time: the groups sorted by key then start, as group_stats' by key then
        # duration, which gave the shortest launch's, and a time-ordered export another's)
        **launch_config(trace, rows[lexsort((start, key))[g["starts"]]]),
    }, order=order_desc(g["total"]))
    return out


def _kernel_rows(trace: Trace, window: WindowArg) -> tuple[np.ndarray, ...]:
    """The device view's counted rows (event row, class, plane, start, duration); under
    HTA's window also the rows HTA's kernel table lists that the device view leaves out,
    as synchronisation rather than work: ``cuda_sync`` records on a stream that HTA types
    COMPUTATION (``Stream Wait Event``; not ``Stream Sync``, its type OTHER), MTIA's
    ``event_record`` / ``event_wait``, with HTA's rounded times."""
    v = device_view(trace, window)
    c = v.counted
    rows, cls, plane, start, dur = v.rows[c], v.cls[c], v.plane[c], v.start[c], v.dur[c]
    win = selection(view(trace, window))
    if win is None or not win.hta:
        return rows, cls, plane, start, dur
    from .hta_compat import hta_activity  # HTA's own computations: only for its window (--window hta)

    act = hta_activity(trace)
    more = ~np.isin(act.rows, v.rows) & act.compute  # (the others, `.*Sync`, are HTA's type OTHER: not listed)
    if not more.any():
        return rows, cls, plane, start, dur
    extra = act.rows[more]
    order = np.argsort(np.concatenate([rows, extra]), kind="stable")
    parts = ((rows, extra), (cls, activity_class(trace, extra)),
             (plane, trace.track_plane[trace.events["track"][extra]]), (start, act.start[more]),
             (dur, (act.end - act.start)[more]))
    return tuple(np.concatenate([a, b.astype(a.dtype)])[order] for a, b in parts)


def comm_comp_overlap(trace: Trace, window: WindowArg = None) -> Table:
    """How much communication ran while compute ran, per device (inside the analysed span).

    Columns: ``plane``, ``communication_ns`` (time covered by communication kernels),
    ``compute_ns`` (time covered by compute kernels), ``overlap_ns`` (both at once),
    ``overlap_pct`` (share of communication time hidden under compute; NaN without
    communication). ``window="hta"``: HTA 0.5's ``get_comm_comp_overlap``: the activity
    HTA counts (``device_view``'s counted rows under that window), wherever it runs.
    """
    v = device_view(trace, window)
    planes = unique(v.plane)
    at = np.searchsorted(planes, v.plane).astype(np.int64) * 3
    cm, cp = v.cls == COMMUNICATION, v.cls == COMPUTE
    # per device, three groups: communication, compute, and either (their union's length
    # gives the overlap: |A| + |B| - |A u B|, as intersect_len has it); each kind of group
    # apart (they are disjoint), so that one copy of the activities is held, not three
    ws, we = analysed_stretches(trace, window)  # (one, or a schedule's few cycles: what is between them is left out)
    win = selection(view(trace, window))
    if win is not None and win.hta and v.counted.any():  # HTA's rows, from the first one's start to the last's end
        cm, cp = cm & v.counted, cp & v.counted
        ws, we = np.array([v.start[v.counted].min()]), np.array([v.end[v.counted].max()])
    total = np.zeros(3 * len(planes), np.int64)
    for k, sel in enumerate((cm, cp, cm | cp)):
        group, start, end = at[sel] + k, v.start[sel], v.end[sel]
        for a, b in zip(ws.tolist(), we.tolist()):
            total += covered_lengths(group, start, end, 3 * len(planes), a, b)
        del group, start, end
    lengths = total.reshape(-1, 3).tolist()
    out = [(trace.planes[int(plane)].name, comm, comp, comm + comp - either)
           for plane, (comm, comp, either) in zip(planes.tolist(), lengths)]
    cols = {c: np.array([r[i] for r in out], object if i == 0 else np.int64)
            for i, c in enumerate(["plane", "communication_ns", "compute_ns", "overlap_ns"])}
    cols["overlap_pct"] = ratio_pct(cols["overlap_ns"], cols["communication_ns"])
    return frame(cols)


def busy_segments(trace: Trace, plane: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Union of device activity (one device, or all) as disjoint sorted segments."""
    v = device_view(trace)
    sel = np.ones(len(v.rows), bool) if plane is None else v.plane == plane
    return union(v.start[sel], v.end[sel])


def busy_within(trace: Trace, a: np.ndarray, b: np.ndarray, plane: int | None = None) -> np.ndarray:
    """Device busy time inside each window [a, b)."""
    s, e = busy_segments(trace, plane)
    return covered(s, e, a, b)
