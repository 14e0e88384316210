"""The JAX plugin's hand-over to the program's own ``jax.profiler`` trace (plugins/jax.py).

JAX runs one trace at a time: ``jax._src.profiler._profile_state.profile_session`` holds
it, and ``start_trace`` raises "Profile has already been started" while it is set. So
while a session records JAX, :class:`ProfilerGate` stands in front of JAX's
``start_trace`` (which ``jax.profiler.trace()`` calls too), ``stop_trace`` and
``stop_and_get_fdo_profile``, in ``jax.profiler`` and in ``jax._src.profiler``:

- the program's ``start_trace`` first lets the plugin end its own trace (or give up
  starting one), then runs JAX's own, with the same arguments: it does what it does
  under plain python, and the program's profile is all the program's;
- the program's ``stop_trace`` while only polyprof's trace runs raises what JAX raises
  when no profile was started, and leaves polyprof's trace running.

The gate's part of each call runs unseen by the thread's profile function (JAX's Python
tracer starting in the program's trace sees JAX's frame, not polyprof's:
lowlevel/unseen.py). The plugin tells its trace from the program's by the identity of
``profile_session``; :meth:`ProfilerGate.starting_here` tells whether this thread is
inside JAX's ``start_trace`` (which makes JAX's backends while holding JAX's lock: the
plugin, started by that, must not start a trace then, or the thread waits on itself).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

from ..lowlevel.unseen import quiet

if TYPE_CHECKING:
    from types import FrameType

_STARTS = ("start_trace",)
_STOPS = ("stop_trace", "stop_and_get_fdo_profile")


class ProfilerGate:
    """``before_start()`` runs before each of the program's ``start_trace`` calls;
    ``owns_current()`` says whether the running JAX trace is polyprof's (then the
    program's stop calls raise as JAX does without a profile). Raises ImportError or
    AttributeError on a JAX without ``jax._src.profiler._profile_state``."""

    def __init__(self, before_start: Callable[[], None], owns_current: Callable[[], bool]) -> None:
        from jax._src import profiler as src  # JAX's own module: its state has no public API

        self._src = src
        self._state = src._profile_state
        #: JAX's own functions, for polyprof's trace (never the gate's)
        self.start_trace: Callable[..., Any] = src.start_trace
        self.stop_trace: Callable[..., Any] = src.stop_trace
        self._start_code = getattr(src.start_trace, "__code__", None)
        self._before_start = before_start
        self._owns_current = owns_current
        self._installed: list[tuple[Any, str, Any, Any]] = []  # (module, name, JAX's function, the gate's)

    def install(self) -> "ProfilerGate":
        import jax.profiler as public

        for name in _STARTS + _STOPS:
            original = getattr(self._src, name, None)
            if original is None:
                continue
            ours = quiet(self._starting if name in _STARTS else self._stopping, original)
            for module in (self._src, public):
                if getattr(module, name, None) is original:
                    setattr(module, name, ours)
                    self._installed.append((module, name, original, ours))
        return self

    def remove(self) -> None:
        """JAX's functions back (those nothing else replaced since)."""
        for module, name, original, ours in self._installed:
            if getattr(module, name, None) is ours:
                setattr(module, name, original)
        self._installed = []

    def current(self) -> object | None:
        """The running JAX trace (a ``ProfilerSession``), whoever started it, or None."""
        return getattr(self._state, "profile_session", None)

    def starting_here(self) -> bool:
        """Whether this thread is inside JAX's own ``start_trace`` (holding its lock)."""
        if self._start_code is None:
            return False
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code is self._start_code:
                return True
            frame = frame.f_back
        return False

    def _starting(self, *args: Any, **kwargs: Any) -> None:
        self._before_start()

    def _stopping(self, *args: Any, **kwargs: Any) -> None:
        if self._owns_current():
            raise RuntimeError("No profile started")  # as JAX says: the program started none
