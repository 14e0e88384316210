"""polyprof's own log lines on stderr, as ``polyprof: LEVEL: message``.

Every module logs to the ``polyprof`` logger and never names itself in the message; this
handler says whose line it is. It is put on that logger (never the root logger) by the
``polyprof`` command and by a session started in a program (``polyprof.profile()``),
and prints only while the root logger has no handler of its own: a program that set up
logging gets polyprof's lines through its handlers, as any library's, once. Under
``polyprof run`` they go to polyprof's own stderr (:func:`own_stderr`), not to a file
the program put in ``sys.stderr`` or at fd 2.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TextIO

LOGGER = "polyprof"
#: where :class:`StderrHandler` writes instead of ``sys.stderr`` (:func:`own_stderr`)
_own: list[TextIO] = []


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Lines on the ``sys.stderr`` of the moment (a test's or a program's replacement
    included), or on polyprof's own while :func:`own_stderr` holds; none once the root
    logger has a handler."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("polyprof: %(levelname)s: %(message)s"))

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return _own[-1] if _own else sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


class _Kept(logging.Logger):
    """polyprof's logger, which a program's ``logging.config`` does not switch off:
    ``dictConfig`` and ``fileConfig`` disable every logger that exists and that their
    configuration does not name (``disable_existing_loggers``, on by default), and the
    program then never heard that its trace was written elsewhere or a plugin failed.
    Its level and handlers stay the program's to set."""

    @property  # type: ignore[override]
    def disabled(self) -> bool:
        return False

    @disabled.setter
    def disabled(self, value: bool) -> None:
        pass


def kept(name: str = LOGGER) -> logging.Logger:
    """The logger ``name`` (``polyprof`` or under it), never disabled (:class:`_Kept`)."""
    log = logging.getLogger(name)
    if type(log) is logging.Logger:
        log.__class__ = _Kept
    return log


kept()


def to_stderr() -> None:
    """Put :class:`StderrHandler` on the ``polyprof`` logger unless it has one."""
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h, StderrHandler) for h in log.handlers):
        log.addHandler(StderrHandler())


class own_stderr:  # noqa: N801 - used as the context manager it is
    """While the block runs, :class:`StderrHandler` writes to ``stream``, whatever the
    program does with ``sys.stderr`` and fd 2 (``polyprof run``: cli/own_output.py). A
    class, not a generator: ``polyprof run`` holds it while the script runs, where the
    frames beneath the script are counted (cli/script_exec.py, ``_depth_given_back``)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __enter__(self) -> None:
        _own.append(self.stream)

    def __exit__(self, *exc: object) -> None:
        _own.remove(self.stream)


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
