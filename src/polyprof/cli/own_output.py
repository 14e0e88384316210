"""``polyprof run``'s own stdout and stderr, on descriptors the program does not hold.

The program may close fd 1 and 2 (a daemon's ``os.closerange(0, 3)``), ``dup2`` another
file over them, or open a file that then gets one of their numbers (``os.close(2)``,
then ``open("prog.log", "w")``). polyprof's lines (the summary, ``trace written``, its
notes and log lines) are for the stdout and stderr polyprof started with: :func:`taken`
duplicates fd 1 and 2 when ``polyprof run`` starts, close-on-exec and at a high number,
and polyprof writes there. Before each write the copy is checked to be still the file it
was; where it is not (a program that closes every descriptor from 3 up, and may then
open files that get its number), fd 1 or 2 itself is, if it still is that file. Where
neither is, or the write fails (the reader went away), the line is dropped: polyprof's
lines may be lost, never the program's exit code or its files. A
forked child closes the copies at once (``os.register_at_fork``), so a daemon the program
forks does not hold the caller's pipe open.

Only the process's own streams are copied: a replacement that polyprof was started with
(``main()`` called in a program, a test's capture) is used as it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Iterator
from typing import Any, TextIO

#: the lowest number a copy gets: above the descriptors a program opens early
LOWEST = 100

#: the copies open now (closed in a forked child)
_open: list[_Copy] = []
_at_fork: list[bool] = []


def _identity(fd: int) -> tuple[int, int] | None:
    """The file open at ``fd`` (device, inode); None where nothing is."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class _Copy(io.RawIOBase):
    """A copy of one of the process's descriptors, written only while it (or the
    descriptor itself) is the same file."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._given = fd
        self._fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, LOWEST)
        self._file = _identity(self._fd)
        self._failed = False

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        fd = self._target()
        return fd is not None and os.isatty(fd)

    def intact(self) -> bool:
        """Whether the copy still is the file it was made of (not closed, not reused)."""
        return not self.closed and _identity(self._fd) == self._file

    def _target(self) -> int | None:
        """Where to write: the copy, else the descriptor it copies, whichever is still the file."""
        if self._failed or self.closed:
            return None
        return next((fd for fd in (self._fd, self._given) if _identity(fd) == self._file), None)

    def write(self, b: Any, /) -> int:  # (any buffer: what BufferedWriter hands down)
        data = memoryview(b).cast("B")
        n = len(data)
        fd = self._target()
        try:
            while data and fd is not None:
                data = data[os.write(fd, data):]
        except OSError:  # EPIPE, EBADF, ENOSPC, EAGAIN: polyprof's lines are lost there, nothing else
            self._failed = True
        return n

    def close(self) -> None:
        if self.intact():  # a number the program reused is its own: left open
            with contextlib.suppress(OSError):
                os.close(self._fd)
        super().close()


def _copy(stream: TextIO | None, fd: int) -> TextIO | None:
    """A text stream like ``stream`` on a copy of ``fd``, or None where ``stream`` is not
    the process's own stream on ``fd`` (a replacement, or the descriptor is not open)."""
    if not isinstance(stream, io.TextIOWrapper):
        return None
    try:
        if stream.fileno() != fd:
            return None
        raw = _Copy(fd)
    except (OSError, ValueError):  # closed already, or not a descriptor
        return None
    _open.append(raw)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding, errors=stream.errors,
                            line_buffering=True, write_through=True)


def _close_in_child() -> None:
    for raw in _open:
        raw.close()
    _open.clear()


@contextlib.contextmanager
def taken(out: TextIO, err: TextIO) -> Iterator[tuple[TextIO, TextIO, bool]]:
    """polyprof's stdout and stderr for the block: copies of fd 1 and 2 where ``out`` and
    ``err`` are the process's own, else ``out`` and ``err``; and whether stderr is a copy.
    The copies are closed after the block."""
    if not _at_fork:
        os.register_at_fork(after_in_child=_close_in_child)
        _at_fork.append(True)
    own_out, own_err = _copy(out, 1), _copy(err, 2)
    try:
        yield own_out or out, own_err or err, own_err is not None
    finally:
        for stream in (own_out, own_err):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
                raw = stream.buffer.raw  # type: ignore[attr-defined]
                with contextlib.suppress(OSError, ValueError):  # (closed already in a forked child)
                    stream.close()  # (closes raw: its own check first)
                if raw in _open:
                    _open.remove(raw)
