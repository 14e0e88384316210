"""The session: starts plugins once, stops them once, collects with a time limit,
and merges what each returns into one Trace. A plugin that fails is reported in the
trace's metadata and on stderr; it never takes the other plugins' data with it.

Never hurting the program: every plugin call catches ``BaseException`` (a plugin's
``SystemExit`` or ``KeyboardInterrupt`` does not escape into the program); start,
stop and collect of plugins that talk to devices run under time limits (the host
plugin's data is in memory already: it is never dropped by a limit); signals that
arrive while the session stops and saves are delivered after the save; a process
forked while a session runs records nothing in the child and never touches the
parent's files; a session opened while another runs nests inside it (docs/plugins.md).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from .. import logs
from ..errors import PluginError, SessionError
from ..lowlevel import fork
from ..trace.core import Trace
from ..trace.identity import hostname, identify, rank_from_env
from ..trace.merge import merge
from . import background, exits, journal, output as output_mod, profiled, signals, steps
from .children import ChildrenCPU
from .clock import REFERENCE_CLOCK, clock_domain, now_ns, wall_anchor
from .guard import Kept, Outcome, call_guarded, call_here
from .options import NAMES, SessionOptions, make
from .plugin import Near, Plugin, SessionContext, keep_near
from .slots import Slot, describe, make_slots, stop_together
from ..trace import metadata_keys as mkeys

if TYPE_CHECKING:
    from .schedule import Driver, Timed

log = logging.getLogger(logs.LOGGER)
F = TypeVar("F", bound=Callable[..., object])

_active_lock = threading.Lock()
_active: "Session | None" = None


class Session:
    """One capture. Use :func:`polyprof.profile` rather than this class directly.

    ``plugins``: names (entry points) or plugin objects; None = every available
    default plugin. The host plugin always runs (it records the sections).
    """

    def __init__(self, plugins: Sequence[str | Plugin] | None = None, *, settings: SessionOptions | None = None,
                 **options: Any):  # as given: SessionOptions checks and normalises each
        """``settings``: the session's options as one :class:`SessionOptions`; or the
        options one by one as keywords (the environment is not read: see :func:`profile`)."""
        if settings is None:
            unknown = sorted(set(options) - set(NAMES))
            if unknown:
                raise SessionError(f"unknown session option {', '.join(map(repr, unknown))}; the options are "
                                   f"{', '.join(NAMES)}")
            settings = SessionOptions(plugins=None if plugins is None else tuple(plugins), **options)
        elif plugins is not None or options:
            raise SessionError("give the session's options either as settings= or one by one, not both")
        #: every option of this session, as given (collect/options.py)
        self.settings = settings
        #: whether the program is not running while plugins are called now (``polyprof
        #: run`` sets it around the start before the script and the stop after): a call's
        #: change of directory is put back, a crash in it named (guard.Kept)
        self.owns_process = False
        #: which steps to record (collect/schedule.py): a Schedule or None (all)
        self.schedule = settings.schedule
        self._driver: Driver | Timed | None = None
        self.plugin_spec = list(settings.plugins) if settings.plugins is not None else None
        self.memory = settings.memory  # every plugin gets the option memory=True (it records memory)
        #: under torchrun / mpirun / srun, each rank's own file (collect/output.py: per_rank);
        #: absolute: the program may change directory before the trace is saved
        self.output = None if settings.output is None else \
            Path(os.path.abspath(output_mod.per_rank(settings.output)))
        self.collect_timeout = settings.collect_timeout
        self.call_timeout = settings.call_timeout
        self.record_argv = settings.record_argv
        self.follow_symlinks = settings.follow_symlinks
        #: where the trace was actually written (None: not written); see collect/output.py
        self.written: output_mod.Written | None = None
        #: the file at the output when the session started (output.stamp): the trace replaces
        #: only that, not one another run wrote meanwhile (collect/output.py)
        self._found: object = output_mod.ANY
        #: the outermost session with this output that this one nests in (itself if none): its
        #: snapshot is this one's, and each save replaces the file the last save of them wrote
        self._root: "Session" = self
        self._last_written: output_mod.Written | None = None  # (on the root)
        self._pid = os.getpid()
        self._outer: "Session | None" = None  # set when this session nests in another
        self._inert = False  # a copy of the session in a forked child: records nothing
        #: set once start() has returned or failed: a session that nests in this one from
        #: another thread waits for it (its sections would go to a recorder not on yet)
        self._ready = threading.Event()
        self._start_thread = 0
        self._stop_ns: int | None = None  # when stop() began (a nested session's end reads it)
        self._children = ChildrenCPU()  # made again at the start
        self._memory_errors = 0
        self.options = {k: dict(v) for k, v in settings.options.items()}
        if settings.max_host_events is not None:  # the host plugin keeps the sections
            self.options.setdefault("host", {}).setdefault("max_events", settings.max_host_events)
        self.trace: Trace | None = None
        self.errors: list[dict[str, str]] = []
        self._slots: list[Slot] = []
        self._ctx: SessionContext | None = None
        self._stopped = False
        self.skipped: dict[str, str] = {}  # default plugins that can't run here -> why
        #: the call that ended the program before the session's stop (os.execv, os._exit: collect/exits.py)
        self.ended_by: str | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "Session":
        if self._ctx is not None:
            raise SessionError("this session was started already; make a new one with polyprof.profile()")
        self._start_thread = threading.get_ident()
        try:
            return self._start()
        finally:
            self._ready.set()

    def _start(self) -> "Session":
        global _active
        with _active_lock:
            outer = _active
            if outer is None:
                _active = self
        if outer is not None and outer._start_thread != threading.get_ident():
            from .nested import wait_started

            wait_started(outer)
        logs.to_stderr()  # a session in a program: its warnings read "polyprof: WARNING: ..."
        if self.output is not None:
            self._root = output_mod.nest_root(outer, self.output) or self
            self._found = self._root._found if self._root is not self else \
                output_mod.FOREIGN if output_mod.foreign(self.output) else output_mod.stamp(self.output)
        journal_path: Path | None = None
        if outer is None and self.output is not None:
            try:  # the journal goes next to the output from the start
                self.output.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                log.warning("cannot create %s: %s", self.output.parent, e.strerror or e)
            journal_path = self._journal_path()
        start = now_ns()
        self._children = ChildrenCPU()
        self._memory_errors = background.memory_errors()  # the background threads' count before the run
        self._ctx = SessionContext(start_ns=start, wall_anchor=wall_anchor(), options=self.options,
                                   journal_path=journal_path,
                                   session_info=self._info(), follow_symlinks=self.follow_symlinks)
        if outer is not None:  # polyprof run around a script that profiles itself, or nesting
            from .nested import begin

            self._outer = outer
            begin(self, outer)
            if self._driver_asked():  # the outer session records; its own schedule (if any) rules
                log.warning("schedule or window ignored: this session runs inside another one, whose "
                            "recording it shares")
            exits.track(self)  # an exec or os._exit in the program saves its trace first
            return self
        try:
            self._slots = make_slots(self)
        except BaseException:
            with _active_lock:
                _active = None
            raise
        if self.schedule is not None:  # before start: a plugin paused from step 0 never starts recording
            from .schedule import Driver

            self._driver = Driver(self.schedule, start, [s.plugin for s in self._slots],
                                  lambda name, msg: self._error(name, "schedule", msg))
            self._driver.begin()
            # the crash journal's header has the plan, its records the stretches as steps pass (the host
            # plugin starts below): a killed run's .partial is analysed over its recorded stretches
            self._ctx.session_info["schedule"] = dataclasses.asdict(self.schedule)
            self._ctx.stretches = self._driver.stretches
        elif self.settings.delay or self.settings.duration is not None:  # a window in seconds
            from .schedule import Timed

            self._driver = Timed(self.settings.delay, self.settings.duration, start,
                                 [s.plugin for s in self._slots], lambda name, msg: self._error(name, "window", msg))
            self._driver.begin()
            # in the crash journal's header (the host plugin starts below): a killed run's .partial has its window
            self._ctx.session_info["window"] = {k: v for k, v in self._driver.summary().items() if k != "recorded_steps"}
        seen: set[int] = set()
        for slot in self._slots:
            if id(slot.plugin) in seen:  # the same object twice: the contract says one start
                self._error(slot.name, "start", "plugin listed twice in one session; started once")
                continue
            seen.add(id(slot.plugin))
            with signals.SavedDispositions():  # a device runtime's handlers must not replace the program's
                started = self._call(slot, "start", functools.partial(_start, slot.plugin, self._ctx))
            if started:
                slot.started = True
                slot.status = "started"
        if self._driver is not None:
            self._follow_steps(self._driver)
            arm = getattr(self._driver, "arm", None)  # a window's timers: at its instants on the session clock
            if arm is not None:
                arm()
        exits.track(self)  # an exec or os._exit in the program saves the trace first
        self._resumes()
        return self

    def _resumes(self) -> None:
        """The program's code resumes now, every plugin started: step 0 begins here at the
        earliest (collect/steps.py ``program_resumes``), not at the session's start, which
        a plugin's start-up can put seconds earlier (torch.profiler's: 3.8 s before a first
        step of 0.1 s). The trace's span and ``session.start_ns`` keep the session's start."""
        from . import recorder  # loaded by the host plugin's start already

        rec = recorder.active_recorder()
        if rec is not None and rec.active:
            steps.program_resumes(rec, now_ns())

    def _journal_path(self) -> Path | None:
        """Where this session's crash journal goes; a killed run's journal found there is
        moved aside first and said (journal.keep_earlier); None if it cannot be."""
        assert self.output is not None
        part = journal.path_for(self.output)
        try:
            kept = journal.keep_earlier(part)
        except OSError as e:
            log.warning("%s; this run writes no crash journal, so as not to replace it", e)
            return None
        if kept is not None:
            shown = output_mod.shown_path(kept)  # relative to here when under it, as the line that names the trace
            log.warning("the crash journal of an earlier run (killed?) was at %s: kept as %s (`polyprof summary %s` "
                        "reads it)", output_mod.shown_path(part), shown, shown)
        return part

    def _driver_asked(self) -> bool:
        return self.schedule is not None or bool(self.settings.delay) or self.settings.duration is not None

    def _follow_steps(self, drv: Driver | Timed) -> None:
        from . import recorder
        from .schedule import follow

        rec = recorder.active_recorder()
        if rec is None:  # the host plugin failed: no steps to follow
            self._error("session", "schedule", "no host recorder: the steps cannot be followed")
            return
        rec.step_listeners.append(follow(drv, rec.steps))
        rec.auto_listeners.append(follow(drv, rec.auto_steps))  # unmodified programs

    def _end_schedule(self, trace: Trace, end: int, parts: list[tuple[object, Trace]]) -> Trace:
        """The trace of the scheduled steps or the window only (collect/schedule.py)."""
        from .schedule import finish

        return trace if self._driver is None else finish(self._driver, trace, end, parts)

    def plugin_packages(self) -> set[str]:
        """The top-level packages of the session's plugins (whose threads it must not wait for)."""
        return {type(s.plugin).__module__.partition(".")[0] for s in self._slots}

    def stop(self) -> Trace:
        if self._stopped:
            if self.trace is None:
                raise SessionError("session stopped without a trace")
            return self.trace
        self._stopped = True
        self._stop_ns = now_ns()
        exits.untrack(self)
        if self._inert or os.getpid() != self._pid:  # a forked child's copy: not its session
            self.trace = _empty_trace({mkeys.FORKED_CHILD: True, mkeys.PLUGIN_ERRORS: [], mkeys.PLUGINS: {}})
            return self.trace
        with signals.deferred():  # SIGINT/SIGTERM now: delivered once the trace is saved
            if self._outer is not None:
                from .nested import end

                self.trace = end(self, self._outer)
            else:
                self._stop_all()
            if self.output is not None:
                self._save()
        if self.trace is None:
            raise SessionError("session stopped without a trace")
        return self.trace

    def end_early(self, call: str) -> Trace:
        """Stop and save now: the program is about to end or replace itself by ``call``
        (collect/exits.py); the trace says so (``session.ended_by``, a warning)."""
        self.ended_by = call
        return self.stop()

    def rewrite(self) -> None:
        """Save the stopped session's trace again, its metadata amended (a failed exec:
        collect/exits.py)."""
        if self.trace is not None and self.output is not None and self._outer is None:
            self._save()

    def _stop_all(self) -> None:
        global _active
        try:
            self._flush_journal()  # a plugin that crashes the process in stop() leaves the host data
            # all at once: one stop that hangs does not keep the others recording; the end is
            # when the last one that returned did (their last samples are inside)
            end = stop_together(self, self._slots)
            parts: list[tuple[object, Trace]] = []
            for slot in self._slots:
                if not slot.started:
                    continue
                part = self._collect(slot, end)
                if part is not None:
                    parts.append((slot.plugin, part))
                    slot.status = "ok"
            self.trace = self._assemble([p for _, p in parts], end)
            if self._driver is not None:
                self.trace = self._end_schedule(self.trace, end, parts)
        finally:
            with _active_lock:
                if _active is self:
                    _active = None

    def _save(self) -> None:
        assert self.trace is not None and self.output is not None
        self.written = output_mod.save(self.trace, self.output, self.follow_symlinks, self._found,
                                       self.written or self._root._last_written)
        self._root._last_written = self.written
        part = journal.path_for(self.output)
        if self.written.path is not None and self._outer is None:
            journal.discard(part)  # this process's own journals only: never another run's live one
        elif self.written.path is None and journal.where(part).is_file():
            log.error("%s", output_mod.held_in(journal.where(part))[2:])

    def _flush_journal(self) -> None:
        for slot in self._slots:
            flush = getattr(getattr(slot.plugin, "journal", None), "flush", None)  # the host plugin's
            if slot.started and flush is not None:
                try:
                    flush()
                except Exception as e:  # the journal is a safety net; the stop goes on
                    log.debug("crash journal flush before stop: %s", e)

    def _collect(self, slot: Slot, end: int) -> Trace | None:
        kept, fn = Kept(self.owns_process), slot.plugin.collect
        if slot.limited:
            out = call_guarded(fn, f"polyprof-collect-{slot.name}", self.collect_timeout)
        else:  # the host plugin: its data is in memory; no limit may drop it
            out = call_here(fn)
        self._kept(slot, kept, "collect")
        if out.timed_out:
            self._error(slot.name, "collect", f"timed out after {self.collect_timeout:g} s; its data is dropped")
            slot.status = "failed"
            return None
        if out.error is not None:
            self._error(slot.name, "collect", describe(out.error), out.tb)
            slot.status = "failed"
            return None
        result = out.value
        if not isinstance(result, Trace):
            self._error(slot.name, "collect", f"returned {type(result).__name__}, not a Trace")
            slot.status = "failed"
            return None
        try:  # stray times far outside the session are dropped (said), a wrong clock refuses the part
            result.validate()
            near = keep_near(result, self._ctx.start_ns if self._ctx is not None else end, end)
        except Exception as e:
            near = Near(None, describe(e))
        if near.trace is not None:
            if near.message is not None and self._ctx is not None:
                self._ctx.warn(slot.name, near.message)
            return near.trace
        self._error(slot.name, "collect", f"returned malformed data: {near.message}")
        slot.status = "failed"
        return None

    def _call(self, slot: Slot, phase: str, fn: Callable[[], object]) -> bool:
        """start()/stop() of one plugin: never raises, time limited unless the plugin
        must run on this thread (then a hang is reported once it returns)."""
        t0, kept = now_ns(), Kept(self.owns_process)
        if slot.limited and not slot.here:
            out: Outcome = call_guarded(fn, f"polyprof-{phase}-{slot.name}", self.call_timeout)
        else:
            out = call_here(fn)
        self._kept(slot, kept, phase)
        return self._called(slot, phase, out, t0)

    def _called(self, slot: Slot, phase: str, out: Outcome, t0: int, t1: int = 0) -> bool:
        """What one start()/stop() call gave (made from ``t0``, returned at ``t1``: now if
        0), reported; whether it succeeded."""
        if out.timed_out:
            self._error(slot.name, phase, f"did not return within {self.call_timeout:g} s; the plugin is "
                        "abandoned (its thread left running) and the program goes on")
            slot.status = "failed"
            return False
        if out.error is not None:
            self._error(slot.name, phase, describe(out.error), out.tb)
            slot.status = "failed"
            return False
        took = ((t1 or now_ns()) - t0) / 1e9
        if slot.limited and took > self.call_timeout:
            self._ctx.warn(slot.name, f"{phase}() took {took:.1f} s (limit {self.call_timeout:g} s)")  # type: ignore[union-attr]
        return True

    def _kept(self, slot: Slot, kept: Kept, phase: str) -> None:
        note = kept.end(phase)
        if note is not None and self._ctx is not None:
            self._ctx.warn(slot.name, note)

    def _error(self, plugin: str, phase: str, message: str, tb: str | None = None) -> None:
        self.errors.append({"plugin": plugin, "phase": phase, "error": message})
        log.warning("polyprof plugin %r failed in %s: %s", plugin, phase, message)
        if tb:
            log.debug("%s", tb)

    def _assemble(self, parts: list[Trace], end: int) -> Trace:
        ctx = self._ctx
        assert ctx is not None
        session: dict[str, object] = {"start_ns": ctx.start_ns, "stop_ns": end}
        warnings: list[object] = list(ctx.warnings)
        try:
            self._describe(session, warnings, parts)
        except Exception as e:  # a description that fails (the host's name, /proc): the events are still kept
            self._error("session", "metadata", describe(e))
        meta = {
            mkeys.POLYPROF_VERSION: _version(),
            mkeys.CLOCK_NAME: REFERENCE_CLOCK,
            mkeys.SESSION: session,
            mkeys.WALL_ANCHOR: ctx.wall_anchor,
            mkeys.PLUGINS: {**self.skipped, **{s.name: s.status for s in self._slots}},
            mkeys.PLUGIN_ERRORS: list(self.errors),
            mkeys.WARNINGS: warnings,
        }
        try:
            return identify(merge(parts, meta), rank=rank_from_env())
        except Exception as e:  # keep what merges; name the part that does not
            self._error("session", "merge", describe(e))
            meta[mkeys.PLUGIN_ERRORS] = list(self.errors)
            good = []
            for p in parts:
                try:
                    merge([p])
                    good.append(p)
                except Exception:
                    pass
            return identify(merge(good, meta), rank=rank_from_env())

    def _describe(self, session: dict[str, object], warnings: list[object], parts: list[Trace]) -> None:
        """The session's own metadata (:meth:`_info`, its children's CPU time, how it
        ended) into ``session``, and its notes into ``warnings``."""
        session.update(self._info())
        if (children := self._children.since()) is not None:
            session["children_cpu_s"] = round(children[1], 3)
        if self.ended_by is not None:
            session["ended_by"] = self.ended_by
            warnings.append({"plugin": "session", "message": exits.ended_note(self.ended_by)})
        for note in (self._children.warning(any(p.n_events for p in parts)),
                     background.memory_note(self._memory_errors)):
            if note is not None:
                warnings.append({"plugin": "session", "message": note})
                log.warning("%s", note)

    def _info(self) -> dict[str, object]:
        """pid, host and the command; arguments only when asked (they may hold secrets)."""
        argv = list(sys.argv) if self.record_argv else sys.argv[:1] + ["<argument>"] * (len(sys.argv) - 1)
        info: dict[str, object] = {"pid": os.getpid(), "hostname": hostname(), "argv": argv}
        if domain := clock_domain():
            info["clock_domain"] = domain
        rank = rank_from_env()
        if rank is not None:
            info["rank"] = rank
            size = output_mod.launcher_world_size()
            if size is not None:
                info["world_size"] = size
        return info

    def _after_fork_in_child(self) -> None:
        """In a forked child: this session is the parent's; record nothing here."""
        self._inert = True
        for slot in self._slots:
            hook = getattr(slot.plugin, "after_fork_in_child", None)
            if slot.started and hook is not None:
                try:
                    hook()
                except BaseException:  # noqa: BLE001 - the child must go on
                    pass

    # ---------------------------------------------------------------- sugar
    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __call__(self, fn: F) -> F:
        """Use as a decorator: each call is profiled (a coroutine's, a generator's over its
        whole run: collect/profiled.py), in a session with every option given to
        profile(); the last trace is ``fn.trace``."""
        return profiled.wrap(functools.partial(Session, settings=self.settings), fn)


