"""Every output file polyprof writes goes through here: written to a temporary file
beside its target, flushed to disk, then renamed over the target.

So a full disk, a killed process or a writer that raises leaves the previous file at
the target byte for byte (or none), never a truncated one, and the error names the
target. A symbolic link planted at the target is refused unless the caller says
``force=True`` (the CLI's ``--force``; ``polyprof run``'s ``--follow-symlinks``), and
so is a target that is a directory or not a regular file (``/dev/full``). The
temporary file's name *ends* with the target's name, so writers that choose an
encoding by the ending (``.json.gz`` gzipped) behave as for the target itself.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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
        if isinstance(e, OutputError) or not isinstance(e, Exception) or type(e).__module__.startswith("polyprof"):
            raise
        raise OutputError(f"cannot write {path}: {type(e).__name__}: {e} (any previous file there is unchanged)") \
            from None


def write_file(path: str | Path, write: Callable[[Path], T], force: bool = False) -> T:
    """``write(tmp)`` inside :func:`replacing`; returns what ``write`` returned."""
    with replacing(path, force) as tmp:
        return write(tmp)
