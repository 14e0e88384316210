"""The hot path: user sections, marks, counters and steps recorded per thread.

Each thread appends to its own arrays (no lock, no Python object per event kept);
names are interned once. With no active recorder every call is a global lookup and
a return, so instrumented code costs next to nothing when nobody profiles it.
"""

from __future__ import annotations

import threading
from array import array
from time import perf_counter_ns as _now
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_recorder: "Recorder | None" = None


class ThreadBuffer:
    __slots__ = ("tid", "ident", "name", "names", "starts", "ends", "stats",
                 "mark_names", "mark_ts", "ctr_names", "ctr_ts", "ctr_values")

    def __init__(self) -> None:
        t = threading.current_thread()
        self.tid = threading.get_native_id()
        self.ident = t.ident
        self.name = t.name
        self.names = array("i")
        self.starts = array("q")
        self.ends = array("q")
        self.stats: list[tuple[int, dict[str, Any]]] = []
        self.mark_names = array("i")
        self.mark_ts = array("q")
        self.ctr_names = array("i")
        self.ctr_ts = array("q")
        self.ctr_values = array("d")


class Recorder:
    """Collects host events for one session; owned by the host plugin."""

    def __init__(self) -> None:
        self.active = False
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._tls = threading.local()
        self.buffers: list[ThreadBuffer] = []
        self.steps: list[int] = []
        #: callables(name, is_enter) that mirror sections into other tools (e.g. torch)
        self.listeners: list[Callable[[str, bool], None]] = []
        #: callables(n) told after the n-th polyprof.step() call (e.g. torch's ProfilerStep#n)
        self.step_listeners: list[Callable[[int], None]] = []

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
            return buf

    def record(self, name: str, t0: int, t1: int, stats: dict[str, Any] | None) -> None:
        if not self.active:
            return
        try:
            buf = self._tls.buf
        except AttributeError:
            buf = self.buffer()
        nid = self._ids.get(name)
        if nid is None:
            nid = self.intern(name)
        buf.names.append(nid)
        buf.starts.append(t0)
        buf.ends.append(t1)
        if stats:
            buf.stats.append((len(buf.names) - 1, stats))

    def notify(self, name: str, enter: bool) -> None:
        for fn in self.listeners:
            try:
                fn(name, enter)
            except Exception:  # a listener must never break the user's program
                pass


def activate(rec: Recorder | None) -> None:
    global _recorder
    _recorder = rec


def active_recorder() -> Recorder | None:
    return _recorder


class section:
    """A named span of host time: context manager, decorator, or begin()/end().

    ``with polyprof.section("Self Attention", layer=3): ...`` or
    ``@polyprof.section("Embedding")``. Keyword stats are attached to the event.
    Costs one global lookup when no session is active.
    """

    __slots__ = ("name", "stats", "_t0", "_rec")

    def __init__(self, name: str, **stats: Any) -> None:
        self.name = name
        self.stats = stats
        self._rec: Recorder | None = None

    def __enter__(self) -> "section":
        rec = _recorder
        if rec is not None:
            self._rec = rec
            if rec.listeners:
                rec.notify(self.name, True)
            self._t0 = _now()
        return self

    def __exit__(self, et: object, ev: object, tb: object) -> bool:
        rec = self._rec
        if rec is not None:
            t1 = _now()
            self._rec = None
            rec.record(self.name, self._t0, t1, self.stats)
            if rec.listeners:
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
