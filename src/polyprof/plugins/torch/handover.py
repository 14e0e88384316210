"""The session's torch recording around the program's own torch profilers.

torch runs one profiler at a time. A program that starts its own inside a session
(a ``torch.profiler.profile`` with a schedule, Lightning's ``profiler="pytorch"``,
accelerate's ``Accelerator.profile()``) would end the session's recording unread. So
the session's recording ends, kept, where the program's profiler is prepared (torch's
``_prepare_profiler``, wrapped unseen in hooks.py), and starts again, as a new
recording, once every profiler the program prepared since has stopped (torch's
``_run_on_profiler_stop``, which follows each profiler's ``_disable_profiler``) and
every ``torch.profiler.profile`` object it started has stopped (``stop()``, wrapped
unseen: :data:`_OBJECTS`) or has run the last cycle of its schedule
(:func:`_may_record`). Not at the end of each of an object's cycles, where torch stops
its profiler too: ours would end again at the next cycle's prepare, a start and a stop
of torch's profiler (costlier still with CUPTI) a cycle. The program's profilers and
their files are what they are without polyprof, but for the copies of the session's
sections (``mirror_sections``): the session records nothing while one is open, so its
torch ops then are in the program's profile, not in the session's trace. The program's
``ProfilerStep#N`` (opened by its profile object in steps where it does not record) are
its steps: captures made after a hand-over leave them out (ingest.py, ``Capture.handed``).

Not started again: while a profiler or profile object the program started has not
stopped (the program ends inside it, or drops a prepared one); off the session's thread (torch keeps
per-thread profiler state); with the plugin's own ``with_stack`` (no hand-over: the
program's profiler ends the session's recording, lost, as before); and for the rest of
the session once a torch range recorded by the session was still open when its
recording ended (:func:`open_at_stop`: a ``record_function`` around the loop, Lightning's
action ranges). torch 2.13 ends a range through the recording it began in, whose memory
is freed when that recording stops, whenever a recording of the same kind (all threads,
or one thread's) runs then: such a range ending in the session's next recording
corrupts the heap (valgrind: invalid writes in ``onFunctionExit``; restarting anyway
crashed Lightning runs at the trace's save one time in four). The session's own section copies are ended before each
recording of either kind stops (:func:`close_mirrors`), so they never block it.

A ``polyprof.torch.profile`` drop-in is handed torch instead (the plugin's
``attach_driver``): its cycles come to the plugin. What its schedule had torch record is
kept at its end (:class:`DropIns`) and becomes the trace's ``metadata["schedule"]``, so
the analyses keep to those steps, whether the drop-in runs its own session or one
already active (``polyprof run``), whose plugin also records outside the drop-in.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

from ...collect.clock import now_ns
from ...trace import metadata_keys as mkeys
from ...trace.core import Trace
from .hooks import imported_torch

if TYPE_CHECKING:  # the plugin this works for (plugin.py imports this module)
    from .captures import ExportDir
    from .plugin import TorchPlugin

log = logging.getLogger("polyprof")

__all__ = ["DropIns", "HandOver", "close_mirrors", "gates", "open_at_stop"]

#: why the session's recording is not started again (HandOver.blocked)
OPEN = ("a torch range opened while it recorded was still open when it stopped (a record_function around "
        "the loop, Lightning's actions), and torch writes the end of such a range into the freed memory of "
        "the recording it began in when another one like it runs")
#: Kineto's kinds of the host's ranges (torch ops, record_function and section copies)
_RANGES = frozenset({"cpu_op", "user_annotation", "python_function"})


def gates(active: Callable[[], TorchPlugin | None]) -> tuple[
        Callable[[], None], Callable[[], None], Callable[[], None],
        tuple[Callable[[Any], None], Callable[[Any], None], Callable[[Any], None]]]:
    """What hooks.gate_profiler_start has torch call before a profiler is prepared, after
    one stopped, and when a preparation failed, and at the start (or failed start) and
    stop of a profile object: each reaches the hand-over of the running session's plugin
    (``active()``), if any. Made once (plugin.py): the gates stay on torch for the rest
    of the process."""

    def on(what: str) -> Callable[[], None]:
        def call() -> None:
            p = active()
            if p is not None:
                getattr(p._handover, what)()

        return call

    def on_object(what: str) -> Callable[[Any], None]:
        def call(obj: Any) -> None:
            p = active()
            if p is not None and p._handover.busy:
                return  # the session's own profile object
            if what == "started":
                try:
                    _OBJECTS.add(obj)
                except TypeError:  # no weak reference to it: followed by its cycles only
                    pass
                return
            _OBJECTS.discard(obj)
            if what == "stopping" and p is not None:
                p._handover.stopping(obj)

        return call

    return on("prepared"), on("stopped"), on("prepare_failed"), (
        on_object("started"), on_object("start_failed"), on_object("stopping"))


#: the program's ``torch.profiler.profile`` objects started and not stopped yet (since
#: the first session with the torch plugin put its gates on torch; weak: one the program
#: drops unstopped is forgotten)
_OBJECTS: weakref.WeakSet[Any] = weakref.WeakSet()


class HandOver:
    """Where the program's own torch profilers hold torch, for one torch plugin."""

    def __init__(self, plugin: TorchPlugin) -> None:
        self.plugin = plugin
        #: the program's profilers prepared and not stopped since (ours start again at 0)
        self.open = 0
        #: ours ended (or could not start) for the program's: it starts again once none is open
        self.waiting = False
        #: >0 while ours starts or stops: its own prepare and stop are not the program's
        self.busy = 0
        #: the session's thread, where ours starts again (set at the plugin's start)
        self.thread = threading.get_ident()
        #: [start, end] (session ns, end -1 while open) of each stretch torch was the program's
        self.windows: list[list[int]] = []
        #: why ours must not record again in this session (None: it may)
        self.blocked: str | None = None
        #: how many times ours started again after the program's
        self.restarts = 0

    # ------------------------------------------------------------------ torch's calls
    def prepared(self) -> None:
        """torch is about to prepare a profiler (hooks._gate_prepare): the program's, unless
        ours is starting. Ours, if it records, ends here and is kept."""
        if self.busy:
            return
        self.open += 1
        p = self.plugin
        p._steps.program_profiles()  # no slow path of torch's in the program's own profile (steps.py)
        with p._lock:
            ours = p._prof is not None and p.driver is None and not p.options.get("with_stack")
        if not ours:
            return
        prof = p._end_own()
        cap = p._captures[-1]
        cap.handed = True  # its ProfilerStep#N are the program's (ingest.py)
        p._attach_listener()  # sections still copied, into the program's profile (``mirror_sections``)
        if cap.lost or prof is None:  # (a profiler torch started before this one ended ours: said so)
            return
        self._wait()
        if self.blocked is None and open_at_stop(prof):
            self.blocked = OPEN

    def prepare_failed(self) -> None:
        """The program's ``_prepare_profiler`` raised: that profiler is not open."""
        if not self.busy:
            self.stopped()

    def stopped(self) -> None:
        """A torch profiler just stopped (hooks._gate_stop): the end of a profile
        object's cycle or of the object itself, or of another kind of torch profiler."""
        if self.busy:
            return
        # the copies of sections begun in the program's profile end here, where they end
        # nothing (no recording of their kind runs): none ends in its next one (close_mirrors)
        close_mirrors(self.plugin._stacks, self.plugin._ranges)
        self.open = max(0, self.open - 1)
        self._again()

    def stopping(self, obj: Any) -> None:
        """One of the program's profile objects is about to stop (hooks._gate_objects; it
        is no longer in ``_OBJECTS``). Ours starts again at the stop of the profiler it
        prepared (:meth:`stopped`, inside the object's stop) if its stop stops one, else
        here (the object is between cycles, or past its schedule's last)."""
        if not self.busy and not _stops_profiler(obj):
            self._again()

    def _again(self) -> None:
        """Ours starts again (on the session's thread) once nothing of the program's holds
        torch: no profiler it prepared is open, and no profile object it started (between
        its schedule's cycles, too: starting again there, for ours to end again at the
        next cycle's prepare, would cost a start and a stop of torch's profiler a cycle)."""
        if not self.waiting or self.open or self.blocked or threading.get_ident() != self.thread or _held():
            return
        p = self.plugin
        if p._state != "started" or p.driver is not None or _torch_on():  # (one prepared before the session)
            return
        self.waiting = False
        if self.windows and self.windows[-1][1] < 0:
            self.windows[-1][1] = now_ns()
        p._begin()
        if p._prof is not None:
            self.restarts += 1
            p._captures[-1].handed = True  # the program's profile objects may still open ProfilerStep#N

    # ------------------------------------------------------------------ the plugin's calls
    def blocks(self) -> bool:
        """Whether the program holds torch now (ours must not start): ours then waits."""
        if self.open or self.blocked is not None or _held() or _torch_on():
            self._wait()
            return True
        return False

    def _wait(self) -> None:
        if not self.waiting:
            self.waiting = True
            self.windows.append([now_ns(), -1])

    def summary(self) -> str | None:
        """What the session's trace misses, for the session's warnings (None: nothing)."""
        if not self.windows:
            return None
        n = len(self.windows)
        still = self.windows[-1][1] < 0
        end = now_ns()
        secs = sum((e if e >= 0 else end) - s for s, e in self.windows) / 1e9
        times = "once" if n == 1 else f"{n} times"
        tail = ", the last one until the session's end" if still and n > 1 else (
            " until the session's end" if still else "")
        again = f"was not started again: {self.blocked}" if self.blocked else "started again after"
        return (f"the program started its own torch.profiler {times} ({secs:.3g} s in all{tail}): torch runs one "
                f"profiler at a time, so the session's torch recording stopped while the program's was open and "
                f"{again}; the torch ops of those stretches are in the program's profile, not in this trace")


