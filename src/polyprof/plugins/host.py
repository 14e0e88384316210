"""The built-in host plugin: user sections, marks, counters and steps, and the
process's CPU and memory sampled in the background (/proc/self/stat on Linux, psutil
elsewhere)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

import numpy as np

from ..collect import recorder as rec_mod
from ..collect import background, opened, steps
from ..collect.clock import now_ns
from ..collect.journal import JournalWriter
from ..collect.plugin import Plugin, SessionContext
from ..formats import hostrecords as hosttrace
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from .nvtx import convert as nvtx_convert
from .nvtx.recorder import DEFAULT_MAX_EVENTS as NVTX_MAX_EVENTS
from .nvtx.recorder import NvtxRecorder

log = logging.getLogger("polyprof")


class _Sampler:
    """Samples process CPU time and RSS every ``interval`` seconds, on a thread the
    program's profilers (torch with_stack) never list (collect/background.py)."""

    def __init__(self, interval: float):
        self.interval = interval
        self._thread: background.Background | None = None
        self._read: Callable[[], tuple[float, float, float]] | None = None
        self.on_sample: list = []
        self.ts: list[int] = []
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self.threads: list[float] = []

    def sample(self, read: Callable[[], tuple[float, float, float]]) -> None:
        for fn in self.on_sample:
            fn()
        cpu, rss, threads = read()
        self.cpu.append(cpu)
        self.rss.append(rss)
        self.threads.append(threads)
        self.ts.append(now_ns())

    def start(self) -> None:
        self._read = process_reader()
        self.sample(self._read)
        self._thread = background.start(self._tick, self.interval, "polyprof-sampler")

    def _tick(self) -> float:
        assert self._read is not None
        self.sample(self._read)
        return self.interval

    def stop(self) -> None:
        """The last sample, once the thread has ended."""
        thread, self._thread = self._thread, None
        if thread is not None and background.stop(thread, 2.0) and self._read is not None:
            self.sample(self._read)

    def forget_in_child(self) -> None:
        """In a forked child: the parent's thread is not here."""
        thread, self._thread = self._thread, None
        if thread is not None:
            background.stop(thread, 0.0)


def process_reader() -> Callable[[], tuple[float, float, float]]:
    """A function giving this process's (CPU seconds, RSS bytes, OS threads) now.

    On Linux one read of ``/proc/self/stat`` (the fields psutil reads from there and
    from ``statm`` and ``status``; importing psutil is a cost for a short run);
    elsewhere psutil."""
    try:
        ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
        fd = os.open("/proc/self/stat", os.O_RDONLY)
    except (AttributeError, ValueError, OSError):
        return _psutil_reader()
    os.close(fd)

    def read() -> tuple[float, float, float]:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()  # after the command name, which may hold anything
        # fields[0] is field 3 (state): utime 14, stime 15, num_threads 20, rss 24 (proc(5))
        return (int(fields[11]) + int(fields[12])) / ticks, float(int(fields[21]) * page), float(fields[17])

    return read


def _psutil_reader() -> Callable[[], tuple[float, float, float]]:
    import psutil

    proc = psutil.Process()

    def read() -> tuple[float, float, float]:
        with proc.oneshot():
            t = proc.cpu_times()
            return t.user + t.system, float(proc.memory_info().rss), float(proc.num_threads())

    return read


