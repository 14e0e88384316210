"""CUDA device activity for any framework, from CUPTI through NVIDIA's cupti-python.

start: take CUPTI's subscriber slot (or defer, in one line, to the tool that holds
it), have NVTX report to CUPTI, register the buffer callbacks (buffers.py), enable the
activity kinds, take clock samples. stop: flush CUPTI's buffers
(``cuptiActivityFlushAll``), disable the kinds, take the last clock samples, keep the
completed buffers, give the subscriber slot back. collect: decode the buffers and
build the trace (convert.py), on the session clock (clock.py); no CUPTI call. A session
schedule's unrecorded steps disable the activity kinds (pause/resume).

One recorder of device activity per session: while this plugin records, the torch
plugin leaves CUDA out of torch.profiler (holder.py), so every kernel appears once; when
torch.profiler already holds CUPTI at this plugin's start, this plugin defers to it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from ...collect.plugin import Availability, Plugin, SessionContext
from ...trace import metadata_keys as mkeys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from . import holder

log = logging.getLogger("polyprof")

NVTX_ENV = "NVTX_INJECTION64_PATH"


#: what names devices, contexts and streams: kept on while a schedule pauses recording
_RESOURCE_KINDS = (8, 9)  # layout.DEVICE, layout.CONTEXT

#: CUDA runtime and driver calls that only read state: frameworks make several around
#: every launch (torch: 8 records per ``add_``, 1 of them the kernel) and libraries
#: thousands at load (``cuGetProcAddress``). Counted with their time
#: (``metadata["cupti"]["calls_not_kept"]``), not kept as events, unless the option
#: ``query_calls`` is true. Names without CUPTI's ``_vNNNN`` suffix.
QUERY_CALLS = frozenset({
    # runtime
    "cudaGetDevice", "cudaGetDeviceCount", "cudaGetDeviceProperties", "cudaDeviceGetAttribute",
    "cudaGetLastError", "cudaPeekAtLastError", "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cudaOccupancyMaxActiveClusters", "cudaOccupancyAvailableDynamicSMemPerBlock",
    "cudaOccupancyMaxPotentialClusterSize", "cudaFuncGetAttributes", "cudaPointerGetAttributes",
    "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
    "cudaDeviceGetStreamPriorityRange", "cudaStreamGetPriority", "cudaStreamGetFlags",
    # driver
    "cuGetProcAddress", "cuDeviceGetAttribute", "cuCtxGetCurrent", "cuCtxGetDevice", "cuDeviceGet",
    "cuDeviceGetCount", "cuDeviceGetName", "cuDeviceGetUuid", "cuDeviceTotalMem", "cuDriverGetVersion",
    "cuPointerGetAttribute", "cuPointerGetAttributes", "cuFuncGetAttribute", "cuKernelGetName",
    "cuKernelGetAttribute", "cuModuleGetLoadingMode", "cuStreamIsCapturing", "cuStreamGetCaptureInfo",
    "cuCtxGetStreamPriorityRange", "cuDevicePrimaryCtxGetState", "cuGetErrorString", "cuGetErrorName",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cuOccupancyMaxActiveClusters", "cuCtxGetApiVersion", "cuCtxGetFlags", "cuStreamGetCtx",
    "cuStreamGetPriority", "cuStreamGetFlags",
})


def query_call_ids() -> list[tuple[int, int]]:
    """(kind, cbid) of every :data:`QUERY_CALLS` call this cupti-python's enums name."""
    from . import layout
    from .convert import api_names

    return [(kind, cbid) for kind, driver in ((layout.RUNTIME, False), (layout.DRIVER, True))
            for cbid, name in sorted(api_names(driver).items()) if name in QUERY_CALLS]


