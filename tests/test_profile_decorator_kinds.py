"""``@polyprof.profile(...)`` on an ``async def``, a generator function or an async
generator function profiles each call over its whole run and keeps the function's kind
(collect/profiled.py). Before, the wrapper was a plain function: the session stopped
when the coroutine or generator object was made, before its body ran, both traces held
0 events, and ``inspect.iscoroutinefunction`` said False."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path

import pytest

import polyprof


def _names(trace: polyprof.Trace) -> list[str]:
    return sorted(trace.to_pandas()["name"].tolist())


def test_a_coroutine_function_is_profiled_over_its_run(tmp_path: Path) -> None:
    out = tmp_path / "a.polyprof"

    @polyprof.profile(plugins=["host"], output=str(out))
    async def main(x: int) -> int:
        with polyprof.section("inside"):
            await asyncio.sleep(0.05)
        return x + 1

    assert inspect.iscoroutinefunction(main)
    assert main.__name__ == "main" and main.trace is None
    assert asyncio.run(main(6)) == 7
    assert _names(main.trace) == ["inside"]
    assert _names(polyprof.load(out)) == ["inside"]
    dur = main.trace.to_pandas()["dur_ns"].iloc[0]
    assert dur >= 40_000_000


def test_a_coroutines_exception_still_leaves_its_trace(tmp_path: Path) -> None:
    @polyprof.profile(plugins=["host"])
    async def fails() -> None:
        with polyprof.section("before"):
            await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(fails())
    assert _names(fails.trace) == ["before"]


def test_a_generator_function_is_profiled_until_it_ends(tmp_path: Path) -> None:
    out = tmp_path / "g.polyprof"

    @polyprof.profile(plugins=["host"], output=str(out))
    def gen(n: int):
        for i in range(n):
            with polyprof.section(f"item{i}"):
                time.sleep(0.01)
            got = yield i
            if got is not None:
                yield got
        return "done"

    assert inspect.isgeneratorfunction(gen)
    assert list(gen(2)) == [0, 1]
    assert _names(gen.trace) == ["item0", "item1"]
    assert _names(polyprof.load(out)) == ["item0", "item1"]
    g = gen(1)  # send() and the return value go through
    assert next(g) == 0 and g.send("x") == "x"
    with pytest.raises(StopIteration) as stop:
        next(g)
    assert stop.value.value == "done"


def test_a_generator_closed_early_ends_its_session() -> None:
    @polyprof.profile(plugins=["host"])
    def gen():
        with polyprof.section("first"):
            pass
        yield 1
        with polyprof.section("never"):
            pass
        yield 2

    g = gen()
    assert next(g) == 1
    assert polyprof.collect.session.active_session() is not None
    g.close()
    assert polyprof.collect.session.active_session() is None
    assert _names(gen.trace) == ["first"]


def test_an_async_generator_function_is_profiled_until_it_ends(tmp_path: Path) -> None:
    @polyprof.profile(plugins=["host"])
    async def agen(n: int):
        for i in range(n):
            with polyprof.section(f"a{i}"):
                await asyncio.sleep(0.01)
            yield i

    assert inspect.isasyncgenfunction(agen)

    async def consume() -> list[int]:
        return [i async for i in agen(3)]

    assert asyncio.run(consume()) == [0, 1, 2]
    assert _names(agen.trace) == ["a0", "a1", "a2"]


def test_each_call_has_its_own_session_and_a_plain_function_is_unchanged() -> None:
    @polyprof.profile(plugins=["host"])
    async def co(name: str) -> str:
        with polyprof.section(name):
            await asyncio.sleep(0)
        return name

    asyncio.run(co("one"))
    first = co.trace
    asyncio.run(co("two"))
    assert _names(first) == ["one"] and _names(co.trace) == ["two"]

    @polyprof.profile(plugins=["host"])
    def plain() -> int:
        with polyprof.section("p"):
            pass
        return 3

    assert not inspect.iscoroutinefunction(plain) and not inspect.isgeneratorfunction(plain)
    assert plain() == 3 and _names(plain.trace) == ["p"]
