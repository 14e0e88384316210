"""Writing what a capture brought back: one file, one file per process, or an XProf log dir.

Several processes give one file per process, named ``<host>-<pid>[-rank<r>]`` from the
trace's source (a polyprof server records its host, pid and rank; a TSL server only
its host, so its port stands in for the pid: ``<host>-port<port>``). The files of one
capture are the ranks of one job (``polyprof.load_ranks(directory)``): the ranks the
processes report (``RANK`` and friends), else their place in the address list.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import CaptureError
from ..outfile import write_file
from .client import Captured
from .protocol import XSPACE_TOOL
from .security import split_address

if TYPE_CHECKING:
    from ..trace.core import Trace

log = logging.getLogger("polyprof.capture")

FORMATS = {"polyprof": ".polyprof", "xplane": "." + XSPACE_TOOL}


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
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def write_one(c: Captured, path: Path, fmt: str, trace: Trace | None = None) -> tuple[Path, int]:
    """Write one capture (``xplane``: the XSpace as received); returns the path and its
    number of events."""
    trace = trace if trace is not None else c.trace()
    if fmt == "xplane":
        write_file(path, lambda tmp: tmp.write_bytes(c.data or b""))
    else:
        write_file(path, trace.save)
    return path, trace.n_events


def check_dir(out_dir: Path) -> None:
    """Refuse an output for several captures that is a file (before capturing: a
    capture is not lost to an output that cannot be written)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CaptureError(f"{out_dir}: exists and is not a directory (several addresses are written as one "
                           "file each into the directory -o names)")


def write_set(captures: Sequence[Captured], out_dir: Path, fmt: str) -> list[tuple[Captured, Path, int]]:
    """One file per successful capture in ``out_dir``, names unique; the directory loads
    as the ranks of one job with :func:`polyprof.load_ranks`."""
    check_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = [(c, c.trace()) for c in captures if c.ok]
    assign_ranks(captures, done)
    written, used = [], set()
    for c, trace in done:
        stem = process_name(trace, c.address)
        name, n = stem, 1
        while name in used:
            n += 1
            name = f"{stem}.{n}"
        used.add(name)
        written.append((c, *write_one(c, out_dir / f"{name}{FORMATS[fmt]}", fmt, trace)))
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


def write_logdir(captures: Sequence[Captured], logdir: Path, session_id: str) -> list[tuple[Captured, Path, int]]:
    """``<logdir>/plugins/profile/<session>/<process>.xplane.pb``, where XProf and
    TensorBoard list profiles."""
    run = re.sub(r"[^A-Za-z0-9._-]", "_", session_id)
    if not run:
        raise CaptureError("empty session id")
    return write_set(captures, logdir / "plugins" / "profile" / run, "xplane")
