"""Sections in the dependency graph (``analyze/depgraph.py``): polyprof's sections and
NVTX ranges are host calls of the graph (``depgraph_context.sections``), whose own time
(before, between and after their calls) is their thread's, but where the trace shows
that the thread waited in it (:func:`section_waits`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..trace.core import Trace
from ..trace.sorting import last_at_or_before, member, unique, unique_rows
from .depgraph_context import Context
from .thread_links import idle_time, joined, section_wait_edges
from .xla_links import RUN_STAT


class Sections(NamedTuple):
    """A window's sections, for :func:`section_waits`: per host call of the graph, whether
    it is a section (``is_section``), the start of the buffer wait it returns from
    (``resumes``; int64 max for none: ``xla_links.buffer_waits``), its process (``plane``),
    the XLA program run it is a call of or dispatched (``run``: ``xla_links.RUN_STAT``,
    -1 for none), whether it dispatched it (``dispatch``) or is one of its ops or waits
    (``member``); per track id, its thread's first start and last end
    (``Context.thread_life``) and process (``track_plane``)."""

    is_section: np.ndarray
    resumes: np.ndarray
    plane: np.ndarray
    run: np.ndarray
    dispatch: np.ndarray
    member: np.ndarray
    first: np.ndarray
    last: np.ndarray
    track_plane: np.ndarray


def sections_of(trace: Trace, ctx: Context, host: np.ndarray) -> Sections:
    """The :class:`Sections` of a window's host calls ``host``."""
    resumes = np.full(len(host), np.iinfo(np.int64).max, np.int64)
    pos, since = ctx.buffer_waits_of(host)
    resumes[pos] = since
    plane = np.asarray(trace.track_plane, np.int64)
    first, last = ctx.thread_life
    names = ctx.names[host]
    dispatch = ctx.xla_dispatch[names]
    ops = ctx.xla_op[host] | ctx.xla_wait[names]
    run = np.full(len(host), -1, np.int64)
    if bool(dispatch.any()) and bool(ops.any()):  # (the runs decoded only where XLA dispatches)
        run = ctx.launched_run(host, ctx.stat(RUN_STAT)[host])
    return Sections(ctx.section[host], resumes, plane[ctx.track[host]], run, dispatch, ops, first, last, plane)


def dispatched(sec: Sections, thread: np.ndarray, node_time: np.ndarray, th: np.ndarray, ta: np.ndarray,
                tb: np.ndarray, since: np.ndarray) -> np.ndarray:
    """Per span ``[ta, tb]`` of a section's own time on thread ``th`` (its section begun at
    ``since``; ``thread``: per host call), whether the thread's last dispatch of an XLA program before it, in the
    section, launched a run whose last op or wait ended in it: the thread dispatched a
    program and blocked until it was ready (``block_until_ready``, which records no wait
    of its own on several devices)."""
    d = np.flatnonzero(sec.dispatch & (sec.run != -1))  # (a run id may be negative)
    m = np.flatnonzero(sec.member & (sec.run != -1))
    out = np.zeros(len(ta), bool)
    if not len(d) or not len(m) or not len(ta):
        return out
    last = last_at_or_before(thread[d], node_time[2 * d + 1], d, th, ta)
    ok = last >= 0
    ok[ok] = node_time[2 * last[ok]] >= since[ok]
    q = np.flatnonzero(ok)
    if not len(q):
        return out
    _, _, code = unique_rows(np.r_[sec.plane[m], sec.plane[last[q]]], np.r_[sec.run[m], sec.run[last[q]]])
    ends = np.full(int(code.max()) + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ends, code[:len(m)], node_time[2 * m + 1])  # each run's last end
    end = ends[code[len(m):]]
    out[q] = (end > ta[q]) & (end <= tb[q])
    return out


