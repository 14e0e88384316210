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

The output's name picks the format, as ``polyprof export -o`` does
(``formats/registry.for_output``: ``-o r1.json.gz`` Chrome JSON gzipped, ``.pt.trace.json``
Kineto JSON, ``.pftrace`` Perfetto, ``.xplane.pb`` XSpace, ``.parquet`` the event table):
:func:`writer_for`. Any other name gets polyprof's own archive (a zip); one with an
ending polyprof cannot write (``.txt``, ``.csv``) gets it too, and a warning says what
was written. The names made from the output keep its ending (:func:`beside`,
:func:`per_rank`, :func:`fallback_path`: ``r1.1.json.gz``, ``r1.rank3.json.gz``). The
fallback of an output in another format is polyprof's own archive (``r1-PID-XXXX.polyprof``
in the temporary directory: lossless, and ``polyprof export`` makes the format asked for
from it), which also keeps a trace the format's writer failed on. The crash journal is
``OUTPUT.partial`` in polyprof's journal format whatever the output's format
(collect/journal.py). A file at an output in another format is one of ours to replace
(:func:`not_ours`) when it is polyprof's archive or a file of that format as polyprof
writes it: JSON with a trace's keys (``traceEvents``...), a Perfetto or XSpace protobuf
(their readers' sniffs), a Parquet file whose footer holds polyprof's metadata; a user's
other JSON or Parquet data set is not.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional

from ..errors import OutputError, PolyprofError
from ..outfile import check_target, drop_lock, lock_path, replacing, take_lock
from ..trace.identity import LAUNCHER_VARIABLES
from .journal_where import where

if TYPE_CHECKING:
    from ..formats.registry import Format
    from ..trace.core import Trace
    from .session import Session

__all__ = ["ANY", "OutputError", "Stamp", "Written", "beside", "check_target", "ending", "fallback_name",
           "fallback_path", "journal_note", "launcher_rank", "nest_root", "not_ours", "open_exclusive", "per_rank",
           "save", "say_native", "shown_path", "stamp", "to_fallback", "write_atomic", "writer_for", "written_line"]

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
#: the ending of polyprof's own archive
NATIVE = ".polyprof"
#: endings of an output written as polyprof's own archive without a warning (besides
#: :data:`NATIVE` and none): the archive is a zip
ZIP_ENDINGS = (".zip",)
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
    return held_in(partial, cwd) if os.path.isfile(partial) else ""


def held_in(partial: str | Path, cwd: str | None = None) -> str:
    """``; the host data recorded so far (N events) is in PATH``, or, where the crash
    journal at ``partial`` holds none (it stopped before it wrote any: the disk it is on
    is full too; or a live one that has written none yet), that it holds nothing."""
    shown = shown_path(os.fspath(partial), cwd)
    try:
        from ..formats.detect import load  # (the failure path only: a read of what the journal kept)

        n = load(partial).n_events
    except Exception:  # noqa: BLE001 - a journal cut anywhere: say where it is, not what it holds
        return f"; the host data recorded so far is in {shown}"
    if not n:
        return f"; the crash journal {shown} holds no event either"
    return f"; the host data recorded so far ({n:,} events) is in {shown}"


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


def writer_for(path: Path) -> Format | None:
    """The format other than polyprof's own that the output's name asks for by its ending
    (``formats/registry.for_output``, as ``polyprof export -o``); None: polyprof's own
    archive (``.polyprof``, no ending, or one polyprof cannot write as a file)."""
    name = path.name.lower()
    if name.endswith(NATIVE) or "." not in name.lstrip("."):
        return None  # (the registry not asked: its formats of other packages are looked for on first use)
    from ..formats import registry  # (an output named for another format only)

    return _other(registry.for_output(name))


def _other(fmt: Format | None) -> Format | None:
    """``fmt`` where it is a format other than polyprof's own that writes one file, else None."""
    return None if fmt is None or fmt.name == "polyprof" or fmt.directory or not fmt.writer else fmt


def ending(path: Path) -> str:
    """The ending of ``path``'s name that names its format: the writable format's suffix
    (``.json.gz``, ``.pt.trace.json``), else the last suffix (``.polyprof``; "" for none)."""
    fmt = writer_for(path)
    if fmt is None:
        return path.suffix
    name = path.name.lower()
    n = max(len(s) for s in fmt.suffixes if name.endswith(s))
    return path.name[len(path.name) - n:]


def _native_ending(path: Path) -> bool:
    """Whether polyprof's own archive is rightly named ``path``: ``.polyprof``, ``.zip``, no
    ending, or only a rank's or a number's (``t.rank3``, ``t.1``: :func:`per_rank`, :func:`beside`)."""
    suffix = path.suffix.lower()
    return suffix in ("", NATIVE, *ZIP_ENDINGS) or suffix[1:].removeprefix("rank").isdigit()


def foreign(path: Path) -> bool:
    """Whether a regular file at ``path`` is none a save may replace (:func:`not_ours`)."""
    return not_ours(path) is not None


def not_ours(path: Path, fmt: str | None = None) -> str | None:
    """What a regular file at ``path`` that a save must not replace is not ("a polyprof
    trace"); None where it may be replaced. Ours: a polyprof trace (a zip archive with a
    trace's ``header.json``; only the archive's directory is read), or, at an output named
    for another format (:func:`writer_for`), a file of that format as polyprof writes it
    (:func:`_of_format`). Not ours: a user's notes, a script, NumPy's ``.npz``, a ``.docx``,
    another tool's JSON or Parquet data. An empty file counts as none (``touch
    t.polyprof``); a file that cannot be read is left to the save to report. ``fmt``: the
    name of the format to be written there, where the output's name may not say it
    (``polyprof export -f``: cli/common.check_output); a file of the format the name asks
    for is ours then too."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size == 0:
            return None  # (a link planted at the output: the save refuses it, saying how to follow it)
        if _native_trace(path):
            return None
    except OSError:
        return None
    named = writer_for(path)
    if fmt is None:
        written, why = named, "the format its name asks for"
    else:  # (also the format its name asks for: polyprof's export of another -f before)
        from ..formats import registry  # (a format named: the CLI's export only)

        written, why = _other(registry.by_name(fmt)), "the format written"
    if named is not None and named != written and _of_format(path, named):
        return None
    if written is None:
        return "a polyprof trace"
    return None if _of_format(path, written) else f"a {written.name} trace ({why}) or a polyprof trace"


def _native_trace(path: Path) -> bool:
    """Whether ``path`` is a zip archive with a trace's ``header.json``; OSError."""
    import zipfile  # (a session with an output: its start only)

    with open(path, "rb") as f:
        if f.read(len(TRACE_HEAD)) != TRACE_HEAD:
            return False
    try:
        with zipfile.ZipFile(path) as z:
            return "header.json" in z.namelist()
    except zipfile.BadZipFile:
        return False


def _of_format(path: Path, fmt: Format) -> bool:
    """Whether ``path`` is a file of ``fmt`` as polyprof writes it, by what polyprof's
    readers see in its first bytes (``formats/detect.py``): trace-event JSON for Chrome and
    Kineto (a key only a trace has in its first 64 KiB), Perfetto's and XSpace's own
    sniffs, a Parquet file whose footer holds polyprof's metadata; another package's
    format by its own sniff (none: not ours)."""
    from ..formats import detect  # (a file at an output named for another format: its start only)

    try:
        found = detect.detect(path)
        if fmt.name in ("chrome", "kineto"):
            return found == "chrome-json" and detect.why_not_a_trace(path) == ""
        if fmt.name == "parquet":
            return found == "parquet" and _polyprof_parquet(path)
        return found == fmt.name
    except (PolyprofError, OSError):
        return False


def _polyprof_parquet(path: Path) -> bool:
    """Whether a Parquet file's footer holds polyprof's metadata (formats/parquet.py writes it)."""
    import pyarrow.parquet as pq  # (a Parquet file at a .parquet output only)

    try:
        return b"polyprof" in (pq.read_schema(path).metadata or {})
    except (OSError, ValueError, TypeError):  # (pyarrow's ArrowInvalid is a ValueError)
        return False


def beside(path: Path, n: int) -> Path:
    """The ``n``-th name beside ``path`` for a trace that must not replace it:
    ``t.polyprof`` -> ``t.1.polyprof`` (``t`` -> ``t.1``; ``t.json.gz`` -> ``t.1.json.gz``:
    its :func:`ending` kept, so the name asks for the same format)."""
    end = ending(path)
    return path.with_name(f"{path.name[:len(path.name) - len(end)]}.{n}{end}")


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
    as ``found`` (:func:`_put`), in the format its name asks for (:func:`writer_for`; the
    temporary file's name ends with ``path``'s, so ``.gz`` is gzipped); returns where it
    went; OutputError on any failure (a PolyprofError of the format's writer as it is)."""
    save_at = saver(path)
    went: list[Path] = []
    with replacing(path, force=follow_symlinks, rename=lambda tmp, dest: went.append(_put(tmp, dest, found))) \
            as tmp:
        save_at(trace, tmp)
    return went[-1]


def saver(path: Path) -> Callable[[Trace, Path], object]:
    """What writes a trace into a file for ``path``: the writer of the format its name asks
    for (:func:`writer_for`), else polyprof's own archive (``Trace.save``); for a
    session's output and a capture's (capture/output.py) alike."""
    fmt = writer_for(path)
    if fmt is None:
        return lambda trace, at: trace.save(at)
    return fmt.write_here


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
    mpirun, srun) started several processes, so no rank overwrites another's file; a name
    that already ends with this rank's (``-o t.rank$RANK.polyprof``, ``rank3.json``,
    ``t_rank3.json``) as it is (before: ``t.rank3.rank3.polyprof``)."""
    rank = launcher_rank(environ)
    if "{rank}" in path.name:
        return path.with_name(path.name.replace("{rank}", str(rank if rank is not None else 0)))
    suffix = ending(path)  # (``t.json.gz`` -> ``t.rank3.json.gz``: still named for its format)
    stem = path.name[:len(path.name) - len(suffix)]
    if rank is None or stem == f"rank{rank}" or stem.endswith((f".rank{rank}", f"_rank{rank}", f"-rank{rank}")):
        return path
    return path.with_name(f"{stem}.rank{rank}{suffix}")


def fallback_path(requested: Path) -> Path:
    """A fresh file in the temporary directory, named after the output, with its
    :func:`ending` (``.polyprof`` where it has none)."""
    end = ending(requested)
    stem = requested.name[:len(requested.name) - len(end)]
    fd, name = tempfile.mkstemp(prefix=f"{stem}-{os.getpid()}-", suffix=end or NATIVE)
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
    except (PolyprofError, OSError) as e:  # (OutputError, or a writer that cannot write this trace)
        if alt is not None:  # (the empty file fallback_path made: not left in the temporary directory)
            with contextlib.suppress(OSError):
                alt.unlink()
        raise OutputError(f"{first}; the fallback failed too: {e}") from None
    return alt


def save(trace: Trace, requested: Path, follow_symlinks: bool = False, found: object = ANY,
         again: Written | None = None) -> Written:
    """Write at ``requested`` in the format its name asks for (:func:`writer_for`),
    replacing a file there only while it is as ``found``, else beside it (:func:`_put`);
    else at a fallback (:func:`_fall_back`); never raises an ordinary error. ``again``:
    this session's earlier save, whose file (wherever it went) this one replaces while it
    is as that save left it."""
    at = requested
    if again is not None and again.path is not None and again.stamp is not None:
        at, found = again.path, again.stamp
    try:
        path = write_atomic(trace, at, follow_symlinks, found)
    except PolyprofError as e:  # (OutputError, or a format's writer that cannot write this trace)
        return _fall_back(trace, requested, str(e))
    say_native(requested, path)
    if path in (requested, requested.resolve()):
        return Written(requested, path, stamp=stamp(path))
    kind = (not_ours(requested) or "a polyprof trace") if found is FOREIGN else ""
    what, why = ((f"is not {kind}", f"it is not {kind}") if found is FOREIGN else
                 ("was written by another run (or program) while this one ran",
                  "another run (or program) wrote it while this one ran"))
    if at == requested:
        log.warning("%s %s: not replaced; this run's trace is %s", shown_path(requested), what, shown_path(path))
    return Written(requested, path, why, stamp(path))


def _fall_back(trace: Trace, requested: Path, first: str) -> Written:
    """The trace in a fresh file of the temporary directory (:func:`to_fallback`), as
    polyprof's own archive where the output asked for another format (lossless, whatever
    kept that format's writer from it: ``polyprof export`` converts it), named ``.polyprof``
    where the output's ending is not one for the archive (``notes.txt``: ``notes-PID-XXXX.polyprof``)."""
    other = writer_for(requested) is not None
    named = requested if not other and _native_ending(requested) else fallback_name(requested)
    try:
        alt = to_fallback(named, lambda at: write_atomic(trace, at, follow_symlinks=False), first)
    except OutputError as e:
        log.error("%s", e)
        return Written(requested, None, first)
    how = (f" (polyprof's own archive: `polyprof export {alt} -o {requested.name}` writes the format asked for)"
           if other else "")
    log.error("%s; the trace was written to %s instead%s", first, alt, how)
    return Written(requested, alt, first)


