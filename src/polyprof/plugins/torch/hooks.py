"""What the torch plugin needs of torch before and while it records: torch if the
program imported it, torch's cheapest range calls, and a hook that runs once torch is
imported (so a program that never imports torch pays nothing for it)."""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from ...collect.importhook import ImportHook, importing
from ...lowlevel import unseen

log = logging.getLogger("polyprof")

__all__ = ["ImportHook", "Ranges", "default_activities", "gate_profiler_start", "imported_torch", "profiler_starts",
           "recording_survived"]

#: the wrappers gate_profiler_start put on torch's ``_prepare_profiler`` and
#: ``_run_on_profiler_stop`` (each put there once)
_prepare_gate: list[Any] = []
_stop_gate: list[Any] = []
#: the gates _gate_objects put on ``start``/``stop`` of torch's profile classes
_object_gates: list[Any] = []
_wrapped: set[Any] = set()


def imported_torch() -> Any | None:
    """torch if the program already imported it (never imports it ourselves); None while
    that import still runs (on another thread: a capture started during the program's
    ``import torch``), which the plugin's ImportHook then follows to its end: a profiler
    started on a half-imported torch from the session's thread could fail, or wait on
    the import's lock."""
    mod = sys.modules.get("torch")
    return mod if mod is not None and hasattr(mod, "profiler") and not importing(mod) else None


def gate_profiler_start(before_prepare: Callable[[], None] | None = None,
                        after_stop: Callable[[], None] | None = None,
                        prepare_failed: Callable[[], None] | None = None,
                        objects: tuple[Callable[[Any], None], Callable[[Any], None], Callable[[Any], None]] | None = None,
                        ) -> None:
    """Gate the start of every torch profiler (``torch.autograd.profiler._enable_profiler``,
    where torch's Python tracer installs itself on every thread state and records the
    frames open there) so that it never runs while a polyprof background thread holds a
    thread state (collect/background.py): a program's own ``with_stack=True`` profile
    never lists polyprof's threads. The call itself is not seen: no profile function is
    on yet when it is made, and the gate is not a built-in function whose return the
    tracer would record. With ``before_prepare``, that runs before any torch profiler is
    prepared (:func:`_gate_prepare`; ``prepare_failed`` if the preparation raises), with
    ``after_stop``, after any torch profiler stopped (:func:`_gate_stop`); with
    ``objects``, the program's profile objects are followed too (:func:`_gate_objects`)."""
    mod = sys.modules.get("torch.autograd.profiler")
    fn = getattr(mod, "_enable_profiler", None)
    if fn is not None and unseen.Gated is not None and not unseen.is_gated(fn):
        mod._enable_profiler = unseen.gated(fn)  # type: ignore[union-attr]  # mod is not None: fn came from it
    if before_prepare is not None:
        _gate_prepare(mod, before_prepare, prepare_failed)
    if after_stop is not None:
        _gate_stop(mod, after_stop)
    if objects is not None:
        _gate_objects(*objects)


def _logged(what: str, fn: Callable[[], None]) -> Callable[..., None]:
    """``fn`` taking (and ignoring) torch's arguments; an error in it is logged, never
    raised into the program's profiler."""

    def call(*_args: Any, **_kw: Any) -> None:
        try:
            fn()
        except Exception as e:  # the program's profiler goes on anyway
            log.warning("plugin torch: %s failed: %s: %s", what, type(e).__name__, e)

    return call


def _gate_prepare(mod: Any, before: Callable[[], None], failed: Callable[[], None] | None) -> None:
    """Call ``before`` ahead of every torch profiler's preparation (``_prepare_profiler``,
    which ``torch.profiler.profile`` and ``torch.autograd.profiler.profile`` call before
    they start), and ``failed`` if it raises, unseen by any profile function."""
    fn = getattr(mod, "_prepare_profiler", None)
    if fn is None or (_prepare_gate and fn is _prepare_gate[0]):
        return
    undo = _logged("hand-over", failed) if failed is not None else None
    _prepare_gate[:] = [unseen.quiet(_logged("hand-over", before), then=fn, failed=undo)]
    mod._prepare_profiler = _prepare_gate[0]


def _gate_stop(mod: Any, after: Callable[[], None]) -> None:
    """Call ``after`` once every torch profiler has stopped: torch's
    ``_run_on_profiler_stop`` (called right after ``_disable_profiler`` by
    ``torch.autograd.profiler.profile.__exit__``, so by every ``torch.profiler.profile``'s
    ``stop()`` and its schedule's end of a cycle, and by ``emit_nvtx``/``emit_itt``) runs
    first, then ``after``, both unseen by any profile function (no torch tracer is on any
    more there; a program's own ``sys.setprofile`` function does not see them either)."""
    fn = getattr(mod, "_run_on_profiler_stop", None)
    if fn is None or (_stop_gate and fn is _stop_gate[0]):
        return
    _stop_gate[:] = [unseen.quiet(fn, then=unseen.quiet(_logged("restart after the program's profiler", after)))]
    mod._run_on_profiler_stop = _stop_gate[0]


def _gate_objects(started: Callable[[Any], None], start_failed: Callable[[Any], None],
                  stopping: Callable[[Any], None]) -> None:
    """Call ``started(obj)`` ahead of every ``start()`` of a ``torch.profiler.profile``
    (and of its base ``_KinetoProfile``: ``__enter__`` calls it), ``start_failed(obj)``
    if it raises, and ``stopping(obj)`` ahead of every ``stop()`` (``__exit__``), all
    unseen by any profile function, the methods themselves seen as without polyprof. A
    profile object with a schedule prepares and stops a low-level profiler in each of its
    cycles (handover.py follows the object, not its cycles)."""
    mod = sys.modules.get("torch.profiler.profiler")
    if mod is None:
        return
    if not _object_gates:
        _object_gates[:] = [_logged_obj("hand-over", started), _logged_obj("hand-over", start_failed),
                            _logged_obj("hand-over", stopping)]
    on_start, on_failed, on_stop = _object_gates
    for name in ("_KinetoProfile", "profile"):
        cls = getattr(mod, name, None)
        for meth, wrap in (("start", lambda fn: unseen.quiet(on_start, then=fn, failed=on_failed)),
                           ("stop", lambda fn: unseen.quiet(on_stop, then=fn))):
            fn = None if cls is None else cls.__dict__.get(meth)
            if fn is None or fn in _wrapped:
                continue
            gate = wrap(fn)
            _wrapped.add(gate)
            setattr(cls, meth, gate)


def _logged_obj(what: str, fn: Callable[[Any], None]) -> Callable[..., None]:
    """``fn(obj)`` for a method gate (``obj``: the profile object); an error in it is
    logged, never raised into the program's profiler."""

    def call(obj: Any, *_args: Any, **_kw: Any) -> None:
        try:
            fn(obj)
        except Exception as e:  # the program's profiler goes on anyway
            log.warning("plugin torch: %s failed: %s: %s", what, type(e).__name__, e)

    return call


def profiler_starts() -> int | None:
    """How many torch profilers have started since :func:`gate_profiler_start` (None: not
    counted): one that started after ours (the program's own) ended ours."""
    fn = getattr(sys.modules.get("torch.autograd.profiler"), "_enable_profiler", None)
    if fn is None or not unseen.is_gated(fn):
        return None
    return int(fn.calls)


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


class Ranges:
    """Open/close torch ``user_annotation`` ranges as cheaply as torch allows.

    ``torch._C._autograd._record_function_with_args_enter`` is cheap and records
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
