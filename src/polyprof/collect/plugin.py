"""The plugin contract (DESIGN.md §4).

A plugin names itself and the device kinds it covers, says whether it can run here,
and goes through exactly one start(), one stop(), then collect(). collect() turns
what was gathered into a Trace and never touches the hardware. Subclass
:class:`Plugin` and implement ``_start``/``_stop``/``_collect``; the base class
enforces the lifecycle so a second start() is an error, not corrupted state.
"""

from __future__ import annotations

import abc
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from ..errors import PluginStateError
from ..trace.core import Trace
from .clock import now_ns

log = logging.getLogger("polyprof")


class Availability(NamedTuple):
    """Whether a plugin can run here, and why not. (Immutable, compared by value; a
    named tuple rather than a frozen dataclass, which is slower to define in every
    `polyprof run`.)"""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class SessionContext:
    """What the session hands each plugin at start()."""

    start_ns: int
    wall_anchor: dict[str, int]
    options: dict[str, dict[str, object]] = field(default_factory=dict)  # per plugin, by name
    warnings: list[str] = field(default_factory=list)
    #: where the host plugin appends its crash journal (None: the session writes no file)
    journal_path: Path | None = None
    #: facts about the session (pid, host, argv) for files written before it ends
    session_info: dict[str, object] = field(default_factory=dict)
    #: whether files (the journal) may be written through a symlink at their path
    follow_symlinks: bool = False
    #: a schedule's active stretches as known so far, from the n-th on (schedule.Driver.stretches):
    #: the crash journal writes them as steps pass (None: no schedule)
    stretches: Callable[[int], list[tuple[int, int, int, int]]] | None = None

    def header(self) -> dict[str, object]:
        return {"start_ns": self.start_ns, "wall_anchor": self.wall_anchor, **self.session_info}

    @staticmethod
    def now_ns() -> int:
        """The session's reference clock (CLOCK_MONOTONIC ns)."""
        return now_ns()

    def warn(self, plugin: str, message: str) -> None:
        """The status channel: a problem worth telling the user, not worth failing for."""
        self.warnings.append(f"{plugin}: {message}")
        log.warning("plugin %s: %s", plugin, message)


class Plugin(abc.ABC):
    name: ClassVar[str] = "plugin"
    device_kinds: ClassVar[tuple[str, ...]] = ()
    #: enabled in sessions that do not name their plugins, when available
    default: ClassVar[bool] = True
    #: start()/stop() must run on the thread that opened the session (the profiler
    #: keeps thread-local state, e.g. torch): no time limit then, a hang is reported after
    session_thread_only: ClassVar[bool] = False
    #: the options this plugin reads (``options={NAME: {...}}``, ``--plugin-options``): a
    #: session warns of any other one given it, with the nearest name (a misspelt
    #: ``record_shape`` was ignored without a word); None: not declared, none checked.
    #: ``memory`` (the session's ``memory=True``) is given every plugin
    option_names: ClassVar[frozenset[str] | None] = None

    def __init__(self, **options: Any) -> None:  # each plugin reads its own options' values
        self.options = options
        self._state = "new"
        self.ctx: SessionContext | None = None

    @property
    def time_limited(self) -> bool:
        """The session runs start/stop/collect in a helper thread under a time limit;
        False only where the call does CPU work on data in memory (the host plugin's
        class attribute). Asked before each call, so a property may answer per call
        (the torch plugin's collect of a recording read from torch's memory)."""
        return True

    @classmethod
    def availability(cls) -> Availability:
        """Whether this plugin can run on this machine, and if not, why."""
        return Availability(True)

    @classmethod
    def session_availability(cls) -> Availability:
        """What a session that does not name its plugins checks before starting this
        one (by default, :meth:`availability`). A plugin that starts only once the
        program imports the module it profiles (opencl) answers cheaply here, so a
        program that never imports it pays nothing, and checks fully at that import."""
        return cls.availability()

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """What ``polyprof plugin check`` runs for ``seconds`` while this plugin records.
        This default: a section, a mark and NumPy work on the calling thread (NumPy
        releases the GIL, so native samplers see it). A plugin whose device needs its
        own work (kernels on a queue, torch ops, a jitted function) overrides it."""
        import numpy as np

        from .recorder import mark, section  # the default conformance workload only

        a = np.random.default_rng(0).random((128, 128))
        end = time.perf_counter() + seconds
        with section("polyprof-kit"):
            mark("polyprof-kit mark")
            while time.perf_counter() < end:
                a = a @ a
                a /= np.abs(a).max() or 1.0

    def start(self, ctx: SessionContext) -> None:
        if self._state != "new":
            raise PluginStateError(f"{self.name}: start() called while {self._state}; "
                                   "a plugin starts once per session")
        self.ctx = ctx
        self._state = "started"
        self._start(ctx)

    def stop(self) -> None:
        if self._state != "started":
            raise PluginStateError(f"{self.name}: stop() called while {self._state}")
        self._state = "stopped"
        self._stop()

    def collect(self) -> Trace:
        if self._state != "stopped":
            raise PluginStateError(f"{self.name}: collect() called while {self._state}; "
                                   "collect comes after stop")
        self._state = "collected"
        return self._collect()

    @abc.abstractmethod
    def _start(self, ctx: SessionContext) -> None: ...

    @abc.abstractmethod
    def _stop(self) -> None: ...

    @abc.abstractmethod
    def _collect(self) -> Trace: ...


