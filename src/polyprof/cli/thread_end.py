"""Python's own end of a program's threads, under ``polyprof run`` (cli/run.py), before
its session stops: ``threading._shutdown`` called once, as the interpreter calls it, with
what interrupts it said as the running python says it (``sys.unraisablehook``)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterator

from .. import logs

log = logging.getLogger(logs.LOGGER)

#: seconds the wait for the program's threads goes on before one warning names them
WARN_AFTER_S = 10.0


def end_threads(started: list[threading.Thread], received: list[int], plugins: set[str]) -> None:
    """Python's own end of the program's threads, before the stop, so that their work is
    in the trace: ``threading._shutdown``, which the interpreter calls as it ends (its
    exit hooks end executors' threads, the main thread is shown ended, then every
    non-daemon thread is waited for) and then finds done. The ``atexit`` callbacks still
    run after the stop, as python runs them after this wait: a library's teardown must
    not come before the plugins collect (JAX's clears the backends). Only where the
    process ends after ``run()`` (the ``polyprof`` command), and not while a non-daemon
    thread runs that started with the session or runs a plugin's code (a top-level
    package of ``plugins``): the plugin's stop may be what ends it. A wait longer than
    :data:`WARN_AFTER_S` names the threads it waits for, once. An exception in the wait
    is said as python says it and the end goes on; a signal's (``run._on_signal``, which
    notes it in ``received``) ends it, then the trace is written and the signal ends the
    process (said by nothing: python 3.13's wait says what interrupts it)."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None or any(t.is_alive() for t in started) or any(
            _runs(t, plugins) for t in threading.enumerate() if not t.daemon and t.is_alive()):
        return
    hook = sys.unraisablehook
    quiet = sys.unraisablehook = _unsaid_signal(hook, received)
    warn = threading.Timer(WARN_AFTER_S, _say_waiting)
    warn.daemon = True
    warn.start()
    try:
        shutdown()
    except BaseException as e:  # noqa: BLE001 - as the interpreter does: said, and the end goes on
        _called_once(shutdown)
        if not _signals(e, received):
            _say_unraisable(e, e.__traceback__.tb_next if e.__traceback__ else None)  # from _shutdown's frame
    finally:
        warn.cancel()
        if sys.unraisablehook is quiet:
            sys.unraisablehook = hook


def _runs(t: threading.Thread, packages: set[str]) -> bool:
    """Whether thread ``t`` runs code of one of ``packages`` (its target's, a timer's
    function's, or its class's ``run``)."""
    code = getattr(t, "_target", None) or getattr(t, "function", None) or type(t).run
    return str(getattr(code, "__module__", None) or "").partition(".")[0] in packages


def _say_waiting() -> None:
    names = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    log.warning("waiting for the program's threads to end before the trace is written, as python waits for "
                "them (%s); Ctrl-C or SIGTERM ends the wait and writes it", ", ".join(names[:5]) or "?")


def _signals(e: BaseException, received: list[int]) -> bool:
    """Whether ``e`` is the SystemExit of ``run._on_signal`` for the last signal noted."""
    return (isinstance(e, SystemExit) and bool(received) and received[-1] != signal.SIGINT
            and getattr(e, "code", None) == 128 + received[-1])


@contextmanager
def reopened() -> Iterator[None]:
    """While polyprof stops after :func:`end_threads`: ``threading``'s and
    ``concurrent.futures``' "shutting down" flags cleared, as they were before python's
    end began, so a plugin's stop or collect (and polyprof's own work then) can still use
    an executor or import a module that registers an exit hook; put back after."""
    flags = [(sys.modules.get(m), n) for m, n in (("threading", "_SHUTTING_DOWN"),
                                                  ("concurrent.futures.thread", "_shutdown"),
                                                  ("concurrent.futures.process", "_global_shutdown"))]
    saved = [(m, n, getattr(m, n)) for m, n in flags if m is not None and hasattr(m, n)]
    for m, n, _ in saved:
        setattr(m, n, False)
    try:
        yield
    finally:
        for m, n, v in saved:
            setattr(m, n, v)


def _unsaid_signal(hook: Callable[[Any], object], received: list[int]) -> Callable[[Any], object]:
    """``hook`` but for the SystemExit of ``run._on_signal`` (python 3.13's wait for the
    threads, in C, says an exception that interrupts it and returns: the signal, which
    kills python silently, would print polyprof's frame)."""
    def unraisable(args: Any) -> object:
        return None if _signals(args.exc_value, received) else hook(args)

    return unraisable


def _say_unraisable(e: BaseException, tb: TracebackType | None) -> None:
    """An exception out of ``threading._shutdown`` as the interpreter says one out of its
    own call: through ``sys.unraisablehook`` (the program's, if it set one), in the words
    of this python (3.13: ``Exception ignored on threading shutdown:``, before it
    ``Exception ignored in: <module 'threading' ...>``)."""
    args_type = _ARGS_TYPE
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


#: (found once, as polyprof loads: the probe swaps ``sys.unraisablehook`` for a moment)
_ARGS_TYPE = _hook_args_type()


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
