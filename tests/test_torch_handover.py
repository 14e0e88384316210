"""A program that starts its own ``torch.profiler`` inside a session (Lightning's
``profiler="pytorch"``, accelerate's ``Accelerator.profile``, its own schedule): torch
runs one profiler at a time, so the session's torch recording ends where the program's
is prepared and is kept (before, the program's profiler ended it unread and every torch
op of the session was lost); the program's profile is what it is without polyprof."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

import polyprof  # noqa: E402
from polyprof.derive.steps import find_steps  # noqa: E402


def _program(step_counts: list[Counter[str]]) -> None:
    """Five steps; the program's profiler (wait 1, warm-up 1, active 2) starts after
    the first matmul and opens its ``ProfilerStep#0`` while the session still records."""
    x = torch.ones(8, 8)
    torch.mm(x, x)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                  on_trace_ready=lambda p: step_counts.append(Counter(e.name for e in p.events())))
    prof.start()
    for _ in range(5):
        torch.add(x, x)
        polyprof.step()
        prof.step()
    prof.stop()
    torch.sub(x, x)  # after the program's profiler: the session's again (plugins/torch/handover.py)


def test_the_programs_own_profiler_takes_torch_over_and_the_sessions_ops_are_kept() -> None:
    plain: list[Counter[str]] = []
    _program(plain)
    got: list[Counter[str]] = []
    with polyprof.profile(plugins=["torch"]) as s:
        _program(got)
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    # the session's recording up to the program's preparation (its first prof.step()):
    # the matmul and the add of the program's wait step; and again once its profile
    # object stopped: the sub (not once its cycle ended: the add of its next cycle's wait
    # step, the fifth, is in neither, the object still open; test_torch_handover_restart.py)
    assert names["aten::mm"] == 1 and names["aten::add"] == 1 and names["aten::sub"] == 1
    assert any("started its own torch.profiler" in w for w in s.trace.metadata["warnings"])
    # the program's ProfilerStep#0, opened while ours recorded, is its step: the
    # session's steps stay polyprof.step()'s five
    assert not any(n.startswith("ProfilerStep#") for n in names)
    steps = find_steps(s.trace)
    assert steps.source == "polyprof" and len(steps) == 5
    # the program's own profile: its two active steps, as without polyprof
    assert len(got) == len(plain) == 1
    assert got[0]["aten::add"] == plain[0]["aten::add"] == 2
    assert got[0]["polyprof::clock_sync"] == 0 and set(got[0]) == set(plain[0])
