"""The program's own step boundaries: ``polyprof.step()`` as a plain call and as
``with polyprof.step():`` (collect/recorder.py holds the functions; this module the
rules that decide where each call puts a boundary).

A plain call ends the current step and begins the next. A block is one step: leaving it
ends the block's step, and the next block begins where that one ended (the loop's own
time goes to it). ``step()`` cannot know from its own arguments whether its result will
be entered, so it decides from what came before:

- the program's first call looks at its caller's next instruction (:func:`opens_block`):
  the call of ``with polyprof.step():`` puts no boundary, and step 0 begins where that
  block is entered (below);
- a call inside an open block (or a block inside a block) is part of the block's step:
  no boundary (the block's exit makes one);
- the first call after a block's exit begins nothing (the next step began at that exit);
  when that call turns out to be a plain one, the call after it begins nothing either,
  so a loop that writes both, ``with polyprof.step(): ...`` then ``polyprof.step()``,
  gets one step per iteration, not an empty step between each two;
- everything else puts a boundary where it is called: a block entered after plain
  calls ends the plain calls' step at its entry.

A program that uses both forms is told once, at the end of the session (the trace's
warnings): a loop that calls ``polyprof.step()`` *before* its block is a plain-call
program whose first call made step 0 of the set-up and gets one empty step at its first
iteration (its block's entry ends the step its plain call began), and plain calls after a
loop of blocks begin merged into one step until the third call.

Where step 0 begins. Plain calls: where the program's code resumed once the session's
plugins had started (:func:`program_resumes`: what the program runs before the first
call is its step 0, as documented for ``polyprof.step()``; polyprof's own start-up is in
the trace before it, in no step: before, step 0 held it, 3.8 s of torch.profiler's start
against steps of 0.1 s). Blocks: at the first block's entry (:func:`first_start`): each
block is a step, and what runs before the first is the program's set-up, no step of its
loop (before, it was step 0: 3.8 s of imports and an OpenCL context against a first
iteration of 1.1 s, and AUTO's window skipped it, not the first iteration, whose program
build then read as "device idle 81%"). The set-up stays in the trace, in no step, before
step 0. A session that starts inside a block (a capture of a running loop,
``polyprof.profile()`` entered in a step, or while another thread is in one) sees that
block's exit first: step 0 is the step it began in, from where the program resumed after
the session's start to that exit, and the next block's time is step 1 (before, the next
block's entry was taken as step 0's start, after the boundary that ends it: a negative
step that made the host plugin fail and lose all its data). A block entered whose
``step()`` call came before the session started is the first block, step 0 from its
entry. The schedule and torch's ``ProfilerStep#N`` count the same boundaries
(``step_listeners``), so their step numbers stay the trace's (a schedule's step 0 still
begins at the session's start: one that records it records the set-up too, outside the
trace's steps). Steps *detected* in an unmodified program (an optimizer's ``step()``:
plugins/torch/steps.py) mark only where each step ends, and under ``polyprof run`` the
session starts before the script's imports: step 0 would hold ``import torch`` and all
the set-up (3.6 s against a first iteration of 88 ms). So a plugin that detects steps
says where the first step's work begins (:func:`work_begins`; the torch plugin: the
first ``nn.Module`` call, else the end of ``import torch``), and detected step 0 runs
from there (:func:`first_start`). The crash journal writes where step 0 begins as soon
as it is known (a FIRST_STEP record, collect/journal.py), so a trace read back from a
killed run's has the same steps.
"""

from __future__ import annotations

import bisect
from types import FrameType
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
    step_first_block: bool  # the program's first call was a ``with polyprof.step():``'s
    step_begin: int | None  # where that first block was entered (step 0's start)
    steps: list[int]  # the program's own boundaries (times)
    auto_steps: list[int]  # the detected boundaries (times)
    auto_begin: int | None  # where the first detected step's work began (work_begins)


def on_call(rec: StepState, caller: FrameType | None = None) -> bool:
    """A ``polyprof.step()`` call: whether it puts a boundary here. ``caller``: the
    calling frame, given on the program's first call only (:func:`opens_block`)."""
    first = not rec.explicit_steps
    rec.explicit_steps = True
    after_plain = rec.step_call_open  # the call before was never entered: a plain one
    if after_plain:
        rec.step_forms |= 1
    rec.step_call_open = True
    if rec.step_depth > 0:  # inside a block: the block is the step
        return False
    if first and caller is not None and opens_block(caller):
        rec.step_first_block = True  # no set-up step: step 0 begins at the block's entry
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


def on_enter(rec: StepState, t_ns: int) -> None:
    """A ``with polyprof.step():`` block is entered at ``t_ns`` (its ``step()`` call came
    just before)."""
    rec.step_call_open = False
    rec.step_absorbed = False
    rec.step_depth += 1
    first_entry = not rec.step_forms & 2  # no block was entered or left before
    rec.step_forms |= 2
    if not rec.explicit_steps:  # its step() call came before the session started
        rec.explicit_steps = rec.step_first_block = True
    if rec.step_first_block and first_entry:
        rec.step_begin = t_ns


