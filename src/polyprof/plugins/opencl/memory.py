"""OpenCL memory objects: buffer and image creation and release, with their sizes.

With the session's ``memory=True``, ``pyopencl.Buffer`` and ``pyopencl.Image`` are
replaced by stand-ins that make the real object and note (time, size, handle, device,
thread); ``pyopencl.array`` and ``create_image`` look these names up at call time, so
their allocations are seen too. nanobind types ignore a replaced ``__init__`` and take
no weak references, so the release is seen by a small object kept in the memory
object's ``__dict__``: its ``__del__`` runs when the memory object is freed (CPython
frees it when the last reference goes), or ``MemoryObject.release()`` fires it first.
Not seen: memory from pyopencl's C++ allocators and pools (``tools.MemoryPool``),
sub-buffers (they share their parent's memory) and SVM.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter_ns as _now

ATTR = "_polyprof_mem"  # the key of the release watcher in a memory object's __dict__
#: record fields: time, signed bytes, handle, device int_ptr, native thread id, thread name, kind
ALLOC_NAMES = {"buffer": "clCreateBuffer", "image": "clCreateImage"}
FREE_NAME = "clReleaseMemObject"


class MemoryLog:
    """The allocation and release records of one session (appended from any thread)."""

    def __init__(self) -> None:
        self.active = True
        self.records: list[tuple[int, int, int, int, int, str, str]] = []
        self._devices: dict[int, int] = {}  # context int_ptr -> its first device's int_ptr

    def note(self, nbytes: int, handle: int, device: int, kind: str) -> None:
        t = threading.current_thread()
        self.records.append((_now(), nbytes, handle, device, threading.get_native_id(), t.name, kind))

    def device_of(self, context: object) -> int:
        try:
            key = getattr(context, "int_ptr", None)
            if not isinstance(key, int):
                return 0  # not a Context: the memory is still counted
            dev = self._devices.get(key)
            if dev is None:
                dev = self._devices[key] = int(getattr(context, "devices", [])[0].int_ptr)
            return dev
        except Exception:  # no device: the memory is still counted
            return 0


class _Release:
    """Kept in a memory object's ``__dict__``; notes the release once."""

    __slots__ = ("device", "handle", "kind", "log", "nbytes")

    def __init__(self, log: MemoryLog, nbytes: int, handle: int, device: int, kind: str):
        self.log: MemoryLog | None = log
        self.nbytes, self.handle, self.device, self.kind = nbytes, handle, device, kind

    def fire(self) -> None:
        log, self.log = self.log, None
        if log is not None and log.active:
            log.note(-self.nbytes, self.handle, self.device, self.kind)

    def __del__(self) -> None:
        try:
            self.fire()
        except Exception:  # never raise from a finaliser into the program
            pass


class MemoryFactory:
    """Stands in for ``pyopencl.Buffer`` / ``pyopencl.Image``: makes the real object and
    notes its size; ``isinstance``, subclassing and class attributes behave as the real
    class (a subclass of the stand-in is a subclass of the real class, not watched)."""

    def __init__(self, base: type, kind: str, log: MemoryLog):
        self._base, self._kind, self._log = base, kind, log

    def __call__(self, context: object, *args: object, **kwargs: object) -> object:
        obj = self._base(context, *args, **kwargs)
        log = self._log
        if log.active:
            try:
                nbytes, handle = int(getattr(obj, "size", -1)), int(getattr(obj, "int_ptr", -1))
                dev = log.device_of(context)
                log.note(nbytes, handle, dev, self._kind)
                obj.__dict__[ATTR] = _Release(log, nbytes, handle, dev, self._kind)
            except Exception:  # an object we cannot read stays the user's, unwatched
                pass
        return obj

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, self._base)

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, self._base)

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (self._base,)

    def __getattr__(self, name: str) -> object:
        return getattr(self._base, name)

    def __or__(self, other: object) -> object:
        return self._base | other

    def __ror__(self, other: object) -> object:
        return other | self._base

    def __repr__(self) -> str:
        return f"<polyprof memory-recording factory for {self._base!r}>"


def wrap_release(orig: Callable[[object], object]) -> Callable[[object], object]:
    """``MemoryObject.release``: the memory is freed now, not when the object goes."""

    def release(self: object) -> object:
        try:
            watcher = self.__dict__.pop(ATTR, None)
        except AttributeError:  # no __dict__: not one of ours
            watcher = None
        out = orig(self)
        if watcher is not None:
            watcher.fire()
        return out

    release.__wrapped__ = orig  # type: ignore[attr-defined]
    return release


def install(set_attr: Callable[[object, str, object], None], log: MemoryLog) -> None:
    """Put the stand-ins in place through the patcher's ``set_attr`` (which undoes them)."""
    import pyopencl as cl
    from pyopencl import _cl

    for name, kind in (("Buffer", "buffer"), ("Image", "image")):
        base = getattr(_cl, name, None)
        if getattr(cl, name, None) is base and isinstance(base, type):
            set_attr(cl, name, MemoryFactory(base, kind, log))
    if "release" in _cl.MemoryObject.__dict__:
        set_attr(_cl.MemoryObject, "release", wrap_release(_cl.MemoryObject.__dict__["release"]))
