"""The crash journal's file: created, locked, written and deleted so that neither the
program nor another run writing the same output can destroy it, and it destroys
nothing of theirs.

- **Its descriptor is checked before each use.** A program may close descriptors it
  did not open (``os.closerange(3, ...)``, a daemon's start-up) and then get the same
  number back from its own ``open()``: a journal that wrote through the number it was
  given wrote Arrow bytes into the program's file, and its close closed the program's
  file. :class:`Sink` records the file's device and inode when it creates it, and
  before every write and close looks (``fstat``) whether its descriptor still refers
  to that file. If not, the number is the program's now: it is never written or closed
  again; the journal is opened again by its path (appending: the Arrow stream goes on
  where its last whole batch ended, once the file is checked to be the same inode of
  the size written so far) or, if that cannot be, it stops with one warning (the
  trace is written from memory at the stop all the same). A race remains between the
  look and the write (the program closes and reopens the number in between); the
  descriptor is moved to a high number (``F_DUPFD_CLOEXEC`` to at least
  ``lowlevel.descriptors.HIGH_FD``, below the descriptor limit), where a program's
  ``open()`` (lowest free number first) does not land, so only a program that closes it
  *and* fills the numbers up to it, or ``dup2``\\s onto it, meets that race.
- **A live journal is locked.** The writer holds ``flock(LOCK_EX)`` on its file while
  it runs (the kernel drops it when the process dies). A journal found at
  ``OUTPUT.partial`` is an earlier, killed run's only if its lock can be taken
  (:func:`keep_earlier` moves only those aside); a locked one belongs to another run
  writing the same output now, and this run writes its journal at the first free
  ``OUTPUT.partial.N`` instead (said once).
- **Deleted only if still ours.** A finished journal stays open and locked until the
  trace is saved; it is unlinked only while its path still names the inode this
  process created and still holds (:func:`discard`), so a journal another run has
  written at that name since is never deleted.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
from pathlib import Path

from ..lowlevel.descriptors import move_high
from .journal_where import _at, where  # noqa: F401 - where re-exported

log = logging.getLogger("polyprof")

#: how many earlier journals of one output are kept (``OUTPUT.partial.1`` ... ``.N``)
KEEP_EARLIER = 1000
#: attempts at creating a journal while another run moves or creates one at the same name
_ATTEMPTS = 50

#: (st_dev, st_ino): which file a descriptor or a path refers to
Ident = tuple[int, int]


def _ident(st: os.stat_result) -> Ident:
    return st.st_dev, st.st_ino


def _path_ident(path: Path) -> Ident | None:
    try:
        return _ident(os.lstat(path))
    except OSError:
        return None


def _fd_ident(fd: int) -> Ident | None:
    try:
        return _ident(os.fstat(fd))
    except OSError:  # EBADF: the program closed it
        return None


def _lock(fd: int) -> bool:
    """An exclusive lock on ``fd``'s file without waiting; False: another process holds it.
    A file system without locks counts as unlocked (as before locks were taken)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        log.debug("crash journal: no lock (%s)", e)
    return True


