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

import importlib.abc
import importlib.util
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..collect import recorder as rec_mod
from ..collect.clock import now_ns
from ..collect.plugin import Availability, Plugin, SessionContext
from ..trace import clock, keys
from ..trace.builder import TraceBuilder
from ..trace.clock import ClockFit
from ..trace.core import Trace
from ..trace.merge import merge
from ..trace.vocabulary import PROFILER_STEP_PREFIX
from .torch_memory import add_categories, categories_of, snap_to_sections

log = logging.getLogger("polyprof")

#: name of the ranges used to measure the Kineto <-> session clock offset
SYNC_NAME = "polyprof::clock_sync"
STEP_PREFIX = PROFILER_STEP_PREFIX
_SYNC_REPEATS = 3
_ANNOTATION_CATEGORIES = ("user_annotation",)


def _imported_torch() -> Any | None:
    """torch if the program already imported it (never imports it ourselves)."""
    mod = sys.modules.get("torch")
    return mod if mod is not None and hasattr(mod, "profiler") else None


# ----------------------------------------------------------------------- range primitives
class _Ranges:
    """Open/close torch ``user_annotation`` ranges as cheaply as torch allows.

    ``torch._C._autograd._record_function_with_args_enter`` costs ~2 µs and records
    a user_annotation; ``_RecordFunctionFast`` is as cheap but records cpu_op, so it
    is not used. Falls back to the dispatcher ops ``record_function`` itself uses.
    """

    def __init__(self, torch: Any):
        ag = getattr(torch._C, "_autograd", None)
        enter = getattr(ag, "_record_function_with_args_enter", None)
        exit_ = getattr(ag, "_record_function_with_args_exit", None)
        if enter is not None and exit_ is not None:
            self.enter = enter
            self.exit = exit_
        else:
            ops = torch.ops.profiler
            self.enter = lambda name: ops._record_function_enter_new(name, None)
            self.exit = ops._record_function_exit._RecordFunction


# ----------------------------------------------------------------------- lazy start
class _ImportHook(importlib.abc.MetaPathFinder):
    """Runs a callback right after ``torch`` finishes importing, so a default session
    profiles torch without making programs that never import torch pay for it."""

    def __init__(self, callback: Any):
        self.callback = callback
        self._busy = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        callback = self.callback

        def exec_module(module: Any) -> None:
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            try:
                callback()
            except Exception as e:  # never break the user's `import torch`
                log.warning("polyprof torch plugin could not start after import: %s", e)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return spec
        return spec


# ----------------------------------------------------------------------- captures
@dataclass
class _Capture:
    """One Kineto recording (the session, or one active cycle of a schedule)."""

    index: int
    samples: list[tuple[int, int]] = field(default_factory=list)  # (before, after) per marker
    path: str | None = None
    lost: str = ""
    #: torch's category of each allocation, (time ns, address) -> name (torch_memory)
    mem_categories: dict[tuple[int, int], str] | None = None


def fit_alignment(samples: list[tuple[int, int]], kineto_ns: np.ndarray) -> ClockFit | None:
    """Kineto -> session clock from our clock-sync markers: they run one after another
    on one thread, so the n-th bracket ``(before, after)`` pairs with the n-th marker's
    Kineto stamp in time order (a paired sample of the clock service)."""
    k = np.sort(np.asarray(kineto_ns, np.int64))
    if not len(samples) or len(samples) != len(k):
        return None
    s = np.asarray(sorted(samples), np.int64)
    return fit_pairs(s[:, 0], s[:, 1], k)


def fit_pairs(a: np.ndarray, b: np.ndarray, k: np.ndarray, method: str = "paired_markers") -> ClockFit | None:
    """Kineto stamped ``k`` (wall clock) while the session clock read between ``a`` and
    ``b``: the clock service's fit for a clock of the host's rate (an offset bounded by
    the brackets' intersection; drift only if the wall clock was stepped); None when the
    brackets admit no common line (they do not pair up)."""
    if not len(k):
        return None
    f = clock.fit_same_rate(a, k, b, method=method)
    return f if f.consistent else None


def _describe(fit: ClockFit, wall: ClockFit | None = None) -> dict[str, Any]:
    d = {"method": fit.method, "offset_ns": -int(fit.offset_ns), "ref_ns": int(fit.ref_ns),
         "drift_ppm": -fit.drift_ppm, "uncertainty_ns": int(math.ceil(fit.bound_ns)), "samples": fit.n}
    if wall is not None:  # how far the wall anchor alone would have been off (a check on both)
        d["wall_anchor_residual_ns"] = int(wall.offset_ns - fit.offset_ns)
    return d