def default_kinds(unified_memory: bool = False, nvtx_markers: bool = True) -> list[int]:
    """The activity kinds a session enables; ``nvtx_markers``: CUPTI's NVTX records (MARKER),
    only when libcupti is NVTX's injection library (polyprof's own library not in use)."""
    from . import layout as L

    kinds = [L.DEVICE, L.CONTEXT, L.CONCURRENT_KERNEL, L.MEMCPY, L.MEMCPY2, L.MEMSET, L.RUNTIME, L.DRIVER,
             L.SYNCHRONIZATION, L.EXTERNAL_CORRELATION]
    if nvtx_markers:
        kinds.append(L.MARKER)
    if unified_memory:
        kinds.append(L.UNIFIED_MEMORY_COUNTER)
    return kinds


def calls_not_kept(rows: list[tuple[int, int, int, int]]) -> dict[str, dict[str, int]]:
    """The sink's (kind, cbid, calls, ns) of the calls left out, by function name."""
    from . import layout
    from .convert import api_names

    out: dict[str, dict[str, int]] = {}
    for kind, cbid, calls, ns in rows:
        driver = kind == layout.DRIVER
        name = api_names(driver).get(cbid, f"{'cu' if driver else 'cuda'} API {cbid}")
        was = out.setdefault(name, {"calls": 0, "total_ns": 0})
        was["calls"] += int(calls)
        was["total_ns"] += int(ns)
    return out


def kineto_holds_cupti() -> str | None:
    """Why torch.profiler (Kineto) is recording CUDA in this process now, or None."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch._C._autograd._profiler_enabled():
            return None
        kineto = torch._C._autograd._kineto_enabled() if hasattr(torch._C._autograd, "_kineto_enabled") else True
    except Exception:
        return None
    if kineto:
        return "torch.profiler (Kineto) is recording in this process and holds CUPTI"
    return None


def session_torch_records() -> bool:
    """Whether polyprof's own torch plugin is recording with torch.profiler now."""
    import sys

    mod = sys.modules.get("polyprof.plugins.torch.plugin")
    tp = mod.active_plugin() if mod is not None else None
    return tp is not None and getattr(tp, "_prof", None) is not None


