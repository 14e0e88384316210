"""Native plugins: shared libraries speaking the C ABI of ``include/polyprof/plugin.h``.

A vendor whose profiler is C or C++ ships a ``.so`` exporting ``polyprof_plugin_init``;
this module loads it with ctypes, checks what it filled (struct sizes, ABI version,
required functions) and wraps it as a :class:`~polyprof.collect.plugin.Plugin`, so the
session drives it like any Python plugin: same lifecycle checks, same isolation, time
limits on every call into native code. The plugin hands its data back as a serialized
XSpace, read by :func:`polyprof.formats.xspace.from_bytes`.

Where native plugins come from: ``--plugin path.so`` on the CLI (:func:`load_target`),
``POLYPROF_PLUGIN_PATH`` (colon-separated ``.so`` files or directories, see
:func:`path_plugins`, used by the registry), or a Python package's entry point whose
factory is :func:`native_factory` bound to the ``.so`` it ships.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, TypeVar

import numpy as np

from ..errors import PluginError
from ..trace.core import Trace
from .clock import now_ns
from ..trace.clock import ClockSync, retime
from .plugin import Availability, Plugin, SessionContext

log = logging.getLogger("polyprof")

ABI_MAJOR = 1
ABI_MINOR = 2
INIT_SYMBOL = "polyprof_plugin_init"
ENV_PATH = "POLYPROF_PLUGIN_PATH"

OK, ERR_STATE, ERR_BUFFER_TOO_SMALL, ERR_INVALID_ARGUMENT, ERR_VERSION, ERR_UNAVAILABLE, ERR_INTERNAL = range(7)
CODE_NAMES = {OK: "OK", ERR_STATE: "ERR_STATE", ERR_BUFFER_TOO_SMALL: "ERR_BUFFER_TOO_SMALL",
              ERR_INVALID_ARGUMENT: "ERR_INVALID_ARGUMENT", ERR_VERSION: "ERR_VERSION",
              ERR_UNAVAILABLE: "ERR_UNAVAILABLE", ERR_INTERNAL: "ERR_INTERNAL"}
CLOCK_SESSION, CLOCK_OWN = 0, 1
PLACEMENT_ANY, PLACEMENT_IN_PROCESS = 0, 1
MESSAGE_SIZE = 512
#: bytes polyprof allocates for the plugin table: room for many future minor versions
TABLE_CAPACITY = 1024
#: canary bytes after every collect buffer, to catch a plugin writing past its end
GUARD = 64
_CANARY = 0xA5


def code_name(code: int) -> str:
    return CODE_NAMES.get(code, f"code {code}")


# ------------------------------------------------------------------------ the C structs
class Status(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("code", ctypes.c_int32),
                ("message", ctypes.c_char * MESSAGE_SIZE)]

    @classmethod
    def new(cls) -> "Status":
        st = cls()
        st.struct_size = ctypes.sizeof(cls)
        return st

    @property
    def text(self) -> str:
        return self.message.decode("utf-8", "replace")


NOW_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p)
START_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Status))
STOP_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(Status))
COLLECT_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(Status))
DESTROY_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
CLOCK_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)


class HostApi(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("abi_major", ctypes.c_uint32),
                ("abi_minor", ctypes.c_uint32), ("host_data", ctypes.c_void_p), ("now_ns", NOW_FN),
                ("session_clock_id", ctypes.c_int32),
                # minor 1
                ("log", LOG_FN),
                # minor 2
                ("profiled_pid", ctypes.c_int64)]


class PluginTable(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("abi_major", ctypes.c_uint32),
                ("abi_minor", ctypes.c_uint32), ("name", ctypes.c_char_p),
                ("device_kinds", ctypes.c_char_p), ("self", ctypes.c_void_p), ("start", START_FN),
                ("stop", STOP_FN), ("collect", COLLECT_FN), ("destroy", DESTROY_FN),
                # minor 1
                ("clock_domain", ctypes.c_int32), ("clock_now_ns", CLOCK_FN),
                # minor 2
                ("placement", ctypes.c_int32)]


def _end_of(struct: type[ctypes.Structure], field: str) -> int:
    f = getattr(struct, field)
    return f.offset + f.size


#: size of the plugin table in ABI 1.0: anything smaller cannot be a valid table
TABLE_SIZE_1_0 = _end_of(PluginTable, "destroy")
_REQUIRED = ("start", "stop", "collect", "destroy")


class NativeCallError(PluginError):
    """A call into a native plugin returned an error code (kept in ``code``)."""

    def __init__(self, plugin: str, function: str, code: int, message: str):
        self.plugin, self.function, self.code, self.detail = plugin, function, code, message
        super().__init__(f"{plugin}: {function}() returned {code_name(code)}"
                         + (f": {message}" if message else ""))


class NativeUnavailable(PluginError):
    """The library loaded but says it cannot run here (POLYPROF_ERR_UNAVAILABLE)."""


_libs: dict[str, ctypes.CDLL] = {}
_libs_lock = threading.Lock()


def _open_library(path: Path) -> ctypes.CDLL:
    """dlopen once per path (never closed: code of a plugin may still run in a thread)."""
    key = str(path)
    with _libs_lock:
        lib = _libs.get(key)
        if lib is None:
            if not path.is_file():
                raise PluginError(f"{path}: no such native plugin library")
            try:
                lib = ctypes.CDLL(key, mode=os.RTLD_LOCAL | os.RTLD_NOW)
            except OSError as e:
                raise PluginError(f"{path}: cannot load shared library: {e}") from None
            _libs[key] = lib
        return lib


class NativeHandle:
    """One instance of a native plugin: the raw ABI, each call returning or raising.

    This is the layer the conformance kit drives (it bypasses the lifecycle checks
    :class:`NativePlugin` adds, to see what the native code itself does).
    """

    def __init__(self, path: str | Path, profiled_pid: int | None = None):
        self.path = Path(path).resolve()
        lib = _open_library(self.path)
        try:
            init = getattr(lib, INIT_SYMBOL)
        except AttributeError:
            raise PluginError(f"{self.path}: does not export {INIT_SYMBOL}(); "
                              "not a polyprof native plugin") from None
        init.restype = ctypes.c_int32
        init.argtypes = [ctypes.POINTER(HostApi), ctypes.c_void_p, ctypes.POINTER(Status)]
        # the callbacks must outlive the plugin: keep them on self
        self._now = NOW_FN(lambda _data: now_ns())
        self._log = LOG_FN(self._on_log)
        self.host = HostApi(ctypes.sizeof(HostApi), ABI_MAJOR, ABI_MINOR, None, self._now,
                            int(getattr(time, "CLOCK_MONOTONIC", -1)), self._log,
                            os.getpid() if profiled_pid is None else int(profiled_pid))
        self._table_mem = (ctypes.c_ubyte * TABLE_CAPACITY)()
        table = PluginTable.from_buffer(self._table_mem)
        table.struct_size = TABLE_CAPACITY
        status = Status.new()
        self.name = self.path.stem
        self._destroyed = True
        code = init(ctypes.byref(self.host), ctypes.addressof(self._table_mem), ctypes.byref(status))
        if code == ERR_UNAVAILABLE:
            raise NativeUnavailable(f"{self.path}: not available here: {status.text or 'no reason given'}")
        if code != OK:
            raise PluginError(f"{self.path}: {INIT_SYMBOL}() returned {code_name(code)}"
                              + (f": {status.text}" if status.text else ""))
        try:
            self._validate(table)
        except PluginError:  # refuse it, but free what its init allocated
            if int(table.struct_size) >= TABLE_SIZE_1_0 and ctypes.cast(table.destroy, ctypes.c_void_p).value:
                table.destroy(table.self)
            raise
        self._destroyed = False

    def _validate(self, t: PluginTable) -> None:
        """Check what init filled; read only the fields its struct_size covers."""
        size = int(t.struct_size)
        if size == TABLE_CAPACITY:
            raise PluginError(f"{self.path}: init did not set PolyprofPlugin.struct_size "
                              "(use polyprof_plugin_fill)")
        if size < TABLE_SIZE_1_0:
            raise PluginError(f"{self.path}: PolyprofPlugin.struct_size is {size} bytes, smaller than "
                              f"ABI 1.0's {TABLE_SIZE_1_0}: not a valid plugin table")
        if t.abi_major != ABI_MAJOR:
            raise PluginError(f"{self.path}: built for plugin ABI {t.abi_major}.{t.abi_minor}; this "
                              f"polyprof speaks ABI {ABI_MAJOR}.x")
        self.struct_size = size
        self.abi = (int(t.abi_major), int(t.abi_minor))
        if not t.name:
            raise PluginError(f"{self.path}: PolyprofPlugin.name is NULL or empty")
        self.name = t.name.decode("utf-8", "replace")
        self.device_kinds = tuple(k.strip() for k in (t.device_kinds or b"").decode("utf-8", "replace")
                                  .split(",") if k.strip())
        missing = [f for f in _REQUIRED if not ctypes.cast(getattr(t, f), ctypes.c_void_p).value]
        if missing:
            raise PluginError(f"{self.path}: plugin {self.name!r} leaves required function(s) "
                              f"{', '.join(missing)} NULL")
        self.self_ptr = t.self
        self._start, self._stop, self._collect, self._destroy = t.start, t.stop, t.collect, t.destroy
        self.clock_domain = CLOCK_SESSION
        self._clock: Callable[[Any], int] | None = None
        if self.covers("clock_domain"):
            self.clock_domain = int(t.clock_domain)
            if self.clock_domain not in (CLOCK_SESSION, CLOCK_OWN):
                raise PluginError(f"{self.path}: unknown clock_domain {self.clock_domain}")
        self.placement = int(t.placement) if self.covers("placement") else PLACEMENT_ANY
        if self.placement not in (PLACEMENT_ANY, PLACEMENT_IN_PROCESS):
            raise PluginError(f"{self.path}: unknown placement {self.placement}")
        if self.clock_domain == CLOCK_OWN:
            if not self.covers("clock_now_ns") or not ctypes.cast(t.clock_now_ns, ctypes.c_void_p).value:
                raise PluginError(f"{self.path}: clock_domain is POLYPROF_CLOCK_OWN but clock_now_ns is NULL")
            self._clock = t.clock_now_ns

    def covers(self, field: str) -> bool:
        """Whether the plugin's struct_size includes ``field`` (a later-minor field)."""
        return self.struct_size >= _end_of(PluginTable, field)

    def _on_log(self, _data: Any, level: int, message: bytes | None) -> None:
        try:
            log.log(int(level) or logging.INFO, "native plugin %s: %s", self.name,
                    (message or b"").decode("utf-8", "replace"))
        except Exception:  # a callback must never raise into C
            pass

    # ------------------------------------------------------------------ raw calls
    def _check(self, function: str, code: int, status: Status) -> None:
        if code != OK:
            raise NativeCallError(self.name, function, code, status.text)

    def start(self, options: dict[str, Any] | None = None) -> None:
        st = Status.new()
        opts = json.dumps(options or {}, default=str).encode()
        self._check("start", self._start(self.self_ptr, opts, ctypes.byref(st)), st)

    def stop(self) -> None:
        st = Status.new()
        self._check("stop", self._stop(self.self_ptr, ctypes.byref(st)), st)

    def collect_raw(self, buffer: Any, capacity: int) -> tuple[int, int, str]:
        """One collect() call: (code, *size, message); ``buffer`` None asks the size."""
        st = Status.new()
        size = ctypes.c_size_t(0)
        ptr = None if buffer is None else ctypes.addressof(buffer)
        code = self._collect(self.self_ptr, ptr, capacity, ctypes.byref(size), ctypes.byref(st))
        return int(code), int(size.value), st.text

    def collect_bytes(self) -> bytes:
        """The two-call protocol: ask the size, then fill a buffer of that size."""
        code, need, msg = self.collect_raw(None, 0)
        if code not in (OK, ERR_BUFFER_TOO_SMALL):  # the header says OK; accept both
            raise NativeCallError(self.name, "collect", code, msg)
        for _ in range(3):  # the size may legitimately grow between the calls; retry
            buf = (ctypes.c_ubyte * (need + GUARD))()
            ctypes.memset(ctypes.addressof(buf) + need, _CANARY, GUARD)
            code, size, msg = self.collect_raw(buf, need)
            if bytes(buf[need:need + GUARD]) != bytes([_CANARY]) * GUARD:
                raise PluginError(f"{self.name}: collect() wrote past the end of its {need}-byte buffer "
                                  "(memory corrupted; the plugin ignores the capacity argument)")
            if code == ERR_BUFFER_TOO_SMALL and size > need:
                need = size
                continue
            if code != OK:
                raise NativeCallError(self.name, "collect", code, msg)
            if size > need:
                raise PluginError(f"{self.name}: collect() reports {size} bytes written into a "
                                  f"{need}-byte buffer")
            return bytes(buf[:size])
        raise PluginError(f"{self.name}: collect() keeps asking for a larger buffer")

    def clock_now(self) -> int:
        if self._clock is None:
            return now_ns()
        return int(self._clock(self.self_ptr))

    def destroy(self) -> None:
        if not self._destroyed:
            self._destroyed = True
            self._destroy(self.self_ptr)


