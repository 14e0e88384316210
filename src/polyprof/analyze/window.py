"""The analysed window: which steps every analysis looks at.

Step 0 of a live run holds imports, compilation and warm-up; the last step of a
torch.profiler trace may be cut short. The user chooses the steps:

- ``Window(start, stop)``: steps whose *number* is in ``[start, stop)`` (either end
  open), as ``--steps 2:5`` (steps 2, 3, 4), ``--steps 3`` (step 3 only);
- ``Window(skip_first=N)`` / ``--skip-first N``: drop the first N steps (by position);
- ``None``: the whole trace, cut nowhere (the default of each analysis function, so
  their results do not change for callers that do not ask);
- ``AUTO`` (the default of ``polyprof summary``, ``report`` and ``report.tables.build``):
  without the first step when the trace has at least ``AUTO_MIN_STEPS`` steps — it
  holds the warm-up — else every step (and every step of a trace recorded by a
  schedule, ``polyprof run --schedule``: it left the warm-up out already); every step
  is a window of steps too (what starts after the last one's end is in no step).

A window selects steps; every analysis then runs on a *view* of the trace (the same
arrays and correlation, see :func:`view`) whose steps are the selected ones. So the
analysed span runs from the first selected step to the end of the device work
launched in the last one; step tables, sync windows and findings see only those
steps; and tables that count events (kernels, ops, sections, launches, events) count
the device activity launched between the first selected step's start and the last
one's end (activity with no known launch: that started then; an open start, ``:B``
with nothing skipped, also counts what was launched before the first step) and the
host events that start then. ``span="device"`` (``--span device``) makes the analysed
span run from the first to the last device activity counted, HTA's convention for its
temporal breakdown. ``round_us=True`` (``--round-us``) rounds every device activity
inward to whole µs of the file's time base as HTA 0.5 does when it reads a Kineto file
(:func:`round_like_hta`). A trace without steps has no step window: ``AUTO`` and
``None`` analyse all of it, a step range is an error (``Window(span="device")`` and
``round_us`` still apply). ``HTA`` (``"hta"``, ``--window hta``) is HTA 0.5's window:
every step but the last (with two or more), first to last device activity, rounded to
whole µs; under it the temporal breakdown counts exactly what HTA's does
(``analyze/hta_compat.py``).

A trace a schedule recorded (``metadata["schedule"]``) has no open start, and its steps
of separate cycles are separate *stretches* (``Selection.stretches``): what lies between
them was not recorded and is counted nowhere (``window_counting.inside``, the one
predicate of what a window counts; the time-share analyses take
``common.analysed_stretches``, under ``span="device"`` each stretch from its first to
its last device activity). A time
window that holds no whole step is analysed as that window (``Selection.timed``: the
span is exactly it, under ``span="device"`` the device activity's part of it; the device
activity running in it counted for its part inside, ``window_counting.counted_ns``, its
launch and start may precede it). A span or rounding asked with AUTO's steps
(``Window(skip_first=None, span="device")``: ``--span device`` or ``--round-us`` alone)
keeps what AUTO selects there: the recorded steps and stretches, or the time window.
A window of its own (``--all-steps``, ``--steps``, ``--skip-first``) takes of the steps
it asks those the recording holds whole, as AUTO's (a time window's cut steps are marks
only; :func:`_whole`), and a time window that holds none as that window.
What a window counts, and how much of each activity: ``analyze/window_counting.py``.
"""

from __future__ import annotations

import copy
import re
from typing import NamedTuple, Union

import numpy as np

from ..derive import cache
from ..derive.steps import Steps
from ..errors import WindowError
from ..trace.core import Trace
from ..trace import metadata_keys as mkeys
from ..derive.intervals import union_len
from .units import fmt_ns
from .window_words import whole_trace_words

