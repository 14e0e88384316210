"""Ending the ``polyprof`` command without the interpreter's teardown (see the package doc)."""

from __future__ import annotations

import atexit
import os
import sys
from typing import Callable, NoReturn


def quick_exit(rc: int, on_error: Callable[[OSError], None] | None = None) -> NoReturn:
    """Flush stdout and stderr, run the exit handlers (logging's flush, temporary
    folders, worker pools), then end the process with ``rc`` without freeing every
    object one by one. A failed flush of stdout (a full disk) is reported through
    ``on_error`` and makes the status 1 if it was 0; a reader gone (broken pipe) is not
    an error. Only for a process whose every output is closed or flushed here."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # a reader gone: nothing more to write
        pass
    except OSError as e:  # e.g. a full disk: the output is incomplete
        if on_error is not None:
            on_error(e)
        rc = rc or 1
    try:
        sys.stderr.flush()
    except OSError:
        pass
    atexit._run_exitfuncs()
    os._exit(rc)
