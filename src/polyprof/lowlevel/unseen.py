"""polyprof's work kept out of sight of the program's own profilers
(``torch.profiler.profile(with_stack=True)``, cProfile, anything built on
``sys.setprofile``), through the compiled ``_unseen`` (docs/torch.md, "with_stack").

A Python profile function is called for every Python frame of every thread state it is
installed on, and for every call of a built-in function made from Python code. torch's
tracer installs itself on every thread state it finds when it starts, and records the
frames already open there as calls. So:

* :data:`Quiet` ``(fn, then=None, failed=None)`` — a callable that is not a built-in
  function, so the eval loop reports no call of it; it runs ``fn`` with the calling
  thread's profile function off, and then, with ``then``, calls ``then`` with it on (a
  hook that must let the program's own work be seen); if ``then`` raises, ``failed``
  runs unseen before the exception goes on. For polyprof's hooks on the program's threads (the
  optimizer step hook, the import hook).
* :data:`Gated` ``(fn)`` — ``fn`` called while no :data:`Ticker` thread has a thread
  state: wrapped around the start of a profiler that walks the thread states.
* :data:`Ticker` ``(fn, first_s)`` — a native thread that waits holding no thread state
  and makes one only while it calls ``fn`` (collect/background.py); out of memory, it
  skips or retries the call and counts it (:data:`memory_errors`) instead of crashing
  or printing.
* :data:`exec_frameless` ``(code, globals)`` — ``exec`` with no frame beneath the code's,
  so the script of ``polyprof run`` is the bottom of its stack as under ``python``.

Without the compiled module (no C compiler, CPython outside 3.11–3.13, or
``POLYPROF_PURE_PYTHON=1``) these are None and callers keep their Python ways
(``IMPLEMENTATION`` says which): polyprof then shows in such profiles as docs/torch.md says.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Callable, TypeVar, cast

from .fork import in_child

if TYPE_CHECKING:
    from types import CodeType

Quiet: Callable[..., Callable[..., object]] | None = None
Gated: Callable[[Callable[..., object]], Callable[..., object]] | None = None
Ticker: Callable[..., object] | None = None
exec_frameless: Callable[[CodeType, dict[str, object]], object] | None = None
#: ``memory_errors()``: the Ticker calls skipped or failed for want of memory so far
memory_errors: Callable[[], int] | None = None

if os.environ.get("POLYPROF_PURE_PYTHON", "") in ("", "0"):
    try:
        from . import _unseen  # type: ignore[attr-defined]  # the optional compiled module (POLYPROF_PURE_PYTHON)
    except ImportError:
        pass
    else:
        Quiet, Gated, Ticker, exec_frameless = _unseen.Quiet, _unseen.Gated, _unseen.Ticker, _unseen.exec_frameless
        memory_errors = getattr(_unseen, "memory_errors", None)  # None in a module built before it
        in_child(_unseen.after_fork_in_child)  # the parent's thread may have held the gate

IMPLEMENTATION = "c" if Quiet is not None else "python"

F = TypeVar("F", bound=Callable[..., object])


def quiet(fn: F, then: F | None = None, failed: F | None = None) -> F:
    """``fn`` unseen by the calling thread's profile function (then ``then`` seen, and
    its result returned; ``failed`` unseen if ``then`` raises), or, without the compiled
    module, a plain function doing the same in sight. Put in ``then``'s place, it looks
    like ``then``: its name, qualified name, module, ``__wrapped__`` (its signature) and
    pickling by reference."""
    if Quiet is not None:
        return cast(F, Quiet(fn, then, failed))
    if then is None:
        return fn
    after, undo = then, failed

    def both(*args: object, **kw: object) -> object:
        fn(*args, **kw)
        if undo is None:
            return after(*args, **kw)
        try:
            return after(*args, **kw)
        except BaseException:
            undo(*args, **kw)
            raise

    return cast(F, functools.update_wrapper(both, after))  # looks like ``then``, as Quiet does


def gated(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn`` called only while no polyprof background thread holds a thread state
    (``fn`` itself if it is gated already)."""
    if Gated is None or is_gated(fn):
        return fn
    return Gated(fn)


def is_gated(fn: object) -> bool:
    return type(fn).__name__ == "Gated" and type(fn).__module__ == "polyprof.lowlevel._unseen"
