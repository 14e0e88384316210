"""Training / inference steps, from whichever marker the trace has.

Sources, first one found wins: PyTorch's ``ProfilerStep#N`` spans (those of which less
than half lies inside the span of polyprof's own steps, when the trace has them, left
out: torch's copy of a step the host never recorded, see ``_covered``); XProf's device step
markers (the ``Steps`` line TensorFlow and XProf put on each GPU plane of an XSpace: one
step per ``group_id``, as XProf's overview page counts them, see ``_device_steps``);
polyprof's own steps (category ``step`` with a ``step`` stat, from ``polyprof.step()``);
JAX / TF step annotations (host spans with a ``step_num`` or ``step`` stat). Each step
is a time interval (on the host, but the device's for XProf's markers); device activity
belongs to the step in which its launch started (or, with no launch, in which it
started itself).

Step numbers: each *occurrence* of a step is its own step. Marks of one number that
overlap in time (one step marked on several threads) are one step with their widest
span; marks of one number that are disjoint in time (several profiler sessions or
schedule cycles in one file, a counter that restarts, copies end to end) are separate
steps. When every step's number is unique the trace's numbers are kept; when any number
repeats, every step is numbered by its place in time order (0, 1, 2, ...), the
trace's own numbers are kept in ``Steps.original``, and ``Steps.renumbered`` is set
(the summary's header says so once). See docs/analysis.md, "Steps".
"""

from __future__ import annotations

import logging

import numpy as np

from ..trace import keys
from ..trace.categories import Kind
from ..trace.core import Trace
from ..trace.sorting import member, unique
from ..trace.vocabulary import PROFILER_STEP as _PROFILER_STEP

log = logging.getLogger("polyprof")


#: how the header names each source
_SAID = {"polyprof": "step events", "annotation": "step annotations", "xprof": "the device Steps line"}


class Steps:
    """A trace's steps, as columns. A plain class, not a dataclass: made at every start,
    a dataclass's generated methods were compiled there (docs/benchmarks.md, issue 35)."""

    def __init__(self, number: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray, source: str,
                 original: np.ndarray | None = None):
        self.number = number  # int64 step number
        self.start = start  # host start, ns
        self.end = end  # host end, ns
        self.rows = rows  # the event that marks each step
        self.source = source  # "ProfilerStep", "xprof", "polyprof", "annotation" or "" (no steps)
        #: the trace's own step numbers when ``number`` had to be renumbered, else None
        self.original = original

    @property
    def renumbered(self) -> bool:
        """True when the trace's step numbers repeat and ``number`` is the time order."""
        return self.original is not None

    def describe(self) -> str:
        """The source, with a note when the numbers were renumbered (the header's text):
        ``ProfilerStep``, ``the device Steps line`` (XProf's device step markers),
        ``step events`` (polyprof.step(), or an XSpace's step annotations read as such) or
        ``step annotations`` (host spans with a step number)."""
        said = _SAID.get(self.source, self.source)
        if self.original is None:
            return said
        return f"{said}; its step numbers repeat, so steps are numbered 0, 1, 2, ... in time order"

    def __len__(self) -> int:
        return len(self.number)

    def of(self, times: np.ndarray) -> np.ndarray:
        """Index of the step whose [start, end) holds each time, -1 if none."""
        times = np.asarray(times, np.int64)
        if not len(self):
            return np.full(len(times), -1, np.int64)
        i = np.searchsorted(self.start, times, side="right") - 1
        ok = (i >= 0) & (times < self.end[np.maximum(i, 0)])
        return np.where(ok, i, -1)