#: how far outside the session a plugin's times may lie before they are dropped: far more
#: than any real clock error or work queued before the start, far less than the distance
#: to a wrong clock (wall-clock time, microseconds, a NaN cast to int64)
FAR_NS = 3600 * 10**9

#: the share of a part's events (or of its counter samples) far outside the session at
#: which the whole part is refused: a wrong clock (wall-clock time, microseconds) moves
#: every time on it, so at least half of them; fewer are stray stamps (an end the
#: profiler never wrote: torch.profiler started while the program's thread was inside an
#: op), dropped one by one with a warning while the rest is kept
REFUSE_SHARE = 0.5


class Near(NamedTuple):
    """What :func:`keep_near` makes of a part: ``trace`` is what is kept (None: the part
    is refused) and ``message`` why it is refused or what was dropped (None: nothing)."""

    trace: Trace | None
    message: str | None = None


def keep_near(trace: Trace, start_ns: int, stop_ns: int) -> Near:
    """A plugin's part without its events and counter samples that lie more than
    :data:`FAR_NS` outside the session [start_ns, stop_ns] (their times would make the
    trace's span decades long, or unreadable: the .polyprof reader rejects times beyond
    +-2**62 ns). An event is dropped whole, not clipped to the session, even where only
    its end is far: its end was never recorded, and a clipped one would claim to run to
    the session's end, counting that time to its op and holding every later event of its
    thread as its children. The part is refused when :data:`REFUSE_SHARE` or more of its
    events (or of its counter samples) lie far outside: a clock mix-up, not stray stamps."""
    lo_ok, hi_ok = start_ns - FAR_NS, stop_ns + FAR_NS
    first, ts = trace.start_ns, trace.counters["ts_ns"]
    last = first + trace.dur_ns
    bad_events = (first < lo_ok) | (last > hi_ok) | (last < first)  # last < first: an end that wrapped round
    bad_samples = (ts < lo_ok) | (ts > hi_ok)
    said: list[str] = []
    for what, bad, a, b in (("events", bad_events, first, last), ("counter samples", bad_samples, ts, ts)):
        n_bad = int(bad.sum())
        if not n_bad:
            continue
        lo, hi = int(a[bad].min()), int(b[bad].max())
        nan = " (a NaN or an overflow cast to int64)" if lo == np.iinfo(np.int64).min else ""
        far = (f"{n_bad} of {len(bad)} {what} lie more than {FAR_NS // 10**9 // 3600} h outside the session: "
               f"from {(lo - start_ns) / 1e9:+.6g} s to {(hi - start_ns) / 1e9:+.6g} s after its start, which "
               f"lasted {(stop_ns - start_ns) / 1e9:.6g} s{nan}")
        if n_bad >= REFUSE_SHARE * len(bad):
            return Near(None, f"{far}: half or more, so a wrong clock; times must be integer ns on the session clock (time.perf_counter_ns(), "
                              "CLOCK_MONOTONIC), or synced onto it")
        said.append(f"{far}: dropped, the other {len(bad) - n_bad:,} kept")
    if not said:
        return Near(trace)
    from ..trace.subset import take  # only for a part with stray times

    kept = take(trace, ~bad_events, counter_ranges=[(lo_ok, hi_ok)] if bad_samples.any() else None)
    return Near(kept, f"{'; '.join(said)} (under {REFUSE_SHARE:.0%} of them: stray times, such as an end the "
                      "profiler never wrote, not a wrong clock)")