_FAR = 1 << 62
#: a selection's ``lo`` when its start is open (what was launched before its first step counts)
OPEN_START = -_FAR
AUTO = "auto"
#: HTA 0.5's window (``--window hta``): the steps but the last, first to last device
#: activity, rounded to whole µs; the temporal breakdown then counts the activity HTA
#: counts (``analyze/hta_compat.py``)
HTA = "hta"
#: what the analysed span of a window covers: from the first selected step's start to
#: the end of the device work launched in the last ("steps"), or from the first to the
#: last device activity counted ("device": HTA's temporal breakdown convention)
SPANS = ("steps", "device")
AUTO_MIN_STEPS = 3
#: ``A:B``, ``A:``, ``:B``, ``N``: a second number only after the colon ("5-8" and "5 8" match
#: nothing: before, "-8" was taken for a second number and dropped, step 5 alone analysed)
_RANGE = r"^\s*(-?\d+)?\s*(?:(:)\s*(-?\d+)?)?\s*$"  # compiled on first use (re's cache), not at import
#: a dash range, ``5-8``: what the error suggests instead (``5:9``)
_DASHED = r"^\s*(\d+)\s*-\s*(\d+)\s*$"


class Window(NamedTuple):  # not a frozen dataclass: made at every start (docs/benchmarks.md, issue 35)
    """Steps to analyse: numbers in ``[start, stop)``, then the first ``skip_first`` dropped."""

    start: int | None = None
    stop: int | None = None
    skip_first: int | None = 0  # None: AUTO's rule (the warm-up step left out with 3 steps or more)
    span: str = "steps"  # or "device": first to last device activity counted (HTA's convention)
    round_us: bool = False  # device activity rounded inward to whole µs, as HTA reads Kineto files

    @classmethod
    def parse(cls, steps: str | None = None, skip_first: int | None = 0, span: str = "steps",
              round_us: bool = False) -> "Window":
        """From ``--steps`` text (``2:5``, ``3``, ``:5``, ``2:``) and ``--skip-first``
        (None: AUTO's rule, for ``--span`` or ``--round-us`` alone)."""
        start = stop = None
        if steps is not None:
            m = re.match(_RANGE, steps)
            if not m or (m.group(1) is None and m.group(3) is None):
                dashed = re.match(_DASHED, steps)
                hint = f"; steps {dashed[1]} to {dashed[2]} are {dashed[1]}:{int(dashed[2]) + 1}" if dashed else ""
                raise WindowError(f"--steps {steps!r}: expected A:B, A:, :B or N (step numbers){hint}")
            start = int(m.group(1)) if m.group(1) is not None else None
            stop = int(m.group(3)) if m.group(3) is not None else None
            if not m.group(2):  # a single number: that step
                stop = start + 1 if start is not None else None
        if skip_first is not None and skip_first < 0:
            raise WindowError(f"--skip-first {skip_first}: must be 0 or more")
        if span not in SPANS:
            raise WindowError(f"--span {span!r}: expected one of {', '.join(SPANS)}")
        return cls(start, stop, None if skip_first is None else int(skip_first), span, bool(round_us))

    def text(self) -> str:
        parts = []
        if self.start is not None or self.stop is not None:
            parts.append(f"steps {'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}")
        if self.skip_first:
            parts.append(f"skip first {self.skip_first}")
        if self.span != "steps":
            parts.append(f"span: {self.span}")
        if self.round_us:
            parts.append("rounded to whole µs as HTA")
        return ", ".join(parts) or "all steps"


WindowArg = Union[Window, str, None]


