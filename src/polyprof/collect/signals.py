"""Signals and the profiled program: polyprof must not change what a signal does.

- :func:`deferred` holds SIGINT/SIGTERM (and friends) while a session stops and saves,
  then delivers them as the program's own handlers would have had them, so an
  interrupt during the save neither loses the trace nor is swallowed.
- :class:`SavedDispositions` snapshots every signal's C-level ``sigaction`` and puts
  it back: probing a device runtime (PoCL/LLVM install SIGSEGV/SIGBUS/SIGILL/SIGFPE
  handlers when loaded) must not leave the program with different dispositions.
- :func:`hidden` keeps ``polyprof run``'s own SIGTERM/SIGHUP/SIGUSR handler out of the
  program's sight: ``signal.getsignal`` (and what ``signal.signal`` returns) says
  ``SIG_DFL`` there, as under plain python.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import signal
import threading
from types import FrameType
from typing import Any, Callable, Iterator

from ..lowlevel.libc import libc

log = logging.getLogger("polyprof")

#: the signal module's own functions as polyprof found them: polyprof's calls see the real
#: handlers while :func:`hidden` shows the program another view
real_signal = signal.signal
real_getsignal = signal.getsignal

#: signals whose arrival during stop/save is held back and delivered after it
DEFERRED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")
                 if hasattr(signal, n))


@contextlib.contextmanager
def deferred(signals: tuple[int, ...] = DEFERRED) -> Iterator[list[int]]:
    """Hold ``signals`` until the block ends, then restore the handlers and deliver
    each one that arrived (once). Only the main thread can set handlers; elsewhere
    this does nothing."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return

    def hold(signum: int, _frame: FrameType | None) -> None:
        if signum not in pending:
            pending.append(signum)
            log.warning("%s received while saving the trace; delivered once it is saved",
                        signal.Signals(signum).name)

    previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
    try:
        for s in signals:
            try:
                previous[s] = real_signal(s, hold)
            except (ValueError, OSError):
                pass
        yield pending
    finally:
        for s, h in previous.items():
            real_signal(s, h if h is not None else signal.SIG_DFL)
        for s in pending:
            signal.raise_signal(s)  # the program's handler (or the default action) runs now


@contextlib.contextmanager
def hidden(handler: Callable[[int, FrameType | None], Any]) -> Iterator[None]:
    """While the block runs, ``signal.getsignal`` answers ``SIG_DFL`` for a signal whose
    handler is ``handler``, and so does ``signal.signal`` for the handler it replaced: a
    program that installs its own only where none is set (``getsignal(...) == SIG_DFL``)
    or calls the one it found does what it does under plain python. The wrappers replace
    the ``signal`` module's attributes (both are Python functions there already, with
    the same names and documents); code that imported them by name before keeps the real
    ones, as polyprof does (:data:`real_signal`)."""
    def shown(h: Any) -> Any:
        return signal.Handlers.SIG_DFL if h is handler else h

    @functools.wraps(real_getsignal)
    def getsignal(signalnum: int) -> Any:
        return shown(real_getsignal(signalnum))

    @functools.wraps(real_signal)
    def set_handler(signalnum: int, new: Any) -> Any:
        return shown(real_signal(signalnum, new))

    signal.getsignal, signal.signal = getsignal, set_handler  # type: ignore[assignment]
    try:
        yield
    finally:
        if signal.getsignal is getsignal:
            signal.getsignal = real_getsignal
        if signal.signal is set_handler:
            signal.signal = real_signal


# ------------------------------------------------------------------ C-level dispositions
_SIGACTION_SIZE = 256  # larger than struct sigaction on every Linux ABI (152 on x86-64)


def _libc() -> ctypes.CDLL | None:
    """libc through ctypes, with ``sigaction`` typed (lowlevel/libc.py: found without
    running ldconfig where the process's own symbols have it)."""
    lib = libc("sigaction")
    if lib is not None:
        lib.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


class SavedDispositions:
    """Every signal's sigaction now, to put back later (``with SavedDispositions():``)."""

    def __init__(self) -> None:
        self._libc = _libc()
        self._saved: dict[int, ctypes.Array[ctypes.c_char]] = {}
        if self._libc is None:
            return
        for s in range(1, signal.NSIG):
            if s in (signal.SIGKILL, signal.SIGSTOP):
                continue
            buf = ctypes.create_string_buffer(_SIGACTION_SIZE)
            if self._libc.sigaction(s, None, buf) == 0:
                self._saved[s] = buf

    def changed(self) -> list[int]:
        """Signals whose disposition differs from the snapshot now."""
        out: list[int] = []
        if self._libc is None:
            return out
        for s, buf in self._saved.items():
            now = ctypes.create_string_buffer(_SIGACTION_SIZE)
            if self._libc.sigaction(s, None, now) == 0 and now.raw[:ctypes.sizeof(ctypes.c_void_p)] \
                    != buf.raw[:ctypes.sizeof(ctypes.c_void_p)]:
                out.append(s)
        return out

    def restore(self) -> list[int]:
        """Put back every disposition that changed; returns the signals restored."""
        changed = self.changed()
        libc = self._libc
        if libc is not None:
            for s in changed:
                libc.sigaction(s, self._saved[s], None)
        if changed:
            log.debug("restored the dispositions of %s", ", ".join(signal.Signals(s).name for s in changed
                                                                  if s in signal.Signals._value2member_map_))
        return changed

    def __enter__(self) -> "SavedDispositions":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
