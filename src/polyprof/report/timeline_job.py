"""A job's ranks for the HTML report's timeline: each rank's trace moved by its clock
offset from the job's alignment, the collectives that waited on a straggler as marks,
and the collectives' names to highlight.

Reads a :class:`~polyprof.ranks.report.JobReport` through the Table API (its
``rank_alignment`` and ``straggler_collectives`` tables, each rank's collectives), and
loads the ranks' traces from the job's :class:`~polyprof.ranks.traceset.TraceSet`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from .. import logs
from ..analyze.frames import column
from ..analyze.units import fmt_ns
from ..analyze.window import WindowArg, view
from ..progress import TaskBar
from ..ranks.critical_path import align
from ..ranks.critical_path_track import with_job_critical_path
from ..trace.core import Trace
from .timeline import MAX_CRITICAL_PATH_EVENTS, Part

if TYPE_CHECKING:
    from ..ranks.report import JobReport

log = logs.kept(__name__)

MAX_MARKS = 2000


def offsets(job: JobReport) -> dict[int, int]:
    """Per rank: what the alignment adds to its times (0 where it found none)."""
    al = job.tables["rank_alignment"]
    out = {int(r): 0 for r in job.ranks}
    for r, off in zip(column(al, "rank").tolist(), column(al, "offset_ns").tolist()):
        out[int(r)] = int(off) if off is not None and off == off else 0
    return out


def straggler_marks(job: JobReport, offset: dict[int, int]) -> list[dict[str, Any]]:
    """Per collective that waited on a late rank (``straggler_collectives``): from the
    first rank's arrival to the last's, on the aligned clock."""
    sc = job.tables.get("straggler_collectives")
    if sc is None or not len(sc):
        return []
    arrivals: dict[tuple[str, int], list[int]] = {}
    wanted = set(zip(column(sc, "key").tolist(), column(sc, "seq").tolist()))
    for r, res in job.results.items():
        c = res.collectives
        if c is None or not len(c):
            continue
        for k, s, t in zip(column(c, "key").tolist(), column(c, "seq").tolist(), column(c, "start_ns").tolist()):
            if (k, s) in wanted:
                arrivals.setdefault((k, s), []).append(int(t) + offset.get(int(r), 0))
    marks: list[dict[str, Any]] = []
    bounds = column(sc, "bound_ns").tolist() if "bound_ns" in sc else [0.0] * len(sc)
    last_ranks = column(sc, "last_rank").tolist()
    held = column(sc, "held_by").tolist() if "held_by" in sc else last_ranks
    for k, s, op, last, by, spread, bound in zip(column(sc, "key").tolist(), column(sc, "seq").tolist(),
                                                  column(sc, "op").tolist(), last_ranks, held,
                                                  column(sc, "spread_ns").tolist(), bounds):
        times = arrivals.get((k, s))
        if not times or len(marks) >= MAX_MARKS:
            continue
        marks.append({"start_ns": min(times), "end_ns": max(times), "kind": "straggler",
                      "label": _label(op, s, last, spread, bound, by)})
    return marks


def _label(op: str, seq: int, last: int, spread: float, bound: float, held_by: int) -> str:
    """A straggler mark's label: the last rank, where the arrivals differ beyond twice the
    clocks' bound (``stragglers.last_count``'s rule), and the rank the waiting is charged
    to where that is another (``stragglers._held_by``); else no last rank is known."""
    b = float(bound) if bound is not None else math.nan
    if b != b or spread <= 2 * b:
        why = f"bound {fmt_ns(b)}" if b == b else "bound unknown"
        return f"{op} #{seq}: arrivals {fmt_ns(spread)} apart, order within clock error ({why}): no known last rank"
    text = f"{op} #{seq}: rank {last} last, {fmt_ns(spread)} after the first"
    return text if held_by == last else f"{text} (it had waited for rank {held_by} just before)"


def collective_names(job: JobReport) -> list[str]:
    """The names of the collectives' events on every rank (drawn in one colour)."""
    names: set[str] = set()
    for res in job.results.values():
        c = res.collectives
        if c is not None and len(c):
            names.update(str(n) for n in np.unique(np.asarray(column(c, "name"), object).astype(str)))
    return sorted(names)


def job_parts(job: JobReport, load: Callable[[int], Trace], loaded: Iterable[tuple[int, Trace]] = (),
              window: WindowArg = None) -> tuple[Iterable[Part], list[dict[str, Any]]]:
    """(the ranks as timeline parts on the aligned clock, the straggler marks);
    ``load(rank)`` reads a rank, ``loaded`` gives ranks already read. A job of at most
    ``MAX_CRITICAL_PATH_EVENTS`` events is read whole (its ranks' critical path is joined);
    a bigger one's parts are read one rank at a time as the timeline takes them, each
    let go once drawn (the timeline keeps its columns, not the ranks' traces). The paths
    are of the steps ``window`` selects on each rank (the summary's window, as
    ``polyprof critical-path``; None: every step); each rank's view of it is made for its
    path and let go, not held beside the rank."""
    have = dict(loaded)
    off = offsets(job)
    events: Any = column(job.tables["rank_overview"], "events") if "rank_overview" in job.tables else []
    if sum(int(e) for e in events if e == e) <= MAX_CRITICAL_PATH_EVENTS:
        parts = list(_read(job.ranks, have, load, off, window))
        return _with_job_path(parts, job.ranks, window), straggler_marks(job, off)
    return _OneByOne(job.ranks, have, load, off, window), straggler_marks(job, off)


def _read(ranks: list[int], have: dict[int, Trace], load: Callable[[int], Trace],
          off: dict[int, int], window: WindowArg = None) -> Iterator[Part]:
    with TaskBar(len(ranks), "read ranks for the timeline") as bar:
        for r in ranks:
            trace = have[r] if r in have else load(r)
            yield Part(f"rank {r}", trace, off.get(r, 0), window=window)
            del trace
            bar.advance()


class _OneByOne:
    """A job's ranks as timeline parts, each read as it is taken (iterable more than once:
    each time reads the ranks again)."""

    def __init__(self, ranks: list[int], have: dict[int, Trace], load: Callable[[int], Trace],
                 off: dict[int, int], window: WindowArg = None) -> None:
        self.ranks, self.have, self.load, self.off, self.window = ranks, have, load, off, window

    def __len__(self) -> int:
        return len(self.ranks)

    def __iter__(self) -> Iterator[Part]:
        return _read(self.ranks, self.have, self.load, self.off, self.window)


def _with_job_path(parts: list[Part], ranks: list[int], window: WindowArg = None) -> list[Part]:
    """The parts with the job's critical path (the ranks joined at their collectives,
    ranks/critical_path_track.py) as a track of the first, and no rank's own path, for
    jobs of at most ``MAX_CRITICAL_PATH_EVENTS`` events; else as they are (each rank's own
    path, where its size allows). The path is ``polyprof critical-path``'s: of the steps
    ``window`` selects on each rank, the clocks aligned from those views (the views are
    let go once the track is made)."""
    if not parts or sum(p.trace.n_events for p in parts) > MAX_CRITICAL_PATH_EVENTS:
        return parts
    traces = {int(r): view(p.trace, window, keep=False) for r, p in zip(ranks, parts)}
    clocks = align(traces) if len(traces) > 1 else None  # as the command: one rank keeps its clock
    first = parts[0]._replace(trace=with_job_critical_path(parts[0].trace, traces, clocks))
    return [p._replace(critical_path=False) for p in [first] + parts[1:]]
