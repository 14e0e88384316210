"""Writing a session's trace where the user asked, or saying clearly where it went.

The trace is written to a temporary file next to the output and renamed over it, so
a full disk leaves the old file (or none), never a corrupt one. The output's missing
directories are created. A symlink at the output is refused unless asked for (a
pre-planted link must not make polyprof overwrite its target), and so is anything
that is not a regular file (``/dev/full``, a directory). When the output cannot be
written, the trace goes to a fallback file in the temporary directory; the result
names the file actually written, or says that none was.

A file at the output is replaced, as a run again with the same output expects, unless
another writer changed it after this session started (another run with the same
output that ended first, the program itself), or it is no trace at all (``-o notes.txt``
over the user's notes, ``-o data.npz``: :func:`foreign`): then the trace goes beside it, to the first
free ``t.N.polyprof`` (:func:`beside`), nothing is replaced, and a warning says so
(``polyprof run`` refuses such an output before the program starts). A session nested in another with the same output (``polyprof.profile(output=OUT)``
in ``polyprof run -o OUT``) looks with the outermost one's snapshot, and the next save
of them replaces the file the last one wrote (``again``: collect/session.py). The look
and the rename are done under the lock file beside the output (``.NAME.polyprof-lock``,
``outfile.take_lock``; never the folder's own lock, which other programs take), so two
runs ending at once do not both take the output for unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional

from ..errors import OutputError
from ..outfile import check_target, drop_lock, lock_path, replacing, take_lock
from ..trace.identity import LAUNCHER_VARIABLES
from .journal_where import where

if TYPE_CHECKING:
    from ..trace.core import Trace
    from .session import Session

__all__ = ["ANY", "OutputError", "Stamp", "Written", "beside", "check_target", "fallback_path", "journal_note",
           "launcher_rank", "nest_root", "open_exclusive", "per_rank", "save", "shown_path", "stamp", "to_fallback",
           "write_atomic", "written_line"]

log = logging.getLogger("polyprof")

#: what is at an output: (device, inode, size, mtime in ns); None: no file (or none readable)
Stamp = Optional[tuple[int, int, int, int]]
#: ``found`` for a write that replaces whatever is at its output
ANY: object = object()
#: ``found`` where the session found a file that is no trace at its output (:func:`foreign`):
#: never replaced
FOREIGN: object = object()
#: how a polyprof trace begins (a zip archive: formats/native.py)
TRACE_HEAD = b"PK\x03\x04"
#: how many traces of other runs one output may have beside it (``t.1.polyprof`` ... ``t.N.polyprof``)
BESIDE = 1000
#: seconds a save waits for another run's look-and-rename at the same output (a fraction of a
#: millisecond) before it goes on without the lock, saying so
LOCK_WAIT_S = 2.0


class Written:
    """Where the trace went: ``path`` (None: nowhere) and why not the output."""

    __slots__ = ("requested", "path", "error", "stamp")

    def __init__(self, requested: Path, path: Path | None, error: str | None = None, stamp: Stamp = None):
        self.requested = requested
        self.path = path
        self.error = error
        #: what was written, as :func:`stamp` saw it just after (None: a fallback, or nothing):
        #: a second save of the same session (collect/exits.py) replaces only that
        self.stamp = stamp

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


def stamp(path: Path) -> Stamp:
    """What is at ``path`` now (through a symbolic link), to tell later whether another
    writer replaced or changed it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def foreign(path: Path) -> bool:
    """Whether a regular file at ``path`` is no polyprof trace, which a save must not
    replace: not a zip archive (a user's notes, a script, another tool's JSON), or a zip
    without a trace's ``header.json`` (NumPy's ``.npz``, a ``.docx``: only the archive's
    directory is read). An empty file counts as none (``touch t.polyprof``); a file that
    cannot be read is left to the save to report."""
    import zipfile  # (a session with an output: its start only)

    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size == 0:
            return False  # (a link planted at the output: the save refuses it, saying how to follow it)
        with open(path, "rb") as f:
            if f.read(len(TRACE_HEAD)) != TRACE_HEAD:
                return True
        with zipfile.ZipFile(path) as z:
            return "header.json" not in z.namelist()
    except zipfile.BadZipFile:
        return True
    except OSError:
        return False


def beside(path: Path, n: int) -> Path:
    """The ``n``-th name beside ``path`` for a trace that must not replace it:
    ``t.polyprof`` -> ``t.1.polyprof`` (``t`` -> ``t.1``)."""
    return path.with_name(f"{path.stem}.{n}{path.suffix}")


