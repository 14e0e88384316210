"""polyprof's own log lines on stderr, as ``polyprof: LEVEL: message``.

Every module logs to the ``polyprof`` logger and never names itself in the message; this
handler says whose line it is. It is put on that logger (never the root logger) by the
``polyprof`` command and by a session started in a program (``polyprof.profile()``),
and prints only while the root logger has no handler of its own: a program that set up
logging gets polyprof's lines through its handlers, as any library's, once.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TextIO

LOGGER = "polyprof"


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Lines on the ``sys.stderr`` of the moment (a test's or a program's replacement
    included); none once the root logger has a handler."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("polyprof: %(levelname)s: %(message)s"))

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


def to_stderr() -> None:
    """Put :class:`StderrHandler` on the ``polyprof`` logger unless it has one."""
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h, StderrHandler) for h in log.handlers):
        log.addHandler(StderrHandler())


@contextlib.contextmanager
def diverted(into: list[str]) -> Iterator[None]:
    """While the block runs, polyprof's warnings and errors go into ``into`` instead of
    out, and its other lines nowhere: a capture in a serving program, whose warnings
    belong in the capture's trace while the program's stderr and logs stay its own."""
    log = logging.getLogger(LOGGER)

    def keep(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            into.append(record.getMessage())
        return False

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)
