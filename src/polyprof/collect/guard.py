"""Calls into plugin code that can never hurt the caller: run in a helper thread,
waited for at most a time limit, every exception (``BaseException`` included:
``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``) caught and handed back.

A call that overruns is abandoned, not killed (Python cannot stop a thread); its
thread is a daemon, so it never keeps the process alive.
"""

from __future__ import annotations

import threading
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
