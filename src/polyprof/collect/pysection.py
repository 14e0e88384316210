"""The pure-Python section type, :class:`PySection`: the reference of the compiled
``_fastsection.section`` and the fallback where the extension is missing (or with
POLYPROF_PURE_PYTHON=1), with the state it reads on its hot path: its own copy of the
active recorder (set by ``recorder.activate``, as the compiled type keeps its own), the
registry of its objects open now (collect/opened.py) and its side of the crash journal's
growth hook (``recorder.set_growth``). Also what both types share: :func:`decorate`
(``@section``) and :func:`task_key` (the key of an object's further openings).
collect/recorder.py picks the type ``polyprof.section`` is.
"""

from __future__ import annotations

import sys
import weakref
from weakref import ref as _weakref
from threading import get_ident as _get_ident
from time import perf_counter_ns as _now
from typing import TYPE_CHECKING, Callable, TypeVar

if TYPE_CHECKING:
    from .recorder import Recorder

F = TypeVar("F", bound=Callable[..., object])

_recorder: "Recorder | None" = None  # the active recorder (recorder.activate)
_append: Callable[[tuple], None] | None = None  # the active recorder's sections.append
_listeners: list[Callable[[str, bool], None]] | None = None  # the active recorder's listeners
#: The PySection objects with an opening not yet closed (its slot taken, or one on its
#: stacks of further openings), collect/opened.py: the keys, each object's own weak
#: reference (``_ref``, made at its first opening). Weak, as the compiled type's list
#: (borrowed): an object dropped while open (begin() and no end()) is not kept, nor its
#: session's sections; its reference's callback takes it off. A plain dict: adding and
#: removing are one C call each, where a WeakValueDictionary ran Python code (a
#: ``KeyedRef`` made per opening), 0.6 µs of the section's 2.1 (docs/capture.md).
open_objects: "dict[weakref.ref[PySection], None]" = {}
#: the crash journal's growth hook (``recorder.set_growth``) and the sections' count to call it at
_grow: Callable[[], int] | None = None
_grow_at = sys.maxsize


def _gone(ref: "weakref.ref[PySection]", _pop: Callable[..., object] = open_objects.pop) -> None:
    """An object dropped while open: off :data:`open_objects` (its reference was hashed
    when it was added, so a dead one is still found, by identity)."""
    _pop(ref, None)


def activate(rec: "Recorder | None") -> None:
    """Record this type's sections into ``rec`` (None: record nothing)."""
    global _recorder, _append, _listeners
    _recorder = rec
    _append = rec.sections.append if rec is not None else None
    _listeners = rec.listeners if rec is not None else None


def set_growth(fn: Callable[[], int] | None, at: int) -> None:
    """This type's side of ``recorder.set_growth``: ``at`` is sys.maxsize when ``fn`` is None."""
    global _grow, _grow_at
    _grow, _grow_at = fn, at


def _grown() -> None:
    """PySection's side of :func:`set_growth`, when it is reached (the compiled section has its own)."""
    global _grow, _grow_at
    fn, _grow_at = _grow, sys.maxsize  # not re-entered while it runs
    try:
        at = fn() if fn is not None else -1
        ok = isinstance(at, int) and at >= 0
    except Exception:
        ok = False
    if _grow is fn:
        if ok:
            _grow_at = at
        else:
            _grow = None


def task_key(tid: int) -> int | tuple[int, int]:
    """Key of the stack of further openings of one section object: the thread, or
    inside an asyncio task (thread, task), so tasks interleaved on one thread that
    share a section object (``with ATTN:`` in each) close their own openings. Called
    only on the slow paths (an object open more than once at a time)."""
    aio = sys.modules.get("asyncio")
    if aio is not None:
        try:
            task = aio.current_task()
        except RuntimeError:  # no event loop running in this thread
            task = None
        if task is not None:
            return (tid, id(task))
    return tid


