"""Native plugins: shared libraries speaking the C ABI of ``include/polyprof/plugin.h``.

A vendor whose profiler is C or C++ ships a ``.so`` exporting ``polyprof_plugin_init``;
this module loads it with ctypes, checks what it filled (struct sizes, ABI version,
required functions) and wraps it as a :class:`~polyprof.collect.plugin.Plugin`, so the
session drives it like any Python plugin: same lifecycle checks, same isolation, time
limits on every call into native code. The plugin hands its data back as a serialized
XSpace, read by :func:`polyprof.formats.xspace.from_bytes`.

Where native plugins come from is collect/registry.py's job: ``--plugin path.so``,
``POLYPROF_PLUGIN_PATH`` (colon-separated ``.so`` files or directories), or a Python
package's entry point whose factory is :func:`native_factory` bound to the ``.so`` it
ships.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar

from ..errors import PluginError
from ..trace.clock import ClockSync, retime
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from .abi import (  # noqa: F401 - the ABI layer (collect/abi.py), re-exported
    _CANARY,
    _REQUIRED,
    ABI_MAJOR,
    ABI_MINOR,
    CLOCK_FN,
    CLOCK_OWN,
    CLOCK_SESSION,
    CODE_NAMES,
    COLLECT_FN,
    DESTROY_FN,
    ERR_BUFFER_TOO_SMALL,
    ERR_INTERNAL,
    ERR_INVALID_ARGUMENT,
    ERR_STATE,
    ERR_UNAVAILABLE,
    ERR_VERSION,
    GUARD,
    INIT_SYMBOL,
    LOG_FN,
    MESSAGE_SIZE,
    NOW_FN,
    OK,
    PLACEMENT_ANY,
    PLACEMENT_IN_PROCESS,
    START_FN,
    STOP_FN,
    TABLE_CAPACITY,
    TABLE_SIZE_1_0,
    HostApi,
    NativeCallError,
    NativeHandle,
    NativeUnavailable,
    PluginTable,
    Status,
    _end_of,
    _libs,
    _libs_lock,
    _open_library,
    code_name,
)
from .clock import now_ns
from .plugin import Availability, Plugin, SessionContext

if TYPE_CHECKING:
    from ..formats.xplane_pb2 import XSpace
    from .remote import RemoteHandle

log = logging.getLogger("polyprof")


# ------------------------------------------------------------------------ clock sync
def take_samples(sync: ClockSync, read: Callable[[], int], tries: int = 8) -> None:
    """A few bracketed reads of the plugin's clock; the convex-hull fit keeps what binds."""
    for _ in range(tries):
        a = now_ns()
        p = read()
        sync.add(a, p, now_ns())


def map_clock(trace: Trace, sync: ClockSync) -> dict[str, object]:
    """Move a trace from the plugin's clock onto the session clock, in place
    (trace/clock.py: convex-hull offset and drift with an accuracy bound)."""
    fit = sync.fit()
    retime(trace, fit, record=False)
    return {**fit.to_dict(), "method": "bracketed samples at start and stop, convex hull (trace/clock.py)",
            "uncertainty_ns": fit.bound_ns}


# ------------------------------------------------------------------------ XSpace checks
def xspace_problems(space: XSpace, limit: int = 4) -> list[str]:
    """What is structurally wrong with a parsed XSpace (undefined metadata ids,
    negative times, unnamed planes); empty when nothing is."""
    problems: list[str] = []
    for plane in space.planes:
        label = plane.name or f"plane id {plane.id}"
        if not plane.name:
            problems.append(f"{label} has no name")
        ev_ids = set(plane.event_metadata.keys())
        st_ids = set(plane.stat_metadata.keys())
        bad_ev: dict[int, int] = {}
        bad_st: set[int] = set()
        negative = 0
        for st in plane.stats:
            if st.metadata_id not in st_ids:
                bad_st.add(st.metadata_id)
        for line in plane.lines:
            for e in line.events:
                if e.metadata_id not in ev_ids:
                    bad_ev[e.metadata_id] = bad_ev.get(e.metadata_id, 0) + 1
                if e.duration_ps < 0 or (e.WhichOneof("data") == "offset_ps" and e.offset_ps < 0):
                    negative += 1
                for st in e.stats:
                    if st.metadata_id not in st_ids:
                        bad_st.add(st.metadata_id)
        for m in plane.event_metadata.values():
            for st in m.stats:
                if st.metadata_id not in st_ids:
                    bad_st.add(st.metadata_id)
        if bad_ev:
            ids = ", ".join(str(i) for i in sorted(bad_ev)[:5])
            problems.append(f"{label}: {sum(bad_ev.values())} events refer to event metadata ids "
                            f"never defined in the plane ({ids})")
        if bad_st:
            problems.append(f"{label}: stats refer to undefined stat metadata ids "
                            f"({', '.join(str(i) for i in sorted(bad_st)[:5])})")
        if negative:
            problems.append(f"{label}: {negative} events with a negative offset or duration")
    return problems[:limit]