class CuptiPlugin(Plugin):
    """Options (``options={"cupti": {...}}``): ``unified_memory`` (False: also unified-memory
    transfers and page faults; the session's ``memory=True`` does not set it),
    ``nvtx`` (True: NVTX ranges and marks through CUPTI, by setting ``NVTX_INJECTION64_PATH``
    to libcupti until stop, only when polyprof's own NVTX library is not the injection:
    the host plugin records NVTX through it in every session, plugins/nvtx/recorder.py),
    ``buffer_bytes`` (8 MiB per CUPTI buffer), ``clock_interval_s`` (0.5: clock samples
    between start and stop), ``implementation`` ("c" or "python": which buffer sink),
    ``demangle`` (True: C++ kernel names as C++ writes them), ``device`` (the device
    layer; a test passes a fake)."""

    name = "cupti"
    option_names = frozenset(("implementation", "clock_interval_s", "nvtx", "buffer_bytes", "query_calls",
                                "unified_memory", "max_drift_ppm", "demangle"))
    device_kinds = ("CUDA",)
    default = True

    def __init__(self, **options: Any) -> None:
        self._device = options.pop("device", None)
        super().__init__(**options)
        self._deferred: str | None = None
        self._problems: list[str] = []
        self._batches: list[Any] = []
        self._counts: dict[str, Any] = {}
        self._not_kept: list[tuple[int, int, int, int]] = []  # (kind, cbid, calls, ns) of calls left out
        self._kinds: list[int] = []
        self._nvtx_env_set = False
        self._sink_problems: list[str] = []  # buffers the Python sink could not read
        self._nvtx_via = "off"  # "polyprof" (its own library, host plugin), "cupti" (MARKER), or "off"
        self._threads: dict[int, str] = {}
        self._lock = threading.Lock()
        self._paused = False  # a session schedule's steps not recorded (pause() may come before start)

    @property
    def time_limited(self) -> bool:
        """start and stop call CUPTI (a flush can wait on the driver): time limited.
        collect is CPU work on the buffers stop kept (no CUPTI call): run on the session's
        thread with no limit, which could only drop a long run's activity (a million
        launches take seconds to convert)."""
        return self._state != "stopped"

    @classmethod
    def availability(cls) -> Availability:
        from .availability import problem

        why = problem()
        return Availability(why is None, why or "")

    @classmethod
    def session_availability(cls) -> Availability:
        """What a default session asks: cupti-python installed and the NVIDIA driver's
        library loads (no driver call; the device is asked for at start)."""
        from .availability import session_problem

        why = session_problem()
        return Availability(why is None, why or "")

    def _defer(self, why: str) -> None:
        self._deferred = why
        if self.ctx is not None:
            self.ctx.warn(self.name, f"{why}; CUDA activity is not recorded by the cupti plugin in this session")

    # ------------------------------------------------------------------ lifecycle
    def _start(self, ctx: SessionContext) -> None:
        why = kineto_holds_cupti()
        if why:
            if session_torch_records():  # this session's torch plugin started first: it records CUDA
                self._deferred = "the torch plugin records CUDA activity in this session (Kineto holds CUPTI)"
                log.info("plugin cupti: %s", self._deferred)
            else:
                self._defer(why)
            return
        if self._device is None:
            from .device import CuptiDevice

            self._device = CuptiDevice()
        dev = self._device
        why = dev.subscribe()
        if why:
            self._defer(why)
            return
        from .buffers import IMPLEMENTATION
        from .clock import ClockSampler

        o = self.options
        self.implementation = str(o.get("implementation", IMPLEMENTATION))
        try:
            self.clock = ClockSampler(dev.timestamp, float(o.get("clock_interval_s", 0.5)))
            self.clock.start()
            if self.clock.errors:
                raise RuntimeError(f"cuptiGetTimestamp failed: {self.clock.errors[0]}")
            dev.system_thread_ids()
            if o.get("nvtx", True):
                self._nvtx_injection(dev)
            self.sink = dev.sink(self.implementation, int(o.get("buffer_bytes", 8 << 20)),
                                 () if o.get("query_calls", False) else query_call_ids())
        except Exception as e:  # CUPTI cannot record: give the slot back, say why once
            dev.unsubscribe()
            self._defer(f"CUPTI did not start ({type(e).__name__}: {e})")
            return
        self._wanted = default_kinds(bool(o.get("unified_memory", False)), self._nvtx_via == "cupti")
        with self._lock:
            failed = self._enable([k for k in self._wanted if not self._paused or k in _RESOURCE_KINDS])
        if failed:
            self._problems.append("activity kinds not enabled: " + "; ".join(failed))
            ctx.warn(self.name, self._problems[-1])
        holder.set_holder(self.name)
        self._threads = self._thread_names()

    def _enable(self, kinds: list[int]) -> list[str]:
        """Enable ``kinds``; what failed, as "KIND (why)"."""
        from .layout import KIND_NAMES

        failed = []
        for kind in kinds:
            if kind in self._kinds:
                continue
            try:
                self._device.enable(kind)
                self._kinds.append(kind)
            except Exception as e:
                failed.append(f"{KIND_NAMES.get(kind, kind)} ({e})")
        return failed

    # ------------------------------------------------------------------ schedule
    def pause(self) -> None:
        """A session schedule's steps not to record: CUPTI stops making records of
        activity (devices and contexts stay on, to name what comes later)."""
        with self._lock:
            self._paused = True
            if self._state != "started" or self._deferred is not None:
                return
            for kind in [k for k in self._kinds if k not in _RESOURCE_KINDS]:
                try:
                    self._device.disable(kind)
                    self._kinds.remove(kind)
                except Exception as e:
                    self._problems.append(f"pause: {kind} not disabled ({e})")

    def resume(self) -> None:
        """Recording again (a schedule's warm-up and active steps)."""
        with self._lock:
            self._paused = False
            if self._state != "started" or self._deferred is not None or not hasattr(self, "_wanted"):
                return
            failed = self._enable(self._wanted)
        if failed:
            self._problems.append("resume: activity kinds not enabled: " + "; ".join(failed))

    def _nvtx_injection(self, dev: Any) -> None:
        """NVTX calls reach CUPTI only when libcupti is NVTX's injection library, which
        NVTX reads from the environment at its first call in the process. When it names
        polyprof's own library (the host plugin set it), NVTX is recorded there: CUPTI's
        MARKER records are not needed (and CUPTI 13.0 makes none for registered strings)."""
        from ..nvtx.recorder import injects

        current = os.environ.get(NVTX_ENV)
        if current and injects():
            self._nvtx_via = "polyprof"
            return
        path = dev.library_path()
        self._nvtx_via = "cupti"
        if current and current != path:
            self._nvtx_via = "off"
            self._problems.append(f"{NVTX_ENV} names another tool ({current}); NVTX ranges are not recorded")
            return
        if current is None:
            os.environ[NVTX_ENV] = path
            self._nvtx_env_set = True  # unset at stop: processes started later do not load CUPTI

    def _stop(self) -> None:
        if self._deferred is not None:
            return
        dev = self._device
        try:
            dev.flush()
        except Exception as e:
            self._problems.append(f"cuptiActivityFlushAll failed ({type(e).__name__}: {e}); "
                                  "the activity of the last buffer may be missing")
        with self._lock:
            for kind in self._kinds:
                try:
                    dev.disable(kind)
                except Exception:
                    pass
            self._kinds = []
        try:
            dev.flush()  # what was recorded while the kinds were being disabled
        except Exception:
            pass
        self.clock.stop()
        if self._nvtx_env_set:
            os.environ.pop(NVTX_ENV, None)
        self._batches = self.sink.take()
        self._counts = self.sink.counts()
        self._not_kept = self.sink.calls_not_kept()
        self._sink_problems = list(getattr(self.sink, "problems", []))
        try:
            dev.unsubscribe()
        finally:
            holder.set_holder(None)
        self._threads.update(self._thread_names())  # names of threads started since, kept for ended ones

    @staticmethod
    def _thread_names() -> dict[int, str]:
        return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}

    def _collect(self) -> Trace:
        if self._deferred is not None:
            b = TraceBuilder({mkeys.CUPTI: {"deferred": self._deferred}})
            return b.build()
        from .buffers import Records
        from .convert import Converter

        fit, clock_meta = self.clock.fit(float(self.options.get("max_drift_ppm", 1000.0)))
        if not fit.consistent and self.ctx is not None:
            self.ctx.warn(self.name, f"clock sync inconsistent: {fit.message}")
        rec = Records.of(self._batches)
        n_records = len(rec.kinds)
        conv = Converter(rec, fit, threads=self._threads,
                         demangle=bool(self.options.get("demangle", True)))
        del rec  # the converter lets the records go once it has decoded them
        dropped = int(self._counts.get("dropped", 0))
        if dropped and self.ctx is not None:
            self.ctx.warn(self.name, f"CUPTI dropped {dropped} activity records (buffers full); "
                                     "raise options cupti.buffer_bytes")
        for line in self._sink_problems:
            self._problems.append(line)
            if self.ctx is not None:
                self.ctx.warn(self.name, line)
        short = {k: int(self._counts.get(k, 0)) for k in ("walks_cut_short", "buffers_not_allocated")}
        if any(short.values()) and self.ctx is not None:
            self.ctx.warn(self.name, f"CUPTI buffers not read whole: {short['walks_cut_short']} walks cut short "
                                     f"(a record CUPTI could not size), {short['buffers_not_allocated']} buffers "
                                     "not allocated (out of memory)")
        trace = conv.build()
        planes = [p.name for p in trace.planes if p.kind == "device"]
        trace.metadata[mkeys.CLOCK_SYNC] = {}
        for p in planes:  # the GPU clock, mapped onto the session's: keyed by plane, then plugin
            mkeys.record_fit(trace.metadata, p, self.name, clock_meta)
        trace.metadata[mkeys.CUPTI] = {"implementation": self.implementation, "nvtx": self._nvtx_via,
                                       "records": n_records, **conv.counts,
                                       "calls_not_kept": calls_not_kept(self._not_kept),
                                       "buffers": self._counts, "problems": self._problems}
        return trace