# ----------------------------------------------------------------------- the plugin
_active: "TorchPlugin | None" = None  # the torch plugin of the running session, if any


def active_plugin() -> "TorchPlugin | None":
    """The started torch plugin of the running session (a drop-in hands torch to it)."""
    return _active


class TorchPlugin(Plugin):
    """PyTorch (Kineto) in a polyprof session.

    ``default = True`` but lazy: importing torch costs seconds, so the plugin never
    imports it. If torch is already imported when the session starts, profiling
    starts then; otherwise an import hook starts it the moment the program imports
    torch (so ``polyprof run train.py`` just works), and a program that never
    imports torch pays nothing. There can be no torch ops before torch is imported.

    Options (``options={"torch": {...}}``): ``activities`` (names such as "cpu",
    "cuda" or ``ProfilerActivity`` values; default: CPU plus every present device),
    ``record_shapes``, ``profile_memory``, ``with_stack``, ``with_flops``,
    ``with_modules`` (as torch), ``memory`` (the session's ``memory=True``: sets
    ``profile_memory``, so allocations and frees become memory events), ``all_threads``
    (default True, but False with ``profile_memory``: torch records no allocations under
    ``profile_all_threads``), ``mirror_sections``
    (default True), ``keep_export`` (a directory to keep a copy of torch's JSON in).
    """

    name = "torch"
    device_kinds = ("CPU", "CUDA", "XPU", "MTIA")
    default = True
    session_thread_only = True  # torch.profiler keeps per-thread state: start/stop on the session thread

    def __init__(self, driver: Any = None, **options: Any) -> None:
        super().__init__(**options)
        self.driver = driver
        self._lock = threading.RLock()
        self._captures: list[_Capture] = []
        self._mirrors: list[tuple[int, str, int, int]] = []
        self._tls = threading.local()
        self._ranges: _Ranges | None = None
        self._prof: Any = None
        self._hook: _ImportHook | None = None
        self._step_range: Any = None
        self._tmpdir: str | None = None
        self._thread_names: dict[int, str] = {}
        self._recorder: rec_mod.Recorder | None = None
        self._had_steps = False

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
        self._tmpdir = tempfile.mkdtemp(prefix="polyprof-torch-")
        # removed at collect; also when a plugin that is never collected (failed stop,
        # conformance checks) is garbage-collected or the interpreter exits
        weakref.finalize(self, shutil.rmtree, self._tmpdir, True)
        self._recorder = rec_mod.active_recorder()
        self._snapshot_threads()
        if self.options.get("mirror_sections", True) and self._recorder is not None:
            self._recorder.listeners.append(self._on_section)
        if _active is None:
            _active = self
        if self.driver is not None:
            return
        if _imported_torch() is not None:
            self._begin()
        else:
            self._hook = _ImportHook(self._begin_after_import)
            sys.meta_path.insert(0, self._hook)

    def _begin_after_import(self) -> None:
        if self._state == "started":
            self._begin()

    def _begin(self) -> None:
        """Start our own torch profiler (own mode)."""
        with self._lock:
            if self._prof is not None or self._state != "started" or self.driver is not None:
                return
            torch = _imported_torch()
            if torch is None:
                return
            self._ensure_ranges(torch)
            if torch._C._autograd._profiler_enabled():
                self._warn("another torch profiler is already running; torch ops are not "
                           "recorded by polyprof in this session (use polyprof.torch.profile)")
                return
            if self._recorder is None:  # the host plugin started after us
                self._recorder = rec_mod.active_recorder()
                if self._recorder is not None and self.options.get("mirror_sections", True):
                    self._recorder.listeners.append(self._on_section)
            try:
                prof = torch.profiler.profile(**self._profile_kwargs(torch))
                prof.start()
            except Exception as e:  # reported; the session and the program go on
                self._warn(f"torch.profiler did not start: {type(e).__name__}: {e}")
                return
            self._prof = prof
            cap = self.new_capture()
            self.sync(cap)
            if self._recorder is not None:
                self._recorder.step_listeners.append(self._on_step)
                n = len(self._recorder.steps)
                if n:  # steps before torch started: keep numbering
                    self._on_step(n)

    def _profile_kwargs(self, torch: Any) -> dict[str, Any]:
        o = self.options
        kw: dict[str, Any] = {"activities": self._activities(torch)}
        for k in ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"):
            if k in o:
                kw[k] = bool(o[k])
        if o.get("memory") and "profile_memory" not in o:  # the session's memory=True
            kw["profile_memory"] = True
        # torch (2.4-2.13 at least) writes no [memory] events under profile_all_threads
        if o.get("all_threads", not kw.get("profile_memory")):
            try:
                kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
            except (TypeError, AttributeError):  # older torch: main thread only
                pass
        return kw

    def _activities(self, torch: Any) -> list[Any]:
        PA = torch.profiler.ProfilerActivity
        asked = self.options.get("activities")
        if asked:
            out = []
            for a in asked:
                out.append(getattr(PA, a.upper()) if isinstance(a, str) else a)
            return out
        return default_activities(torch)

    def _stop(self) -> None:
        global _active
        if _active is self:
            _active = None
        if self._hook is not None:
            try:
                sys.meta_path.remove(self._hook)
            except ValueError:
                pass
            self._hook = None
        rec = self._recorder
        if rec is not None:
            try:
                rec.listeners.remove(self._on_section)
            except ValueError:
                pass
            self._had_steps = bool(rec.steps)
        self._snapshot_threads()
        self._end_own()

    def _end_own(self) -> None:
        """Stop our own torch recording and export it (session end, or a hand-over)."""
        with self._lock:
            prof, self._prof = self._prof, None
        if self._recorder is not None:
            try:
                self._recorder.step_listeners.remove(self._on_step)
            except ValueError:
                pass
        if prof is None:
            return
        cap = self._captures[-1]
        self._close_step_range()
        self.sync(cap)
        prof.stop()
        self.export(prof, cap)

    # ------------------------------------------------------------------ hand-over
    def attach_driver(self, driver: Any) -> bool:
        """A ``polyprof.torch.profile`` opened inside this session (e.g. a script run
        by ``polyprof run``) takes torch over: our own recording ends here and is
        kept, and the drop-in's cycles come to this plugin. False if we cannot."""
        if self._state != "started" or self.driver is not None:
            return False
        self._end_own()
        with self._lock:
            self.driver = driver
        return True

    def detach_driver(self, driver: Any) -> None:
        """The drop-in is done: resume our own recording for the rest of the session."""
        with self._lock:
            if self.driver is not driver:
                return
            self.driver = None
        if self._state == "started" and _imported_torch() is not None:
            self._begin()

    def _collect(self) -> Trace:
        parts: list[Trace] = []
        cycles: list[dict[str, Any]] = []
        try:
            for cap in self._captures:
                if cap.path is None:
                    cycles.append({"capture": cap.index, "status": cap.lost or
                                   "ended without a saved trace (torch discards an incomplete cycle)"})
                    continue
                part, info = self.ingest(cap)
                parts.append(part)
                cycles.append(info)
        finally:
            self._cleanup()
        meta: dict[str, Any] = {"clock_sync": {"torch": _clock_summary(cycles)}}
        if not parts:
            b = TraceBuilder(meta)
            return b.build()
        return merge(parts, meta)

    # ------------------------------------------------------------------ used by the drop-in
    def new_capture(self) -> _Capture:
        with self._lock:
            cap = _Capture(len(self._captures))
            self._captures.append(cap)
            return cap

    def sync(self, cap: _Capture | None = None) -> None:
        """Emit bracketed clock-sync markers into the running torch recording."""
        torch = _imported_torch()
        if torch is None:
            return
        r = self._ensure_ranges(torch)
        cap = cap if cap is not None else (self._captures[-1] if self._captures else self.new_capture())
        enter, exit_ = r.enter, r.exit
        for _ in range(_SYNC_REPEATS):
            a = now_ns()
            h = enter(SYNC_NAME)
            b = now_ns()
            exit_(h)
            cap.samples.append((a, b))

    def export(self, prof: Any, cap: _Capture | None = None, directory: str | None = None) -> None:
        """Export torch's trace of the capture that just ended (called before any user
        on_trace_ready handler, so its own exports and files stay untouched)."""
        import torch

        cap = cap if cap is not None else self._captures[-1]
        if not recording_survived(prof):
            # another torch.profiler in the program ended this recording: torch has no
            # trace for it, and exporting that empty result crashes the process
            cap.lost = "the torch recording was ended by another torch.profiler in the program"
            self._warn(cap.lost + "; its torch ops are lost")
            return
        # a driver's directory is the driver's to clean (it hands the file out later)
        folder = directory or self._tmpdir or tempfile.gettempdir()
        path = os.path.join(folder, f"torch_{id(self):x}_cycle{cap.index}.json")
        torch.profiler.profile.export_chrome_trace(prof, path)
        cap.path = path
        try:
            cap.mem_categories = categories_of(prof)
        except Exception as e:  # torch's private memory profile: its failure costs only the categories
            self._warn(f"no memory categories from torch: {type(e).__name__}: {e}")
        keep = self.options.get("keep_export")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(path, os.path.join(keep, os.path.basename(path)))

    # ------------------------------------------------------------------ listeners
    def _ensure_ranges(self, torch: Any) -> _Ranges:
        r = self._ranges
        if r is None:
            r = self._ranges = _Ranges(torch)
        return r

    def _on_section(self, name: str, enter: bool) -> None:
        """Open/close torch's copy of a polyprof section (runs on every section while
        torch records: kept to a few attribute lookups around torch's own call)."""
        r = self._ranges
        if r is None:
            if _imported_torch() is None:
                return
            r = self._ensure_ranges(_imported_torch())
        try:
            tid, stack = self._tls.state
        except AttributeError:
            tid, stack = self._tls.state = (threading.get_native_id(), [])
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
        self._close_step_range()
        name = f"{STEP_PREFIX}{n}"
        a = now_ns()
        self._step_range = r.enter(name)
        b = now_ns()
        # a copy of polyprof's own step, like the section copies: dropped at ingest
        self._mirrors.append((threading.get_native_id(), name, a, b))

    def _close_step_range(self) -> None:
        h, self._step_range = self._step_range, None
        if h is not None and self._ranges is not None:
            try:
                self._ranges.exit(h)
            except Exception:
                pass

    def _snapshot_threads(self) -> None:
        for t in threading.enumerate():
            nid = getattr(t, "native_id", None)
            if nid:
                self._thread_names[nid] = t.name

    def _warn(self, msg: str) -> None:
        if self.ctx is not None:
            self.ctx.warn(self.name, msg)
        else:
            log.warning("plugin torch: %s", msg)

    def _cleanup(self) -> None:
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    # ------------------------------------------------------------------ ingest
    def ingest(self, cap: _Capture) -> tuple[Trace, dict[str, Any]]:
        from ..formats import kineto

        t = kineto.load(cap.path)
        if cap.mem_categories:
            add_categories(t, cap.mem_categories)
        rec = self._recorder
        return ingest_kineto(t, cap, self._mirrors, self._names_by_tid(), self.ctx, self._had_steps,
                             sections=(list(rec.sections), dict(rec.threads)) if rec is not None else None)

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


