"""``@polyprof.profile(...)`` on a function: each call runs in a session of its own
(collect/session.py ``Session.__call__``), its trace kept as the function's ``.trace``.

On an ``async def``, a generator function or an async generator function, the session
covers the call's whole run, not the creation of its coroutine or generator: it starts
when the body first runs (the first ``await``, ``next()``, ``send()`` or ``async for``
step) and stops when the body completes (returns, raises, or is closed), saving its
trace then. The decorated function keeps its kind (``inspect.iscoroutinefunction``,
``isgeneratorfunction``, ``isasyncgenfunction`` still say so), as ``@polyprof.section``
does (collect/pysection.py ``decorate``). Before, the wrapper was a plain function: the
session stopped as soon as the coroutine or generator object was made, before any of its
body ran, and both traces held 0 events, said nowhere.

A generator's session stays open while it is suspended at a ``yield`` (what the caller
does between two items is recorded too: the session records the process, not one frame).
Two calls that run at once (two asyncio tasks) nest, the later one in the earlier
(collect/nested.py), as any two sessions do.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, AsyncGenerator, Callable, Generator, TypeVar

if TYPE_CHECKING:
    from .session import Session

F = TypeVar("F", bound=Callable[..., object])


def wrap(new: Callable[[], "Session"], fn: F) -> F:
    """``fn`` profiled in a session from ``new()`` at each call; the last call's trace is
    the result's ``.trace`` (None until a call has ended)."""
    out: Any
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def coroutine(*args: object, **kwargs: object) -> object:
            s = new()
            try:
                with s:
                    return await fn(*args, **kwargs)  # type: ignore[misc]
            finally:
                coroutine.trace = s.trace  # type: ignore[attr-defined]

        out = coroutine
    elif inspect.isasyncgenfunction(fn):
        out = functools.wraps(fn)(_async_generator(new, fn))
    elif inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args: object, **kwargs: object) -> Generator[object, object, object]:
            s = new()
            try:
                with s:
                    return (yield from fn(*args, **kwargs))  # type: ignore[misc]
            finally:
                generator.trace = s.trace  # type: ignore[attr-defined]

        out = generator
    else:
        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> object:
            s = new()
            try:
                with s:
                    return fn(*args, **kwargs)
            finally:
                wrapper.trace = s.trace  # type: ignore[attr-defined]

        out = wrapper
    out.trace = None
    return out  # type: ignore[no-any-return]


def _async_generator(new: Callable[[], "Session"],
                     fn: Callable[..., AsyncGenerator[object, object]]) -> Callable[..., AsyncGenerator[object, object]]:
    """An async generator that forwards asend/athrow/aclose to ``fn``'s (the async
    counterpart of ``yield from``) inside one session."""

    async def agen(*args: object, **kwargs: object) -> AsyncGenerator[object, object]:
        inner = fn(*args, **kwargs)
        s = new()
        try:
            with s:
                try:
                    value = await inner.__anext__()
                except StopAsyncIteration:
                    return
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        await inner.aclose()
                        raise
                    except BaseException as e:  # noqa: BLE001 - thrown in by the caller: hand it on
                        try:
                            value = await inner.athrow(e)
                        except StopAsyncIteration:
                            return
                    else:
                        try:
                            value = await inner.asend(sent)
                        except StopAsyncIteration:
                            return
        finally:
            agen.trace = s.trace  # type: ignore[attr-defined]

    return agen
