"""Descriptors polyprof holds while a program runs, moved to high numbers, and the
process's descriptor table grown for them before any thread starts.

A program's ``open()`` gets the lowest free number, so a descriptor at :data:`HIGH_FD`
or above (below the descriptor limit) is out of its way (collect/journal_file.py says
why the crash journal needs that). Moving the first one there grows the kernel's
descriptor table, and Linux grows it, while the process has more than one thread, only
after an RCU grace period (``expand_fdtable``): 4-25 ms of wall time measured on this
project's 2-core machine in each `polyprof run`, whose plugin probes and NumPy's
OpenBLAS threads had started by then. :func:`reserve` grows it while the process still
has one thread; a table never shrinks, so the later move costs what any ``dup`` does.
"""

from __future__ import annotations

import fcntl
import os
import resource

#: the lowest number a held descriptor is moved to (or the descriptor limit less
#: :data:`HIGH_FD_MARGIN`, when that is lower)
HIGH_FD = 1000
HIGH_FD_MARGIN = 24


def _floor() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return HIGH_FD if soft == resource.RLIM_INFINITY else min(HIGH_FD, soft - HIGH_FD_MARGIN)


def move_high(fd: int) -> int:
    """``fd`` moved to a high number (close-on-exec), the low one closed; ``fd`` as it is
    where that cannot be (a low descriptor limit, or the call refused)."""
    try:
        low = _floor()
        if low <= fd:
            return fd
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
    except (OSError, ValueError):
        return fd
    os.close(fd)
    return high


def reserve() -> None:
    """The descriptor table grown to hold :func:`move_high`'s numbers, now (call it before
    threads start); nothing is left open. Any failure leaves things as they were."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    os.close(move_high(fd))
