"""polyprof's own background threads (the crash journal, the host sampler), kept out of
sight of the program's profilers.

A program that profiles itself — ``torch.profiler.profile(with_stack=True)``,
``cProfile`` through ``threading.setprofile`` — installs its profile function on every
Python thread state of the process, and records the frames open there when it starts:
its tables would then list polyprof's waits and file writes as if the program made them.
So :func:`start` runs ``fn`` on a native thread (``lowlevel.unseen.Ticker``) that holds no
thread state while it waits, makes one for each call of ``fn`` and deletes it after,
and makes it only while it holds the gate that polyprof wraps around the start of
torch's profiler (plugins/torch/plugin.py): a profiler starting never finds it. It is
not in ``threading.enumerate()`` either.

Without the compiled module the twin is a daemon ``threading.Thread`` that waits on a
raw lock (one C call, no Python frames where ``threading.Event.wait`` runs a dozen) and
takes any profile or trace function off itself at each wake-up: a profiler started
during a wait still sees that wait's frames and its end.

A program at the end of its memory (``RLIMIT_AS``) leaves none for these threads either:
a wake-up with no room for the native thread's thread state skips its call (CPython
cannot fail that allocation; it crashed the program with SIGSEGV), and a ``MemoryError``
that ``fn`` raises is not printed into the program's stderr (``Exception ignored in:
... tick``) nor ends the thread: both are counted (:func:`memory_errors`; a session puts
the count in its trace's warnings) and ``fn`` is called again after its last delay
(50 ms to 1 s).
"""

from __future__ import annotations

import atexit
import ctypes
import sys
import threading
from typing import Callable, Protocol

from ..lowlevel import unseen

_set_profile = ctypes.pythonapi.PyEval_SetProfile
_set_profile.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
_set_profile.restype = None
_set_trace = ctypes.pythonapi.PyEval_SetTrace
_set_trace.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
_set_trace.restype = None

#: ``fn()`` returns the seconds until its next call, or None to end
Tick = Callable[[], "float | None"]


class Background(Protocol):
    def stop(self, timeout_s: float = 5.0) -> bool:
        """End the thread (``fn`` is not called again); True once it has ended."""


def unobserved() -> None:
    """No profile or trace function on the calling (polyprof) thread."""
    _set_profile(None, None)
    if sys.gettrace() is not None:  # a debugger or coverage on this thread: off here too
        _set_trace(None, None)


_running: set[Background] = set()
#: MemoryErrors met by the Python twins (the compiled Ticker counts its own)
_py_memory_errors = [0]


def memory_errors() -> int:
    """How many calls of the background threads' ``fn`` were skipped or failed for want
    of memory in this process so far (a session counts those during its run)."""
    native = getattr(unseen, "memory_errors", None)
    return _py_memory_errors[0] + (native() if native is not None else 0)


def memory_note(since: int) -> str | None:
    """The trace's warning when the background threads ran out of memory since the
    count was ``since`` (None: they did not)."""
    n = memory_errors() - since
    if n <= 0:
        return None
    return (f"polyprof's background threads (process sampler, crash journal, timers) ran out of memory {n} "
            f"time{'s' if n > 1 else ''} (the program was at its memory limit): the process samples and "
            "journal flushes of those moments are missing")


def retry_wait(last_s: float) -> float:
    """When a call that memory prevented is tried again: the last delay, between 50 ms
    (no busy loop while the program is out of memory) and 1 s (a timer's first delay
    may be long); as ``_unseen.c``'s ``retry_wait``."""
    return min(max(last_s, 0.05), 1.0)


def start(fn: Tick, first_s: float, name: str) -> Background:
    """``fn()`` after ``first_s`` seconds, then after each delay it returns, on a thread
    the program's profilers do not see (``name``: the Python twin's thread name)."""
    t: Background
    if unseen.Ticker is not None:
        t = unseen.Ticker(_forgetting_thread(fn), first_s)  # type: ignore[assignment]
    else:
        t = _PyTicker(fn, first_s, name)
    _running.add(t)
    return t


def stop(t: Background, timeout_s: float = 5.0) -> bool:
    _running.discard(t)
    return t.stop(timeout_s)


@atexit.register
def _stop_all() -> None:
    """At exit, before the interpreter goes: a native thread must not make a thread state after."""
    for t in list(_running):
        stop(t, 1.0)


def _forgetting_thread(fn: Tick) -> Tick:
    """``fn`` leaving nothing in ``threading``: a call that asks for the current thread
    (``logging`` does) makes a dummy Thread that would stay in ``threading.enumerate()``."""
    active: dict[int, threading.Thread] = getattr(threading, "_active", {})
    dummy = getattr(threading, "_DummyThread", None)

    def tick() -> float | None:
        try:
            return fn()
        finally:
            me = threading.get_ident()
            if dummy is not None and isinstance(active.get(me), dummy):
                active.pop(me, None)

    return tick


class Halt:
    """``threading.Event``'s ``set`` / ``is_set`` / ``wait`` for one waiting thread, on a
    raw lock; ``wait`` returns True once set and leaves the thread unobserved."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # held until set()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        if self._set:
            return True
        got = self._lock.acquire(True, timeout) if timeout > 0 else self._lock.acquire(False)
        unobserved()
        if got:
            self._lock.release()  # set() released it: every later wait returns at once
        return self._set


class _PyTicker(threading.Thread):
    """The Python twin of ``unseen.Ticker``."""

    def __init__(self, fn: Tick, first_s: float, name: str):
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.first_s = first_s
        self.halt = Halt()
        self.start()

    def run(self) -> None:
        unobserved()  # the program's profilers (torch with_stack) never list this thread
        wait: float | None = self.first_s
        last = self.first_s
        while wait is not None and not self.halt.wait(wait):
            try:
                wait = self.fn()
            except MemoryError:  # never printed by threading's excepthook: counted, tried again
                _py_memory_errors[0] += 1
                wait = retry_wait(last)
            else:
                last = wait if wait is not None else last

    def stop(self, timeout_s: float = 5.0) -> bool:
        self.halt.set()
        if self is threading.current_thread() or not self.is_alive():
            return not self.is_alive()
        self.join(timeout_s)
        return not self.is_alive()
