"""Start a plugin when the program imports the module it profiles (torch, pyopencl):
until then the plugin costs the program nothing."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Callable, Sequence

from ..lowlevel.unseen import quiet

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

log = logging.getLogger("polyprof")


class ImportHook:
    """Runs ``callback`` right after the program finishes importing ``module``, so a
    default session profiles torch or pyopencl without making programs that never
    import them pay for it (installed first in ``sys.meta_path`` by the plugin).

    A meta path finder by its methods (``importlib.abc.MetaPathFinder`` as a base
    imports importlib.resources in every run). Its ``find_spec`` is unseen by the
    program's profilers (lowlevel/unseen.py), and it leaves ``sys.meta_path`` once its
    module is imported."""

    def __init__(self, module: str, callback: Callable[[], None]):
        self.module = module
        self.callback = callback
        self._busy = False
        self.find_spec = quiet(self._find_spec)  # importlib calls finder.find_spec(...)

    def _find_spec(self, fullname: str, path: Sequence[str] | None,
                   target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.module or self._busy:
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
        callback, name = self.callback, self.module

        def exec_module(module: ModuleType) -> None:
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            self.remove()  # its work is done: later imports do not pass through it
            try:
                callback()
            except Exception as e:  # never break the user's import
                log.warning("the %s plugin could not start after import: %s", name, e)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return spec
        return spec

    def invalidate_caches(self) -> None:
        """Nothing cached (``importlib.invalidate_caches()`` calls it)."""

    def install(self) -> "ImportHook":
        sys.meta_path.insert(0, self)
        return self

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
