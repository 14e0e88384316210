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


def _keep(c: Captured, path: Path) -> None:
    """Write the XSpace as received to ``path`` for a capture polyprof could not read, and
    say so in its error."""
    try:
        path = _write_bytes(c, path)
    except PolyprofError as e:
        c.error = f"{c.error}; its XSpace could not be kept either: {e}"
    else:
        c.error = f"{c.error}; the XSpace as received is in {path}"


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


def check_dir(out_dir: Path) -> None:
    """Refuse an output for several captures that is a file (before capturing: a
    capture is not lost to an output that cannot be written)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CaptureError(f"{out_dir}: exists and is not a directory (several addresses are written as one "
                           "file each into the directory -o names)")


def write_set(captures: Sequence[Captured], out_dir: Path, fmt: str) -> list[Written]:
    """One file per successful capture in ``out_dir``, names unique; the directory loads
    as the ranks of one job with :func:`polyprof.load_ranks`. A capture polyprof cannot
    read is kept under its address's name: in ``out_dir`` for ``xplane`` (the file
    asked for), else in ``out_dir/unreadable/``; its ``error`` says so."""
    check_dir(out_dir)
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
            where = out_dir if fmt == "xplane" else out_dir / UNREADABLE_DIR
            _keep(c, where / f"{name}{FORMATS['xplane']}")
        elif (w := _write(c, out_dir / f"{name}{FORMATS[fmt]}", fmt, trace)) is not None:
            written.append(w)
    return written


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


def write_logdir(captures: Sequence[Captured], logdir: Path, session_id: str) -> list[Written]:
    """``<logdir>/plugins/profile/<session>/<process>.xplane.pb``, where XProf and
    TensorBoard list profiles."""
    run = re.sub(r"[^A-Za-z0-9._-]", "_", session_id)
    if not run:
        raise CaptureError("empty session id")
    return write_set(captures, logdir / "plugins" / "profile" / run, "xplane")