def on_exit(rec: StepState) -> bool:
    """A block is left: whether its exit puts a boundary (the outermost one does). A
    block left before any ``step()`` call or entry was seen was open when the session
    started (:func:`first_start`): its exit ends step 0, which begins at the session's
    start."""
    if rec.step_depth == 0 and not rec.explicit_steps:
        rec.explicit_steps = True  # the program's steps are blocks: the next call is no first call
        rec.step_forms |= 2
    rec.step_depth = max(0, rec.step_depth - 1)
    if rec.step_depth > 0:
        return False
    rec.step_ended_by_block = True
    return True


#: what the call of a ``with`` statement's expression is followed by: SETUP_WITH (3.10),
#: BEFORE_WITH (3.11-3.13), COPY then LOAD_SPECIAL (3.14); on the way there, a jump
#: (``with (a() if c else b()):``) or a helper's return (its caller's call follows)
_WITH_OPS = frozenset({"SETUP_WITH", "BEFORE_WITH"})


def _decoded(code: bytes, i: int, names: list[str]) -> tuple[str, int, int]:
    """The instruction at byte ``i`` of ``code``: its name, its argument (EXTENDED_ARG
    prefixes folded in) and where the next one begins (its inline caches skipped)."""
    arg = 0
    while i < len(code):
        op, arg, i = names[code[i]], arg << 8 | code[i + 1], i + 2
        if op != "EXTENDED_ARG":
            while i < len(code) and names[code[i]] == "CACHE":  # inline caches (3.11+)
                i += 2
            return op, arg, i
    return "", 0, i


def opens_block(frame: FrameType | None) -> bool:
    """Whether the call ``frame`` is making (its last instruction) is the expression of a
    ``with`` statement: its result is entered next. A helper that returns the call's
    result (``def step(): return polyprof.step()``) is looked through to its caller. A
    result kept and entered later (``s = polyprof.step()``, an ``ExitStack``) reads as a
    plain call. Read once a session (the program's first ``step()`` call), a few
    instructions."""
    import opcode  # the opcode names, on a session's first step() call only

    names = opcode.opname
    for _ in range(16):  # instructions followed, helpers looked through: a few at most
        if frame is None:
            return False
        code = frame.f_code.co_code
        _, _, i = _decoded(code, frame.f_lasti, names)  # the call itself
        for _ in range(4):
            op, arg, nxt = _decoded(code, i, names)
            if op == "JUMP_FORWARD":
                i = nxt + 2 * arg
            elif op == "NOP":
                i = nxt
            else:
                break
        if op in _WITH_OPS:
            return True
        if op == "COPY" and _decoded(code, nxt, names)[0] == "LOAD_SPECIAL":
            return True
        if op != "RETURN_VALUE":
            return False
        frame = frame.f_back
    return False


def mixed(rec: StepState) -> bool:
    """Whether the program used both forms (a trailing plain call counts)."""
    return (rec.step_forms | (1 if rec.step_call_open else 0)) == 3


def work_begins(rec: StepState, t_ns: int) -> None:
    """The work of the first detected step begins at ``t_ns`` (a later call, still before
    that step ends, moves it later); ignored once a step was detected or the program
    counts its own steps."""
    if not rec.auto_steps and not rec.explicit_steps:
        rec.auto_begin = t_ns


def program_resumes(rec: StepState, t_ns: int) -> None:
    """The session's plugins have started and the program's code resumes at ``t_ns``
    (collect/session.py ``Session.start``): no step's work began before it, so step 0
    begins there at the earliest, for plain calls and detected steps alike (a first
    block's entry, a detected step's first forward, move it later)."""
    if not rec.explicit_steps:
        rec.step_begin = t_ns
    work_begins(rec, t_ns)


def first_start(rec: StepState, session_start_ns: int) -> int:
    """Where step 0 begins: where the program resumed after the session's start
    (:func:`program_resumes`; the session's start if it was not said) for plain calls,
    the first block's entry for ``with polyprof.step():`` blocks (where the program
    resumed when the session began inside a block: :func:`on_exit`), and, when the
    trace's steps are the detected ones, where the first one's work began
    (:func:`work_begins`); never after the first boundary, which ends step 0."""
    begin = rec.step_begin if rec.explicit_steps else rec.auto_begin
    at = session_start_ns if begin is None else max(session_start_ns, begin)
    marks = rec.steps if rec.steps or rec.explicit_steps else rec.auto_steps
    i = bisect.bisect_left(marks, session_start_ns)  # a nested session's: the boundaries since its start
    return min(at, marks[i]) if i < len(marks) else at
