"""Where per-rank work runs, and the one place that knows how: in this process, a pool of
local processes (the default), threads, a Dask cluster, or any ``concurrent.futures``
executor (anything with ``submit(fn, *args)`` returning futures: Ray's, Spark's, a
``distributed.Client.get_executor()``).

:func:`executor` makes one from a spec (``None``/``"process"``, ``"serial"``,
``"thread"``, ``"local"`` for a Dask ``LocalCluster``, ``"tcp://host:port"`` for a Dask
scheduler, or an executor as is); :func:`run` runs ``fn(*task)`` for every task on it
and yields the results as they finish, naming the task that failed.

The local pool (:class:`LocalPool`) forks its workers from this process when it has no
other thread: they start at once with the readers and analyses already imported and
share those pages; the heap is frozen while they fork (``gc.freeze``, as the gc docs
advise), so their collections never walk (and copy) the inherited objects. In a process
with threads (a notebook, a profiled program) forking is unsafe, and the workers come
from a fork server that preloads the same modules.

**Reading ahead** (:class:`ReadAhead`). A fresh process first imports pandas and the
analyses (on one core, the others idle; docs/benchmarks.md), and only then starts
the pool. Reading a trace file needs none of that. So a job that will run on a fork pool
not started yet (or in this process) first forks one reader, which loads the rank files
in order and pickles each trace (a Kineto trace's args as their text, undecoded) into a
private temporary folder (``/dev/shm`` where it has room to spare), up to
:data:`MAX_BYTES` and a quarter of the folder's free space. When the work starts, the
reader is stopped; the worker that runs a rank read ahead loads its pickle (and removes
it) instead of the file (:func:`read_ahead`), and those ranks are queued after one rank
per worker, but the last few at the end (short tasks even out the workers' ends). Only
where it helps and is safe (:func:`worth_reading_ahead`): the fork start method, no
other thread, pandas not imported yet, two rank files or more. A file the reader cannot
read stops it quietly: the worker reads that file itself and reports the error.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import gc
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
from typing import Any, Callable, Iterator, Sequence

from ..errors import PolyprofError
from ..progress import TaskBar

log = logging.getLogger("polyprof")

#: Seconds a Dask cluster may take to start or be reached.
DASK_TIMEOUT_S = 60
#: imported once before the local pool's workers start (fork server: its preload), so
#: each worker starts with them loaded instead of importing pandas and the readers itself
PRELOAD = ["polyprof.ranks.result", "polyprof.formats.detect", "polyprof.formats.kineto",
           "polyprof.formats.native", "polyprof.formats.xspace", "polyprof.trace.identity",
           "polyprof.analyze.registry", "polyprof.analyze.memory_findings", "polyprof.report.tables"]
#: at most this many bytes of traces are read ahead (and a quarter of the folder's free space)
MAX_BYTES = 1 << 30
#: /dev/shm is used only with this much free space
SHM_FREE_BYTES = 2 << 30
#: what forking a pool and its reader ahead costs, in bytes of rank files whose work
#: takes as long: a pool of W workers saves (1 - 1/W) of a job's work in wall time, so
#: it is worth forking only beyond this many bytes over that share (:func:`small_job`;
#: docs/benchmarks.md: two ranks of 0.12 MB, 0.16 s serial against 0.19-0.21 s on two
#: workers; two of 1.15 MB, about even)
POOL_COST_BYTES = 1 << 20


class ExecutorError(PolyprofError):
    """The executor for per-rank work could not be started or reached."""


class SerialExecutor(cf.Executor):
    """Runs each call at once in this process (one rank at a time, or no pool wanted)."""

    workers = 1

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        f: cf.Future = cf.Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)  # (not a SIGTERM's unwinding nor Ctrl-C: those end the job, cli/__init__.py)
        return f


class LocalPool(cf.Executor):
    """At most ``workers`` worker processes on this machine, started at the first
    submit: forked from this process when it has no other thread, else from a fork
    server that preloaded :data:`PRELOAD` (see the module doc)."""

    def __init__(self, workers: int):
        self.workers = max(1, workers)
        import multiprocessing as mp  # only where a pool is made: a small job's summary forks nothing

        methods = mp.get_all_start_methods()
        self.forks = "fork" in methods and threading.active_count() == 1
        self.context: Any
        if self.forks:
            self.context = mp.get_context("fork")
        elif "forkserver" in methods:
            self.context = mp.get_context("forkserver")
            self.context.set_forkserver_preload(PRELOAD)
        else:
            self.context = mp.get_context()
        self.start_method = self.context.get_start_method()
        self._pool: cf.ProcessPoolExecutor | None = None

    @property
    def started(self) -> bool:
        return self._pool is not None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        if self._pool is None:
            if self.forks:  # the workers fork from a process that has the readers and analyses
                for name in PRELOAD:
                    importlib.import_module(name)
            self._pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=self.context)
        return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def cores() -> int:
    """The cores this process may run on (its CPU affinity: a container or ``taskset``
    that pins it to a few of the machine's), what "one worker per core" counts."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def local_pool(jobs: int | None, tasks: int, small: bool = False) -> cf.Executor:
    """The default: a :class:`LocalPool` of ``jobs`` workers (default one per core; one for
    a ``small`` job, :func:`small_job`), never more than ``tasks``; one worker means this
    process (:class:`SerialExecutor`)."""
    workers = min(jobs or (1 if small else cores()), max(tasks, 1))
    return SerialExecutor() if workers <= 1 else LocalPool(workers)


@contextlib.contextmanager
def executor(spec: Any = None, jobs: int | None = None, tasks: int = 1, small: bool = False) -> Iterator[cf.Executor]:
    """The executor ``spec`` names (see the module doc) for ``tasks`` tasks, with ``jobs``
    workers (processes or threads; Dask ``local``: its workers, default 2; the default
    pool of a ``small`` job: this process); shut down on exit if made here."""
    if spec is not None and not isinstance(spec, str):
        if not callable(getattr(spec, "submit", None)):
            raise ExecutorError(f"{spec!r} is not an executor (it has no submit method)")
        yield spec
        return
    if spec in (None, "", "process"):
        ex = local_pool(jobs, tasks, small)
    elif spec == "serial":
        ex = SerialExecutor()
    elif spec == "thread":
        ex = cf.ThreadPoolExecutor(max_workers=min(jobs or cores(), max(tasks, 1)))
    else:
        with _dask(spec, jobs) as dex:
            yield dex
        return
    try:
        yield ex
    finally:  # also on a signal: the ranks running finish, so their temporary files are removed
        ex.shutdown(wait=True, cancel_futures=True)


def check_spec(spec: str) -> None:
    """ExecutorError unless ``spec`` names an executor :func:`executor` makes (checked
    before anything is read: ``--dask`` of one trace, which runs on none)."""
    if spec not in ("", "process", "serial", "thread", "local") \
            and not spec.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise ExecutorError(f"executor {spec!r}: expected 'process', 'thread', 'serial', 'local' (Dask) or a Dask "
                            "scheduler address such as tcp://host:8786")


@contextlib.contextmanager
def _dask(spec: str, jobs: int | None) -> Iterator[cf.Executor]:
    check_spec(spec)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ExecutorError("--dask needs dask.distributed: pip install 'polyprof[dask]'") from None
    if not log.isEnabledFor(logging.INFO):  # Dask's own INFO lines (set by its config) only with -v
        for name in ("distributed", "dask"):
            logging.getLogger(name).setLevel(logging.WARNING)
    if spec == "local":
        workers = jobs if jobs and jobs > 1 else 2
        log.info("starting a Dask LocalCluster with %d workers", workers)
        try:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=logging.ERROR)
        except Exception as e:  # noqa: BLE001 - dask raises many kinds; say what failed
            main = sys.modules.get("__main__")
            hint = ("; in a script, start the job under `if __name__ == \"__main__\":` (Dask's worker processes "
                    "import the main module)") if getattr(main, "__file__", None) else ""
            raise ExecutorError(f"cannot start a Dask LocalCluster ({type(e).__name__}: {e}){hint}") from None
        with cluster, Client(cluster, timeout=DASK_TIMEOUT_S) as client:
            yield client.get_executor()
        return
    try:
        client = Client(spec, timeout=DASK_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001
        raise ExecutorError(f"cannot reach the Dask scheduler at {spec} ({type(e).__name__}: {e})") from None
    with client:
        yield client.get_executor()


def in_reach(ex: Any) -> bool:
    """Whether work on ``ex`` sees what this process holds now: it runs here, or in
    workers that will fork from here (a local pool not started yet)."""
    return isinstance(ex, (SerialExecutor, cf.ThreadPoolExecutor)) or (
        isinstance(ex, LocalPool) and ex.forks and not ex.started)


@contextlib.contextmanager
def _frozen_for_fork(ex: Any) -> Iterator[None]:
    """While a local pool forks its workers (at its first submits), this process's heap
    is out of the collector's reach; it is given back as soon as the workers exist."""
    if not (isinstance(ex, LocalPool) and ex.forks and not ex.started):
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run(fn: Callable[..., Any], tasks: Sequence[tuple], ex: cf.Executor, *, names: Sequence[str] | None = None,
        progress: str | None = None, ahead: "ReadAhead | None" = None,
        ahead_of: Sequence[str | None] = (), progress_single: bool = False) -> Iterator[tuple[int, Any]]:
    """``(i, fn(*tasks[i]))`` for every task as it finishes on ``ex``. A task that fails
    raises a PolyprofError naming it (``names[i]``), and the tasks not started are
    cancelled. ``ahead``: ranks read ahead, used where ``ex`` can see them; then
    ``ahead_of[i]`` is the file task i reads (its place in the queue). ``progress``
    labels a bar on a terminal (``progress_single``: also for one task)."""
    read = ahead.take() if ahead is not None and in_reach(ex) else {}
    try:
        with _frozen_for_fork(ex):
            use(read)
            order = _queue(len(tasks), [p is not None and p in read for p in ahead_of] if read else [],
                           getattr(ex, "workers", 1))
            if isinstance(ex, SerialExecutor):  # its submit runs the task: one at a time, the bar with them
                yield from _one_by_one(fn, tasks, order, ex, names, progress, progress_single)
                return
            futures = {ex.submit(fn, *tasks[i]): i for i in order}
        for f in _progress(futures, progress, progress_single):
            if f.exception() is not None:
                raise _first_failure(futures, names) from None
            yield futures[f], f.result()
    finally:
        release()
        if ahead is not None:
            ahead.close()


def _one_by_one(fn: Callable[..., Any], tasks: Sequence[tuple], order: list[int], ex: SerialExecutor,
                names: Sequence[str] | None, progress: str | None, single: bool) -> Iterator[tuple[int, Any]]:
    """:func:`run` on a :class:`SerialExecutor`: each task submitted once the one before is
    done with, so that the bar is open while they run (all submitted first, as a pool's
    are, they had run before it was drawn: a 54 s convert showed "0/1 0:00:00" at its
    end) and a result is handed on before the next is computed; a failure leaves the
    rest not run."""
    futures: dict[cf.Future, int] = {}
    with (TaskBar(len(order), progress, single) if progress else contextlib.nullcontext()) as bar:
        for k, i in enumerate(order):
            f = ex.submit(fn, *tasks[i])
            futures[f] = i
            if f.exception() is not None:
                for j in order[k + 1:]:  # (counted "not run")
                    rest: cf.Future = cf.Future()
                    rest.cancel()
                    futures[rest] = j
                raise _first_failure(futures, names) from None
            if bar is not None:
                bar.advance()
            yield i, f.result()


def _first_failure(futures: dict[cf.Future, int], names: Sequence[str] | None) -> PolyprofError:
    """The failure to report once a task failed: the tasks not started are cancelled, those
    running are waited for (shutting the pool down waits for them anyway), and of those
    that failed, the first in task order (the same one whatever order they finished in),
    naming how many more failed and how many were not run."""
    for f in futures:
        f.cancel()
    cf.wait([f for f in futures if not f.cancelled()])
    failed = sorted((i, f.exception()) for f, i in futures.items()
                    if not f.cancelled() and f.exception() is not None)
    i, err = failed[0]
    name = names[i] if names else f"task {i}"
    counts = [f"{len(failed) - 1} more failed"] if len(failed) > 1 else []
    not_run = sum(f.cancelled() for f in futures)
    if not_run:
        counts.append(f"{not_run} not run")
    more = f" ({', '.join(counts)})" if counts else ""
    if isinstance(err, PolyprofError):
        return PolyprofError(f"{name}: {err}{more}")
    return PolyprofError(f"{name}: {type(err).__name__}: {err}{more}")  # a worker that died, or a bug


def _queue(n: int, read: list[bool], workers: int) -> list[int]:
    """The order tasks are submitted in: one to read per worker, then those read ahead
    (quick, only analysed: their pickles are freed early) but one per worker, then the
    rest, then those last few (short tasks even out the workers' ends)."""
    if not any(read):
        return list(range(n))
    ahead = [i for i in range(n) if read[i]]
    rest = [i for i in range(n) if not read[i]]
    early, late = (ahead[:-workers], ahead[-workers:]) if len(ahead) > workers else ([], ahead)
    return rest[:workers] + early + rest[workers:] + late


def _progress(futures: dict[cf.Future, int], label: str | None, single: bool = False) -> Iterator[cf.Future]:
    """Futures as they complete, with a progress bar on a terminal."""
    if label is None:
        yield from cf.as_completed(futures)
        return
    with TaskBar(len(futures), label, single) as bar:
        for f in cf.as_completed(futures):
            bar.advance()
            yield f


# ----------------------------------------------------------------------------- reading ahead
#: the pickles of the ranks read ahead, by trace file: set before the workers fork (they
#: inherit it), asked by :func:`read_ahead`
_READ: dict[str, Path] = {}


def worth_reading_ahead(paths: Sequence[Path | None], spec: Any = None) -> bool:
    """Whether reading ``paths`` ahead can overlap this process's imports, for work on
    ``spec`` (see the module doc): not for a small job (:func:`small_job`)."""
    reachable = spec in (None, "", "process", "serial", "thread") or in_reach(spec)
    if not (reachable and len(paths) >= 2 and "pandas" not in sys.modules and threading.active_count() == 1
            and all(p is not None and p.is_file() for p in paths) and not small_job(paths)):
        return False
    import multiprocessing as mp

    return "fork" in mp.get_all_start_methods()


def small_job(paths: Sequence[Path | None], workers: int | None = None) -> bool:
    """Whether a pool of ``workers`` (default: one per core, :func:`cores`), at most one
    per rank, would save less wall time than forking it costs: the rank files ``paths``
    hold fewer than ``POOL_COST_BYTES / (1 - 1/workers)`` bytes in all (2 MiB for two
    workers, ~1.07 MiB for sixteen). A rank not read from a file, or one that cannot be
    read, makes the job not small."""
    w = min(workers or cores(), len(paths))
    if w <= 1:
        return True
    limit, total = POOL_COST_BYTES * w / (w - 1), 0
    for p in paths:
        if p is None:
            return False
        try:
            total += p.stat().st_size
        except OSError:
            return False
    return total < limit


class ReadAhead:
    """One reader process loading ``loaders`` (``(file, load)`` pairs) in order until
    :meth:`take` stops it."""

    def __init__(self, loaders: Sequence[tuple[Path, Callable[[], Any]]]):
        self.paths = [str(p) for p, _ in loaders]
        if any(p.endswith((".json", ".json.gz")) for p in self.paths):
            # the Kineto reader (no pandas), imported once here, before the fork: the
            # reader starts at once, and the pool's workers need it too
            importlib.import_module("polyprof.formats.kineto")
        # named by this process: what it leaves behind is told from other processes' folders
        self.dir = Path(tempfile.mkdtemp(prefix=f"polyprof-prefetch-{os.getpid()}-", dir=_folder()))
        # the reader's own temporary files (a compressed database inflated): it is killed
        # when taken, so what it was making is removed with this folder, not left in TMPDIR
        self.tmp = Path(tempfile.mkdtemp(prefix=f"polyprof-prefetch-tmp-{os.getpid()}-"))
        self._cleanup = weakref.finalize(self, _remove, self.dir, self.tmp)  # at exit too
        budget = min(MAX_BYTES, _free(self.dir) // 4)
        import multiprocessing as mp

        self.proc = mp.get_context("fork").Process(target=_read_ahead,
                                                   args=([f for _, f in loaders], self.dir, budget, self.tmp),
                                                   name="polyprof-prefetch", daemon=True)
        self.proc.start()

    def take(self) -> dict[str, Path]:
        """Stop the reader; the pickles of the ranks it finished, by file (a pickle is
        complete once renamed; :meth:`close` reaps the reader and removes the rest)."""
        self.proc.kill()
        out: dict[str, Path] = {}
        for i, p in enumerate(self.paths):
            f = self.dir / f"{i}.pickle"
            if not f.exists():
                break
            out[p] = f
        log.debug("prefetch: %d of %d ranks read ahead", len(out), len(self.paths))
        return out

    def close(self) -> None:
        """Stop and reap the reader, and remove its folder (after :meth:`take` or instead)."""
        self.proc.kill()
        self.proc.join()
        self._cleanup()


def _folder() -> str | None:
    """/dev/shm (memory, not a disk) where it has room to spare (a container's is often
    small, and the pool's semaphores need it too); else the temporary folder."""
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


def _remove(*folders: Path) -> None:
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)


def _read_ahead(loaders: list[Callable[[], Any]], folder: Path, budget: int, tmp: Path | None = None) -> None:
    """The reader: each trace loaded and pickled (under a temporary name, then renamed,
    so a kill leaves no partial file), until ``budget`` bytes; the first failure ends it.
    Its temporary files go to ``tmp`` (removed by the process that started it)."""
    logging.disable(logging.CRITICAL)  # the worker reports what goes wrong, once
    if tmp is not None:
        tempfile.tempdir = str(tmp)
    written = 0
    for i, load in enumerate(loaders):
        try:
            trace = load()
            tmp = folder / f"{i}.part"
            with open(tmp, "wb") as fh:
                pickle.dump(trace, fh, protocol=pickle.HIGHEST_PROTOCOL)
                written += fh.tell()
            os.replace(tmp, folder / f"{i}.pickle")
        except BaseException:  # noqa: BLE001 - the worker reads it again and reports
            return
        if written >= budget:
            return


def use(pickles: dict[str, Path]) -> None:
    """Make ``pickles`` (by trace file) what :func:`read_ahead` loads, replacing any before."""
    _READ.clear()
    _READ.update(pickles)


def release() -> None:
    """Forget the ranks read ahead."""
    _READ.clear()


def read_ahead(path: Path | None) -> Any:
    """The trace read ahead from ``path``, loaded from its pickle, which is then removed
    (None if it was not read ahead or its pickle is gone: the caller reads the file)."""
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