def fallback_name(requested: Path) -> Path:
    """``requested`` named for polyprof's own archive: ``r1.json.gz`` -> ``r1.polyprof``."""
    end = ending(requested)
    return requested.with_name(f"{requested.name[:len(requested.name) - len(end)]}{NATIVE}")


def say_native(requested: Path, path: Path) -> None:
    """A warning where polyprof's own archive went to an output whose ending names a file
    of another kind, which polyprof cannot write (``.txt``, ``.csv``, ``.pb.gz``): what it is
    (a session's output, a capture's: cli/capture.py)."""
    if writer_for(requested) is not None or _native_ending(requested):
        return
    suffixes = requested.suffixes
    ending = "".join(suffixes[-2:]) if requested.suffix.lower() in (".gz", ".xz", ".bz2", ".zst") else requested.suffix
    log.warning("%s: polyprof has no writer for names ending %s: this is its own trace archive (a zip, which "
                "polyprof.load and the polyprof commands read); name the output .polyprof, or for another format "
                "%s, or convert it: polyprof export %s -o NAME.json.gz", shown_path(path), ending, _endings(),
                shown_path(path))


def _endings() -> str:
    """The endings that pick a format other than polyprof's own, for a message."""
    from ..formats.registry import writers  # (a message about an output's name only)

    return ", ".join(s for f in writers() if f.name != "polyprof" and not f.directory for s in f.suffixes)


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