def section_waits(sec: Sections, thread: np.ndarray, parent: np.ndarray, waiting: np.ndarray,
                  node_time: np.ndarray, a: np.ndarray, b: np.ndarray, weight: np.ndarray, own: np.ndarray,
                  owner: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """A section's own time (its walk's steps ``a`` -> ``b`` between its calls, ``own``:
    their positions in ``weight``; ``owner``: the section) is its thread's, with its whole
    weight, but where the trace shows that the thread waited in it:

    * a return from a buffer wait (``block_until_ready``: ``xla_links.buffer_waits``) ends
      it, the wait begun by its start, or the XLA program the section dispatched last
      before it ended its run in it (:func:`dispatched`): the thread waited for whatever
      ran meanwhile;
    * a thread of its process lived in it (its first event started in it, its last
      ended in it): the section started and joined it (``thread_links.joined``), and
      waited for that thread's work.

    There it weighs what of it the work it waited for did not cover (``idle_time``: the
    worker's start-up, its pauses), and that work leads back to it
    (``section_wait_edges``, its edges weighing the section's idle time between their
    nodes). A section holding no such wait (a sleep, Python's own work) keeps its time
    even where a kernel or another thread ran meanwhile: that work has slack. Sets
    ``weight`` where it is cut; returns the wait edges' columns (source, destination,
    weight, owner, insertion order), each part's, for ``depgraph`` to add (type
    ``sync_dependency``)."""
    parts: list[tuple[np.ndarray, ...]] = []
    n_h = len(sec.is_section)
    n_g = len(node_time) // 2
    # (the graph's other events: host calls but sections and waiting calls, then devices)
    busy = np.flatnonzero(~sec.is_section & ~waiting)  # (a waiting call is no work: what it waits for is)
    b_th = np.r_[thread[busy], np.full(n_g - n_h, -1, np.int64)]
    b_s = np.r_[node_time[2 * busy], node_time[2 * n_h::2]]
    b_e = np.r_[node_time[2 * busy + 1], node_time[2 * n_h + 1::2]]
    th, ta, tb = thread[a >> 1], node_time[a], node_time[b]
    resumed = ((b & 1) == 0) & (sec.resumes[b >> 1] <= ta)  # (ended by a buffer wait's return)
    resumed |= dispatched(sec, thread, node_time, th, ta, tb, node_time[2 * owner])
    # a recorded wait, or an XLA program's: every other thread's and device's work
    idle = idle_time(th[resumed], ta[resumed], tb[resumed], b_th, b_s, b_e)
    cut = np.flatnonzero(resumed)[idle < weight[own[resumed]]]
    weight[own[resumed]] = np.minimum(weight[own[resumed]], idle)
    if len(cut):
        top_busy = busy[(parent[busy] < 0) | sec.is_section[np.maximum(parent[busy], 0)]]
        g_busy = np.r_[top_busy, np.arange(n_h, n_g)]
        k = np.r_[np.searchsorted(busy, top_busy), np.arange(len(busy), len(b_th))]
        s_a, s_b, span = section_wait_edges(th[cut], a[cut], b[cut], node_time, b_th[k], 2 * g_busy)
        s_w = idle_time(th[cut[span]], node_time[s_a], node_time[s_b], b_th, b_s, b_e)
        parts.append((s_a, s_b, s_w, owner[cut[span]],  # (the section's own time, before and after)
                      10.0 * (len(node_time) + 1) + 6 * len(node_time) + np.arange(len(s_a), dtype=np.float64)))
    # a joined thread: its top-level calls (its sections and waits too: it was busy there)
    cand = unique(thread)
    rest = np.flatnonzero(~resumed)
    span, who = joined(th[rest], ta[rest], tb[rest], sec.plane[a[rest] >> 1], cand, sec.first[cand],
                       sec.last[cand], sec.track_plane[cand])
    if not len(span):
        return parts
    span = rest[span]
    work = np.flatnonzero((parent < 0) & member(thread, who))
    w_key = span[np.searchsorted(who, thread[work])]  # (who: ascending, from joined) each call's span
    w_s, w_e = node_time[2 * work], node_time[2 * work + 1]
    mine = unique(span)
    idle = idle_time(th[mine], ta[mine], tb[mine], thread[work], w_s, w_e, key=mine, busy_key=w_key)
    weight[own[mine]] = np.minimum(weight[own[mine]], idle)
    s_a, s_b, at = section_wait_edges(th[mine], a[mine], b[mine], node_time, thread[work], 2 * work, key=mine,
                                      busy_key=w_key)
    s_w = idle_time(th[mine[at]], node_time[s_a], node_time[s_b], thread[work], w_s, w_e, key=mine[at],
                    busy_key=w_key)
    parts.append((s_a, s_b, s_w, owner[mine[at]],
                  10.0 * (len(node_time) + 1) + 6.5 * len(node_time) + np.arange(len(s_a), dtype=np.float64)))
    return parts
