"""Steps of a torch program that never calls ``polyprof.step()``: each ``step()`` of the
first optimizer that steps ends a step (torch's global optimizer step post-hook, which
Lightning's loops go through too), so a session's schedule or time window follows an
unmodified training script. A second optimizer of the same step (GANs) is not counted
again. The detected steps are kept apart from the program's own
(:func:`polyprof.collect.recorder.auto_step`): once the program calls
``polyprof.step()``, those count. Off with the torch plugin option ``auto_steps=False``.

An optimizer step marks where a step ends; where the first one begins is said apart
(collect/steps.py ``work_begins``): at the end of ``import torch`` (or the session's
start, torch imported before it), then at the first call of any ``nn.Module`` (a global
forward pre-hook, removed at that call: the modules' calls take torch's fast path again
from then on). So under ``polyprof run`` step 0 runs from the training's first forward to
the first optimizer step, not from the session's start through the imports; what ran
before it (the set-up) is in no step. A dummy forward long before training (shape
inference) makes step 0 start there.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
import weakref
from typing import Any, Callable

from ...collect import recorder as rec_mod
from ...collect import steps as step_rules
from ...collect.clock import now_ns
from ...lowlevel.unseen import quiet
from .hooks import imported_torch


class OptimizerSteps:
    """The hook on torch's optimizers, registered once torch is imported."""

    def __init__(self, enabled: Callable[[], bool], on: bool, warn: Callable[[str], None]):
        self._enabled = enabled  # False while polyprof.torch.profile's prof.step() counts the steps
        self._on = on
        self._warn = warn
        self._hook: Any = None
        self._forward: Any = None  # the one-shot forward pre-hook (where step 0's work begins)
        self._quiet: Any = None  # the warnings filter that keeps torch quiet about it (while it is there)
        self._owner: Any = None  # weakref to the optimizer whose steps are counted

    def watch(self) -> None:
        if self._hook is not None or not self._on or imported_torch() is None:
            return
        try:  # torch.optim.optimizer is imported with torch (not an attribute of torch.optim in 2.13)
            register = getattr(importlib.import_module("torch.optim.optimizer"), "register_optimizer_step_post_hook",
                               None)
            if register is None:  # torch < 2.0
                return
            # unseen by the program's own profilers (torch with_stack, cProfile): lowlevel/unseen.py
            self._hook = register(quiet(self._stepped))
        except Exception as e:  # noqa: BLE001 - reported; the program goes on
            self._warn(f"cannot follow optimizer steps: {type(e).__name__}: {e}")
            return
        self._begins()  # torch is imported: no step's work began before this
        forward = getattr(sys.modules.get("torch.nn.modules.module"), "register_module_forward_pre_hook", None)
        if forward is not None and not _program_profiles():
            try:
                self._forward = forward(_eager_only(quiet(self._first_forward)))
                self._quiet = _quiet_compile_warning()
            except Exception:  # noqa: BLE001 - step 0 then begins at the import's end
                self._forward = None

    def _begins(self) -> None:
        rec = rec_mod.active_recorder()
        if rec is not None and self._enabled():
            step_rules.work_begins(rec, now_ns())

    def _first_forward(self, module: Any, args: Any) -> None:
        """The first ``nn.Module`` call: the first step's work begins (then the hook goes)."""
        try:
            self._begins()
        except Exception:  # noqa: BLE001 - never into the program's forward
            pass
        self._drop_forward()

    def program_profiles(self) -> None:
        """The program's own torch profiler is about to record (handover.py): the forward
        hook goes, unused. A module call with a global hook takes torch's slow path, whose
        frames (``inner``, ``is_compiling``) that profiler's ``with_stack`` would list."""
        self._drop_forward()

    def _drop_forward(self) -> None:
        entry, self._quiet = self._quiet, None
        if entry is not None:
            with contextlib.suppress(ValueError):  # (the program reset the filters meanwhile)
                warnings.filters.remove(entry)  # type: ignore[attr-defined]
                warnings._filters_mutated()  # type: ignore[attr-defined]
        hook, self._forward = self._forward, None
        if hook is not None:
            try:  # torch calls the global hooks from a copy of their dict: removing one in it is safe
                hook.remove()
            except Exception:  # noqa: BLE001
                pass

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._forward is not None:  # a step with no module call before it (functional code)
            self._drop_forward()
        try:
            if not self._enabled():
                return
            if self._owner is None:
                self._owner = weakref.ref(optimizer)
            elif self._owner() is not optimizer:
                return  # a second optimizer of the same step
            rec_mod.auto_step()
        except Exception:  # noqa: BLE001 - never into the program's optimizer step
            pass

    def unwatch(self) -> None:
        self._drop_forward()
        hook, self._hook = self._hook, None
        if hook is not None:
            try:
                hook.remove()
            except Exception:  # noqa: BLE001
                pass


def _program_profiles() -> bool:
    """Whether a torch profiler (the program's: the session's starts after this) records now."""
    try:
        return bool(sys.modules["torch"]._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 - cannot tell: as if one did (no hook)
        return True


def _eager_only(hook: Any) -> Any:
    """``hook`` as a plain Python function that does nothing while Dynamo traces (a module
    first called inside ``torch.compile``): Dynamo cannot trace the C ``quiet`` wrapper,
    and broke the graph there (``fullgraph=True``: an error; else the model ran
    uncompiled). Outside compilation the hook runs at the next eager module call."""
    compiler = getattr(sys.modules.get("torch"), "compiler", None)
    compiling = getattr(compiler, "is_compiling", None)
    if compiling is None:
        return hook

    def pre(module: Any, args: Any) -> None:
        if compiling():
            return
        hook(module, args)

    return pre


#: what torch says when a compiled module is called while a global module hook is there
#: (torch/_dynamo/eval_frame.py): ours until the first module call, never the program's
_COMPILE_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"


def _quiet_compile_warning() -> Any:
    """A filter that ignores torch's warning about global module hooks, first in
    ``warnings.filters``; the entry, which :meth:`_drop_forward` removes with the hook.
    Only while our hook is there: a program's own global hook is warned about at its
    compiled module's next call (an ignored warning is not recorded as shown)."""
    warnings.filterwarnings("ignore", message=_COMPILE_WARNING, category=UserWarning)
    return warnings.filters[0]
