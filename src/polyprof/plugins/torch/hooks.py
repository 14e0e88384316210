"""What the torch plugin needs of torch before and while it records: torch if the
program imported it, torch's cheapest range calls, and a hook that runs once torch is
imported (so a program that never imports torch pays nothing for it)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from ...collect.importhook import ImportHook

log = logging.getLogger("polyprof")

__all__ = ["ImportHook", "Ranges", "imported_torch"]


def imported_torch() -> Any | None:
    """torch if the program already imported it (never imports it ourselves)."""
    mod = sys.modules.get("torch")
    return mod if mod is not None and hasattr(mod, "profiler") else None


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
