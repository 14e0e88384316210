"""The public API at its edges, as scripts and notebooks use it (the sixth audit of the
API, 2026-12-01): counters of one-element arrays, sections over static and class
methods, ``to_pandas(stats=...)``, and sessions that nest across threads and tasks."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import polyprof
from polyprof.errors import SessionError, TraceSchemaError


def _sections(trace: polyprof.Trace) -> list[str]:
    df = trace.to_pandas()
    return sorted(df[df.category == "section"].name.astype(str))


def test_counter_takes_one_element_arrays_and_names_a_bad_value() -> None:
    with polyprof.profile(plugins=["host"]) as p:
        polyprof.counter("loss", np.array([0.5]))  # NumPy 2 refuses float() of shape (1,)
        polyprof.counter("grid", np.array([[2.0]]))
        polyprof.counter("scalar", np.float32(3))
        for bad in ("x", None, [1, 2], np.array([1.0, 2.0])):
            with pytest.raises(SessionError, match="counter\\('bad'\\)"):
                polyprof.counter("bad", bad)
    ctr = p.trace.tables()["counters"].to_pandas()
    got = {str(n): float(v) for n, v in zip(ctr["name"], ctr["value"]) if str(n) in ("loss", "grid", "scalar")}
    assert got == {"loss": 0.5, "grid": 2.0, "scalar": 3.0}
    assert "bad" not in set(ctr["name"].astype(str))  # a value that fails records nothing


class _C:
    @polyprof.section("static")
    @staticmethod
    def static(x: int) -> int:
        return x + 1

    @polyprof.section("cls")
    @classmethod
    def cls(cls, x: int) -> tuple[str, int]:
        return cls.__name__, x

    @polyprof.section("async_static")
    @staticmethod
    async def async_static(x: int) -> int:
        await asyncio.sleep(0.02)
        return x


def test_section_over_staticmethod_and_classmethod_keeps_the_program() -> None:
    with polyprof.profile(plugins=["host"]) as p:
        assert _C().static(1) == 2 and _C.static(1) == 2
        assert _C().cls(3) == ("_C", 3) and _C.cls(4) == ("_C", 4)
        assert asyncio.run(_C.async_static(5)) == 5
    assert _sections(p.trace) == ["async_static", "cls", "cls", "static", "static"]
    df = p.trace.to_pandas()
    dur = df[df.name.astype(str) == "async_static"].dur_ns.iloc[0]
    assert dur >= 15e6  # the coroutine's run, not its creation


def test_to_pandas_stats_one_name_and_unknown_names() -> None:
    with polyprof.profile(plugins=["host"]) as p:
        with polyprof.section("a", layer=3):
            pass
    df = p.trace.to_pandas(stats="layer")
    assert "layer" in df.columns and list(df[df.name.astype(str) == "a"].layer) == [3]
    with pytest.raises(TraceSchemaError, match="'lyer'.*layer"):
        p.trace.to_pandas(stats=["lyer"])


def test_nested_session_warns_of_the_plugins_it_cannot_run() -> None:
    outer = polyprof.profile(plugins=["host"]).start()  # a notebook cell that never stopped it
    try:
        with polyprof.profile(plugins=["host", "torch"]) as inner:
            with polyprof.section("s"):
                pass
    finally:
        outer.stop()
    notes = [w["message"] for w in inner.trace.metadata["warnings"]]
    assert any("plugins torch not run" in n and "still active" in n for n in notes), notes


def test_session_nesting_from_another_thread_waits_for_the_outer_start() -> None:
    """Two threads each opening a session: the second nests in the first, and its
    sections reach a recorder that is on (before: its trace held no event at all)."""
    traces: dict[int, polyprof.Trace] = {}
    done = threading.Barrier(2, timeout=60)  # both bodies end before either session stops

    def run(k: int) -> None:
        with polyprof.profile(plugins=["host"]) as p:
            for _ in range(3):
                with polyprof.section(f"t{k}"):
                    time.sleep(0.01)
            done.wait()
        traces[k] = p.trace

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    outer = next(t for t in traces.values() if not t.metadata.get("nested_in"))
    inner = next(t for t in traces.values() if t.metadata.get("nested_in"))
    assert _sections(outer).count("t0") == 3 and _sections(outer).count("t1") == 3
    assert inner.n_events > 0
    mine = "t0" if _sections(inner).count("t0") == 3 else "t1"
    assert _sections(inner).count(mine) == 3  # every section of the nested session's own thread


def test_nested_task_outliving_the_outer_session_is_warned() -> None:
    @polyprof.profile(plugins=["host"])
    async def job(name: str, pause: float) -> None:
        for _ in range(3):
            with polyprof.section(name):
                await asyncio.sleep(pause)

    async def both() -> None:
        await asyncio.gather(job("fast", 0.01), job("slow", 0.03))

    asyncio.run(both())
    notes = [w["message"] for w in job.trace.metadata["warnings"]]  # the last to end: the nested one
    assert any("stopped" in n and "not recorded" in n for n in notes), notes


@pytest.mark.parametrize("kind", ["compiled or default", "python"])
def test_bare_section_decorator_names_the_function(kind: str) -> None:
    from polyprof.collect.pysection import PySection

    sec = polyprof.section if kind != "python" else PySection

    @sec
    def double(x: int) -> int:
        return 2 * x

    class M:
        @sec
        def forward(self) -> int:
            return 7

        @sec
        @staticmethod
        def helper(x: int) -> int:
            return x

    with polyprof.profile(plugins=["host"]) as p:
        assert double(2) == 4 and M().forward() == 7 and M.helper(5) == 5
    names = _sections(p.trace)
    assert any(n.endswith("double") for n in names), names
    assert "test_bare_section_decorator_names_the_function.<locals>.M.forward" in names
    assert any(n.endswith("M.helper") for n in names), names


@pytest.mark.parametrize("kind", ["compiled or default", "python"])
def test_generator_section_ends_on_the_thread_that_finishes_it(kind: str) -> None:
    """A loader started on the main thread and drained by a prefetch thread: its
    section is recorded (before: dropped, its __exit__ on another thread ignored)."""
    from polyprof.collect.pysection import PySection

    sec = polyprof.section if kind != "python" else PySection

    @sec("loader")
    def loader(n: int):  # type: ignore[no-untyped-def]
        for i in range(n):
            time.sleep(0.005)
            yield i

    with polyprof.profile(plugins=["host"]) as p:
        g = loader(4)
        assert next(g) == 0
        got: list[int] = []
        t = threading.Thread(target=lambda: got.extend(g))
        t.start()
        t.join(30)
        assert got == [1, 2, 3]
        assert list(loader(2)) == [0, 1]
    df = p.trace.to_pandas()
    loads = df[df.name.astype(str) == "loader"]
    assert len(loads) == 2
    assert loads.dur_ns.max() >= 18e6  # the drained one: its four items, both threads' share
