"""Calls into plugin code that can never hurt the caller: run in a helper thread,
waited for at most a time limit, every exception (``BaseException`` included:
``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``) caught and handed back.

A call that overruns is abandoned, not killed (Python cannot stop a thread); its
thread is a daemon, so it never keeps the process alive.

What a call made while the program is not running may not change for it: its working
directory (``Kept``, which also turns faulthandler on so that a crash names the
plugin's code).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
import traceback
from typing import Callable


class Outcome:
    """What a guarded call gave: its value, or the exception it raised (with its
    traceback), or that it overran its time limit. (A plain class: every session makes
    it; a dataclass is slower to define in each `polyprof run`.)"""

    __slots__ = ("value", "error", "tb", "timed_out")

    def __init__(self, value: object = None, error: BaseException | None = None, tb: str | None = None,
                 timed_out: bool = False):
        self.value = value
        self.error = error
        self.tb = tb
        self.timed_out = timed_out

    def __repr__(self) -> str:
        return f"Outcome(value={self.value!r}, error={self.error!r}, timed_out={self.timed_out})"

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


def call_guarded(fn: Callable[[], object], name: str, limit_s: float | None) -> Outcome:
    """``fn()`` in a daemon thread named ``name``; ``limit_s`` None waits for ever."""
    return start_guarded(fn, name).wait(limit_s)


class Running:
    """A call :func:`start_guarded` began in its daemon thread: waited for later, so that
    several run at once (the session stops its plugins together: collect/slots.py)."""

    __slots__ = ("outcome", "done", "ended_ns")

    def __init__(self) -> None:
        self.outcome = Outcome()
        self.done = threading.Event()
        #: when the call returned, on the session clock (0: not yet)
        self.ended_ns = 0

    def wait(self, limit_s: float | None) -> Outcome:
        """Its outcome, once it returned or ``limit_s`` passed (``timed_out`` then)."""
        if not self.done.wait(limit_s):
            self.outcome.timed_out = True
        return self.outcome


def start_guarded(fn: Callable[[], object], name: str) -> Running:
    """``fn()`` started in a daemon thread named ``name``; every exception kept."""
    run = Running()
    out = run.outcome

    def body() -> None:
        try:
            out.value = fn()
        except BaseException as e:  # noqa: BLE001 - reported by the caller, never raised
            out.error = e
            out.tb = traceback.format_exc()
        finally:
            run.ended_ns = time.perf_counter_ns()
            run.done.set()

    threading.Thread(target=body, name=name, daemon=True).start()
    return run


def call_here(fn: Callable[[], object]) -> Outcome:
    """``fn()`` on the calling thread with every exception caught (for plugins whose
    state is thread-local, e.g. torch's profiler: they cannot move to a helper thread)."""
    out = Outcome()
    try:
        out.value = fn()
    except BaseException as e:  # noqa: BLE001
        out.error = e
        out.tb = traceback.format_exc()
    return out


# ------------------------------------------------------------------ what a call may not change
class Kept:
    """Around one plugin call made while the program is not running (``polyprof run``
    starting the session before the script, stopping it after): the working directory a
    plugin changed is put back (its ``os.chdir`` must not move the program, nor stop
    ``polyprof run`` from finding the script), and a crash in the call (``abort()``, a
    segfault: a Python plugin is not isolated from the process) prints every thread's
    Python traceback, which names the plugin's code (faulthandler, unless the program
    turned it on itself). While the program runs (a session it started, a capture served
    mid-run) nothing is watched: its own threads may change the directory, or
    faulthandler, at the same moment, and what it does there is its own (the
    conformance kit's ``program_state`` clause tells a plugin's author instead)."""

    def __init__(self, active: bool = True) -> None:
        self.cwd = _cwd() if active else None
        self._fault = False
        if active and not faulthandler.is_enabled():
            try:
                faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)
                self._fault = True
            except (AttributeError, ValueError, OSError, RuntimeError):  # no stderr with a file descriptor
                pass

    def end(self, phase: str) -> str | None:
        """Undo what the call changed; what to tell the user (None: nothing changed)."""
        if self._fault:
            faulthandler.disable()
        now = _cwd()
        if self.cwd is None or now == self.cwd:
            return None
        try:
            os.chdir(self.cwd)
        except OSError as e:
            return f"changed the working directory to {now} in {phase}(), and it cannot be put back: {e}"
        return f"changed the working directory to {now} in {phase}(); polyprof put back {self.cwd}"


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed
        return None