def _held() -> bool:
    """Whether a profile object of the program's is open and may prepare a profiler again."""
    return any(map(_may_record, list(_OBJECTS)))


def _may_record(obj: Any) -> bool:
    """False for a profile object whose schedule, one ``torch.profiler.schedule`` with
    ``repeat`` > 0 (read from its closure: it is a pure function), has run its last
    cycle (its ``step_num`` is past it): the object records nothing more however long it
    stays open (a ``with`` around the whole training loop, the pattern of torch's docs).
    True for any other object (its own schedule: one cannot tell)."""
    arg = schedule_args(getattr(obj, "schedule", None))
    if arg is None:
        return True
    try:
        step = int(obj.step_num) - arg.get("skip_first", 0)
        cycle = arg["wait"] + arg["warmup"] + arg["active"]
        repeat = arg["repeat"]
        if arg.get("skip_first_wait", 0):
            step += arg["wait"]
    except Exception:  # another torch's schedule: cannot tell
        return True
    return repeat <= 0 or step < 0 or step < repeat * cycle


def schedule_args(sched: Any) -> dict[str, int] | None:
    """The arguments of a ``torch.profiler.schedule`` (``wait``, ``warmup``, ``active``,
    ``repeat``, ``skip_first``...), read from its closure (it is a pure function); None
    for any other callable (a schedule of the program's own: one cannot tell)."""
    code = getattr(sched, "__code__", None)
    cells = getattr(sched, "__closure__", None)
    if code is None or cells is None or code.co_name != "schedule_fn" or \
            getattr(sched, "__module__", None) != "torch.profiler.profiler":
        return None
    try:
        return {k: int(c.cell_contents) for k, c in zip(code.co_freevars, cells)}
    except Exception:  # another torch's schedule: cannot tell
        return None


