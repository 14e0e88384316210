"""The hot path: user sections, marks, counters and steps recorded per thread.

A completed section is one tuple appended to one list; marks and counters go to
per-thread arrays. With no active recorder every call is a global lookup and
a return, so instrumented code costs next to nothing when nobody profiles it.
``section`` is the compiled ``_fastsection.section`` when the optional extension was
built, else the pure-Python :class:`PySection` (collect/pysection.py; ``IMPLEMENTATION``
says which).
"""

from __future__ import annotations

import os
import sys
import threading
from array import array
from time import perf_counter_ns as _now
from types import ModuleType
from typing import TYPE_CHECKING, Callable

from ..lowlevel import unseen
from . import pysection, steps
from .pysection import PySection

if TYPE_CHECKING:
    import numpy as np

_recorder: "Recorder | None" = None


class ThreadBuffer:
    """Marks and counters of one thread (rare calls; sections go to one shared list)."""

    __slots__ = ("tid", "ident", "key", "name", "mark_names", "mark_ts", "ctr_names", "ctr_ts", "ctr_values")

    def __init__(self) -> None:
        t = threading.current_thread()
        self.tid = threading.get_native_id()
        self.ident: int = t.ident if t.ident is not None else threading.get_ident()
        self.key = self.ident  #: the thread's key in Recorder.threads (set by Recorder.buffer)
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

    One track per thread, not per ident: CPython gives a thread that starts the ident of
    one that has ended, so each thread's birth is noted (:func:`watch_thread_starts`) and
    a record's thread is the one born last with its ident at or before the record's start
    (:meth:`thread_keys`, at collect: nothing more per section). Exact, since a thread
    records nothing before its birth nor after its end, and an ident is given again only
    after its thread has ended. ``threads`` has one entry per thread: the ident of the
    first thread that had it, a negative key for each later one.
    """

    def __init__(self) -> None:
        self.active = False
        self.sections: list[tuple[str, int, int, dict[str, object] | None, int]] = []
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._tls = threading.local()
        self.buffers: list[ThreadBuffer] = []
        #: thread key -> (name, OS thread id), one entry per thread (the class's docstring)
        self.threads: dict[int, tuple[str, int]] = {}
        #: ident -> (birth ns, thread key) of each thread that had it, in order of birth
        self.lives: dict[int, list[tuple[int, int]]] = {}
        self._reused: set[int] = set()  # idents that more than one thread had
        self._later = 0  # threads given a key of their own (-1, -2, ...)
        self.steps: list[int] = []
        #: callables(name, is_enter) that mirror sections into other tools (e.g. torch);
        #: change it in place (append/remove): the compiled section holds this list
        self.listeners: list[Callable[[str, bool], None]] = []
        #: callables(n) told after the n-th polyprof.step() call (e.g. torch's ProfilerStep#n)
        self.step_listeners: list[Callable[[int], None]] = []
        #: the program called polyprof.step() itself: detected steps (auto_step) stand down
        self.explicit_steps = False
        #: where plain and block ``polyprof.step()`` calls put boundaries (collect/steps.py)
        self.step_ended_by_block = self.step_absorbed = self.step_call_open = False
        self.step_depth = self.step_forms = 0
        #: the first call was a block's, entered at step_begin: step 0 begins there (collect/steps.py)
        self.step_first_block = False
        self.step_begin: int | None = None
        #: steps detected in an unmodified program (auto_step): the trace's steps when the
        #: program never calls polyprof.step(); told to ``auto_listeners`` (a session's
        #: schedule or window), never to ``step_listeners`` (torch's ProfilerStep ranges)
        self.auto_steps: list[int] = []
        self.auto_listeners: list[Callable[[int], None]] = []
        #: where the first detected step's work began (collect/steps.py ``work_begins``); None: the session's start
        self.auto_begin: int | None = None
        #: sections dropped from the front to keep at most ``max_sections`` (None: all)
        self.max_sections: int | None = None
        self.dropped = 0
        #: held while the front of ``sections`` is dropped, and by readers that index it
        self.trim_lock = threading.Lock()

    def trim(self, exact: bool = False) -> None:
        """Drop the oldest sections past ``max_sections`` (while recording by chunks of an
        eighth of it, so the list is not moved for every new section; ``exact``, at the
        end: down to ``max_sections``); they are counted in ``dropped``."""
        keep = self.max_sections
        if keep is None or len(self.sections) <= keep + (0 if exact else max(keep // 8, 1)):
            return
        with self.trim_lock:
            k = len(self.sections) - keep
            if k > 0:
                del self.sections[:k]
                self.dropped += k

    def snapshot_threads(self) -> None:
        """The live threads' names (a thread may rename itself after its birth)."""
        live = [(t.ident, t.name, t.native_id) for t in threading.enumerate()]
        with self._lock:
            for ident, name, native in live:
                if ident is not None and native is not None:
                    self._note(ident, name, native, None)

    def born(self, ident: int, name: str, native: int) -> None:
        """A thread starts (called on it before it runs anything): a track of its own,
        even when an ended thread had its ident."""
        with self._lock:
            self._note(ident, name, native, _now())

    def _note(self, ident: int, name: str, native: int, born: int | None) -> int:
        """The key of thread ``ident`` (OS id ``native``), noted with its name; ``born``:
        its birth time, else (a live thread seen) the thread of that ident and OS id, or
        one born now when none is (a thread not started by threading.Thread while the
        watch was on). With ``_lock`` held."""
        lives = self.lives.get(ident)
        if lives is None:  # the first thread with this ident: born before any record
            self.lives[ident] = [(-(1 << 62), ident)]
            self.threads[ident] = (name, native)
            return ident
        if born is None:
            for _, key in reversed(lives):
                if self.threads[key][1] == native:
                    self.threads[key] = (name, native)
                    return key
            born = _now()
        self._later += 1
        key = -self._later
        lives.append((born, key))
        self._reused.add(ident)
        self.threads[key] = (name, native)
        return key

    def thread_keys(self, idents: "np.ndarray", starts: "np.ndarray") -> "np.ndarray":
        """The thread key (in ``threads``) of each record made by thread ``idents[i]`` and
        started at ``starts[i]``: the thread born last with that ident by then. ``idents``
        itself when no ident was had by two threads."""
        import numpy as np

        idents = np.asarray(idents, np.int64)
        with self._lock:
            reused = {i: list(self.lives[i]) for i in self._reused}
        if not reused or not len(idents):
            return idents
        u = np.array(sorted(reused), np.int64)
        group = np.minimum(np.searchsorted(u, idents), len(u) - 1)
        rows = np.flatnonzero(u[group] == idents)
        order = np.argsort(group[rows].astype(np.int16 if len(u) < 1 << 15 else np.int64), kind="stable")  # radix
        rows = rows[order]
        cuts = np.searchsorted(group[rows], np.arange(len(u) + 1))
        starts = np.asarray(starts, np.int64)
        keys = idents.copy()
        for j, ident in enumerate(u.tolist()):
            r = rows[cuts[j]:cuts[j + 1]]
            births, ks = (np.array(c, np.int64) for c in zip(*reused[ident]))
            keys[r] = ks[np.maximum(np.searchsorted(births, starts[r], side="right") - 1, 0)]
        return keys

    def keyed_sections(self, secs: list[tuple]) -> list[tuple]:
        """``secs`` (section tuples) with each one's thread ident replaced by its thread
        key: ``secs`` itself when no ident was had by two threads."""
        if not self._reused or not secs:
            return secs
        import numpy as np

        keys = self.thread_keys(np.array([s[4] for s in secs], np.int64), np.array([s[1] for s in secs], np.int64))
        return [(*s[:4], k) for s, k in zip(secs, keys.tolist())]

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
                buf.key = self._note(buf.ident, buf.name, buf.tid, None)
                self.buffers.append(buf)
            return buf

    def _notify_listeners(self, name: str, enter: bool) -> None:
        for fn in self.listeners:
            try:
                fn(name, enter)
            except Exception:  # a listener must never break the user's program
                pass

    #: the listeners, called unseen by the thread's profile function: a program's own
    #: torch.profiler(with_stack=True) lists the torch plugin's copy of a section (a
    #: user_annotation range) but no polyprof frame (docs/torch.md)
    notify = unseen.quiet(_notify_listeners)


