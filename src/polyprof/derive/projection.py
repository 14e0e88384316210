"""Section projection: the device time a host span caused.

A device activity belongs to a host span (a section, a framework op, a step) when the
call that launched it started inside that span on the same thread; the projected
span runs from the first to the last such device activity (what Nsight calls NVTX
GPU projection). A device activity belongs to the *innermost* section around its
launch; a section's projection covers its nested sections' work too.

Sections also own the work handed to other threads: PyTorch runs backward on its
autograd thread, so the kernels of ``## backward ##`` (opened on the main thread) are
launched elsewhere. A launch with no section open on its own thread counts as launched
on the thread of the section open at that moment on another thread of the same process
(the one started last when several are). A launch inside a section of its own thread
stays there, and framework ops never take work from other threads.
"""

from __future__ import annotations

import re

import numpy as np

from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import lexsort, member, unique
from ..trace.vocabulary import TORCH_METADATA_MARKS
from . import cache
from .correlate import Correlation
from .intervals import RangeMinMax, TimeKeys, _max, innermost


class Projection:
    """Per host span: device activities caused, their summed duration, first start, last
    end. (A plain class: a dataclass's generated methods were compiled at every start.)"""

    def __init__(self, count: np.ndarray, busy_ns: np.ndarray, first_ns: np.ndarray, last_ns: np.ndarray):
        self.count = count  # int64
        self.busy_ns = busy_ns  # int64, sum of the caused activities' durations
        self.first_ns = first_ns  # int64, start of the first caused activity (valid where count > 0)
        self.last_ns = last_ns  # int64, end of the last caused activity

    @property
    def span_ns(self) -> np.ndarray:
        return np.where(self.count > 0, self.last_ns - self.first_ns, 0)


