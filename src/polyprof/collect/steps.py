"""The program's own step boundaries: ``polyprof.step()`` as a plain call and as
``with polyprof.step():`` (collect/recorder.py holds the functions; this module the
rules that decide where each call puts a boundary).

A plain call ends the current step and begins the next. A block is one step: entering
it ends what ran before, leaving it ends the block's step, and the next block begins
where that one ended. ``step()`` cannot know, when it is called, whether its result will
be entered, so it decides from what came before:

- a call inside an open block (or a block inside a block) is part of the block's step:
  no boundary (the block's exit makes one);
- the first call after a block's exit begins nothing (the next step began at that exit);
  when that call turns out to be a plain one, the call after it begins nothing either,
  so a loop that writes both, ``with polyprof.step(): ...`` then ``polyprof.step()``,
  gets one step per iteration, not an empty step between each two;
- everything else puts a boundary where it is called.

A program that uses both forms is told once, at the end of the session (the trace's
warnings): a loop that calls ``polyprof.step()`` *before* its block gets one empty step
at its first iteration, and plain calls after a loop of blocks begin merged into one
step until the third call.

Where step 0 begins: at the session's start for the program's own calls (what runs
before the first call is its step 0, as documented for ``polyprof.step()``). Steps
*detected* in an unmodified program (an optimizer's ``step()``: plugins/torch/steps.py)
mark only where each step ends, and under ``polyprof run`` the session starts before the
script's imports: step 0 would hold ``import torch`` and all the set-up (3.6 s against a
first iteration of 88 ms). So a plugin that detects steps says where the first step's
work begins (:func:`work_begins`; the torch plugin: the first ``nn.Module`` call, else
the end of ``import torch``), and detected step 0 runs from there (:func:`first_start`).
"""

from __future__ import annotations

from typing import Protocol

#: what the session says when the program used both forms (collect/plugin.py ``warn``)
MIXED = ("polyprof.step() was used both as a plain call and as `with polyprof.step():`; a plain call "
         "inside a block or right after one is taken as part of the block's step, but other mixes can "
         "give an empty or merged step: use one form in a loop")


class StepState(Protocol):
    """The recorder's fields these rules read and write (collect/recorder.py ``Recorder``)."""

    explicit_steps: bool
    step_ended_by_block: bool  # the last boundary was a block's exit, and no call came since
    step_absorbed: bool  # the call after a block's exit began nothing
    step_call_open: bool  # the last call's result was not entered (yet)
    step_depth: int  # open ``with polyprof.step():`` blocks
    step_forms: int  # 1: a plain call was seen, 2: a block was entered (bits)
    steps: list[int]  # the program's own boundaries (times)
    auto_steps: list[int]  # the detected boundaries (times)
    auto_begin: int | None  # where the first detected step's work began (work_begins)


def on_call(rec: StepState) -> bool:
    """A ``polyprof.step()`` call: whether it puts a boundary here."""
    rec.explicit_steps = True
    after_plain = rec.step_call_open  # the call before was never entered: a plain one
    if after_plain:
        rec.step_forms |= 1
    rec.step_call_open = True
    if rec.step_depth > 0:  # inside a block: the block is the step
        return False
    if rec.step_ended_by_block:
        rec.step_ended_by_block = False
        rec.step_absorbed = True
        return False
    if rec.step_absorbed:
        rec.step_absorbed = False
        if after_plain:  # block, plain call, now: the plain call was the block loop's own
            return False
    return True


def on_enter(rec: StepState) -> None:
    """A ``with polyprof.step():`` block is entered (its ``step()`` call came just before)."""
    rec.step_call_open = False
    rec.step_absorbed = False
    rec.step_depth += 1
    rec.step_forms |= 2


def on_exit(rec: StepState) -> bool:
    """A block is left: whether its exit puts a boundary (the outermost one does)."""
    rec.step_depth = max(0, rec.step_depth - 1)
    if rec.step_depth > 0:
        return False
    rec.step_ended_by_block = True
    return True


def mixed(rec: StepState) -> bool:
    """Whether the program used both forms (a trailing plain call counts)."""
    return (rec.step_forms | (1 if rec.step_call_open else 0)) == 3


def work_begins(rec: StepState, t_ns: int) -> None:
    """The work of the first detected step begins at ``t_ns`` (a later call, still before
    that step ends, moves it later); ignored once a step was detected or the program
    counts its own steps."""
    if not rec.auto_steps and not rec.explicit_steps:
        rec.auto_begin = t_ns


def first_start(rec: StepState, session_start_ns: int) -> int:
    """Where step 0 begins: the session's start, or, when the trace's steps are the
    detected ones, where the first one's work began (:func:`work_begins`)."""
    if rec.auto_begin is None or rec.steps or rec.explicit_steps:
        return session_start_ns
    return max(session_start_ns, rec.auto_begin)
