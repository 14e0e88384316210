"""polyprof's own background threads (the crash journal, the host sampler), kept out of
sight of the program's profilers.

A program that profiles itself — ``torch.profiler.profile(with_stack=True)``,
``cProfile`` through ``threading.setprofile`` — installs its profile function on every
thread of the process, polyprof's included, and its tables would then list polyprof's
lock waits and file writes as if the program made them. So these threads:

* wait on a raw lock (:class:`Halt`: one C call, no Python frames, where
  ``threading.Event.wait`` runs a dozen calls a profiler records), and
* at each wake-up, before running any Python code, take the profile and trace
  functions off themselves (:func:`unobserved`) through the C API by ctypes, a call
  that a profile function does not see (it sees calls of built-in functions, and
  ``sys.setprofile`` is one).

What a profiler installed during a wait can still see is the end of that one wait.
"""

from __future__ import annotations

import ctypes
import sys
import threading

_set_profile = ctypes.pythonapi.PyEval_SetProfile
_set_profile.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
_set_profile.restype = None
_set_trace = ctypes.pythonapi.PyEval_SetTrace
_set_trace.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
_set_trace.restype = None


def unobserved() -> None:
    """No profile or trace function on the calling (polyprof) thread."""
    _set_profile(None, None)
    if sys.gettrace() is not None:  # a debugger or coverage on this thread: off here too
        _set_trace(None, None)


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
