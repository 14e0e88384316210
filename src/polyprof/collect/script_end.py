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
is not in the trace. ``threading``'s own exit hooks also stay at the real exit
(``concurrent.futures`` work queued but not waited for by the program).
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
            left = [t for t in threading.enumerate() if t not in skip and not t.daemon and t.is_alive()]
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
