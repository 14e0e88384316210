"""The helper process a native plugin runs in (the other end of collect/remote.py).

Started by :class:`~polyprof.collect.remote.RemoteHandle` with two pipe descriptors,
without running ``polyprof/__init__`` (only collect/abi.py, clock.py and errors.py
are imported: the helper is up in tens of milliseconds, not the second a full
``import polyprof`` with NumPy and the analysis stack takes on a loaded machine);
it loads the library, then answers one request at a time: ``(op, args)`` in, ``("ok",
value)`` or an error description out. A crash, ``abort()``, ``_exit()`` or hang of
the vendor code ends or stalls this process only; the profiled program sees a
reported plugin error. Its clock is the session clock (CLOCK_MONOTONIC is one clock
for every process of the machine), so the plugin's timestamps need no mapping, and
own-clock samples are taken here, next to the plugin.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from typing import Protocol


def _die_with_parent() -> None:
    """SIGKILL this helper when the profiled program dies (Linux prctl), so a plugin
    hung in native code never outlives it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _Channel(Protocol):
    """The parent's requests in, the replies out (two one-way pipes)."""

    def recv(self) -> tuple[str, tuple]: ...  # (op, its arguments), as RemoteHandle._call sends
    def send(self, obj: object) -> None: ...


def _serve(conn: _Channel) -> None:
    # the helper imports as little as it can until its pipes are set and the library loads
    from .clock import now_ns
    from .abi import NativeCallError, NativeHandle, NativeUnavailable  # (as above)
    from ..errors import PluginError  # (as above)

    handle: NativeHandle | None = None
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            value: object = None
            if op == "open":
                handle = NativeHandle(args[0], profiled_pid=args[1])
                value = {"name": handle.name, "device_kinds": handle.device_kinds, "abi": handle.abi,
                         "struct_size": handle.struct_size, "clock_domain": handle.clock_domain,
                         "placement": handle.placement, "path": str(handle.path)}
            elif op == "exit":
                conn.send(("ok", None))
                return
            elif handle is None:
                raise PluginError(f"{op}() before the library was opened")
            elif op == "start":
                handle.start(args[0])
            elif op == "stop":
                handle.stop()
            elif op == "collect_bytes":
                value = handle.collect_bytes()
            elif op == "collect_raw":
                data, capacity = args
                if data is None:
                    value = (*handle.collect_raw(None, capacity), None)
                else:
                    buf = (ctypes.c_ubyte * len(data)).from_buffer_copy(data)
                    value = (*handle.collect_raw(buf, capacity), bytes(buf))
            elif op == "clock_samples":
                samples: list[tuple[int, int, int]] = []
                for _ in range(int(args[0])):
                    a = now_ns()
                    p = handle.clock_now()
                    samples.append((a, p, now_ns()))
                value = samples
            elif op == "clock_now":
                value = handle.clock_now()
            elif op == "destroy":
                handle.destroy()
            else:
                raise PluginError(f"unknown request {op!r}")
            reply: tuple = ("ok", value)
        except NativeCallError as e:
            reply = ("call", e.plugin, e.function, e.code, e.detail)
        except NativeUnavailable as e:
            reply = ("unavailable", str(e))
        except PluginError as e:
            reply = ("plugin", str(e))
        except BaseException as e:  # noqa: BLE001 - described to the parent, never fatal here
            reply = ("plugin", f"{type(e).__name__}: {e}")
        conn.send(reply)


def main(read_fd: int, write_fd: int) -> None:
    from multiprocessing.connection import Connection

    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the program, which stops us
    logging.basicConfig(level=logging.INFO, format="polyprof: %(levelname)s: %(message)s", stream=sys.stderr)
    conn_in, conn_out = Connection(read_fd, writable=False), Connection(write_fd, readable=False)

    class Both:
        recv = conn_in.recv
        send = conn_out.send

    try:
        _serve(Both())
    finally:
        sys.stdout.flush()
        os._exit(0)  # no interpreter teardown: the library's destructors may be what crashes


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
