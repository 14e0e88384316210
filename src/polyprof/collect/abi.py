"""The native plugin ABI of ``include/polyprof/plugin.h`` in ctypes: the structs, the
codes, and :class:`NativeHandle`, one loaded instance driven call by call.

Light on purpose (ctypes and the standard library only): the helper process that
runs native plugins (collect/native_helper.py) imports this and nothing of the
analysis stack, so it starts in a fraction of the time ``import polyprof`` takes.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import PluginError
from .clock import now_ns

log = logging.getLogger("polyprof")

ABI_MAJOR = 1
ABI_MINOR = 2
INIT_SYMBOL = "polyprof_plugin_init"

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
        self._clock: Callable[[object], int] | None = None
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

    def _on_log(self, _data: object, level: int, message: bytes | None) -> None:
        try:
            log.log(int(level) or logging.INFO, "native plugin %s: %s", self.name,
                    (message or b"").decode("utf-8", "replace"))
        except Exception:  # a callback must never raise into C
            pass

    # ------------------------------------------------------------------ raw calls
    def _check(self, function: str, code: int, status: Status) -> None:
        if code != OK:
            raise NativeCallError(self.name, function, code, status.text)

    def start(self, options: dict[str, object] | None = None) -> None:
        st = Status.new()
        opts = json.dumps(options or {}, default=str).encode()
        self._check("start", self._start(self.self_ptr, opts, ctypes.byref(st)), st)

    def stop(self) -> None:
        st = Status.new()
        self._check("stop", self._stop(self.self_ptr, ctypes.byref(st)), st)

    def collect_raw(self, buffer: ctypes.Array[ctypes.c_ubyte] | None, capacity: int) -> tuple[int, int, str]:
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
