"""Where per-rank work runs: in this process, a process pool, a Dask cluster, or any
``concurrent.futures``-style executor (anything with ``submit(fn, *args)`` returning
futures), so a Ray or Spark user can bring their own.

``executor(spec, jobs)`` is a context manager: ``None`` and ``jobs <= 1`` run the work
here, one rank after another (memory bounded by one rank); ``jobs > 1`` a process pool;
``"local"`` a Dask ``LocalCluster`` of ``jobs`` (default 2) single-threaded worker
processes on 127.0.0.1, started for the command; ``"tcp://host:port"`` an existing Dask
scheduler. Results come back in the order of the inputs, whatever order they finish in.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
from collections import deque
from typing import Any, Callable, Iterator, Sequence

from ..errors import PolyprofError
from ..progress import TaskBar

log = logging.getLogger("polyprof")

#: Seconds a Dask cluster may take to start or be reached.
DASK_TIMEOUT_S = 60


class ExecutorError(PolyprofError):
    """The executor for per-rank work could not be started or reached."""


@contextlib.contextmanager
def executor(spec: Any = None, jobs: int = 1) -> Iterator[Any]:
    """The executor named by ``spec`` (see the module doc), shut down on exit if made here."""
    if spec is not None and not isinstance(spec, str):
        if not callable(getattr(spec, "submit", None)):
            raise ExecutorError(f"{spec!r} is not an executor (it has no submit method)")
        yield spec
        return
    if not spec:
        if jobs <= 1:
            yield None
            return
        with cf.ProcessPoolExecutor(jobs) as pool:
            yield pool
        return
    with _dask(spec, jobs) as ex:
        yield ex


@contextlib.contextmanager
def _dask(spec: str, jobs: int) -> Iterator[Any]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ExecutorError("--dask needs dask.distributed: pip install 'polyprof[dask]'") from None
    if spec == "local":
        workers = jobs if jobs > 1 else 2
        log.info("starting a Dask LocalCluster with %d workers", workers)
        try:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=logging.ERROR)
        except Exception as e:  # noqa: BLE001 - dask raises many kinds; say what failed
            raise ExecutorError(f"cannot start a Dask LocalCluster ({type(e).__name__}: {e})") from None
        with cluster, Client(cluster, timeout=DASK_TIMEOUT_S) as client:
            yield client.get_executor()
        return
    if not spec.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise ExecutorError(f"--dask {spec!r}: expected 'local' or a scheduler address such as tcp://host:8786")
    try:
        client = Client(spec, timeout=DASK_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001
        raise ExecutorError(f"cannot reach the Dask scheduler at {spec} ({type(e).__name__}: {e})") from None
    with client:
        yield client.get_executor()


def run_all(fn: Callable[..., Any], tasks: Sequence[tuple], ex: Any, what: str = "ranks") -> list[Any]:
    """``fn(*task)`` for every task, on ``ex`` (or here when None); results in task order.
    A progress bar on a terminal; the first error is raised once every task has ended."""
    with TaskBar(len(tasks), what) as bar:
        if ex is None:
            out = []
            for t in tasks:
                out.append(fn(*t))
                bar.advance()
            return out
        futures = {ex.submit(fn, *t): i for i, t in enumerate(tasks)}
        results: list[Any] = [None] * len(tasks)
        error: BaseException | None = None
        for f in cf.as_completed(futures):
            try:
                results[futures[f]] = f.result()
            except BaseException as e:  # noqa: BLE001 - kept, raised after the others end
                error = error or e
            bar.advance()
        if error is not None:
            raise error
        return results


def map_ordered(fn: Callable[..., Any], tasks: Sequence[tuple], ex: Any, what: str = "ranks",
                window: int = 4) -> Iterator[Any]:
    """``fn(*task)`` for every task, yielded in task order as soon as each is ready; at most
    ``window`` tasks are submitted ahead of the one being waited for, so finished results
    waiting for their turn stay few."""
    with TaskBar(len(tasks), what) as bar:
        if ex is None:
            for t in tasks:
                res = fn(*t)
                bar.advance()
                yield res
            return
        pending: deque = deque()
        todo = iter(tasks)
        try:
            for t in todo:
                pending.append(ex.submit(fn, *t))
                if len(pending) >= max(window, 1):
                    break
            while pending:
                res = pending.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(ex.submit(fn, *nxt))
                bar.advance()
                yield res
        finally:
            for f in pending:  # an error, or the consumer stopped: drop what was not started
                f.cancel()