class Selection:
    """The steps a window selected (positions into the trace's steps) and how to say it.
    A plain class, not a frozen dataclass: made at every start, the dataclass's six
    generated methods compiled there (docs/benchmarks.md, issue 35); nothing changes it."""

    def __init__(self, index: np.ndarray, label: str, restricted: bool, span: str = "steps", lo: int = -_FAR,
                 hi: int = _FAR, round_us: bool = False, hta: bool = False, stretches: np.ndarray | None = None,
                 timed: bool = False):
        self.index = index  # positions of the selected steps in cache.steps(trace)
        self.label = label  # e.g. "steps 102-105 of 101-105 (first step skipped: warm-up)"
        self.restricted = restricted  # False when every step (or the whole trace) is analysed as by default
        self.span = span
        self.lo = lo  # events are counted when they (or their launch) start in [lo, hi)
        self.hi = hi
        self.round_us = round_us
        self.hta = hta  # HTA's window: analyses that reproduce HTA read its activity (hta_compat)
        # [start, end) rows, in time order, where [lo, hi) holds stretches that were not
        # recorded (a schedule's cycles, a time window's repeats): what is between them is
        # counted nowhere; None: the one stretch [lo, hi)
        self.stretches = stretches
        self.timed = timed  # a time window (no whole step in it): the span is [lo, hi), exactly


def _runs(nums: np.ndarray, most: int = 4) -> str:
    """Step numbers as runs: ``7-9, 17-19`` (the first ``most`` runs, then how many more)."""
    cut = np.flatnonzero(np.diff(nums) != 1) + 1
    runs = [f"{int(r[0])}-{int(r[-1])}" if len(r) > 1 else f"{int(r[0])}" for r in np.split(nums, cut)]
    return ", ".join(runs[:most]) + (f", ... ({len(runs) - most} more runs)" if len(runs) > most else "")


def _label(steps: Steps, index: np.ndarray, why: str) -> str:
    if not len(steps):
        return f"whole trace (no steps; {why})" if why else "whole trace (no steps)"
    nums = steps.number
    every = _runs(nums)
    chosen = nums[index]
    if len(index) == len(nums):
        text = f"all {len(nums)} steps ({every})" if len(nums) > 1 else f"the one step ({every})"
    elif len(chosen) == 1:
        text = f"step {int(chosen[0])} of {every}"
    else:
        contiguous = len(chosen) == int(index[-1] - index[0] + 1)
        # adjacent in the trace, numbered with jumps (a schedule's cycles): said as runs
        one = f"steps {int(chosen[0])}-{int(chosen[-1])}" if bool((np.diff(chosen) == 1).all()) else \
            f"steps {_runs(chosen)}"
        text = (one if contiguous else f"{len(chosen)} steps") + f" of {every}"
    return f"{text} ({why})" if why else text


#: a first step this many times the median of the others is said with its length: it is
#: most of the run (the program's set-up before its first step, torch.compile's or XLA's
#: compilation, autotuning, caches), and skipping it as warm-up should not hide that
LONG_WARM_UP = 5.0


def _skipped(steps: Steps, captured: bool = False) -> str:
    """The label's words for the first step, skipped as warm-up, or, in an on-demand
    capture (``captured``: capture/server.py), as the part of a step the capture began in
    (the program was past its warm-up: its first step runs from the capture's start)."""
    if captured:
        return "first step skipped: the capture began inside it"
    took = (steps.end - steps.start).astype(np.int64)
    first, rest = int(took[0]), float(np.median(took[1:])) if len(took) > 1 else 0.0
    if rest > 0 and first <= rest:  # a schedule may have left its warm-up out of the trace already
        return ("first step skipped as a warm-up by default, though it took no longer than the median step "
                f"({fmt_ns(first)} against {fmt_ns(rest)})")
    if rest <= 0 or first < LONG_WARM_UP * rest:
        return "first step skipped: warm-up"
    share = first / max(int(steps.end[-1] - steps.start[0]), 1)
    return (f"first step skipped: warm-up ({fmt_ns(first)}, {first / rest:,.0f}x the median step and "
            f"{share:.1%} of the steps' time: set-up, compilation, caches)")


def host_after(trace: Trace, t: int) -> int:
    """The time host activity that starts at ``t`` or later covers (its events' union;
    instants, such as torch's "Record Window End", cover none)."""
    ev = trace.events
    host = np.array([p.kind == "host" for p in trace.planes], bool)[trace.track_plane[ev["track"]]]
    after = np.flatnonzero(host & (ev["start_ns"] >= t))
    start = ev["start_ns"][after].astype(np.int64)
    return union_len(start, start + ev["dur_ns"][after])


