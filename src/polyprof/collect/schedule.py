"""Which steps a session records: a schedule like torch.profiler's.

``schedule(wait=1, warmup=1, active=3, repeat=2, skip_first=10)``: the first
``skip_first`` steps are not recorded, then cycles of ``wait`` steps not recorded,
``warmup`` steps recorded and thrown away (the profilers start up: their first events
cost more) and ``active`` steps kept; ``repeat`` cycles (0: until the program ends, as
torch's default). polyprof's default is ``repeat=1``, one cycle, unlike torch's: a
schedule given to ``polyprof run`` on a long program should record the few steps it names,
not a share of every step to the end (docs/torch.md).
Steps are counted by ``polyprof.step()`` calls (``prof.step()`` of the torch drop-in
calls it): step 0 runs from the session's start to the first call, step N from the
N-th call to the next, as on the Steps line. With ``with polyprof.step():`` blocks the
Steps line's step 0 begins at the first block's entry, and with a detected optimizer
step's at the first step's work (the first forward): collect/steps.py ``first_start``.
The schedule counts the same boundaries, so its step numbers are the Steps line's, but
its step 0 begins at the session's start: a schedule that records step 0 records the
set-up before it too, outside the trace's steps.

What it saves: plugins that can pause (``pause()`` / ``resume()``: torch, jax, cupti) record only
in warm-up and active steps, so a long run holds only those; every other plugin (the
host's sections, OpenCL) records as usual and its events outside the active steps are
dropped when the session assembles the trace. The trace keeps the events that overlap
an active stretch, its metadata says which steps were recorded
(``metadata["schedule"]``), and step numbers stay the program's (step 40 is step 40).
A time window (:class:`Timed`) records by the clock, and its recorded steps are the
steps that lie wholly in it and in what the step-bound plugins recorded.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import SessionError
from . import background

if TYPE_CHECKING:
    from ..derive.steps import Steps
    from ..trace.core import Trace

log = logging.getLogger("polyprof")

WAIT, WARMUP, ACTIVE, DONE = "wait", "warmup", "active", "done"
_FIELD = re.compile(r"^\s*(wait|warmup|active|repeat|skip_first|skip-first)\s*=\s*(\d+)\s*$")


@dataclass(frozen=True)
class Schedule:
    """Steps to record; see the module doc."""

    wait: int = 0
    warmup: int = 0
    active: int = 1
    repeat: int = 1  # one cycle; 0: cycles until the program ends (torch's default)
    skip_first: int = 0

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "active", "repeat", "skip_first"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SessionError(f"schedule {name}={v!r}: must be a whole number, 0 or more")
        if self.active < 1:
            raise SessionError("schedule active=0: at least one step must be recorded")

    @classmethod
    def parse(cls, text: str) -> "Schedule":
        """From ``wait=1,warmup=1,active=3[,repeat=1][,skip_first=0]``."""
        kw: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            m = _FIELD.match(part)
            if not m:
                raise SessionError(f"--schedule {text!r}: expected KEY=N items (wait, warmup, active, repeat, "
                                   f"skip_first) separated by commas, not {part!r}")
            kw[m.group(1).replace("-", "_")] = int(m.group(2))
        return cls(**kw)

    def state(self, step: int) -> str:
        """What step number ``step`` (0 = the first) is: wait, warmup, active or done."""
        k = step - self.skip_first
        if k < 0:
            return WAIT
        cycle = self.wait + self.warmup + self.active
        if self.repeat and k >= cycle * self.repeat:
            return DONE
        pos = k % cycle
        return WAIT if pos < self.wait else WARMUP if pos < self.wait + self.warmup else ACTIVE

    def text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items())


def schedule(wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 1, skip_first: int = 0) -> Schedule:
    """A recording schedule for :func:`polyprof.profile` (``schedule=``) and ``polyprof run
    --schedule``, as ``torch.profiler.schedule`` but one cycle unless ``repeat`` says
    otherwise (0: to the end); see :mod:`polyprof.collect.schedule`."""
    return Schedule(wait, warmup, active, repeat, skip_first)


def call_plugin(plugin: object, what: str, on_error: Callable[[str, str], None]) -> None:
    """``plugin.pause()`` or ``resume()`` if it has one; what it raises goes to
    ``on_error(plugin name, message)``, never into the program."""
    fn = getattr(plugin, what, None)
    if fn is None:
        return
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - never into the program
        on_error(str(getattr(plugin, "name", type(plugin).__name__)), f"{what}: {type(e).__name__}: {e}")


@dataclass
class Driver:
    """Follows the steps of a running session: pauses and resumes the plugins that can,
    and notes the active stretches (``[start, end)`` on the session clock)."""

    plan: Schedule
    start_ns: int
    plugins: list[object]
    on_error: Callable[[str, str], None]
    windows: list[list[int]] = field(default_factory=list)  # [start, end], end -1 while open
    recorded: list[int] = field(default_factory=list)  # numbers of the active steps
    spans: list[list[int]] = field(default_factory=list)  # per window: [first, last] step number recorded in it
    step: int = 0
    recording: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        """At the session's start (step 0 begins)."""
        self._enter(0, self.start_ns)

    def on_step(self, n: int, t_ns: int) -> bool:
        """The n-th ``polyprof.step()`` call, at ``t_ns``: step n begins. True when plugins
        resumed here (:func:`follow`)."""
        with self._lock:
            if n <= self.step:
                return False
            return self._enter(n, t_ns)

    def _enter(self, n: int, t_ns: int) -> bool:
        self.step = n
        state = self.plan.state(n)
        if self.windows and self.windows[-1][1] < 0 and state != ACTIVE:
            self.windows[-1][1] = t_ns
        if state == ACTIVE:
            self.recorded.append(n)
            if not self.windows or self.windows[-1][1] >= 0:
                self.windows.append([t_ns, -1])
                self.spans.append([n, n])
            else:
                self.spans[-1][1] = n
        want = state in (WARMUP, ACTIVE)
        if want == self.recording:
            return False
        self.recording = want
        for p in self.plugins:
            self._call(p, "resume" if want else "pause")
        return want

    def end(self, stop_ns: int) -> list[tuple[int, int]]:
        """At the session's stop: the active stretches, the open one closed at ``stop_ns``."""
        with self._lock:
            if self.windows and self.windows[-1][1] < 0:
                self.windows[-1][1] = stop_ns
            return [(a, b) for a, b in self.windows]

    def stretches(self, since: int = 0) -> list[tuple[int, int, int, int]]:
        """The active stretches from the ``since``-th on, as known now: (start, end (-1
        while open), first and last step recorded in it), for the crash journal, which
        writes them as steps pass (collect/journal.py): only the last may still be open."""
        with self._lock:
            return [(a, b, f, la) for (a, b), (f, la) in zip(self.windows[since:], self.spans[since:])]

    def _call(self, plugin: object, what: str) -> None:
        call_plugin(plugin, what, self.on_error)

    def summary(self) -> dict[str, object]:
        return {**asdict(self.plan), "recorded_steps": list(self.recorded),
                "windows_ns": [list(w) for w in self.windows]}


