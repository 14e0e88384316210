"""What python does after a script's last line and before the process ends, done by
``polyprof run`` while its session still records.

Plain python, once ``__main__`` returns (or raises, or calls ``sys.exit``), waits for
the program's non-daemon threads, then runs its ``atexit`` callbacks, then exits with the
script's code. ``polyprof run`` stopped its session as soon as the script returned, so
the work of a thread still running then was neither in the trace nor in the summary, and
the summary was printed in the middle of the program's output. :func:`wait_for_threads`
does python's wait first: it joins every live non-daemon thread (and any they start), as
``threading._shutdown`` does; Ctrl-C during it ends the wait, with the lines python
prints then ("Exception ignored in: ... KeyboardInterrupt"), and the script's exit code
is kept, as python keeps it.

The ``atexit`` callbacks still run after the session has stopped, at the real exit, in
python's order: libraries tear their runtimes down there (JAX's ``clean_up`` clears its
backends, and with them the profiler session the jax plugin collects; CUDA contexts,
torch's), so they cannot run before the device plugins have stopped. Work in a callback
is not in the trace. ``threading``'s own exit hooks also stay at the real exit: the
workers of a ``concurrent.futures`` executor the program never shut down are not waited
for (python's hook ends them), so work still queued there runs after the trace.
"""

from __future__ import annotations

import sys
import threading
import traceback
from typing import Iterable


def wait_for_threads(before: Iterable[threading.Thread] = ()) -> bool:
    """Join the program's non-daemon threads until none is left; False if Ctrl-C or a
    signal ``polyprof run`` unwinds the script for ended the wait. Threads in ``before``
    (alive when the script began: not the program's, as where ``polyprof.cli.main``
    runs inside another program) are not waited for."""
    skip = {threading.current_thread(), *before}
    try:
        while True:
            ended = _ended_by_exit_hooks()
            left = [t for t in threading.enumerate()
                    if t not in skip and t not in ended and not t.daemon and t.is_alive()]
            if not left:
                return True
            for t in left:
                t.join()
    except KeyboardInterrupt:
        print("Exception ignored in: <module 'threading' (the wait for the program's threads)>", file=sys.stderr)
        traceback.print_exc(limit=0)
        return False
    except SystemExit:  # the signal is noted by cli/run.py's handler, which raised this
        return False


#: registries of the non-daemon threads that ``threading``'s own exit hooks end
#: (``threading._register_atexit``: run by python before it joins the other threads)
_EXIT_HOOKED = (("concurrent.futures.thread", "_threads_queues"),  # ThreadPoolExecutor workers
                ("concurrent.futures.process", "_threads_wakeups"))  # ProcessPoolExecutor manager threads


def _ended_by_exit_hooks() -> set[threading.Thread]:
    """The threads python ends itself at exit: an executor the program never shut down
    keeps its idle workers waiting for work until python's exit hook tells them to stop;
    joined here, they would wait for ever (its hooks cannot run early: they stop every
    executor in the process, polyprof's readers' included)."""
    out: set[threading.Thread] = set()
    for module, name in _EXIT_HOOKED:
        registry = getattr(sys.modules.get(module), name, None)
        if registry is not None:
            out.update(t for t in list(registry.keys()) if isinstance(t, threading.Thread))
    # a hook that is a bound method stops its object's threads (anyio's socket selector)
    for hook in list(getattr(threading, "_threading_atexits", ())):
        owner = getattr(getattr(hook, "func", hook), "__self__", None)  # kept as functools.partial(func)
        if owner is not None and hasattr(owner, "__dict__"):
            out.update(t for t in vars(owner).values() if isinstance(t, threading.Thread))
    return out
