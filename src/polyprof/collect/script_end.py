"""What python does after a script's last line and before the process ends, done by
``polyprof run`` while its session still records.

Plain python, once ``__main__`` returns (or raises, or calls ``sys.exit``), waits for
the program's non-daemon threads, then runs its ``atexit`` callbacks, then exits with the
script's code. ``polyprof run`` stopped its session as soon as the script returned, so
the work of a thread still running then, or of an ``atexit`` callback (a checkpoint
saved at exit, a pool's workers joined, a run's logs uploaded), was neither in the trace
nor in the summary, and the summary was printed in the middle of the program's output.
:func:`finish` does those two steps first, in python's order:

- the wait joins every live non-daemon thread (and any they start), as
  ``threading._shutdown`` does; Ctrl-C during it ends the wait, with the lines python
  prints then ("Exception ignored in: ... KeyboardInterrupt"), and the script's exit
  code is kept, as python keeps it;
- then the program's ``atexit`` callbacks run (``atexit._run_exitfuncs``: python's own
  loop, with its order and its report of a callback that raises), except polyprof's
  own, which stay registered for the real exit. Not when a signal that ends the
  process arrived during the wait: python runs no callbacks then either.

Left to the real exit, as before: ``threading``'s own exit hooks
(``concurrent.futures`` executors not shut down by the program finish their queued work
there, after the trace).
"""

from __future__ import annotations

import atexit
import sys
import threading
import traceback
from typing import Callable, Iterable

from . import background


def wait_for_threads() -> bool:
    """Join the program's non-daemon threads until none is left; False if Ctrl-C ended
    the wait (said as python says it)."""
    me = threading.current_thread()
    try:
        while True:
            left = [t for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]
            if not left:
                return True
            for t in left:
                t.join()
    except KeyboardInterrupt:
        print("Exception ignored in: <module 'threading' (the wait for the program's threads)>", file=sys.stderr)
        traceback.print_exc(limit=0)
        return False
    except SystemExit:  # a signal polyprof run unwinds the script for (cli/run.py): it says which
        return False


def run_exit_callbacks(own: Iterable[Callable[[], object]]) -> None:
    """The program's ``atexit`` callbacks, run now as python would run them at exit;
    ``own`` (polyprof's) are taken out first and registered again after."""
    own = list(own)
    for f in own:
        atexit.unregister(f)
    try:
        atexit._run_exitfuncs()
    finally:
        for f in own:
            atexit.register(f)


def finish(signalled: Callable[[], bool]) -> None:
    """Wait for the threads, then run the exit callbacks unless ``signalled()`` says a
    signal that ends the process came in the meantime."""
    wait_for_threads()
    if not signalled():
        run_exit_callbacks([background.stop_all])  # native tickers stopped at the real exit