@contextlib.contextmanager
def _locked(dest: Path) -> Iterator[None]:
    """Hold the lock file beside ``dest`` (``outfile.take_lock``), so runs saving there
    look at it and rename over it one at a time. Another run holds it for a fraction of a
    millisecond: a wait of :data:`LOCK_WAIT_S`, then (a holder stopped, a file system
    without locks, a read-only folder) the save goes on without it, and a warning says
    what is then not sure."""
    lock = lock_path(dest)
    try:
        fd = take_lock(lock, LOCK_WAIT_S)
    except OSError as e:
        why = f"{e.strerror} for over {LOCK_WAIT_S:g} s" if isinstance(e, BlockingIOError) else e.strerror or e
        log.warning("%s: saved without its lock (%s: %s): another run with the same output ending at this "
                    "moment could replace this trace, or have it replaced", shown_path(dest), shown_path(lock), why)
        yield
        return
    try:
        yield
    finally:
        drop_lock(lock, fd)


def _put(tmp: Path, dest: Path, found: object) -> Path:
    """``tmp`` renamed over ``dest``, unless another writer made or changed ``dest`` since
    the session started: what is there now is not what :func:`stamp` saw then (``found``;
    :data:`ANY`: replace whatever is there). Then ``tmp`` goes to the first free
    :func:`beside` name instead, replacing nothing. Returns where it went; OSError."""
    if found is ANY:
        os.replace(tmp, dest)
        return dest
    with _locked(dest):
        now = stamp(dest)
        if now is None or now == found:
            os.replace(tmp, dest)
            return dest
        for n in range(1, BESIDE + 1):
            alt = beside(dest, n)
            try:
                os.link(tmp, alt)  # fails if taken: nothing is replaced
            except FileExistsError:
                continue
            except OSError:  # no hard links here (some file systems): a rename after a look, under the lock
                if os.path.lexists(alt):
                    continue
                os.rename(tmp, alt)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return alt
    raise OSError(errno.EEXIST, f"{BESIDE} traces of other runs are beside it already", str(dest))


def nest_root(outer: Session | None, output: Path) -> Session | None:
    """The outermost session with ``output`` that a session opened in ``outer`` nests in
    (None: none): the new one looks with its snapshot of the output (``_found``), taken
    before another run could write there, not with one of its own."""
    while outer is not None:
        if outer.output is not None and os.path.realpath(outer.output) == os.path.realpath(output):
            return outer._root
        outer = outer._outer
    return None


def write_atomic(trace: Trace, path: Path, follow_symlinks: bool = False, found: object = ANY) -> Path:
    """Save ``trace`` at ``path`` (temporary file + rename), or beside it if it is no longer
    as ``found`` (:func:`_put`); returns where it went; OutputError on any failure."""
    went: list[Path] = []
    with replacing(path, force=follow_symlinks, rename=lambda tmp, dest: went.append(_put(tmp, dest, found))) \
            as tmp:
        trace.save(tmp)
    return went[-1]


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


def to_fallback(requested: Path, write: Callable[[Path], object], first: str) -> Path:
    """``write`` into a fresh file of the temporary directory named after ``requested``,
    whose own write failed with ``first``: the file written. Where that fails too, the
    fallback file is removed and an OutputError names both failures. The one rule for
    where a trace goes when its output cannot be written (:func:`save`, capture/output.py)."""
    alt = None
    try:
        alt = fallback_path(requested)
        write(alt)
    except (OutputError, OSError) as e:
        if alt is not None:  # (the empty file fallback_path made: not left in the temporary directory)
            with contextlib.suppress(OSError):
                alt.unlink()
        raise OutputError(f"{first}; the fallback failed too: {e}") from None
    return alt


def save(trace: Trace, requested: Path, follow_symlinks: bool = False, found: object = ANY,
         again: Written | None = None) -> Written:
    """Write at ``requested`` (replacing a file there only while it is as ``found``, else
    beside it: :func:`_put`), else at a fallback; never raises an ordinary error.
    ``again``: this session's earlier save, whose file (wherever it went) this one
    replaces while it is as that save left it."""
    at = requested
    if again is not None and again.path is not None and again.stamp is not None:
        at, found = again.path, again.stamp
    try:
        path = write_atomic(trace, at, follow_symlinks, found)
    except OutputError as e:
        first = str(e)
    else:
        if path in (requested, requested.resolve()):
            return Written(requested, path, stamp=stamp(path))
        what, why = (("is not a polyprof trace", "it is not a polyprof trace") if found is FOREIGN else
                     ("was written by another run (or program) while this one ran",
                      "another run (or program) wrote it while this one ran"))
        if at == requested:
            log.warning("%s %s: not replaced; this run's trace is %s", shown_path(requested), what, shown_path(path))
        return Written(requested, path, why, stamp(path))
    try:
        alt = to_fallback(requested, lambda at: write_atomic(trace, at, follow_symlinks=False), first)
    except OutputError as e:
        log.error("%s", e)
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
