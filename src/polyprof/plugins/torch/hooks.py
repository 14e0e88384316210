"""What the torch plugin needs of torch before and while it records: torch if the
program imported it, torch's cheapest range calls, and a hook that runs once torch is
imported (so a program that never imports torch pays nothing for it)."""

from __future__ import annotations

import importlib.abc
import logging
import sys
from typing import Any

log = logging.getLogger("polyprof")


def imported_torch() -> Any | None:
    """torch if the program already imported it (never imports it ourselves)."""
    mod = sys.modules.get("torch")
    return mod if mod is not None and hasattr(mod, "profiler") else None


class Ranges:
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


class ImportHook(importlib.abc.MetaPathFinder):
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
