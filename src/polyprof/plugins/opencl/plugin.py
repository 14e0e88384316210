"""OpenCL through pyopencl: host API calls, device activity per queue, one clock.

start: wrap pyopencl (intercept.py) so every queue profiles and every enqueue/wait is
recorded on its thread. stop: unwrap, flush the queues, wait (with a time limit) for
the commands still pending, take final clock samples. collect: read each event's
queued/submit/start/end, map device time to the session clock (trace/clock.py)
and write one track per (device, queue) with a flow from each launching call.

Clock samples, per device: every recorded enqueue is a free one (host time before the
call, the command's QUEUED timestamp, host time after); marker commands enqueued on
a private queue at stop add more; and when the device's timestamps turn out to be
CLOCK_MONOTONIC_RAW (PoCL's are), (MONOTONIC, RAW, MONOTONIC) triples read at start,
at stop and periodically in between pin the line to within a few hundred ns.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any

import numpy as np

from ...collect.clock import now_ns
from ...trace.clock import ClockFit, ClockSync
from ...collect.plugin import Availability, Plugin, SessionContext
from ...trace import keys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from . import intercept as ic
from . import probe
from .memory import ALLOC_NAMES, FREE_NAME, MemoryLog
from .probe import devices as _devices

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


class _RawSampler(threading.Thread):
    def __init__(self, interval: float):
        super().__init__(name="polyprof-opencl-clock", daemon=True)
        self.interval = interval
        self.halt = threading.Event()
        self.samples: list[tuple[int, int, int]] = []

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            self.samples.append(_raw_triple())


def _sizes_text(v: Any) -> str | None:
    """A work size as "x,y,z" (the grid/block stat format)."""
    if isinstance(v, int):
        return str(v)
    try:
        return ",".join(str(int(x)) for x in v)
    except Exception:
        return None


_sizes_cached = functools.lru_cache(maxsize=4096)(_sizes_text)


class OpenCLPlugin(Plugin):
    """Options: ``stop_timeout_s`` (10: how long stop waits for pending commands),
    ``sync_markers`` (16 marker samples per device at stop), ``clock_interval_s`` (0.1:
    period of RAW clock samples; 0 disables), ``event_samples`` (True: use each
    command's QUEUED time as a clock sample), ``max_drift_ppm`` (1000), ``memory`` (False:
    record buffer and image creation and release with their sizes; the session's
    ``memory=True`` sets it)."""

    name = "opencl"
    device_kinds = ("OpenCL",)

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """What `polyprof plugin check opencl` runs while the plugin records: a queue made
        without profiling, kernel launches and blocking reads, so every clause sees
        intercepted calls and device activity (and their clock mapping)."""
        import pyopencl as cl

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
        try:
            devs = _devices()
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

    # ---------------------------------------------------------------- lifecycle
    def _start(self, ctx: SessionContext) -> None:
        import pyopencl as cl

        self.cl = cl
        self.device_list = _devices()
        self.rec = ic.Recording()
        self.patcher = ic.Patcher()
        self.raw_start = [_raw_triple() for _ in range(8)] if _RAW is not None else []
        interval = float(self.options.get("clock_interval_s", 0.1))
        self.raw_sampler = _RawSampler(interval) if (_RAW is not None and interval > 0) else None
        self.memlog = MemoryLog() if self.options.get("memory") else None
        self.patcher.install(self.rec, self.memlog)
        if self.raw_sampler:
            self.raw_sampler.start()

    def _stop(self) -> None:
        self.rec.active = False
        if self.memlog is not None:
            self.memlog.active = False
        self.patcher.uninstall()
        if self.raw_sampler:
            self.raw_sampler.halt.set()
            self.raw_sampler.join(1.0)
        self.pending = self._wait_pending(float(self.options.get("stop_timeout_s", 10.0)))
        self.raw_stop = [_raw_triple() for _ in range(8)] if _RAW is not None else []
        self.markers = self._marker_samples(int(self.options.get("sync_markers", 16)))

    def _records(self) -> list[tuple[int, str, list[tuple]]]:
        if getattr(self, "_recs_cache", None) is None:
            self._recs_cache = self.rec.records()
        return self._recs_cache

    def _queues(self) -> dict[int, Any]:
        qs: dict[int, Any] = {}
        for _tid, _name, buf in self._records():
            for r in buf:
                q = r[5]
                if q is not None:
                    try:
                        qs.setdefault(q.int_ptr, q)
                    except Exception:
                        continue
        return qs

    def _wait_pending(self, timeout: float) -> set[int]:
        """Flush every queue, then wait for unfinished commands until ``timeout``;
        returns the int_ptr of the events still not complete."""
        cl = self.cl
        for q in self._queues().values():
            try:
                q.flush()
            except Exception:
                pass
        complete = int(cl.command_execution_status.COMPLETE)
        deadline = time.monotonic() + timeout
        pending: set[int] = set()
        for _tid, _name, buf in self._records():
            for r in buf:
                ev = r[4]
                if ev is None:
                    continue
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
            self.ctx.warn(self.name, f"{len(pending)} OpenCL commands still pending {timeout:g} s after stop; "
                                     "recorded as incomplete (stat incomplete=1) without device timing")
        return pending

    def _marker_samples(self, k: int) -> dict[int, list[tuple[int, int, int, int, int, Any]]]:
        """Per device (int_ptr): k (host before, raw before, event, raw after, host after)
        brackets around marker enqueues on a private profiling queue."""
        cl = self.cl
        out: dict[int, list] = {}
        if k <= 0:
            return out
        seen: set[int] = set()
        for q in self._queues().values():
            try:
                dev = q.device
                if dev.int_ptr in seen:
                    continue
                seen.add(dev.int_ptr)
                sq = cl._cl.CommandQueue(q.context, dev, cl.command_queue_properties.PROFILING_ENABLE)
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
                self.ctx.warn(self.name, f"clock samples from markers failed: {e}")
        return out

    # ---------------------------------------------------------------- collect
    def _collect(self) -> Trace:
        cl = self.cl
        pi = cl.profiling_info
        b = TraceBuilder()
        host = b.plane(keys.HOST_PLANE, "host", pid=os.getpid())
        dev_index = {d.int_ptr: i for i, d in enumerate(self.device_list)}

        # -------- flatten the records
        recs: list[tuple] = []
        thread_of: list[int] = []
        threads = self._records()
        for ti, (_tid, _name, buf) in enumerate(threads):
            recs.extend(buf)
            thread_of.extend([ti] * len(buf))
        n = len(recs)
        api = np.fromiter((r[0] for r in recs), np.int32, n)
        t0 = np.fromiter((r[1] for r in recs), np.int64, n)
        t1 = np.fromiter((r[2] for r in recs), np.int64, n)
        corr = np.fromiter((r[3] for r in recs), np.int64, n)
        thr = np.asarray(thread_of, np.int64)

        # -------- queues and devices
        qinfo: dict[int, dict[str, Any]] = {}  # queue int_ptr -> info
        qkey = np.full(n, -1, np.int64)
        for i, r in enumerate(recs):
            q = r[5]
            if q is None:
                continue
            try:
                p = q.int_ptr
            except Exception:
                continue
            qkey[i] = p
            if p not in qinfo:
                try:
                    dev = q.device
                    props = int(q.properties)
                except Exception:
                    continue
                di = dev_index.get(dev.int_ptr, len(dev_index))
                k = sum(1 for v in qinfo.values() if v["dev"] == di)
                qinfo[p] = {"dev": di, "device": dev, "local": k, "name": f"Queue {k}",
                            "out_of_order": bool(props & int(cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE))}

        # -------- device timestamps
        ts = np.full((n, 4), -1, np.int64)
        has_event = np.zeros(n, bool)
        incomplete = np.zeros(n, bool)
        unprofiled = 0
        ptr_to_row: dict[int, int] = {}
        pending = getattr(self, "pending", set())
        for i, r in enumerate(recs):
            ev = r[4]
            if ev is None:
                continue
            has_event[i] = True
            try:
                ptr = ev.int_ptr
                ptr_to_row[ptr] = i
                if ptr in pending:
                    incomplete[i] = True
                    continue
                ts[i] = (ev.get_profiling_info(pi.QUEUED), ev.get_profiling_info(pi.SUBMIT),
                         ev.get_profiling_info(pi.START), ev.get_profiling_info(pi.END))
            except Exception:
                unprofiled += 1
        if unprofiled:
            self.ctx.warn(self.name, f"{unprofiled} OpenCL commands have no profiling information (queues created "
                                     "before polyprof started cannot be made to profile); host calls only")
        timed = has_event & (ts[:, 3] > 0) & ~incomplete

        # -------- clock fits per device
        b.metadata["clock_sync"] = {}
        fits: dict[int, ClockFit] = {}
        dev_of_row = np.array([qinfo[k]["dev"] if k in qinfo else -1 for k in qkey.tolist()], np.int64) \
            if n else np.zeros(0, np.int64)
        for di in sorted({v["dev"] for v in qinfo.values()}):
            dev = next(v["device"] for v in qinfo.values() if v["dev"] == di)
            sel = timed & (dev_of_row == di)
            fit, meta = self._fit_device(dev, t0[sel], ts[sel, 0], t1[sel])
            fits[di] = fit
            pname = keys.device_plane("OpenCL", di)
            b.metadata["clock_sync"][pname] = meta
            if not fit.consistent:
                self.ctx.warn(self.name, f"{pname}: clock sync inconsistent: {fit.message}")

        # -------- host API events, per thread
        host_rows = np.full(n, -1, np.int64)
        names = np.array([ic.API[a][0] for a in range(len(ic.API))], object)
        for ti, (tid, tname, _buf) in enumerate(threads):
            sel = np.flatnonzero(thr == ti)
            if not len(sel):
                continue
            track = b.track(host, tname, "thread", tid=tid)
            rows = b.events(track, names[api[sel]], t0[sel], t1[sel] - t0[sel], CAT_API,
                            stats={keys.CORRELATION_ID: corr[sel]})
            host_rows[sel] = rows
        self._api_stats(b, recs, host_rows, api, qkey, qinfo, incomplete, ptr_to_row, corr)

        # -------- device events, one track per (device, queue)
        dev_rows = np.full(n, -1, np.int64)
        for qp, info in qinfo.items():
            di = info["dev"]
            sel = np.flatnonzero(timed & (qkey == qp))
            if not len(sel):
                continue
            dev = info["device"]
            plane = b.plane(keys.device_plane("OpenCL", di), "device", vendor=str(dev.vendor).strip(), index=di,
                            pid=1_000_000 + di, properties=self._device_props(dev))
            track = b.track(plane, info["name"], "queue", tid=info["local"],
                            properties={"out_of_order": info["out_of_order"], "int_ptr": int(qp)})
            fit = fits[di]
            start = fit.to_host(ts[sel, 2])
            end = np.maximum(fit.to_host(ts[sel, 3]), start)
            queued = fit.to_host(ts[sel, 0])
            dnames = np.array([self._device_name(recs[i]) for i in sel], object)
            cats = np.array([ic.API[a][2] for a in api[sel]], object)
            rows = b.events(track, dnames, start, end - start, cats, stats={
                keys.CORRELATION_ID: corr[sel],
                keys.QUEUE: np.full(len(sel), info["name"], object),
                keys.DEVICE: np.full(len(sel), di, np.int64),
                keys.QUEUE_DELAY: start - queued,
                keys.SUBMIT_DELAY: ts[sel, 1] - ts[sel, 0],
            })
            dev_rows[sel] = rows
            self._device_stats(b, recs, sel, rows)
        self._memory_events(b, host, dev_index)
        linked = (dev_rows >= 0) & (host_rows >= 0)
        b.flows(host_rows[linked], dev_rows[linked], corr[linked], "ac2g")
        b.metadata["opencl"] = {"api_calls": int(n), "device_events": int((dev_rows >= 0).sum()),
                                "incomplete": int(incomplete.sum()), "unprofiled": int(unprofiled),
                                "queues_made_profiling": self.patcher.factory.forced if self.patcher.factory else 0}
        self.rec = ic.Recording()  # drop the event references
        self._recs_cache = None
        self._kernel_names = {}
        return b.build()

    def _memory_events(self, b: TraceBuilder, host: int, dev_index: dict[int, int]) -> None:
        """Buffer and image creation and release (option ``memory``) as memory events on
        the thread that made them, the memory on its device's plane."""
        recs = list(self.memlog.records) if self.memlog is not None else []
        if not recs:
            return
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

    def _fit_device(self, dev: Any, hb: np.ndarray, queued: np.ndarray, ha: np.ndarray) -> tuple[ClockFit, dict]:
        """Fit device -> host for one device from all the sample sources we have."""
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
        fit = sync.fit() if len(sync) else ClockFit(0.0, 0.0, float("inf"), 0, consistent=False,
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
    def _device_props(dev: Any) -> dict[str, Any]:
        props: dict[str, Any] = {}
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
            props["type"] = cl.device_type.to_string(dev.type)
        except Exception:
            pass
        return props

    def _device_name(self, r: tuple) -> str:
        if r[0] == ic.KERNEL:
            k = r[6]
            cache = self.__dict__.setdefault("_kernel_names", {})
            name = cache.get(id(k))  # the kernels are alive (records hold them): ids are unique
            if name is None:
                try:
                    name = str(k.function_name)
                except Exception:
                    name = "kernel"
                cache[id(k)] = name
            return name
        return ic.API[r[0]][1]

    @staticmethod
    def _sizes(v: Any) -> str | None:
        if v is None:
            return None
        try:
            return _sizes_cached(v)
        except TypeError:  # unhashable (a list)
            return _sizes_text(v)

    def _api_stats(self, b: TraceBuilder, recs: list[tuple], host_rows: np.ndarray, api: np.ndarray,
                   qkey: np.ndarray, qinfo: dict, incomplete: np.ndarray, ptr_to_row: dict[int, int],
                   corr: np.ndarray) -> None:
        kern: list[tuple[int, str]] = []
        grid: list[tuple[int, str]] = []
        block: list[tuple[int, str]] = []
        nbytes: list[tuple[int, int]] = []
        queue: list[tuple[int, str]] = []
        waits: list[tuple[int, int]] = []
        blocking: list[int] = []
        for i, r in enumerate(recs):
            row = int(host_rows[i])
            a = r[0]
            if a == ic.KERNEL:
                kern.append((row, self._device_name(r)))
                gs, ls = self._sizes(r[7]), self._sizes(r[8])
                if gs:
                    grid.append((row, gs))
                if ls:
                    block.append((row, ls))
            elif isinstance(r[6], int) and r[6] >= 0:
                nbytes.append((row, r[6]))
            elif a in (ic.EVENT_WAIT, ic.WAIT_FOR_EVENTS):
                waited = [ptr_to_row[p] for p in r[6] if p in ptr_to_row]
                if waited:
                    last = max(waited, key=lambda j: corr[j])
                    waits.append((row, int(corr[last])))
                    if qkey[last] in qinfo:
                        queue.append((row, qinfo[qkey[last]]["name"]))
            if qkey[i] in qinfo:
                queue.append((row, qinfo[qkey[i]]["name"]))
            if r[9]:
                blocking.append(row)
        for key, pairs in ((keys.KERNEL, kern), (keys.GRID, grid), (keys.BLOCK, block), (keys.BYTES, nbytes),
                           (keys.QUEUE, queue), (keys.WAITS_FOR, waits)):
            if pairs:
                rows, vals = zip(*pairs)
                b.add_stat(key, np.asarray(rows, np.int64),
                           np.asarray(vals, np.int64 if key in (keys.BYTES, keys.WAITS_FOR) else object))
        if blocking:
            b.add_stat(keys.BLOCKING, np.asarray(blocking, np.int64), np.ones(len(blocking), np.int64))
        inc = np.flatnonzero(incomplete)
        if len(inc):
            b.add_stat(keys.INCOMPLETE, host_rows[inc], np.ones(len(inc), np.int64))

    def _device_stats(self, b: TraceBuilder, recs: list[tuple], sel: np.ndarray, rows: np.ndarray) -> None:
        grid: list[tuple[int, str]] = []
        block: list[tuple[int, str]] = []
        nbytes: list[tuple[int, int]] = []
        for i, row in zip(sel.tolist(), rows.tolist()):
            r = recs[i]
            if r[0] == ic.KERNEL:
                gs, ls = self._sizes(r[7]), self._sizes(r[8])
                if gs:
                    grid.append((row, gs))
                if ls:
                    block.append((row, ls))
            elif isinstance(r[6], int) and r[6] >= 0:
                nbytes.append((row, r[6]))
        for key, pairs in ((keys.GRID, grid), (keys.BLOCK, block), (keys.BYTES, nbytes)):
            if pairs:
                rr, vals = zip(*pairs)
                b.add_stat(key, np.asarray(rr, np.int64), np.asarray(vals, np.int64 if key == keys.BYTES else object))