def set_growth(fn: Callable[[], int] | None, at: int) -> None:
    """Call ``fn()`` on the recording thread once the active recorder holds ``at``
    sections; it returns the next count to call it at (``fn`` None: off). The crash
    journal writes on the program's thread through it when a burst outruns its own
    thread (journal.py). A hook that raises or returns a bad count is turned off."""
    at = at if fn is not None else sys.maxsize
    pysection.set_growth(fn, at)
    fast_set = getattr(_fast, "set_growth", None)  # None: an extension built before the hook (no hook then)
    if fast_set is not None:
        fast_set(fn, at)


def activate(rec: Recorder | None) -> None:
    global _recorder
    _recorder = rec
    pysection.activate(rec)  # each section type reads its own copy of the recorder
    if _fast is not None:
        _fast.activate(rec)


_original_bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def watch_thread_starts(rec: Recorder | None) -> None:
    """Note each thread's birth, name and OS id as it starts, so short-lived threads
    that end before any snapshot still get a named track, and a thread given the ident
    of one that has ended gets its own (:meth:`Recorder.born`)."""
    if rec is None:
        threading.Thread._bootstrap_inner = _original_bootstrap  # type: ignore[attr-defined]
        return

    from ..lowlevel.unseen import quiet  # a session's start: `import polyprof` loads no compiled module for it

    def note(self: threading.Thread) -> None:
        try:
            rec.born(threading.get_ident(), self.name, threading.get_native_id())
        except Exception:
            pass

    # the thread's own _bootstrap_inner called right after, with no polyprof frame between
    # (a program's profilers see the thread start as without polyprof: lowlevel/unseen.py)
    threading.Thread._bootstrap_inner = quiet(note, then=_original_bootstrap)  # type: ignore[attr-defined]