def _start(plugin: Plugin, ctx: SessionContext) -> None:
    plugin.start(ctx)


def _version() -> str:
    from .._version import __version__

    return __version__


def _empty_trace(meta: dict[str, object]) -> Trace:
    from ..trace.builder import TraceBuilder

    return TraceBuilder(meta).build()


def _after_fork_in_child() -> None:
    global _active, _active_lock
    _active_lock = threading.Lock()  # may have been held by a parent thread at fork
    s, _active = _active, None
    if s is not None:
        s._after_fork_in_child()


fork.in_child(_after_fork_in_child)


def active_session() -> Session | None:
    return _active


def profile(plugins: Sequence[str | Plugin] | None = None, **options: object) -> Session:
    """Profile a block or a function.

    ``with polyprof.profile() as prof: ...`` then ``prof.trace``; or
    ``@polyprof.profile(output="run.polyprof")`` (each call is profiled with every
    option given here; an ``async def``'s or a generator's over its whole run). The
    options are :class:`polyprof.collect.options.SessionOptions`' fields, the same as ``polyprof run``'s flags and the ``POLYPROF_*`` environment
    variables (an option given here wins over the environment's):
    ``plugins`` (names or plugin objects; default every available one), ``output``,
    ``memory=True`` (every plugin records memory: torch allocations, OpenCL buffer and
    image sizes), ``schedule=polyprof.schedule(wait=1, warmup=1, active=3)`` (record
    only some steps, as torch.profiler's schedule: :mod:`polyprof.collect.schedule`),
    ``options`` (a plugin name -> keyword options for it, e.g.
    ``{"host": {"sample_interval_s": 0.01}}``), ``collect_timeout``/``call_timeout``
    (seconds a device plugin's collect() and its start()/stop() may take before it is
    abandoned and reported), ``record_argv`` (keep the command's arguments in the
    trace; default: only the program's name), ``follow_symlinks`` (write through a
    symlink at the output path; default: refuse).
    Opened while another session runs (e.g. a script under ``polyprof run``), it nests:
    see :mod:`polyprof.collect.nested`.
    """
    return Session(settings=make(None, plugins=plugins, **options))


def _signature() -> inspect.Signature:
    """profile()'s signature as help() and notebooks show it: SessionOptions' fields."""
    params = [inspect.Parameter("plugins", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    for f in dataclasses.fields(SessionOptions):
        if f.name != "plugins":
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc, operator]
            params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=f.type))
    return inspect.Signature(params, return_annotation="Session")


profile.__signature__ = _signature()  # type: ignore[attr-defined]


__all__ = ["Session", "profile", "active_session", "PluginError"]