def recording_survived(prof: Any) -> bool:
    """False when torch has no trace for a stopped profiler (trace start 0)."""
    inner = getattr(prof, "profiler", None)
    res = getattr(inner, "kineto_results", None)
    if res is None:
        return False
    try:
        return int(res.trace_start_ns()) != 0
    except Exception:
        return True  # cannot tell on this torch version: trust it


def default_activities(torch: Any) -> list[Any]:
    """CPU plus every accelerator torch can see here (CUDA/ROCm, XPU, MTIA)."""
    PA = torch.profiler.ProfilerActivity
    try:
        supported = set(torch.profiler.supported_activities())
    except Exception:
        supported = {PA.CPU}
    acts = [PA.CPU]
    for dev, act in (("cuda", "CUDA"), ("xpu", "XPU"), ("mtia", "MTIA")):
        a = getattr(PA, act, None)
        mod = getattr(torch, dev, None)
        try:
            present = bool(mod is not None and mod.is_available())
        except Exception:
            present = False
        if a is not None and present and a in supported:
            acts.append(a)
    return acts


def _clock_summary(cycles: list[dict[str, Any]]) -> dict[str, Any]:
    aligned = [c for c in cycles if "method" in c]
    out: dict[str, Any] = {"source": "kineto", "cycles": cycles}
    if aligned:
        methods = sorted({c["method"] for c in aligned})
        out["method"] = methods[0] if len(methods) == 1 else "mixed"
        out["uncertainty_ns"] = max(int(c["uncertainty_ns"]) for c in aligned)
    return out


