"""A function with each of its calls run inside a fresh context manager, over the call's
whole run: what ``@polyprof.section`` (a section per call, collect/pysection.py) and
``@polyprof.profile`` (a session per call, collect/profiled.py) are on a function.

On an ``async def``, a generator function or an async generator function, the context
covers the body's run, not the creation of its coroutine or generator: it is entered
when the body first runs (the first ``await``, ``next()``, ``send()`` or ``async for``
step) and left when the body completes (returns, raises, or is closed). The wrapper
keeps the function's kind (``inspect.iscoroutinefunction``, ``isgeneratorfunction``,
``isasyncgenfunction`` still say so) and, through ``functools.wraps``, its name and doc.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import AsyncGenerator, Generator
from typing import Any, Callable, ContextManager, TypeVar

F = TypeVar("F", bound=Callable[..., object])
CM = TypeVar("CM", bound=ContextManager[Any])


def each_call(fn: F, make: Callable[[], CM], after: Callable[[CM], None] | None = None) -> F:
    """``fn`` with each call run inside ``make()`` (a fresh context manager per call);
    ``after(cm)`` once the call has ended, however it ended. A ``staticmethod`` or
    ``classmethod`` (the decorator written above it) stays one, its function wrapped."""
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(each_call(fn.__func__, make, after))  # type: ignore[return-value]

    def ended(cm: CM) -> None:
        if after is not None:
            after(cm)

    out: Any
    if inspect.iscoroutinefunction(fn):
        async def coroutine(*args: object, **kwargs: object) -> object:
            cm = make()
            try:
                with cm:
                    return await fn(*args, **kwargs)  # type: ignore[misc]
            finally:
                ended(cm)

        out = coroutine
    elif inspect.isasyncgenfunction(fn):
        out = _async_generator(fn, make, ended)
    elif inspect.isgeneratorfunction(fn):
        def generator(*args: object, **kwargs: object) -> Generator[object, object, object]:
            cm = make()
            try:
                with _Held(cm):
                    return (yield from fn(*args, **kwargs))  # type: ignore[misc]
            finally:
                ended(cm)

        out = generator
    else:
        def plain(*args: object, **kwargs: object) -> object:
            cm = make()
            try:
                with cm:
                    return fn(*args, **kwargs)
            finally:
                ended(cm)

        out = plain
    return functools.wraps(fn)(out)  # type: ignore[return-value]


def _async_generator(fn: Callable[..., AsyncGenerator[object, object]], make: Callable[[], CM],
                     ended: Callable[[CM], None]) -> Callable[..., AsyncGenerator[object, object]]:
    """An async generator that forwards asend/athrow/aclose to ``fn``'s (the async
    counterpart of ``yield from``) inside one ``make()``."""

    async def agen(*args: object, **kwargs: object) -> AsyncGenerator[object, object]:
        inner = fn(*args, **kwargs)
        cm = make()
        try:
            with _Held(cm):
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
            ended(cm)

    return agen


class _Held:
    """``cm`` entered where a generator's body starts and left on whichever thread it
    ends: a generator resumed by another thread (a prefetching data loader) ends there,
    and a section's ``__exit__`` leaves another thread's opening alone, where its
    ``end()`` (the one of ``begin()``/``end()``) closes it."""

    __slots__ = ("cm", "tid")

    def __init__(self, cm: ContextManager[Any]) -> None:
        self.cm = cm
        self.tid = 0

    def __enter__(self) -> object:
        self.tid = threading.get_ident()
        return self.cm.__enter__()

    def __exit__(self, *exc: Any) -> bool | None:
        end = getattr(self.cm, "end", None)
        if threading.get_ident() != self.tid and callable(end):
            end()
            return None
        return self.cm.__exit__(*exc)