# ------------------------------------------------------------------------ clock sync
def take_samples(sync: ClockSync, read: Callable[[], int], tries: int = 8) -> None:
    """A few bracketed reads of the plugin's clock; the convex-hull fit keeps what binds."""
    for _ in range(tries):
        a = now_ns()
        p = read()
        sync.add(a, p, now_ns())


def map_clock(trace: Trace, sync: ClockSync) -> dict[str, Any]:
    """Move a trace from the plugin's clock onto the session clock, in place
    (trace/clock.py: convex-hull offset and drift with an accuracy bound)."""
    fit = sync.fit()
    retime(trace, fit, record=False)
    return {**fit.to_dict(), "method": "bracketed samples at start and stop, convex hull (trace/clock.py)",
            "uncertainty_ns": fit.bound_ns}


# ------------------------------------------------------------------------ XSpace checks
def xspace_problems(space: Any, limit: int = 4) -> list[str]:
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
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=run, name=f"polyprof-{what}", daemon=True)
    t.start()
    t.join(limit_s)
    if t.is_alive():
        raise TimeoutError(f"{what} did not return within {limit_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


ENV_IN_PROCESS = "POLYPROF_NATIVE_IN_PROCESS"


def in_process_default() -> bool:
    """Whether native plugins run inside the program (opt-in: POLYPROF_NATIVE_IN_PROCESS=1)."""
    return os.environ.get(ENV_IN_PROCESS, "") not in ("", "0")


def open_handle(path: str | Path, in_process: bool | None = None, timeout_s: float | None = 60.0,
                collect_timeout_s: float | None = 60.0) -> Any:
    """A handle on a native plugin: in a helper process (default; collect/remote.py),
    or loaded into this process when ``in_process`` (or POLYPROF_NATIVE_IN_PROCESS=1)."""
    if in_process if in_process is not None else in_process_default():
        return NativeHandle(path)
    from .remote import RemoteHandle

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

    def __init__(self, path: str | Path | None = None, **options: Any):
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
        if self.remote:  # bracketed in the helper, next to the plugin (same CLOCK_MONOTONIC)
            for a, p, b in self.handle.clock_samples(8):
                self._sync.add(a, p, b)
        else:
            take_samples(self._sync, self.handle.clock_now)

    def _collect(self) -> Trace:
        from ..formats.xspace import from_space, parse

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
        info: dict[str, Any] = {"library": str(self.handle.path), "abi": "%d.%d" % tuple(self.handle.abi),
                                "process": "helper" if self.remote else "in-process",
                                "struct_size": self.handle.struct_size, "bytes": len(data),
                                "clock": "session" if self.handle.clock_domain == CLOCK_SESSION else "own"}
        if len(self._sync):
            info["clock_sync"] = map_clock(trace, self._sync)
        xs = trace.metadata.get("xspace", {})
        info["xspace"] = {k: xs[k] for k in ("hostnames", "errors", "warnings") if k in xs}
        # The session's metadata (clock, source...) describes the merged trace, not this part.
        trace.metadata = {"native_plugins": {self.name: info}}
        return trace

    def close(self) -> None:
        """Free the native instance (after collect, or if it was never started)."""
        if self.remote:  # destroy when that is safe; a helper still running is just ended
            if not self._poisoned and (self._state != "started" or self._start_failed):
                self.handle.destroy()
            else:
                self.handle.close()
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


def plugin_path_libraries(value: str | None = None) -> list[Path]:
    """Shared libraries listed by POLYPROF_PLUGIN_PATH (files, or directories of ``*.so``)."""
    value = os.environ.get(ENV_PATH, "") if value is None else value
    out: list[Path] = []
    for part in value.split(os.pathsep):
        if not part:
            continue
        p = Path(part).expanduser()
        if p.is_dir():
            out.extend(sorted(q for q in p.iterdir() if q.suffix == ".so" or ".so." in q.name))
        elif p.exists():
            out.append(p)
        else:
            log.warning("%s: %s does not exist", ENV_PATH, p)
    return out


def path_plugins() -> list[Any]:
    """Registry entries for the libraries on POLYPROF_PLUGIN_PATH."""
    from .registry import PluginInfo

    infos = []
    for lib in plugin_path_libraries():
        d = describe(lib)
        factory = native_factory(lib, d.name) if d.availability.ok else None
        infos.append(PluginInfo(d.name, str(d.path), factory, d.availability, True))
    # a mistyped entry is listed (unavailable, with the reason), not dropped silently
    for part in os.environ.get(ENV_PATH, "").split(os.pathsep):
        p = Path(part).expanduser() if part else None
        if p is not None and not p.exists():
            infos.append(PluginInfo(p.name, str(p), None,
                                    Availability(False, f"{ENV_PATH} entry {p} does not exist"), True))
    return infos


def is_library_path(target: str) -> bool:
    return target.endswith(".so") or ".so." in target or os.sep in target


def resolve_factory(target: str) -> Callable[..., Any]:
    """The plugin factory named by ``pkg.module:Factory`` or an installed plugin name."""
    from .registry import discover

    if ":" in target:
        return import_factory(target)
    found = discover()
    if target not in found:
        raise PluginError(f"{target!r} is not a .so file, a module:Factory, or an installed plugin "
                          f"(installed: {', '.join(sorted(found)) or 'none'})")
    info = found[target]
    if info.factory is None:
        raise PluginError(f"plugin {target!r} cannot be loaded: {info.availability.reason}")
    return info.factory


def load_target(target: str, **options: Any) -> Plugin:
    """A plugin object from ``path.so``, ``pkg.module:Factory`` or a registered name."""
    if is_library_path(target):
        return load_native(target, **options)
    plugin = resolve_factory(target)(**options)
    if not isinstance(plugin, Plugin):
        raise PluginError(f"{target}: the factory returned {type(plugin).__name__}, not a polyprof Plugin")
    return plugin


def import_factory(target: str) -> Callable[..., Any]:
    """``pkg.module:attr`` -> the attribute (a Plugin class or a factory function)."""
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise PluginError(f"{target}: cannot import: {e}") from None
    if not callable(obj):
        raise PluginError(f"{target}: not callable")
    return obj