def _wall_alignment(t: Trace, ctx: SessionContext | None) -> ClockFit:
    anchor = (ctx.wall_anchor if ctx is not None else None) or {}
    base = t.metadata.get("baseTimeNanoseconds") or 0
    off = int(anchor.get("wall_ns", 0)) - int(anchor.get("mono_ns", 0))  # wall - session
    # the reader may keep times relative to baseTimeNanoseconds
    if t.n_events and base and int(t.start_ns.min()) < base // 2:
        off -= base
    return clock.constant(-off, int(anchor.get("uncertainty_ns", 0)), "wall_anchor")


def ingest_kineto(t: Trace, cap: _Capture, mirrors: list[tuple[int, str, int, int]],
                  thread_names: dict[int, str], ctx: SessionContext | None,
                  host_has_steps: bool, sections: tuple[list, dict] | None = None) -> tuple[Trace, dict[str, Any]]:
    """Re-home one Kineto trace into the session: session clock, the host plane and
    the host plugin's thread tracks, without our markers and section copies. With the
    host ``sections`` (the recorder's tuples and threads), allocations inside a section's
    copy are kept inside the section (``torch_memory.snap_to_sections``)."""
    names = t.names()
    n = t.n_events
    is_sync = names == SYNC_NAME if n else np.zeros(0, bool)
    sync_rows = np.flatnonzero(is_sync)
    align = fit_alignment(cap.samples, t.start_ns[sync_rows]) if len(sync_rows) else None
    wall = _wall_alignment(t, ctx)
    if align is None:
        align = wall
    start = align.to_host(t.start_ns) if n else np.zeros(0, np.int64)

    # planes: torch's host process -> polyprof's host plane
    pid = os.getpid()
    # the reader names the recording process /host:CPU (other processes /host:CPU:<pid>)
    host_planes = {p.id for p in t.planes if p.name == keys.HOST_PLANE}
    b = TraceBuilder()
    pmap = np.zeros(max(1, len(t.planes)), np.int32)
    for p in t.planes:
        if p.id in host_planes:
            pmap[p.id] = b.plane(keys.HOST_PLANE, "host", pid=pid, properties={})
        else:
            pmap[p.id] = b.plane(p.name, p.kind, p.vendor, p.index, p.pid, p.properties)
    tmap = np.zeros(max(1, len(t.tracks)), np.int32)
    track_tid = np.zeros(max(1, len(t.tracks)), np.int64)
    for tr in t.tracks:
        track_tid[tr.id] = tr.tid
        if tr.plane in host_planes and tr.tid > 0:
            nm = thread_names.get(tr.tid, tr.name)
            tmap[tr.id] = b.track(int(pmap[tr.plane]), nm, "thread", tr.tid, tr.sort_index, tr.properties)
        else:
            tmap[tr.id] = b.track(int(pmap[tr.plane]), tr.name, tr.kind, tr.tid, tr.sort_index, tr.properties)

    keep = ~is_sync
    dropped_copies = 0
    if n and mirrors:
        drop, brackets = _mirror_rows(t, names, start, mirrors, int(math.ceil(align.bound_ns)), host_planes,
                                      track_tid)
        keep[drop] = False
        dropped_copies = len(drop)
        if align.method == "paired_markers" and len(drop):
            # torch's copy of each section began inside the bracket of our enter call:
            # more clock samples, spread over the whole recording
            sa = np.asarray(sorted(cap.samples), np.int64)
            k_all = np.concatenate([np.sort(t.start_ns[sync_rows]), t.start_ns[drop]])
            a_all = np.concatenate([sa[:, 0], brackets[:, 0]])
            b_all = np.concatenate([sa[:, 1], brackets[:, 1]])
            better = fit_pairs(a_all, b_all, k_all, "paired_markers+sections")
            if better is not None and better.bound_ns <= align.bound_ns:
                align = better
                start = align.to_host(t.start_ns)
        if sections is not None and len(drop):
            start = snap_to_sections(t, start, drop, brackets, sections[0], sections[1], track_tid)
    rows = np.flatnonzero(keep)
    newrow = np.full(n, -1, np.int64)
    newrow[rows] = np.arange(len(rows))
    ev = t.events
    strings = np.asarray(t.strings, dtype=object)
    smap = np.fromiter((b.intern(x) for x in t.strings), np.int32, len(t.strings))
    if len(rows):
        b.events(tmap[ev["track"][rows]], smap[ev["name"][rows]], start[rows], ev["dur_ns"][rows],
                 smap[ev["category"][rows]])
    for key, col in t.stats.items():
        sel = keep[col.rows] if len(col.rows) else np.zeros(0, bool)
        if sel.any():
            b.add_stat(key, newrow[col.rows[sel]], col.values[sel])
    # ProfilerStep#N -> step N (and a Steps line when polyprof.step() made none)
    step_ids = [i for i, x in enumerate(t.strings) if x.startswith(STEP_PREFIX)]
    step_local = (np.flatnonzero(np.isin(ev["name"][rows], step_ids)) if step_ids and len(rows)
                  else np.zeros(0, np.int64))
    if len(step_local):
        nums = np.array([_step_num(t.strings[i]) for i in ev["name"][rows[step_local]]], np.int64)
        ok = nums >= 0
        step_local, nums = step_local[ok], nums[ok]
        if len(step_local) and keys.STEP not in t.stats:
            b.add_stat(keys.STEP, step_local, nums)
        if len(step_local) and not host_has_steps:
            src = rows[step_local]
            host = b.plane(keys.HOST_PLANE, "host", pid=pid)
            st = b.track(host, keys.LINE_STEPS, "steps", tid=0, sort_index=-1)
            b.events(st, np.array([f"step {k}" for k in nums], object), start[src], ev["dur_ns"][src],
                     keys.CAT_STEP, stats={keys.STEP: nums})
    fl = t.flows
    if len(fl["src"]):
        ok = keep[fl["src"]] & keep[fl["dst"]]
        if ok.any():
            fcat = strings[fl["category"][ok]]
            for cat in np.unique(fcat):
                m = fcat == cat
                b.flows(newrow[fl["src"][ok][m]], newrow[fl["dst"][ok][m]], fl["id"][ok][m], str(cat))
    c = t.counters
    if len(c["ts_ns"]):
        for nid in np.unique(c["name"]):
            m = c["name"] == nid
            for pl in np.unique(c["plane"][m]):
                mm = m & (c["plane"] == pl)
                b.counter(int(pmap[pl]), t.strings[nid], align.to_host(c["ts_ns"][mm]), c["value"][mm])
    info = {"capture": cap.index, **_describe(align, wall if align is not wall else None), "events": int(len(rows)),
            "dropped_section_copies": int(dropped_copies), "sync_markers": int(len(sync_rows))}
    if t.metadata.get("warnings"):
        b.metadata["warnings"] = [f"torch: {w}" for w in t.metadata["warnings"]]
    b.metadata["torch"] = {k: v for k, v in t.metadata.items()
                           if k in ("deviceProperties", "distributedInfo", "schemaVersion", "trace_id",
                                    "baseTimeNanoseconds", "displayTimeUnit", "host_name",
                                    "rank", "world_size", "backend")}
    return b.build(), info


