"""The JAX plugin: drives ``jax.profiler`` for the session and ingests the XSpace it
writes (host TraceMe annotations, XLA ops with ``hlo_op`` / ``hlo_module`` /
``program_id``, device planes on GPU/TPU, ``StepTraceAnnotation`` steps).

Clock: JAX (TSL) stores times in the XSpace as ns since the profile start, whose
wall-clock time is recorded in the file; polyprof's clock is CLOCK_MONOTONIC. At start
and stop the plugin brackets a TraceMe annotation between two ``perf_counter_ns()``
reads: each bracket bounds the offset between the two clocks, and the bounds give the
offset and its uncertainty (``metadata["clock_sync"]["jax"]``). Should the markers be
missing, the session's wall anchor and the profile start time are used instead.

Start: when the program's first JAX call makes JAX's backends, not at the session's start
(the program chooses its devices first: :meth:`JaxPlugin._start`).

The program's own trace: JAX runs one at a time. When the program starts one
(``jax.profiler.trace()``, ``start_trace``), polyprof's JAX recording ends first (what it
recorded is kept) or never begins, with a warning, and the program's call runs as under
plain python (plugins/jax_handover.py). It is not started again in that session.

Options: ``python_tracer`` (default False: JAX's Python function tracer is costly and
polyprof sections already cover the host), ``host_tracer_level`` (default 2),
``keep_logdir`` (a directory to keep JAX's profile in, for TensorBoard/XProf).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import shutil
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from ..collect.clock import now_ns
from ..collect.importhook import ImportHook
from ..collect.plugin import Availability, Plugin, SessionContext
from ..errors import PluginError
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..trace.stats import StatColumn, StatTable
from ..trace.sorting import unique
from .jax_handover import ProfilerGate

log = logging.getLogger("polyprof")

_SYNC = "polyprof.clock_sync"
#: the warnings of a hand-over to the program's own jax.profiler trace (JAX runs one at a time)
_STARTED_FIRST = "the program started its own jax.profiler trace before polyprof's JAX recording began"
_RUNNING = "the program's own jax.profiler trace was running when polyprof's JAX recording would begin"
_NO_JAX = "; this session records no JAX events (JAX runs one trace at a time)"
_ENDED = ("the program started its own jax.profiler trace: polyprof's JAX recording ended there, what it "
          "recorded is kept (JAX runs one trace at a time; later JAX events are in the program's trace only)")


class JaxPlugin(Plugin):
    name = "jax"
    device_kinds = ("CPU", "GPU", "TPU")
    #: off unless asked for (`--plugins jax`): JAX's profiler records every XLA thread pool
    default = False
    #: start and stop on the program's thread (as JAX's own start in the program's first JAX
    #: call is): the clock markers made there tell which of JAX's thread lines is that
    #: thread (``_name_threads``)
    session_thread_only = True
    #: when its recording begins, for a time window that closed before it (collect/schedule.py)
    begins_at = "the program's first JAX call (JAX's profiler starts when JAX makes its backends)"
    #: when polyprof's JAX recording began (session clock; None: not yet, or never)
    began_ns: int | None = None

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
        self._lock = threading.Lock()
        self._begun = False
        self._hook: ImportHook | None = None
        self._wrapped: tuple[Any, Any, Any] | None = None  # (xla_bridge, its backends, the wrapper)
        self._brackets: list[tuple[str, int, int]] = []
        self._bracket_threads: dict[str, tuple[int, str]] = {}  # "start"/"stop": (OS thread id, name)
        self._gate: ProfilerGate | None = None  # in front of JAX's start_trace / stop_trace
        self._session: object | None = None  # polyprof's running JAX trace (JAX's ProfilerSession)
        self._yielded = ""  # why the program's own trace ended polyprof's, or kept it from beginning
        if "jax" in sys.modules:
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
            if not self._begun:
                try:
                    self._begin()
                except Exception as e:  # never raised into the program's JAX call
                    if self.ctx is not None:
                        self.ctx.warn(self.name, f"jax.profiler could not start: {e}")
            return out

        xb.backends = backends
        self._wrapped = (xb, original, backends)

    def _begin(self) -> None:
        import jax.profiler as jp

        with self._lock:
            if self._begun or self._state != "started" or self._yielded:
                return
            if self._program_traces():
                return
            self._begun = True  # first: start_trace calls backends() again
            self._unwrap()
            keep = self.options.get("keep_logdir")
            self._logdir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="polyprof-jax-"))
            self._owns_dir = not keep
            if self._owns_dir:  # also removed if this plugin is never collected
                weakref.finalize(self, shutil.rmtree, self._logdir, True)
            opts = jp.ProfileOptions()
            opts.python_tracer_level = 1 if self.options.get("python_tracer", False) else 0
            opts.host_tracer_level = int(self.options.get("host_tracer_level", 2))
            try:
                (self._gate.start_trace if self._gate else jp.start_trace)(str(self._logdir), profiler_options=opts)
            except BaseException:
                self._begun = False
                if self._owns_dir:
                    shutil.rmtree(self._logdir, ignore_errors=True)
                raise
            self.began_ns = now_ns()
            self._session = self._gate.current() if self._gate else None
            self._brackets = self._bracket(jp, "start")
            self._bracket_threads["start"] = _this_thread()

    @property
    def idle(self) -> bool:
        """Nothing for polyprof to record: the program's own JAX trace held JAX's profiler
        before polyprof's began (its own warning says so; collect/schedule.py)."""
        return self.began_ns is None and bool(getattr(self, "_yielded", ""))

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
        """Never begin (self._lock held): the program's own trace has JAX's profiler."""
        self._yielded = why
        self._unwrap()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._warn(why)

    def _program_starts(self) -> None:
        """The program calls JAX's start_trace (through the gate, before JAX's own): end
        polyprof's trace, its recording kept, or give up beginning one. Never raises."""
        import jax.profiler as jp

        try:
            with self._lock:
                gate = self._gate
                if gate is not None and self._owns_current():
                    self._session, self._yielded = None, _ENDED
                    try:
                        self._brackets += self._bracket(jp, "stop")
                        self._bracket_threads["stop"] = _this_thread()
                    finally:
                        gate.stop_trace()  # JAX's own: the recording goes to polyprof's logdir
                    self._warn(self._yielded)
                elif not self._begun and not self._yielded and self._state == "started":
                    self._give_way(_STARTED_FIRST + _NO_JAX)  # before JAX's start_trace makes the backends
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

    @staticmethod
    def _bracket(jp: Any, tag: str) -> list[tuple[str, int, int]]:
        """TraceMes named ``polyprof.clock_sync.<tag>.<i>``, each between two monotonic reads."""
        out = []
        for i in range(3):
            name = f"{_SYNC}.{tag}.{i}"
            a = now_ns()
            with jp.TraceAnnotation(name):
                pass
            b = now_ns()
            out.append((name, a, b))
        return out

    def _stop(self) -> None:
        """Stop polyprof's JAX trace, only if the running one is still polyprof's: a trace
        the program started is the program's to stop (polyprof's has ended before it)."""
        import jax.profiler as jp

        with self._lock:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            self._unwrap()
            ours = self._gate is None or self._owns_current()
            gate, self._gate, self._session = self._gate, None, None
            if gate is not None:
                gate.remove()
            if not self._begun or self._yielded:
                return
            if not ours:  # ended by a stop_trace the gate did not see: its export is in our logdir
                self._warn("polyprof's jax.profiler trace was ended by the program before the session's end")
                return
            try:
                self._brackets += self._bracket(jp, "stop")
                self._bracket_threads["stop"] = _this_thread()
            finally:
                (gate.stop_trace if gate else jp.stop_trace)()

    # ------------------------------------------------------------------ collect
    def _collect(self) -> Trace:
        from ..formats import xspace

        if not self._begun:  # the program never made a JAX backend
            from ..trace.builder import TraceBuilder

            b = TraceBuilder()
            b.metadata[mkeys.JAX] = {"jax_used": bool(self._yielded)}
            if self._yielded:
                b.metadata[mkeys.JAX]["program_trace"] = self._yielded
            return b.build()
        try:
            files = sorted(self._logdir.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
            if not files:
                raise PluginError(f"jax.profiler wrote no .xplane.pb under {self._logdir}")
            trace = xspace.load(files[-1])
        finally:
            if self._owns_dir:
                shutil.rmtree(self._logdir, ignore_errors=True)
        sync = self._align(trace)
        return self._finish(trace, sync, None if self._owns_dir else str(files[-1]))

    def _align(self, trace: Trace) -> dict[str, Any]:
        """Move the XSpace's times onto the session clock; returns how it was done."""
        from ..trace import clock  # here: every session's discovery imports this module

        assert self.ctx is not None
        names = trace.names() if trace.n_events else np.zeros(0, object)
        start, end = trace.start_ns, trace.end_ns
        # a marker inside the bracket [a, b]: its start maps to >= a, its end to <= b
        lo_o: list[int] = []
        lo_h: list[int] = []
        hi_o: list[int] = []
        hi_h: list[int] = []
        for name, a, b in self._brackets:
            rows = np.flatnonzero(names == name)
            if len(rows) == 1:
                r = rows[0]
                lo_o.append(int(start[r]))
                lo_h.append(a)
                hi_o.append(int(end[r]))
                hi_h.append(b)
        xs_meta = trace.metadata.get(mkeys.XSPACE, {})
        wall0 = xs_meta.get("profile_start_time_ns")
        anchor = self.ctx.wall_anchor
        wall_offset = None
        if wall0 is not None:  # xspace t=0 is wall time wall0; mono = wall - (wall_ns - mono_ns)
            wall_offset = int(wall0) - (anchor["wall_ns"] - anchor["mono_ns"])
        info: dict[str, Any] = {"xspace_clock": trace.metadata.get(mkeys.CLOCK_NAME, "")}
        fit = None
        if lo_o:  # XProf's times are wall-clock based: the host's rate, an offset unless stepped
            fit = clock.fit_bounds(lo_o, lo_h, hi_o, hi_h, max_drift_ppm=0.0, method="traceme_bracket", warn=False)
            if not fit.consistent:
                fit = clock.fit_bounds(lo_o, lo_h, hi_o, hi_h, method="traceme_bracket_drift")
        if fit is not None and fit.consistent:
            info.update(fit.to_dict(), uncertainty_ns=int(math.ceil(fit.bound_ns)), brackets=len(lo_o))
            if wall_offset is not None:  # how far the wall-clock route would have been off
                info["wall_route_error_ns"] = wall_offset - fit.offset_ns
        elif wall_offset is not None:
            fit = clock.constant(wall_offset, int(anchor.get("uncertainty_ns", 0)) + 1_000_000, "wall_anchor")
            info.update(fit.to_dict(), uncertainty_ns=int(fit.bound_ns))
            self.ctx.warn(self.name, "clock-sync markers missing from the JAX profile; aligned by wall "
                                     "clock (about 1 ms uncertainty)")
        else:
            fit = None
            info.update(method="none", offset_ns=0, uncertainty_ns=None)
            self.ctx.warn(self.name, "the JAX profile has no start time: its times are not aligned")
        if fit is not None:
            clock.retime(trace, fit, record=False)
        return info

    def _name_threads(self, trace: Trace) -> None:
        """JAX numbers its threads by a hash of its own (7606383263603107252) and names the
        main one after the process: the line holding the clock markers made on a thread
        gets that thread's OS id and name (``MainThread (jax)``), so its JAX calls are the
        same thread as the program's sections, marks and torch ops there
        (``derive.memo.threads``)."""
        for tag, (tid, name) in self._bracket_threads.items():
            lines = unique(trace.events["track"][_named(trace, f"{_SYNC}.{tag}.")])
            if len(lines) == 1 and trace.tracks[int(lines[0])].kind == "thread":
                line = trace.tracks[int(lines[0])]
                line.tid, line.name = tid, f"{name} (jax)"

    def _finish(self, trace: Trace, sync: dict[str, Any], kept: str | None) -> Trace:
        """Drop the markers and the file-level metadata that would override the session's."""
        drop = _named(trace, _SYNC)
        self._name_threads(trace)
        trace = _without_rows(trace, drop) if drop.any() else trace
        env = next((p for p in trace.planes if p.name == "Task Environment"), None)
        xs = dict(trace.metadata.get(mkeys.XSPACE, {}))
        meta: dict[str, Any] = {mkeys.CLOCK_SYNC: {},
                                mkeys.JAX: {"xspace": {k: xs[k] for k in ("hostnames", "errors", "warnings",
                                                                       "profile_start_time_ns",
                                                                       "profile_stop_time_ns") if k in xs}}}
        if env is not None:
            meta[mkeys.JAX]["task_environment"] = {k: v for k, v in env.properties.items() if not isinstance(v, bytes)}
        if kept:
            meta[mkeys.JAX]["xplane"] = kept
        if self._yielded:
            meta[mkeys.JAX]["program_trace"] = self._yielded
        for err in xs.get("errors", []):
            assert self.ctx is not None
            self.ctx.warn(self.name, f"jax.profiler: {err}")
        fit = {**sync, "bound_ns": sync.get("bound_ns", math.inf if sync.get("uncertainty_ns") is None
                                            else float(sync["uncertainty_ns"]))}
        for plane in {p.name for p in trace.planes}:  # the XSpace's clock, mapped onto the session's
            mkeys.record_fit(meta, plane, self.name, fit)
        trace.metadata = meta
        return trace


def _named(trace: Trace, prefix: str) -> np.ndarray:
    """Per event, whether its name starts with ``prefix`` (tested once per distinct name)."""
    hit = np.fromiter((s.startswith(prefix) for s in trace.strings), bool, len(trace.strings))
    return hit[trace.events["name"]] if len(hit) else np.zeros(trace.n_events, bool)


def _this_thread() -> tuple[int, str]:
    return threading.get_native_id(), threading.current_thread().name


def _without_rows(trace: Trace, drop: np.ndarray) -> Trace:
    """``trace`` minus the events where ``drop`` is True (stats and flows follow)."""
    keep = ~drop
    new_index = np.cumsum(keep) - 1
    events = {k: v[keep] for k, v in trace.events.items()}
    stats = {}
    for key, col in trace.stats.items():
        m = keep[col.rows]
        if m.any():
            stats[key] = StatColumn(new_index[col.rows[m]], col.values[m])
    fl = trace.flows
    fm = keep[fl["src"]] & keep[fl["dst"]] if len(fl["src"]) else np.zeros(0, bool)
    flows = {"src": new_index[fl["src"][fm]], "dst": new_index[fl["dst"][fm]], "id": fl["id"][fm],
             "category": fl["category"][fm]}
    return Trace(trace.strings, trace.planes, trace.tracks, events, StatTable(stats), flows, trace.counters,
                 trace.metadata).validate()
