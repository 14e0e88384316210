"""The hot path: pyopencl's enqueue, wait and queue-creation entry points, wrapped.

Every wrapper reads the clock before and after the real call and appends one tuple
to the calling thread's list; nothing is converted here. Wrapped names are module
attributes (``pyopencl._cl`` and the ``pyopencl`` namespace), and methods of the
nanobind classes (``CommandQueue.finish``, ``Event.wait``, ``MemoryMap.release``):
pyopencl looks these up at call time, so ``cl.enqueue_copy``, ``Kernel.__call__`` and
``prg.kernel_name(queue, ...)`` all land in a wrapper. Queues are made profiling by
replacing ``pyopencl.CommandQueue`` with a factory that still passes ``isinstance``.
"""

from __future__ import annotations

import itertools
import threading
from time import perf_counter_ns as _now
from typing import TYPE_CHECKING, Callable, Iterable, SupportsInt

from .queues import QueueFactory, QueueRef, ReportedProperties, read_queue

if TYPE_CHECKING:
    import pyopencl._cl as _cl_types

    from .memory import MemoryLog

# api codes -> (host API name, device activity name, device category)
KERNEL, WRITE, READ, COPY, WRITE_RECT, READ_RECT, COPY_RECT, FILL = range(8)
READ_IMAGE, WRITE_IMAGE, COPY_IMAGE, COPY_IMAGE_TO_BUFFER, COPY_BUFFER_TO_IMAGE = range(8, 13)
MAP_BUFFER, MAP_IMAGE, UNMAP, MARKER_WL, MARKER, BARRIER_WL, BARRIER = range(13, 20)
FINISH, EVENT_WAIT, WAIT_FOR_EVENTS, FILL_IMAGE = range(20, 24)
SVM_MEMCPY, SVM_MEMFILL, SVM_MAP, SVM_UNMAP, MIGRATE = range(24, 29)

API: dict[int, tuple[str, str, str]] = {
    KERNEL: ("clEnqueueNDRangeKernel", "", "kernel"),
    WRITE: ("clEnqueueWriteBuffer", "WriteBuffer (HtoD)", "gpu_memcpy"),
    READ: ("clEnqueueReadBuffer", "ReadBuffer (DtoH)", "gpu_memcpy"),
    COPY: ("clEnqueueCopyBuffer", "CopyBuffer (DtoD)", "gpu_memcpy"),
    WRITE_RECT: ("clEnqueueWriteBufferRect", "WriteBufferRect (HtoD)", "gpu_memcpy"),
    READ_RECT: ("clEnqueueReadBufferRect", "ReadBufferRect (DtoH)", "gpu_memcpy"),
    COPY_RECT: ("clEnqueueCopyBufferRect", "CopyBufferRect (DtoD)", "gpu_memcpy"),
    FILL: ("clEnqueueFillBuffer", "FillBuffer", "gpu_memset"),
    READ_IMAGE: ("clEnqueueReadImage", "ReadImage (DtoH)", "gpu_memcpy"),
    WRITE_IMAGE: ("clEnqueueWriteImage", "WriteImage (HtoD)", "gpu_memcpy"),
    COPY_IMAGE: ("clEnqueueCopyImage", "CopyImage (DtoD)", "gpu_memcpy"),
    COPY_IMAGE_TO_BUFFER: ("clEnqueueCopyImageToBuffer", "CopyImageToBuffer (DtoD)", "gpu_memcpy"),
    COPY_BUFFER_TO_IMAGE: ("clEnqueueCopyBufferToImage", "CopyBufferToImage (DtoD)", "gpu_memcpy"),
    MAP_BUFFER: ("clEnqueueMapBuffer", "MapBuffer", "opencl_map"),
    MAP_IMAGE: ("clEnqueueMapImage", "MapImage", "opencl_map"),
    UNMAP: ("clEnqueueUnmapMemObject", "UnmapMemObject", "opencl_map"),
    MARKER_WL: ("clEnqueueMarkerWithWaitList", "Marker", "opencl_marker"),
    MARKER: ("clEnqueueMarker", "Marker", "opencl_marker"),
    BARRIER_WL: ("clEnqueueBarrierWithWaitList", "Barrier", "opencl_marker"),
    BARRIER: ("clEnqueueBarrier", "Barrier", "opencl_marker"),
    FINISH: ("clFinish", "", ""),
    EVENT_WAIT: ("clWaitForEvents", "", ""),
    WAIT_FOR_EVENTS: ("clWaitForEvents", "", ""),
    FILL_IMAGE: ("clEnqueueFillImage", "FillImage", "gpu_memset"),
    SVM_MEMCPY: ("clEnqueueSVMMemcpy", "SVMMemcpy", "gpu_memcpy"),
    SVM_MEMFILL: ("clEnqueueSVMMemFill", "SVMMemFill", "gpu_memset"),
    SVM_MAP: ("clEnqueueSVMMap", "SVMMap", "opencl_map"),
    SVM_UNMAP: ("clEnqueueSVMUnmap", "SVMUnmap", "opencl_map"),
    MIGRATE: ("clEnqueueMigrateMemObjects", "MigrateMemObjects", "gpu_memcpy"),
}
#: per generic enqueue (``wrap_generic``), the position of its ``wait_for`` argument in
#: pyopencl's signature (0: the queue); by keyword only for the rest
WAIT_FOR_AT = {COPY: 6, WRITE_RECT: 8, READ_RECT: 8, COPY_RECT: 8, FILL: 5, READ_IMAGE: 7, WRITE_IMAGE: 7,
               COPY_IMAGE: 6, COPY_IMAGE_TO_BUFFER: 6, COPY_BUFFER_TO_IMAGE: 6, FILL_IMAGE: 5, MAP_BUFFER: 8,
               MAP_IMAGE: 9, MARKER_WL: 1, BARRIER_WL: 1, SVM_MEMCPY: 4, SVM_MEMFILL: 4, SVM_MAP: 4,
               SVM_UNMAP: 2, MIGRATE: 3}
