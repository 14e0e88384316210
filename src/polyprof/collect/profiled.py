"""``@polyprof.profile(...)`` on a function: each call runs in a session of its own
(collect/session.py ``Session.__call__``), its trace kept as the function's ``.trace``.

On an ``async def``, a generator function or an async generator function, the session
covers the call's whole run, not the creation of its coroutine or generator: it starts
when the body first runs (the first ``await``, ``next()``, ``send()`` or ``async for``
step) and stops when the body completes (returns, raises, or is closed), saving its
trace then. The decorated function keeps its kind (``inspect.iscoroutinefunction``,
``isgeneratorfunction``, ``isasyncgenfunction`` still say so), as ``@polyprof.section``
does (collect/each_call.py, which both use). Before, the wrapper was a plain function: the
session stopped as soon as the coroutine or generator object was made, before any of its
body ran, and both traces held 0 events, said nowhere.

A generator's session stays open while it is suspended at a ``yield`` (what the caller
does between two items is recorded too: the session records the process, not one frame).
Two calls that run at once (two asyncio tasks) nest, the later one in the earlier
(collect/nested.py), as any two sessions do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .each_call import each_call

if TYPE_CHECKING:
    from .session import Session

F = TypeVar("F", bound=Callable[..., object])


def wrap(new: Callable[[], "Session"], fn: F) -> F:
    """``fn`` profiled in a session from ``new()`` at each call (collect/each_call.py);
    the last call's trace is the result's ``.trace`` (None until a call has ended)."""
    out: Any = None

    def ended(s: "Session") -> None:
        out.trace = s.trace

    out = each_call(fn, new, ended)
    out.trace = None
    return out  # type: ignore[no-any-return]
