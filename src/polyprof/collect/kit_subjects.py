"""The conformance kit's subjects: the two ways of driving a plugin (a native library
through its raw C ABI, a Python plugin through ``start``/``stop``/``collect``), each
call timed against its limit; and the kit's limits and clause failures."""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar, Union

from ..errors import PluginError
from ..trace.core import Trace
from .clock import now_ns, wall_anchor
from .native import NativeHandle, NativePlugin, call_with_limit, open_handle
from .plugin import Plugin, SessionContext
from .guard import call_guarded
from .registry import ENV_PROBE_LIMIT, is_library_path, probe_limit, resolve_factory
from .remote import RemoteHandle

log = logging.getLogger("polyprof")

T = TypeVar("T")
I = TypeVar("I")  # what a subject drives: a native handle, or a Plugin  # noqa: E741
D = TypeVar("D")  # what its collect() returns: XSpace bytes, or a Trace
#: a native plugin, in a helper process or in this one
NativeInstance = Union[NativeHandle, RemoteHandle]


@dataclass
class Limits:
    """Time limits per call (seconds) and how long the kit's workload runs."""

    start_s: float = 5.0
    stop_s: float = 5.0
    collect_s: float = 30.0
    activity_s: float = 0.15



class ClauseFailed(Exception):
    """A clause does not hold; the message is the reason shown to the user."""


class CallTimeout(ClauseFailed):
    pass


class _Timings:
    """The calls of one subject: the longest time of each, the ones that overran."""

    kind = "?"

    def __init__(self, limits: Limits):
        self.limits = limits
        self.timings: dict[str, float] = {"start": 0.0, "stop": 0.0, "collect": 0.0}
        self.timeouts: list[str] = []
        #: the call each thread is in (what, start time, limit), for calls run in the
        #: caller's thread; :func:`_guarded` watches them from outside
        self.current: dict[int, tuple[str, float, float]] = {}

    def _timed(self, what: str, fn: Callable[[], T], *, in_thread: bool) -> T:
        limit = {"start": self.limits.start_s, "stop": self.limits.stop_s}.get(what, self.limits.collect_s)
        t0 = time.perf_counter()
        me = threading.get_ident()
        if not in_thread:
            self.current[me] = (what, t0, limit)
        try:
            if in_thread:
                try:
                    return call_with_limit(fn, f"kit-{what}", limit)
                except TimeoutError:
                    self.timeouts.append(f"{what}() did not return within {limit:g} s")
                    raise CallTimeout(f"{what}() did not return within {limit:g} s") from None
            return fn()
        finally:
            if not in_thread:
                self.current.pop(me, None)
            key = "collect" if what.startswith("collect") else what
            self.timings[key] = max(self.timings.get(key, 0.0), time.perf_counter() - t0)

    # overridden
    name = "?"
    describe = ""


class _Subject(_Timings, ABC, Generic[I, D]):
    """One way of driving a plugin: instances ``I`` whose collect gives ``D``."""

    @abstractmethod
    def new(self) -> I:
        """A new instance of the plugin."""
    def start(self, inst: I) -> None: ...
    def stop(self, inst: I, in_thread: bool = True) -> None: ...
    @abstractmethod
    def collect(self, inst: I) -> D:
        """What the instance collected."""
    def to_trace(self, inst: I, data: D) -> Trace:
        raise TypeError(f"{type(self).__name__} does not turn a plugin's data into a Trace")
    def dispose(self, inst: I) -> None: ...