class HostPlugin(Plugin):
    """Options: ``sample_interval_s`` (default 0.02; 0 disables process sampling);
    ``max_events`` (default none: keep every section; else the oldest beyond it are
    dropped and counted, the session's ``--max-events``);
    ``keep_open_sections`` (default False: a session that stops at the program's end
    records only the sections that closed; a capture's server sets it, the program running
    on: the sections open at the stop, and those that close while it stops, are recorded
    cut there, with the stat ``open_at_stop``, collect/opened.py and :func:`cut_late`);
    ``journal_interval_s`` (default 0.5: what was recorded waits at most that long
    before its batch is built and written, so a kill loses at most the last second;
    0 disables the crash journal, which is kept only when the session writes an output
    file); ``nvtx`` (default True: NVTX ranges and marks of any library, through
    polyprof's NVTX injection library, plugins/nvtx/recorder.py) and ``nvtx_max_events``
    (4M: beyond it NVTX events are dropped and counted)."""

    name = "host"
    option_names = frozenset(("max_events", "sample_interval_s", "journal_interval_s", "nvtx", "nvtx_max_events",
                                "keep_open_sections"))
    device_kinds = ("CPU",)
    default_journal_interval_s = 0.5
    time_limited = False  # its data is in memory already: no time limit may drop it

    def _start(self, ctx: SessionContext) -> None:
        self.recorder = rec_mod.Recorder()
        limit = self.options.get("max_events")
        self.recorder.max_sections = int(limit) if limit else None
        self.recorder.active = True
        self.start_ns = ctx.start_ns
        rec_mod.activate(self.recorder)
        interval = float(self.options.get("sample_interval_s", 0.02))
        self.sampler = _Sampler(interval) if interval > 0 else None
        rec_mod.watch_thread_starts(self.recorder)  # first: a thread that starts meanwhile is seen
        self.recorder.snapshot_threads()
        if self.sampler:
            self.sampler.on_sample.append(self.recorder.snapshot_threads)
            self.sampler.on_sample.append(self.recorder.trim)
            self.sampler.start()
        self._start_nvtx(ctx)
        self.journal: JournalWriter | None = None
        every = float(self.options.get("journal_interval_s", self.default_journal_interval_s))
        if ctx.journal_path is not None and every > 0:
            try:
                self.journal = JournalWriter(ctx.journal_path, ctx.header(), self.recorder, self.sampler, every,
                                             follow_symlinks=ctx.follow_symlinks, stretches=ctx.stretches)
            except OSError as e:
                ctx.warn(self.name, f"no crash journal: {e}")

    def _start_nvtx(self, ctx: SessionContext) -> None:
        self.nvtx: NvtxRecorder | None = None
        if not self.options.get("nvtx", True):
            return
        self.nvtx = NvtxRecorder(int(self.options.get("nvtx_max_events", NVTX_MAX_EVENTS)))
        if not self.nvtx.start():
            if self.nvtx.other_tool:
                ctx.warn(self.name, str(self.nvtx.problem))
            else:
                log.info("plugin host: %s", self.nvtx.problem)

    def _stop(self) -> None:
        if self.nvtx is not None:
            self.nvtx.stop()
        self.recorder.active = False
        self.stop_ns = now_ns()
        self.recorder.snapshot_threads()
        if rec_mod.active_recorder() is self.recorder:
            rec_mod.activate(None)
        # a capture's stop: the program runs on (collect/opened.py); those that close from
        # stop_ns to here are neither kept nor cut: records() cuts them (cut_late)
        if self.options.get("keep_open_sections"):
            cut = opened.cut_at(self.recorder, self.stop_ns)
            if cut:
                log.info("plugin host: %d section(s) open at the stop, recorded cut there (stat open_at_stop)", cut)
        rec_mod.watch_thread_starts(None)
        if self.sampler:
            self.sampler.stop()
        self.recorder.trim(exact=True)
        if steps.mixed(self.recorder) and self.ctx is not None:
            self.ctx.warn(self.name, steps.MIXED)
        if self.recorder.dropped and self.ctx is not None:
            self.ctx.warn(self.name, f"the {self.recorder.dropped:,} oldest sections were dropped to keep "
                          f"{self.recorder.max_sections:,} (--max-events / max_host_events)")
        if self.journal is not None:
            self.journal.close(delete=False)  # the session deletes it once the trace is saved
            lag = self.journal.max_lag_ns / 1e9
            if (self.journal.max_behind or lag > 2 * self.journal.interval) and self.ctx is not None:
                self.ctx.warn(self.name, f"the crash journal fell up to {lag:.1f} s behind the program "
                              "(a kill then would have lost that much host data)")

    def _collect(self) -> Trace:
        trace = hosttrace.build(records(self.recorder, self.start_ns, self.stop_ns, self.sampler,
                                        cut_open=bool(self.options.get("keep_open_sections"))))
        return trace if self.nvtx is None else self._with_nvtx(trace, self.nvtx)

    def _with_nvtx(self, trace: Trace, nvtx: NvtxRecorder) -> Trace:
        """``trace`` with the session's NVTX ranges and marks on its threads' tracks."""
        cap = nvtx.take()
        if cap is None:
            trace.metadata[mkeys.NVTX] = {"recorded": 0, "why": nvtx.problem}
            return trace
        meta: dict[str, object] = dict(cap.counts)
        if cap.counts["dropped"] and self.ctx is not None:
            self.ctx.warn(self.name, f"{cap.counts['dropped']:,} NVTX events were dropped beyond "
                          f"{nvtx.max_events:,} (options host.nvtx_max_events)")
        if len(cap.events):
            names = {tid: name for name, tid in self.recorder.threads.values()}
            part, counts = nvtx_convert.build(cap, names)
            meta.update(counts)
            trace = trace.extend(part)
        trace.metadata[mkeys.NVTX] = meta
        return trace

    def after_fork_in_child(self) -> None:
        """A forked child records nothing and never writes the parent's journal."""
        r = self.recorder
        r.active = False
        r._lock = threading.Lock()  # a parent thread may have held it at fork
        if rec_mod.active_recorder() is r:
            rec_mod.activate(None)
        rec_mod.watch_thread_starts(None)
        if self.sampler is not None:
            self.sampler.forget_in_child()
        if self.journal is not None:
            self.journal.abandon_in_child()


