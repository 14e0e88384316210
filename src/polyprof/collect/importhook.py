"""Start a plugin when the program imports the module it profiles (torch, pyopencl):
until then the plugin costs the program nothing."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..lowlevel.unseen import quiet

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

log = logging.getLogger("polyprof")


def importing(module: object) -> bool:
    """Whether ``module`` (from ``sys.modules``) is still being imported: importlib marks
    its spec initialised only once its code has run (``spec._initializing``, what
    importlib itself asks before it waits for another thread's import)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def imported(name: str) -> bool:
    """Whether the program has imported ``name`` to its end (in ``sys.modules`` and not
    still :func:`importing` on another thread: an :class:`ImportHook` follows that one)."""
    mod = sys.modules.get(name)
    return mod is not None and not importing(mod)


class ImportHook:
    """Runs ``callback`` right after the program finishes importing ``module``, so a
    default session profiles torch or pyopencl without making programs that never
    import them pay for it (installed first in ``sys.meta_path`` by the plugin).

    A meta path finder by its methods (``importlib.abc.MetaPathFinder`` as a base
    imports importlib.resources in every run). Its ``find_spec`` is unseen by the
    program's profilers (lowlevel/unseen.py), and it leaves ``sys.meta_path`` once its
    module is imported.

    The callback runs on the importing thread once importlib marks the module's spec
    initialised (:meth:`_watch`), the import's last step: the module is then complete
    for every thread (:func:`importing` is False). That also covers an import already
    running when the hook is installed (another thread's ``import torch`` when a capture
    starts): its ``find_spec`` was asked before, and before, the hook waited for an import
    that had begun and so never fired (a capture started during the program's ``import
    torch`` recorded no torch op, and said nothing)."""

    def __init__(self, module: str, callback: Callable[[], None]):
        self.module = module
        self.callback = callback
        self._busy = False
        self._lock = threading.Lock()
        self._fired = False
        self._watched: tuple[Any, type] | None = None  # (spec, its own class) while watched
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

        def exec_module(module: ModuleType) -> None:
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            self.remove()  # its work is done: later imports do not pass through it
            if not self._watch(getattr(module, "__spec__", None)):  # not importlib's import: now
                self._fire()

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return spec
        return spec

    def _watch(self, spec: Any) -> bool:
        """Run the callback as importlib marks ``spec`` initialised (on the importing
        thread; at once if it already is). False where ``spec`` is not being imported."""
        if spec is None or not getattr(spec, "_initializing", False):
            return False
        own = type(spec)
        hook = self

        class Watched(own):  # type: ignore[misc,valid-type]  # the spec's class, one assignment watched
            __slots__ = ()

            def __setattr__(self, name: str, value: Any) -> None:
                super().__setattr__(name, value)
                if name == "_initializing" and not value:
                    hook._import_ended(self)

        Watched.__name__, Watched.__qualname__ = own.__name__, own.__qualname__  # (its repr unchanged)
        with self._lock:
            if self._fired or self._watched is not None:
                return True
            try:
                spec.__class__ = Watched
            except TypeError:  # a spec class that cannot be watched
                return False
            self._watched = (spec, own)
        if not getattr(spec, "_initializing", False):  # the import ended while the watch was put in place
            self._import_ended(spec)
        return True

    def _unwatch(self) -> None:
        """The spec's own class back (with ``_lock`` held)."""
        watched, self._watched = self._watched, None
        if watched is not None:
            object.__setattr__(watched[0], "__class__", watched[1])

    def _import_ended(self, spec: Any) -> None:
        with self._lock:
            if self._watched is None or self._watched[0] is not spec:
                return
            self._unwatch()
        if self.module not in sys.modules:  # the import failed: a later one passes through find_spec
            return
        self.remove()
        self._fire()

    def _fire(self) -> None:
        """The callback, once; an error in it is logged, never raised into the import."""
        with self._lock:
            if self._fired:
                return
            self._fired = True
        try:
            self.callback()
        except Exception as e:  # never break the user's import
            log.warning("the %s plugin could not start after import: %s", self.module, e)

    def invalidate_caches(self) -> None:
        """Nothing cached (``importlib.invalidate_caches()`` calls it)."""

    def install(self) -> "ImportHook":
        """In ``sys.meta_path`` for the module's next import, and watching the import of
        it that is running now, if any (:func:`importing`)."""
        sys.meta_path.insert(0, self)
        mod = sys.modules.get(self.module)
        if mod is not None and importing(mod):
            log.info("%s is being imported: its plugin starts when that import ends", self.module)
            self._watch(mod.__spec__)
        return self

    def remove(self) -> None:
        """Out of ``sys.meta_path``, and no longer watching an import (a session's stop)."""
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        with self._lock:
            self._unwatch()
