"""A program that ends without coming back to its session: ``os.execv`` and the rest of
the exec family replace the process, ``os._exit`` ends it at once. Neither runs a
``finally`` block, ``atexit`` or the session's stop, so the trace was lost (only the
crash journal was left) and nothing was said.

While a session runs, ``os.execv``, ``os.execve`` and ``os._exit`` are wrapped (the
``os`` module's attributes: ``os.execl``, ``execle``, ``execlp``, ``execlpe``,
``execvp`` and ``execvpe`` call ``execv``/``execve`` through the module's globals, so
they are covered too). Just before the real call, in the process that owns the
sessions, every running session is stopped, innermost first, and its trace saved as at
a normal stop (the crash journal then removed), with ``session.ended_by`` and a warning
in its metadata; one line on the process's stderr (fd 2, not the program's
``sys.stderr``) says where each trace went. Then the real function runs with the
program's own arguments: the same argv, environment and descriptors (polyprof's are
closed by then or close on exec).

- Only in the process that started the sessions: a forked child forgets them (its
  ``os._exit`` and its ``execv`` after ``fork`` go straight through), checked again by pid.
- Nothing is stopped for a call that fails before replacing anything: arguments the
  real function refuses, or a file that is not there or not executable (the common
  misses of ``execvp``'s ``PATH`` search, which tries ``execv`` on each directory). An
  exec that fails later (``ENOEXEC``, ``E2BIG``) still raises as under python, after the
  trace was written: the trace is saved again with ``session.exec_failed`` (the error)
  and a warning that says the exec failed and what came after is not recorded; one
  warning line says so on stderr, and ``polyprof run`` does not repeat the "trace
  written" line at its end. Recording does not start again: the plugins have stopped
  (a stop is final for a device runtime), and a second recording would have to replace
  this trace or write a file not asked for.
- Never raises into the program (a failed save is said, and the call goes on). Called
  from another thread than the session's, the stop and save wait at most
  :data:`LIMIT_S`; past it the call goes on (the crash journal holds the host data).
- ``os.posix_spawn``, ``subprocess`` (``sh -c 'exec ...'`` included) and
  ``multiprocessing`` start other processes: the session goes on, nothing is wrapped for them.
- Code that took ``from os import execv`` before the session started keeps the real one.

A session started and never stopped (``polyprof.profile(...).start()`` with no ``stop()``)
is stopped and saved at the interpreter's normal exit (:func:`_at_exit`, an ``atexit``
hook, registered again at each first session so that it runs before the exit hooks its
plugins registered when they started): the same stop and save as above, innermost first,
``session.ended_by`` "atexit" and a warning in the trace, one line on fd 2 that says so
and where the trace went. Before, nothing stopped it: only the crash journal was left,
its last half second of sections lost, read back with a warning that asks whether the
run was killed. A session without an output file is not stopped there (its trace could
go nowhere); one line says it was lost.

A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) cannot be turned into a trace,
but while a session with a crash journal runs, one line on fd 2 says where the journal
is as the process dies (``_fastsection.fatal_note``: a C handler where the disposition
was the default one; the signal then takes its default action, so the status is python's).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import logs
from ..lowlevel import fork
from .guard import call_guarded
from .journal_where import where
from .output import journal_note, shown_path, written_line

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(logs.LOGGER)

#: the ``os`` functions wrapped while a session runs
NAMES = ("execv", "execve", "_exit")
#: how long a stop and save started from another thread than the session's may take
LIMIT_S = 60.0
#: ``session.ended_by`` of a session stopped at the interpreter's exit (:func:`_at_exit`)
AT_EXIT = "atexit"

_real: dict[str, Callable[..., Any]] = {}  # os's functions as found when wrapping (put back at the end)
_wrappers: dict[str, Callable[..., Any]] = {}
_running: list[tuple["Session", int]] = []  # (session, the thread that started it), in start order
_pid = 0  # the process whose sessions _running holds
_ending = False


def track(session: "Session") -> None:
    """``session`` has started in this process: end it before an exec or ``_exit``."""
    global _pid
    if _pid != os.getpid():
        _running.clear()
        _pid = os.getpid()
    _running.append((session, threading.get_ident()))
    if not _wrappers:
        _install()
    if session.output is not None and getattr(session, "_outer", None) is None:
        _note_fatal(where(f"{session.output}.partial"))


def _note_fatal(partial: Path) -> None:
    """Where the crash journal is, said by a fatal signal's handler (``_fastsection.fatal_note``)."""
    from .recorder import _fast  # loaded by the host plugin already; the polyprof command's import stays light

    if _fast is None or not hasattr(_fast, "fatal_note") or not partial.is_file():
        return
    tail = f"; the host data recorded up to its last flush (every half second) is in {shown_path(partial)}\n"
    try:
        _fast.fatal_note(tail.encode("utf-8", "backslashreplace"))
    except (TypeError, ValueError) as e:  # a path longer than the note's room: no note
        log.debug("no crash note: %s", e)


