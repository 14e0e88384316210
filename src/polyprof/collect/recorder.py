"""The hot path: user sections, marks, counters and steps recorded per thread.

A completed section is one tuple appended to one list; marks and counters go to
per-thread arrays. With no active recorder every call is a global lookup and
a return, so instrumented code costs next to nothing when nobody profiles it.
"""

from __future__ import annotations

import threading
from array import array
from threading import get_ident as _get_ident
from time import perf_counter_ns as _now
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_recorder: "Recorder | None" = None


class ThreadBuffer:
    """Marks and counters of one thread (rare calls; sections go to one shared list)."""

    __slots__ = ("tid", "ident", "name", "mark_names", "mark_ts", "ctr_names", "ctr_ts", "ctr_values")

    def __init__(self) -> None:
        t = threading.current_thread()
        self.tid = threading.get_native_id()
        self.ident = t.ident
        self.name = t.name
        self.mark_names = array("i")
        self.mark_ts = array("q")
        self.ctr_names = array("i")
        self.ctr_ts = array("q")
        self.ctr_values = array("d")


class Recorder:
    """Collects host events for one session; owned by the host plugin.

    Completed sections are appended as (name, start, end, stats, thread ident) tuples
    to one list: a single ``list.append`` is atomic under the GIL and is the cheapest
    record CPython offers (bench/markers.py). Thread names are snapshotted by
    :meth:`snapshot_threads`, called by the host plugin while the session runs.
    """

    def __init__(self) -> None:
        self.active = False
        self.sections: list[tuple[str, int, int, dict[str, Any], int]] = []
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._tls = threading.local()
        self.buffers: list[ThreadBuffer] = []
        self.threads: dict[int, tuple[str, int]] = {}  # ident -> (name, native id)
        self.steps: list[int] = []
        #: callables(name, is_enter) that mirror sections into other tools (e.g. torch)
        self.listeners: list[Callable[[str, bool], None]] = []
        #: callables(n) told after the n-th polyprof.step() call (e.g. torch's ProfilerStep#n)
        self.step_listeners: list[Callable[[int], None]] = []

    def snapshot_threads(self) -> None:
        for t in threading.enumerate():
            if t.ident is not None and t.native_id is not None:
                self.threads[t.ident] = (t.name, t.native_id)

    def intern(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            with self._lock:
                i = self._ids.get(name)
                if i is None:
                    i = len(self.strings)
                    self.strings.append(name)
                    self._ids[name] = i
        return i

    def buffer(self) -> ThreadBuffer:
        try:
            return self._tls.buf
        except AttributeError:
            buf = self._tls.buf = ThreadBuffer()
            with self._lock:
                self.buffers.append(buf)
                self.threads[buf.ident] = (buf.name, buf.tid)
            return buf

    def notify(self, name: str, enter: bool) -> None:
        for fn in self.listeners:
            try:
                fn(name, enter)
            except Exception:  # a listener must never break the user's program
                pass


_append: Callable[[tuple], None] | None = None  # the active recorder's sections.append


def activate(rec: Recorder | None) -> None:
    global _recorder, _append
    _recorder = rec
    _append = rec.sections.append if rec is not None else None


_original_bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def watch_thread_starts(rec: Recorder | None) -> None:
    """Note each thread's name and OS id as it starts, so short-lived threads that
    end before any snapshot still get a named track."""
    if rec is None:
        threading.Thread._bootstrap_inner = _original_bootstrap  # type: ignore[attr-defined]
        return

    def bootstrap_inner(self: threading.Thread) -> None:
        try:
            rec.threads[threading.get_ident()] = (self.name, threading.get_native_id())
        except Exception:
            pass
        _original_bootstrap(self)

    threading.Thread._bootstrap_inner = bootstrap_inner  # type: ignore[attr-defined]


def active_recorder() -> Recorder | None:
    return _recorder


class section:
    """A named span of host time: context manager, decorator, or begin()/end().

    ``with polyprof.section("Self Attention", layer=3): ...`` or
    ``@polyprof.section("Embedding")``. Keyword stats are attached to the event.
    Costs one global lookup when no session is active.
    """

    __slots__ = ("name", "stats", "_t0", "_app")

    def __init__(self, name: str, **stats: Any) -> None:
        self.name = name
        self.stats = stats
        self._app: Callable[[tuple], None] | None = None

    def __enter__(self) -> "section":
        app = _append
        if app is not None:
            self._app = app
            if _recorder.listeners:  # type: ignore[union-attr]
                _recorder.notify(self.name, True)  # type: ignore[union-attr]
            self._t0 = _now()
        return self

    def __exit__(self, et: object, ev: object, tb: object) -> bool:
        app = self._app
        if app is not None:
            app((self.name, self._t0, _now(), self.stats or None, _get_ident()))
            self._app = None
            rec = _recorder
            if rec is not None and rec.listeners:
                rec.notify(self.name, False)
        return False

    begin = __enter__

    def end(self) -> None:
        """Close a section opened with begin()."""
        self.__exit__(None, None, None)

    def __call__(self, fn: F) -> F:
        import functools

        name, stats = self.name, self.stats

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with section(name, **stats):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def mark(name: str) -> None:
    """An instant event on the calling thread."""
    rec = _recorder
    if rec is None or not rec.active:
        return
    buf = rec.buffer()
    buf.mark_names.append(rec.intern(name))
    buf.mark_ts.append(_now())


def counter(name: str, value: float) -> None:
    """One sample of a user counter (e.g. loss, queue depth, batch size)."""
    rec = _recorder
    if rec is None or not rec.active:
        return
    buf = rec.buffer()
    buf.ctr_names.append(rec.intern(name))
    buf.ctr_ts.append(_now())
    buf.ctr_values.append(float(value))


def step() -> None:
    """End the current step and begin the next (call once per training iteration)."""
    rec = _recorder
    if rec is None or not rec.active:
        return
    rec.steps.append(_now())
    if rec.step_listeners:
        n = len(rec.steps)
        for fn in rec.step_listeners:
            try:
                fn(n)
            except Exception:  # a listener must never break the user's program
                pass
