"""Calls into plugin code that can never hurt the caller: run in a helper thread,
waited for at most a time limit, every exception (``BaseException`` included:
``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``) caught and handed back.

A call that overruns is abandoned, not killed (Python cannot stop a thread); its
thread is a daemon, so it never keeps the process alive.

What a call may not change for the program: its stdout (``routed``: a plugin's prints
go to stderr) and its working directory (``Kept``, which also turns faulthandler on so
that a crash names the plugin's code).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import traceback
from typing import Callable, TextIO, cast


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
    out = Outcome()
    done = threading.Event()

    def run() -> None:
        try:
            out.value = fn()
        except BaseException as e:  # noqa: BLE001 - reported by the caller, never raised
            out.error = e
            out.tb = traceback.format_exc()
        finally:
            done.set()

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    if not done.wait(limit_s):
        out.timed_out = True
    return out


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
class _Routed:
    """``sys.stdout`` while plugin calls run: what the threads running those calls write
    goes to stderr (the program's stdout is the program's: a pipe a caller parses, a
    file), everything else to the stdout it replaced, unchanged."""

    def __init__(self, real: TextIO) -> None:
        self._real = real
        self._threads: dict[int, Callable[[], None]] = {}  # thread -> its call's note

    def write(self, text: str) -> int:
        note = self._threads.get(threading.get_ident())
        if note is None:
            return self._real.write(text)
        if text:
            note()
        err = sys.stderr if sys.stderr is not self else sys.__stderr__
        return err.write(text) if err is not None else len(text)

    def __getattr__(self, name: str) -> object:  # flush, fileno, encoding, buffer...
        return getattr(self._real, name)


_route_lock = threading.Lock()


def routed(fn: Callable[[], object], note: Callable[[], None]) -> Callable[[], object]:
    """``fn`` made to send what it prints on its own thread to stderr, calling ``note()``
    the first time it does; ``sys.stdout`` is put back once no such call runs."""
    said: list[bool] = []

    def once() -> None:
        if not said:
            said.append(True)
            note()

    def call() -> object:
        me = threading.get_ident()
        with _route_lock:
            out = sys.stdout
            router = out if isinstance(out, _Routed) else None if out is None else _Routed(out)
            if router is not None:
                sys.stdout = cast(TextIO, router)  # a stand-in: what it lacks it takes from the real one
                router._threads[me] = once
        if router is None:  # no stdout (pythonw): nothing to keep apart
            return fn()
        try:
            return fn()
        finally:
            with _route_lock:
                router._threads.pop(me, None)
                if sys.stdout is router and not router._threads:
                    sys.stdout = router._real

    return call


class Kept:
    """Around one plugin call, on the session's thread: ``sys.stdout`` is the program's
    again after it (even if the call overran and still runs), the working directory it
    changed is put back (a plugin's ``os.chdir`` must not move the program, nor stop
    ``polyprof run`` from finding the script), and a crash in the call (``abort()``, a
    segfault: a Python plugin is not isolated from the process) prints every thread's
    Python traceback, which names the plugin's code (faulthandler, unless the program
    turned it on itself)."""

    def __init__(self) -> None:
        self.cwd = _cwd()
        out = sys.stdout
        self.stdout = out._real if isinstance(out, _Routed) else out
        self._fault = False
        if not faulthandler.is_enabled():
            try:
                faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)
                self._fault = True
            except (AttributeError, ValueError, OSError, RuntimeError):  # no stderr with a file descriptor
                pass

    def end(self, phase: str) -> str | None:
        """Undo what the call changed; what to tell the user (None: nothing changed)."""
        if self._fault:
            faulthandler.disable()
        with _route_lock:  # a call that overran still runs: the program gets its stdout back all the same
            if isinstance(sys.stdout, _Routed) and sys.stdout._real is self.stdout:
                sys.stdout = self.stdout
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