def _stops_profiler(obj: Any) -> bool:
    """Whether the ``stop()`` of the profile object ``obj`` stops a torch profiler: one
    in a warm-up or recording step of its schedule (torch 2.13's ``ProfilerAction``,
    whose transition to None stops the trace), or a ``_KinetoProfile`` with a profiler."""
    act = getattr(obj, "current_action", None)
    if act is None:
        return getattr(obj, "profiler", None) is not None
    return getattr(act, "name", None) in ("WARMUP", "RECORD", "RECORD_AND_SAVE")


def _torch_on() -> bool:
    """Whether a torch profiler records on this thread now."""
    torch = imported_torch()
    return torch is not None and bool(torch._C._autograd._profiler_enabled())


def close_mirrors(stacks: list[list[tuple[str, Any]]], ranges: Any) -> None:
    """End torch's copy of every polyprof section still open (``stacks``: each thread's,
    innermost last) while the recording they began in still runs, and forget them: the
    section's own end then ends nothing in torch. torch (2.13) writes a range's end into
    the recording it began in, which is freed once that recording stops, whenever a
    recording of the same kind runs by then (a later one of the session's: memory
    corruption, the crash of a later free)."""
    if ranges is None:
        return
    for stack in list(stacks):
        while stack:
            try:
                _name, h = stack.pop()
                ranges.exit(h)
            except Exception:  # another thread's section ended meanwhile, or torch refused: nothing to end
                pass


