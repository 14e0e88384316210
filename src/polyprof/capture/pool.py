"""The capture server's worker threads, as daemon threads.

gRPC runs each call on a thread of the executor it is given. A
``concurrent.futures.ThreadPoolExecutor``'s threads are joined as python ends (its exit
hook), so a capture whose answer was still being made (its session's stop, the XSpace's
encoding: tens of seconds for millions of events) held the program's exit for as long
as that took (115 s measured), past any grace the server's stop gave it. These threads
hold nothing: the server's stop waits for a capture's answer for a bounded time
(``Limits.exit_grace_s``, server.py), and a worker still busy after it ends with the
process.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable


class DaemonPool(Executor):
    """An executor of at most ``workers`` daemon threads (named ``<prefix>_<n>``), made as
    work arrives while none is idle."""

    def __init__(self, workers: int, prefix: str):
        self._max = max(1, int(workers))
        self._prefix = prefix
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] \
            = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max:
                t = threading.Thread(target=self._worker, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                t.start()
                self._threads.append(t)
        return future

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as e:  # noqa: BLE001 - the future carries it, as ThreadPoolExecutor's
                    future.set_exception(e)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs  # (no call's objects kept alive while idle)
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for t in threads:
                if t is not threading.current_thread():
                    t.join()
