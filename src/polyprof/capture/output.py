"""Writing what a capture brought back: one file, one file per process, or an XProf log dir.

Several processes give one file per process, named ``<host>-<pid>[-rank<r>]`` from the
trace's source (a polyprof server records its host, pid and rank; a TSL server only
its host, so its port stands in for the pid: ``<host>-port<port>``). The files of one
capture are the ranks of one job (``polyprof.load_ranks(directory)``): the ranks the
processes report (``RANK`` and friends), else their place in the address list.

Each capture is read and written on its own: one that polyprof cannot read (or write)
is a failure of that address (its ``Captured.error`` says why and where its bytes are),
and the others are written. Nothing received is lost: the XSpace as received is kept
(``xplane`` output: the file itself; ``polyprof`` output: see :func:`raw_path`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from .. import logs
from ..errors import CaptureError, OutputError, PolyprofError
from ..outfile import write_file
from .client import Captured
from .protocol import XSPACE_TOOL
from .security import split_address

if TYPE_CHECKING:
    from ..trace.core import Trace

log = logs.kept("polyprof.capture")

FORMATS = {"polyprof": ".polyprof", "xplane": "." + XSPACE_TOOL}
#: the folder of a set's directory that keeps the captures polyprof could not read (not
#: a rank: ``polyprof summary DIR`` reads the others)
UNREADABLE_DIR = "unreadable"

Written = tuple[Captured, Path, int]


def format_for(path: str | Path) -> str:
    return "xplane" if str(path).endswith(("." + XSPACE_TOOL, ".xplane.pb.gz")) else "polyprof"


def process_name(trace: Trace, address: str) -> str:
    """``host-pid[-rankR]`` for a polyprof capture, ``host-portP`` for others (from the
    trace's source, which :meth:`Captured.trace` identifies)."""
    source = trace.sources[0]
    addr_host, port = split_address(address)
    name = f"{source.host or addr_host}-{source.pid}" if source.pid else f"{source.host or addr_host}-port{port}"
    if source.rank is not None:
        name += f"-rank{source.rank}"
    return _safe(name)


def address_name(address: str) -> str:
    """``host-portP`` from the address alone (a capture polyprof could not read)."""
    host, port = split_address(address)
    return _safe(f"{host}-port{port}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def read(c: Captured) -> Trace | None:
    """The capture as a Trace; None when polyprof cannot read it, with ``c.error`` saying
    why (``c.data`` stays: the caller keeps the bytes)."""
    if c.data is None:
        return None
    try:
        return c.trace()
    except Exception as e:  # noqa: BLE001 - any reader failure (a bug included) must not cost the bytes
        if not isinstance(e, PolyprofError):
            log.debug("reading the capture of %s", c.address, exc_info=True)
        text = str(e) if isinstance(e, PolyprofError) else f"{type(e).__name__}: {e}"
        for prefix in (f"capture of {c.address}: ", f"{c.address}: "):
            text = text.removeprefix(prefix)
        c.error = f"polyprof cannot read this capture: {text}"
        return None


def raw_path(path: Path) -> Path:
    """Where a single capture written as ``path`` keeps its XSpace when polyprof cannot
    read it: ``<path>.xplane.pb``."""
    return path.with_name(path.name + "." + XSPACE_TOOL)


def _write_bytes(c: Captured, path: Path) -> Path:
    """The XSpace as received at ``path``, gzipped where its name ends ``.gz``
    (``-o c.xplane.pb.gz``: before, the raw bytes under a gzip name)."""
    def write(tmp: Path) -> None:
        data = c.data or b""
        if path.name.lower().endswith(".gz"):
            import gzip  # (a gzip name only)

            data = gzip.compress(data, compresslevel=5)
        tmp.write_bytes(data)

    return _somewhere(path, lambda at: write_file(at, write))


def _somewhere(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(path)``, else into a file of the temporary directory as ``polyprof run``
    falls back (collect/output.to_fallback: a capture cannot be taken again): where it
    went. An OutputError naming both where neither could be written."""
    try:
        write(path)
        return path
    except OutputError as e:
        first = str(e)
    from ..collect.output import to_fallback  # (only when the output cannot be written)

    alt = to_fallback(path, write, first)
    log.error("%s; the capture was written to %s instead", first, alt)
    return alt


def _keep(c: Captured, path: Path) -> Path | None:
    """Write the XSpace as received to ``path`` for a capture polyprof could not read, and
    say so in its error; where it went."""
    try:
        path = _write_bytes(c, path)
    except PolyprofError as e:
        c.error = f"{c.error}; its XSpace could not be kept either: {e}"
        return None
    c.error = f"{c.error}; the XSpace as received is in {path}"
    return path


def _save(trace: Trace, path: Path) -> None:
    """Write a capture's trace at ``path`` in the format its name asks for, as ``polyprof
    run -o`` does (``-o c.json.gz``: Chrome JSON; collect/output.saver), atomically."""
    from ..collect.output import saver  # (the writers' registry: only where a trace is written)

    save_at = saver(path)
    write_file(path, lambda tmp: save_at(trace, tmp))


def _write(c: Captured, path: Path, fmt: str, trace: Trace) -> Written | None:
    """Write a capture polyprof read; None (``c.error`` set) when the file cannot be written."""
    try:
        path = _write_bytes(c, path) if fmt == "xplane" else _somewhere(path, lambda at: _save(trace, at))
    except PolyprofError as e:
        c.error = str(e)
        return None
    return c, path, trace.n_events


def write_one(c: Captured, path: Path, fmt: str) -> list[Written]:
    """Write one capture to ``path`` (``xplane``: the XSpace as received, written before
    it is read). The written file, or none, with ``c.error`` saying why and where the
    bytes are kept (:func:`raw_path`)."""
    if c.data is None:
        return []
    if fmt == "xplane":
        try:
            path = _write_bytes(c, path)
        except PolyprofError as e:
            c.error = str(e)
            return []
        trace = read(c)
        if trace is None:
            c.error = f"{c.error}; the XSpace as received is in {path}"
            return []
        return [(c, path, trace.n_events)]
    trace = read(c)
    if trace is None:
        _keep(c, raw_path(path))
        return []
    done = _write(c, path, fmt, trace)
    return [done] if done else []


def check_dir(out_dir: Path, overwrite: bool = False) -> None:
    """Refuse, before capturing (a capture is not lost to an output that cannot be
    written), an output for several captures that is a file, or a directory that holds
    anything: its files are read as the ranks of one job, so another capture's there
    would be read as ranks of this one (before, ``polyprof summary DIR`` took two
    captures' windows for one job, even 4 ranks of 2 processes). With ``overwrite``, a
    directory that holds only an earlier capture's files (:func:`_earlier_set`) is
    accepted, and :func:`write_set` replaces them; one that holds anything else is
    refused, as ``convert`` refuses a non-empty folder that is not a store."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CaptureError(f"{out_dir}: exists and is not a directory (several addresses are written as one "
                           "file each into the directory -o names)")
    there = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
    if not there:
        return
    if not overwrite:
        raise CaptureError(f"{out_dir}: is not empty ({_listed(there)}): the files of a capture of several "
                           "processes are the ranks of one job, and files there would be read as ranks of "
                           "this capture; choose another directory, or pass --overwrite to replace an earlier "
                           "capture's files")
    earlier = _earlier_set(out_dir)
    kept = out_dir / UNREADABLE_DIR
    folder = kept.is_dir() and not kept.is_symlink()
    other = [n for n in there if out_dir / n not in earlier and not (n == UNREADABLE_DIR and folder)]
    other += [f"{UNREADABLE_DIR}/{p.name}" for p in sorted(kept.iterdir()) if p not in earlier] if folder else []
    if other:
        raise CaptureError(f"{out_dir}: holds files that are not a capture's ({_listed(other)}): refusing to "
                           "replace them; choose another directory")


def _listed(names: Sequence[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _earlier_set(out_dir: Path) -> set[Path]:
    """The files of a capture written in ``out_dir`` before: traces in the formats a set
    is written in (polyprof's, or XSpace as received) that are what their names say,
    and the XSpace files kept in ``unreadable/``. No link, and no file of the user's."""
    from ..collect.output import not_ours  # (only a directory that holds files is looked at)

    def ours(p: Path, endings: Sequence[str]) -> bool:
        return (not p.is_symlink() and p.is_file() and p.name.endswith(tuple(endings))
                and not_ours(p) is None)

    found = {p for p in out_dir.iterdir() if ours(p, list(FORMATS.values()))}
    kept = out_dir / UNREADABLE_DIR
    if kept.is_dir() and not kept.is_symlink():
        found |= {p for p in kept.iterdir() if ours(p, [FORMATS["xplane"]])}
    return found


def write_set(captures: Sequence[Captured], out_dir: Path, fmt: str, overwrite: bool = False) -> list[Written]:
    """One file per successful capture in ``out_dir``, names unique; the directory loads
    as the ranks of one job with :func:`polyprof.load_ranks`. A capture polyprof cannot
    read is kept under its address's name: in ``out_dir`` for ``xplane`` (the file
    asked for), else in ``out_dir/unreadable/``; its ``error`` says so. ``out_dir`` must
    be empty (:func:`check_dir`); with ``overwrite`` an earlier capture's files there
    are replaced: those this set did not write over are removed once it is written (all
    kept where nothing was received)."""
    out_dir = _set_dir(out_dir, overwrite)
    earlier = _earlier_set(out_dir) if out_dir.is_dir() else set()
    out_dir.mkdir(parents=True, exist_ok=True)
    read_ = [(c, read(c)) for c in captures if c.ok]
    done = [(c, t) for c, t in read_ if t is not None]
    assign_ranks(captures, done)
    written: list[Written] = []
    used: set[str] = set()
    for c, trace in read_:
        stem = process_name(trace, c.address) if trace is not None else address_name(c.address)
        name, n = stem, 1
        while name in used:
            n += 1
            name = f"{stem}.{n}"
        used.add(name)
        if trace is None:
            target = (out_dir if fmt == "xplane" else out_dir / UNREADABLE_DIR) / f"{name}{FORMATS['xplane']}"
            at = _keep(c, target)
        else:
            target = out_dir / f"{name}{FORMATS[fmt]}"
            w = _write(c, target, fmt, trace)
            at = w[1] if w is not None else None
            if w is not None:
                written.append(w)
        if at == target:  # written over (an earlier file there that a write could not replace goes)
            earlier.discard(target)
    if read_ and earlier:
        _remove_earlier(out_dir, earlier)
    return written


def _set_dir(out_dir: Path, overwrite: bool) -> Path:
    """``out_dir``, or where :func:`check_dir` refuses it now (checked before the capture:
    something was written there meanwhile), the first free ``<out_dir>.N`` beside it,
    said (a capture cannot be taken again)."""
    try:
        check_dir(out_dir, overwrite)
        return out_dir
    except CaptureError as e:
        n = 1
        while (alt := out_dir.with_name(f"{out_dir.name}.{n}")).exists():
            n += 1
        log.error("%s; the captures were written to %s instead", e, alt)
        return alt


def _remove_earlier(out_dir: Path, earlier: set[Path]) -> None:
    """Remove the files an earlier capture left that this one did not write over."""
    for p in sorted(earlier):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            log.error("%s: an earlier capture's file could not be removed (%s): the directory mixes two captures",
                      p, e.strerror or e)
    log.info("removed %d file(s) of an earlier capture from %s", len(earlier), out_dir)
    try:
        (out_dir / UNREADABLE_DIR).rmdir()  # (only if empty)
    except OSError:
        pass


def assign_ranks(captures: Sequence[Captured], done: list[tuple[Captured, Trace]]) -> None:
    """Keep the ranks the processes reported when every one did and they differ; else
    number them by their place in the address list (a failed one leaves its number out)."""
    ranks = [t.sources[0].rank for _, t in done]
    if None not in ranks and len(set(ranks)) == len(ranks):
        return
    place = {id(c): i for i, c in enumerate(captures)}
    log.info("the captured processes do not all report distinct ranks; ranks follow the address order")
    for c, t in done:
        t.sources[0].rank = place[id(c)]


def write_logdir(captures: Sequence[Captured], logdir: Path, session_id: str,
                 overwrite: bool = False) -> list[Written]:
    """``<logdir>/plugins/profile/<session>/<process>.xplane.pb``, where XProf and
    TensorBoard list profiles (the session's folder as ``-o`` of :func:`write_set`:
    one capture's files)."""
    return write_set(captures, logdir_run(logdir, session_id), "xplane", overwrite)


def logdir_run(logdir: Path, session_id: str) -> Path:
    """The folder of one capture's session in an XProf log dir."""
    run = re.sub(r"[^A-Za-z0-9._-]", "_", session_id)
    if not run:
        raise CaptureError("empty session id")
    return logdir / "plugins" / "profile" / run