def _not_regular(path: Path) -> OSError | None:
    """Why ``path`` (which exists) cannot be a journal's: a symlink, a directory, a device."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return OSError(errno.ELOOP, "a symbolic link is there (not followed without --follow-symlinks)", str(path))
    if not stat.S_ISREG(st.st_mode):
        return OSError(errno.EEXIST, "something that is not a regular file is there", str(path))
    return None


def _create(path: Path) -> int | None:
    """A new file at ``path``, locked, on a high descriptor; None: ``path`` is taken or was
    moved away by another run meanwhile (look again)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return None
    fd = move_high(fd)
    try:
        # another run's keep_earlier may hold the lock of a file this new (moving it), or
        # have unlinked it as empty: then it is not this path's any more
        if _lock(fd) and _path_ident(path) == _fd_ident(fd):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def create(path: Path, follow_symlinks: bool = False) -> tuple[int, Path]:
    """A new journal at ``path`` (its descriptor, locked, and where it is). A killed run's
    journal there is moved aside first (:func:`keep_earlier`); a live run's is left
    alone and this journal goes to the first free ``path.N``, said once. A symlink at
    ``path`` is refused unless ``follow_symlinks`` (then its target is the path); never
    onto a directory or a device. OSError when none can be made."""
    if follow_symlinks and path.is_symlink():
        path = Path(os.path.realpath(path))
    for _ in range(_ATTEMPTS):
        fd = _create(path)
        if fd is not None:
            return fd, path
        bad = _not_regular(path)
        if bad is not None:
            raise bad
        kept = keep_earlier(path)  # a killed run's: moved; a live run's: None and still there
        if kept is not None:  # one killed since the session looked (the session says the ones before)
            log.warning("the crash journal of an earlier run (killed?) was at %s: kept as %s", _shown(path),
                        _shown(kept))
        if not os.path.lexists(path):
            continue
        for n in range(1, KEEP_EARLIER + 1):
            alt = path.with_name(f"{path.name}.{n}")
            fd = _create(alt)
            if fd is not None:
                log.warning("another run writes the same output now (its crash journal %s is in use): this run's "
                            "crash journal is %s", _shown(path), _shown(alt))
                return fd, alt
        raise OSError(errno.EEXIST, f"{KEEP_EARLIER} crash journals are beside it already", str(path))
    raise OSError(errno.EBUSY, "other runs kept moving the crash journal there", str(path))


def keep_earlier(path: Path) -> Path | None:
    """A journal at ``path`` whose lock can be taken is the only data of an earlier run
    that was killed (a normal stop deletes its own): before a new session writes its
    journal there, move it to the first free ``path.N`` (``t.polyprof.partial.1``,
    ``.2``...; the caller says so). A locked one is a live run's: left alone. Returns
    where it went (None: there was none, or it is live, or it was empty and is deleted);
    OSError when it cannot be moved (the new session then writes no journal rather than
    destroy it). Never through a symlink."""
    try:
        if not path.is_file() or path.is_symlink():
            return None
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:  # the lock is held while it moves: a run starting meanwhile sees it live
        if not _lock(fd) or _path_ident(path) != _fd_ident(fd):
            return None  # a live run's, or replaced meanwhile
        if os.fstat(fd).st_size == 0:  # nothing to keep: killed before its first write
            os.unlink(path)
            return None
        return _move_aside(path)
    finally:
        os.close(fd)


def _shown(path: Path) -> str:
    from .output import shown_path  # only when a line names a journal (output imports more)

    return shown_path(path)


def _move_aside(path: Path) -> Path:
    for n in range(1, KEEP_EARLIER + 1):
        kept = path.with_name(f"{path.name}.{n}")
        try:
            os.link(path, kept)  # fails if taken: no earlier keep is ever replaced
        except FileExistsError:
            continue
        except OSError as e:  # no hard links here (some file systems): a rename after a look
            if kept.exists() or kept.is_symlink():
                continue
            try:
                os.rename(path, kept)
            except OSError as e2:
                raise OSError(f"cannot move {path} aside: {e2.strerror or e2}") from e
            return kept
        os.unlink(path)
        return kept
    raise OSError(f"{path}: {KEEP_EARLIER} earlier crash journals are kept beside it already")


#: journals this process finished writing, by the path asked for (OUTPUT.partial),
#: each still open and locked until :func:`discard` (or until its path no longer
#: names it: :func:`_sweep`)
_finished: dict[Path, list[Sink]] = {}


def finished(asked: Path, sink: Sink) -> None:
    """A journal asked for at ``asked`` is finished (``sink``: wherever it went). It
    stays locked, so no run starting before the trace is saved takes it for a killed
    run's, and open, so its inode is not reused by another file before :func:`discard`."""
    _sweep()
    sinks = _finished.setdefault(Path(asked), [])
    if sink not in sinks:
        sinks.append(sink)


def discard(asked: str | Path) -> None:
    """Once the trace is saved: delete the journals this process wrote for ``asked``
    (``OUTPUT.partial``; wherever each went), each only while its path still names it:
    never another run's journal that has the same name now."""
    for sink in _finished.pop(Path(asked), []):
        sink.discard()