class Timed:
    """Records from ``delay_s`` after the session's start for ``duration_s`` seconds
    (None: to the end), as nsys's ``--delay`` / ``--duration``.

    The window is exact on the session clock: events outside it are dropped when the
    trace is assembled (as a schedule's). Plugins that can pause are paused outside it,
    so a long run holds only the window: those that may be paused from any thread
    (:func:`by_clock`: jax, cupti) at the moment the window opens or closes (a timer),
    those whose profiler state belongs to the program's thread (``session_thread_only``:
    torch) at the next step boundary on that thread (``polyprof.step()`` or a detected
    optimizer step) or at the end.

    So such a plugin records whole steps from the first boundary after the window opens
    to the first after it closes (its ``stretches``): the window's recorded steps
    (``recorded_steps``, which the analyses keep to, as a schedule's) are the steps that
    lie wholly inside the window and inside those stretches; a step cut by the window's
    edges, or begun before the plugin resumed, is in the trace but not analysed
    (:meth:`settle`). A window that holds no whole step, or in which such a plugin
    recorded nothing, is said in the trace's warnings."""

    def __init__(self, delay_s: float, duration_s: float | None, start_ns: int, plugins: list[object],
                 on_error: Callable[[str, str], None]):
        self.delay_s, self.duration_s = float(delay_s), duration_s
        self.start_ns = start_ns
        self.open_ns = start_ns + int(self.delay_s * 1e9)
        self.close_ns = None if duration_s is None else self.open_ns + int(duration_s * 1e9)
        self.plugins = plugins
        self.on_error = on_error
        self.recording = True
        self.step = 0
        self.recorded: list[int] = []
        self.first_boundary: int | None = None  # the first step boundary after the window opened (ns)
        self._lock = threading.Lock()
        self._timers: list[background.Background] = []
        self._applied: dict[int, bool] = {}  # id(plugin) -> recording as last applied
        self._resumes: dict[int, list[tuple[int, int]]] = {}  # id(plugin) -> (when told, ns its resume took)
        #: id(plugin) -> [start, end] ns (end -1 while open) of each stretch a plugin paused and
        #: resumed at step boundaries recorded (step_bound)
        self.stretches: dict[int, list[list[int]]] = {id(p): [] if self.delay_s > 0 else [[start_ns, -1]]
                                                      for p in plugins if step_bound(p)}

    def begin(self) -> None:
        """At the session's start, before the plugins start: those that can pause are
        paused until the window opens."""
        if self.delay_s > 0:
            self._want(False, self.start_ns, on_thread=True)

    def arm(self) -> None:
        """Once the plugins have started: the timer that opens and closes the window at
        its instants on the session clock (``open_ns``, ``close_ns``), not at delays counted
        from now, however long the plugins took to be made and started. One thread for
        both, in order: an instant already past fires at once, the opening first."""
        from .clock import now_ns  # the clock imports the trace's keys: not on every import of this module

        todo: list[tuple[int, bool]] = [(self.open_ns, True)] if self.delay_s > 0 else []
        if self.close_ns is not None:
            todo.append((self.close_ns, False))
        if not todo:
            return

        def fire() -> float | None:
            t = now_ns()
            while todo and todo[0][0] <= t:
                self._want(todo.pop(0)[1], t)
            return None if not todo else (todo[0][0] - t) / 1e9  # None ends the thread

        self._timers.append(background.start(fire, max(0.0, (todo[0][0] - now_ns()) / 1e9), "polyprof-window"))

    def _want(self, want: bool, t_ns: int, on_thread: bool = False) -> None:
        with self._lock:
            self.recording = want
            for p in self.plugins:
                if on_thread or by_clock(p):
                    self._apply(p, want, t_ns)

    def _apply(self, plugin: object, want: bool, t_ns: int) -> bool:
        """``plugin`` resumed or paused at ``t_ns``, unless it is so already; True when it resumed."""
        if self._applied.get(id(plugin), True) == want:
            return False
        self._applied[id(plugin)] = want
        got = self.stretches.get(id(plugin))
        if got is not None:
            if want:
                got.append([t_ns, -1])
            elif got and got[-1][1] < 0:
                got[-1][1] = t_ns
        call_plugin(plugin, "resume" if want else "pause", self.on_error)
        if want:  # how long it took to resume (torch's first start: seconds), said if it recorded nothing
            from .clock import now_ns  # the clock imports the trace's keys: not on every import of this module

            self._resumes.setdefault(id(plugin), []).append((t_ns, now_ns() - t_ns))
        return want

    def on_step(self, n: int, t_ns: int) -> bool:
        """A step boundary on the program's thread: the thread-bound plugins follow. True
        when one resumed here (:func:`follow`)."""
        resumed = False
        with self._lock:
            self.step = max(self.step, n)
            if self.first_boundary is None and t_ns >= self.open_ns:
                self.first_boundary = t_ns
            for p in self.plugins:
                if not by_clock(p):
                    resumed |= self._apply(p, self.recording, t_ns)
        return resumed

    def end(self, stop_ns: int) -> list[tuple[int, int]]:
        for t in self._timers:
            background.stop(t, 1.0)
        with self._lock:
            for got in self.stretches.values():
                if got and got[-1][1] < 0:
                    got[-1][1] = stop_ns
        lo, hi = self.open_ns, stop_ns if self.close_ns is None else min(self.close_ns, stop_ns)
        return [(lo, hi)] if hi > lo else []

    def summary(self) -> dict[str, object]:
        return {"delay_s": self.delay_s, "duration_s": self.duration_s,
                "windows_ns": [[self.open_ns, self.close_ns if self.close_ns is not None else -1]],
                "recorded_steps": list(self.recorded)}

    def text(self) -> str:
        return f"delay={self.delay_s:g} s" + (f", duration={self.duration_s:g} s" if self.duration_s else "")

    def settle(self, out: Trace, window: tuple[int, int], parts: Sequence[tuple[object, Trace]]) -> Trace:
        """The window's trace ``out`` with its recorded steps (``recorded_steps``: see the
        class doc), and warnings where a plugin that pauses recorded nothing in the window,
        or no step lies wholly in what was recorded (the steps' marks, all cut by the
        window's edges, are then left out: the trace is analysed as a time window, not as
        steps that were not recorded whole). ``parts``: each plugin and what it collected."""
        # numpy, the steps and subsets only at a window's end: every session imports this module
        import numpy as np

        from ..derive.steps import find_steps  # (the same reason)
        from ..trace import metadata_keys as mkeys  # (the same reason)
        from ..trace.subset import take  # (the same reason)

        lo, hi = window
        steps = find_steps(out)
        whole = (steps.start >= lo) & (steps.end <= hi)
        for p in self.plugins:
            got = self.stretches.get(id(p))
            if got is None or getattr(p, "idle", False):  # idle: nothing it could record (torch never imported)
                continue
            inside = np.zeros(len(steps), bool)
            for a, b in got:
                inside |= (steps.start >= a) & (steps.end <= b)
            whole &= inside
        self.recorded = [int(n) for n in steps.number[whole].tolist()]
        out.metadata[mkeys.SCHEDULE]["recorded_steps"] = list(self.recorded)
        for plugin, part in parts:
            said = self._nothing_from(plugin, part, lo, hi)
            if said:
                _say(out, str(getattr(plugin, "name", type(plugin).__name__)), said)
        cut = bool(len(steps)) and not whole.any()
        if cut:
            _say(out, "session", self._no_whole_step(steps, lo, hi))
            out = take(out, ~np.isin(np.arange(out.n_events), steps.rows))
        if not out.n_events:
            _say(out, "session", self._empty(parts, lo, hi, cut))
        return out

    def _nothing_from(self, plugin: object, part: Trace, lo: int, hi: int) -> str:
        """Why a plugin that pauses, or begins late (:meth:`_late`), recorded nothing in the
        window, if it did not ("": it did, or cannot say)."""
        from ..trace.subset import overlapping  # at a window's end only (settle)

        if getattr(plugin, "idle", False) or (part.n_events and overlapping(part, [(lo, hi)]).any()):
            return ""
        got = self.stretches.get(id(plugin))
        if getattr(plugin, "pause", None) is None or (got is None and hasattr(plugin, "began_ns")):
            return self._late(plugin, part, hi)
        head = f"recorded nothing in the window ({self.text()})"
        if got is None:  # paused and resumed by the clock
            return f"{head}: its {part.n_events:,} events lie outside it" if part.n_events else ""
        rule = ("; it starts and stops recording only at a step boundary on the program's thread (an "
                "optimizer step or polyprof.step())")
        began = [a for a, b in got if b > lo and a < hi]
        if not began:
            first = self.first_boundary
            when = " (none came after it opened)" if first is None else \
                f" (the first after it opened came at {(first - self.start_ns) / 1e9:.3f} s)"
            return f"{head}{rule}, and none came while the window was open{when}"
        t = max(began[0], lo)
        took = max((d for a, d in self._resumes.get(id(plugin), []) if a == began[0]), default=0)
        slow = f", and its resume there took {took / 1e6:,.1f} ms" if took > (hi - t) // 2 else ""
        return (f"{head}{rule}: the first in the window came at {(t - self.start_ns) / 1e9:.3f} s, "
                f"{(hi - t) / 1e6:,.1f} ms before it closed{slow}; make the window longer than a step")

    def _late(self, plugin: object, part: Trace, hi: int) -> str:
        """Why a plugin that records from when the program first uses its framework (its
        ``began_ns``: jax, at the first JAX call) recorded nothing in the window ("": one
        without ``began_ns``, which records from the session's start)."""
        if not hasattr(plugin, "began_ns"):
            return ""
        began: int | None = plugin.began_ns  # type: ignore[attr-defined]  # (checked just above)
        what = str(getattr(plugin, "begins_at", "when the program first used what it records"))
        head = f"recorded nothing in the window ({self.text()}); it records from {what}"
        if began is None:
            return f"{head}, which never came"
        if began >= hi:
            return (f"{head}, which came at {(began - self.start_ns) / 1e9:.3f} s, after the window closed "
                    f"(at {(hi - self.start_ns) / 1e9:.3f} s): the window is counted from the session's start, "
                    "before the program's imports; give a later --delay")
        return f"{head}: its {part.n_events:,} events lie outside the window" if part.n_events else ""

    def _empty(self, parts: Sequence[tuple[object, Trace]], lo: int, hi: int, cut: bool) -> str:
        """Why the window holds no event (``cut``: but the marks of the steps it cuts, left
        out): where the run's events lie, so the summary's "0 events" is not left bare."""
        import numpy as np  # at a window's end only (settle)

        firsts = [int(p.start_ns.min()) for _, p in parts if p.n_events]
        lasts = [int((p.start_ns + p.dur_ns).max()) for _, p in parts if p.n_events]
        head = f"the window ({self.text()}, {(lo - self.start_ns) / 1e9:.3f}-{(hi - self.start_ns) / 1e9:.3f} s) " \
               f"holds no event{' but the marks of the steps it cuts' if cut else ''}"
        if not firsts:
            return f"{head}: no plugin recorded any event in the whole run (only the counters' samples are kept)"
        n = int(np.sum([p.n_events for _, p in parts]))
        what = "the run's other events" if cut else f"the run's {n:,} events"
        return (f"{head}: {what} lie outside it, from {(min(firsts) - self.start_ns) / 1e9:.3f} s "
                f"to {(max(lasts) - self.start_ns) / 1e9:.3f} s after the session's start (the warnings "
                "above say why, where a plugin knows)")

    def _no_whole_step(self, steps: Steps, lo: int, hi: int) -> str:
        import numpy as np  # at a window's end only (settle)

        cut = (steps.start < hi) & (steps.end > lo)
        took = steps.end[cut] - steps.start[cut]
        typical = f" (they took {np.median(took) / 1e9:.3g} s each, median)" if len(took) else ""
        return (f"the window ({self.text()}) holds no step recorded whole: {int(cut.sum())} step(s) overlap it, "
                f"cut by its edges or begun before the plugins that record at step boundaries resumed"
                f"{typical}; their marks are left out, so it is analysed as a time window. Make the window a few "
                "steps long to analyse steps")


