"""The JAX plugin: drives ``jax.profiler`` for the session and ingests the XSpaces it
writes (host TraceMe annotations, XLA ops with ``hlo_op`` / ``hlo_module`` /
``program_id``, device planes on GPU/TPU, ``StepTraceAnnotation`` steps; the clock and
threads: plugins/jax_xspace.py).

Start: when the program's first JAX call makes JAX's backends, not at the session's start
(the program chooses its devices first: :meth:`JaxPlugin._start`).

Pause: a time window (``--delay`` / ``--duration``) or a schedule pauses it outside what
it records (:meth:`JaxPlugin.pause`, :meth:`JaxPlugin.resume`): JAX's profiler is stopped
there, so a long run holds only the window, and each stretch recorded is a recording of
its own (one XSpace each, merged at collect). A window pauses and resumes it from its
timer thread at the moment it opens and closes (``pauses_from_any_thread``), not at a
step boundary: JAX's profiler is not bound to a thread, and a JAX program seldom calls
``polyprof.step()``. Paused at the program's first JAX call, it makes a warm-up
recording there (markers only, on the program's thread: they name that thread's line in
the recordings a timer thread starts; and a device tracer's first start is paid there,
not in the window).

The program's own trace: JAX runs one at a time. When the program starts one
(``jax.profiler.trace()``, ``start_trace``), polyprof's JAX recording ends first (what it
recorded is kept) or never begins, with a warning, and the program's call runs as under
plain python (plugins/jax_handover.py). It is not started again in that session.

Options: ``python_tracer`` (default False: JAX's Python function tracer is costly and
polyprof sections already cover the host), ``host_tracer_level`` (default 2),
``keep_logdir`` (a directory to keep JAX's profiles in, for TensorBoard/XProf: the first
recording's under it, each later one's under ``recording-<k>/`` in it).
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..collect.clock import now_ns
from ..collect.importhook import ImportHook, imported
from ..collect.plugin import Availability, Plugin, SessionContext
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from .jax_handover import ProfilerGate

if TYPE_CHECKING:
    from .jax_xspace import Recording

log = logging.getLogger("polyprof")

#: the warnings of a hand-over to the program's own jax.profiler trace (JAX runs one at a time)
_STARTED_FIRST = "the program started its own jax.profiler trace before polyprof's JAX recording began"
_RUNNING = "the program's own jax.profiler trace was running when polyprof's JAX recording would begin"
_NO_JAX = "; this session records no JAX events (JAX runs one trace at a time)"
_ENDED = ("the program started its own jax.profiler trace: polyprof's JAX recording ended there, what it "
          "recorded is kept (JAX runs one trace at a time; later JAX events are in the program's trace only)")


class JaxPlugin(Plugin):
    name = "jax"
    option_names = frozenset(("keep_logdir", "python_tracer", "host_tracer_level"))
    device_kinds = ("CPU", "GPU", "TPU")
    #: off unless asked for (`--plugins jax`): JAX's profiler records every XLA thread pool
    default = False
    #: start and stop on the program's thread (as JAX's own start in the program's first JAX
    #: call is): the clock markers made there tell which of JAX's thread lines is that
    #: thread (plugins/jax_xspace.py)
    session_thread_only = True
    #: but paused and resumed from any thread: a time window's timer does it at the moment the
    #: window opens and closes, not at the next step boundary (collect/schedule.py ``by_clock``)
    pauses_from_any_thread = True
    #: when its recording begins, for a time window that closed before it (collect/schedule.py)
    begins_at = "the program's first JAX call (JAX's profiler starts when JAX makes its backends)"
    #: when polyprof's JAX recording could begin, the program's first JAX call (session clock;
    #: None: not yet, or never); paused then, it begins at the resume
    began_ns: int | None = None

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lock = threading.Lock()
        self._paused = False  # a window's delay, a schedule's wait steps: pause() may come before start()

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """What `polyprof plugin check jax` runs while the plugin records: a jitted function."""
        import time

        import jax
        import jax.numpy as jnp

        f = jax.jit(lambda a: jnp.tanh(a @ a))
        x = jnp.ones((64, 64))
        end = time.perf_counter() + seconds
        while True:
            x = f(x).block_until_ready()
            if time.perf_counter() >= end:
                break

    @classmethod
    def availability(cls) -> Availability:
        if importlib.util.find_spec("jax") is None:
            return Availability(False, "jax is not installed (pip install jax)")
        return Availability(True)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, ctx: SessionContext) -> None:
        """Start ``jax.profiler`` once JAX has made its backends, not before: starting it
        makes them (``start_trace`` calls ``get_backend``), and a program chooses them
        first (``XLA_FLAGS`` set before ``import jax``, ``jax.config.update(
        "jax_num_cpu_devices", 4)`` after it): started at the session's start, the
        profiler would choose for it (one CPU device instead of four). So: now if the
        backends exist, else when the program's own first JAX call makes them (the
        import of jax, then JAX's ``xla_bridge.backends`` wrapped until then). A program
        that never uses JAX pays nothing."""
        self._ready = False  # JAX's backends exist: polyprof's recordings may run
        self._hook: ImportHook | None = None
        self._wrapped: tuple[Any, Any, Any] | None = None  # (xla_bridge, its backends, the wrapper)
        self._recordings: list[Recording] = []  # the warm-up's and each stretch recorded
        self._gate: ProfilerGate | None = None  # in front of JAX's start_trace / stop_trace
        self._session: object | None = None  # polyprof's running JAX trace (JAX's ProfilerSession)
        self._live = False  # one of polyprof's recordings runs (also where JAX has no gate)
        self._yielded = ""  # why the program's own trace ended polyprof's, or kept it from beginning
        if imported("jax"):
            self._when_backends_exist()
        else:
            self._hook = ImportHook("jax", self._when_backends_exist).install()

    def _when_backends_exist(self) -> None:
        with self._lock:
            if self._state == "started" and self._gate is None:
                try:
                    self._gate = ProfilerGate(self._program_starts, self._owns_current).install()
                except (ImportError, AttributeError) as e:  # a JAX without them: no hand-over
                    log.debug("no hand-over to the program's jax.profiler: %s", e)
        try:
            from jax._src import xla_bridge as xb  # JAX's own module: no public hook for this

            made = xb.backends_are_initialized()
            original = xb.backends
        except (ImportError, AttributeError):  # a JAX without them: start now, as JAX's own docs do
            self._begin()
            return
        if made:
            self._begin()
            return

        def backends() -> Any:
            out = original()
            if not self._ready:
                try:
                    self._begin()
                except Exception as e:  # never raised into the program's JAX call
                    if self.ctx is not None:
                        self.ctx.warn(self.name, f"jax.profiler could not start: {e}")
            return out

        xb.backends = backends
        self._wrapped = (xb, original, backends)

    def _begin(self) -> None:
        """JAX's backends exist (the program's thread): the first recording starts, or,
        paused, the warm-up runs (:meth:`_warm_up`)."""
        with self._lock:
            if self._ready or self._state != "started" or self._yielded:
                return
            if self._program_traces():
                return
            self._ready = True  # first: start_trace calls backends() again
            self._unwrap()
            keep = self.options.get("keep_logdir")
            self._logdir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="polyprof-jax-"))
            self._owns_dir = not keep
            if self._owns_dir:  # also removed if this plugin is never collected
                weakref.finalize(self, shutil.rmtree, self._logdir, True)
            try:
                if self._paused:
                    self._warm_up()
                else:
                    self._record()
            except BaseException:
                self._ready = False
                if self._owns_dir:
                    shutil.rmtree(self._logdir, ignore_errors=True)
                raise
            self.began_ns = now_ns()

    def _options(self) -> Any:
        import jax.profiler as jp  # JAX only once the program uses it (discovery imports this module)

        opts = jp.ProfileOptions()
        opts.python_tracer_level = 1 if self.options.get("python_tracer", False) else 0
        opts.host_tracer_level = int(self.options.get("host_tracer_level", 2))
        return opts

    def _record(self) -> None:
        """A recording of polyprof's begins (self._lock held), on the calling thread: the
        program's at its first JAX call or at a schedule's step, a window's timer's there."""
        import jax.profiler as jp  # JAX only once the program uses it (discovery imports this module)

        from .jax_xspace import Recording  # (so is the XSpace ingest)

        k = sum(not r.warm for r in self._recordings)
        rec = Recording(self._logdir if k == 0 else self._logdir / f"recording-{k}", began_ns=now_ns())
        (self._gate.start_trace if self._gate else jp.start_trace)(str(rec.logdir), profiler_options=self._options())
        self._session = self._gate.current() if self._gate else None
        self._live = True
        self._recordings.append(rec)
        rec.mark(jp, "start")

    def _end_recording(self) -> None:
        """The running recording of polyprof's ends (self._lock held): JAX writes its XSpace."""
        import jax.profiler as jp  # JAX only once the program uses it (discovery imports this module)

        rec = self._recordings[-1]
        self._session, self._live = None, False
        try:
            rec.mark(jp, "stop")
        finally:
            rec.ended_ns = now_ns()  # JAX's stop halts its tracers within ms, then writes the XSpace (seconds)
            (self._gate.stop_trace if self._gate else jp.stop_trace)()

    def _warm_up(self) -> None:
        """Paused at the program's first JAX call (self._lock held): JAX's profiler started
        and stopped once there, on the program's thread, with clock markers only. Its
        XSpace names the program's thread line in the recordings that a window's timer
        thread starts (their markers are on that thread); and a device tracer's first start
        (CUPTI's, on a GPU) is paid there, not when the window opens. On the CPU the first
        start took 0.1 ms and the stop 5-10 ms (writing the XSpace)."""
        import jax.profiler as jp  # JAX only once the program uses it (discovery imports this module)

        from .jax_xspace import Recording  # (so is the XSpace ingest)

        rec = Recording(self._logdir / "warm-up", warm=True)
        try:
            (self._gate.start_trace if self._gate else jp.start_trace)(str(rec.logdir),
                                                                        profiler_options=self._options())
        except Exception as e:  # the resume starts it then (and says what fails)
            log.debug("plugin jax: the warm-up did not start: %s: %s", type(e).__name__, e)
            return
        try:
            rec.mark(jp, "start")
        finally:
            (self._gate.stop_trace if self._gate else jp.stop_trace)()
        self._recordings.append(rec)

    # ------------------------------------------------------------------ pause and resume
    def pause(self) -> None:
        """Stretches not to record (a window's delay and end, a schedule's wait steps): the
        running recording ends, kept; also before start() (nothing then runs)."""
        with self._lock:
            self._paused = True
            if self._state == "started" and self._live and self._owns_current_or_ungated():
                self._end_recording()

    def resume(self) -> None:
        """Recording again: a new recording (none before the program's first JAX call, none
        once the program's own trace took JAX's profiler)."""
        with self._lock:
            self._paused = False
            if self._state != "started" or not self._ready or self._yielded or self._live:
                return
            if self._gate is not None and self._gate.current() is not None:  # one the gate did not see
                self._give_way(_RUNNING + "; this session records no more JAX events (JAX runs one trace at a time)")
                return
            self._record()

    def _owns_current_or_ungated(self) -> bool:
        return self._gate is None or self._owns_current()

    @property
    def idle(self) -> bool:
        """Nothing for polyprof to record: the program's own JAX trace held JAX's profiler
        before polyprof's began (its own warning says so; collect/schedule.py)."""
        return self.began_ns is None and bool(getattr(self, "_yielded", ""))

    # ------------------------------------------------------------------ hand-over
    def _program_traces(self) -> bool:
        """Whether the program's own JAX trace runs or is starting on this thread (inside
        JAX's start_trace, which made the backends): then polyprof's does not begin."""
        if self._gate is None:
            return False
        if self._gate.starting_here():  # an early-bound JAX start_trace made the backends
            self._give_way(_STARTED_FIRST + _NO_JAX)
        elif self._gate.current() is not None:
            self._give_way(_RUNNING + _NO_JAX)
        else:
            return False
        return True

    def _give_way(self, why: str) -> None:
        """Never begin, or record no more (self._lock held): the program's own trace has
        JAX's profiler."""
        self._yielded = why
        self._unwrap()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._warn(why)

    def _program_starts(self) -> None:
        """The program calls JAX's start_trace (through the gate, before JAX's own): end
        polyprof's trace, its recording kept, or give up beginning one (or resuming one:
        paused). Never raises."""
        try:
            with self._lock:
                if self._state != "started" or self._yielded:
                    return
                if self._gate is not None and self._live and self._owns_current():
                    self._yielded = _ENDED
                    self._end_recording()  # JAX's own stop: the recording goes to polyprof's logdir
                    self._warn(self._yielded)
                elif any(not r.warm for r in self._recordings):  # paused: resumes no more
                    self._yielded = _ENDED
                    self._warn(self._yielded)
                else:  # before JAX's start_trace makes the backends, or paused before any recording
                    self._give_way(_STARTED_FIRST + _NO_JAX)
        except Exception as e:  # the program's call goes on as without polyprof
            self._warn(f"ending polyprof's jax.profiler trace for the program's failed: {e!r}")

    def _owns_current(self) -> bool:
        """Whether JAX's running trace is polyprof's (by identity, not by who asks)."""
        return self._session is not None and self._gate is not None and self._gate.current() is self._session

    def _warn(self, message: str) -> None:
        if self.ctx is not None:
            self.ctx.warn(self.name, message)
        else:
            log.warning("plugin jax: %s", message)

    def _unwrap(self) -> None:
        """JAX's ``backends`` back as it was (unless something wrapped it after us)."""
        if self._wrapped is not None:
            xb, original, ours = self._wrapped
            if xb.backends is ours:
                xb.backends = original
            self._wrapped = None

    def _stop(self) -> None:
        """Stop polyprof's running JAX trace, only if the running one is still polyprof's: a
        trace the program started is the program's to stop (polyprof's has ended before it)."""
        with self._lock:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            self._unwrap()
            gate = self._gate
            try:
                if self._live and self._owns_current_or_ungated():
                    self._end_recording()
                elif self._live:  # ended by a stop_trace the gate did not see: its export is in our logdir
                    self._recordings[-1].ended_ns = now_ns()
                    self._warn("polyprof's jax.profiler trace was ended by the program before the session's end")
            finally:
                self._gate, self._session, self._live = None, None, False
                if gate is not None:
                    gate.remove()

    # ------------------------------------------------------------------ collect
    def _collect(self) -> Trace:
        if not any(not r.warm for r in self._recordings):  # no JAX backend, or paused throughout
            from ..trace.builder import TraceBuilder  # a part with no events only

            if self._ready:  # the warm-up's files (and the directory, polyprof's own)
                shutil.rmtree(self._logdir if self._owns_dir else self._logdir / "warm-up", ignore_errors=True)
            b = TraceBuilder()
            b.metadata[mkeys.JAX] = {"jax_used": self._ready or bool(self._yielded)}
            if self._yielded:
                b.metadata[mkeys.JAX]["program_trace"] = self._yielded
            return b.build()
        assert self.ctx is not None
        try:
            from .jax_xspace import ingest

            return ingest(self._recordings, self.ctx, self._warn, kept=not self._owns_dir, yielded=self._yielded)
        finally:
            if self._owns_dir:
                shutil.rmtree(self._logdir, ignore_errors=True)
            else:
                shutil.rmtree(self._logdir / "warm-up", ignore_errors=True)
