"""OpenCL through pyopencl: host API calls, device activity per queue, one clock.

start: wrap pyopencl (intercept.py) so every queue profiles and every enqueue/wait is
recorded on its thread. stop: read each queue once (calls.queue_table; one the program
closed was read as it closed), unwrap, flush the open queues, wait (with a time limit)
for the commands still pending, take final clock samples. collect: read each event's
queued/submit/start/end, map device time to the session clock (trace/clock.py)
and write one track per (device, queue) with a flow from each launching call.

Clock samples, per device: every recorded enqueue is a free one (host time before the
call, the command's QUEUED timestamp, host time after); marker commands enqueued on
a private queue at stop add more; and when the device's timestamps turn out to be
CLOCK_MONOTONIC_RAW (PoCL's are), (MONOTONIC, RAW, MONOTONIC) triples read at start,
at stop and periodically in between pin the line to within a few hundred ns.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np

from ...collect import background
from ...collect.clock import now_ns
from ...collect.importhook import ImportHook, imported
from ...collect.plugin import Availability, Plugin, SessionContext
from ...collect.signals import SavedDispositions
from ...trace import keys
from ...trace import metadata_keys as mkeys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace

# What records and reads OpenCL calls (calls, intercept, memory, probe, the clock fit)
# is imported when the program imports pyopencl, not by every session's discovery.
if TYPE_CHECKING:
    from pyopencl import CommandQueue, Device, Event

    from ...trace.clock import ClockFit
    from . import calls
    from .queues import QueueRef

log = logging.getLogger("polyprof")

CAT_API = "opencl_api"
_RAW = getattr(time, "CLOCK_MONOTONIC_RAW", None)


def _raw_triple() -> tuple[int, int, int]:
    """The tightest of three (MONOTONIC, RAW, MONOTONIC) reads."""
    best = None
    for _ in range(3):
        a = now_ns()
        r = time.clock_gettime_ns(_RAW)  # type: ignore[arg-type]
        b = now_ns()
        if best is None or b - a < best[2] - best[0]:
            best = (a, r, b)
    return best  # type: ignore[return-value]


class QueueInfo(TypedDict):
    """One queue: its device's index and object, its number on that device, name, order."""

    dev: int
    device: Device
    local: int
    name: str
    out_of_order: bool


class _RawSampler:
    """A RAW clock triple every ``interval`` seconds, on polyprof's background thread
    (collect/background.py): the program's own profilers (torch ``with_stack``) never
    see it, and it is not in ``threading.enumerate()``."""

    def __init__(self, interval: float):
        self.interval = interval
        self.samples: list[tuple[int, int, int]] = []
        self._thread: background.Background | None = None

    def _tick(self) -> float:
        self.samples.append(_raw_triple())
        return self.interval

    def start(self) -> None:
        self._thread = background.start(self._tick, self.interval, "polyprof-opencl-clock")

    def stop(self) -> None:
        if self._thread is not None:
            background.stop(self._thread, 1.0)
            self._thread = None


