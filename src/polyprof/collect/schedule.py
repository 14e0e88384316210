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
N-th call to the next, as on the Steps line.

What it saves: plugins that can pause (``pause()`` / ``resume()``: torch) record only
in warm-up and active steps, so a long run holds only those; every other plugin (the
host's sections, OpenCL) records as usual and its events outside the active steps are
dropped when the session assembles the trace. The trace keeps the events that overlap
an active stretch, its metadata says which steps were recorded
(``metadata["schedule"]``), and step numbers stay the program's (step 40 is step 40).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Callable

from ..errors import SessionError
from . import background

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
    step: int = 0
    recording: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        """At the session's start (step 0 begins)."""
        self._enter(0, self.start_ns)

    def on_step(self, n: int, t_ns: int) -> None:
        """The n-th ``polyprof.step()`` call, at ``t_ns``: step n begins."""
        with self._lock:
            if n <= self.step:
                return
            self._enter(n, t_ns)

    def _enter(self, n: int, t_ns: int) -> None:
        self.step = n
        state = self.plan.state(n)
        if self.windows and self.windows[-1][1] < 0 and state != ACTIVE:
            self.windows[-1][1] = t_ns
        if state == ACTIVE:
            self.recorded.append(n)
            if not self.windows or self.windows[-1][1] >= 0:
                self.windows.append([t_ns, -1])
        want = state in (WARMUP, ACTIVE)
        if want != self.recording:
            self.recording = want
            for p in self.plugins:
                self._call(p, "resume" if want else "pause")

    def end(self, stop_ns: int) -> list[tuple[int, int]]:
        """At the session's stop: the active stretches, the open one closed at ``stop_ns``."""
        with self._lock:
            if self.windows and self.windows[-1][1] < 0:
                self.windows[-1][1] = stop_ns
            return [(a, b) for a, b in self.windows]

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
    so a long run holds only the window: those that may be paused from any thread at
    the moment the window opens or closes (a timer), those whose profiler state belongs
    to the program's thread (``session_thread_only``: torch) at the next step boundary
    on that thread (``polyprof.step()`` or a detected optimizer step) or at the end."""

    def __init__(self, delay_s: float, duration_s: float | None, start_ns: int, plugins: list[object],
                 on_error: Callable[[str, str], None]):
        self.delay_s, self.duration_s = float(delay_s), duration_s
        self.open_ns = start_ns + int(self.delay_s * 1e9)
        self.close_ns = None if duration_s is None else self.open_ns + int(duration_s * 1e9)
        self.plugins = plugins
        self.on_error = on_error
        self.recording = True
        self.step = 0
        self._lock = threading.Lock()
        self._timers: list[background.Background] = []
        self._applied: dict[int, bool] = {}  # id(plugin) -> recording as last applied

    def begin(self) -> None:
        """At the session's start, before the plugins start."""
        if self.delay_s > 0:
            self._want(False, on_thread=True)
            self._at(self.delay_s, True)
        if self.duration_s is not None:
            self._at(self.delay_s + self.duration_s, False)

    def _at(self, seconds: float, want: bool) -> None:
        """``_want(want)`` in ``seconds``, on a thread the program's profilers do not see
        (collect/background.py)."""
        def fire() -> None:
            self._want(want)  # once: None ends the thread

        self._timers.append(background.start(fire, seconds, "polyprof-window"))

    def _want(self, want: bool, on_thread: bool = False) -> None:
        with self._lock:
            self.recording = want
            for p in self.plugins:
                if on_thread or not getattr(p, "session_thread_only", False):
                    self._apply(p, want)

    def _apply(self, plugin: object, want: bool) -> None:
        if self._applied.get(id(plugin), True) == want:
            return
        self._applied[id(plugin)] = want
        call_plugin(plugin, "resume" if want else "pause", self.on_error)

    def on_step(self, n: int, t_ns: int) -> None:
        """A step boundary on the program's thread: the thread-bound plugins follow."""
        with self._lock:
            self.step = max(self.step, n)
            for p in self.plugins:
                if getattr(p, "session_thread_only", False):
                    self._apply(p, self.recording)

    def end(self, stop_ns: int) -> list[tuple[int, int]]:
        for t in self._timers:
            background.stop(t, 1.0)
        lo, hi = self.open_ns, stop_ns if self.close_ns is None else min(self.close_ns, stop_ns)
        return [(lo, hi)] if hi > lo else []

    def summary(self) -> dict[str, object]:
        return {"delay_s": self.delay_s, "duration_s": self.duration_s,
                "windows_ns": [[self.open_ns, self.close_ns if self.close_ns is not None else -1]]}

    def text(self) -> str:
        return f"delay={self.delay_s:g} s" + (f", duration={self.duration_s:g} s" if self.duration_s else "")
