"""Writing a session's trace where the user asked, or saying clearly where it went.

The trace is written to a temporary file next to the output and renamed over it, so
a full disk leaves the old file (or none), never a corrupt one. The output's missing
directories are created. A symlink at the output is refused unless asked for (a
pre-planted link must not make polyprof overwrite its target), and so is anything
that is not a regular file (``/dev/full``, a directory). When the output cannot be
written, the trace goes to a fallback file in the temporary directory; the result
names the file actually written, or says that none was.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..errors import OutputError
from ..outfile import check_target, replacing
from ..trace.identity import LAUNCHER_VARIABLES
from .journal_where import where

if TYPE_CHECKING:
    from ..trace.core import Trace

__all__ = ["OutputError", "Written", "check_target", "fallback_path", "journal_note", "launcher_rank",
           "open_exclusive", "per_rank", "save", "shown_path", "write_atomic", "written_line"]

log = logging.getLogger("polyprof")


class Written:
    """Where the trace went: ``path`` (None: nowhere) and why not the output."""

    __slots__ = ("requested", "path", "error")

    def __init__(self, requested: Path, path: Path | None, error: str | None = None):
        self.requested = requested
        self.path = path
        self.error = error

    def __repr__(self) -> str:
        return f"Written(requested={self.requested!r}, path={self.path!r}, error={self.error!r})"

    @property
    def fell_back(self) -> bool:
        return self.path is not None and self.error is not None


def shown_path(path: object, cwd: str | None = None) -> str:
    """``path`` as polyprof's lines name a file: relative to ``cwd`` (the current
    directory) when under it, else as it is."""
    text = os.fspath(path)  # type: ignore[call-overload]
    try:
        rel = os.path.relpath(text, cwd)
    except ValueError:
        return str(text)
    return str(text) if rel == ".." or rel.startswith(".." + os.sep) else rel


def journal_note(output: object, cwd: str | None = None) -> str:
    """Where the crash journal keeps the host data of a trace not written, if it is there."""
    if output is None:
        return ""
    partial = os.fspath(where(f"{os.fspath(output)}.partial"))  # type: ignore[call-overload]
    return f"; the host data recorded so far is in {shown_path(partial, cwd)}" if os.path.isfile(partial) else ""


def written_line(w: Written | None, n_events: int, cwd: str | None = None, *, lead: str = "", before: str = "",
                 output: object = None) -> str:
    """The line that says where a session's trace went (``w``: its ``written``), or that it
    was not written and where the crash journal keeps its host data (``output``'s, where
    nothing was asked of ``w``). ``lead`` and ``before`` name what ended the session
    (collect/exits.py: "os.execv(...): ", " before os.execv"); paths as
    :func:`shown_path` gives them from ``cwd``."""
    if w is None or w.path is None:
        error = w.error if w is not None else "no output"
        note = journal_note(w.requested if w is not None else output, cwd)
        return f"polyprof: error: could not write the trace{before}: {error}{note}"
    instead = f" instead of {shown_path(w.requested, cwd)}" if w.fell_back else ""
    return f"polyprof: {lead}trace written to {shown_path(w.path, cwd)}{instead} ({n_events} events)"


def write_atomic(trace: Trace, path: Path, follow_symlinks: bool = False) -> Path:
    """Save ``trace`` at ``path`` (temporary file + rename); OutputError on any failure."""
    with replacing(path, force=follow_symlinks) as tmp:
        trace.save(tmp)
    return path.resolve() if follow_symlinks and path.is_symlink() else path


def launcher_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """This process's rank when a launcher started several (None: one process)."""
    env = os.environ if environ is None else environ
    for rank, size in LAUNCHER_VARIABLES:
        try:
            r, n = int(env[rank]), int(env[size])
        except (KeyError, ValueError):
            continue
        if n > 1 and 0 <= r < n:
            return r
    return None


def launcher_world_size(environ: Mapping[str, str] | None = None) -> int | None:
    """The number of processes the launcher started (its first size variable set)."""
    env = os.environ if environ is None else environ
    for _, size in LAUNCHER_VARIABLES:
        if env.get(size, "").isdigit():
            return int(env[size])
    return None


def per_rank(path: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The output of this rank: ``{rank}`` in the name replaced, else ``.rankN`` put before
    the suffix (``train.polyprof`` -> ``train.rank3.polyprof``) when a launcher (torchrun,
    mpirun, srun) started several processes, so no rank overwrites another's file."""
    rank = launcher_rank(environ)
    if "{rank}" in path.name:
        return path.with_name(path.name.replace("{rank}", str(rank if rank is not None else 0)))
    if rank is None:
        return path
    suffix = "".join(path.suffixes[-1:]) if path.suffix else ""
    return path.with_name(f"{path.name[:len(path.name) - len(suffix)]}.rank{rank}{suffix}")


def fallback_path(requested: Path) -> Path:
    """A fresh file in the temporary directory, named after the output."""
    fd, name = tempfile.mkstemp(prefix=f"{requested.stem}-{os.getpid()}-", suffix=requested.suffix or ".polyprof")
    os.close(fd)
    return Path(name)


def save(trace: Trace, requested: Path, follow_symlinks: bool = False) -> Written:
    """Write at ``requested``, else at a fallback; never raises an ordinary error."""
    try:
        return Written(requested, write_atomic(trace, requested, follow_symlinks))
    except OutputError as e:
        first = str(e)
    try:
        alt = fallback_path(requested)
        write_atomic(trace, alt, follow_symlinks=False)
    except (OutputError, OSError) as e:
        log.error("%s; the fallback failed too: %s", first, e)
        return Written(requested, None, first)
    log.error("%s; the trace was written to %s instead", first, alt)
    return Written(requested, alt, first)


def open_exclusive(path: Path, follow_symlinks: bool = False) -> int:
    """A write-only fd for a fresh file at ``path`` that never follows a symlink
    (replaces an existing regular file); OSError otherwise."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd
