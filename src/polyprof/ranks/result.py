"""One rank's result: what a worker hands back after analysing the rank it loaded.

Small by construction: the rank's summary tables (not those with a row per event), its
findings and overview, its collectives (for the job's alignment and stragglers), its
clock anchor, and its row of the job's ``rank_overview``. The same for every kind of
rank source (trace files, a store, Traces in memory): the job report is made from these
alone. Tables are read through the Table API (``analyze.frames.column``), so they may be
:class:`~polyprof.analyze.table.Table` s or DataFrames.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..analyze.findings import Finding
from ..analyze.frames import column
from ..analyze.registry import Tables, analyses, per_event_tables
from ..analyze.window import AUTO, label, selection, view
from ..analyze.window_counting import inside
from ..derive.intervals import union_len
from ..errors import PolyprofError
from ..trace import metadata_keys as mkeys
from ..trace.core import Trace
from ..analyze.collectives import collective_table
from ..trace.sorting import median
from .align import WALL_IDENTITY

#: the columns of the job's ``rank_overview``: the first three from the job (rank, the
#: source's label, how its rank was found), the rest from :func:`overview_row`
OVERVIEW_COLUMNS = ["rank", "file", "rank_from", "events", "steps", "step_mean_ns", "step_median_ns",
                    "step_max_ns", "compute_pct", "non_compute_pct", "idle_pct", "communication_ns",
                    "communication_pct", "collectives", "transfers"]


class RankResult(NamedTuple):
    """What one rank's worker hands back (tables, not events)."""

    tables: dict[str, Any]
    findings: list[Finding]
    overview: dict[str, Any]
    collectives: Any  # ranks.collectives.collective_table, with ``in_window``
    anchor: dict[str, Any] | None
    session_clock: bool  # its times are its session's own clock, not the wall clock (anchor_of)
    overview_row: tuple  # this rank's numbers in the job's rank_overview (OVERVIEW_COLUMNS[3:])
    #: what its trace says of the job's ranks (:func:`stated_job`; kept out of the overview,
    #: which is the rank's own summary's)
    stated_job: dict[str, Any] | None = None


def rank_summary(trace: Trace, tables: tuple[str, ...] | None = None, window: Any = AUTO) -> RankResult:
    """Every analysis of one rank over the steps ``window`` selects, as Tables (runs in
    the worker that loaded it), but those :func:`summaries_only` leaves out; with
    ``tables`` (names of ``analyze.registry.analyses()``: polyprof's and other packages')
    only those, and no findings. The
    collectives are all of the rank's (alignment uses every one), marked ``in_window``
    for the ones the window holds (stragglers and statistics)."""
    from ..report.tables import Report, build  # in the worker that runs a rank, not the parent that gathers

    if tables is None:
        rep = build(trace, window)
        rep.tables = summaries_only(rep.tables)
    else:
        known = [a.name for a in analyses()]
        unknown = sorted(set(tables) - set(known))
        if unknown:
            raise PolyprofError(f"unknown analyses {unknown}; known: {known}")
        v = view(trace, window)
        t = Tables(v)
        rep = Report(v, {n: t[n] for n in tables}, [], {"events": trace.n_events, "window": label(v, window)})
    coll = rank_collectives(trace, rep.trace)
    return RankResult(rep.tables, rep.findings, rep.overview, coll, *anchor_of(trace),
                      overview_row(rep.tables, coll, trace.n_events, rep.overview.get("analysed_span_ns", 0),
                                   rep.overview.get("analysed_span_start_ns"), rep.overview.get("recorded_in_span_ns")),
                      stated_job(trace.metadata))


def stated_job(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """What a trace's ``metadata`` says of its job's ranks (Kineto's ``distributedInfo``): its
    ``world_size``, else the global ranks of the process groups it lists (``pg_config``:
    within the world, so not kept beside it: a rank's list would grow with the job); None
    where it says neither. The job compares them with the ranks found
    (``ranks/report.py``: a rank file not given)."""
    info = metadata.get(mkeys.DISTRIBUTED_INFO)
    if not isinstance(info, dict):  # (torch's recordings keep it under the torch key: process_groups.py)
        torch_md = metadata.get(mkeys.TORCH)
        info = torch_md.get(mkeys.DISTRIBUTED_INFO) if isinstance(torch_md, dict) else None
    if not isinstance(info, dict):
        return None
    out: dict[str, Any] = {}
    world = info.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world > 0:
        out["world_size"] = world
    groups = info.get("pg_config") if not out else None
    lists = [g["ranks"] for g in (groups if isinstance(groups, list) else [])
             if isinstance(g, dict) and isinstance(g.get("ranks"), list)]
    members = sorted({r for rs in lists for r in rs if isinstance(r, int) and not isinstance(r, bool) and r >= 0})
    if members:
        out["group_ranks"] = members
    return out or None


def summaries_only(tables: dict[str, Any]) -> dict[str, Any]:
    """What a job gathers of a rank's tables: all but those with a row per event
    (``analyze.registry.per_event_tables()``: the launch table, most of a summary's rows,
    and other packages' tables that say ``per_event``), which stay with the rank."""
    left = per_event_tables()
    return {name: t for name, t in tables.items() if name not in left}


def rank_collectives(trace: Trace, windowed: Trace) -> Any:
    """:func:`collective_table` of the whole rank with ``in_window``: the collective
    began inside the selected steps (every one when the whole trace is analysed; not
    between a schedule's stretches: ``window_counting.inside``, as ``collectives.windowed``)."""
    coll = collective_table(windowed)  # the same rows as the whole trace's, made once with the summary's
    sel = selection(windowed)
    start = column(coll, "start_ns")
    if sel is None:
        return coll.with_columns(in_window=np.ones(len(coll), bool))
    return coll.with_columns(in_window=inside(sel, np.asarray(start, np.int64)))


def anchor_of(trace: Trace) -> tuple[dict[str, Any] | None, bool]:
    """The rank's wall anchor (if any) and whether its times are a clock of its own (its
    session's: polyprof's monotonic clock, Nsight's time since the session start, a
    Perfetto trace's clock...) rather than the wall clock itself (Kineto's, clock
    ``wall``). Anchors are where the clock service keeps them, on the sources
    (``Source.clock["wall_anchor"]``, docs/clock-sync.md), whichever reader set them
    (Perfetto's clock snapshots, Nsight's session start, XSpace's profile start, a live
    session's); the trace's metadata ``wall_anchor`` where no source has one. Of several,
    the tightest (least ``uncertainty_ns``). A wall-clock trace without one has the
    identity (``ranks/align.WALL_IDENTITY``); a trace on its own clock without one has
    none. The anchor names the rank's host (``host``): its source's, else the one host
    all its sources name; and, where every source's times are one machine's monotonic
    clock, that clock (``clock_domain``: ``collect/clock.py``)."""
    own = trace.metadata.get(mkeys.CLOCK_NAME) != "wall"
    found: list[tuple[dict[str, Any], str]] = [(s.clock[mkeys.SOURCE_WALL_ANCHOR], s.host) for s in trace.sources
                                               if _is_anchor(s.clock.get(mkeys.SOURCE_WALL_ANCHOR))]
    if not found and _is_anchor(trace.metadata.get(mkeys.WALL_ANCHOR)):
        found = [(trace.metadata[mkeys.WALL_ANCHOR], "")]
    if not found and not own:
        found = [(WALL_IDENTITY, "")]
    if not found:
        return None, own
    anchor, host = min(found, key=lambda ah: float(ah[0].get("uncertainty_ns") or 0))
    hosts = {s.host for s in trace.sources if s.host}
    host = host or (hosts.pop() if len(hosts) == 1 else "")
    domains = {s.clock.get(mkeys.SOURCE_CLOCK_DOMAIN) for s in trace.sources}
    domain = domains.pop() if own and len(domains) == 1 else None
    return {**anchor, **({"host": host} if host else {}),
            **({"clock_domain": domain} if isinstance(domain, str) and domain else {})}, own


def _is_anchor(a: Any) -> bool:
    return isinstance(a, dict) and "wall_ns" in a and "mono_ns" in a


def overview_row(tables: dict[str, Any], collectives: Any, events: int, span_ns: int = 0,
                 start_ns: int | None = None, recorded_ns: int | None = None) -> tuple:
    """One rank's events, steps, breakdown and communication for the job's
    ``rank_overview`` (computed where the rank is analysed). Communication is the time
    covered by communication kernels on its devices, else (a job on CPUs: gloo, MPI) by
    its CPU backends' collectives and transfers in the window, from post to completion,
    within the analysed span (``start_ns``, ``span_ns``): time a thread waited in
    ``gloo:recv`` is communication. Its share is of the span's recorded time
    (``recorded_ns``, where the span holds unrecorded time between profiler cycles), else
    of the span."""
    st = tables.get("step_stats")
    if st is not None and len(st):
        _, first = np.unique(column(st, "step"), return_index=True)  # a step's first row (host time per step)
        steps = column(st, "host_ns")[np.sort(first)].astype(np.float64)
    else:
        steps = np.zeros(0)
    tb = tables.get("temporal_breakdown")
    whole = column(tb, "track_id") == -1 if tb is not None and len(tb) else None
    if whole is not None and whole.any():
        span = column(tb, "span_ns")[whole].sum()
        pct = [float(column(tb, c)[whole].sum() / span * 100) if span else float("nan")
               for c in ("compute_ns", "non_compute_ns", "idle_ns")]
    else:
        pct = [float("nan")] * 3
    ov = tables.get("comm_comp_overlap")
    comm = int(column(ov, "communication_ns").sum()) if ov is not None and len(ov) else 0
    inside = column(collectives, "in_window").astype(bool)
    p2p = column(collectives, "p2p").astype(bool) if len(collectives) else inside
    if not comm and len(collectives):
        host = inside & column(collectives, "host").astype(bool)
        s, e = column(collectives, "start_ns")[host].astype(np.int64), column(collectives, "end_ns")[host].astype(np.int64)
        if start_ns is not None and span_ns:  # a collective begun in the window may end after it
            s, e = np.maximum(s, start_ns), np.minimum(e, start_ns + span_ns)
        comm = union_len(s, e)
    base = recorded_ns or span_ns
    comm_pct = 100.0 * comm / base if base else float("nan")
    return (int(events), len(steps), float(steps.mean()) if len(steps) else float("nan"),
            median(steps) if len(steps) else float("nan"),
            float(steps.max()) if len(steps) else float("nan"), *pct, comm, comm_pct, int((inside & ~p2p).sum()),
            int((inside & p2p).sum()))
