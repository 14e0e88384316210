"""Queued stalls: a device idle while work already launched to it waits to start.

The idle time breakdown (``breakdown.idle_time_breakdown``) calls such time "other": the
activity that ends the gap was launched, and its launch call had returned, more than
``KERNEL_WAIT_MAX_NS`` before it started. The host was not late and no launch latency
explains it; the device's queue held the work back: a stream waiting on an event that
another stream, device, thread or process records (``cudaStreamWaitEvent``), a copy or a
host callback ahead of it, or commands not yet submitted (an OpenCL queue not flushed).
A serving engine's decode step on an MI300X (TraceLens' SGLang sample) launched a kernel
40 µs after ``hipStreamWaitEvent`` that started 463 ms later, while its host thread waited
in a blocking ``hipMemcpyWithStream``: the device idle 98% of the trace, none of it the
host's doing, and the only finding said the kernels were short.

Per device (every stream together: the device idle), over the analysed stretches, each
gap between busy periods counts from the later of its start and the return of the
launch call of the activity that ends it; a gap whose part so counted is over
``KERNEL_WAIT_MAX_NS`` is a stall of that part. Activity without a known launch is never
a stall (a trace without launch calls, a TPU's XLA ops, has none), nor is the gap before
a stretch's first activity: the device may have been busy with work launched before the
recording began (vLLM's decode on an MI355X, TraceLens' sample: nine copies queued 7.8 ms
from the trace's first host event, then run back to back).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..derive.memo import memo
from ..trace.core import Trace
from ..trace.vocabulary import STREAM_WAIT_CALLS
from .advice import suggestion
from .breakdown import KERNEL_WAIT_MAX_NS, launch_calls
from .common import analysed_stretches, device_view, stretches_ns
from .finding import Finding
from ..trace.sorting import unique

STALL_SHARE = 10.0  # queued stalls, share of the device's analysed span
STALL_HIGH = 30.0  # ... high severity from this share
_TOP = 5  # stalls listed per finding
#: host calls that make a queue wait for an event: a stream's (CUDA, HIP), a command's wait
#: list (OpenCL's barrier and marker), named before the stalled work's launch
_WAIT_CALL = re.compile("|".join([*map(re.escape, STREAM_WAIT_CALLS), "clEnqueueBarrier", "clEnqueueWaitForEvents",
                                  "clEnqueueMarkerWithWaitList"]))


class Stalls:
    """Every queued stall: its device (plane id), the activity ending it (an index into
    ``device_view``'s rows), when it began (ns: the later of the gap's start and the
    launch call's return) and how long it lasted."""

    __slots__ = ("plane", "activity", "start", "stall")

    def __init__(self, plane: np.ndarray, activity: np.ndarray, start: np.ndarray, stall: np.ndarray) -> None:
        self.plane, self.activity, self.start, self.stall = plane, activity, start, stall


def queued_stalls(trace: Trace) -> Stalls:
    """The queued stalls of ``trace`` (a window's view: over its analysed stretches)."""
    return memo(trace, "queued_stalls", _stalls)


def _stalls(trace: Trace) -> Stalls:
    v = device_view(trace)
    returned = launch_calls(trace, v)[1]
    parts: list[tuple[np.ndarray, ...]] = []
    for t0, t1 in zip(*(a.tolist() for a in analysed_stretches(trace))):
        for p in unique(v.plane).tolist():
            act = np.flatnonzero((v.plane == p) & (v.end > t0) & (v.start < t1))
            if not len(act):
                continue
            s = np.maximum(v.start[act], t0)
            order = np.argsort(s, kind="stable")
            act, s = act[order], s[order]
            reach = np.maximum.accumulate(np.minimum(v.end[act], t1))
            gap_start = np.concatenate([[t0], reach[:-1]])
            ready = returned[act]
            begin = np.maximum(gap_start, ready)
            stalled = np.flatnonzero((ready >= 0) & (s - begin > KERNEL_WAIT_MAX_NS))
            stalled = stalled[stalled > 0]  # (before the first: maybe work launched before the recording)
            parts.append((np.full(len(stalled), p, np.int64), act[stalled], begin[stalled],
                          (s - begin)[stalled]))
    if not parts:
        return Stalls(*(np.zeros(0, np.int64) for _ in range(4)))
    return Stalls(*(np.concatenate(c) for c in zip(*parts)))


def stall_pct(trace: Trace) -> dict[str, float]:
    """Each device's queued stalls as a share of its analysed span (by plane name; the
    devices without any left out)."""
    st = queued_stalls(trace)
    span = max(stretches_ns(trace), 1)
    out: dict[str, float] = {}
    for p in unique(st.plane).tolist():
        name = trace.planes[p].name
        out[name] = out.get(name, 0.0) + 100.0 * float(st.stall[st.plane == p].sum()) / span
    return out


def queued_stall_findings(trace: Trace, t: Callable[[str], Any]) -> list[Finding]:
    """A device idle at least ``STALL_SHARE`` of its analysed span with work queued."""
    st = queued_stalls(trace)
    if not len(st.stall):
        return []
    span = max(stretches_ns(trace), 1)
    out = []
    for p in unique(st.plane).tolist():
        name = trace.planes[p].name
        mine = np.flatnonzero(st.plane == p)
        total = int(st.stall[mine].sum())
        share = 100.0 * total / span
        if share < STALL_SHARE:
            continue
        top = mine[np.argsort(-st.stall[mine], kind="stable")[:_TOP]]
        out.append(Finding(
            "queued_stall", f"{name} idle {share:.0f}% of the time with launched work waiting to start",
            "high" if share >= STALL_HIGH else "medium", name,
            {"stall_ns": total, "share_pct": round(share, 2), "stalls": len(mine),
             "longest_ns": int(st.stall[mine].max()), "span_ns": int(span)},
            _events(trace, st, top), suggestion(trace, "queued_stall")))
    return out


def _events(trace: Trace, st: Stalls, top: np.ndarray) -> list[dict[str, Any]]:
    """The longest stalls: the activity that ended each, its stream, the stall, what its
    launching thread was doing meanwhile (the innermost event over the stall's middle that
    lasted at least half of it) and the queue wait it was launched behind, where named."""
    v, ev, names = device_view(trace), trace.events, trace.strings
    out = []
    for i in top.tolist():
        a, begin, stall = int(st.activity[i]), int(st.start[i]), int(st.stall[i])
        rec: dict[str, Any] = {"name": names[int(ev["name"][v.rows[a]])],
                               "stream": trace.tracks[int(v.track[a])].name, "stall_ns": stall}
        call = int(v.launch[a])
        thread = ev["track"] == ev["track"][call]
        mid = begin + stall // 2
        over = np.flatnonzero(thread & (ev["start_ns"] <= mid) & (ev["start_ns"] + ev["dur_ns"] > mid)
                              & (2 * ev["dur_ns"] >= stall))
        if len(over):
            inner = int(over[np.argmin(ev["dur_ns"][over])])
            rec["host_meanwhile"] = names[int(ev["name"][inner])]
        wait = _wait_before(trace, thread, call, v, a)
        if wait is not None:
            rec["launched_after"] = wait
        out.append(rec)
    return out


def _wait_before(trace: Trace, thread: np.ndarray, call: int, v: Any, a: int) -> str | None:
    """The last queue-wait call (``_WAIT_CALL``) on the launching thread between the launch
    of the previous activity of the activity's stream and its own launch: it sits in front
    of the activity in that queue (its stream is not recorded: a wait for another stream of
    the thread's may be named)."""
    ev = trace.events
    is_wait = memo(trace, "queue_wait_names", _wait_names)
    same = np.flatnonzero((v.track == v.track[a]) & (v.start < v.start[a]) & (v.launch >= 0))
    since = int(ev["start_ns"][v.launch[same[np.argmax(v.start[same])]]]) if len(same) else np.iinfo(np.int64).min
    waits = np.flatnonzero(thread & is_wait[ev["name"]] & (ev["start_ns"] >= since)
                           & (ev["start_ns"] < ev["start_ns"][call]))
    if not len(waits):
        return None
    return str(trace.strings[int(ev["name"][waits[np.argmax(ev["start_ns"][waits])]])])


def _wait_names(trace: Trace) -> np.ndarray:
    """Bool per string id: the string names a queue-wait call (``_WAIT_CALL``)."""
    search = _WAIT_CALL.search
    return np.fromiter((search(s) is not None for s in trace.strings), bool, len(trace.strings))