# ------------------------------------------------------------------------ the plugin
R = TypeVar("R")
#: options NativePlugin reads itself; the rest go to the plugin's start() as JSON
_OWN_OPTIONS = ("call_timeout_s", "collect_timeout_s", "in_process")


def call_with_limit(fn: Callable[[], R], what: str, limit_s: float) -> R:
    """Run ``fn`` in a thread; PluginError if it does not return within ``limit_s``.

    Native code cannot be interrupted: a call that overruns is abandoned (its thread
    keeps running) and the plugin is never called again.
    """
    value: list[R] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            value.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            error.append(e)

    t = threading.Thread(target=run, name=f"polyprof-{what}", daemon=True)
    t.start()
    t.join(limit_s)
    if t.is_alive():
        raise TimeoutError(f"{what} did not return within {limit_s:g} s")
    if error:
        raise error[0]
    return value[0]


ENV_IN_PROCESS = "POLYPROF_NATIVE_IN_PROCESS"


def in_process_default() -> bool:
    """Whether native plugins run inside the program (opt-in: POLYPROF_NATIVE_IN_PROCESS=1)."""
    return os.environ.get(ENV_IN_PROCESS, "") not in ("", "0")


def open_handle(path: str | Path, in_process: bool | None = None, timeout_s: float | None = 60.0,
                collect_timeout_s: float | None = 60.0) -> NativeHandle | RemoteHandle:
    """A handle on a native plugin: in a helper process (default; collect/remote.py),
    or loaded into this process when ``in_process`` (or POLYPROF_NATIVE_IN_PROCESS=1)."""
    if in_process if in_process is not None else in_process_default():
        return NativeHandle(path)
    from .remote import RemoteHandle  # the helper process's client: only for a plugin run out of process

    h = RemoteHandle(path, timeout_s=timeout_s, collect_timeout_s=collect_timeout_s)
    if h.placement == PLACEMENT_IN_PROCESS and in_process is None:  # it says it must live in the program
        log.info("native plugin %s asks to run inside the program (placement IN_PROCESS)", h.name)
        h.destroy()
        return NativeHandle(path)
    return h


