"""The PyTorch plugin: drives ``torch.profiler`` (Kineto) in a polyprof session and
merges what it records into the session trace, on the session clock.

Two modes share this class:

* **own** (``polyprof.profile(plugins=["torch"])`` or a default session): the plugin
  runs its own ``torch.profiler.profile`` for the whole session (CPU, plus CUDA / XPU /
  MTIA when those devices are present), with ``profile_all_threads`` so torch ops on
  every thread are recorded, like polyprof sections are.
* **driven** (``polyprof.torch.profile``): the drop-in owns the torch profiler and its
  schedule; it hands each finished cycle's export to this plugin (``driver=``).

Clock: Kineto writes wall-clock based times. At the start and end of every recording
the plugin emits tiny ``polyprof::clock_sync`` ranges into torch while bracketing each
with CLOCK_MONOTONIC reads; each bracket bounds the Kineto↔session offset, and the
line through the tightest start and end brackets maps Kineto time onto the session
clock (error bounded by the brackets' half-widths, recorded in
``metadata["clock_sync"]["torch"]``). If the markers are missing the session's wall
anchor is used instead.

Sections and steps: a recorder listener mirrors every polyprof section into torch as
a ``user_annotation`` range, and every ``polyprof.step()`` as ``ProfilerStep#N`` (so
they show in torch's own trace and TensorBoard); when the trace is merged those
copies are dropped again, since the host plugin already holds the sections and the
Steps line. torch's own ``record_function`` ranges stay (user_annotation = annotation
kind); torch's own ``ProfilerStep#N`` (a schedule's) get ``step = N``, plus a
Steps-line event when polyprof.step() made no Steps line.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import threading
from typing import Any

from ...collect import recorder as rec_mod
from ...collect import steps as step_rules
from ...collect.clock import now_ns
from ...collect.output import launcher_rank
from ...collect.plugin import Availability, Plugin, SessionContext
from ...errors import PolyprofError
from ...lowlevel import unseen
from ...trace import metadata_keys as mkeys
from ...trace.builder import TraceBuilder
from ...trace.core import Trace
from ...trace.merge import merge
from .align import Capture, clock_summary
from .captures import LOST, Captures, ExportDir
from .groups import GroupsSeen, gate_destroy
from .handover import DropIns, HandOver, close_mirrors, gates
from .hooks import (ImportHook, Ranges, default_activities, gate_profiler_start, imported_torch, profiler_starts)
from .steps import OptimizerSteps

# ingest (Kineto's events into the session trace) and memory are imported once torch
# recorded: every session's discovery imports this module

log = logging.getLogger("polyprof")

_active: "TorchPlugin | None" = None  # the torch plugin of the running session, if any


def active_plugin() -> "TorchPlugin | None":
    """The started torch plugin of the running session (a drop-in hands torch to it)."""
    return _active


#: what torch's gates call (hooks.gate_profiler_start): the running session's hand-over
_GATES = gates(active_plugin)


def _look_at_groups() -> None:
    """What the gate on ``destroy_process_group`` calls (groups.py): the running
    session's plugin keeps the process groups before they go."""
    p = _active
    if p is not None:
        p.groups.look()


def _gate_torch() -> None:
    gate_profiler_start(*_GATES)
    gate_destroy(_look_at_groups)