def after_last_words(extent: int, steps: Steps) -> str:
    """The label's words for ``extent`` ns of host activity after the last step, where it
    is as long as a step or more (and a ms): in no step, so a window of steps leaves it
    out (a run's evaluation or saving after its training loop)."""
    if extent < max(1_000_000, float(np.median(steps.end - steps.start))):
        return ""
    return f"; {fmt_ns(extent)} of host activity after the last step is in no step: not analysed"


def auto_words(steps: Steps, after: int, captured: bool = False) -> str:
    """What ``AUTO``'s label says in brackets: the skipped first step (:func:`_skipped`),
    what is after the last step (``after``: :func:`host_after` of its end)."""
    return f"{_skipped(steps, captured)}; --skip-first 0 keeps it{after_last_words(after, steps)}"


def _scheduled(trace: Trace, steps: Steps, every: np.ndarray, also: str = "") -> Selection:
    """The steps a schedule recorded (``recorded_steps``): the step before the first of
    them (the program's start up to its first step mark, which a schedule's warm-up
    leaves as a marker and no events) is not one, nor what torch recorded before the
    first or between its cycles: the start is not open, and steps recorded in separate
    stretches (cycles) are analysed as separate stretches (:func:`_stretches`). Where it
    recorded no whole step, the stretches it recorded (``windows_ns``: a time window) are
    analysed as time (:func:`_timed`); without those, or where it recorded none of the
    trace's steps, every step is analysed and the label says so. ``also``: the label's
    words for a span or rounding asked with AUTO's steps (``--span device`` alone)."""
    said = "the steps its files recorded" if _by_files(trace) else "the steps the schedule recorded"
    nums, pick = _recorded(trace, steps, every)
    every_words = ": every step analysed" if len(steps) else ""
    if nums is not None and not len(nums):
        timed = _timed(trace, steps, also)
        if timed is not None:
            return timed
        said = "the schedule recorded no whole step" + every_words
    elif nums is not None and not len(pick):
        said = f"none of the steps the schedule recorded ({_runs(nums)}) is in the trace" + every_words
    said += f"; {also}" if also else ""
    if nums is None or not len(pick):
        return _every_step(trace, steps, said)
    runs = _stretches(trace, steps, pick)
    if pick[-1] == len(steps) - 1:
        said += after_last_words(host_after(trace, int(steps.end[-1])), steps)
    if runs is not None:
        said += _between_words(runs)
    return Selection(pick, _label(steps, pick, said), True, lo=int(steps.start[pick[0]]), hi=int(steps.end[pick[-1]]),
                     stretches=runs)


def _by_files(trace: Trace) -> bool:
    """Whether the trace's stretches are one process's files (``ranks.sources.TraceFiles``)."""
    meta = trace.metadata[mkeys.SCHEDULE]
    return isinstance(meta, dict) and meta.get("by") == mkeys.SCHEDULE_BY_FILES


