"""Every output file polyprof writes goes through here: written to a temporary file
beside its target, flushed to disk, then renamed over the target.

So a full disk, a killed process or a writer that raises leaves the previous file at
the target byte for byte (or none), never a truncated one, and the error names the
target. A symbolic link planted at the target is refused unless the caller says
``force=True`` (the CLI's ``--force``; ``polyprof run``'s ``--follow-symlinks``), and
so is a target that is a directory or not a regular file (``/dev/full``). The
temporary file's name *ends* with the target's name, so writers that choose an
encoding by the ending (``.json.gz`` gzipped) behave as for the target itself.

Processes that must write one target in turn take an ``flock`` on a hidden lock file
beside it, ``.NAME.polyprof-lock`` (:func:`take_lock`; a run's save, collect/output.py),
never on the folder: another program may hold the folder's own lock (``flock . cmd``),
and NFS locks only a file opened for writing. The holder removes the file as it gives the
lock back (:func:`drop_lock`); one that waited checks, once it holds the lock, that the
file is still the one at the name, else opens the new one (so the removal never lets two
hold it). A killed holder leaves the file, hidden and empty of meaning: the next takes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from .errors import OutputError

T = TypeVar("T")


def check_target(path: Path, force: bool = False) -> None:
    """OutputError if ``path`` is not somewhere polyprof may write a file."""
    if path.is_symlink() and not force:
        raise OutputError(f"{path} is a symbolic link (to {os.readlink(path)}); refusing to follow it "
                          "(--force writes through it; polyprof run: --follow-symlinks; the API: force=True)")
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise OutputError(f"{path} is {kind}")


@contextlib.contextmanager
def replacing(path: str | Path, force: bool = False,
              rename: Callable[[Path, Path], object] = os.replace) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed over ``path`` when the block
    ends without an exception, removed otherwise. Failures raise :class:`OutputError`
    naming ``path`` (other PolyprofErrors pass through as they are). ``rename(tmp,
    path)`` puts the file in place (a session's trace: collect/output.py, which keeps a
    file another run wrote there meanwhile)."""
    path = Path(path)
    check_target(path, force)
    if force and path.is_symlink():
        path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the directory {path.parent} for {path}: {e.strerror or e}") from None
    try:
        fd, name = tempfile.mkstemp(prefix=".polyprof-", suffix="-" + path.name, dir=path.parent)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; an output is as readable as any file the user writes
        yield tmp
        with open(tmp, "rb+") as f:  # the data is on disk before the name points at it
            os.fsync(f.fileno())
        rename(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {path}: {e.strerror or e} (any previous file there is unchanged)") \
                from None
        if isinstance(e, MemoryError):  # the writer's own memory, not the file: said so
            raise OutputError(f"not enough memory to write {path}: {e or 'MemoryError'} (any previous file there "
                              "is unchanged)") from None
        if isinstance(e, OutputError) or not isinstance(e, Exception) or type(e).__module__.startswith("polyprof"):
            raise
        said = str(e).replace(str(tmp), str(path)).replace(tmp.name, path.name)  # (a writer names its file)
        raise OutputError(f"cannot write {path}: {type(e).__name__}: {said} (any previous file there is "
                          "unchanged)") from None


def lock_path(path: Path) -> Path:
    """The lock file of ``path``: ``.NAME.polyprof-lock`` beside it."""
    return path.parent / f".{path.name}.polyprof-lock"


def _same(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not removed or replaced)."""
    try:
        a, b = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def holder(fd: int) -> str:
    """`` (pid N)``: the process that wrote the lock file open at ``fd``, where it says."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


def take_lock(lock: Path, wait_s: float = 0.0) -> int:
    """A descriptor holding an exclusive ``flock`` on the lock file ``lock`` (made if
    missing, never through a symlink), this process's pid written in it; give it back
    with :func:`drop_lock`. Waits at most ``wait_s`` for another holder, then raises
    BlockingIOError naming it; OSError where the file cannot be made or locked (a
    read-only folder: EROFS; a file system without locks: ENOLCK)."""
    deadline = time.monotonic() + wait_s
    pause = 0.001
    for _ in range(1000):  # (its holder removed it as this one waited: open the new one)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise BlockingIOError(errno.EWOULDBLOCK, f"another process{holder(fd)} holds it",
                                              str(lock)) from None
                    time.sleep(pause)
                    pause = min(2 * pause, 0.05)
        except BaseException:
            os.close(fd)
            raise
        if _same(lock, fd):
            break
        os.close(fd)
    else:
        raise OSError(errno.EAGAIN, "it keeps being replaced", str(lock))
    with contextlib.suppress(OSError):  # (a full disk: the lock holds without it)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def drop_lock(lock: Path, fd: int) -> None:
    """Give back the lock :func:`take_lock` gave, removing its file first (still locked,
    so a process that opened it meanwhile sees it gone and opens a new one)."""
    try:
        if _same(lock, fd):
            os.unlink(lock)
    except OSError:
        pass  # (left: the next one takes its lock)
    finally:
        os.close(fd)


def write_file(path: str | Path, write: Callable[[Path], T], force: bool = False) -> T:
    """``write(tmp)`` inside :func:`replacing`; returns what ``write`` returned."""
    with replacing(path, force) as tmp:
        return write(tmp)