def _step_num(name: str) -> int:
    try:
        return int(name[len(STEP_PREFIX):])
    except ValueError:
        return -1


def _mirror_rows(t: Trace, names: np.ndarray, start: np.ndarray, mirrors: list[tuple[int, str, int, int]],
                 unc: int, host_planes: set[int], track_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of torch's copies of polyprof sections: user_annotation ranges with the
    section's name, on its thread, starting inside the bracket of the mirror call;
    with the (before, after) bracket each one matched."""
    cats = t.categories()
    cand = np.flatnonzero(np.isin(cats, _ANNOTATION_CATEGORIES))
    if not len(cand):
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    tr = t.events["track"][cand]
    on_host = np.isin(t.track_plane[tr], list(host_planes))
    cand = cand[on_host]
    groups: dict[tuple[int, str], list[int]] = {}
    tids = track_tid[t.events["track"][cand]]
    for row, tid, nm in zip(cand.tolist(), tids.tolist(), names[cand].tolist()):
        groups.setdefault((tid, nm), []).append(row)
    slack = 2 * unc + 20_000
    drop: list[int] = []
    matched: list[tuple[int, int]] = []
    by_group: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for tid, nm, a, bb in mirrors:
        by_group.setdefault((tid, nm), []).append((a, bb))
    for key, brackets in by_group.items():
        rows = groups.get(key)
        if not rows:
            continue
        rows_arr = np.asarray(rows, np.int64)
        order = np.argsort(start[rows_arr], kind="stable")
        rows_arr = rows_arr[order]
        st = start[rows_arr]
        used = np.zeros(len(rows_arr), bool)
        for a, bb in sorted(brackets):
            i = int(np.searchsorted(st, a - slack))
            while i < len(st) and st[i] <= bb + slack:
                if not used[i]:
                    used[i] = True
                    drop.append(int(rows_arr[i]))
                    matched.append((a, bb))
                    break
                i += 1
    return np.asarray(drop, np.int64), np.asarray(matched, np.int64).reshape(-1, 2)