class OpenCLPlugin(Plugin):
    """Options: ``stop_timeout_s`` (10: how long stop waits for pending commands),
    ``sync_markers`` (16 marker samples per device at stop), ``clock_interval_s`` (0.1:
    period of RAW clock samples; 0 disables), ``event_samples`` (True: use each
    command's QUEUED time as a clock sample), ``max_drift_ppm`` (1000), ``memory`` (False:
    record buffer and image creation and release with their sizes; the session's
    ``memory=True`` sets it)."""

    name = "opencl"
    option_names = frozenset(("clock_interval_s", "stop_timeout_s", "sync_markers", "max_drift_ppm",
                                "event_samples"))
    device_kinds = ("OpenCL",)

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """What `polyprof plugin check opencl` runs while the plugin records: a queue made
        without profiling, kernel launches and blocking reads, so every clause sees
        intercepted calls and device activity (and their clock mapping)."""
        import pyopencl as cl

        from . import probe

        dev, problems = probe.first_compiling()
        if dev is None:
            raise RuntimeError("no OpenCL device here can compile kernels ("
                               + "; ".join(problems or ["no device"]) + ")")
        ctx = cl.Context([dev])
        queue = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, "__kernel void polyprof_kit(__global float* a) "
                              "{ int i = get_global_id(0); a[i] = a[i] * 0.5f + 1.0f; }").build()
        kernel = cl.Kernel(prg, "polyprof_kit")
        host = np.ones(4096, np.float32)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        kernel.set_args(buf)
        end = time.perf_counter() + seconds
        while True:
            cl.enqueue_nd_range_kernel(queue, kernel, host.shape, None)
            cl.enqueue_copy(queue, host, buf)
            if time.perf_counter() >= end:
                break
        queue.finish()

    @classmethod
    def availability(cls) -> Availability:
        try:
            import pyopencl
        except ImportError as e:
            return Availability(False, f"pyopencl not installed ({e})")
        except Exception as e:
            return Availability(False, f"pyopencl failed to import: {e}")
        try:
            platforms = pyopencl.get_platforms()
        except Exception as e:
            return Availability(False, f"no OpenCL platform found ({e})")
        if not platforms:
            return Availability(False, "no OpenCL platform found")
        from . import probe

        try:
            devs = probe.devices()
        except Exception as e:
            return Availability(False, f"no OpenCL device found ({e})")
        if not devs:
            names = ", ".join(p.name.strip() for p in platforms)
            return Availability(False, f"no OpenCL device found (platforms without a device: {names})")
        dev, problems = probe.first_compiling()
        if dev is None:
            return Availability(False, "no OpenCL device here can compile kernels ("
                                + "; ".join(problems) + ")")
        return Availability(True)

    @classmethod
    def session_availability(cls) -> Availability:
        """Before the program imports pyopencl: only that it is installed (the plugin
        starts, and checks devices, when the program imports it); after: the full check."""
        if imported("pyopencl"):
            return cls.availability()
        try:
            found = importlib.util.find_spec("pyopencl") is not None
        except (ImportError, ValueError) as e:
            return Availability(False, f"pyopencl cannot be found: {e}")
        return Availability(True) if found else Availability(False, "pyopencl not installed")

    @property
    def time_limited(self) -> bool:
        """Started but before the program imported pyopencl, no device was touched: stop()
        removes an import hook and collect() returns an empty trace, on the session's
        thread (no thread hand-off). A device probe at that import, running now (it holds
        the lock), keeps the limit, as do start() and everything after the import."""
        lock = getattr(self, "_lock", None)
        return getattr(self, "_begun", True) or lock is None or lock.locked()

    def _warn(self, message: str) -> None:
        """A warning in the session's trace (every caller runs between start and collect)."""
        if self.ctx is not None:
            self.ctx.warn(self.name, message)

    # ---------------------------------------------------------------- lifecycle
    def _start(self, ctx: SessionContext) -> None:
        """Intercept pyopencl now if the program imported it, else at its import (a
        program that never imports pyopencl pays nothing)."""
        self._begun = False
        self._hook: ImportHook | None = None
        self._lock = threading.Lock()
        if imported("pyopencl"):
            self._begin()
        else:
            self._hook = ImportHook("pyopencl", self._begin_after_import).install()

    def _begin_after_import(self) -> None:
        with self._lock:
            if self._state != "started" or self._begun:
                return
            with SavedDispositions():  # loading the driver installs signal handlers
                avail = self.availability()
                if not avail.ok:
                    if self.ctx is not None:
                        self._warn(f"pyopencl was imported but {avail.reason}; OpenCL is not recorded")
                    return
                self._begin()

    def _begin(self) -> None:
        import pyopencl as cl

        from . import intercept as ic
        from .memory import MemoryLog
        from .probe import devices

        self.cl = cl
        self.device_list = devices()
        self.rec = ic.Recording()
        self.patcher = ic.Patcher()
        self.raw_start = [_raw_triple() for _ in range(8)] if _RAW is not None else []
        interval = float(self.options.get("clock_interval_s", 0.1))
        self.raw_sampler = _RawSampler(interval) if (_RAW is not None and interval > 0) else None
        self.memlog = MemoryLog() if self.options.get("memory") else None
        self.patcher.install(self.rec, self.memlog)
        if self.raw_sampler:
            self.raw_sampler.start()
        self._begun = True

    def _stop(self) -> None:
        with self._lock:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            if not self._begun:
                return
        self.rec.stop()
        if self.memlog is not None:
            self.memlog.active = False
        from . import calls

        self.queues = calls.queue_table(self.rec)  # before the wrappers go: closing queues are noted
        self.patcher.uninstall()
        if self.raw_sampler:
            self.raw_sampler.stop()
        self.pending = self._wait_pending(float(self.options.get("stop_timeout_s", 10.0)))
        self.raw_stop = [_raw_triple() for _ in range(8)] if _RAW is not None else []
        self.markers = self._marker_samples(int(self.options.get("sync_markers", 16)))

    def _wait_pending(self, timeout: float) -> set[int]:
        """Flush every queue the program has not closed, then wait for unfinished commands
        until ``timeout``; returns the int_ptr of the events still not complete. On an
        in-order queue the last command completes last, so only it is waited for when it
        completes."""
        from . import calls

        cl = self.cl
        queues = calls.open_queues(self.queues)
        for q in queues.values():
            try:
                q.flush()
            except Exception:
                pass
        complete = int(cl.command_execution_status.COMPLETE)
        deadline = time.monotonic() + timeout
        pending: set[int] = set()
        for ev in self._events_to_wait_for(queues):
            try:
                while True:
                    st = int(ev.command_execution_status)
                    if st <= complete or time.monotonic() > deadline:  # <0: error status
                        break
                    time.sleep(0.0005)
                if st > complete:
                    pending.add(ev.int_ptr)
            except Exception:
                continue
        if pending:
            self._warn(f"{len(pending)} OpenCL commands still pending {timeout:g} s after stop; "
                                     "recorded as incomplete (stat incomplete=1) without device timing")
        return pending

    def _events_to_wait_for(self, queues: dict[int, CommandQueue]) -> list[Event]:
        """The last event of each open in-order queue when it is complete; every event of
        out-of-order queues, of closed ones (finished as they closed), and of in-order ones
        whose last event is not complete."""
        from .intercept import STRIDE as S

        cl = self.cl
        ooo = int(cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
        complete = int(cl.command_execution_status.COMPLETE)
        last: dict[int, Event] = {}  # id(queue) -> its last event
        every: list[tuple[int, Event]] = []
        for _tid, _name, flat in self.rec.threads:
            for ev, q in zip(flat[4::S], flat[5::S]):
                if ev is not None:
                    ev = cast("Event", ev)  # an Event by construction: what the wrapped enqueue returned
                    every.append((id(q), ev))
                    last[id(q)] = ev
        done: set[int] = set()
        for q in queues.values():
            ev = last.get(id(q))
            ref = self.queues.get(id(q))
            try:
                if ev is not None and ref is not None and not ref.properties & ooo \
                        and int(ev.command_execution_status) == complete:
                    done.add(id(q))
            except Exception:
                continue
        return [ev for qid, ev in every if qid not in done]

    def _marker_samples(self, k: int) -> dict[int, list[tuple[int, int, int, int, int]]]:
        """Per device (int_ptr): k (host before, raw before, event, raw after, host after)
        brackets around marker enqueues on a private profiling queue."""
        cl = self.cl
        out: dict[int, list[tuple[int, int, int, int, int]]] = {}
        if k <= 0:
            return out
        seen: set[int] = set()
        for ref in self.queues.values():
            try:
                dev = cast("Device", ref.device)
                if dev.int_ptr in seen:
                    continue
                seen.add(dev.int_ptr)
                sq = cl._cl.CommandQueue(ref.context, dev, cl.command_queue_properties.PROFILING_ENABLE)
                rows = []
                for _ in range(k):
                    h0 = now_ns()
                    r0 = time.clock_gettime_ns(_RAW) if _RAW is not None else 0
                    ev = cl._cl._enqueue_marker(sq)
                    r1 = time.clock_gettime_ns(_RAW) if _RAW is not None else 0
                    h1 = now_ns()
                    rows.append((h0, r0, ev, r1, h1))
                sq.finish()
                out[dev.int_ptr] = [(h0, r0, int(ev.get_profiling_info(cl.profiling_info.QUEUED)), r1, h1)
                                    for h0, r0, ev, r1, h1 in rows]
            except Exception as e:
                self._warn(f"clock samples from markers failed: {e}")
        return out

    # ---------------------------------------------------------------- collect
    def _collect(self) -> Trace:
        b = TraceBuilder()
        if not self._begun:  # the program never imported pyopencl
            b.metadata[mkeys.OPENCL] = {"api_calls": 0, "device_events": 0, "pyopencl_imported": False}
            return b.build()
        from . import calls
        from . import intercept as ic

        host = b.plane(keys.HOST_PLANE, "host", pid=os.getpid())
        dev_index = {d.int_ptr: i for i, d in enumerate(self.device_list)}
        c = calls.flatten(self.rec)
        qkey, queues = calls.queue_keys(c, getattr(self, "queues", {}))
        qinfo = self._queue_info(queues, dev_index)
        dt = calls.device_times(c, self.cl.profiling_info, getattr(self, "pending", set()))
        if dt.unprofiled:
            self._warn(f"{dt.unprofiled} OpenCL commands have no profiling information: their queues were "
                       "created before polyprof started, and a queue cannot be made to profile later; host "
                       "calls only. Start polyprof before the queues are made (polyprof.profile() around "
                       "their creation, polyprof run, or for captures polyprof run --serve / POLYPROF_SERVE "
                       "/ polyprof.serve() before them)")
        fits = self._fits(b, c, qkey, qinfo, dt)
        host_rows = self._host_events(b, host, c)
        self._api_stats(b, c, host_rows, qkey, qinfo, dt)
        dev_rows = np.full(c.n, -1, np.int64)
        for qp, info in qinfo.items():
            sel = np.flatnonzero(dt.timed & (qkey == qp))
            if len(sel):
                dev_rows[sel] = self._device_events(b, c, sel, info, qp, fits[info["dev"]], dt.ts, dt.ptr_to_row)
        self._memory_events(b, host, dev_index)
        linked = (dev_rows >= 0) & (host_rows >= 0)
        b.flows(host_rows[linked], dev_rows[linked], c.corr[linked], "ac2g")
        b.metadata[mkeys.OPENCL] = {"api_calls": int(c.n), "device_events": int((dev_rows >= 0).sum()),
                                "incomplete": int(dt.incomplete.sum()), "unprofiled": int(dt.unprofiled),
                                "queues_made_profiling": self._queues_made_profiling()}
        self.rec = ic.Recording()  # drop the event references
        return b.build()

    def _queues_made_profiling(self) -> int:
        from . import early

        factory = self.patcher.factory or early.factory()
        return factory.forced if factory is not None else 0

    def _queue_info(self, queues: dict[int, QueueRef], dev_index: dict[int, int]) -> dict[int, QueueInfo]:
        """Per queue int_ptr: its device index, its number on that device, name, order."""
        ooo = int(self.cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
        qinfo: dict[int, QueueInfo] = {}
        for p, q in queues.items():
            dev, props = cast("Device", q.device), q.properties
            di = dev_index.get(dev.int_ptr, len(dev_index))
            k = sum(1 for v in qinfo.values() if v["dev"] == di)
            qinfo[p] = {"dev": di, "device": dev, "local": k, "name": f"Queue {k}", "out_of_order": bool(props & ooo)}
        return qinfo

    def _fits(self, b: TraceBuilder, c: calls.Calls, qkey: np.ndarray, qinfo: dict[int, QueueInfo],
              dt: calls.DeviceTimes) -> dict[int, ClockFit]:
        """One device -> session clock fit per device (``mkeys.record_fit``)."""
        b.metadata.setdefault(mkeys.CLOCK_SYNC, {})
        fits: dict[int, ClockFit] = {}
        qdev = {k: v["dev"] for k, v in qinfo.items()}
        dev_of_row = np.fromiter((qdev.get(k, -1) for k in qkey.tolist()), np.int64, c.n)
        timed = dt.timed
        for di in sorted(set(qdev.values())):
            dev = next(v["device"] for v in qinfo.values() if v["dev"] == di)
            sel = timed & (dev_of_row == di)
            fit, meta = self._fit_device(dev, c.t0[sel], dt.ts[sel, 0], c.t1[sel])
            fits[di] = fit
            pname = keys.device_plane("OpenCL", di)
            mkeys.record_fit(b.metadata, pname, self.name, meta)
            if not fit.consistent:
                self._warn(f"{pname}: clock sync inconsistent: {fit.message}")
        return fits

    @staticmethod
    def _host_events(b: TraceBuilder, host: int, c: calls.Calls) -> np.ndarray:
        """The API calls, one track per thread; the row of each call."""
        from . import intercept as ic

        host_rows = np.full(c.n, -1, np.int64)
        names = np.array([ic.API[a][0] for a in range(len(ic.API))], object)
        for ti, (tid, tname) in enumerate(c.threads):
            sel = np.flatnonzero(c.thread == ti)
            if len(sel):
                track = b.track(host, tname, "thread", tid=tid)
                host_rows[sel] = b.events(track, names[c.api[sel]], c.t0[sel], c.t1[sel] - c.t0[sel], CAT_API,
                                          stats={keys.CORRELATION_ID: c.corr[sel]})
        return host_rows

    def _device_events(self, b: TraceBuilder, c: calls.Calls, sel: np.ndarray, info: QueueInfo, qp: int,
                       fit: ClockFit, ts: np.ndarray, ptr_to_row: dict[int, int]) -> np.ndarray:
        """The timed commands ``sel`` of one queue on its (device, queue) track."""
        from . import calls
        from . import intercept as ic

        di, dev = info["dev"], info["device"]
        plane = b.plane(keys.device_plane("OpenCL", di), "device", vendor=str(dev.vendor).strip(), index=di,
                        pid=1_000_000 + di, properties=self._device_props(dev))
        track = b.track(plane, info["name"], "queue", tid=info["local"],
                        properties={"out_of_order": info["out_of_order"], "int_ptr": int(qp)})
        start = fit.to_host(ts[sel, 2])
        end = np.maximum(fit.to_host(ts[sel, 3]), start)
        queued = fit.to_host(ts[sel, 0])
        cats = np.array([ic.API[a][2] for a in range(len(ic.API))], object)[c.api[sel]]
        rows = b.events(track, calls.device_names(c, sel), start, end - start, cats, stats={
            keys.CORRELATION_ID: c.corr[sel],
            keys.QUEUE: np.full(len(sel), info["name"], object),
            keys.DEVICE: np.full(len(sel), di, np.int64),
            keys.QUEUE_DELAY: start - queued,
            keys.SUBMIT_DELAY: ts[sel, 1] - ts[sel, 0],
        })
        self._size_stats(b, c, sel, rows)
        k, lists = calls.wait_lists(c, ptr_to_row, sel)  # what each command waited for (wait_for=)
        if len(k):
            b.add_stat(keys.WAIT_LIST, rows[k], lists)
        return rows

    @staticmethod
    def _size_stats(b: TraceBuilder, c: calls.Calls, sel: np.ndarray, rows: np.ndarray) -> None:
        """grid and block of kernel launches, bytes of transfers, at ``rows``."""
        from . import calls

        k, grid, block = calls.kernel_sizes(c, sel)
        for key, vals in ((keys.GRID, grid), (keys.BLOCK, block)):
            ok = np.fromiter((bool(v) for v in vals), bool, len(vals))
            if ok.any():
                b.add_stat(key, rows[k[ok]], vals[ok])
        nb = calls.byte_counts(c, sel)
        ok = nb >= 0
        if ok.any():
            b.add_stat(keys.BYTES, rows[ok], nb[ok])

    def _memory_events(self, b: TraceBuilder, host: int, dev_index: dict[int, int]) -> None:
        """Buffer and image creation and release (option ``memory``) as memory events on
        the thread that made them, the memory on its device's plane."""
        recs = list(self.memlog.records) if self.memlog is not None else []
        if not recs:
            return
        from .memory import ALLOC_NAMES, FREE_NAME

        ts, nbytes, handle, dev, tid, tname, kind = (list(c) for c in zip(*recs))
        devs = {d: dev_index.get(d, 0) for d in set(dev)}
        by_ptr = {d.int_ptr: d for d in self.device_list}
        for ptr, di in devs.items():  # the plane exists even if no command ran on the device
            d = by_ptr.get(ptr)
            b.plane(keys.device_plane("OpenCL", di), "device", vendor=str(d.vendor).strip() if d else "",
                    index=di, pid=1_000_000 + di, properties=self._device_props(d) if d else None)
        n = np.asarray(nbytes, np.int64)
        names = np.array([FREE_NAME if x < 0 else ALLOC_NAMES[k] for x, k in zip(nbytes, kind)], object)
        tracks = np.array([b.track(host, name, "thread", tid=t) for t, name in zip(tid, tname)], np.int32)
        b.events(tracks, names, np.asarray(ts, np.int64), np.zeros(len(recs), np.int64), keys.CAT_MEMORY, stats={
            keys.ALLOC_BYTES: n, keys.ADDR: np.asarray(handle, np.int64),
            keys.MEMORY_DEVICE: np.array([keys.device_plane("OpenCL", devs[d]) for d in dev], object),
            keys.ALLOCATOR: np.full(len(recs), "opencl", object)})

    def _fit_device(self, dev: Device, hb: np.ndarray, queued: np.ndarray, ha: np.ndarray) -> tuple[ClockFit, dict[str, object]]:
        """Fit device -> host for one device from all the sample sources we have."""
        from ...trace.clock import ClockFit, ClockSync

        max_drift = float(self.options.get("max_drift_ppm", 1000.0))
        markers = self.markers.get(dev.int_ptr, []) if hasattr(self, "markers") else []
        mk = np.array([(h0, q, h1) for h0, _r0, q, _r1, h1 in markers], np.int64).reshape(-1, 3)
        # is the device clock CLOCK_MONOTONIC_RAW? every marker's QUEUED inside its RAW bracket
        raw_clock = bool(markers) and _RAW is not None and all(r0 <= q <= r1 for _h0, r0, q, r1, _h1 in markers)
        base = ClockSync(max_drift_ppm=max_drift)
        base.add_many(mk[:, 0], mk[:, 1], mk[:, 2])
        sources = {"markers": len(mk)}
        if raw_clock:
            triples = list(self.raw_start) + (self.raw_sampler.samples if self.raw_sampler else []) + list(self.raw_stop)
            tr = np.array(triples, np.int64).reshape(-1, 3)
            base.add_many(tr[:, 0], tr[:, 1], tr[:, 2])
            sources["monotonic_raw_pairs"] = len(tr)
        sync = ClockSync(max_drift_ppm=max_drift)
        sync.add_many(*base.samples())
        use_events = bool(self.options.get("event_samples", True)) and len(hb)
        if use_events:
            sync.add_many(hb, queued, ha)
            sources["enqueue_calls"] = int(len(hb))
        fit = sync.fit() if len(sync) else ClockFit(0, 0.0, float("inf"), 0, consistent=False,
                                                     message="no clock samples")
        if use_events and not fit.consistent and len(base):
            log.warning("opencl: enqueue-call clock samples are inconsistent; fitting without them")
            fit = base.fit()
            sources.pop("enqueue_calls", None)
            sources["enqueue_calls_rejected"] = int(len(hb))
        meta = fit.to_dict()
        meta["sources"] = sources
        meta["device_clock"] = "CLOCK_MONOTONIC_RAW" if raw_clock else "device"
        meta["host_clock"] = "CLOCK_MONOTONIC"
        return fit, meta

    @staticmethod
    def _device_props(dev: Device) -> dict[str, object]:
        props: dict[str, object] = {}
        for attr in ("name", "version", "driver_version", "max_compute_units", "global_mem_size",
                     "max_work_group_size", "max_clock_frequency"):
            try:
                v = getattr(dev, attr)
                props[attr] = v.strip() if isinstance(v, str) else int(v)
            except Exception:
                continue
        try:
            import pyopencl as cl

            props["platform"] = dev.platform.name.strip()
            # pyopencl's stub types to_string as a classmethod of a plain function
            props["type"] = cl.device_type.to_string(dev.type)  # type: ignore[operator]
        except Exception:
            pass
        return props

    def _api_stats(self, b: TraceBuilder, c: calls.Calls, host_rows: np.ndarray, qkey: np.ndarray,
                   qinfo: dict[int, QueueInfo], dt: calls.DeviceTimes) -> None:
        """Stats of the API calls: kernel, grid, block, bytes, queue, what a wait waited
        for, blocking, incomplete."""
        from . import calls
        from . import intercept as ic

        all_rows = np.arange(c.n)
        self._size_stats(b, c, all_rows, host_rows)
        kr = np.flatnonzero(c.api == ic.KERNEL)
        if len(kr):
            b.add_stat(keys.KERNEL, host_rows[kr], calls.device_names(c, kr))
        qname = {k: v["name"] for k, v in qinfo.items()}
        qrows, qvals = [], []
        waits: list[tuple[int, int]] = []
        for i in np.flatnonzero(np.isin(c.api, (ic.EVENT_WAIT, ic.WAIT_FOR_EVENTS))).tolist():
            waited = [dt.ptr_to_row[p] for p in c.info[i] or () if p in dt.ptr_to_row]
            if waited:
                last = max(waited, key=lambda j: c.corr[j])
                waits.append((int(host_rows[i]), int(c.corr[last])))
                if int(qkey[last]) in qname:
                    qrows.append(int(host_rows[i]))
                    qvals.append(qname[int(qkey[last])])
        has_q = np.isin(qkey, list(qname)) if qname else np.zeros(c.n, bool)
        qrows.extend(host_rows[has_q].tolist())
        qvals.extend(qname[k] for k in qkey[has_q].tolist())
        if qrows:
            b.add_stat(keys.QUEUE, np.asarray(qrows, np.int64), np.asarray(qvals, object))
        if waits:
            w = np.asarray(waits, np.int64)
            b.add_stat(keys.WAITS_FOR, w[:, 0], w[:, 1])
        for key, mask in ((keys.BLOCKING, c.blocking), (keys.INCOMPLETE, dt.incomplete)):
            if mask.any():
                b.add_stat(key, host_rows[mask], np.ones(int(mask.sum()), np.int64))