def follow(drv: Driver | Timed, times: list[int]) -> Callable[[int], None]:
    """What the recorder tells of the n-th step boundary (``times``: the recorder's list of
    them, the program's own or the detected ones): the driver follows. Where plugins
    resumed at it, step n begins once they have: torch's start (tens of ms) is the
    ending step's, as in the program's own timing, not the first recorded step's. (A
    pause stays after the boundary: its stop is in the next step, which is not recorded.)"""
    from .clock import now_ns  # the clock imports the trace's keys: not on every import of this module

    def told(n: int) -> None:
        if drv.on_step(n, times[n - 1]):
            times[n - 1] = now_ns()

    return told


def by_clock(plugin: object) -> bool:
    """Whether a window pauses and resumes ``plugin`` from its timer thread at the moment it
    opens and closes: every plugin but those whose profiler state belongs to the program's
    thread (``session_thread_only``: torch), unless its ``pauses_from_any_thread`` says it
    may be paused from any thread though it starts on the program's (jax)."""
    return not getattr(plugin, "session_thread_only", False) or bool(getattr(plugin, "pauses_from_any_thread", False))


def step_bound(plugin: object) -> bool:
    """Whether a plugin is paused and resumed at step boundaries on the program's thread
    (torch), not at the moment a window opens or closes."""
    return not by_clock(plugin) and getattr(plugin, "pause", None) is not None