def _recorded(trace: Trace, steps: Steps, every: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(the step numbers a schedule says it recorded whole, sorted: None where it names
    none; the positions of those steps in the trace: every step where it names none or
    records none whole). Several drop-ins' steps, renumbered, are told by the stretches
    torch recorded (:func:`_in_stretches`)."""
    meta = trace.metadata[mkeys.SCHEDULE] if isinstance(trace.metadata[mkeys.SCHEDULE], dict) else {}
    rec = meta.get("recorded_steps")
    if rec is None and isinstance(meta.get("windows_ns"), list):  # its stretches alone (a process's files)
        rec = steps.number[_in_stretches(trace, steps, every)].tolist()
    nums = np.sort(np.asarray(rec, np.int64)) if isinstance(rec, list) else None
    pick = every[np.isin(steps.number, nums)] if nums is not None and len(nums) else every
    if nums is not None and len(nums) and _several_drop_ins(trace):
        pick = _in_stretches(trace, steps, every)
    return nums, pick


def _whole(trace: Trace, steps: Steps, window: Window) -> tuple[np.ndarray | None, Selection | None]:
    """What a window of its own (``--all-steps``, ``--steps``, ``--skip-first``) may
    take of a trace a schedule recorded, as AUTO's (:func:`_scheduled`): (which steps
    the recording holds whole, a mask: the steps its edges cut, which stay in the trace
    as marks, are not analysed; None where it says none) or, where it holds no whole step
    and says the time it recorded, that time window (:func:`_timed`) for every step asked
    (an error for a step range or steps skipped: no step is whole)."""
    every = np.arange(len(steps))
    nums, pick = _recorded(trace, steps, every)
    if nums is not None and not len(nums):
        timed = _timed(trace, steps, window.text())
        if timed is None:
            return None, None
        if window.start is None and window.stop is None and not window.skip_first:
            return None, _under(timed, window)
        cut = f" (steps {_runs(steps.number)} are cut by its edges, not analysed)" if len(steps) else ""
        raise WindowError(f"{window.text()}: the recording holds no whole step{cut}; leave out --steps and "
                          "--skip-first to analyse it as the time window it recorded")
    if nums is None or len(pick) == len(steps) or (len(nums) and not len(pick)):
        return None, None
    whole = np.zeros(len(steps), bool)
    whole[pick] = True
    return whole, None


def _cut_words(steps: Steps, cut: np.ndarray) -> str:
    """The label's words for the steps a window asked that the recording cut (``cut``, a
    mask): left out, as the default window leaves them out."""
    n = int(cut.sum())
    return (f"; {'steps' if n > 1 else 'step'} {_runs(steps.number[cut])} not recorded whole (cut by the "
            f"recording's edges): not analysed")


def _stretches(trace: Trace, steps: Steps, pick: np.ndarray) -> np.ndarray | None:
    """The steps ``pick`` as stretches of adjacent steps, ``[start, end)`` rows: a new one
    where the step numbers or positions jump (a schedule's cycles: the steps between them
    were not recorded) or where the next step lies in another stretch torch recorded
    (``windows_ns``, several drop-ins numbering their steps each from 0); None for one."""
    if len(pick) < 2:
        return None
    num = steps.number[pick]
    cut = (np.diff(num) != 1) | (np.diff(pick) != 1)
    wins = _windows(trace)
    if len(wins):
        mid = (steps.start[pick].astype(np.int64) + steps.end[pick].astype(np.int64)) // 2
        cut |= np.diff(np.searchsorted(wins[:, 0], mid, side="right")) != 0
    first = np.flatnonzero(np.r_[True, cut])
    if len(first) < 2:
        return None
    last = np.r_[first[1:] - 1, len(pick) - 1]
    return np.stack([steps.start[pick[first]].astype(np.int64), steps.end[pick[last]].astype(np.int64)], axis=1)


def _between_words(runs: np.ndarray) -> str:
    """The label's words for the time between a selection's stretches: not analysed."""
    gap = int((runs[1:, 0] - runs[:-1, 1]).clip(0).sum())
    return f"; the {fmt_ns(gap)} between its {len(runs)} recorded stretches is not analysed"


def _windows(trace: Trace) -> np.ndarray:
    """The stretches the schedule recorded (``windows_ns``), ``[start, end)`` rows in time
    order, clipped to the trace's span (an end of -1, still open when it was written: the
    trace's end); those of no length left out."""
    wins = trace.metadata[mkeys.SCHEDULE].get("windows_ns") if isinstance(
        trace.metadata[mkeys.SCHEDULE], dict) else None
    rows = [(int(w[0]), int(w[1])) for w in wins or () if isinstance(w, (list, tuple)) and len(w) == 2]
    if not rows or not trace.n_events:
        return np.zeros((0, 2), np.int64)
    t0, t1 = trace.span_ns
    out = np.array(rows, np.int64)
    out[:, 1] = np.where(out[:, 1] < 0, t1, np.minimum(out[:, 1], t1))
    out[:, 0] = np.maximum(out[:, 0], t0)
    out = out[out[:, 1] > out[:, 0]]
    return out[np.argsort(out[:, 0], kind="stable")]


