"""Reading ranks ahead while this process imports what analyses them.

A job's summary in a fresh process first imports pandas and the analyses (0.2-0.3 s on
one core, the others idle), and only then forks the pool's workers, which share those
imports and start reading ranks. Reading a trace file needs none of that. A prefetch
forks one reader at once: it loads the ranks in order and leaves each trace pickled (a
Kineto trace's args as their text, undecoded) in a private temporary folder, under
``/dev/shm`` where that has room to spare, up to :data:`MAX_BYTES` and a quarter of the
folder's free space. When the pool is about to start, :meth:`Prefetch.take` stops the
reader and lists the pickles it finished; :func:`use` hands that list to :func:`loaded`,
which the pool's workers (forked after, so they inherit it) and an in-process executor
ask first: the one that runs such a rank loads its pickle (and removes it) instead of
the trace file, and only analyses it. The parent never holds a trace, and a pickle
lives until its rank is run (``traceset._queue``: after one rank per worker, but the
last few at the end).
What is read ahead is bounded by what one core reads while the analyses import: a few
ranks of a small job, nothing of a job of huge traces.

Only where it helps and is safe (:func:`worth_it`): the fork start method, no other
thread in this process, pandas not imported yet (else there is no idle window), at least
two ranks read from files. A file the reader cannot read stops it quietly: the pool
reads that file itself and reports the error as usual.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import shutil
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ..trace.core import Trace
    from .traceset import RankEntry

log = logging.getLogger("polyprof")

#: at most this many bytes of traces are read ahead (and a quarter of the folder's free space)
MAX_BYTES = 1 << 30
#: /dev/shm is used only with this much free space
SHM_FREE_BYTES = 2 << 30
#: the pickles of the ranks read ahead, by trace file: set in the parent before the
#: workers fork (they inherit it)
_READ: dict[str, Path] = {}


def worth_it(entries: Sequence["RankEntry"]) -> bool:
    """Whether reading ahead can overlap this process's imports (see the module doc)."""
    import multiprocessing as mp

    return (len(entries) >= 2 and "pandas" not in sys.modules and threading.active_count() == 1
            and "fork" in mp.get_all_start_methods() and all(e.path is not None and e.trace is None
                                                             and e.path.is_file() for e in entries))


class Prefetch:
    """One reader process loading ``entries`` in order until :meth:`take` stops it."""

    def __init__(self, entries: Sequence["RankEntry"]):
        import multiprocessing as mp

        self.entries = list(entries)
        if any(e.path is not None and e.path.name.endswith((".json", ".json.gz")) for e in self.entries):
            # the Kineto reader (no pandas), imported once here, before the fork: the
            # reader starts reading at once, and the pool's workers need it too
            importlib.import_module("polyprof.formats.kineto")
        self.dir = Path(tempfile.mkdtemp(prefix="polyprof-prefetch-", dir=_folder()))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, ignore_errors=True)  # at exit too
        budget = min(MAX_BYTES, _free(self.dir) // 4)
        self.proc = mp.get_context("fork").Process(target=_read_ahead, args=(self.entries, self.dir, budget),
                                                   name="polyprof-prefetch", daemon=True)
        self.proc.start()

    def take(self) -> dict[str, Path]:
        """Stop the reader; the pickles of the ranks it finished, by file. (A pickle is
        complete once renamed, so they are listed while it dies; :meth:`close` reaps it
        and removes what was not loaded.)"""
        self.proc.kill()
        out: dict[str, Path] = {}
        for i, e in enumerate(self.entries):
            f = self.dir / f"{i}.pickle"
            if not f.exists():
                break
            out[str(e.path)] = f
        log.debug("prefetch: %d of %d ranks read ahead", len(out), len(self.entries))
        return out

    def close(self) -> None:
        """Stop and reap the reader, and remove its folder (after :meth:`take` or instead)."""
        self.proc.kill()
        self.proc.join()
        self._cleanup()


def _folder() -> str | None:
    """/dev/shm (memory, not a disk) where the system has one with room to spare (a
    container's is often 64 MB, which the pool's semaphores need too); else the
    temporary folder."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and _free(Path(shm)) >= SHM_FREE_BYTES:
        return shm
    return None


def _free(folder: Path) -> int:
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _read_ahead(entries: list["RankEntry"], folder: Path, budget: int) -> None:
    """The reader: each rank loaded and pickled (written under a temporary name, then
    renamed, so that a kill leaves no partial file), until ``budget`` bytes are written;
    the first failure ends it."""
    from .traceset import load_rank

    logging.disable(logging.CRITICAL)  # the pool reports what goes wrong, once
    written = 0
    for i, e in enumerate(entries):
        try:
            trace = load_rank(e)
            tmp = folder / f"{i}.part"
            with open(tmp, "wb") as fh:
                pickle.dump(trace, fh, protocol=pickle.HIGHEST_PROTOCOL)
                written += fh.tell()
            os.replace(tmp, folder / f"{i}.pickle")
        except BaseException:  # noqa: BLE001 - the pool reads it again and reports
            return
        if written >= budget:
            return


def use(pickles: dict[str, Path]) -> None:
    """Make ``pickles`` (by trace file) what :func:`loaded` loads, replacing any before."""
    _READ.clear()
    _READ.update(pickles)


def loaded(path: Path | None) -> "Trace | None":
    """The trace read ahead from ``path``, loaded from its pickle, which is then removed
    (None if it was not read ahead, or its pickle is gone: the caller reads the file)."""
    if not _READ or path is None:
        return None
    f = _READ.pop(str(path), None)
    if f is None:
        return None
    try:
        with open(f, "rb") as fh:
            trace = pickle.load(fh)
        os.unlink(f)
    except Exception as err:  # noqa: BLE001 - read again from the file
        log.debug("prefetch: %s read ahead but not loaded (%s)", path, err)
        return None
    return trace


def release() -> None:
    """Forget the ranks read ahead."""
    _READ.clear()
