"""Python's own end of a program's threads, under ``polyprof run`` (cli/run.py), before
its session stops: ``threading._shutdown`` called once, as the interpreter calls it, with
what interrupts it said as the running python says it (``sys.unraisablehook``)."""

from __future__ import annotations

import os
import sys
import threading
import traceback
from types import TracebackType
from typing import Any, Callable


def end_threads(started: list[threading.Thread], received: list[int]) -> None:
    """Python's own end of the program's threads, before the stop, so that their work is
    in the trace: ``threading._shutdown``, which the interpreter calls as it ends (its
    exit hooks end executors' threads, the main thread is shown ended, then every
    non-daemon thread is waited for) and then finds done. The ``atexit`` callbacks still
    run after the stop, as python runs them after this wait: a library's teardown must
    not come before the plugins collect (JAX's clears the backends). Only where the
    process ends after ``run()`` (the ``polyprof`` command), and not while a non-daemon
    thread that started with the session runs (a plugin's: its stop may end it). An
    exception in the wait is said as python says it and the end goes on; a signal's
    (``run._on_signal``, which notes it in ``received``) ends it, then the trace is
    written and the signal ends the process (said by nothing: python 3.13's wait says
    what interrupts it, :func:`_unsaid_signal`)."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None or any(t.is_alive() for t in started):
        return
    hook = sys.unraisablehook
    quiet = sys.unraisablehook = _unsaid_signal(hook, received)
    try:
        shutdown()
    except BaseException as e:  # noqa: BLE001 - as the interpreter does: said, and the end goes on
        _called_once(shutdown)
        if isinstance(e, SystemExit) and received:
            return
        _say_unraisable(e, e.__traceback__.tb_next if e.__traceback__ else None)  # from _shutdown's frame
    finally:
        if sys.unraisablehook is quiet:
            sys.unraisablehook = hook


def _unsaid_signal(hook: Callable[[Any], object], received: list[int]) -> Callable[[Any], object]:
    """``hook`` but for the SystemExit of :func:`_on_signal` (python 3.13's wait for the
    threads, in C, says an exception that interrupts it and returns: the signal, which
    kills python silently, would print polyprof's frame)."""
    def unraisable(args: Any) -> object:
        if args.exc_type is SystemExit and received and getattr(args.exc_value, "code", None) == 128 + received[-1]:
            return None
        return hook(args)

    return unraisable


def _say_unraisable(e: BaseException, tb: TracebackType | None) -> None:
    """An exception out of ``threading._shutdown`` as the interpreter says one out of its
    own call: through ``sys.unraisablehook`` (the program's, if it set one), in the words
    of this python (3.13: ``Exception ignored on threading shutdown:``, before it
    ``Exception ignored in: <module 'threading' ...>``)."""
    args_type = _hook_args_type()
    if args_type is None:  # (no hook args to be had: python 3.11's words)
        print(f"Exception ignored in: {threading!r}", file=sys.stderr)
        traceback.print_exception(type(e), e, tb)
        return
    words, obj = ("Exception ignored on threading shutdown", None) if sys.version_info >= (3, 13) else (None, threading)
    try:
        sys.unraisablehook(args_type((type(e), e, tb, words, obj)))
    except Exception:  # noqa: BLE001 - a hook that fails: python says so, and the end goes on
        traceback.print_exc()


class _RaisesWhenFreed:
    def __del__(self) -> None:
        raise RuntimeError("polyprof: a probe of sys.unraisablehook")


def _hook_args_type() -> Callable[[tuple[object, ...]], Any] | None:
    """``UnraisableHookArgs``, which python does not name: the type of what its hook is
    given for an exception in a ``__del__``."""
    got: list[object] = []
    hook = sys.unraisablehook
    sys.unraisablehook = got.append
    try:
        _RaisesWhenFreed()
    finally:
        sys.unraisablehook = hook
    return type(got[0]) if got else None


def _called_once(shutdown: object) -> None:
    """The interpreter calls ``threading._shutdown`` once: one that an exception ended
    (an exit hook's, Ctrl-C) is not begun again at python's end, where it would run the
    exit hooks a second time and wait for the threads python leaves. Its call at the end
    finds a stand-in that puts the function back and does nothing (in the process that
    made it: a child forked after this ends its threads as python would)."""
    pid = os.getpid()

    def ended_already() -> None:
        threading._shutdown = shutdown  # type: ignore[attr-defined]
        if os.getpid() != pid:
            shutdown()  # type: ignore[operator]

    threading._shutdown = ended_already  # type: ignore[attr-defined]