def _fatal_off() -> None:
    fast = sys.modules.get("polyprof.collect._fastsection")  # never loaded here: off is for one that was
    if fast is not None and hasattr(fast, "fatal_note"):
        fast.fatal_note(None)


def untrack(session: "Session") -> None:
    """``session`` stops (or is a forked child's copy): nothing more to do for it."""
    _running[:] = [(s, t) for s, t in _running if s is not session]
    if session.output is not None and getattr(session, "_outer", None) is None:
        _fatal_off()
    if not _running and not _ending:
        _uninstall()


def _install() -> None:
    for name in NAMES:
        real = getattr(os, name, None)
        if real is None:
            continue
        _real[name] = real
        _wrappers[name] = _wrapper(_WRAPS[name], real)
        setattr(os, name, _wrappers[name])
    atexit.unregister(_at_exit)  # (once: each registration would be called)
    atexit.register(_at_exit)  # after the hooks of what the plugins started: it runs before them


def _wrapper(impl: Callable[..., Any], real: Callable[..., Any]) -> Callable[..., Any]:
    """One wrapper per install, calling the ``real`` it found: a program's own wrapper put
    over an earlier session's (still calling that one) is then reached, not looped into."""
    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return impl(real, *args, **kwargs)

    return wrapper


def _uninstall() -> None:
    """``os``'s own functions back (a wrapper someone put over ours stays: ours then
    passes every call straight through)."""
    for name, wrapper in list(_wrappers.items()):
        if getattr(os, name, None) is wrapper:
            setattr(os, name, _real[name])
        del _wrappers[name]
    atexit.unregister(_at_exit)


def _at_exit() -> None:
    """The interpreter exits normally with sessions still running in this process (a
    ``start()`` never stopped): stop and save them, say so."""
    if _running and os.getpid() == _pid and not _ending:
        _end_all(AT_EXIT)