class TorchPlugin(Captures, Plugin):
    """PyTorch (Kineto) in a polyprof session.

    ``default = True`` but lazy: importing torch costs seconds, so the plugin never
    imports it. If torch is already imported when the session starts, profiling
    starts then; otherwise an import hook starts it the moment the program imports
    torch (so ``polyprof run train.py`` just works), and a program that never
    imports torch pays nothing. There can be no torch ops before torch is imported.

    Options (``options={"torch": {...}}``): ``activities`` (names such as "cpu",
    "cuda" or ``ProfilerActivity`` values; default: CPU plus every present device),
    ``record_shapes`` (default: on in one of several ranks), ``profile_memory``,
    ``with_stack``, ``with_flops``, ``with_modules`` (as torch), ``memory`` (the session's ``memory=True``: sets
    ``profile_memory``, so allocations and frees become memory events), ``all_threads``
    (default True, but False with ``profile_memory``: torch records no allocations under
    ``profile_all_threads``), ``mirror_sections``
    (default True), ``keep_export`` (a directory to keep a copy of torch's JSON in).
    """

    name = "torch"
    option_names = frozenset(("activities", "record_shapes", "profile_memory", "with_stack", "with_flops",
                                "with_modules", "all_threads", "mirror_sections", "keep_export", "auto_steps"))
    device_kinds = ("CPU", "CUDA", "XPU", "MTIA")
    default = True
    session_thread_only = True  # torch.profiler keeps per-thread state: start/stop on the session thread

    def __init__(self, driver: Any = None, **options: Any) -> None:
        super().__init__(**options)
        self.driver = driver
        self._lock = threading.RLock()
        self._captures: list[Capture] = []
        self._mirrors: list[tuple[int, str, int, int]] = []
        self._tls = threading.local()
        self._stacks: list[list[tuple[str, Any]]] = []  # every thread's open section copies (close_mirrors)
        self._ranges: Ranges | None = None
        self._prof: Any = None
        self._starts: int | None = None  # profiler_starts() once ours started
        self._hook: ImportHook | None = None
        self._step_range: Any = None
        self._step_pending: tuple[int, str, int] | None = None  # a step copy being opened (_on_step)
        self._exports: ExportDir | None = None  # torch's exports until read (captures.py)
        self._thread_names: dict[int, str] = {}
        self._recorder: rec_mod.Recorder | None = None
        self._had_steps = False
        self._paused = False  # a session schedule's wait steps (pause() / resume())
        self._warmed = False  # torch's profiler started and stopped once while paused (_warm)
        # called by polyprof.step() on the program's thread: unseen by its profile function
        # (a program's own torch.profiler(with_stack=True) lists what python lists)
        self._step_listener = unseen.quiet(self._on_step)
        #: steps of unmodified programs: the optimizer's step() calls (plugins/torch/steps.py)
        self._steps = OptimizerSteps(enabled=lambda: self.driver is None,
                                     on=self.options.get("auto_steps", True) is not False, warn=self._warn)
        #: the program's own torch profilers, which torch is handed over to (handover.py)
        self._handover = HandOver(self)
        self.dropins = DropIns()  # the polyprof.torch.profile drop-ins that drove it: its schedule metadata (mkeys.SCHEDULE)
        self.groups = GroupsSeen()  # torch.distributed's process groups seen in the session (groups.py)

    @property
    def time_limited(self) -> bool:
        """start() and stop() run on the session's thread anyway; collect() of recordings
        read from torch's memory (activities.py) is CPU work on them, nothing waited on:
        it runs there too, with no limit that could only drop them (and no thread
        hand-off at the session's end). Reading torch's JSON exports keeps the limit."""
        return self._state != "stopped" or any(c.path is not None for c in self._captures)

    @staticmethod
    def conformance_workload(seconds: float) -> None:
        """What `polyprof plugin check torch` runs while the plugin records: torch ops on the CPU."""
        import time

        import torch

        x = torch.randn(64, 64)
        end = time.perf_counter() + seconds
        while True:
            x = torch.tanh(x @ x)
            if time.perf_counter() >= end:
                break

    @classmethod
    def availability(cls) -> Availability:
        try:
            spec = importlib.util.find_spec("torch")
        except (ImportError, ValueError) as e:
            return Availability(False, f"torch cannot be found: {e}")
        if spec is None:
            return Availability(False, "torch is not installed (pip install 'polyprof[torch]')")
        return Availability(True)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, ctx: SessionContext) -> None:
        global _active
        self._recorder = rec_mod.active_recorder()
        self._snapshot_threads()
        self._handover.thread = threading.get_ident()
        if _active is None:
            _active = self
        if imported_torch() is not None:
            _gate_torch()  # also for the drop-in's own profiler
        if self.driver is not None:  # the drop-in's torch profiler records from now on
            self._attach_listener()
            return
        if imported_torch() is not None:
            self._steps.watch()
            self._begin()
        else:
            self._hook = ImportHook("torch", self._begin_after_import).install()

    def _begin_after_import(self) -> None:
        _gate_torch()
        if self._state == "started":
            self._steps.watch()
            self._begin()

    def _begin(self) -> None:
        """Start our own torch profiler (own mode)."""
        with self._lock:
            if self._prof is not None or self._state != "started" or self.driver is not None:
                return
            torch = imported_torch()
            if torch is None:
                return
            if self._paused:  # a window's delay or a schedule's first steps: it resumes later
                self._warm(torch)
                return
            self._ensure_ranges(torch)
            if self._handover.blocks():  # the program's profiler holds torch: ours starts after it
                return
            if self._recorder is None:  # the host plugin started after us
                self._recorder = rec_mod.active_recorder()
            self._handover.busy += 1  # our own prepare
            try:
                prof = torch.profiler.profile(**self._profile_kwargs(torch))
                prof.start()
            except Exception as e:  # reported; the session and the program go on
                self._warn(f"torch.profiler did not start: {type(e).__name__}: {e}")
                return
            finally:
                self._handover.busy -= 1
            self._prof, self._starts = prof, profiler_starts()
            self.groups.look()
            cap = self.new_capture()
            self.sync(cap)
            self._attach_listener()
            if self._recorder is not None:
                self._recorder.step_listeners.append(self._step_listener)
                n = len(self._recorder.steps)
                if n:  # steps before torch started: keep numbering
                    self._on_step(n)
                elif not self._recorder.auto_steps:
                    # started at the program's ``import torch`` (polyprof run): the program resumes after
                    # torch.profiler's start (1.5-4 s on a loaded machine), which step 0 does not hold
                    # (collect/steps.py program_resumes, as a session's plugin start-up)
                    step_rules.program_resumes(self._recorder, now_ns())

    def _warm(self, torch: Any) -> None:
        """Paused before its first recording: torch's profiler started and stopped once,
        on nothing, now (at torch's import or the session's start), not at the first
        resume. torch's first start initialises Kineto: 1.5-2 s on a loaded 2-core
        machine (torch 2.13's prepare; a millisecond after). At a resume at the first step
        boundary in a window, that went out of the window: a 0.6 s window recorded no op."""
        if self._warmed or self._handover.blocks():
            return
        self._warmed = True
        self._handover.busy += 1  # our own prepare and stop, not the program's
        try:
            prof = torch.profiler.profile(**self._profile_kwargs(torch))
            prof.start()
            prof.stop()
        except Exception as e:  # the resume starts it then, as before
            log.debug("plugin torch: torch.profiler's warm-up failed: %s: %s", type(e).__name__, e)
        finally:
            self._handover.busy -= 1

    def _profile_kwargs(self, torch: Any) -> dict[str, Any]:
        o = self.options
        kw: dict[str, Any] = {"activities": self._activities(torch)}
        for k in ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"):
            if k in o:
                kw[k] = bool(o[k])
        if "record_shapes" not in o and launcher_rank() is not None:  # one of several ranks:
            kw["record_shapes"] = True  # its comms' bytes and peers (analyze/collectives.py)
        if o.get("memory") and "profile_memory" not in o:  # the session's memory=True
            kw["profile_memory"] = True
        flags = {}
        # torch (2.4-2.13 at least) writes no [memory] events under profile_all_threads
        if o.get("all_threads", not kw.get("profile_memory")):
            flags["profile_all_threads"] = True
        # the plugin reads torch's activities (activities.py), never its per-op Python events:
        # torch need not build them at stop (a quarter of its stop). torch's memory profile
        # (memory.categories_of) needs them, and stacks (torch warns, names come out undecodable)
        if not kw.get("profile_memory") and not kw.get("with_stack") and hasattr(torch._C._autograd._ProfilerResult, "trace_activities"):
            flags["trace_only"] = True
        while flags:
            try:
                kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(**flags)
                break
            except (TypeError, AttributeError):  # an older torch: without trace_only, then all threads
                if "trace_only" in flags:
                    del flags["trace_only"]
                else:
                    flags.clear()
        return kw

    def _activities(self, torch: Any) -> list[Any]:
        PA = torch.profiler.ProfilerActivity
        asked = self.options.get("activities")
        if asked:
            out = [getattr(PA, a.upper()) if isinstance(a, str) else a for a in asked]
        else:
            out = default_activities(torch)
        from ..cupti.holder import holds_cupti

        cuda = getattr(PA, "CUDA", None)
        if cuda in out and holds_cupti():  # CUPTI takes one recorder: the cupti plugin records CUDA
            out = [a for a in out if a != cuda]
            if asked:
                self._warn("CUDA activity comes from the cupti plugin in this session (CUPTI takes one "
                           "recorder); torch.profiler records torch ops only")
        return out

    def _stop(self) -> None:
        global _active
        if _active is self:
            _active = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._steps.unwatch()
        self._detach_listener()
        rec = self._recorder
        if rec is not None:
            self._had_steps = bool(rec.steps)
        self._snapshot_threads()
        self.groups.look()  # the groups the program has not destroyed
        self._end_own()
        said = self._handover.summary()
        if said:
            self._warn(said)

    def _end_own(self) -> Any:
        """Stop our own torch recording and export it (session end, or a hand-over); the
        stopped profiler, if it was ours to stop."""
        with self._lock:
            prof, self._prof = self._prof, None
        self._detach_listener()
        if self._recorder is not None:
            try:
                self._recorder.step_listeners.remove(self._step_listener)
            except ValueError:
                pass
        if prof is None:
            return None
        cap = self._captures[-1]
        if self._starts is not None and profiler_starts() != self._starts:
            # the program's own profiler started since: ours is gone, and stopping or marking
            # now would stop or mark that one (docs/torch.md, "with_stack")
            cap.lost = LOST
            self._warn(LOST + "; its torch ops are lost")
            return None
        self._close_step_range()
        close_mirrors(self._stacks, self._ranges)  # none may end in a later recording (handover.py)
        self.sync(cap)
        self._handover.busy += 1  # our own stop
        try:
            prof.stop()
        finally:
            self._handover.busy -= 1
        self._keep(prof, cap)
        return prof

    # ------------------------------------------------------------------ schedule
    @property
    def idle(self) -> bool:
        """Nothing to record in this session: the program never imported torch (collect/schedule.py)."""
        return imported_torch() is None

    def pause(self) -> None:
        """A session schedule's steps not to record: this recording ends (and is kept)."""
        self._paused = True
        if self.driver is None:
            self._end_own()

    def resume(self) -> None:
        """Recording again (a schedule's warm-up or active steps): a new torch recording."""
        self._paused = False
        if self._state == "started" and imported_torch() is not None:
            self._begin()

    # ------------------------------------------------------------------ hand-over
    def attach_driver(self, driver: Any) -> bool:
        """A ``polyprof.torch.profile`` opened inside this session (e.g. a script run
        by ``polyprof run``) takes torch over: our own recording ends here and is
        kept, and the drop-in's cycles come to this plugin. False if we cannot."""
        if self._state != "started" or self.driver is not None:
            return False
        self._leave_cuda_to_cupti(driver)
        self._end_own()
        with self._lock:
            self.driver = driver
        self._attach_listener()
        return True

    def _leave_cuda_to_cupti(self, driver: Any) -> None:
        """A drop-in started while the cupti plugin records: its torch.profiler records
        torch ops only (CUPTI takes one recorder; every kernel once, from the cupti plugin)."""
        from ..cupti.holder import holds_cupti

        acts = getattr(driver, "activities", None)
        torch = imported_torch()
        cuda = getattr(torch.profiler.ProfilerActivity, "CUDA", None) if torch is not None else None
        if holds_cupti() and isinstance(acts, set) and cuda in acts:
            acts.discard(cuda)
            self._warn("polyprof.torch.profile records torch ops only in this session: CUDA activity "
                       "comes from the cupti plugin (CUPTI takes one recorder)")

    def detach_driver(self, driver: Any) -> None:
        """The drop-in is done: resume our own recording for the rest of the session."""
        with self._lock:
            if self.driver is not driver:
                return
            self.driver = None
        self._detach_listener()
        if self._state == "started" and imported_torch() is not None:
            self._begin()

    def _collect(self) -> Trace:
        parts: list[Trace] = []
        cycles: list[dict[str, Any]] = []
        try:
            for cap in self._captures:
                if cap.path is None and cap.trace is None:
                    cycles.append({"capture": cap.index, "status": cap.lost or
                                   "ended without a saved trace (torch discards an incomplete cycle)"})
                    continue
                try:
                    part, info = self.ingest(cap)
                except (PolyprofError, OSError) as e:  # one recording lost (its file gone, damaged): not the others
                    self._warn(f"torch's recording {cap.index} not read: {type(e).__name__}: {e}")
                    cycles.append({"capture": cap.index, "status": f"not read: {e}"})
                    continue
                parts.append(part)
                cycles.append(info)
        finally:
            self._cleanup()
            self.dropins.release()
        if not parts:
            return self.dropins.write(TraceBuilder({mkeys.CLOCK_SYNC: {}}).build())
        out = parts[0] if len(parts) == 1 else merge(parts)  # one recording (the usual case): no copy
        summary = clock_summary(cycles)
        aligned = [c for c in cycles if "method" in c]
        fit = {**summary, "n": len(aligned), "bound_ns": float(summary.get("uncertainty_ns", math.inf))}
        for plane in {p.name for p in out.planes}:  # torch's clock, mapped onto the session's
            mkeys.record_fit(out.metadata, plane, self.name, fit)
        return self.dropins.write(out)

    # ------------------------------------------------------------------ listeners
    def _attach_listener(self) -> None:
        """Mirror sections into torch, only while a torch profiler records for us: a
        recorder with no listener keeps sections on the compiled fast path (a Python
        call per enter and exit would cost more)."""
        rec = self._recorder
        if rec is not None and self.options.get("mirror_sections", True) and self._on_section not in rec.listeners:
            rec.listeners.append(self._on_section)

    def _detach_listener(self) -> None:
        rec = self._recorder
        if rec is not None:
            try:
                rec.listeners.remove(self._on_section)
            except ValueError:
                pass

    def _ensure_ranges(self, torch: Any) -> Ranges:
        r = self._ranges
        if r is None:
            r = self._ranges = Ranges(torch)
        return r

    def _on_section(self, name: str, enter: bool) -> None:
        """Open/close torch's copy of a polyprof section (runs on every section while
        torch records: kept to a few attribute lookups around torch's own call)."""
        r = self._ranges
        if r is None:
            if imported_torch() is None:
                return
            r = self._ensure_ranges(imported_torch())
        try:
            tid, stack = self._tls.state
        except AttributeError:
            tid, stack = self._tls.state = (threading.get_native_id(), [])
            self._stacks.append(stack)
        if enter:
            a = now_ns()
            h = r.enter(name)
            b = now_ns()
            stack.append((name, h))
            self._mirrors.append((tid, name, a, b))
        elif stack:
            top = stack[-1]
            if top[0] == name:
                stack.pop()
                r.exit(top[1])
                return
            for i in range(len(stack) - 2, -1, -1):  # out-of-order end() of begin() sections
                if stack[i][0] == name:
                    r.exit(stack.pop(i)[1])
                    return

    def _on_step(self, n: int) -> None:
        """polyprof.step() -> ProfilerStep#n in torch's trace (as torch's schedule does)."""
        r = self._ranges
        if r is None or self._prof is None:
            return
        from .ingest import STEP_PREFIX

        self._close_step_range()
        name = f"{STEP_PREFIX}{n}"
        a = now_ns()
        # noted before torch opens it: a signal whose handler ends the session before the
        # append below leaves the copy noted here, and the stop completes it (_close_step_range)
        pending = self._step_pending = (threading.get_native_id(), name, a)
        self._step_range = r.enter(name)
        b = now_ns()
        # a copy of polyprof's own step, like the section copies: dropped at ingest
        self._mirrors.append((*pending, b))
        self._step_pending = None

    def _close_step_range(self) -> None:
        pending, self._step_pending = self._step_pending, None
        if pending is not None and (not self._mirrors or self._mirrors[-1][:3] != pending):
            # _on_step was cut short (a signal) before it noted torch's copy: noted now, its
            # bracket to now (wide, but it holds the copy's start), so ingest drops it;
            # kept, it stood after the host's last step and was taken as the trace's steps
            self._mirrors.append((*pending, now_ns()))
        h, self._step_range = self._step_range, None
        if h is not None and self._ranges is not None:
            try:
                self._ranges.exit(h)
            except Exception:
                pass

    def _snapshot_threads(self) -> None:
        self._thread_names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})

    def _warn(self, msg: str) -> None:
        if self.ctx is not None:
            self.ctx.warn(self.name, msg)
        else:
            log.warning("plugin torch: %s", msg)

    # ------------------------------------------------------------------ ingest
    def ingest(self, cap: Capture) -> tuple[Trace, dict[str, Any]]:
        from ...formats import kineto
        from .ingest import ingest_kineto
        from .memory import add_categories

        t, cap.trace = cap.trace, None
        if t is None:
            t = kineto.load(cap.path)
        if cap.mem_categories:
            add_categories(t, cap.mem_categories)
        self.groups.apply(t.metadata)
        rec = self._recorder  # its sections by thread key: two threads that had one ident stay apart
        secs = None if rec is None else (rec.keyed_sections(list(rec.sections)), dict(rec.threads))
        return ingest_kineto(t, cap, self._mirrors, self._names_by_tid(), self.ctx, self._had_steps, sections=secs)

    def _names_by_tid(self) -> dict[int, str]:
        """OS thread id -> the name the host plugin gives that thread's track."""
        names = dict(self._thread_names)
        rec = self._recorder
        if rec is not None:
            for buf in list(getattr(rec, "buffers", [])):
                names[buf.tid] = buf.name
            for name, native in list(getattr(rec, "threads", {}).values()):
                names[native] = name
        return names