class LaunchIndex:
    """Matched (launch, device activity) pairs sorted by (launch thread, launch start),
    so every host span maps to one contiguous range of them."""

    def __init__(self, trace: Trace, corr: Correlation, plane: int | None = None,
                 sections: np.ndarray | None = None):
        """``sections``: the section rows the index will be asked about; launches of
        threads without sections are then handed to them (see the module docstring)."""
        ev = trace.events
        has = corr.launch >= 0
        lrow, drow = corr.launch[has], corr.device_rows[has]
        if plane is not None:
            keep = trace.track_plane[ev["track"][drow]] == plane
            lrow, drow = lrow[keep], drow[keep]
        self.trace = trace
        self.l_track = cache.threads(trace)[ev["track"][lrow]]
        self.l_start = ev["start_ns"][lrow]
        if sections is not None and len(sections):
            self.l_track = handed_off(trace, sections, self.l_track, self.l_start)
        order = lexsort((self.l_start, self.l_track))
        self.l_track, self.l_start = self.l_track[order], self.l_start[order]
        self.launch_rows, self.device_rows = lrow[order], drow[order]
        del has, lrow, drow
        self.d_start = ev["start_ns"][self.device_rows]
        d_dur = ev["dur_ns"][self.device_rows]
        self.d_end = self.d_start + d_dur
        self._cum = np.concatenate([[0], np.cumsum(d_dur)])
        del d_dur, order  # (not kept: ``d_dur`` is d_end - d_start)
        self._rmq = RangeMinMax(self.d_start, self.d_end) if len(self.l_start) else None

    @property
    def d_dur(self) -> np.ndarray:
        return self.d_end - self.d_start

    def __len__(self) -> int:
        return len(self.launch_rows)

    def ranges(self, track: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[lo, hi) of pairs whose launch started in [t0, t1) on ``track``."""
        track = np.asarray(track, np.int64)
        if not len(self):
            z = np.zeros(len(track), np.int64)
            return z, z
        t0 = np.asarray(t0, np.int64)
        t1 = np.asarray(t1, np.int64)
        key = TimeKeys([self.l_start, t0, t1], max(_max(self.l_track), _max(track)))
        kl = key(self.l_track, self.l_start)
        lo = np.searchsorted(kl, key(track, t0), side="left")
        hi = np.searchsorted(kl, key(track, t1), side="left")
        return lo, np.maximum(hi, lo)

    def project(self, track: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> Projection:
        lo, hi = self.ranges(track, t0, t1)
        if self._rmq is None:
            z = np.zeros(len(lo), np.int64)
            return Projection(hi - lo, z, z.copy(), z.copy())
        _, first, last = self._rmq.query(lo, hi)  # (first: its temporaries are the summary's peak)
        busy = self._cum[hi] - self._cum[lo]
        return Projection(hi - lo, busy, first, last)


def handed_off(trace: Trace, sections: np.ndarray, l_thread: np.ndarray, l_start: np.ndarray) -> np.ndarray:
    """Launch threads, where no section is open on the launch's own thread replaced by
    the thread of the section open at the launch on another thread of the same process
    (the latest started one, the lowest thread on a tie; unchanged where none is open)."""
    ev = trace.events
    th = cache.threads(trace)
    s_thread = th[ev["track"][sections]]
    s0 = ev["start_ns"][sections]
    s1 = s0 + ev["dur_ns"][sections]
    q = np.flatnonzero(innermost(s_thread, s0, s1, l_thread, l_start) < 0)
    if not len(q):
        return l_thread
    owners = unique(s_thread)
    out = l_thread.copy()
    # every (launch, thread with sections in the launch's process) pair asked at once:
    # one sort of the sections instead of one per thread; in chunks of launches to bound
    # the pairs
    o_plane = trace.track_plane[owners]
    step = max(1, _PAIRS // len(owners))
    for a in range(0, len(q), step):
        qa = q[a:a + step]
        qi, oi = np.nonzero(trace.track_plane[l_thread[qa]][:, None] == o_plane[None, :])
        hit = innermost(s_thread, s0, s1, owners[oi], l_start[qa[qi]])
        ok = hit >= 0
        qi, oi, start = qi[ok], oi[ok], s0[hit[ok]]
        if not len(qi):
            continue
        best = lexsort((oi, -start, qi))  # per launch: latest start first, then lowest thread
        first = best[np.r_[True, qi[best][1:] != qi[best][:-1]]]
        out[qa[qi[first]]] = owners[oi[first]]
    return out


#: at most this many (launch, thread) pairs per query in :func:`handed_off`
_PAIRS = 1 << 20


def project_rows(trace: Trace, corr: Correlation, rows: np.ndarray, plane: int | None = None) -> Projection:
    """Projection of the host spans ``rows`` (onto one device plane, or all devices)."""
    ev = trace.events
    idx = LaunchIndex(trace, corr, plane)
    st = ev["start_ns"][rows]
    return idx.project(cache.threads(trace)[ev["track"][rows]], st, st + ev["dur_ns"][rows])


def section_rows(trace: Trace) -> np.ndarray:
    """Host sections: annotations (user_annotation, polyprof sections) that are not steps,
    nor torch.compile's metadata marks (``vocabulary.TORCH_METADATA_MARKS``)."""
    rows = trace.rows_of_kind(Kind.ANNOTATION)
    if not len(rows):
        return rows
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    rows = rows[host[trace.track_plane[trace.events["track"][rows]]]]
    names = trace.events["name"][rows]
    marks = [i for i in unique(names).tolist() if "_data: " in trace.strings[i]
             and re.match(TORCH_METADATA_MARKS, trace.strings[i])]
    if marks:
        rows = rows[~member(names, np.array(marks, names.dtype))]
    # np.setdiff1d (sorted distinct rows not steps), as a mask: its first call pays a set-up
    step = np.zeros(trace.n_events, bool)
    step[cache.steps(trace).rows] = True
    return np.sort(rows[~step[rows]])


def innermost_section(trace: Trace, corr: Correlation) -> np.ndarray:
    """The innermost section around each device activity's launch (row, or -1)."""
    ev = trace.events
    secs = section_rows(trace)
    out = np.full(len(corr.device_rows), -1, np.int64)
    has = np.flatnonzero(corr.launch >= 0)
    if not len(secs) or not len(has):
        return out
    lrow = corr.launch[has]
    th = cache.threads(trace)
    l_start = ev["start_ns"][lrow]
    hit = innermost(th[ev["track"][secs]], ev["start_ns"][secs], ev["start_ns"][secs] + ev["dur_ns"][secs],
                    handed_off(trace, secs, th[ev["track"][lrow]], l_start), l_start)
    out[has] = np.where(hit >= 0, secs[np.maximum(hit, 0)], -1)
    return out
