"""A native plugin in a helper process: the same calls as
:class:`~polyprof.collect.native.NativeHandle`, made across a pipe.

The helper (collect/native_helper.py) is this Python started afresh, with the
program's environment, in a session of its own (a Ctrl-C in the terminal is for the
program, which stops the plugin), and killed if the program dies. A crash, ``abort()``
or ``_exit()`` in vendor code, at load or in any call, becomes a :class:`PluginCrashed`
naming the call and how the helper ended; a call that overruns its time limit kills the
helper and becomes a :class:`PluginTimeout`. Either way the program goes on and the
plugin is never called again. The data crosses as the XSpace bytes the ABI already
hands over; clock samples of an own-clock plugin are taken inside the helper, where a
(session, plugin, session) bracket is as tight as in-process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

from ..errors import PluginError
from .abi import ERR_UNAVAILABLE, NativeCallError, NativeUnavailable, PluginTable, _end_of

if TYPE_CHECKING:
    import ctypes

log = logging.getLogger("polyprof")

_PKG_PARENT = str(Path(__file__).resolve().parents[2])
# Empty package modules stand in for polyprof/, polyprof/collect/ and polyprof/trace/, so their
# __init__ (NumPy, the trace model...) never runs in the helper.
_BOOT = ("import os, sys, types\n"
         "for name in ('polyprof', 'polyprof.collect', 'polyprof.trace'):\n"
         "    m = types.ModuleType(name); m.__path__ = [os.path.join(sys.argv[3], *name.split('.'))]\n"
         "    sys.modules[name] = m\n"
         "from polyprof.collect.native_helper import main\n"
         "main(int(sys.argv[1]), int(sys.argv[2]))")


#: the longest line of a plugin's output passed to the log (the rest is cut)
MAX_LINE = 4096
_LEVELS = {b"polyprof: WARNING: ": logging.WARNING, b"polyprof: ERROR: ": logging.ERROR,
           b"polyprof: CRITICAL: ": logging.ERROR, b"polyprof: INFO: ": logging.INFO}


def _forward(stream: IO[bytes], who: str) -> None:
    """The helper's stdout or stderr, line by line, into polyprof's log (the plugin's own
    printf at info; the helper's log records at their level): never the program's own
    stdout or stderr."""
    try:
        with stream:
            while True:
                line = stream.readline(MAX_LINE)
                if not line:
                    return
                head = next((h for h in _LEVELS if line.startswith(h)), b"")
                level, text = _LEVELS.get(head, logging.INFO), line[len(head):]
                log.log(level, "plugin %s: %s", who, text.decode("utf-8", "replace").rstrip("\n"))
    except (OSError, ValueError):
        return


#: time for the helper to start and the library's init to return
LOAD_TIMEOUT_S = 30.0


class PluginCrashed(PluginError):
    """The native plugin's helper process died (segfault, abort, exit) during a call."""


class PluginTimeout(PluginError):
    """A call into the native plugin overran its time limit; the helper was killed."""


def how_it_ended(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


T = TypeVar("T")


def _answer(kind: type[T], value: object, op: str) -> T:
    """The helper's answer to ``op``, checked to be a ``kind``."""
    if not isinstance(value, kind):
        raise PluginError(f"the native plugin's helper answered {op} with {type(value).__name__}")
    return value


class RemoteHandle:
    """One native plugin instance in its own helper process.

    ``timeout_s``: the longest any call may take (load, start, stop, collect) before
    the helper is killed; None waits for ever (the conformance kit times calls itself).
    """

    def __init__(self, path: str | Path, timeout_s: float | None = 60.0, collect_timeout_s: float | None = 60.0):
        self.path = Path(path).resolve()
        self.name = self.path.stem
        self.timeout_s = timeout_s
        self.collect_timeout_s = collect_timeout_s
        self._lock = threading.Lock()  # one call at a time, as the ABI promises the plugin
        self._ended: str | None = None
        if not self.path.is_file():
            raise PluginError(f"{self.path}: no such native plugin library")
        p_read, c_write = os.pipe()
        c_read, p_write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(c_read), str(c_write), _PKG_PARENT],
                pass_fds=(c_read, c_write), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
        finally:
            os.close(c_read)
            os.close(c_write)
        for stream, what in ((self._proc.stdout, "stdout"), (self._proc.stderr, "stderr")):
            threading.Thread(target=_forward, args=(stream, f"{self.path.name} ({what})"), daemon=True,
                             name=f"polyprof-plugin-{what}").start()
        from multiprocessing.connection import Connection

        self._in = Connection(p_read, writable=False)
        self._out = Connection(p_write, readable=False)
        self._destroyed = True
        try:
            info = _answer(dict, self._call("open", str(self.path), os.getpid(), what="loading (polyprof_plugin_init)",
                                            timeout=LOAD_TIMEOUT_S), "open")  # the helper's Python starts first
        except BaseException:
            self.close()
            raise
        self.name = info["name"]
        self.device_kinds = tuple(info["device_kinds"])
        self.abi = tuple(info["abi"])
        self.struct_size = int(info["struct_size"])
        self.clock_domain = int(info["clock_domain"])
        self.placement = int(info["placement"])
        self._destroyed = False

    # ------------------------------------------------------------------ transport
    def _call(self, op: str, *args: object, what: str | None = None, timeout: float | None = -1.0) -> object:
        what = what or f"{op}()"
        limit = self.timeout_s if timeout == -1.0 else timeout
        with self._lock:
            if self._ended is not None:
                raise PluginCrashed(f"{self.name}: its helper process {self._ended}; not calling {what}")
            try:
                self._out.send((op, args))
                ready = self._in.poll(limit)
            except (BrokenPipeError, ConnectionError, OSError):
                ready = True  # the helper is gone: recv below says how
            if not ready:
                self._kill()
                self._ended = f"was killed after {what} ran past {limit:g} s"
                raise PluginTimeout(f"{self.name}: {what} did not return within {limit:g} s; "
                                    "its helper process was killed")
            try:
                reply = self._in.recv()
            except (EOFError, OSError):
                self._ended = self._reap()
                raise PluginCrashed(f"{self.name}: crashed in {what}: its helper process {self._ended} "
                                    f"({self.path})") from None
        kind = reply[0]
        if kind == "ok":
            return reply[1]
        if kind == "call":
            raise NativeCallError(*reply[1:])
        if kind == "unavailable":
            raise NativeUnavailable(reply[1])
        raise PluginError(reply[1])

    def _reap(self) -> str:
        try:
            rc = self._proc.wait(5.0)
        except subprocess.TimeoutExpired:
            self._kill()
            rc = self._proc.returncode
        return how_it_ended(rc)

    def _kill(self) -> None:
        try:
            self._proc.kill()
            self._proc.wait(5.0)
        except (OSError, subprocess.TimeoutExpired):
            pass

    @property
    def alive(self) -> bool:
        return self._ended is None and self._proc.poll() is None

    # ------------------------------------------------------------------ NativeHandle's calls
    def covers(self, field: str) -> bool:
        return self.struct_size >= _end_of(PluginTable, field)

    def start(self, options: dict[str, object] | None = None) -> None:
        self._call("start", dict(options or {}))

    def stop(self) -> None:
        self._call("stop")

    def collect_bytes(self) -> bytes:
        return _answer(bytes, self._call("collect_bytes", what="collect()", timeout=self.collect_timeout_s), "collect")

    def collect_raw(self, buffer: ctypes.Array[ctypes.c_ubyte] | None, capacity: int) -> tuple[int, int, str]:
        """As NativeHandle.collect_raw: the helper fills a copy of ``buffer`` (canary
        bytes included), which is copied back, so overruns show the same way."""
        import ctypes

        data = None if buffer is None else bytes(buffer)
        code, size, msg, out = _answer(tuple, self._call("collect_raw", data, capacity, what="collect()",
                                                         timeout=self.collect_timeout_s), "collect")
        if out is not None and buffer is not None:
            ctypes.memmove(ctypes.addressof(buffer), out, len(out))
        return code, size, msg

    def clock_samples(self, tries: int = 8) -> list[tuple[int, int, int]]:
        return _answer(list, self._call("clock_samples", tries, what="clock_now_ns()"), "clock_samples")

    def clock_now(self) -> int:
        return _answer(int, self._call("clock_now", what="clock_now_ns()"), "clock_now")

    def destroy(self) -> None:
        """destroy() in the helper, then end it (a crash in destroy is only logged)."""
        if self._destroyed or self._ended is not None:  # nothing to free in a helper that is gone
            self._destroyed = True
            self.close()
            return
        self._destroyed = True
        try:
            self._call("destroy", timeout=10.0)
        except PluginError as e:
            log.warning("native plugin %s: destroy failed: %s", self.name, e)
        self.close()

    def close(self) -> None:
        """End the helper (asks, then kills)."""
        if self._ended is None and self._proc.poll() is None:
            try:
                self._call("exit", timeout=2.0)
                self._proc.wait(2.0)
            except (PluginError, subprocess.TimeoutExpired):
                self._kill()
        self._ended = self._ended or "was closed"
        for c in (self._in, self._out):
            try:
                c.close()
            except OSError:
                pass

    def __del__(self) -> None:
        try:
            if getattr(self, "_proc", None) is not None and self._proc.poll() is None:
                self._proc.kill()
        except Exception:
            pass


__all__ = ["RemoteHandle", "PluginCrashed", "PluginTimeout", "how_it_ended", "ERR_UNAVAILABLE"]