def _timed(trace: Trace, steps: Steps, also: str = "") -> Selection | None:
    """A schedule that recorded no whole step, as the time it recorded (a time window,
    ``--delay``/``--duration``, holding no whole step): the span is its window(s),
    clipped to the trace; host events are counted as they start in it, device activity
    with any part in it, for that part (``window_counting.device_mask`` and
    ``counted_ns``; its launch and start may precede the window). None where it says no
    window."""
    runs = _windows(trace)
    if not len(runs):
        return None
    length = int((runs[:, 1] - runs[:, 0]).sum())
    if _by_files(trace):
        words = f"the time its {len(runs)} files recorded, {fmt_ns(length)}" + (
            f": they hold no whole step ({len(steps)} cut by their edges not analysed)" if len(steps) else "")
    else:
        words = (f"the time window the schedule recorded, {fmt_ns(length)}: it holds no whole step"
                 + (f" ({len(steps)} cut by its edges not analysed)" if len(steps) else ""))
    if len(runs) > 1:
        words += _between_words(runs)
    words += f"; {also}" if also else ""
    return Selection(np.zeros(0, np.int64), words, True, lo=int(runs[0, 0]), hi=int(runs[-1, 1]),
                     stretches=runs if len(runs) > 1 else None, timed=True)


def _several_drop_ins(trace: Trace) -> bool:
    """Whether the schedule is several torch drop-ins' (``drop_ins``): each numbers its
    steps from 0, so their numbers repeat and the trace's steps are renumbered in time
    order; their recorded steps are then told by the stretches torch recorded."""
    meta = trace.metadata[mkeys.SCHEDULE]
    return isinstance(meta.get("drop_ins"), int) and meta["drop_ins"] > 1 and isinstance(meta.get("windows_ns"), list)


def _in_stretches(trace: Trace, steps: Steps, every: np.ndarray) -> np.ndarray:
    """The steps of ``every`` whose middle lies in a stretch torch recorded
    (``windows_ns``: [start, end] on the trace's clock, end -1 while open)."""
    wins = [w for w in trace.metadata[mkeys.SCHEDULE]["windows_ns"] if isinstance(w, (list, tuple)) and len(w) == 2]
    mid = (steps.start[every].astype(np.int64) + steps.end[every].astype(np.int64)) // 2
    inside = np.zeros(len(every), bool)
    for a, b in wins:  # (a few stretches)
        inside |= (mid >= int(a)) & ((int(b) < 0) | (mid <= int(b)))
    return every[inside]


def _every_step(trace: Trace, steps: Steps, said: str) -> Selection:
    """Every step: what was launched or started before the first (an open start) and in
    the steps, not what is after the last one's end (in no step; its extent said where
    it is a step long or more); the whole trace where it has no steps."""
    every = np.arange(len(steps))
    if not len(steps):
        words = whole_trace_words(trace)
        return Selection(every, _label(steps, every, f"{said}; {words}" if said and words else said or words),
                         False)
    after = after_last_words(host_after(trace, int(steps.end[-1])), steps)
    why = f"{said}{after}" if said else after[2:]
    return Selection(every, _label(steps, every, why), True, hi=int(steps.end[-1]))