def _primary(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Keep rows on real (not derived) tracks."""
    if not len(rows):
        return rows
    derived = np.array([t.kind == "derived" for t in trace.tracks], bool)
    return rows[~derived[trace.events["track"][rows]]]


def _make(trace: Trace, rows: np.ndarray, numbers: np.ndarray, source: str) -> Steps:
    ev = trace.events
    st = ev["start_ns"][rows]
    order = np.argsort(st, kind="stable")
    rows, numbers = rows[order], np.asarray(numbers, np.int64)[order]
    # one step per occurrence: marks of one number that overlap (several threads) merge
    # into their widest span; a mark that starts after the number's last one ended opens
    # a new occurrence
    start = ev["start_ns"][rows]
    end = start + ev["dur_ns"][rows]
    by = np.lexsort((start, numbers))
    n_s, s_s, e_s = numbers[by], start[by], end[by]
    first_of_number = np.r_[True, n_s[1:] != n_s[:-1]]
    run_end = e_s if first_of_number.all() else _running_max_by_group(e_s, first_of_number)
    new = first_of_number | np.r_[False, s_s[1:] >= run_end[:-1]]
    if new.all():
        return renumbered(Steps(numbers, start, end, rows, source))
    grp = np.cumsum(new) - 1
    k = int(grp[-1]) + 1
    s = np.full(k, np.iinfo(np.int64).max)
    e = np.full(k, np.iinfo(np.int64).min)
    np.minimum.at(s, grp, s_s)
    np.maximum.at(e, grp, e_s)
    first = rows[by][new]  # the earliest mark of each occurrence
    nums = n_s[new]
    order = np.argsort(s, kind="stable")
    return renumbered(Steps(nums[order], s[order], e[order], first[order], source))


def _running_max_by_group(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` that restarts where ``starts`` is True."""
    out = values.copy()  # one slice per step number that has several marks
    edges = np.r_[np.flatnonzero(starts), len(values)]
    for a, b in zip(edges[:-1], edges[1:]):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def renumbered(steps: Steps) -> Steps:
    """``steps`` (in time order) numbered 0..n-1 when any number repeats, else as is."""
    if len(steps) < 2 or len(unique(steps.number)) == len(steps):
        return steps
    log.info("step numbers repeat in time (%d steps, %d numbers): numbered 0..%d in time order",
             len(steps), len(unique(steps.number)), len(steps) - 1)
    original = steps.number if steps.original is None else steps.original
    return Steps(np.arange(len(steps), dtype=np.int64), steps.start, steps.end, steps.rows, steps.source,
                 original)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _ignored(trace: Trace, rows: np.ndarray, why: str) -> None:
    first = trace.strings[int(trace.events["name"][rows[0]])]
    log.warning("%d step marker(s) ignored, with %s (the first: %r)", len(rows), why, first[:80])


def _in_range(trace: Trace, rows: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose step stat is a whole number that fits int64 (a stat of ``1e400``
    or ``nan`` from a foreign file is left out with a warning, not an overflow)."""
    v = np.asarray(values)
    if v.dtype.kind == "f":
        ok = np.isfinite(v) & (v >= -(2.0**63)) & (v < 2.0**63)
    elif v.dtype.kind == "u":
        ok = v <= np.uint64(_INT64_MAX)
    elif v.dtype.kind == "i":
        ok = np.ones(len(v), bool)
    else:  # text or objects: read once, exactly when it is an integer's text
        parsed = [_as_int(x) for x in v.tolist()]
        ok = np.array([n is not None for n in parsed], bool)
        v = np.array([0 if n is None else n for n in parsed], dtype=object)
    if not ok.all():
        _ignored(trace, rows[~ok], "a step number that is not a whole number within int64")
    return rows[ok], v[ok].astype(np.int64)


def _as_int(x: object) -> int | None:
    """``x`` as an int64 step number (``"12"``, ``12``, ``"12.0"``), None if it is none."""
    try:
        n = int(x)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        try:
            f = float(x)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        if f != f or abs(f) >= 2.0**63:
            return None
        n = int(f)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


def _has_number_text(values: np.ndarray) -> bool:
    """Whether a text stat column holds some whole number's text (its first 100 values)."""
    return values.dtype.kind in "OSU" and any(_as_int(x) is not None for x in values[:100].tolist())


def find_steps(trace: Trace) -> Steps:
    """The steps of ``trace`` (see the module doc for the sources)."""
    ev = trace.events
    empty = np.zeros(0, np.int64)
    if not trace.n_events:
        return Steps(empty, empty, empty, empty, "")
    # 1. ProfilerStep#N (those the Steps line of polyprof.step() does not cover left out)
    sids = [i for i, s in enumerate(trace.strings) if _PROFILER_STEP.match(s)]
    own: tuple[np.ndarray, np.ndarray] | None = None
    if sids:
        rows = _primary(trace, np.flatnonzero(member(ev["name"], np.asarray(sids, np.int64)) & (ev["dur_ns"] > 0)))
        host = np.array([p.kind == "host" for p in trace.planes], bool)
        rows = rows[host[trace.track_plane[ev["track"][rows]]]]
        if len(rows):
            own = _own_steps(trace)
            rows = _covered(trace, rows, own)
        if len(rows):
            nums = [int(m.group(1)) for n in ev["name"][rows] if (m := _PROFILER_STEP.match(trace.strings[n]))]
            ok = np.array([_INT64_MIN <= n <= _INT64_MAX for n in nums], bool)
            if not ok.all():
                _ignored(trace, rows[~ok], "a step number beyond int64")
            if ok.any():
                return _make(trace, rows[ok], np.array([n for n, k in zip(nums, ok) if k], np.int64),
                             "ProfilerStep")
    # 2. XProf's device step markers (a TensorFlow GPU XSpace's "Steps" lines)
    dev = _device_steps(trace)
    if dev is not None:
        return dev
    # 3. polyprof.step() and other "step" category events carrying a step number
    rows, found = _own_steps(trace) if own is None else own
    if len(rows):
        return _make(trace, rows, found, "polyprof")
    # 4. JAX / TF step annotations on the host
    host = np.array([p.kind == "host" for p in trace.planes], bool)
    for key in ("step_num", keys.STEP):
        col = trace.stats.get(key)
        if col is None or (col.kind not in "iuf" and not _has_number_text(col.values)):
            continue  # (XProf's trace viewer JSON writes every arg as text: "step_num": "0")
        rows = _primary(trace, col.rows)
        rows = rows[host[trace.track_plane[ev["track"][rows]]] & (ev["dur_ns"][rows] > 0)]
        rows, found = _in_range(trace, rows, col.lookup(rows)[1])
        if len(rows):
            return _make(trace, rows, found, "annotation")
    return Steps(empty, empty, empty, empty, "")


def _own_steps(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The rows and numbers of polyprof's steps (and other "step" category events
    carrying a step number, of some duration)."""
    rows = _primary(trace, trace.rows_of_kind(Kind.STEP))
    col = trace.stats.get(keys.STEP)
    if not len(rows) or col is None:
        return rows[:0], rows[:0]
    has, _ = col.lookup(rows)
    rows = rows[has & (trace.events["dur_ns"][rows] > 0)]
    return _in_range(trace, rows, col.lookup(rows)[1])


def _covered(trace: Trace, rows: np.ndarray, own: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The ``ProfilerStep#N`` rows of which at least half lies inside the span of
    polyprof's steps (``own``), when the trace has them. The others mark no step the
    host recorded: torch's copy of the step a program was killed in (a signal that came
    before the torch plugin noted the copy it had just opened: kept, it made one 4 ms
    step the analysed span of a run of 19,860 steps), or the step a drop-in's schedule
    opens after the program's last ``prof.step()`` (``ProfilerStep#7`` after 7 steps,
    with none of the loop's work). Without polyprof steps (a Kineto trace), every row."""
    if not len(own[0]):
        return rows
    ev = trace.events
    lo = int(ev["start_ns"][own[0]].min())
    hi = int((ev["start_ns"][own[0]] + ev["dur_ns"][own[0]]).max())
    st, dur = ev["start_ns"][rows], ev["dur_ns"][rows]
    inside = np.clip(np.minimum(st + dur, hi) - np.maximum(st, lo), 0, None)
    keep = 2 * inside >= dur
    if not keep.all():  # (info: a drop-in's schedule leaves one after its loop, ProfilerStep#7 of 7 steps)
        log.info("%d ProfilerStep#N left out, outside the span of the %d polyprof.step() steps (the first: %r)",
                 int((~keep).sum()), len(own[0]), trace.strings[int(ev["name"][rows[~keep][0]])][:80])
    return rows[keep]


#: the range of the line ids XProf derives (``IsDerivedThreadId``: steps, launch stats,
#: name scope, ops, modules, source...)
_DERIVED_LINE_IDS = (keys.LINE_STEPS_ID, keys.LINE_STEPS_ID + 31)
#: names XProf classifies as copies or collectives, not compute (``ClassifyGpuEvent``:
#: ``ParseTfOpFullname``'s memcpy prefixes, any case; ``nccl``)
_NOT_COMPUTE = ("memcpyhtod", "memcpydtoh", "memcpydtod", "nccl")


def _device_steps(trace: Trace) -> Steps | None:
    """XProf's steps of a GPU XSpace (``ConvertDeviceTraceXPlaneToStepEvents``): each
    device plane's step line (line id 0xdeadbeef, or a line named ``Steps``; TensorFlow
    saves it, XProf derives it from the host's step grouping) marks a step by its
    ``group_id``. A plane keeps the groups that also have device activity of that plane
    (events with a ``correlation_id`` and that ``group_id`` on its other, non-derived
    lines); the planes' groups are united; a group is a step when some of that activity
    is compute (not a copy or NCCL, by XProf's names: ``ConvertStepDetailsToStepInfo``'s
    well-formed step), and the step's span is its longest marker on any device
    (``StepDetails::StepTime``, where XProf no longer widens it to a host marker on a
    device profile). The step number is the group id, as XProf's ``stepnum``. None when
    the trace has no such markers, or none of them qualifies (XProf then shows no steps;
    polyprof goes on to the trace's other step marks)."""
    gcol = trace.stats.get("group_id")
    if gcol is None or gcol.kind not in "iu" or not len(gcol):
        return None
    ev = trace.events
    tracks = trace.tracks
    device = np.array([p.kind == "device" for p in trace.planes], bool)
    t_dev = device[trace.track_plane] if len(tracks) else np.zeros(0, bool)
    tid = np.array([t.tid for t in tracks], np.int64)
    t_derived = np.array([t.kind == "derived" for t in tracks], bool)
    t_steps = t_dev & ~t_derived & ((tid == keys.LINE_STEPS_ID) | np.array([t.name == keys.LINE_STEPS for t in tracks],
                                                                        bool))
    g_rows, g_vals = gcol.rows, gcol.values.astype(np.int64)
    g_track = ev["track"][g_rows]
    mark = t_steps[g_track] & (ev["dur_ns"][g_rows] > 0)
    if not mark.any():
        return None
    # device activity of a group: on a device plane's own lines, with a correlation id
    lo, hi = _DERIVED_LINE_IDS
    t_activity = t_dev & ~t_derived & ~t_steps & ~((tid >= lo) & (tid <= hi))
    act = t_activity[g_track]
    corr = trace.stats.get(keys.CORRELATION_ID)
    if corr is None:
        act[:] = False
    else:
        act &= corr.lookup(g_rows)[0]
    act &= g_vals >= 0
    plane_of = trace.track_plane[g_track]
    names = trace.strings
    uniq, inv = np.unique(ev["name"][g_rows[act]], return_inverse=True)
    compute = np.zeros(len(g_rows), bool)
    compute[act] = np.fromiter((not names[int(u)].lower().startswith(_NOT_COMPUTE) for u in uniq), bool,
                               len(uniq))[inv.reshape(-1)]
    m_rows, m_vals, m_plane = g_rows[mark], g_vals[mark], plane_of[mark]
    keep = np.zeros(len(m_rows), bool)
    computed = []  # the groups with compute on a plane that marks them
    for p in unique(m_plane).tolist():  # each plane keeps its groups that have its activity (IntersectCombineStepEvents)
        on = m_plane == p
        here = act & (plane_of == p)
        keep[on] = member(m_vals[on], unique(g_vals[here]))
        computed.append(np.intersect1d(m_vals[on], g_vals[here & compute]))
    keep &= member(m_vals, unique(np.concatenate(computed)))  # well-formed steps only
    m_rows, m_vals = m_rows[keep], m_vals[keep]
    if not len(m_rows):
        return None
    # one step per group: its longest marker, the first of equals in the file's order
    dur = ev["dur_ns"][m_rows]
    order = np.lexsort((m_rows, -dur, m_vals))
    m_rows, m_vals = m_rows[order], m_vals[order]
    first = np.r_[True, m_vals[1:] != m_vals[:-1]]
    rows, nums = m_rows[first], m_vals[first]
    start = ev["start_ns"][rows]
    by_time = np.argsort(start, kind="stable")
    rows, nums, start = rows[by_time], nums[by_time], start[by_time]
    return Steps(nums, start, start + ev["dur_ns"][rows], rows, "xprof")


def step_rows(trace: Trace) -> np.ndarray:
    """Rows of events that mark steps (so section analyses can leave them out)."""
    return find_steps(trace).rows