class PySection:
    """A named span of host time: context manager, decorator, or begin()/end().

    ``with polyprof.section("Self Attention", layer=3): ...`` or
    ``@polyprof.section("Embedding")`` (or ``@polyprof.section`` alone: named after the
    function). Keyword stats are attached to the event.
    Costs one global lookup when no session is active.

    The pure-Python reference of the compiled ``_fastsection.section`` (used when the
    extension is missing, or with POLYPROF_PURE_PYTHON=1). One object may be open
    several times at once (a module-level ``ATTN = section("attn")`` in several threads,
    or recursion): the first opening uses the object's own fields (the fast path of a
    fresh object), further ones a per-object {thread ident: [(t0, append), ...]} dict.
    ``__exit__`` closes the latest opening of the calling thread; ``end()`` may also
    close an opening made on another thread.
    """

    __slots__ = ("name", "stats", "_app", "_t0", "_tid", "_more", "_ref", "__weakref__")

    def __new__(cls, name: str, **stats: object) -> "PySection":
        if not stats and callable(name) and not isinstance(name, str):  # @section without a name
            return bare(cls, name)  # type: ignore[return-value]
        return object.__new__(cls)

    def __init__(self, name: str, **stats: object) -> None:
        self.name = name
        self.stats = stats
        self._app: Callable[[tuple], None] | None = None  # the slot is free when None
        self._more: dict[int | tuple[int, int], list[tuple[int, Callable[[tuple], None]]]] | None = None
        self._ref: weakref.ref[PySection] | None = None  # its key in open_objects, made at its first opening

    def __enter__(self) -> "PySection":
        app = _append
        if app is not None:
            if _listeners:
                self._notify(True)
            tid = _get_ident()
            ref = self._ref
            if ref is None:
                ref = self._ref = _weakref(self, _gone)
            t0 = _now()
            # No call between the test and the stores, so no other thread runs between
            # them (CPython >= 3.11 switches threads only at calls and backward jumps; on
            # 3.10 two threads would have to enter one free object within two bytecodes).
            # _app last: a reader that sees it taken (collect/opened.py, on the thread
            # that stops a capture) sees this opening's _tid and _t0, not the previous one's.
            if self._app is None:
                self._tid = tid
                self._t0 = t0
                self._app = app
            else:
                if self._more is None:
                    self._more = {}
                self._more.setdefault(task_key(tid), []).append((t0, app))
            open_objects[ref] = None  # after the opening is in place: open now (collect/opened.py)
        return self

    def __exit__(self, et: object, ev: object, tb: object) -> None:
        if self._app is not None and not self._more:  # fast path: the object's only opening
            t1 = _now()
            tid = _get_ident()
            app = self._app  # again, after the calls: another thread's end() may have closed it
            if app is not None and self._tid == tid:  # else opened on another thread: not ours to close
                t0 = self._t0
                self._app = None  # free the slot: no call since reading it
                app((self.name, t0, t1, self.stats or None, tid))  # recorded before it leaves the open list
                if self._app is None and not self._more:  # else reopened meanwhile (a call ran)
                    open_objects.pop(self._ref, None)  # type: ignore[arg-type]  # set at the opening
                # self._recorded(), inlined: the common path makes no further call
                if _grow is not None and _recorder is not None and len(_recorder.sections) >= _grow_at:
                    _grown()
                if _listeners:
                    self._notify(False)
        elif self._more:
            self._close(False)

    begin = __enter__

    def end(self) -> None:
        """Close a section opened with begin() (on any thread)."""
        self._close(True)

    def _close(self, loose: bool) -> None:
        if self._app is None and not self._more:
            return  # entered with no session: nothing to close
        t1 = _now()
        tid = _get_ident()
        more = self._more
        if more:
            key = task_key(tid)
            stack = more.get(key)
            # the latest opening of this thread: its stack's top, unless the slot is
            # this thread's and started later (taken after the slot was freed); in an
            # asyncio task its own stack's top (the slot may be another task's)
            if stack and (key is not tid or not (self._app is not None and self._tid == tid
                                                 and self._t0 > stack[-1][0])):
                t0, app = stack.pop()
                if not stack:
                    del more[key]  # only this thread adds or removes its key
                app((self.name, t0, t1, self.stats or None, tid))
                self._unlist()
                self._recorded()
                return
        held = self._app
        if held is None or (self._tid != tid and not loose):
            return  # not opened on this thread (e.g. entered before the session began)
        t0, otid = self._t0, self._tid
        self._app = None  # take the slot: no call since reading it
        held((self.name, t0, t1, self.stats or None, otid))
        self._unlist()
        self._recorded()

    def _unlist(self) -> None:
        """Off :data:`open_objects` once no opening is left, after its record is
        appended: the test and the removal with no call between, so an opening made
        by another thread meanwhile (it adds the object after its opening is in
        place) keeps it on."""
        if self._app is None and not self._more:
            open_objects.pop(self._ref, None)  # type: ignore[arg-type]  # set at the opening

    def _recorded(self) -> None:
        """After a section is appended: the growth hook's look (as the compiled
        section's ``record``), then the listeners."""
        if _grow is not None and _recorder is not None and len(_recorder.sections) >= _grow_at:
            _grown()
        if _listeners:
            self._notify(False)

    def _notify(self, enter: bool) -> None:
        rec = _recorder
        if rec is not None:
            rec.notify(self.name, enter)

    def __call__(self, fn: F) -> F:
        return decorate(self, fn)


def bare(cls: type[PySection], fn: F) -> F:
    """``@polyprof.section`` written without a name: a section per call named after the
    function (its qualified name: ``Model.forward``)."""
    inner = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
    name = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or repr(inner)
    return decorate(cls(name), fn)


def decorate(sec: PySection, fn: F) -> F:
    """``@section(name, **stats)``: each call runs in a fresh section of the same type.

    On an ``async def``, a generator or an async generator the section times the work,
    not the creation of the coroutine: it opens when the body first runs (first
    ``await``/``next``) and closes when it completes (returns, raises, or is closed)
    (collect/each_call.py). Each call has its own section, so concurrent asyncio tasks
    never share one."""
    from .each_call import each_call  # (functools, inspect: only where a section decorates)

    cls, name, stats = type(sec), sec.name, sec.stats
    return each_call(fn, lambda: cls(name, **stats))
