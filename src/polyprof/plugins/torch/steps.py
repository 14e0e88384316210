"""Steps of a torch program that never calls ``polyprof.step()``: each ``step()`` of the
first optimizer that steps ends a step (torch's global optimizer step post-hook, which
Lightning's loops go through too), so a session's schedule or time window follows an
unmodified training script. A second optimizer of the same step (GANs) is not counted
again. The detected steps are kept apart from the program's own
(:func:`polyprof.collect.recorder.auto_step`): once the program calls
``polyprof.step()``, those count. Off with the torch plugin option ``auto_steps=False``.
"""

from __future__ import annotations

import importlib
import weakref
from typing import Any, Callable

from ...collect import recorder as rec_mod
from ...lowlevel.unseen import quiet
from .hooks import imported_torch


class OptimizerSteps:
    """The hook on torch's optimizers, registered once torch is imported."""

    def __init__(self, enabled: Callable[[], bool], on: bool, warn: Callable[[str], None]):
        self._enabled = enabled  # False while polyprof.torch.profile's prof.step() counts the steps
        self._on = on
        self._warn = warn
        self._hook: Any = None
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

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
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
        hook, self._hook = self._hook, None
        if hook is not None:
            try:
                hook.remove()
            except Exception:  # noqa: BLE001
                pass
