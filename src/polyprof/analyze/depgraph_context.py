"""What the dependency graph (``depgraph.build``) needs of the whole trace, computed once
for all its windows: the :class:`Context` of a trace (its columns, the candidate rows of
each kind sorted by time, the correlation lookups, the streams' queues and the links
found between threads), made once per trace by :func:`context`."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..derive import cache
from ..errors import PolyprofError
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.keys import CAT_SECTION
from ..trace.sorting import last_at_or_before, lexsort, member, row_of_key, unique
from ..trace.vocabulary import CONTEXT_SYNC, EVENT_SYNC, STREAM_SYNC, STREAM_WAIT_EVENT, WAITING_CALLS
from .common import COMMUNICATION, device_view, names_in
from .inputs import cpu_comm_rows
from .thread_links import backward_callers, comm_callers
from .stream_queues import queue_levels
from .wait_links import device_wait_links, int_stat as _int_stat, wait_links
from .xla_links import RUN_STAT, buffer_waits, launched_runs, xla_dispatches, xla_host_ops, xla_waits

if TYPE_CHECKING:
    from ..derive.correlate import Correlation
    from ..formats.xspace.xla_deps import OpDependencies


class Context:
    """What :func:`depgraph.build` needs of the whole trace, computed once for all its windows (the
    steps): the columns, the candidate rows of each kind sorted by the time that puts them
    in a window, the correlation lookups and the streams' queues. A window then costs its
    own rows, not the trace's."""

    def __init__(self, trace: Trace) -> None:
        ev = trace.events
        self.start = start = np.asarray(ev["start_ns"], np.int64)
        dur = np.asarray(ev["dur_ns"], np.int64)
        self.end = start + dur
        self.track = track = np.asarray(ev["track"], np.int64)
        self.names = names = np.asarray(ev["name"], np.int64)
        kinds = trace.kinds
        host_plane = np.array([p.kind == "host" for p in trace.planes], bool)
        derived = np.array([t.kind == "derived" for t in trace.tracks], bool)
        self.on_host = on_host = (host_plane[trace.track_plane[track]] & ~derived[track] if trace.n_events
                                  else np.zeros(0, bool))
        timed = dur > 0
        # host ops and runtime calls, by start
        host = on_host & timed & member(kinds, np.array([Kind.CPU_OP, Kind.RUNTIME], np.int64))
        # polyprof's own sections (``polyprof.section``) and NVTX ranges (the user's sections
        # in an Nsight or nvprof export): their time in no op is their thread's own
        # (depgraph); a Kineto trace's annotations stay out, as in HTA
        self.section = section = sections(trace, on_host & timed)
        host |= section
        # XLA's CPU runtime's ops (kind KERNEL on host threads: xla_links), then the CPU
        # backends' collectives (gloo's work ranges on its threads: annotations)
        self.xla_op = xla_op = xla_host_ops(trace, on_host, timed)
        host |= xla_op
        # OS runtime calls (Nsight Systems' OSRT_API: ``poll``, ``pthread_mutex_lock``,
        # ``read``) hold their thread as an op does; one inside another host call is that
        # call's own work (a ``cudaMalloc``'s ``ioctl``, a ``cudaStreamSynchronize``'s wait),
        # and those of a thread with none of the program's work are left out while another
        # thread has some (the CUDA driver's ``cuda-EvtHandlr`` polling: os_calls)
        comm = cpu_comm_rows(trace)
        work = host | ranges(trace, on_host & timed)
        work[comm[on_host[comm]]] = True
        self.os_call = os_call = os_calls(trace, on_host & timed & ~host, host, start, self.end, track, work)
        host |= os_call
        self.host_comm = comm = comm[on_host[comm] & ~host[comm]] if len(comm) else comm
        host[comm] = True
        host = np.flatnonzero(host)
        self.host, self.host_t = _by_time(host, start[host])
        self.comm_caller = comm_callers(trace, comm, start, track, names, on_host, kinds) if len(comm) else None
        # device activity with a timed launch, by its launch's start
        self.corr = corr = cache.correlation(trace)
        d_launch = corr.launch
        ok = d_launch >= 0
        ok[ok] = timed[d_launch[ok]]
        pos = np.flatnonzero(ok)
        self.dev_pos, self.dev_t = _by_time(pos, start[d_launch[pos]])
        # synchronisation records on devices, tied to their host call by correlation id
        self.cid = cid = _int_stat(trace, "correlation_id")
        sync_name = names_in(trace, (CONTEXT_SYNC, STREAM_SYNC, EVENT_SYNC, STREAM_WAIT_EVENT))
        sy = np.flatnonzero(~on_host & sync_name[names]) if trace.n_events else np.zeros(0, np.int64)
        runtime = np.flatnonzero(on_host & (kinds == Kind.RUNTIME) & (cid >= 0))
        sy_call = row_of_key(cid[runtime], runtime, cid[sy])
        keep = sy_call >= 0
        self.sy, self.sy_call = sy[keep], sy_call[keep]
        self.sy_always = names[self.sy] == trace.string_id(STREAM_WAIT_EVENT)
        self.sy_timed = timed[self.sy_call]
        self.xla_wait = xla_waits(trace, xla_op)
        self.xla_dispatch, self.xla_dispatch_device = xla_dispatches(trace, xla_op)  # (per string id, as xla_wait)
        self.waits = names_in(trace, WAITING_CALLS) | self.xla_wait
        self.wait_links = wait_links(trace, on_host, start, self.end, track, names, cid, corr)  # (OpenCL's)
        self.queues = queue_levels(trace, corr, names, start, track)
        self._stats: dict[str, np.ndarray] = {}
        self._rows: dict[tuple[str, ...], np.ndarray] = {}
        self._communication: np.ndarray | None = None
        self._graph_index: np.ndarray | None = None
        self._backward: dict[int, int] | None = None
        self._xla_deps: OpDependencies | None = None
        self._launched: tuple[np.ndarray, np.ndarray] | None = None
        self._buffer_waits: tuple[np.ndarray, np.ndarray] | None = None
        self._life: tuple[np.ndarray, np.ndarray] | None = None
        self._dev_waits: tuple[np.ndarray, np.ndarray] | None = None
        self._idle_launch: np.ndarray | None = None
        self._trace = weakref.ref(trace)  # (kept in the trace's memo: no cycle back through it)

    @property
    def trace(self) -> Trace:
        """The trace this context is of (while it lives: the context is in its memo)."""
        trace = self._trace()
        if trace is None:
            raise PolyprofError("a critical-path context outlived its trace")
        return trace

    @property
    def graph_index(self) -> np.ndarray:
        """Per event row, -1: the map :func:`depgraph.build` sets for one window's rows and clears
        after (one array for every window, not one fill of the trace's length each)."""
        if self._graph_index is None:
            self._graph_index = np.full(self.trace.n_events, -1, np.int64)
        return self._graph_index

    @property
    def backward_callers(self) -> dict[int, int]:
        """Per autograd engine thread (``cache.threads`` ids), the thread that calls the
        backward pass it runs (:func:`backward_callers`), found once."""
        if self._backward is None:
            self._backward = backward_callers(self.trace, self.on_host, self.track, self.names)
        return self._backward

    @property
    def xla_deps(self) -> OpDependencies:
        """The data dependencies of XLA's CPU runtime's ops, from the file's HLO, found once."""
        if self._xla_deps is None:
            from ..formats.xspace.xla_deps import op_dependencies  # the HLO decoder: only a trace with XLA CPU ops

            self._xla_deps = op_dependencies(self.trace, self.on_host)
        return self._xla_deps

    def launched_run(self, host: np.ndarray, run: np.ndarray) -> np.ndarray:
        """``run`` (the :data:`RUN_STAT` of the host calls ``host``) with each dispatch of
        one device that names no run given the run it launched
        (``xla_links.launched_runs``, found once for the trace)."""
        if self._launched is None:
            single = self.xla_dispatch & (self.xla_dispatch_device < 0)  # (not a pool thread's launch on one of several)
            self._launched = launched_runs(self.trace, self.on_host, self.start, self.end, single,
                                           self.xla_op | self.xla_wait[self.names], self.stat(RUN_STAT))
        rows, runs = self._launched
        if not len(rows) or not len(host):
            return run
        at = np.minimum(np.searchsorted(rows, host), len(rows) - 1)
        return np.where((rows[at] == host) & (run == -1), runs[at], run)

    def buffer_waits_of(self, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``host``, a window's host calls, of the returns from a buffer
        wait; the start of each wait): ``xla_links.buffer_waits``, found once."""
        if self._buffer_waits is None:
            self._buffer_waits = buffer_waits(self.trace, self.on_host, self.start)
        rows, since = self._buffer_waits
        if not len(rows) or not len(host):
            return rows[:0], since[:0]
        at = np.minimum(np.searchsorted(rows, host), len(rows) - 1)
        pos = np.flatnonzero(rows[at] == host)
        return pos, since[at[pos]]

    @property
    def thread_life(self) -> tuple[np.ndarray, np.ndarray]:
        """Per track id (``cache.threads`` ids: each host thread's), the start of the
        thread's first host event and the end of its last (markers too; +/- int64 max for
        a track that is no thread's), found once: a section's thread waits for a thread
        whose recorded life lies in its own time (``thread_links.joined``)."""
        if self._life is None:
            self._life = thread_life(self.trace, self.on_host, self.start, self.end, self.track)
        return self._life

    @property
    def device_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """(device activity rows, the device activity rows each waited for by its event
        wait list), ``wait_links.device_wait_links``, found once."""
        if self._dev_waits is None:
            self._dev_waits = device_wait_links(self.trace, self.corr, self.cid, self.start, self.end, self.track)
        return self._dev_waits

    @property
    def idle_at_launch(self) -> np.ndarray:
        """Per event row, True for an OpenCL command (its launch an ``clEnqueue*`` call,
        :data:`OPENCL_ENQUEUE_PREFIX`) whose queue had run every command launched onto it
        before (the last of them ended by its launch): the time from its launch to its
        start is its own launch delay (``depgraph``), found once."""
        if self._idle_launch is None:
            self._idle_launch = idle_at_launch(self.trace, self.corr, self.names, self.start, self.end, self.track)
        return self._idle_launch

    def stat(self, key: str) -> np.ndarray:
        """:func:`_int_stat` of the trace, decoded once."""
        if key not in self._stats:
            self._stats[key] = _int_stat(self.trace, key)
        return self._stats[key]

    def communication(self, rows: np.ndarray) -> np.ndarray:
        """Which of the device activity ``rows`` are communication (``activity_class``),
        classed once for every device activity of the trace (``common.device_view``'s
        classes: its kernel names matched once per trace)."""
        if self._communication is None:
            dev = self.corr.device_rows
            self._communication = np.zeros(self.trace.n_events, bool)
            if len(dev):  # (the view's classes are of these rows, shared with the breakdowns)
                self._communication[dev] = device_view(self.trace).cls == COMMUNICATION
        return self._communication[rows]

    def host_rows(self, calls: tuple[str, ...]) -> np.ndarray:
        """The host rows named one of ``calls``, found once."""
        if calls not in self._rows:
            self._rows[calls] = np.flatnonzero(self.on_host & names_in(self.trace, calls)[self.names])
        return self._rows[calls]


def context(trace: Trace) -> Context:
    """The trace's :class:`Context`, made once per trace (``cache.memo``): the critical
    path's table, its track and the job's graphs (``ranks/critical_path.py``, a
    :func:`depgraph.build` per step) share it. It holds a few columns of the trace's length for as
    long as the trace lives."""
    return cache.memo(trace, "critical_path_context", Context)


#: categories of host ranges the graph takes as sections (:func:`sections`): polyprof's
#: ``polyprof.section`` and NVTX ranges as Nsight Systems' and nvprof's readers categorise
#: them (``formats/nsys/tables.py``' ``CAT_NVTX``). Kineto's ``user_annotation`` (torch's
#: ``record_function``, polyprof's own NVTX recording) stays out, as in HTA
SECTION_CATEGORIES = (CAT_SECTION, "nvtx")
#: the launch calls of OpenCL commands (``clEnqueueNDRangeKernel``, ``clEnqueueReadBuffer``...)
OPENCL_ENQUEUE_PREFIX = "clEnqueue"


def sections(trace: Trace, candidate: np.ndarray) -> np.ndarray:
    """Which of ``candidate`` (host events with a duration) are sections of the graph: of a
    :data:`SECTION_CATEGORIES` category (:func:`ranges`), and not a step."""
    out = ranges(trace, candidate)
    if out.any():
        out[cache.steps(trace).rows] = False  # (an NVTX range taken for the steps)
    return out


def ranges(trace: Trace, candidate: np.ndarray) -> np.ndarray:
    """Which of ``candidate`` (host events with a duration) are of a
    :data:`SECTION_CATEGORIES` category, steps too: the ranges a program marks on its own
    threads (:func:`os_calls`' work)."""
    ids = np.array([trace.string_id(c) for c in SECTION_CATEGORIES], np.int64)
    if not bool((ids >= 0).any()):
        return np.zeros(len(candidate), bool)
    return candidate & member(np.asarray(trace.events["category"], np.int64), ids[ids >= 0])


def thread_life(trace: Trace, on_host: np.ndarray, start: np.ndarray, end: np.ndarray,
                track: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:attr:`Context.thread_life`: per track id, its thread's first start and last end."""
    big = np.iinfo(np.int64).max
    first = np.full(len(trace.tracks), big, np.int64)
    last = np.full(len(trace.tracks), -big, np.int64)
    h = np.flatnonzero(on_host)
    if len(h):
        th = cache.threads(trace)[track[h]]
        o = np.argsort(th, kind="stable")
        th = th[o]
        cut = np.flatnonzero(np.r_[True, th[1:] != th[:-1]])
        first[th[cut]] = np.minimum.reduceat(start[h[o]], cut)
        last[th[cut]] = np.maximum.reduceat(end[h[o]], cut)
    return first, last


def idle_at_launch(trace: Trace, corr: "Correlation", names: np.ndarray, start: np.ndarray, end: np.ndarray,
                   track: np.ndarray) -> np.ndarray:
    """:attr:`Context.idle_at_launch`. One running maximum of the ends per queue (a
    program's few)."""
    out = np.zeros(len(start), bool)
    ok = corr.launch >= 0
    called = unique(names[corr.launch[ok]])  # (the launch calls' few names)
    cl = called[np.array([trace.strings[i].startswith(OPENCL_ENQUEUE_PREFIX) for i in called.tolist()], bool)]
    if not len(cl):
        return out
    ok[ok] = member(names[corr.launch[ok]], cl)
    dev, launch = corr.device_rows[ok], corr.launch[ok]
    for tr in unique(track[dev]).tolist():
        q = np.flatnonzero(track[dev] == tr)
        q = q[lexsort((start[dev[q]], start[launch[q]]))]  # in launch order
        reach = np.maximum.accumulate(end[dev[q]])
        before = np.r_[np.iinfo(np.int64).min, reach[:-1]]  # the last end of those launched before it
        out[dev[q]] = before < start[launch[q]]
    return out


#: categories of host calls that hold their thread but are neither ops nor runtime calls:
#: the graph takes them as host calls (:func:`os_calls`). Nsight Systems' ``OSRT_API``
#: rows are the only such rows of the formats read (``trace/categories.py``: kind OTHER)
OS_CALL_CATEGORIES = ("os_runtime",)


def os_calls(trace: Trace, candidate: np.ndarray, host: np.ndarray, start: np.ndarray, end: np.ndarray,
             track: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """Which events are OS runtime calls (:data:`OS_CALL_CATEGORIES`) of the graph: those
    of ``candidate`` (host events with a duration) not within one of the graph's other
    host calls ``host`` on their thread (a runtime call's ``ioctl``, a waiting call's
    ``poll``: that call's own time already, and a waiting call's wait must stay one),
    and, where some thread has rows of the program's own work ``work`` (its ops, runtime
    calls, sections, NVTX ranges, CPU collectives), only those of such threads.

    Why: a thread whose rows are OS calls alone is tied by nothing in the trace to the
    work the graph follows (no launch, synchronisation, section or join leads into or out
    of it), so it can only be on the path alone, as a chain of its own; in an Nsight
    export of a CUDA program such threads are the CUDA driver's (``cuda-EvtHandlr``, whose
    blocking ``poll`` runs from the first CUDA call to the program's end; its
    ``cuda0000...`` workers), CUPTI's (``CUPTI worker thread``) and Nsight's own, and
    their polls, longer than the program's work, were the whole path while the thread
    that launched every kernel had no row on it. Thread names are not used: a helper
    thread can carry the program's name and a program's thread can be named ``cuda-...``
    (CloverLeaf's ``cuda-cloverleaf``). Without any such work in the trace (an export of
    OS calls alone) every thread's OS calls stay: they are all the trace has."""
    ids = np.array([trace.string_id(c) for c in OS_CALL_CATEGORIES], np.int64)
    if not bool((ids >= 0).any()):
        return np.zeros(len(candidate), bool)  # (most traces: no such category)
    out = candidate & member(np.asarray(trace.events["category"], np.int64), ids[ids >= 0])
    q = np.flatnonzero(out)
    threads = cache.threads(trace)
    w = np.flatnonzero(work) if work is not None else np.zeros(0, np.int64)
    if len(q) and len(w):  # (only the threads with some of the program's work)
        keep = member(threads[track[q]], unique(threads[track[w]]))
        out[q[~keep]] = False
        q = q[keep]
    c = np.flatnonzero(host)
    if len(q) and len(c):
        out[q[_within(threads[track[c]], start[c], end[c], threads[track[q]], start[q], end[q])]] = False
    return out


def _within(c_thread: np.ndarray, c_start: np.ndarray, c_end: np.ndarray, q_thread: np.ndarray,
            q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """Per query span, whether one of the spans ``c`` of its thread holds it whole (starts
    at or before its start and ends at or after its end): the largest end of the spans of
    its thread started by its start, a running maximum per thread."""
    o = lexsort((c_start, c_thread))
    th, s, e = c_thread[o], c_start[o], c_end[o]
    seg = np.zeros(len(o), np.int64)
    np.cumsum(th[1:] != th[:-1], out=seg[1:])
    lo = int(e.min())
    width = int(e.max()) - lo + 1
    if (int(seg[-1]) + 1) * width < 2 ** 62:  # each thread's ends above the one's before: one running max
        reach = np.maximum.accumulate(seg * width + (e - lo)) - seg * width + lo
    else:
        reach = e.copy()
        for a, b in zip(*_runs(seg)):  # (the times too wide to fold: a pass per thread)
            reach[a:b] = np.maximum.accumulate(e[a:b])
    at = last_at_or_before(th, s, np.arange(len(o), dtype=np.int64), q_thread, q_start)
    return (at >= 0) & (reach[np.maximum(at, 0)] >= q_end)


def _runs(seg: np.ndarray) -> tuple[list[int], list[int]]:
    """The (starts, ends) of the runs of equal ``seg`` values (sorted)."""
    cut = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1], True])
    return cut[:-1].tolist(), cut[1:].tolist()


def _by_time(rows: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o = np.argsort(t, kind="stable")
    return rows[o], t[o]