def _execv(real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if _running and _replaces(args[0] if args else None, args[1] if len(args) > 1 else None):
        return _ended_then("os.execv", args[0], lambda: real(*args, **kwargs))
    return real(*args, **kwargs)


def _execve(real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if _running:
        path, argv, env = (list(args) + [kwargs.get(k) for k in ("path", "argv", "env")[len(args):]])[:3]
        if _replaces(path, argv) and hasattr(env, "keys"):
            return _ended_then("os.execve", path, lambda: real(*args, **kwargs))
    return real(*args, **kwargs)


def _exit(real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if _running:
        status = args[0] if args else kwargs.get("status")
        if isinstance(status, int) and len(args) + len(kwargs) == 1:
            return _ended_then(f"os._exit({status})", None, lambda: real(*args, **kwargs))
    return real(*args, **kwargs)


_WRAPS: dict[str, Callable[..., Any]] = {"execv": _execv, "execve": _execve, "_exit": _exit}


def _replaces(path: object, argv: object) -> bool:
    """Whether an exec of ``path`` with ``argv`` gets past the checks that fail before
    anything is replaced (the arguments, the file being there and executable)."""
    try:
        if not isinstance(argv, (list, tuple)) or not argv or not argv[0]:
            return False
        if isinstance(path, int):  # execve of a descriptor (fexecve)
            return True
        return os.access(path, os.X_OK) and not os.path.isdir(path)  # type: ignore[arg-type]
    except (TypeError, ValueError, OSError):  # the real call raises its own error for these
        return False


def _ended_then(call: str, path: object, then: Callable[[], Any]) -> Any:
    """End this process's sessions (never raises an ordinary error), then ``then()``."""
    if os.getpid() != _pid or _ending:
        return then()
    what = call if path is None else f"{call}({_text(path)})"
    ended = _end_all(what)
    try:
        return then()
    except OSError as e:
        why = e.strerror or str(e)
        log.warning("%s failed (%s) after the trace was written: the trace ends at that call; what the program "
                    "does from here is not recorded", what, why)
        for session in ended:
            _exec_failed(session, what, why)
        raise


def failed_note(call: str, why: str) -> str:
    """The trace's warning for a session ended by ``call``, an exec that then failed."""
    return f"the program called {call}, which failed ({why}) after this trace was written: the trace ends " \
        "at that call; the program went on, and what it did after is not in it"


def _exec_failed(session: "Session", call: str, why: str) -> None:
    """The exec failed after ``session``'s trace was saved: the trace says so, saved again."""
    from ..trace import metadata_keys as mkeys  # only when an exec failed late

    trace = session.trace
    if trace is None or session.written is None or session.written.path is None:
        return
    try:
        info = trace.metadata.get(mkeys.SESSION)
        if isinstance(info, dict):
            info["exec_failed"] = why
        old, new = ended_note(call), failed_note(call, why)
        warnings = trace.metadata.get(mkeys.WARNINGS)
        if isinstance(warnings, list):
            warnings[:] = [dict(w, message=new) if isinstance(w, dict) and w.get("message") == old else w
                           for w in warnings]
        session.rewrite()
    except Exception as e:  # noqa: BLE001 - never into the program: the first save stands
        _say(f"polyprof: error: the trace could not be saved again after {call} failed: {type(e).__name__}: {e}")


def _text(path: object) -> str:
    try:
        return os.fsdecode(path) if not isinstance(path, int) else f"fd {path}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return repr(path)


def _end_all(call: str) -> list["Session"]:
    """End every running session of this process, innermost first; returns them."""
    global _ending
    _ending = True
    ended = [s for s, _ in reversed(_running)]
    try:
        for session, thread in reversed(list(_running)):
            try:
                _end_one(session, thread, call)
            except Exception as e:  # noqa: BLE001 - never into the program: it ends or execs now
                _say(f"polyprof: error: the trace could not be written{_before(call)}: {type(e).__name__}: {e}"
                     f"{journal_note(session.output)}")
    finally:
        _ending = False
        untrack_all = [s for s, _ in _running]
        for s in untrack_all:
            untrack(s)
    return ended


def _end_one(session: "Session", thread: int, call: str) -> None:
    if session.output is None:
        _say(f"polyprof: warning: {_what(call)}: the trace of its session is lost (it has no output "
             f"file; give it one to keep the trace)")
        return
    before = _before(call)
    if thread == threading.get_ident():
        session.end_early(call)
    else:  # the session's thread may be anywhere (holding what the stop needs): bounded
        out = call_guarded(lambda: session.end_early(call), "polyprof-save-at-exit", LIMIT_S)
        if out.timed_out or out.error is not None:
            why = f"not written within {LIMIT_S:g} s" if out.timed_out else f"{type(out.error).__name__}: {out.error}"
            _say(f"polyprof: error: the trace could not be written{before} ({why}){journal_note(session.output)}")
            return
    n = session.trace.n_events if session.trace is not None else 0
    _say(written_line(session.written, n, lead=f"{_what(call)}: ", before=before, output=session.output))


def ended_note(call: str) -> str:
    """The trace's warning for a session ended by ``call`` before its stop."""
    if call == AT_EXIT:
        return "the session was never stopped (start() with no stop()): polyprof stopped it at the interpreter's " \
            "exit, after the program's code had ended; the trace ends there"
    return f"the program called {_what(call)}: the trace ends there, complete up to that call (what came after " \
        "is not in it)"


def _before(call: str) -> str:
    return " at the interpreter's exit" if call == AT_EXIT else f" before {call}"


def _what(call: str) -> str:
    if call == AT_EXIT:
        return "a session was never stopped (start() with no stop()); stopped at the interpreter's exit"
    return f"{call} {'ends' if call.startswith('os._exit') else 'replaces'} the process"


def _say(line: str) -> None:
    """One line on fd 2: the program's ``sys.stderr`` may be its own file, and its
    buffers are not flushed here (python would not flush them either)."""
    data = (line + "\n").encode("utf-8", "backslashreplace")
    try:
        while data:
            data = data[os.write(2, data):]
    except OSError:  # fd 2 closed: nowhere to say it
        pass


def _forget_in_child() -> None:
    """A forked child: the sessions are its parent's; its exec and ``_exit`` go through."""
    _running.clear()
    _fatal_off()


fork.in_child(_forget_in_child)