def active_recorder() -> Recorder | None:
    return _recorder


def _load_fast() -> ModuleType | None:
    """The compiled extension, or None (not built, or POLYPROF_PURE_PYTHON=1)."""
    if os.environ.get("POLYPROF_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _fastsection  # the optional compiled section type, tried once (POLYPROF_PURE_PYTHON)
    except ImportError:
        return None
    _fastsection.set_decorator(pysection.decorate)
    if hasattr(_fastsection, "set_task_key"):  # an extension built before may lack it
        _fastsection.set_task_key(pysection.task_key)
    return _fastsection


_fast = _load_fast()
#: the ``section`` type in use: the compiled one when built, else :class:`PySection`
#: (same interface; typed as PySection for editors and type checkers)
section: type[PySection] = _fast.section if _fast is not None else PySection
#: which implementation ``polyprof.section`` is: "c" (compiled) or "python" (fallback)
IMPLEMENTATION = "c" if _fast is not None else "python"


def mark(name: str) -> None:
    """An instant event on the calling thread."""
    rec = _recorder
    if rec is None or not rec.active:
        return
    buf = rec.buffer()
    buf.mark_names.append(rec.intern(name))
    buf.mark_ts.append(_now())


def counter(name: str, value: float) -> None:
    """One sample of a user counter (e.g. loss, queue depth, batch size): a number, or a
    one-element array or tensor (a torch loss that requires grad is read detached: no
    warning; a device tensor's read waits for the device, as ``.item()`` does)."""
    rec = _recorder
    if rec is None or not rec.active:
        return
    v = value if type(value) is float else _number(name, value)  # first: a value that fails adds no name or time
    buf = rec.buffer()
    buf.ctr_names.append(rec.intern(name))
    buf.ctr_ts.append(_now())
    buf.ctr_values.append(v)


def _number(name: str, value: object) -> float:
    """A counter's value as a float. A torch tensor is detached first: ``float()`` of one
    that requires grad warns (the warning would point here); torch is never imported. A
    one-element array of any shape (NumPy's or JAX's ``(1,)``, which ``float()`` refuses)
    is read by its ``item()``. Anything else: :class:`~polyprof.errors.SessionError`
    naming the counter."""
    detach = getattr(value, "detach", None)
    if callable(detach):  # a torch tensor (the name alone: torch stays unimported)
        value = detach()
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        item = getattr(value, "item", None)
        if callable(item) and getattr(value, "size", None) == 1:
            try:
                return float(item())
            except (TypeError, ValueError):
                pass
        from ..errors import SessionError  # only for a bad value: the recorder imports nothing at start

        raise SessionError(f"polyprof.counter({name!r}): the value must be a number or a one-element "
                           f"array or tensor, not {type(value).__name__} ({e})") from None


class StepBlock:
    """What :func:`step` returns: ``with polyprof.step(): ...`` makes the block one step
    (as JAX's ``StepTraceAnnotation``): the first block is step 0, from its entry (what
    ran before is the program's set-up, in no step), leaving a block ends its step, and
    the next block begins where that one ended (the loop's own time goes to it). Mixed
    with plain calls: collect/steps.py."""

    __slots__ = ()

    def __enter__(self) -> None:
        rec = _recorder
        if rec is not None and rec.active:
            steps.on_enter(rec, _now())

    def __exit__(self, *exc: object) -> None:
        rec = _recorder
        if rec is not None and rec.active and steps.on_exit(rec):
            _next_step(rec)


_BLOCK = StepBlock()


def step() -> StepBlock:
    """End the current step and begin the next (call once per training iteration; what
    runs before the first call is step 0), or, as ``with polyprof.step():``, make the
    block one step (:class:`StepBlock`; the first block is step 0)."""
    rec = _recorder
    # the first call: its caller's frame says whether a `with` enters it (collect/steps.py)
    if rec is not None and rec.active and steps.on_call(rec, None if rec.explicit_steps else sys._getframe(1)):
        _next_step(rec)
    return _BLOCK


def auto_step() -> None:
    """A step detected in an unmodified program (e.g. an optimizer's ``step()``: the torch
    plugin), kept apart from :func:`step`'s; ignored once the program calls that itself."""
    rec = _recorder
    if rec is None or not rec.active or rec.explicit_steps:
        return
    rec.auto_steps.append(_now())
    _tell(rec.auto_listeners, len(rec.auto_steps))


def _next_step(rec: Recorder) -> None:
    rec.steps.append(_now())
    if rec.step_listeners:
        _tell(rec.step_listeners, len(rec.steps))


def used_steps(rec: Recorder) -> list[int]:
    """The step boundaries a trace keeps: the program's own, else the detected ones."""
    return rec.steps if rec.steps or rec.explicit_steps else rec.auto_steps


def _tell(listeners: list[Callable[[int], None]], n: int) -> None:
    for fn in list(listeners):  # a listener may add or remove listeners
        try:
            fn(n)
        except Exception:  # a listener must never break the user's program
            pass
