"""Queues that profile from the program's start, for a process that serves captures.

A capture records only while it runs, but OpenCL can time only the commands of queues
created with PROFILING_ENABLE, and a queue's properties are fixed when it is made: a
program that makes its queues at its start and a capture that arrives later would get
host calls only. So a capture server (``polyprof run --serve``, ``POLYPROF_SERVE``,
``polyprof.serve()``) whose plugins include ``opencl`` calls :func:`profile_queues`
as it starts: from then on (at the program's ``import pyopencl`` if it has not imported
it yet) ``pyopencl.CommandQueue`` makes profiling queues, as during a session
(``intercept.QueueFactory``); the calls are recorded only while a capture runs.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .intercept import QueueFactory

log = logging.getLogger("polyprof")

_lock = threading.Lock()
_factory: QueueFactory | None = None
_waiting = False  # an import hook waits for the program's import of pyopencl


def factory() -> QueueFactory | None:
    """The factory in place for the rest of the process, once pyopencl is imported."""
    return _factory


def profile_queues() -> bool:
    """Make every queue the program creates from now on profiling-enabled, for the rest
    of the process; at its ``import pyopencl`` when it has not imported it yet. False
    when pyopencl is not installed (nothing to do). Never raises."""
    global _waiting
    try:
        with _lock:
            if _factory is not None or _waiting:
                return True
            if "pyopencl" not in sys.modules:
                try:
                    if importlib.util.find_spec("pyopencl") is None:
                        return False
                except (ImportError, ValueError):
                    return False
                from ...collect.importhook import ImportHook

                ImportHook("pyopencl", _install).install()
                _waiting = True
                return True
        _install()
        return True
    except Exception as e:  # noqa: BLE001 - the program runs on; captures then time fewer commands
        log.warning("OpenCL queues cannot be made to profile from the start: %s", e)
        return False


def _install() -> None:
    """Put the factory in place of ``pyopencl.CommandQueue`` (unless something else is
    there: a session's factory, which then leaves this one in place when it ends)."""
    global _factory, _waiting
    import pyopencl as cl
    import pyopencl._cl as _cl

    from .intercept import QueueFactory

    with _lock:
        _waiting = False
        if _factory is not None:
            return
        current = cl.CommandQueue
        if isinstance(current, QueueFactory):  # a session's, in place now: take over from it
            _factory = current.permanent()
            return
        if current is not _cl.CommandQueue:  # someone else's replacement: leave it alone
            log.info("pyopencl.CommandQueue is not pyopencl's own; queues are not made to profile")
            return
        _factory = QueueFactory(_cl.CommandQueue, cl.command_queue_properties.PROFILING_ENABLE).permanent()
        cl.CommandQueue = _factory  # type: ignore[misc, assignment]  # for the rest of the process
        reported = _factory.reported_properties()
        if reported is not None:
            _cl.CommandQueue.properties = reported  # type: ignore[method-assign, assignment]