#: calls that make the host wait for the device
SYNC_APIS = frozenset({FINISH, EVENT_WAIT, WAIT_FOR_EVENTS})
#: calls that block by default (pyopencl's is_blocking=True)
BLOCKING_BY_DEFAULT = frozenset({READ, WRITE, READ_RECT, WRITE_RECT, READ_IMAGE, WRITE_IMAGE,
                                 MAP_BUFFER, MAP_IMAGE})


#: fields per record; the lists are flat (``extend`` with a temporary tuple) so the
#: garbage collector does not have to track one more tuple per call
STRIDE = 11


class Recording:
    """What the wrappers append to: one flat list per thread of
    ``api, t0, t1, corr, event, queue, info, global_size, local_size, blocking, waits``
    records (``info``: the kernel, a byte count, or the waited events' handles;
    ``waits``: the handles of the enqueue's event wait list, None for none); and
    the queues the program closed during the session (``id(queue)`` -> QueueRef)."""

    def __init__(self) -> None:
        self.active = True
        self.finished: dict[int, QueueRef] = {}
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._live: list[tuple[int, str, list[object]]] = []  # (native tid, name, records)
        self._stopped: list[tuple[int, str, list[object]]] | None = None
        self._corr = itertools.count(1)

    @property
    def threads(self) -> list[tuple[int, str, list[object]]]:
        """(native tid, thread name, flat records) per thread: as they were at ``stop``
        once it ran, else as they are now."""
        return self._stopped if self._stopped is not None else list(self._live)

    def stop(self) -> None:
        """End the recording at this instant: a wrapper of another thread that saw it
        active a moment ago may still append its call (its command was enqueued around
        this instant, and may not have completed when stop waits), but the recording
        read afterwards is the one of now (one ``extend`` per record is atomic)."""
        self.active = False
        with self._lock:
            self._stopped = [(tid, name, flat[:len(flat) // STRIDE * STRIDE]) for tid, name, flat in self._live]

    def records(self) -> list[tuple[int, str, list[tuple[object, ...]]]]:
        """(native tid, thread name, records as tuples) per thread, for collect."""
        out = []
        for tid, name, flat in self.threads:
            n = len(flat) // STRIDE * STRIDE
            it = iter(flat[:n])
            out.append((tid, name, list(zip(*[it] * STRIDE))))
        return out

    def buffer(self) -> list[object]:
        try:
            return self._tls.buf
        except AttributeError:
            buf: list[object] = []
            self._tls.buf = buf
            t = threading.current_thread()
            with self._lock:
                self._live.append((threading.get_native_id(), t.name, buf))
            return buf


_rec: Recording | None = None
_nanny_type: type[_cl_types.NannyEvent] | None = None
_event_from_ptr: Callable[[int, bool], _cl_types.Event] | None = None


def _plain(ev: object) -> object:
    """A NannyEvent keeps the user's host array alive; hold a plain wrapper of the same
    cl_event instead, so the user's program frees memory as it would unprofiled."""
    if _nanny_type is not None and isinstance(ev, _nanny_type) and _event_from_ptr is not None:
        return _event_from_ptr(ev.int_ptr, True)
    return ev


def _nbytes(obj: object) -> int:
    n = getattr(obj, "nbytes", None)
    if isinstance(n, SupportsInt):
        return int(n)
    try:
        return memoryview(obj).nbytes  # type: ignore[arg-type]  # any buffer; TypeError if not one
    except TypeError:
        return -1


def _int(v: object, default: int) -> int:
    """An int argument (a size, a byte count), or ``default`` if it is not a number."""
    return int(v) if isinstance(v, SupportsInt) else default


def _handles(wait_for: object) -> tuple[int, ...] | None:
    """The cl_event handles of an enqueue's ``wait_for`` (None for none): the events
    themselves are not kept (a NannyEvent would keep the user's host array alive). Each
    is an event a recorded enqueue returned (the recording holds it: its handle is not
    reused meanwhile) or one polyprof did not record (left out at collect)."""
    if not wait_for:
        return None
    return tuple(int(e.int_ptr) for e in wait_for)  # type: ignore[attr-defined]  # (an iterable of events)


def _wait_for(args: tuple, kwargs: dict, i: int) -> object:
    """The ``wait_for`` argument: positional ``i`` (after the wrapper's named ones) or by keyword."""
    return args[i] if len(args) > i else kwargs.get("wait_for")


def _rec_call(api: int, t0: int, t1: int, ev: object, queue: object, info: object, blocking: bool,
              waits: tuple[int, ...] | None = None) -> None:
    rec = _rec
    if rec is None or not rec.active:
        return
    try:
        buf = rec._tls.buf
    except AttributeError:
        buf = rec.buffer()
    buf.extend((api, t0, t1, next(rec._corr), _plain(ev) if ev is not None else None, queue, info,
                None, None, blocking, waits))


# ----------------------------------------------------------------------------- wrappers


def wrap_kernel(orig: Callable[..., object]) -> Callable[..., object]:
    def enqueue_nd_range_kernel(queue: object, kernel: object, global_work_size: object, local_work_size: object,
                                *args: object, **kwargs: object) -> object:
        t0 = _now()
        ev = orig(queue, kernel, global_work_size, local_work_size, *args, **kwargs)
        t1 = _now()
        rec = _rec  # inlined _rec_call: this is the hottest path
        if rec is not None and rec.active:
            try:
                try:
                    buf = rec._tls.buf
                except AttributeError:
                    buf = rec.buffer()
                # (global_work_offset, wait_for, ...: pyopencl's kernel call passes them by position)
                wf = args[1] if len(args) > 1 else kwargs.get("wait_for")
                buf.extend((KERNEL, t0, t1, next(rec._corr), ev, queue, kernel, global_work_size,
                            local_work_size, False, _handles(wf) if wf else None))
            except Exception:  # never into the user's program
                pass
        return ev

    enqueue_nd_range_kernel.__wrapped__ = orig  # type: ignore[attr-defined]
    return enqueue_nd_range_kernel


def wrap_host_transfer(orig: Callable[..., object], api: int) -> Callable[..., object]:
    """read/write buffer: (queue, mem, hostbuf, offset=0, wait_for=None, is_blocking=True)."""

    def host_transfer(queue: object, mem: object, hostbuf: object, *args: object, **kwargs: object) -> object:
        t0 = _now()
        ev = orig(queue, mem, hostbuf, *args, **kwargs)
        t1 = _now()
        rec = _rec
        if rec is not None and rec.active:
            try:
                try:
                    buf = rec._tls.buf
                except AttributeError:
                    buf = rec.buffer()
                blocking = kwargs.get("is_blocking", args[2] if len(args) > 2 else True)
                nbytes = getattr(hostbuf, "nbytes", None)
                if nbytes is None:
                    nbytes = _nbytes(hostbuf)
                buf.extend((api, t0, t1, next(rec._corr), _plain(ev), queue, nbytes, None, None,
                            bool(blocking), _handles(_wait_for(args, kwargs, 1))))
            except Exception:
                pass
        return ev

    host_transfer.__wrapped__ = orig  # type: ignore[attr-defined]
    return host_transfer


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: object = None) -> object:
    """Positional argument i (0 = queue) or keyword ``name``."""
    if name in kwargs:
        return kwargs[name]
    return args[i] if len(args) > i else default


def _prod(region: object) -> int:
    """The product of a region's or a shape's sizes; -1 if it is not a sequence of ints."""
    if not isinstance(region, (tuple, list)):
        return -1
    n = 1
    for r in region:
        n *= _int(r, -1)
    return n if n >= 0 else -1


def _info_for(api: int, args: tuple, kwargs: dict, result: object) -> tuple[object, bool]:
    """(info, blocking) for the generic wrappers; bytes where they can be known cheaply."""
    if api == COPY:
        n = _int(_arg(args, kwargs, 3, "byte_count", -1), -1)
        if n < 0:
            n = min(_int(getattr(args[1], "size", -1), -1), _int(getattr(args[2], "size", -1), -1))
        return n, False
    if api in (WRITE_RECT, READ_RECT):
        return _prod(_arg(args, kwargs, 5, "region")), bool(_arg(args, kwargs, 9, "is_blocking", True))
    if api == COPY_RECT:
        return _prod(_arg(args, kwargs, 5, "region")), False
    if api == FILL:
        return _int(_arg(args, kwargs, 4, "size", 0), -1), False
    if api in (READ_IMAGE, WRITE_IMAGE):
        return _nbytes(_arg(args, kwargs, 4, "hostbuf")), bool(_arg(args, kwargs, 8, "is_blocking", True))
    if api == MAP_BUFFER:
        import numpy as np

        shape = _arg(args, kwargs, 4, "shape")
        shape = (shape,) if isinstance(shape, int) else shape
        dtype = _arg(args, kwargs, 5, "dtype")
        itemsize = np.dtype(dtype).itemsize if isinstance(dtype, (np.dtype, type, str)) else -1
        size = _prod(shape)
        return size * itemsize if size >= 0 and itemsize >= 0 else -1, \
            bool(_arg(args, kwargs, 9, "is_blocking", True))
    if api == MAP_IMAGE:
        return -1, bool(_arg(args, kwargs, 10, "is_blocking", True))
    if api in (SVM_MEMCPY, SVM_MAP):
        return -1, bool(args[1]) if len(args) > 1 else True
    return -1, False


def wrap_generic(orig: Callable[..., object], api: int) -> Callable[..., object]:
    """object other enqueue whose first argument is the queue and which returns an event
    (or, for map, ``(array, event)``, or None for the old barrier)."""

    def enqueue(*args: object, **kwargs: object) -> object:
        t0 = _now()
        res = orig(*args, **kwargs)
        t1 = _now()
        try:
            queue = args[0] if args else kwargs.get("queue")
            ev = res[1] if api in (MAP_BUFFER, MAP_IMAGE) and isinstance(res, tuple) else res
            info, blocking = _info_for(api, args, kwargs, res)
            pos = WAIT_FOR_AT.get(api, -1)
            _rec_call(api, t0, t1, ev, queue, info, blocking,
                      _handles(kwargs.get("wait_for") if pos < 0 else _wait_for(args, kwargs, pos)))
        except Exception:
            pass
        return res

    enqueue.__wrapped__ = orig  # type: ignore[attr-defined]
    return enqueue


def wrap_unmap(orig: Callable[..., object]) -> Callable[..., object]:
    def release(self: object, queue: object = None, wait_for: object = None) -> object:
        t0 = _now()
        ev = orig(self, queue, wait_for)
        t1 = _now()
        try:
            _rec_call(UNMAP, t0, t1, ev, queue if queue is not None else getattr(ev, "command_queue", None),
                      -1, False, _handles(wait_for))
        except Exception:
            pass
        return ev

    release.__wrapped__ = orig  # type: ignore[attr-defined]
    return release


def wrap_finish(orig: Callable[..., object]) -> Callable[..., object]:
    def finish(self: object) -> object:
        t0 = _now()
        r = orig(self)
        t1 = _now()
        try:
            _rec_call(FINISH, t0, t1, None, self, None, True)
        except Exception:
            pass
        return r

    finish.__wrapped__ = orig  # type: ignore[attr-defined]
    return finish


def wrap_finalize(orig: Callable[..., object]) -> Callable[..., object]:
    """``CommandQueue._finalize`` (``with CommandQueue(...) as q`` ends with it): read the
    queue while it still answers, so that stop and collect never touch it again."""

    def _finalize(self: object) -> object:
        rec = _rec
        if rec is not None and id(self) not in rec.finished:
            ref = read_queue(self, closed=True)
            if ref is not None:
                rec.finished[id(self)] = ref
        return orig(self)

    _finalize.__wrapped__ = orig  # type: ignore[attr-defined]
    return _finalize


def wrap_event_wait(orig: Callable[..., object]) -> Callable[..., object]:
    def wait(self: _cl_types.Event) -> object:
        t0 = _now()
        r = orig(self)
        t1 = _now()
        try:
            if _rec is not None and _rec.active:
                _rec_call(EVENT_WAIT, t0, t1, None, None, (self.int_ptr,), True)
        except Exception:
            pass
        return r

    wait.__wrapped__ = orig  # type: ignore[attr-defined]
    return wait


def wrap_wait_for_events(orig: Callable[..., object]) -> Callable[..., object]:
    def wait_for_events(events: Iterable[_cl_types.Event]) -> object:
        t0 = _now()
        r = orig(events)
        t1 = _now()
        try:
            if _rec is not None and _rec.active:
                _rec_call(WAIT_FOR_EVENTS, t0, t1, None, None, tuple(e.int_ptr for e in events), True)
        except Exception:
            pass
        return r

    wait_for_events.__wrapped__ = orig  # type: ignore[attr-defined]
    return wait_for_events


# ----------------------------------------------------------------------------- patching

#: (name in pyopencl._cl, api, wrapper kind)
_CL_FUNCS: list[tuple[str, int, str]] = [
    ("enqueue_nd_range_kernel", KERNEL, "kernel"),
    ("_enqueue_write_buffer", WRITE, "host"),
    ("_enqueue_read_buffer", READ, "host"),
    ("_enqueue_copy_buffer", COPY, "generic"),
    ("_enqueue_write_buffer_rect", WRITE_RECT, "generic"),
    ("_enqueue_read_buffer_rect", READ_RECT, "generic"),
    ("_enqueue_copy_buffer_rect", COPY_RECT, "generic"),
    ("_enqueue_fill_buffer", FILL, "generic"),
    ("_enqueue_read_image", READ_IMAGE, "generic"),
    ("_enqueue_write_image", WRITE_IMAGE, "generic"),
    ("_enqueue_copy_image", COPY_IMAGE, "generic"),
    ("_enqueue_copy_image_to_buffer", COPY_IMAGE_TO_BUFFER, "generic"),
    ("_enqueue_copy_buffer_to_image", COPY_BUFFER_TO_IMAGE, "generic"),
    ("enqueue_fill_image", FILL_IMAGE, "generic"),
    ("enqueue_map_buffer", MAP_BUFFER, "generic"),
    ("enqueue_map_image", MAP_IMAGE, "generic"),
    ("_enqueue_marker_with_wait_list", MARKER_WL, "generic"),
    ("_enqueue_marker", MARKER, "generic"),
    ("_enqueue_barrier_with_wait_list", BARRIER_WL, "generic"),
    ("_enqueue_barrier", BARRIER, "generic"),
    ("_enqueue_svm_memcpy", SVM_MEMCPY, "generic"),
    ("_enqueue_svm_memfill", SVM_MEMFILL, "generic"),
    ("_enqueue_svm_map", SVM_MAP, "generic"),
    ("_enqueue_svm_unmap", SVM_UNMAP, "generic"),
    ("enqueue_migrate_mem_objects", MIGRATE, "generic"),
    ("wait_for_events", WAIT_FOR_EVENTS, "wait_for_events"),
]


class Patcher:
    """Installs the wrappers and takes every one of them out again."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object, object]] = []  # owner, name, before, ours
        self.factory: QueueFactory | None = None

    def _set(self, owner: object, name: str, value: object) -> None:
        self._undo.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name),
                           value))
        setattr(owner, name, value)

    def install(self, rec: Recording, memory_log: MemoryLog | None = None) -> None:
        """The wrappers; with a ``memory.MemoryLog``, buffer and image sizes too."""
        global _rec, _nanny_type, _event_from_ptr
        import pyopencl as cl
        import pyopencl._cl as _cl

        _nanny_type = _cl.NannyEvent
        _event_from_ptr = _cl.Event.from_int_ptr
        for name, api, kind in _CL_FUNCS:
            orig = getattr(_cl, name, None)
            if orig is None:
                continue
            if kind == "kernel":
                w = wrap_kernel(orig)
            elif kind == "host":
                w = wrap_host_transfer(orig, api)
            elif kind == "wait_for_events":
                w = wrap_wait_for_events(orig)
            else:
                w = wrap_generic(orig, api)
            self._set(_cl, name, w)
            # the same function re-exported in the pyopencl namespace
            if getattr(cl, name, None) is orig:
                self._set(cl, name, w)
        self._set(_cl.CommandQueue, "finish", wrap_finish(_cl.CommandQueue.__dict__["finish"]))
        if "_finalize" in _cl.CommandQueue.__dict__:
            self._set(_cl.CommandQueue, "_finalize", wrap_finalize(_cl.CommandQueue.__dict__["_finalize"]))
        self._set(_cl.Event, "wait", wrap_event_wait(_cl.Event.__dict__["wait"]))
        if "release" in _cl.MemoryMap.__dict__:
            self._set(_cl.MemoryMap, "release", wrap_unmap(_cl.MemoryMap.__dict__["release"]))
        if cl.CommandQueue is _cl.CommandQueue:  # (a capture server's factory stays as it is)
            self.factory = QueueFactory(_cl.CommandQueue, cl.command_queue_properties.PROFILING_ENABLE)
            self._set(cl, "CommandQueue", self.factory)
            reported = self.factory.reported_properties()
            if reported is not None:
                self._set(_cl.CommandQueue, "properties", reported)
        if memory_log is not None:
            from . import memory

            memory.install(self._set, memory_log)
        _rec = rec

    def uninstall(self) -> None:
        global _rec
        _rec = None
        while self._undo:
            owner, name, before, ours = self._undo.pop()
            if (isinstance(ours, QueueFactory) and ours.kept) or \
                    (isinstance(ours, ReportedProperties) and ours.factory.kept):
                continue  # a capture server keeps queues profiling (early.py)
            setattr(owner, name, before)
