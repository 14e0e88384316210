"""The session's torch recording around the program's own torch profilers
(plugins/torch/handover.py): it ends where the program's is prepared and starts again
once the program's has stopped, unless a torch range it recorded is still open then
(torch 2.13 would write that range's end into freed memory); the program's profiles are
what they are without polyprof."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

import polyprof  # noqa: E402
from polyprof.derive.steps import find_steps  # noqa: E402

CPU = [torch.profiler.ProfilerActivity.CPU]


def _events(p: object) -> Counter[str]:
    return Counter(e.name for e in p.events())  # type: ignore[attr-defined]


def _loop(cycles: list[Counter[str]], profilers: int = 2) -> None:
    """``profilers`` times: the program profiles four steps (wait 1, warm-up 1, active 2:
    torch.add), then runs three plain steps (torch.mul); torch.sub after all of them."""
    x = torch.ones(8, 8)
    torch.mm(x, x)
    for _ in range(profilers):
        sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
        with torch.profiler.profile(activities=CPU, schedule=sched,
                                    on_trace_ready=lambda p: cycles.append(_events(p))) as prof:
            for _ in range(4):
                torch.add(x, x)
                polyprof.step()
                prof.step()
        for _ in range(3):
            torch.mul(x, x)
            polyprof.step()
    torch.sub(x, x)


def test_the_sessions_recording_starts_again_after_each_of_the_programs_profilers() -> None:
    plain: list[Counter[str]] = []
    _loop(plain)
    got: list[Counter[str]] = []
    with polyprof.profile(plugins=["torch"]) as s:
        _loop(got)
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    # before the first: the matmul and the add of its wait step; the adds of the warm-up
    # and active steps are the program's; every plain step after each profiler and the end
    assert names["aten::mm"] == 1
    assert names["aten::add"] == 2  # one wait step per profiler
    assert names["aten::mul"] == 6 and names["aten::sub"] == 1
    warnings = s.trace.metadata["warnings"]
    assert any("started its own torch.profiler 2 times" in w and "started again after" in w for w in warnings)
    assert not any(n.startswith("ProfilerStep#") for n in names)  # the program's steps
    steps = find_steps(s.trace)
    assert steps.source == "polyprof" and len(steps) == 14
    # the program's profiles: as without polyprof, nothing of the session's in them
    assert got == plain and len(got) == 2 and got[0]["aten::add"] == 2


def test_a_range_open_across_the_programs_profiler_keeps_the_session_from_starting_again() -> None:
    """A record_function opened while the session recorded and still open when the
    program's profiler stops would end in the session's next recording, writing into the
    freed memory of the first (a heap corruption, seen as crashes under Lightning, whose
    action ranges span its profiler): the session records no torch op after it."""
    x = torch.ones(8, 8)
    with polyprof.profile(plugins=["torch"]) as s:
        with torch.autograd.profiler.record_function("outer"):
            torch.mm(x, x)
            with torch.profiler.profile(activities=CPU) as prof:
                torch.add(x, x)
            torch.mul(x, x)
        torch.sub(x, x)
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["aten::mm"] == 1 and names["outer"] == 1
    assert names["aten::add"] == names["aten::mul"] == names["aten::sub"] == 0
    assert any("was not started again: a torch range opened while it recorded was still open" in w
               for w in s.trace.metadata["warnings"])
    assert _events(prof)["aten::add"] == 1 and "outer" not in _events(prof)


def test_a_section_copied_into_the_programs_profile_is_ended_when_it_stops() -> None:
    """Sections are copied into the program's profile while it records (mirror_sections);
    a copy still open when it stops is ended there, where that ends nothing: the
    section's own end, inside the program's next profiler, must not end it through that
    one (torch would write into the first one's freed memory)."""
    from polyprof.plugins.torch.plugin import active_plugin

    x = torch.ones(8, 8)
    with polyprof.profile(plugins=["torch"]) as s:
        plugin = active_plugin()
        assert plugin is not None
        with torch.profiler.profile(activities=CPU) as first:
            section = polyprof.section("span")
            section.__enter__()
            torch.add(x, x)
        open_copies = sum(len(st) for st in plugin._stacks)
        with torch.profiler.profile(activities=CPU) as second:
            torch.mul(x, x)
            section.__exit__(None, None, None)
        torch.sub(x, x)
    assert open_copies == 0
    assert _events(first)["span"] == 1 and _events(first)["aten::add"] == 1
    assert "span" not in _events(second) and _events(second)["aten::mul"] == 1
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["span"] == 1 and names["aten::sub"] == 1 and names["aten::add"] == names["aten::mul"] == 0


def test_nested_profilers_the_session_starts_again_after_the_outer_one() -> None:
    """torch: the inner profiler takes the recording over and the outer one ends with
    nothing; the session starts again only once both have stopped, so neither sees it."""
    x = torch.ones(8, 8)

    def program() -> tuple[Counter[str], Counter[str]]:
        with torch.profiler.profile(activities=CPU) as a:
            torch.mm(x, x)
            with torch.profiler.profile(activities=CPU) as b:
                torch.add(x, x)
            torch.sub(x, x)
        return _events(a), _events(b)

    plain = program()
    with polyprof.profile(plugins=["torch"]) as s:
        torch.neg(x)
        got = program()
        torch.mul(x, x)
    assert got == plain and plain[1]["aten::add"] == 1
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["aten::neg"] == names["aten::mul"] == 1
    assert names["aten::mm"] == names["aten::add"] == names["aten::sub"] == 0


def test_a_profiler_running_when_the_session_starts_is_followed_by_the_sessions() -> None:
    """The program's profiler started before the session: the session records from the
    moment it stops (before, not at all in that session)."""
    x = torch.ones(8, 8)
    prof = torch.profiler.profile(activities=CPU)
    prof.start()
    with polyprof.profile(plugins=["torch"]) as s:
        torch.add(x, x)
        prof.stop()
        torch.mul(x, x)
    assert _events(prof)["aten::add"] == 1 and _events(prof)["aten::mul"] == 0
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["aten::add"] == 0 and names["aten::mul"] == 1


def test_a_session_ending_inside_a_later_profiler_keeps_what_it_recorded() -> None:
    """The program's second profiler never stops inside the session: the session keeps
    both its recordings (before the first, between the two) and leaves the second alone."""
    x = torch.ones(8, 8)
    with polyprof.profile(plugins=["torch"]) as s:
        torch.neg(x)
        with torch.profiler.profile(activities=CPU):
            torch.add(x, x)
        torch.mul(x, x)
        prof = torch.profiler.profile(activities=CPU)
        prof.start()
        torch.sub(x, x)
    torch.div(x, 2)
    prof.stop()
    got = _events(prof)
    assert got["aten::sub"] == got["aten::div"] == 1 and "polyprof::clock_sync" not in got
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["aten::neg"] == names["aten::mul"] == 1
    assert names["aten::add"] == names["aten::sub"] == names["aten::div"] == 0
    assert any("2 times" in w and "the last one until the session's end" in w for w in s.trace.metadata["warnings"])


def _cycles(x: torch.Tensor, steps: int, repeat: int, cycles: list[Counter[str]]) -> None:
    """The program profiles ``steps`` steps (torch.add) with one profile object whose
    schedule cycles (wait 1, warm-up 1, active 1, ``repeat`` times; 0: for ever)."""
    sched = torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=repeat)
    with torch.profiler.profile(activities=CPU, schedule=sched,
                                on_trace_ready=lambda p: cycles.append(_events(p))) as prof:
        for _ in range(steps):
            torch.add(x, x)
            polyprof.step()
            prof.step()


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@pytest.mark.parametrize("repeat, adds", [(0, 1), (2, 1 + 4)])
def test_a_cycling_schedule_hands_torch_back_once_not_after_each_cycle(repeat: int, adds: int) -> None:
    """torch prepares and stops a profiler in each cycle of a profile object's schedule:
    the session's recording starts again once, where the object stops (repeat=0: 3
    cycles in 9 steps), or where its schedule's last cycle ends (repeat=2: its steps
    6-9 record nothing of the program's), not after every cycle only to end again at
    the next one's prepare (a start and a stop of torch's profiler a cycle: 13 times
    the program's time in a 300-step loop). Its wait steps between cycles are not in
    the session's trace; the step before its first cycle and the steps after are."""
    from polyprof.plugins.torch.plugin import active_plugin

    x = torch.ones(8, 8)
    steps = 9 if repeat == 0 else 10
    plain: list[Counter[str]] = []
    _cycles(x, steps, repeat, plain)
    got: list[Counter[str]] = []
    with polyprof.profile(plugins=["torch"]) as s:
        plugin = active_plugin()
        assert plugin is not None
        torch.mm(x, x)
        _cycles(x, steps, repeat, got)
        for _ in range(3):
            torch.mul(x, x)
            polyprof.step()
    hand = plugin._handover
    assert (len(hand.windows), len(plugin._captures)) == (1, 2)
    assert hand.restarts == 1
    assert got == plain and len(got) == 3 - (repeat == 2) and all(c["aten::add"] == 1 for c in got)
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["aten::mm"] == 1 and names["aten::mul"] == 3 and names["aten::add"] == adds
    assert not any(n.startswith("ProfilerStep#") for n in names)
    assert any("started its own torch.profiler once" in w for w in s.trace.metadata["warnings"])


def test_a_profile_object_in_its_warm_up_when_the_session_starts_is_followed_to_its_stop() -> None:
    """The program's profile object prepared its profiler (a warm-up step) before the
    session started: the session waits for it, and starts only once its stop() has
    stopped that profiler (not where its stop() begins: torch would start the object's
    trace then and end the session's recording, lost)."""
    x = torch.ones(8, 8)
    with polyprof.profile(plugins=["torch"]):
        pass  # torch's gates are on from here on (as after any earlier session)
    prof = torch.profiler.profile(activities=CPU, schedule=torch.profiler.schedule(wait=0, warmup=2, active=1))
    prof.start()
    with polyprof.profile(plugins=["torch"]) as s:
        torch.add(x, x)
        prof.stop()
        torch.mul(x, x)
    assert s.trace is not None
    names = Counter(s.trace.names().tolist())
    assert names["aten::add"] == 0 and names["aten::mul"] == 1
    assert not any("ended by another torch.profiler" in w for w in s.trace.metadata["warnings"])