def records(r: rec_mod.Recorder, start_ns: int, stop_ns: int, sampler: _Sampler | None,
            since_ns: int | None = None, cut_open: bool = False) -> hosttrace.HostRecords:
    """The recorder's tuples and per-thread arrays as columns (only what began at or
    after ``since_ns`` when given: a nested session's window). Records are by thread key
    (``Recorder.threads``): one track per thread, even where two threads had one ident.
    ``cut_open`` (``keep_open_sections``): the sections begun by ``stop_ns`` that closed
    after it are kept, cut there (:func:`cut_late`), else dropped."""
    lo = since_ns if since_ns is not None else -(1 << 62)
    secs = list(r.sections)  # a copy: threads may append
    # step 0 from where the program resumed after the session's start, a first block's entry, or where a
    # detected first step's work began (collect/steps.py first_start)
    h = hosttrace.HostRecords(start_ns=steps.first_start(r, start_ns), main_ident=threading.main_thread().ident,
                              steps=[t for t in list(rec_mod.used_steps(r)) if t >= lo])
    if secs:
        cols = hosttrace.section_columns(secs)
        keep = (cols[2] <= stop_ns) & (cols[1] >= lo)
        if cut_open:
            keep |= cut_late(cols, stop_ns) & (cols[1] >= lo)
        if not keep.all():
            cols = tuple(c[keep] for c in cols)
        h.sec_names, h.sec_start, h.sec_end, h.sec_stats, idents = cols
        h.sec_ident = r.thread_keys(idents, h.sec_start)
    h.threads = dict(r.threads)  # after the keys: every thread they name is in it
    names = np.asarray(r.strings, dtype=object)
    marks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    ctrs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for buf in r.buffers:
        m = min(len(buf.mark_names), len(buf.mark_ts))
        marks.append((names[np.frombuffer(buf.mark_names, np.int32)[:m]], np.frombuffer(buf.mark_ts, np.int64)[:m],
                      np.full(m, buf.key, np.int64)))
        c = min(len(buf.ctr_names), len(buf.ctr_ts), len(buf.ctr_values))
        ctrs.append((names[np.frombuffer(buf.ctr_names, np.int32)[:c]], np.frombuffer(buf.ctr_ts, np.int64)[:c],
                     np.frombuffer(buf.ctr_values, np.float64)[:c]))
    if marks:
        h.mark_names, h.mark_ts, h.mark_ident = (np.concatenate(x) for x in zip(*marks))
        if since_ns is not None:
            keep = (h.mark_ts >= lo) & (h.mark_ts <= stop_ns)
            h.mark_names, h.mark_ts, h.mark_ident = h.mark_names[keep], h.mark_ts[keep], h.mark_ident[keep]
    if ctrs:
        h.ctr_names, h.ctr_ts, h.ctr_values = (np.concatenate(x) for x in zip(*ctrs))
        if since_ns is not None:
            keep = (h.ctr_ts >= lo) & (h.ctr_ts <= stop_ns)
            h.ctr_names, h.ctr_ts, h.ctr_values = h.ctr_names[keep], h.ctr_ts[keep], h.ctr_values[keep]
    if sampler is not None:
        n = min(len(sampler.ts), len(sampler.cpu), len(sampler.rss), len(sampler.threads))
        i0 = 0
        if since_ns is not None:
            i0 = next((i for i in range(n) if sampler.ts[i] >= lo), n)
        h.proc_ts, h.proc_cpu = np.asarray(sampler.ts[i0:n], np.int64), np.asarray(sampler.cpu[i0:n], np.float64)
        h.proc_rss = np.asarray(sampler.rss[i0:n], np.float64)
        h.proc_threads = np.asarray(sampler.threads[i0:n], np.float64)
    return h


def cut_late(cols: tuple[np.ndarray, ...], stop_ns: int) -> np.ndarray:
    """The sections of ``cols`` (``hostrecords.section_columns``) begun by ``stop_ns`` that
    closed after it, cut at ``stop_ns`` in place with the stat ``open_at_stop``, as
    ``opened.cut_at`` records those open at the stop; a mask of them. Each opening that
    ``cut_at`` recorded already (it closed later, as the program ran on) is left out, by
    (thread, start, name). Without this, one that closed between the stop's ``stop_ns``
    and its ``cut_at`` (on another thread, or inside the stop: the threads' snapshot
    runs between) was in neither: too late to be kept, no longer open to be cut."""
    names, start, end, stats, idents = cols
    out = np.zeros(len(end), bool)
    late = np.flatnonzero((end > stop_ns) & (start <= stop_ns))
    if not len(late):
        return out
    at = np.flatnonzero(end == stop_ns)  # those cut_at recorded are among these (few)
    cut = {(i, t, n) for i, t, n, st in zip(idents[at].tolist(), start[at].tolist(), names[at].tolist(), stats[at])
           if st and st.get(opened.OPEN_AT_STOP)}
    for row, key in zip(late.tolist(), zip(idents[late].tolist(), start[late].tolist(), names[late].tolist())):
        if key not in cut:
            end[row] = stop_ns
            stats[row] = {**(stats[row] or {}), opened.OPEN_AT_STOP: True}
            out[row] = True
    return out