def _sweep() -> None:
    """Let go of finished journals that are gone from their paths (deleted by path, moved)."""
    for asked, sinks in list(_finished.items()):
        kept = [s for s in sinks if s.named()]
        for s in sinks:
            if s not in kept:
                s.release()
        if kept:
            _finished[asked] = kept
        else:
            del _finished[asked]


def _forget_in_child() -> None:
    """A forked child holds no finished journal of its parent (nor its locks)."""
    sinks = [s for v in _finished.values() for s in v]
    _finished.clear()
    _at.clear()
    for s in sinks:
        s.release()


os.register_at_fork(after_in_child=_forget_in_child)


class Sink:
    """The journal's descriptor behind the checks the module's notes describe: a
    binary sink for :class:`~polyprof.trace.arrow_write.StreamWriter`."""

    def __init__(self, path: Path, follow_symlinks: bool = False):
        fd, self.path = create(Path(path), follow_symlinks)
        _at[Path(path)] = self.path
        ident = _fd_ident(fd)
        if ident is None:
            raise OSError(errno.EBADF, "the crash journal's descriptor was closed as it was opened", str(path))
        self.fd: int | None = fd
        self.ident: Ident = ident
        #: bytes written: the file's size, checked before it is appended to again
        self.size = 0
        self.closed = False
        #: how often the journal was opened again after the program closed its descriptor
        self.reopened = 0

    def fileno(self) -> int:
        """The journal's descriptor as last checked (-1: none)."""
        return -1 if self.fd is None else self.fd

    def ours(self, fd: int) -> bool:
        """Whether ``fd`` still refers to the journal's file."""
        return _fd_ident(fd) == self.ident

    def _fd(self) -> int:
        """The journal's descriptor, checked; opened again by its path when the program
        closed (or replaced) it; OSError when it cannot be."""
        if self.closed:
            raise ValueError("write to a closed crash journal")
        fd = self.fd
        if fd is not None and self.ours(fd):
            return fd
        self.fd = None  # the program's number now: never written or closed again
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        fd = move_high(fd)
        try:
            st = os.fstat(fd)
            if _ident(st) != self.ident or st.st_size != self.size:
                raise OSError(errno.ESTALE, "the program closed its descriptor and the file at its path is no "
                              "longer the one written (moved, replaced or written by someone else)", str(self.path))
            if not _lock(fd):
                raise OSError(errno.EAGAIN, "the program closed its descriptor and another process holds its "
                              "lock now", str(self.path))
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.reopened = fd, self.reopened + 1
        log.info("crash journal %s: the program closed its descriptor; opened again", self.path)
        return fd

    def write(self, data: bytes) -> int:
        fd = self._fd()
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        self.size += done
        return done

    def finish(self) -> None:
        """No more writes; the descriptor (and its lock) is kept until :meth:`release`."""
        self.closed = True

    def named(self) -> bool:
        """Whether the journal's path still names its file (checked through the
        descriptor it keeps, so an inode freed and reused elsewhere never matches)."""
        return self.fd is not None and self.ours(self.fd) and _path_ident(self.path) == self.ident

    def discard(self) -> None:
        """Delete the journal's file if its path still names it; then :meth:`release`."""
        try:
            if self.named():
                os.unlink(self.path)
        except OSError as e:
            log.debug("crash journal %s: not deleted: %s", self.path, e)
        self.release()

    def release(self) -> None:
        """Close the descriptor if it is still the journal's (never the program's file)."""
        self.closed = True
        fd, self.fd = self.fd, None
        if fd is not None and self.ours(fd):
            os.close(fd)

    close = release

    def abandon(self) -> None:
        """In a forked child: the descriptor (if still the journal's) points at /dev/null,
        so nothing the child does can reach the parent's file; nothing is closed."""
        self.closed = True
        fd, self.fd = self.fd, None
        if fd is None or not self.ours(fd):
            return
        try:
            null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            os.dup2(null, fd, inheritable=False)
            os.close(null)
        except OSError:
            pass