class _NativeSubject(_Subject[NativeInstance, bytes]):
    kind = "native"

    def __init__(self, path: str, options: dict[str, object], limits: Limits):
        super().__init__(limits)
        self.path = path
        self.options = options
        h = self.new()
        self.name = h.name
        self.describe = (f"{h.name} from {h.path.name}: ABI {h.abi[0]}.{h.abi[1]}, plugin table "
                         f"{h.struct_size} bytes, clock {'own' if h.clock_domain else 'session'}, "
                         f"devices {','.join(h.device_kinds) or '-'}"
                         + ("" if isinstance(h, NativeHandle) else ", run in a helper process"))
        h.destroy()

    def new(self) -> NativeInstance:
        """An instance in a helper process, as sessions run it (a crash fails a clause,
        not the kit), or in this process with POLYPROF_NATIVE_IN_PROCESS=1. The kit times
        calls itself; the helper's own limit only ends a helper the kit abandoned."""
        lim = self.limits
        return open_handle(self.path, timeout_s=max(lim.start_s, lim.stop_s) + 30,
                           collect_timeout_s=lim.collect_s + 30)

    def start(self, inst: NativeInstance) -> None:
        self._timed("start", lambda: inst.start(self.options), in_thread=True)

    def stop(self, inst: NativeInstance, in_thread: bool = True) -> None:
        self._timed("stop", inst.stop, in_thread=True)

    def collect(self, inst: NativeInstance) -> bytes:
        return self._timed("collect", inst.collect_bytes, in_thread=True)

    def to_trace(self, inst: NativeInstance, data: bytes) -> Trace:
        from ..formats.xspace import from_bytes  # the XSpace reader: only when a native plugin is checked

        return from_bytes(data, source=f"native plugin {self.name}")

    def dispose(self, inst: NativeInstance) -> None:
        inst.destroy()


class _PythonSubject(_Subject[Plugin, Trace]):
    kind = "python"

    def __init__(self, factory: Callable[..., object], options: dict[str, object], limits: Limits):
        super().__init__(limits)
        self.factory = factory
        self.options = options
        avail = getattr(factory, "availability", None)
        if callable(avail):
            limit = probe_limit()  # as discovery asks it: a check that hangs fails load, not the kit
            out = call_guarded(avail, "polyprof-kit-availability", limit)
            if out.timed_out:
                raise ClauseFailed(f"its availability check did not return within {limit:g} s "
                                   f"({ENV_PROBE_LIMIT} sets the limit)")
            if out.error is not None:
                raise ClauseFailed(f"its availability check raised {type(out.error).__name__}: {out.error}")
            a = out.value
            if not a:
                raise ClauseFailed(f"not available here: {getattr(a, 'reason', a)}")
        inst = self.new()
        self.name = str(inst.name)
        self.describe = f"{inst.name}: {type(inst).__module__}.{type(inst).__qualname__}, " \
                        f"devices {','.join(getattr(inst, 'device_kinds', ()) or ()) or '-'}"

    def new(self) -> Plugin:
        inst = self.factory(**self.options)
        if not isinstance(inst, Plugin):
            raise ClauseFailed(f"the factory returned {type(inst).__name__}, not a polyprof Plugin")
        return inst

    def start(self, inst: Plugin) -> None:
        # Python plugins start in the caller's thread, as the session starts them
        # (profilers such as torch.profiler attach to the thread that starts them).
        ctx = SessionContext(start_ns=now_ns(), wall_anchor=wall_anchor())
        self._timed("start", lambda: inst.start(ctx), in_thread=False)

    def stop(self, inst: Plugin, in_thread: bool = False) -> None:
        self._timed("stop", inst.stop, in_thread=in_thread)

    def collect(self, inst: Plugin) -> Trace:
        return self._timed("collect", inst.collect, in_thread=True)

    def to_trace(self, inst: Plugin, data: Trace) -> Trace:
        return data

    def dispose(self, inst: Plugin) -> None:
        if getattr(inst, "_state", "") == "started":
            try:
                inst.stop()
            except Exception:
                pass


def _subject(target: str, options: dict[str, object], limits: Limits) -> _NativeSubject | _PythonSubject:
    """Turn a target (path.so, module:Factory, installed name) into a subject."""
    if is_library_path(target):
        return _NativeSubject(target, options, limits)
    try:
        factory = resolve_factory(target)
    except PluginError as e:
        raise ClauseFailed(str(e)) from None
    lib = getattr(factory, "library_path", None)
    if isinstance(factory, type) and issubclass(factory, NativePlugin) and lib:
        return _NativeSubject(lib, options, limits)
    if not (isinstance(factory, type) and issubclass(factory, Plugin)):
        made = factory(**options)  # a factory function: it may hand back a native plugin
        if isinstance(made, NativePlugin):
            path = str(made.handle.path)
            made.close()
            return _NativeSubject(path, options, limits)
    return _PythonSubject(factory, options, limits)