class NativePlugin(Plugin):
    """A native plugin as a session plugin, run in a helper process so a crash, hang or
    memory overwrite in vendor code is a reported plugin error (collect/remote.py).

    Options: ``call_timeout_s`` (time limit for start() and stop(), default 10 s);
    ``collect_timeout_s`` (60 s; the session's collect limit applies too);
    ``in_process`` (True: load the library into the program, as before; faster calls,
    no protection; also POLYPROF_NATIVE_IN_PROCESS=1); every other option is handed to
    the plugin's start() as JSON.
    """

    name: ClassVar[str] = "native"
    #: set on the classes made by :func:`native_factory`
    library_path: ClassVar[str | None] = None

    def __init__(self, path: str | Path | None = None, **options: Any):  # read as Plugin's are
        super().__init__(**options)
        target = path or self.library_path
        if target is None:
            raise PluginError("NativePlugin needs the path of a shared library")
        self.call_timeout_s = float(options.get("call_timeout_s", 10.0))
        inproc = options.get("in_process")
        self.handle = open_handle(target, None if inproc is None else bool(inproc), self.call_timeout_s,
                                  float(options.get("collect_timeout_s", 60.0)))
        self.remote = not isinstance(self.handle, NativeHandle)
        self.name = self.handle.name  # type: ignore[misc]  # per instance: what the library says
        self.device_kinds = self.handle.device_kinds  # type: ignore[misc]
        self._poisoned = False  # a call overran its limit: never call into the library again
        self._sync = ClockSync()
        self._start_failed = False

    def _limited(self, fn: Callable[[], R], what: str) -> R:
        if self._poisoned:
            raise PluginError(f"{self.name}: an earlier call overran its time limit; not calling {what}()")
        if self.remote:  # the helper process enforces the limit (and is killed past it)
            return fn()
        try:
            return call_with_limit(fn, f"{self.name}.{what}", self.call_timeout_s)
        except TimeoutError as e:
            self._poisoned = True
            raise PluginError(f"{self.name}: {e}") from None

    def _start(self, ctx: SessionContext) -> None:
        opts = {k: v for k, v in self.options.items() if k not in _OWN_OPTIONS}
        if self.handle.clock_domain == CLOCK_OWN:
            self._sync = ClockSync()
            self._clock_samples()
        self.start_ns = now_ns()
        try:
            self._limited(lambda: self.handle.start(opts), "start")
        except NativeCallError:
            self._start_failed = True  # it said no: nothing runs, so it may be destroyed
            raise

    def _stop(self) -> None:
        self._limited(self.handle.stop, "stop")
        self.stop_ns = now_ns()
        if self.handle.clock_domain == CLOCK_OWN:
            self._clock_samples()

    def _clock_samples(self) -> None:
        h = self.handle
        if isinstance(h, NativeHandle):
            take_samples(self._sync, h.clock_now)
        else:  # bracketed in the helper, next to the plugin (same CLOCK_MONOTONIC)
            for a, p, b in h.clock_samples(8):
                self._sync.add(a, p, b)

    def _collect(self) -> Trace:
        from ..formats.xspace import from_space, parse  # the XSpace reader: only when a native plugin hands data over

        if self._poisoned:
            raise PluginError(f"{self.name}: an earlier call overran its time limit; not collecting")
        try:
            data = self.handle.collect_bytes()
        finally:
            self.close()
        source = f"native plugin {self.name} ({self.handle.path})"
        space = parse(data, source)
        problems = xspace_problems(space)
        if problems:  # the reader would guess (empty names...); the session reports it instead
            raise PluginError(f"{self.name}: collect() returned a malformed XSpace: {'; '.join(problems)}")
        trace = from_space(space, source)
        info: dict[str, object] = {"library": str(self.handle.path), "abi": "%d.%d" % tuple(self.handle.abi),
                                "process": "helper" if self.remote else "in-process",
                                "struct_size": self.handle.struct_size, "bytes": len(data),
                                "clock": "session" if self.handle.clock_domain == CLOCK_SESSION else "own"}
        fit = map_clock(trace, self._sync) if len(self._sync) else None
        xs = trace.metadata.get(mkeys.XSPACE, {})
        info["xspace"] = {k: xs[k] for k in ("hostnames", "errors", "warnings") if k in xs}
        # The session's metadata (clock, source...) describes the merged trace, not this part.
        trace.metadata = {mkeys.NATIVE_PLUGINS: {self.name: info}}
        if fit is not None:  # the library's own clock, mapped onto the session's for each of its planes
            for plane in {p.name for p in trace.planes}:
                mkeys.record_fit(trace.metadata, plane, self.name, fit)
        return trace

    def close(self) -> None:
        """Free the native instance (after collect, or if it was never started)."""
        h = self.handle
        if not isinstance(h, NativeHandle):  # destroy when that is safe; a helper still running is just ended
            if not self._poisoned and (self._state != "started" or self._start_failed):
                h.destroy()
            else:
                h.close()
        elif not self._poisoned and (self._state != "started" or self._start_failed):
            self.handle.destroy()

    def __del__(self) -> None:
        try:
            if getattr(self, "handle", None) is not None:
                self.close()
        except Exception:
            pass

    @classmethod
    def availability(cls) -> Availability:
        if cls.library_path is None:
            return Availability(False, "no library: use load_native(path) or native_factory(path)")
        return describe(cls.library_path).availability


# ------------------------------------------------------------------------ discovery
@dataclass
class Description:
    path: Path
    name: str
    device_kinds: tuple[str, ...]
    availability: Availability


_described: dict[tuple[str, float], Description] = {}


def describe(path: str | Path) -> Description:
    """Name, device kinds and availability of a library (init + destroy, cached)."""
    p = Path(path).resolve()
    try:
        key = (str(p), p.stat().st_mtime)
    except OSError:
        return Description(p, p.stem, (), Availability(False, f"{p}: no such file"))
    if key not in _described:
        try:  # init in a helper process: a library that crashes in init is just unavailable
            h = open_handle(p, timeout_s=30.0)
            d = Description(p, h.name, h.device_kinds, Availability(True))
            h.destroy()
        except PluginError as e:
            d = Description(p, p.stem.removeprefix("lib"), (), Availability(False, str(e)))
        _described[key] = d
    return _described[key]


def load_native(path: str | Path, **options: Any) -> NativePlugin:
    """A native plugin from a shared library, ready to hand to a session."""
    return NativePlugin(path, **options)


def native_factory(path: str | Path, name: str | None = None) -> type[NativePlugin]:
    """A plugin class bound to one library, for a package's entry point::

        # mypkg/__init__.py, with [project.entry-points."polyprof.plugins"] myvendor = "mypkg:Factory"
        Factory = native_factory(Path(__file__).parent / "libmyvendor.so")
    """
    d = describe(path)
    attrs = {"library_path": str(d.path), "name": name or d.name, "device_kinds": d.device_kinds,
             "__doc__": f"Native plugin {name or d.name} from {d.path}"}
    return type(f"Native_{(name or d.name).replace('-', '_')}", (NativePlugin,), attrs)