def select(trace: Trace, window: WindowArg) -> Selection:
    """Which steps ``window`` selects in ``trace`` (see the module doc)."""
    steps = cache.steps(trace)
    every = np.arange(len(steps))
    if window is None:
        return Selection(every, _label(steps, every, "" if len(steps) else whole_trace_words(trace)), False)
    if isinstance(window, str):
        if window == HTA:
            return _hta_selection(steps)
        if window != AUTO:
            raise WindowError(f"window {window!r}: expected a Window, None, {AUTO!r} or {HTA!r}")
        if trace.metadata.get(mkeys.SCHEDULE):  # recorded by a schedule: its warm-up is not in the trace
            return _scheduled(trace, steps, every)
        if len(steps) >= AUTO_MIN_STEPS:
            why = auto_words(steps, host_after(trace, int(steps.end[-1])), mkeys.CAPTURE in trace.metadata)
            return Selection(every[1:], _label(steps, every[1:], why), True, lo=int(steps.start[1]),
                             hi=int(steps.end[-1]))
        return _every_step(trace, steps, "")
    said = window.text()
    if window.skip_first is None and window.start is None and window.stop is None \
            and trace.metadata.get(mkeys.SCHEDULE):  # a schedule's: its steps or time window, as AUTO's
        return _under(_scheduled(trace, steps, every, window.text()), window)
    if window.skip_first is None:  # AUTO's rule, under this window's span and rounding
        warm = (window.start is None and window.stop is None and len(steps) >= AUTO_MIN_STEPS
                and not trace.metadata.get(mkeys.SCHEDULE))
        window = window._replace(skip_first=int(warm))
        said = (f"{_skipped(steps, mkeys.CAPTURE in trace.metadata)}; " if warm else "") + window._replace(skip_first=0).text()
    # a schedule's trace: only the steps it recorded whole, as AUTO's (those its edges cut
    # are marks); where it recorded none whole, its time window
    scheduled = bool(trace.metadata.get(mkeys.SCHEDULE))
    whole, timed = _whole(trace, steps, window) if scheduled else (None, None)
    if timed is not None:
        return timed
    if not len(steps) and window.start is None and window.stop is None and not window.skip_first:
        changed = window.span != "steps" or window.round_us
        return Selection(every, _label(steps, every, window.text() if changed else whole_trace_words(trace)),
                         changed, window.span, round_us=window.round_us)
    if not len(steps):
        raise WindowError(f"{window.text()}: the trace has no steps (ProfilerStep#N, polyprof.step() "
                          "or step annotations), so there is nothing to choose from")
    nums = steps.number
    keep = np.ones(len(steps), bool)
    if window.start is not None:
        keep &= nums >= window.start
    if window.stop is not None:
        keep &= nums < window.stop
    cut = keep & ~whole if whole is not None else np.zeros(len(steps), bool)
    index = every[keep & ~cut][window.skip_first:]
    if not len(index):
        raise WindowError(f"{window.text()}: selects none of the trace's steps ("
                          + (f"its one step is {int(nums[0])})" if len(steps) == 1 else
                             f"{len(steps)} steps, numbers {int(nums[0])}-{int(nums[-1])})")
                          + (f"{_cut_words(steps, cut)}; the recording holds step{'s' if whole.sum() > 1 else ''} "
                             f"{_runs(nums[whole])} whole"
                             if cut.any() and whole is not None else ""))
    said += _cut_words(steps, cut) if cut.any() else ""
    # an open start with nothing skipped also counts what was launched before the first
    # step; not in a schedule's trace: what is before its first recorded step was not
    # recorded as a step (a torch drop-in's sections of its waiting steps, set-up)
    lo = -_FAR if window.start is None and not window.skip_first and not scheduled else int(steps.start[index[0]])
    if index[-1] == len(steps) - 1:
        said += after_last_words(host_after(trace, int(steps.end[-1])), steps)
    # a schedule's steps: those of separate cycles in separate stretches (as AUTO's)
    runs = _stretches(trace, steps, index) if scheduled else None
    if runs is not None:
        said += _between_words(runs)
    return Selection(index, _label(steps, index, said), True, window.span, lo, int(steps.end[index[-1]]),
                     window.round_us, stretches=runs)