def _say(trace: Trace, plugin: str, message: str) -> None:
    """A warning in the trace's metadata and on stderr."""
    from ..trace import metadata_keys as mkeys  # at a session's end only

    trace.metadata.setdefault(mkeys.WARNINGS, []).append({"plugin": plugin, "message": message})
    log.warning("%s: %s", plugin, message)


def finish(drv: Driver | Timed, trace: Trace, end: int, parts: Sequence[tuple[object, Trace]] = ()) -> Trace:
    """The trace of the scheduled steps or of the window only, at the session's stop
    (``end``); ``parts``: each plugin and what it collected (a window says which recorded
    nothing in it)."""
    from ..trace import metadata_keys as mkeys  # at a session's end only: every session imports this module
    from ..trace.subset import in_windows, take  # (the same reason)

    windows = drv.end(end)
    out = take(trace, in_windows(trace, windows), counter_ranges=windows, level_at_start=True)
    out.metadata[mkeys.SCHEDULE] = drv.summary()
    if not windows:
        unseen = "" if drv.step else " (no step seen: call polyprof.step() in each; JAX's are not)"
        msg = (f"the schedule ({drv.plan.text()}) recorded no step: the program ended in step "
               f"{drv.step}{unseen}; nothing but the trace's layout is kept") if isinstance(drv, Driver) else (
               f"the window ({drv.text()}) recorded nothing: the program ended before it opened")
        out.metadata.setdefault(mkeys.WARNINGS, []).append({"plugin": "session", "message": msg})
        log.warning("%s", msg)
    elif isinstance(drv, Timed):
        out = drv.settle(out, windows[0], parts)
    return out
