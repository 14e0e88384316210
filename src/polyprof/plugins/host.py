"""The built-in host plugin: user sections, marks, counters and steps, and the
process's CPU and memory sampled in the background (psutil)."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import numpy as np

from ..collect import recorder as rec_mod
from ..collect.clock import now_ns
from ..collect.plugin import Plugin, SessionContext
from ..trace import keys
from ..trace.builder import TraceBuilder
from ..trace.core import Trace


class _Sampler(threading.Thread):
    """Samples process CPU time and RSS every ``interval`` seconds."""

    def __init__(self, interval: float):
        super().__init__(name="polyprof-sampler", daemon=True)
        self.interval = interval
        self.halt = threading.Event()
        self.on_sample: list = []
        self.ts: list[int] = []
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self.threads: list[float] = []

    def sample(self, proc: Any) -> None:
        for fn in self.on_sample:
            fn()
        with proc.oneshot():
            t = proc.cpu_times()
            self.cpu.append(t.user + t.system)
            self.rss.append(float(proc.memory_info().rss))
            self.threads.append(float(proc.num_threads()))
        self.ts.append(now_ns())

    def run(self) -> None:
        import psutil

        proc = psutil.Process()
        self.sample(proc)
        while not self.halt.wait(self.interval):
            self.sample(proc)
        self.sample(proc)


class HostPlugin(Plugin):
    """Options: ``sample_interval_s`` (default 0.02; 0 disables process sampling)."""

    name = "host"
    device_kinds = ("CPU",)

    def _start(self, ctx: SessionContext) -> None:
        self.recorder = rec_mod.Recorder()
        self.recorder.active = True
        self.start_ns = ctx.start_ns
        rec_mod.activate(self.recorder)
        interval = float(self.options.get("sample_interval_s", 0.02))
        self.sampler = _Sampler(interval) if interval > 0 else None
        self.recorder.snapshot_threads()
        rec_mod.watch_thread_starts(self.recorder)
        if self.sampler:
            self.sampler.on_sample.append(self.recorder.snapshot_threads)
            self.sampler.start()

    def _stop(self) -> None:
        self.recorder.active = False
        self.stop_ns = now_ns()
        self.recorder.snapshot_threads()
        if rec_mod.active_recorder() is self.recorder:
            rec_mod.activate(None)
        rec_mod.watch_thread_starts(None)
        if self.sampler:
            self.sampler.halt.set()
            self.sampler.join(2.0)

    def _collect(self) -> Trace:
        r = self.recorder
        b = TraceBuilder()
        plane = b.plane(keys.HOST_PLANE, "host", pid=os.getpid(),
                        properties={"hostname": socket.gethostname()})
        names = np.asarray(r.strings, dtype=object)
        secs = [x for x in list(r.sections) if x[2] <= self.stop_ns]  # list(): threads may append
        idents = {x[4] for x in secs} | {buf.ident for buf in r.buffers}
        main_ident = threading.main_thread().ident
        tracks = {}
        for order, ident in enumerate(sorted(idents, key=lambda i: (i != main_ident, r.threads.get(i, ("", i))[1]))):
            tname, tid = r.threads.get(ident, (f"thread {ident}", ident))
            tracks[ident] = b.track(plane, tname, "thread", tid=tid, sort_index=order)
        if secs:
            sn, s0, s1, sst, sid = zip(*secs)
            starts = np.fromiter(s0, np.int64, len(secs))
            track_ids = np.fromiter((tracks[i] for i in sid), np.int32, len(secs))
            rows = b.events(track_ids, np.asarray(sn, dtype=object), starts,
                            np.fromiter(s1, np.int64, len(secs)) - starts, keys.CAT_SECTION)
            by_key: dict[str, tuple[list, list]] = {}
            for local, stats in enumerate(sst):
                if stats:
                    for k, v in stats.items():
                        rs, vs = by_key.setdefault(k, ([], []))
                        rs.append(rows[local])
                        vs.append(v)
            for k, (rs, vs) in by_key.items():
                b.add_stat(k, rs, vs)
        for buf in r.buffers:
            track = tracks[buf.ident]
            m = min(len(buf.mark_names), len(buf.mark_ts))
            if m:
                b.events(track, names[np.frombuffer(buf.mark_names, np.int32)[:m]],
                         np.frombuffer(buf.mark_ts, np.int64)[:m], np.zeros(m, np.int64), keys.CAT_MARK)
            c = min(len(buf.ctr_names), len(buf.ctr_ts), len(buf.ctr_values))
            if c:
                ids = np.frombuffer(buf.ctr_names, np.int32)[:c]
                ts = np.frombuffer(buf.ctr_ts, np.int64)[:c]
                vals = np.frombuffer(buf.ctr_values, np.float64)[:c]
                for nid in np.unique(ids):
                    sel = ids == nid
                    b.counter(plane, r.strings[nid], ts[sel], vals[sel])
        self._steps(b, plane)
        self._process_counters(b, plane)
        return b.build()

    def _steps(self, b: TraceBuilder, plane: int) -> None:
        """Step N runs from the previous step() call (or session start) to the Nth call."""
        marks = np.asarray(self.recorder.steps, np.int64)
        if not len(marks):
            return
        track = b.track(plane, keys.LINE_STEPS, "steps", tid=0, sort_index=-1)
        starts = np.concatenate([[self.start_ns], marks[:-1]])
        n = len(marks)
        b.events(track, np.array([f"step {i}" for i in range(n)], object), starts, marks - starts,
                 keys.CAT_STEP, stats={keys.STEP: np.arange(n, dtype=np.int64)})

    def _process_counters(self, b: TraceBuilder, plane: int) -> None:
        s = self.sampler
        if not s or len(s.ts) < 2:
            return
        n = min(len(s.ts), len(s.cpu), len(s.rss), len(s.threads))
        ts = np.asarray(s.ts[:n], np.int64)
        cpu = np.asarray(s.cpu[:n])
        pct = np.diff(cpu) / np.maximum(np.diff(ts), 1) * 1e9 * 100.0
        b.counter(plane, "process.cpu_percent", ts[1:], pct)
        b.counter(plane, "process.rss_bytes", ts, np.asarray(s.rss[:n]))
        b.counter(plane, "process.threads", ts, np.asarray(s.threads[:n]))