def _under(sel: Selection, window: Window) -> Selection:
    """``sel`` (AUTO's steps) under ``window``'s span and rounding (``--span device`` or
    ``--round-us`` alone): its steps, stretches and time window kept."""
    changed = window.span != "steps" or window.round_us
    return Selection(sel.index, sel.label, sel.restricted or changed, window.span, sel.lo, sel.hi, window.round_us,
                     stretches=sel.stretches, timed=sel.timed)


def _hta_selection(steps: Steps) -> Selection:
    """HTA's window: with two steps or more, what was launched before the last step
    starts (HTA drops the last step); from the first to the last device activity, each
    rounded to whole µs as HTA reads a Kineto file."""
    every = np.arange(len(steps))
    why = "HTA 0.5's window: first to last device activity, rounded to whole µs"
    if len(steps) < 2:
        text = _label(steps, every, why) if len(steps) else f"whole trace ({why})"
        return Selection(every, text, True, "device", round_us=True, hta=True)
    index = every[:-1]
    return Selection(index, _label(steps, index, why + "; the last step dropped"), True, "device",
                     hi=int(steps.start[-1]), round_us=True, hta=True)


def _key(window: WindowArg) -> str:
    return f"window:{window!r}"


def view(trace: Trace, window: WindowArg, keep: bool = True) -> Trace:
    """``trace`` as the analyses of ``window`` see it: the same arrays, stats and
    correlation, with only the selected steps. The trace itself when nothing is cut.
    ``keep=False``: a view not made yet is not kept on ``trace`` (it goes, with what
    was derived on it, once the caller lets it go: the report's timeline holds one
    rank at a time)."""
    if window is None or selection(trace) is not None:
        return trace
    sel = cache.memo(trace, _key(window), lambda t: select(t, window))
    if not sel.restricted:
        return trace
    key = _key(window) + ":view"
    if not keep and key not in trace.__dict__.get("_polyprof_memo", {}):
        return _make_view(trace, sel)
    return cache.memo(trace, key, lambda t: _make_view(t, sel))


def _make_view(trace: Trace, sel: Selection) -> Trace:
    steps = cache.steps(trace)
    i = sel.index
    sub = Steps(steps.number[i], steps.start[i], steps.end[i], steps.rows[i], steps.source,
                None if steps.original is None else steps.original[i])
    out = copy.copy(trace)  # shares the arrays, stats and cached properties
    out.__dict__["_polyprof_memo"] = {
        "steps": sub, "correlation": cache.correlation(trace), "threads": cache.threads(trace),
        "window": sel, "all_steps": steps}
    return out


def selection(trace: Trace) -> Selection | None:
    """The selection a view was made for; None for a trace analysed whole."""
    return trace.__dict__.get("_polyprof_memo", {}).get("window")


def label(trace: Trace, window: WindowArg = None) -> str:
    """What ``window`` analyses of ``trace``, in words (for the top of every summary)."""
    sel = selection(trace)
    if sel is None:
        sel = cache.memo(trace, _key(window), lambda t: select(t, window))
    return sel.label


def round_like_hta(trace: Trace, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) as HTA 0.5 reads them from a Kineto file, when the window asks
    (``round_us``); unchanged otherwise.

    HTA parses ``ts`` and ``dur`` (µs since ``baseTimeNanoseconds``) as doubles and, when
    ``ts`` is fractional, moves each start up and each end (``ts + dur``, in doubles) down
    to whole µs (``hta/common/trace_parser.py: round_down_time_stamps``). This does the
    same on the same doubles: a start is the double nearest to its decimal text, as a JSON
    parser makes it. An activity inside one µs comes out with its end before its start;
    the timelines then drop it, where HTA's own merge subtracts it (docs/analysis.md)."""
    sel = selection(trace)
    if sel is None or not sel.round_us or not len(start):
        return start, end
    from .hta_compat import base_time_ns, rounded_like_hta  # HTA's own computations: only for its window (--span device)

    return rounded_like_hta(start, end, base_time_ns(trace))