def open_at_stop(prof: Any) -> bool:
    """Whether a torch range was still open on some thread when the stopped ``prof``
    stopped: a host range that ends after the clock markers the plugin puts last into each
    recording (torch ends an unfinished range at the recording's end). True when it
    cannot tell (torch without ``trace_activities``, no markers). Such a range, when it
    ends while a later recording of the session's runs, writes into the freed memory of
    this one (torch 2.13's ``onFunctionExit``), so none may start."""
    from .ingest import SYNC_NAME  # the marker's name (ingest is imported once torch recorded)

    res = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    get = getattr(res, "trace_activities", None)
    if get is None:
        return True
    try:
        acts = get()
        if not acts:
            return False
        cls = type(acts[0])
        names, kinds = list(map(cls.name, acts)), list(map(cls.type, acts))
        ends = [t + d for t, d in zip(map(cls.timestamp, acts), map(cls.duration, acts))]
    except Exception:  # an undecodable name, another torch: cannot tell
        return True
    marks = [e for n, e in zip(names, ends) if n == SYNC_NAME]
    if not marks:
        return True
    last = max(marks)
    return any(e > last and k in _RANGES and n != SYNC_NAME for n, k, e in zip(names, kinds, ends))


class DropIns:
    """The ``polyprof.torch.profile`` drop-ins that drove one torch plugin (its ``driver``)
    and the steps they had torch record: the trace's ``metadata["schedule"]`` (what
    ``analyze/window.py`` keeps to), as a ``polyprof run --schedule`` session's.

    ``recorded_steps`` are the steps torch recorded for the drop-ins (RECORD or
    RECORD_AND_SAVE, by the drop-in's step numbers, its ``ProfilerStep#N``): a scheduled
    drop-in's by its schedule, one without a schedule all of its steps. The torch plugin of
    a session the drop-in runs inside (``polyprof run``) records before and after it
    too; those steps are in the trace but not in ``recorded_steps``. No drop-in with a
    schedule: nothing said (torch recorded every step of each)."""

    def __init__(self) -> None:
        #: each drop-in's, at its end: its schedule's summary (the drop-in's
        #: ``polyprof_schedule()``; None without a schedule), recorded steps and stretches
        self.runs: list[tuple[dict[str, Any] | None, list[int], list[list[int]]]] = []
        #: the drop-ins' export directories (``captures.ExportDir``), held until the plugin read them
        self.held: list[ExportDir] = []

    def done(self, said: dict[str, Any] | None, steps: list[int], windows: list[list[int]],
             exports: ExportDir | None = None) -> None:
        """A drop-in ended: ``said`` (None without a schedule), the steps torch recorded
        for it and their stretches [start, end] on the session clock; ``exports``, the
        directory of its cycles, is held until :meth:`release`."""
        self.runs.append((said, [int(s) for s in steps], [[int(a), int(b)] for a, b in windows]))
        if exports is not None:
            self.held.append(exports)

    def release(self) -> None:
        """The cycles were read: the drop-ins' directories go with their drop-ins."""
        self.held.clear()

    def said(self) -> dict[str, Any] | None:
        """``metadata["schedule"]``: one scheduled drop-in's summary as it gave it; with
        several drop-ins, every one's recorded steps and stretches, the schedule's
        arguments where every scheduled one had the same, and ``drop_ins`` (how many)."""
        scheduled = [s for s, _, _ in self.runs if s is not None]
        if not scheduled:
            return None
        if len(self.runs) == 1:
            return dict(scheduled[0])
        fixed = ("by", "recorded_steps", "windows_ns")
        args = [{k: v for k, v in s.items() if k not in fixed} for s in scheduled]
        return {**(args[0] if all(a == args[0] for a in args) else {}), "by": "torch.profiler",
                "recorded_steps": sorted({n for _, steps, _ in self.runs for n in steps}),
                "windows_ns": sorted(w for _, _, ws in self.runs for w in ws), "drop_ins": len(self.runs)}

    def write(self, out: Trace) -> Trace:
        """``out`` (the plugin's part of the trace) with ``metadata["schedule"]`` set when
        a drop-in with a schedule drove the plugin."""
        said = self.said()
        if said:
            out.metadata[mkeys.SCHEDULE] = said
        return out
